"""GRPO step throughput and peak memory: erl_agents (generate_replies + policy_update) vs TRL's GRPOTrainer.

    python benchmarks/speed/bench_update_vs_trl.py            # 8 prompts x 8 completions, 6 timed steps
    python benchmarks/speed/bench_update_vs_trl.py --quick    # a smoke run (fewer, shorter steps)

Same work on both sides, single-turn (what TRL supports natively): the same tiny Llama and tokenizer (built once with
``erl_agents.models`` and saved, then loaded by both), the same prompts (FrozenLake observations cut to
``--prompt-len`` tokens), ``--prompts`` x ``--group`` completions of up to ``--completion-len`` tokens sampled at
temperature 1, the same reward function, group-normalised advantages, token-mean loss (TRL ``loss_type="dapo"``),
clip 0.2 / 0.28, no KL (TRL's default beta 0), one PPO epoch, micro-batches of ``--micro-batch`` with gradient
accumulation up to one optimizer step per GRPO step, AdamW at the same learning rate, float32 on CPU.

What is timed, per GRPO step (after one untimed warm-up step): *step* is generation + scoring + update; *update*
is the step minus generation and reward scoring (ours: ``policy_update``; TRL: the step minus its
``_generate_and_score_completions``, which also computes old/reference log-probs when they are needed; here they
are not). Each side runs in its own subprocess, so peak memory (``ru_maxrss``) is its own; the table gives the peak
and the growth over the process right after setup (model loaded, trainer built). Throughput counts sampled
completion tokens. If TRL is not installed or fails, its column says why. Results: benchmarks/results/update_vs_trl.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CLIP_LOW, CLIP_HIGH, LR = 0.2, 0.28, 1e-4


def reward_of(text: str) -> float:
    """Cheap, deterministic, and varied within a group, so every group carries a learning signal on both sides."""
    return (sum(map(ord, text)) % 11) / 10.0


def build_model(folder: Path, seed: int) -> None:
    """The cpu-tiny model and tokenizer, saved where both workers load them."""
    from erl_agents.config import PRESETS
    from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
    from erl_agents.envs import make_env, tiny_corpus

    preset = PRESETS["cpu-tiny"]
    env = make_env("ERL-FrozenLake-v0", {})
    tokenizer = build_tiny_tokenizer(tiny_corpus(env, episodes=100, seed=seed), vocab_size=1024)
    model = build_tiny_model(tokenizer, preset["tiny_hidden"], preset["tiny_layers"], 4, preset["tiny_intermediate"],
                             max_positions=1024, seed=seed)
    Policy(model, tokenizer).save(str(folder))


def make_prompts(folder: Path, count: int, length: int, seed: int) -> list[str]:
    """``count`` prompt texts of about ``length`` tokens: FrozenLake observations (sizes 6-9) joined and cut."""
    import gymnasium as gym
    from transformers import AutoTokenizer

    import erl_envs  # noqa: F401

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    env = gym.make("ERL-FrozenLake-v0", size=(6, 9))
    prompts = []
    for i in range(count):
        ids: list[int] = []
        episode = 0
        while len(ids) < length:
            obs, _ = env.reset(seed=seed * 10_000 + i * 100 + episode)
            ids += tokenizer(obs, add_special_tokens=False)["input_ids"]
            episode += 1
        prompts.append(tokenizer.decode(ids[:length]))
    return prompts


# ----------------------------------------------------------------------------------------------------------------
# Workers (each in its own process)


def _maxrss_mb() -> float:
    # Linux reports kilobytes, macOS bytes.
    scale = 1 / 2**20 if sys.platform == "darwin" else 1 / 2**10
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def run_ours(spec: dict) -> dict:
    import numpy as np
    import torch

    from erl_agents.config import TrainConfig
    from erl_agents.models import load_policy
    from erl_agents.engines.hf import generate_replies
    from erl_agents.rollout import ConstraintTable, SamplingParams, Trajectory
    from erl_agents.batch import assign_advantages
    from erl_agents.update import policy_update

    torch.manual_seed(spec["seed"])
    policy = load_policy(spec["model"], dtype="float32", device="cpu")
    tokenizer = policy.tokenizer
    config = TrainConfig(algo="rlvr", tasks_per_step=spec["prompts"], n_rlvr=spec["group"], kl_coef=0.0,
                         ppo_epochs=1, minibatches=1, micro_batch_size=spec["micro_batch"], loss_agg="token-mean",
                         clip_low=CLIP_LOW, clip_high=CLIP_HIGH, lr=LR, temperature=1.0, max_grad_norm=1.0,
                         advantage="grpo")
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=LR, betas=(0.9, 0.999), weight_decay=0.0)
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in spec["prompts_text"]]
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=spec["completion_len"])
    rng = np.random.default_rng(spec["seed"])
    setup_rss = _maxrss_mb()
    steps, sampled = [], []
    for step in range(spec["steps"] + 1):
        start = time.perf_counter()
        policy.model.eval()
        contexts = [ids for ids in prompt_ids for _ in range(spec["group"])]
        replies = generate_replies(policy, contexts, sampling)
        trajectories = []
        for row, (ids, reply) in enumerate(zip(contexts, replies)):
            text = policy.chat.reply_text(reply.ids)
            trajectories.append(Trajectory(
                role="attempt1", task=row // spec["group"], episode=row, tokens=list(ids) + reply.ids,
                mask=[0] * len(ids) + [1] * len(reply.ids), logprobs=[0.0] * len(ids) + reply.logprobs,
                constraints=[-1] * (len(ids) + len(reply.ids)), prompt_len=len(ids), system_prompt="",
                first_observation="", reward=reward_of(text)))
        assign_advantages(trajectories, config)
        generated = time.perf_counter()
        policy_update(policy.model, optimizer, None, trajectories, ConstraintTable(), config,
                      tokenizer.pad_token_id, None, rng)
        end = time.perf_counter()
        if step > 0:  # step 0 is the warm-up
            steps.append({"step": end - start, "update": end - generated})
            sampled.append(sum(len(r.ids) for r in replies))
    return _summary(steps, sampled, setup_rss, len(prompt_ids[0]))


def run_trl(spec: dict) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(spec["seed"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    total = spec["prompts"] * spec["group"]
    # One generation batch (every prompt x group) per optimizer step, split into micro-batches like ours.
    dataset = Dataset.from_dict({"prompt": spec["prompts_text"] * (spec["steps"] + 2)})

    def reward_fn(completions, **_):
        return [reward_of(c) for c in completions]

    args = GRPOConfig(
        output_dir=spec["workdir"], use_cpu=True, bf16=False, fp16=False, seed=spec["seed"],
        per_device_train_batch_size=spec["micro_batch"], gradient_accumulation_steps=total // spec["micro_batch"],
        num_generations=spec["group"], max_completion_length=spec["completion_len"], temperature=1.0, top_p=1.0,
        top_k=0, beta=0.0, num_iterations=1, epsilon=CLIP_LOW, epsilon_high=CLIP_HIGH, loss_type="dapo",
        scale_rewards="group", learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        adam_beta2=0.999, max_grad_norm=1.0, max_steps=spec["steps"] + 1, logging_steps=10_000, save_strategy="no",
        report_to="none", disable_tqdm=True, shuffle_dataset=False, dataloader_num_workers=0, log_completions=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=args, train_dataset=dataset,
                          processing_class=tokenizer)

    generation_time = [0.0]
    sampled = [0]
    original = trainer._generate_and_score_completions

    def timed(*a, **k):
        start = time.perf_counter()
        out = original(*a, **k)
        generation_time[0] += time.perf_counter() - start
        sampled[0] += int(out["completion_mask"].sum())
        return out

    trainer._generate_and_score_completions = timed
    steps, tokens = [], []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()
            generation_time[0], sampled[0] = 0.0, 0

        def on_step_end(self, _args, state, *__, **___):
            elapsed = time.perf_counter() - self.start
            if state.global_step > 1:  # the first step is the warm-up
                steps.append({"step": elapsed, "update": elapsed - generation_time[0]})
                tokens.append(sampled[0])

    trainer.add_callback(StepClock())
    setup_rss = _maxrss_mb()
    trainer.train()
    prompt_len = len(tokenizer(spec["prompts_text"][0], add_special_tokens=False)["input_ids"])
    return _summary(steps, tokens, setup_rss, prompt_len)


def _summary(steps: list[dict], sampled: list[int], setup_rss: float, prompt_len: int) -> dict:
    import numpy as np

    step = float(np.median([s["step"] for s in steps]))
    update = float(np.median([s["update"] for s in steps]))
    tokens = float(np.mean(sampled))
    return {"step_s": step, "update_s": update, "tokens_per_step": tokens, "tokens_per_s": tokens / step,
            "peak_rss_mb": _maxrss_mb(), "growth_mb": _maxrss_mb() - setup_rss, "steps_timed": len(steps),
            "prompt_len": prompt_len}


def _worker(side: str, spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    import torch

    torch.set_num_threads(spec["threads"])
    result = (run_ours if side == "ours" else run_trl)(spec)
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


def measure(side: str, spec: dict, timeout: float) -> dict:
    """Run one side in a fresh process; its result, or ``{"error": ...}`` with the reason it could not run."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = dict(spec, workdir=tmp, result=str(Path(tmp) / "result.json"))
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        try:
            proc = subprocess.run([sys.executable, __file__, "--worker", side, str(spec_path)], capture_output=True,
                                  text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish within {timeout:.0f} s"}
        if proc.returncode != 0 or not Path(spec["result"]).exists():
            lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
            return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
        return json.loads(Path(spec["result"]).read_text())


def compare(quick: bool = False, steps: int | None = None, prompts: int = 8, group: int = 8, prompt_len: int = 64,
            completion_len: int | None = None, micro_batch: int = 16, threads: int = 0, seed: int = 0) -> dict:
    """Both sides on the same work; returns the spec and each side's result (or error)."""
    steps = steps or (2 if quick else 6)
    completion_len = completion_len or (16 if quick else 64)
    threads = threads or (os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        build_model(folder, seed)
        spec = dict(model=str(folder), seed=seed, steps=steps, prompts=prompts, group=group,
                    prompts_text=make_prompts(folder, prompts, prompt_len, seed), completion_len=completion_len,
                    micro_batch=micro_batch, threads=threads)
        results = {side: measure(side, spec, timeout=600) for side in ("ours", "trl")}
    spec.pop("prompts_text")
    spec.pop("model")
    return {"spec": spec, **results}


def speed_rows(result: dict) -> list[dict]:
    """Rows for the speed table (measure, ours, baseline, ratio): ratio > 1 means ours is better."""
    ours, trl = result["ours"], result["trl"]
    rows = []
    for key, name, unit, higher_better in (("step_s", "GRPO step (generation + update)", "s", False),
                                           ("update_s", "GRPO update only", "s", False),
                                           ("tokens_per_s", "GRPO step throughput", "sampled tokens/s", True),
                                           ("peak_rss_mb", "GRPO peak memory (RSS)", "MB", False)):
        row = {"measure": f"{name}, {unit}", "baseline_name": "TRL GRPOTrainer"}
        row["ours"] = ours.get(key) if "error" not in ours else None
        row["baseline"] = trl.get(key) if "error" not in trl else None
        if row["ours"] and row["baseline"]:
            row["ratio"] = row["ours"] / row["baseline"] if higher_better else row["baseline"] / row["ours"]
        else:
            row["note"] = f"failed: {ours.get('error') or trl.get('error')}"
        rows.append(row)
    return rows


def to_markdown(result: dict, command: str) -> str:
    import torch

    try:
        import trl

        trl_version = trl.__version__
    except ImportError:
        trl_version = "not installed"
    spec, ours, trl_side = result["spec"], result["ours"], result["trl"]
    lines = [
        "# GRPO step: erl_agents vs TRL GRPOTrainer (same tiny model, single-turn)",
        "",
        f"Generated by `{command}`.",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, torch "
        f"{torch.__version__}, TRL {trl_version}; {spec['threads']} torch threads per side.",
        f"Work per step: {spec['prompts']} prompts x {spec['group']} completions, prompt about "
        f"{ours.get('prompt_len', '?')} tokens, completions up to {spec['completion_len']} tokens, micro-batch "
        f"{spec['micro_batch']}, one optimizer step; median of {spec['steps']} timed steps after a warm-up.",
        "",
        "| metric | ours | TRL | TRL / ours |",
        "|---|---|---|---|",
    ]
    for key, label in (("step_s", "step: generation + update (s)"), ("update_s", "update only (s)"),
                       ("tokens_per_step", "sampled completion tokens per step"),
                       ("tokens_per_s", "sampled tokens/s over the whole step"), ("peak_rss_mb", "peak RSS (MB)"),
                       ("growth_mb", "RSS growth over setup (MB)")):
        cells = []
        for side in (ours, trl_side):
            cells.append(f"{side[key]:.3f}" if "error" not in side and key in side else "n/a")
        ratio = "n/a"
        if "error" not in ours and "error" not in trl_side and ours.get(key):
            ratio = f"{trl_side[key] / ours[key]:.2f}"
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {ratio} |")
    for name, side in (("ours", ours), ("TRL", trl_side)):
        if "error" in side:
            lines.append(f"\n{name} could not run: {side['error']}")
    lines += ["", "TRL / ours > 1 means ours takes less time or memory (for tokens/s, < 1 means ours is faster).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return _worker(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 timed steps, 16-token completions")
    parser.add_argument("--steps", type=int, default=None, help="timed GRPO steps per side (default 6; quick 2)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (GRPO group size)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--completion-len", type=int, default=None, help="max new tokens (default 64; quick 16)")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per side (0 = all cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "update_vs_trl.md")
    args = parser.parse_args(argv)
    if (args.prompts * args.group) % args.micro_batch:
        parser.error("--prompts x --group must be a multiple of --micro-batch")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    result = compare(args.quick, args.steps, args.prompts, args.group, args.prompt_len, args.completion_len,
                     args.micro_batch, args.threads, args.seed)
    report = to_markdown(result, "python benchmarks/speed/bench_update_vs_trl.py " + " ".join(argv))
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    args.output.with_suffix(".json").write_text(json.dumps({**result, "rows": speed_rows(result)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
