"""The run configuration: one dataclass of hyperparameters (the paper's values as defaults), presets, config files.

Precedence, lowest first: dataclass defaults (the paper, PAPER.md section 2) < ``--preset`` < ``--config FILE`` <
command-line flags. The command line is generated from the fields here (see ``erl_agents.train``), so a new field
is a new flag with no second edit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from erl_agents.accelerator import DTYPES, PRECISIONS, precision_conflict
from erl_agents.presets import ENV_PRESETS, PRESETS
from erl_agents.tracking import report_to_problem

__all__ = ["TrainConfig", "PRESETS", "ENV_PRESETS", "ALGOS", "RULES", "JOINT_RULES", "Rule", "validate_fields",
           "build_config", "load_config_file", "config_to_dict"]

ALGOS = ("rlvr", "erl")


@dataclass
class TrainConfig:
    # --- what to train ---
    env: str = "ERL-FrozenLake-v0"  # Gymnasium id of a text env (any env following erl_envs.protocol)
    env_kwargs: dict = field(default_factory=dict)  # keyword arguments for gym.make (e.g. {"size": [2, 4]})
    eval_env_kwargs: dict = field(default_factory=dict)  # merged over env_kwargs for held-out envs only (other data)
    algo: str = "erl"  # rlvr: n first attempts per task; erl: attempt -> reflection -> retry -> distillation
    model: str = "tiny"  # HF model name (local cache) or directory; "tiny" builds a small Llama in code
    preset: str = ""  # named overrides applied before the config file and flags
    seed: int = 0  # seeds model init, task sampling, generation; same seed on CPU -> identical metrics
    output: str = "runs/erl"  # run directory: config, metrics.jsonl, checkpoints, curves.png
    resume: bool = False  # continue from the latest checkpoint in --output
    resume_changes: str = ""  # with --resume: fields allowed to differ from the run's config.json (comma-separated; all)
    overwrite: bool = False  # without --resume: replace the run already in --output (its files are deleted), not refuse
    # --- the loop ---
    steps: int = 200  # training steps (one rollout batch and one update each); 0 with epochs: until the epochs end
    tasks_per_step: int = 64  # distinct task instances per step (paper: batch 64)
    epochs: int = 0  # passes over the training task list, each task once per pass in seeded order; 0: fresh draws
    epoch_tasks: int = 10000  # with epochs, the list's size where tasks are generator seeds (reference lists: 10,000)
    n_rlvr: int = 10  # first attempts per task for rlvr (paper: 10)
    n_erl: int = 4  # first attempts per task for erl (paper: 4; each may add a reflection and a retry)
    # --- ERL ---
    reflector: str = "policy"  # who reflects: policy, rule (RuleReflector's rulebook), plan (its solution only), brief
    # (the rulebook in four lines: symbols, moves, the mistake, a route); the help shows the line above only
    reflect_prefill: bool = False  # the policy's reflection starts inside <prompt> (given) and stops at </prompt>
    reflection_warmup: int = 0  # steps training the reflection role on a teacher's rulebooks before ERL starts
    warmup_reflector: str = "brief"  # the warm-up's teacher: "rule", "plan" or "brief" (RuleReflector details)
    warmup_lr: float = 0.0  # learning rate of the warm-up's updates; 0 = lr
    no_memory: bool = False  # ablation: reflections are used for their episode but never stored
    no_reflection: bool = False  # ablation: the retry sees the raw trace and a generic note, no reflection
    reflection_instructions: str = ""  # the policy's reflect-phase system prompt; "" = erl_envs.reflection.prompts' for the env
    prompts: str = ""  # YAML/JSON file of prompt templates (erl_envs/data/prompts.yaml's names): the envs' wording
    gate_threshold: float = 1.0  # a first attempt with r1 below this is reflected on and retried (tau)
    memory_threshold: float = 1.0  # a reflection is stored when its retry scores r2 >= this
    memory: str = "single"  # single: one slot for the run (the paper's text); pool: memory_slots slots (its code)
    memory_slots: int = 1024  # slots of the pool memory; each episode takes the next slot in turn (paper code: 1,024)
    memory_rule: str = "project"  # <prompt> block, reminder and memory writes: project, or paper (the reference's)
    trace_rule: str = "paper"  # paper prompt set: an unreadable reply and the end as the reference's trace, or project
    distill: str = "imitation"  # consolidation: imitation (retry re-scored under the initial prompt) or reverse_kl
    distill_coef: float = 1.0  # weight of the reverse_kl consolidation term
    rows: str = "erl"  # erl: rows as the paper describes them; paper: the reference code's batch (docs/fidelity.md)
    # --- sampling ---
    temperature: float = 0.7  # training rollouts (paper: 0.7)
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    max_new_tokens: int = 512  # per turn
    reflect_temperature: float = 0.5  # reflections (paper: 0.5, top-p 0.9)
    reflect_top_p: float = 0.9
    reflect_max_new_tokens: int = 1024
    response_budget: int = 0  # tokens an attempt may add after its opening (replies, env turns); 0 = off
    constrained_actions: bool = False  # restrict replies to the env's valid action strings when it declares them
    max_seq_len: int = 8192  # a conversation reaching this stops generating; its remaining turns are empty replies
    kv_reuse: bool = True  # keep each conversation's KV cache across turns (same samples; off re-reads every turn)
    # --- the generation engine (erl_agents.engines) ---
    engine: str = "auto"  # hf (transformers generate), vllm (colocated vllm.LLM), auto: vllm where installed, not tiny
    vllm_gpu_memory_utilization: float = 0.0  # share of GPU memory vLLM may take; 0 = vLLM's default (0.9)
    vllm_tensor_parallel_size: int = 1  # GPUs each rank's engine shards the model over
    vllm_kv_cache_gb: float = 0.0  # vLLM's KV cache; 0 = from the memory share on a GPU, 2 GiB on the CPU backend
    vllm_sleep_mode: bool = True  # on GPUs: vLLM's weights and KV cache leave the GPU during the update
    vllm_dtype: str = "auto"  # the engine's weights: auto (the run's compute dtype), float32, bfloat16, float16
    logprob_check: bool = True  # log rollout/logprob_abs_diff: |engine - trainer| log-probs of the sampled tokens
    # --- the update ---
    lr: float = 1e-6  # AdamW learning rate (paper: 1e-6)
    weight_decay: float = 0.01
    adam_beta2: float = 0.999
    warmup_steps: int = 0  # linear warm-up of the learning rate
    lr_schedule: str = "constant"  # after warm-up: constant (paper) or cosine (down to a tenth of lr at the last step)
    clip_low: float = 0.2  # PPO ratio clip below 1 (paper: 0.2)
    clip_high: float = 0.28  # PPO ratio clip above 1 (paper: 0.28, "clip-higher")
    clip_ratio_c: float = 3.0  # dual-clip: a negative advantage's loss is capped at -A * c (verl, paper: 3.0); 0 = off
    kl_coef: float = 0.001  # k3 KL to the frozen initial policy (paper: 0.001); 0 keeps no reference model
    logprob_temperature: str = "sampled"  # update scores each row at: sampled (its own temperature), rollout (verl)
    old_logprobs: str = "recompute"  # PPO's old policy: recompute (a pass, verl) or rollout (the engine's log-probs)
    entropy_coef: float = 0.0  # entropy bonus (paper: 0)
    advantage: str = "grpo"  # grpo: (r - mean) / (std + eps); dr_grpo: r - mean; raft: max(r, 0)
    single_member: str = "reward"  # a group of one gets its raw reward (verl, the paper's code) or "zero"
    loss_agg: str = "seq-mean-token-sum"  # token-mean, seq-mean-token-mean, seq-mean-token-sum (paper)
    ppo_epochs: int = 1  # passes over each rollout batch (paper: 1)
    minibatches: int = 1  # optimizer steps per epoch; >1 makes later steps off-policy, where clipping matters
    ppo_mini_batch_size: int = 0  # tasks per optimizer step, rows in rollout order (verl; paper 64); 0 = minibatches
    micro_batch_size: int = 8  # sequences per forward/backward; gradients accumulate, the result does not depend on it
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = False
    # --- evaluation (first attempt only, initial prompt: the paper's protocol) ---
    eval_every: int = 5  # steps between evaluations (paper: 5); 0 disables
    eval_at_start: bool = True  # also evaluate the untrained policy (step 0); arms that share it may skip it
    eval_tasks: int = 100  # held-out instances (seeded split) when the paper's test set is not used
    eval_samples: int = 4  # samples per instance (paper: 4)
    eval_temperature: float = 0.7
    eval_top_p: float = 0.8
    eval_top_k: int = 20
    eval_set: str = "auto"  # auto: the paper's test instances of the trained sizes, else seeded; paper; seeded
    allow_eval_overlap: bool = False  # let held-out evaluation ask training questions (HotpotQA); default: refuse
    # --- bookkeeping ---
    checkpoint_every: int = 10  # steps between checkpoints; 0 saves only at the end
    keep_checkpoints: int = 2
    save_final_model: bool = True  # save_pretrained the trained policy into OUTPUT/final_model
    device: str = "auto"  # auto: cuda when available, else cpu
    dtype: str = "auto"  # trained weights: auto, float32; bfloat16, float16 (fp32 + autocast); bfloat16-lossy-storage
    # (weights and moments in bf16); auto and float32 leave autocast to --precision
    threads: int = 0  # torch CPU threads; 0 = all cores
    progress: bool = True  # tqdm bar
    report_to: str = "none"  # experiment trackers besides metrics.jsonl: none, or tensorboard, trackio, wandb (comma-separated)
    time_limit_min: float = 0.0  # stop (checkpoint, final eval) after this many minutes of training (eval excluded); 0 = off
    # --- faults and budgets ---
    max_bad_steps: int = 5  # stop the run after this many consecutive steps with a non-finite loss/gradient; 0 = never
    mask_truncated: bool = False  # replies cut off by max_new_tokens are kept in the context but get no gradient
    episode_time_limit: float = 0.0  # seconds a training episode may run before it ends with reward 0; 0 = off
    episode_token_limit: int = 0  # model tokens a training episode may generate before it ends with reward 0; 0 = off
    max_sampled_tokens: int = 0  # stop once training rollouts sampled this many tokens (resume included); 0 = off
    # --- scaling out: precision, memory, data parallel (torchrun), LoRA ---
    precision: str = "auto"  # autocast if dtype leaves it open: auto (bf16 on a capable GPU), bf16, fp16, fp32
    max_tokens_per_micro_batch: int = 0  # cap on padded tokens (rows x longest) per forward/backward; 0 = no cap
    backend: str = "auto"  # torch.distributed backend under torchrun: auto (nccl on cuda, gloo on cpu), gloo, nccl
    sharding: str = "ddp"  # under torchrun: ddp (every rank holds the whole state) or fsdp (FSDP2: 1/W of it each)
    offload: bool = False  # with sharding fsdp: keep the weight shards, gradients and AdamW state in CPU memory
    lora_r: int = 0  # LoRA rank (needs the lora extra); 0 trains all weights
    lora_alpha: float = 32.0  # LoRA scaling numerator (the update is scaled by alpha / r)
    lora_targets: str = "all-linear"  # modules that get adapters: all-linear or comma-separated names (q_proj,v_proj)
    # --- the tiny in-code model (model = "tiny") ---
    tiny_hidden: int = 128
    tiny_layers: int = 4
    tiny_heads: int = 4
    tiny_intermediate: int = 512
    tiny_vocab: int = 1024
    tiny_grid_tokens: str = "cell"  # a grid observation's unit that gets one token: cell, or row (small boards)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Every field against its rule in ``RULES``, then the rules that tie fields together (``JOINT_RULES``)."""
        validate_fields(self)

    @property
    def group_size(self) -> int:
        return self.n_erl if self.algo == "erl" else self.n_rlvr



# ----------------------------------------------------------------------------------------------------------------
# What each field accepts: one rule per field, checked by ``TrainConfig.validate`` before anything runs. A new field
# gets one line in RULES (a test fails for a field without one). ``resume`` says whether ``--resume`` may change the
# field: "fixed" fields define what the run is (its env, algorithm, model, data, seed, batch shapes, update), so a
# changed value is refused unless ``--resume-changes`` names it; "free" ones (bookkeeping, evaluation cadence,
# threads, limits) change freely, and every change is recorded in config.json's history.


@dataclass(frozen=True)
class Rule:
    """A field's type, the values it allows (``check``, described by ``allowed``) and its resume class."""

    kind: type  # int, float, str, bool or dict; an int is accepted where a float is expected, never the reverse
    allowed: str = ""  # the allowed values in words, for the error message ("at least 1", "in (0, 1]")
    check: Callable[[Any], bool] = lambda value: True
    # "fixed": --resume refuses a change unless --resume-changes names it; "free": it may change; "never": the
    # checkpoint's weights have this shape, so no resume may change it
    resume: str = "fixed"


def _at_least(low: float, high: float, kind: type = int, resume: str = "fixed") -> Rule:
    return Rule(kind, f"at least {low} and at most {high:,}", lambda v: low <= v <= high, resume)


def _off_or_more(high: float | None = None, kind: type = int, resume: str = "fixed") -> Rule:
    """A non-negative number (0: off), at most ``high`` when given (every integer that sizes work has a bound)."""
    if high is None:
        return Rule(kind, "non-negative (0 turns it off)", lambda v: v >= 0, resume)
    return Rule(kind, f"non-negative (0 turns it off) and at most {high:,}", lambda v: 0 <= v <= high, resume)


def _positive(kind: type = float, resume: str = "fixed") -> Rule:
    return Rule(kind, "positive", lambda v: v > 0, resume)


def _fraction(low_open: bool, high_open: bool, resume: str = "fixed") -> Rule:
    """A number in the unit interval, each end included or not."""
    words = f"in {'(' if low_open else '['}0, 1{')' if high_open else ']'}"
    return Rule(float, words, lambda v: (v > 0 if low_open else v >= 0) and (v < 1 if high_open else v <= 1), resume)


def _one_of(*choices: str, resume: str = "fixed") -> Rule:
    return Rule(str, f"one of {list(choices)}", lambda v: v in choices, resume)


def _text(resume: str = "fixed") -> Rule:
    return Rule(str, "a non-empty string", lambda v: bool(v.strip()), resume)


_ANY_REAL = Rule(float)
_FLAG = Rule(bool)
_FREE_FLAG = Rule(bool, resume="free")
# Upper bounds of the integer fields: far beyond any real run, low enough that no value allocates without end.
_MANY_STEPS = 10_000_000
_MANY_TASKS = 65_536
_MANY_TOKENS = 1 << 22
MAX_MEMORY_SLOTS = 1 << 20  # = erl_envs.reflection.memory.MAX_SLOTS
MAX_EPISODES_PER_STEP = 1 << 20  # tasks_per_step x group size: one env each

RULES: dict[str, Rule] = {
    "env": _text(),
    "env_kwargs": Rule(dict),
    "eval_env_kwargs": Rule(dict, resume="free"),
    "algo": _one_of(*ALGOS),
    "model": _text(resume="never"),
    "preset": Rule(str, "empty or a preset name", lambda v: v == "" or v in PRESETS, resume="free"),
    "seed": Rule(int, f"in [0, {2**32 - 1}]", lambda v: 0 <= v < 2**32),
    "output": _text(resume="free"),
    "resume": _FREE_FLAG,
    "overwrite": _FREE_FLAG,
    "max_sampled_tokens": _off_or_more(10**15, resume="free"),
    "reflection_instructions": Rule(str),
    "prompts": Rule(str),
    "allow_eval_overlap": _FREE_FLAG,
    "resume_changes": Rule(str, "empty, 'all' or comma-separated field names",
                           lambda v: all(name.strip() in RULES or name.strip() == "all" for name in v.split(",") if
                                         name.strip()), resume="free"),
    "steps": Rule(int, f"non-negative (0: every epoch of epochs) and at most {_MANY_STEPS:,}",
                  lambda v: 0 <= v <= _MANY_STEPS, resume="free"),
    "tasks_per_step": _at_least(1, _MANY_TASKS),
    "epochs": _off_or_more(1_000_000),
    "epoch_tasks": _at_least(1, 1 << 30),
    "n_rlvr": _at_least(1, 1024),
    "n_erl": _at_least(1, 1024),
    "reflector": _one_of("policy", "rule", "plan", "brief"),
    "reflect_prefill": _FLAG,
    "reflection_warmup": _off_or_more(_MANY_STEPS),
    "warmup_reflector": _one_of("rule", "plan", "brief"),
    "warmup_lr": _off_or_more(10.0, float),
    "no_memory": _FLAG,
    "memory": _one_of("single", "pool"),
    "memory_slots": _at_least(1, MAX_MEMORY_SLOTS),
    "memory_rule": _one_of("project", "paper"),
    "trace_rule": _one_of("paper", "project"),
    "no_reflection": _FLAG,
    "gate_threshold": _ANY_REAL,
    "memory_threshold": _ANY_REAL,
    "distill": _one_of("imitation", "reverse_kl"),
    "distill_coef": _off_or_more(kind=float),
    "rows": _one_of("erl", "paper"),
    "temperature": _positive(),
    "top_p": _fraction(low_open=True, high_open=False),
    "top_k": _off_or_more(1 << 24),
    "max_new_tokens": _at_least(1, _MANY_TOKENS),
    "reflect_temperature": _positive(),
    "reflect_top_p": _fraction(low_open=True, high_open=False),
    "reflect_max_new_tokens": _at_least(1, _MANY_TOKENS),
    "response_budget": _off_or_more(_MANY_TOKENS),
    "constrained_actions": _FLAG,
    "kv_reuse": _FREE_FLAG,  # the same samples either way: a speed switch
    "engine": _one_of("auto", "hf", "vllm", resume="free"),
    "vllm_gpu_memory_utilization": Rule(float, "0 (vLLM's default) or a share in (0, 1]", lambda v: 0 <= v <= 1,
                                        resume="free"),
    "vllm_tensor_parallel_size": _at_least(1, 1024, resume="free"),
    "vllm_kv_cache_gb": _off_or_more(kind=float, resume="free"),
    "vllm_sleep_mode": _FREE_FLAG,
    "vllm_dtype": _one_of("auto", "float32", "bfloat16", "float16", resume="free"),
    "logprob_check": _FREE_FLAG,
    "max_seq_len": _at_least(2, _MANY_TOKENS),
    "lr": _positive(),
    "weight_decay": _off_or_more(kind=float),
    "adam_beta2": _fraction(low_open=False, high_open=True),
    "warmup_steps": _off_or_more(_MANY_STEPS),
    "clip_low": _fraction(low_open=False, high_open=True),
    "clip_high": _off_or_more(kind=float),
    "kl_coef": _off_or_more(kind=float),
    "logprob_temperature": _one_of("sampled", "rollout"),
    "old_logprobs": _one_of("recompute", "rollout"),
    "entropy_coef": _off_or_more(kind=float),
    "advantage": _one_of("grpo", "dr_grpo", "raft"),
    "single_member": _one_of("reward", "zero"),
    "lr_schedule": _one_of("constant", "cosine"),
    "loss_agg": _one_of("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    "ppo_epochs": _at_least(1, 1000),
    "minibatches": _at_least(1, _MANY_TASKS),
    "ppo_mini_batch_size": Rule(int, f"non-negative (0 uses minibatches) and at most {_MANY_TASKS:,}",
                                lambda v: 0 <= v <= _MANY_TASKS),
    "clip_ratio_c": Rule(float, "0 (no dual-clip) or above 1", lambda v: v == 0 or v > 1),
    # Gradients accumulate: the result does not depend on the micro-batch size.
    "micro_batch_size": _at_least(1, _MANY_TASKS, resume="free"),
    "max_grad_norm": _positive(),
    "gradient_checkpointing": _FREE_FLAG,
    "eval_every": _off_or_more(_MANY_STEPS, resume="free"),
    "eval_at_start": _FREE_FLAG,
    "eval_tasks": _at_least(1, 1_000_000, resume="free"),
    "eval_samples": _at_least(1, 1024, resume="free"),
    "eval_temperature": _positive(resume="free"),
    "eval_top_p": _fraction(low_open=True, high_open=False, resume="free"),
    "eval_top_k": _off_or_more(1 << 24, resume="free"),
    "eval_set": _one_of("auto", "paper", "seeded", resume="free"),
    "checkpoint_every": _off_or_more(_MANY_STEPS, resume="free"),
    "keep_checkpoints": _off_or_more(1_000_000, resume="free"),
    "save_final_model": _FREE_FLAG,
    "device": _one_of("auto", "cpu", "cuda", resume="free"),
    "dtype": _one_of(*DTYPES),
    "threads": _off_or_more(4096, resume="free"),
    "progress": _FREE_FLAG,
    "report_to": Rule(str, "none, or tensorboard, trackio and/or wandb joined by commas",
                      lambda v: report_to_problem(v) is None, resume="free"),
    "time_limit_min": _off_or_more(kind=float, resume="free"),
    "max_bad_steps": _off_or_more(_MANY_STEPS, resume="free"),
    "mask_truncated": _FLAG,
    "episode_time_limit": _off_or_more(kind=float),
    "episode_token_limit": _off_or_more(10**15),
    "precision": _one_of(*PRECISIONS),
    "max_tokens_per_micro_batch": _off_or_more(1 << 30, resume="free"),
    "backend": _one_of("auto", "gloo", "nccl", resume="free"),
    "sharding": _one_of("ddp", "fsdp", resume="free"),
    "offload": _FREE_FLAG,
    "lora_r": _off_or_more(65_536, resume="never"),
    "lora_alpha": _positive(),
    "lora_targets": _text(resume="never"),
    "tiny_hidden": _at_least(1, 65_536, resume="never"),
    "tiny_layers": _at_least(1, 1024, resume="never"),
    "tiny_heads": _at_least(1, 1024, resume="never"),
    "tiny_intermediate": _at_least(1, 1 << 18, resume="never"),
    "tiny_vocab": _at_least(1, 1 << 20, resume="never"),
    "tiny_grid_tokens": _one_of("cell", "row", resume="never"),
}

# Rules that tie fields together: (the fields, the check on the config, what is allowed).
JOINT_RULES: list[tuple[tuple[str, ...], Callable[[Any], bool], str]] = [
    (("steps", "epochs"), lambda c: c.steps > 0 or c.epochs > 0,
     "a length: steps at least 1, or steps 0 with epochs at least 1 (the run then lasts the epochs)"),
    (("dtype", "precision"), lambda c: precision_conflict(c.dtype, c.precision) is None,
     "one compute dtype (dtype bfloat16 goes with precision auto or bf16, float16 with auto or fp16)"),
    (("rows", "distill"), lambda c: c.rows != "paper" or c.distill == "imitation",
     "imitation consolidation with paper rows (the reference has no reverse_kl)"),
    (("ppo_mini_batch_size", "minibatches"), lambda c: not (c.ppo_mini_batch_size and c.minibatches > 1),
     "only one of them setting the update schedule (ppo_mini_batch_size > 0 needs minibatches = 1)"),
    (("tiny_hidden", "tiny_heads"), lambda c: c.tiny_hidden % c.tiny_heads == 0,
     "tiny_hidden divisible by tiny_heads"),
    (("tiny_hidden", "tiny_heads"), lambda c: c.tiny_hidden // max(c.tiny_heads, 1) % 2 == 0,
     "an even head size tiny_hidden / tiny_heads (rotary embeddings rotate pairs)"),
    (("tasks_per_step", "n_rlvr", "n_erl"), lambda c: c.tasks_per_step * c.group_size <= MAX_EPISODES_PER_STEP,
     f"at most {MAX_EPISODES_PER_STEP:,} episodes a step (tasks_per_step times the group size of the algorithm)"),
    (("sharding", "offload"), lambda c: c.sharding == "fsdp" or not c.offload,
     "offload only with sharding fsdp (it moves the shards FSDP makes to the CPU)"),
    (("resume", "overwrite"), lambda c: not (c.resume and c.overwrite),
     "at most one of them: --resume continues the run in --output, --overwrite replaces it"),
]


def _type_ok(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


_TYPE_WORDS = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false", dict: "a dict"}


def validate_fields(config: Any) -> None:
    """Raise ``TypeError``/``ValueError`` naming the first field whose value its rule refuses, the value, and what is
    allowed (an int where a float is expected is stored as a float)."""
    for field_ in dataclasses.fields(config):
        name, value = field_.name, getattr(config, field_.name)
        rule = RULES.get(name)
        if rule is None:
            raise ValueError(f"the config field {name!r} has no rule in erl_agents.config.RULES")
        if not _type_ok(value, rule.kind):
            shown = type(value).__name__ if rule.kind is dict else repr(value)
            raise TypeError(f"{name} must be {_TYPE_WORDS[rule.kind]}, got {shown}")
        if not rule.check(value):
            raise ValueError(f"{name} must be {rule.allowed}, got {value!r}")
        if rule.kind is float and isinstance(value, int):
            setattr(config, name, float(value))
    for names, check, allowed in JOINT_RULES:
        if not check(config):
            shown = ", ".join(f"{n}={getattr(config, n)!r}" for n in names)
            raise ValueError(f"{' and '.join(names)} must give {allowed}, got {shown}")


def config_to_dict(config: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read overrides from a YAML or JSON file (a flat mapping of field names); a problem names the file and place."""
    from erl_envs.safe_parse import load_data_file

    path = Path(path)
    data = load_data_file(path, "config file", _MAX_CONFIG_BYTES)
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of field names to values, got {type(data).__name__}")
    return data


_MAX_CONFIG_BYTES = 1 << 20


def build_config(overrides: Mapping[str, Any] | None = None, file: str | Path | None = None,
                 flags: Mapping[str, Any] | None = None) -> TrainConfig:
    """Merge defaults < preset < file < flags into a validated TrainConfig; unknown keys raise ``ValueError``."""
    layers = [dict(overrides or {})]
    if file is not None:
        layers.append(load_config_file(file))
    layers.append(dict(flags or {}))
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    merged: dict[str, Any] = {}
    for layer in layers:
        unknown = sorted(set(layer) - names)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; see `erl-train --help` for the fields")
        merged.update(layer)
    preset = merged.get("preset", "")
    env = merged.get("env", TrainConfig.env)
    values: dict[str, Any] = {}
    if preset:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        values.update(PRESETS[preset])
        values.update(ENV_PRESETS.get((preset, env), {}))
    values.update(merged)
    return TrainConfig(**values)
