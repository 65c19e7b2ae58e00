"""The run configuration: one dataclass of hyperparameters (the paper's values as defaults), presets, config files.

Precedence, lowest first: dataclass defaults (the paper, PAPER.md section 2) < ``--preset`` < ``--config FILE`` <
command-line flags. The command line is generated from the fields here (see ``erl_agents.train``), so a new field
is a new flag with no second edit.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = ["TrainConfig", "PRESETS", "ENV_PRESETS", "ALGOS", "build_config", "load_config_file", "config_to_dict"]

ALGOS = ("rlvr", "erl")


@dataclass
class TrainConfig:
    # --- what to train ---
    env: str = "ERL-FrozenLake-v0"  # Gymnasium id of a text env (any env following erl_envs.protocol)
    env_kwargs: dict = field(default_factory=dict)  # keyword arguments for gym.make (e.g. {"size": [2, 4]})
    eval_env_kwargs: dict = field(default_factory=dict)  # merged over env_kwargs for held-out envs only (other data)
    algo: str = "erl"  # rlvr: n first attempts per task; erl: attempt -> reflection -> retry -> distillation
    model: str = "tiny"  # HF model name (local cache) or directory; "tiny" builds a small Llama in code
    preset: str = ""  # named overrides applied before the config file and flags (cpu-tiny, paper-qwen3-4b)
    seed: int = 0  # seeds model init, task sampling, generation; same seed on CPU -> identical metrics
    output: str = "runs/erl"  # run directory: config, metrics.jsonl, checkpoints, curves.png
    resume: bool = False  # continue from the latest checkpoint in --output
    # --- the loop ---
    steps: int = 200  # training steps (one rollout batch and one update each)
    tasks_per_step: int = 64  # distinct task instances per step (paper: batch 64)
    n_rlvr: int = 10  # first attempts per task for rlvr (paper: 10)
    n_erl: int = 4  # first attempts per task for erl (paper: 4; each may add a reflection and a retry)
    # --- ERL ---
    reflector: str = "policy"  # who reflects: the policy, "rule" (erl_envs RuleReflector) or "plan" (its solution only)
    no_memory: bool = False  # ablation: reflections are used for their episode but never stored
    no_reflection: bool = False  # ablation: the retry sees the raw trace and a generic note, no reflection
    reflection_instructions: str = ""  # the policy's reflect-phase system prompt; "" = erl_envs.prompts' for the env
    gate_threshold: float = 1.0  # a first attempt with r1 below this is reflected on and retried (tau)
    memory_threshold: float = 1.0  # a reflection is stored when its retry scores r2 >= this
    distill: str = "imitation"  # consolidation: imitation (retry re-scored under the initial prompt) or reverse_kl
    distill_coef: float = 1.0  # weight of the reverse_kl consolidation term
    # --- sampling ---
    temperature: float = 0.7  # training rollouts (paper: 0.7)
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    max_new_tokens: int = 512  # per turn
    reflect_temperature: float = 0.5  # reflections (paper: 0.5, top-p 0.9)
    reflect_top_p: float = 0.9
    reflect_max_new_tokens: int = 1024
    constrained_actions: bool = False  # restrict replies to the env's valid action strings when it declares them
    max_seq_len: int = 8192  # a conversation reaching this stops generating; its remaining turns are empty replies
    kv_reuse: bool = True  # keep each conversation's KV cache across turns (same samples; off re-reads every turn)
    # --- the update ---
    lr: float = 1e-6  # AdamW learning rate (paper: 1e-6)
    weight_decay: float = 0.01
    adam_beta2: float = 0.999
    warmup_steps: int = 0  # linear warm-up of the learning rate
    clip_low: float = 0.2  # PPO ratio clip below 1 (paper: 0.2)
    clip_high: float = 0.28  # PPO ratio clip above 1 (paper: 0.28, "clip-higher")
    kl_coef: float = 0.001  # k3 KL to the frozen initial policy (paper: 0.001); 0 keeps no reference model
    entropy_coef: float = 0.0  # entropy bonus (paper: 0)
    advantage: str = "grpo"  # grpo: (r - mean) / (std + eps); dr_grpo: r - mean; raft: max(r, 0)
    single_member: str = "reward"  # a group of one gets its raw reward (verl, the paper's code) or "zero"
    loss_agg: str = "seq-mean-token-sum"  # token-mean, seq-mean-token-mean, seq-mean-token-sum (paper)
    ppo_epochs: int = 1  # passes over each rollout batch (paper: 1)
    minibatches: int = 1  # optimizer steps per epoch; >1 makes later steps off-policy, where clipping matters
    micro_batch_size: int = 8  # sequences per forward/backward; gradients accumulate, the result does not depend on it
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = False
    # --- evaluation (first attempt only, initial prompt: the paper's protocol) ---
    eval_every: int = 5  # steps between evaluations (paper: 5); 0 disables
    eval_tasks: int = 100  # held-out instances (seeded split) when the paper's test set is not used
    eval_samples: int = 4  # samples per instance (paper: 4)
    eval_temperature: float = 0.7
    eval_top_p: float = 0.8
    eval_top_k: int = 20
    eval_set: str = "auto"  # auto: the paper's test set when ../shared has it and it fits env_kwargs; paper; seeded
    # --- bookkeeping ---
    checkpoint_every: int = 10  # steps between checkpoints; 0 saves only at the end
    keep_checkpoints: int = 2
    save_final_model: bool = True  # save_pretrained the trained policy into OUTPUT/final_model
    device: str = "auto"  # auto: cuda when available, else cpu
    dtype: str = "auto"  # model weights when loading a real model (auto, float32, bfloat16)
    threads: int = 0  # torch CPU threads; 0 = all cores
    progress: bool = True  # tqdm bar
    time_limit_min: float = 0.0  # stop (checkpoint, final eval) after this many minutes of training (eval excluded); 0 = off
    # --- faults and budgets ---
    max_bad_steps: int = 5  # stop the run after this many consecutive steps with a non-finite loss/gradient; 0 = never
    mask_truncated: bool = False  # replies cut off by max_new_tokens are kept in the context but get no gradient
    episode_time_limit: float = 0.0  # seconds a training episode may run before it ends with reward 0; 0 = off
    episode_token_limit: int = 0  # model tokens a training episode may generate before it ends with reward 0; 0 = off
    max_sampled_tokens: int = 0  # stop once training rollouts sampled this many tokens (resume included); 0 = off
    # --- scaling out: precision, memory, data parallel (torchrun), LoRA ---
    precision: str = "auto"  # forward-pass autocast: auto (bf16 on GPUs that support it, fp32 on CPU), bf16, fp32
    max_tokens_per_micro_batch: int = 0  # cap on padded tokens (rows x longest) per forward/backward; 0 = no cap
    backend: str = "auto"  # torch.distributed backend under torchrun: auto (nccl on cuda, gloo on cpu), gloo, nccl
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
        choices = {
            "algo": ALGOS,
            "reflector": ("policy", "rule", "plan"),
            "distill": ("imitation", "reverse_kl"),
            "advantage": ("grpo", "dr_grpo", "raft"),
            "single_member": ("reward", "zero"),
            "loss_agg": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
            "eval_set": ("auto", "paper", "seeded"),
            "precision": ("auto", "bf16", "fp32"),
            "backend": ("auto", "gloo", "nccl"),
            "tiny_grid_tokens": ("cell", "row"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        if not isinstance(self.reflection_instructions, str):
            raise TypeError(f"reflection_instructions must be a str, got {type(self.reflection_instructions).__name__}")
        if self.preset and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {sorted(PRESETS)}")
        for name in ("steps", "tasks_per_step", "n_rlvr", "n_erl", "max_new_tokens", "micro_batch_size",
                     "ppo_epochs", "minibatches", "eval_samples", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.clip_low < 1 or self.clip_high < 0:
            raise ValueError(f"clip_low must be in [0, 1) and clip_high >= 0, got {self.clip_low}, {self.clip_high}")
        if self.temperature <= 0 or self.eval_temperature <= 0 or self.reflect_temperature <= 0:
            raise ValueError("temperatures must be positive (greedy decoding is not used for RL rollouts)")
        for name in ("max_bad_steps", "episode_time_limit", "episode_token_limit", "max_sampled_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative (0 turns it off), got {getattr(self, name)}")
        for name in ("max_tokens_per_micro_batch", "lora_r"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative (0 turns it off), got {getattr(self, name)}")
        for name in ("env_kwargs", "eval_env_kwargs"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be a dict, got {type(getattr(self, name)).__name__}")

    @property
    def group_size(self) -> int:
        return self.n_erl if self.algo == "erl" else self.n_rlvr


# The reflect-phase prompt of cpu-smol: the paper's request (rewrite your system prompt as a rulebook inside
# <prompt>...</prompt>) in a few lines, so a 135M model reads it within its budget and keeps the format.
SMOL_REFLECTION_INSTRUCTIONS = (
    "Your last attempt at this grid game failed. Read its trace below and work out the rules. Then write a new "
    "system prompt for your next try, inside <prompt>...</prompt>: what each symbol means, what each move does, "
    "and a short plan to reach the goal. Only the text inside <prompt>...</prompt> is kept."
)

# Presets are overrides of the defaults above. cpu-tiny is the embedded default job (2 CPU cores, minutes);
# paper-qwen3-4b is the paper's setting for one 8-GPU node. HotpotQA has no paper test set in the seeded sense:
# give the paper's eval questions to the held-out envs only, e.g.
#   --env-kwargs '{"data": TRAIN_DATA, "corpus": CORPUS}'
#   --eval-env-kwargs '{"data": "../shared/paper_tasks/hotpotqa_val_first1024.parquet"}'
# (that file has no passages, so open mode needs the corpus, which eval_env_kwargs inherits from env_kwargs).
PRESETS: dict[str, dict[str, Any]] = {
    "cpu-tiny": dict(
        model="tiny",
        steps=300,
        tasks_per_step=16,
        n_rlvr=8,
        n_erl=4,
        temperature=1.0,
        max_new_tokens=16,
        reflect_max_new_tokens=32,
        reflector="rule",
        constrained_actions=True,
        max_seq_len=2048,
        lr=3e-3,
        adam_beta2=0.99,
        warmup_steps=3,
        kl_coef=0.0,
        entropy_coef=0.0,
        loss_agg="token-mean",
        ppo_epochs=2,
        minibatches=4,
        micro_batch_size=64,
        tiny_hidden=64,
        tiny_layers=3,
        tiny_intermediate=256,
        max_grad_norm=1.0,
        eval_every=10,
        eval_tasks=100,
        eval_samples=2,
        eval_set="seeded",
        checkpoint_every=20,
        time_limit_min=8.0,
        device="cpu",
        dtype="float32",
    ),
    # A real instruct model on 2 CPU cores: SmolLM2-135M-Instruct writes its own reflections (the paper's method,
    # not an oracle). On 2 shared cores a forward+backward pass runs at tens of tokens/s, so everything is small:
    # 8 episodes a step, a short reflection prompt and reply, LoRA (about 1.8x faster per trained token than full
    # fine-tuning here, benchmarks/results/smol_erl.md), no KL reference pass. Actions are constrained to the env's
    # move strings: unconstrained, the 135M model almost never writes a move in the asked format, every reward is
    # 0 and there is nothing to learn from. Held-out evaluation: the paper's test maps of the trained sizes.
    "cpu-smol": dict(
        model="smollm2-135m",
        algo="erl",
        reflector="policy",
        reflection_instructions=SMOL_REFLECTION_INSTRUCTIONS,
        steps=12,
        tasks_per_step=2,
        n_erl=4,
        n_rlvr=10,
        temperature=0.7,
        constrained_actions=True,
        max_new_tokens=16,
        reflect_max_new_tokens=128,
        max_seq_len=2048,
        lora_r=16,
        lora_alpha=32.0,
        lr=2e-4,
        kl_coef=0.0,
        loss_agg="token-mean",
        micro_batch_size=4,
        eval_every=4,
        eval_tasks=100,
        eval_samples=1,
        eval_set="auto",
        checkpoint_every=4,
        device="cpu",
        dtype="float32",
    ),
    "paper-qwen3-4b": dict(
        model="Qwen/Qwen3-4B-Instruct-2507",
        steps=200,
        tasks_per_step=64,
        temperature=0.7,
        max_new_tokens=1024,
        reflect_max_new_tokens=2048,
        max_seq_len=16384,
        lr=1e-6,
        kl_coef=0.001,
        loss_agg="seq-mean-token-sum",
        micro_batch_size=4,
        gradient_checkpointing=True,
        eval_every=5,
        eval_samples=4,
        eval_set="auto",
        checkpoint_every=10,
        device="cuda",
        dtype="bfloat16",
        progress=True,
    ),
}

# Per-env adjustments of a preset, applied right after it.
ENV_PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    # The learning benchmark's distribution (sizes 2-4): small enough for a from-scratch model in minutes.
    # One token per grid row (every row of a 2-4 board fits in the vocabulary), a gentler learning rate and a small
    # entropy bonus: without them the policy collapses onto its first guesses before it can read the board
    # vertically (benchmarks/results/learning.md).
    ("cpu-tiny", "ERL-FrozenLake-v0"): dict(env_kwargs={"size": [2, 4]}, tiny_grid_tokens="row", tiny_vocab=2048,
                                            lr=1e-3, entropy_coef=0.01, reflector="plan"),
    ("cpu-tiny", "ERL-Sokoban-v0"): dict(env_kwargs={"size": 6}),
    # SmolLM2 on 2 cores: boards of sizes 2-4 keep a conversation within a few hundred tokens (a 9x9 board is ~200
    # tokens per turn), and evaluation uses the 37 paper test maps of those sizes.
    ("cpu-smol", "ERL-FrozenLake-v0"): dict(env_kwargs={"size": [2, 4]}),
    ("cpu-smol", "ERL-Sokoban-v0"): dict(env_kwargs={"size": 6}),
    # The tiny model cannot learn QA; this keeps its episodes short so the job still runs end to end. Evaluation
    # uses another synthetic world (generator seed 1): no question, entity or passage in common with training.
    ("cpu-tiny", "ERL-HotpotQA-v0"): dict(
        env_kwargs={"data": "synthetic"}, eval_env_kwargs={"seed": 1}, constrained_actions=False, max_new_tokens=24,
        max_seq_len=3072, steps=10, tasks_per_step=8, eval_tasks=20,
    ),
}


def config_to_dict(config: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read overrides from a YAML or JSON file (a flat mapping of field names)."""
    path = Path(path)
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text) or {}
    elif path.suffix == ".json":
        data = json.loads(text)
    else:
        raise ValueError(f"config file {path} must end in .yaml, .yml or .json")
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of field names to values, got {type(data).__name__}")
    return data


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
