"""Named overrides of the run configuration's defaults (``erl_agents.config.TrainConfig``): ``--preset NAME``, and
the per-env adjustments a preset makes (applied right after it, before a config file and the command line).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS", "ENV_PRESETS"]


# Presets are overrides of the defaults above. cpu-tiny is the embedded default job (2 CPU cores, minutes);
# paper-qwen3-4b is the paper's setting for one 8-GPU node. HotpotQA has no paper test set in the seeded sense:
# give the paper's eval questions to the held-out envs only, e.g.
#   --env-kwargs '{"data": TRAIN_DATA, "corpus": CORPUS}'
#   --eval-env-kwargs '{"data": "../shared/paper_tasks/hotpotqa_val_first1024.parquet"}'
# (that file has no passages, so open mode needs the corpus, which eval_env_kwargs inherits from env_kwargs).
PRESETS: dict[str, dict[str, Any]] = {
    "cpu-tiny": dict(
        model="tiny",
        steps=340,
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
        # Speed on 2 cores, the same update: rows of similar length share a pass (less padding), and PPO's old
        # policy is the engine's sampling log-probs (the hf engine's agree with a recomputation to ~1e-8; the pass
        # they replace was a third of the update's time). The agreement check then covers the first mini-batch.
        max_tokens_per_micro_batch=2048,
        old_logprobs="rollout",
        tiny_hidden=64,
        tiny_layers=3,
        tiny_intermediate=256,
        max_grad_norm=1.0,
        eval_every=10,
        eval_tasks=100,
        eval_samples=2,
        eval_set="seeded",
        checkpoint_every=20,
        # A step budget, not a time limit: the same numbers for the same seed on any machine, and a progress bar that
        # shows the run's real length. Two threads on any machine: the thread count changes how floats are summed.
        threads=2,
        device="cpu",
        dtype="float32",
    ),
    # A real instruct model on 2 CPU cores: SmolLM2-135M-Instruct writes its own reflections (the paper's method,
    # not an oracle). On 2 shared cores a forward+backward pass runs at tens of tokens/s, so everything is small:
    # 8 episodes a step, LoRA, no KL reference pass. The grid games use the small-model prompt set (the env presets
    # below): no move named in any prompt (a format example is what a 135M model plays), and a reflection request
    # of the start and end boards and the moves, not every board. The reflection is started inside <prompt> and
    # stopped at </prompt> (reflect_prefill). Actions are constrained to the env's move strings: unconstrained, the
    # 135M model almost never writes a move in the asked format, every reward is 0 and there is nothing to learn
    # from. Held-out evaluation: the paper's test maps of the trained sizes, which FrozenLake's training draws
    # exclude (as Sokoban's always do). benchmarks/results/smol_erl.md measures it.
    "cpu-smol": dict(
        model="smollm2-135m",
        algo="erl",
        reflector="policy",
        reflect_prefill=True,
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
        # Activation memory grows with padded tokens: four 1,000-token rows in one pass peak at ~10 GB; capped,
        # a run stays near 6 GB with vLLM's engine in the same process (the sum of the loss is the same).
        max_tokens_per_micro_batch=1024,
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
        # The reference scripts' length: total_epochs=10 over the 10,000 training tasks in batches of 64 (the last
        # partial batch of an epoch dropped, as verl's loader does): 156 steps an epoch, 1,560 steps. The paper
        # reports about 100-200 steps, so it may have stopped its runs earlier; --steps N stops at step N of the
        # same epoch order.
        steps=0,
        epochs=10,
        tasks_per_step=64,
        temperature=0.7,
        # The budgets of the reference's CumulativeWorkflow: an attempt may add 10,240 tokens after its opening
        # (data.max_response_length, replies and env turns together), one reply may use all that is left, and a
        # reply cut off by it ends the attempt. A reflection (one updater call) may write 10,240 tokens.
        max_new_tokens=10240,
        response_budget=10240,
        reflect_max_new_tokens=10240,
        max_seq_len=16384,  # the reference's 6,114-token prompt limit plus the 10,240-token budget
        rows="paper",  # the reference's batch: reflections twice, a distilled copy of every retry (docs/fidelity.md)
        logprob_temperature="rollout",  # verl scores every row at the rollout temperature, reflections included
        lr=1e-6,
        kl_coef=0.001,
        clip_ratio_c=3.0,
        loss_agg="seq-mean-token-sum",
        ppo_mini_batch_size=64,  # verl's schedule: RLVR's 64 x 10 rows are one step, ERL's 256 + 4F rows 1-5 steps
        micro_batch_size=4,
        # The reference's dynamic micro-batches hold at most 24,000 tokens; here 16,384 padded tokens keep one H200's
        # activations beside fp32 weights and moments (docs/scaling.md). The gradient does not depend on it.
        max_tokens_per_micro_batch=16384,
        gradient_checkpointing=True,
        eval_every=5,
        eval_samples=4,
        eval_set="auto",
        memory="pool",
        memory_rule="paper",  # the reference's: first <prompt> block, stored with the reminder, fallbacks too
        checkpoint_every=10,
        device="cuda",
        # Under torchrun the state is sharded over the ranks (FSDP2), as the reference's FSDP actor: 8 x 80 GB GPUs
        # hold it (docs/scaling.md). One process has nothing to shard and trains unsharded.
        sharding="fsdp",
        dtype="bfloat16",  # fp32 weights and AdamW moments, bf16 autocast (verl's actor: fp32 master, bf16 compute)
        progress=True,
    ),
}

def _paper_sokoban_training() -> dict[str, Any]:
    """The paper preset's Sokoban data: its 10,000 train layouts when the shared folder has them, else our generator
    (which follows their room-size mix and never produces a test layout)."""
    from erl_envs.paper_tasks import shared_paper_file

    train = shared_paper_file("sokoban_train.parquet")
    levels = {"levels": str(train)} if train is not None else {}
    return dict(eval_set="paper", env_kwargs={"prompts": "paper", **levels})


# Per-env adjustments of a preset, applied right after it.
ENV_PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    # The paper preset plays the grid games with the paper's prompt set (the envs' default action format is already
    # the paper's) and evaluates on the paper's test sets, which ship with erl_envs.
    ("paper-qwen3-4b", "ERL-FrozenLake-v0"): dict(eval_set="paper", env_kwargs={"prompts": "paper"}),
    ("paper-qwen3-4b", "ERL-Sokoban-v0"): _paper_sokoban_training(),
    # The learning benchmark's distribution (sizes 2-4): small enough for a from-scratch model in minutes.
    # One token per grid row (every row of a 2-4 board fits in the vocabulary) and a gentler learning rate
    # (`benchmarks/learning/bench_learning.py` measures the tiny model's learning). A cosine schedule: with a constant
    # rate, held-out success kept shaking on a plateau below the main job's target. No entropy bonus: without it
    # the policy's entropy stays near 0.4 nats a move to the end, and rows with a zero advantage then skip the
    # update, which makes a step a third cheaper (benchmarks/results/main_job.md has the committed run).
    # Held-out: 400 seeded instances x 1 sample every 20 steps: about the episodes of 100 x 2 every 10, half the error
    # of the instance draw (boards range from 2x2, ~always solved, to 4x4 with long paths, mostly failed).
    ("cpu-tiny", "ERL-FrozenLake-v0"): dict(env_kwargs={"size": [2, 4]}, tiny_grid_tokens="row", tiny_vocab=2048,
                                            lr=1e-3, reflector="plan", lr_schedule="cosine", eval_tasks=400,
                                            eval_samples=1, eval_every=20),
    ("cpu-tiny", "ERL-Sokoban-v0"): dict(env_kwargs={"size": 6}),
    # SmolLM2 on 2 cores: boards of sizes 2-4 keep a conversation within a few hundred tokens (a 9x9 board is ~200
    # tokens per turn), and evaluation uses the 37 paper test maps of those sizes. Training never draws one of the
    # paper's test maps (exclude); the held-out envs replay them (they are built without the exclusion).
    ("cpu-smol", "ERL-FrozenLake-v0"): dict(env_kwargs={"size": [2, 4], "prompts": "small", "exclude": "paper-test"},
                                            eval_env_kwargs={"exclude": None}),
    ("cpu-smol", "ERL-Sokoban-v0"): dict(env_kwargs={"size": 6, "prompts": "small"}),
    # The tiny model cannot learn QA; this keeps its episodes short so the job still runs end to end. Evaluation
    # uses another synthetic world (generator seed 1): no question, entity or passage in common with training.
    # The reference's HotpotQA scripts update on mini-batches of 32 tasks and use the paper's tool protocol.
    # Held-out: the reference's evaluation, all 1,024 questions of its list once each, in order (eval_set "paper").
    # Its HotpotQA script also trains in fp16 mixed precision (fsdp_config.dtype float16, with a loss scaler) for
    # total_epochs=100 over the train split (90,447 questions: 1,413 steps an epoch); its solver writes at most 2,048
    # tokens a reply over at most 5 turns, in its own loop (no episode budget), and its reflection at most 8,192
    # (that script's data.max_response_length). It leaves n_parallel_tasks at rLLM's 256: a pool of 256 workers,
    # so 256 memory slots.
    ("paper-qwen3-4b", "ERL-HotpotQA-v0"): dict(ppo_mini_batch_size=32, eval_set="paper", eval_tasks=1024,
                                                dtype="float16", epochs=100, max_new_tokens=2048, response_budget=0,
                                                reflect_max_new_tokens=8192, memory_slots=256,
                                                env_kwargs={"protocol": "paper", "answer_extraction": "paper"}),
    ("cpu-tiny", "ERL-HotpotQA-v0"): dict(
        env_kwargs={"data": "synthetic"}, eval_env_kwargs={"seed": 1}, constrained_actions=False, max_new_tokens=24,
        max_seq_len=3072, steps=10, tasks_per_step=8, eval_tasks=20,
    ),
}
