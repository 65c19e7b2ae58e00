"""Rollout throughput: batched multi-episode generation vs one episode at a time, sampled tokens/s.

    python benchmarks/bench_rollout.py            # 1 / 8 / 32 live episodes, best of 2
    python benchmarks/bench_rollout.py --quick    # a smoke run

``erl_agents.rollout.run_episodes`` advances every live episode one turn at a time and answers all of them with one
``generate`` call per turn. The baseline is the same function given one env at a time, N times in a row: the same
model, envs, seeds and sampling, only without batching across episodes. Both sides play whole episodes of
ERL-FrozenLake-v0 (the cpu-tiny model, untrained, at the cpu-tiny sampling settings) and count the tokens the model
sampled; tokens/s is that count over the wall time, episodes/s likewise. Rows: constrained actions (the cpu-tiny
preset: a reply is one action string) and free sampling (replies of up to ``--free-tokens`` tokens). Each figure is
the best of ``--repeats`` runs taken round robin, to damp noise from other processes. Results:
benchmarks/results/rollout.md (and .json for run_all).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_policy(seed: int = 0):
    """The cpu-tiny model and tokenizer, as the trainer builds them, through a save/load round trip."""
    from erl_agents.config import PRESETS
    from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer, load_policy
    from erl_agents.trainer import make_env, tiny_corpus

    preset = PRESETS["cpu-tiny"]
    env = make_env("ERL-FrozenLake-v0", {})
    tokenizer = build_tiny_tokenizer(tiny_corpus(env, episodes=100, seed=seed), vocab_size=preset.get("tiny_vocab", 1024))
    model = build_tiny_model(tokenizer, preset["tiny_hidden"], preset["tiny_layers"], 4, preset["tiny_intermediate"],
                             max_positions=preset["max_seq_len"], seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        Policy(model, tokenizer).save(tmp)
        return load_policy(tmp, dtype="float32", device="cpu")


def play(policy, envs, resets, sampling, constrained: bool, batched: bool) -> tuple[float, int, int]:
    """(seconds, sampled tokens, env turns) for one episode per env, batched or one after another."""
    from erl_agents.rollout import run_episodes

    def count(episodes):
        tokens = sum(t.num_model_tokens for e in episodes for t in e.trajectories)
        turns = sum(sum(1 for m, prev in zip(t.mask[1:], t.mask) if m == 0 and prev == 1) for e in episodes
                    for t in e.trajectories)
        return tokens, turns

    start = time.perf_counter()
    if batched:
        episodes = run_episodes(policy, envs, resets, list(range(len(envs))), sampling, constrained=constrained,
                                max_seq_len=2048)
    else:
        episodes = []
        for i, env in enumerate(envs):
            episodes += run_episodes(policy, [env], [resets[i]], [i], sampling, constrained=constrained,
                                     max_seq_len=2048)
    elapsed = time.perf_counter() - start
    tokens, turns = count(episodes)
    return elapsed, tokens, turns


def measure(live_counts=(1, 8, 32), repeats: int = 2, free_tokens: int = 16, env_kwargs: dict | None = None,
            seed: int = 0) -> list[dict]:
    import torch

    from erl_agents.rollout import SamplingParams
    from erl_agents.trainer import make_env

    policy = build_policy(seed)
    env_kwargs = env_kwargs if env_kwargs is not None else {"size": [2, 4]}
    envs = [make_env("ERL-FrozenLake-v0", env_kwargs) for _ in range(max(live_counts))]
    modes = [("constrained actions (cpu-tiny)", True, SamplingParams(1.0, 1.0, 0, 16)),
             (f"free sampling, up to {free_tokens} tokens per reply", False, SamplingParams(1.0, 1.0, 0, free_tokens))]
    best: dict[tuple, dict] = {}
    for repeat in range(repeats):
        for mode, constrained, sampling in modes:
            for n in live_counts:
                resets = [(seed * 1000 + i, None) for i in range(n)]
                for batched in (True, False):
                    torch.manual_seed(seed + repeat)
                    seconds, tokens, turns = play(policy, envs[:n], resets, sampling, constrained, batched)
                    key = (mode, n, batched)
                    run = {"seconds": seconds, "tokens": tokens, "turns": turns, "tokens_per_s": tokens / seconds,
                           "episodes_per_s": n / seconds}
                    if key not in best or run["tokens_per_s"] > best[key]["tokens_per_s"]:
                        best[key] = run
    rows = []
    for mode, _, _ in modes:
        for n in live_counts:
            ours, base = best[(mode, n, True)], best[(mode, n, False)]
            rows.append({"mode": mode, "live": n, "batched": ours, "sequential": base,
                         "ratio": ours["tokens_per_s"] / base["tokens_per_s"]})
    return rows


def speed_rows(rows: list[dict]) -> list[dict]:
    return [{"measure": f"rollout, {r['mode']}, {r['live']} live episodes, tokens/s", "ours": r["batched"]["tokens_per_s"],
             "baseline": r["sequential"]["tokens_per_s"], "baseline_name": "one episode at a time",
             "ratio": r["ratio"]} for r in rows]


def to_markdown(rows: list[dict], command: str, repeats: int) -> str:
    import torch

    lines = [
        "# Rollout throughput: batched episodes vs one episode at a time",
        "",
        f"Generated by `{command}`.",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} torch threads. Model: cpu-tiny (untrained). Env: "
        f"ERL-FrozenLake-v0, sizes 2-4. Best of {repeats} runs.",
        "",
        "| sampling | live episodes | batched tokens/s | one at a time tokens/s | ratio | batched episodes/s | "
        "one at a time episodes/s | sampled tokens (batched / one at a time) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b, s = r["batched"], r["sequential"]
        lines.append(f"| {r['mode']} | {r['live']} | {b['tokens_per_s']:,.0f} | {s['tokens_per_s']:,.0f} | "
                     f"{r['ratio']:.2f} | {b['episodes_per_s']:.1f} | {s['episodes_per_s']:.1f} | "
                     f"{b['tokens']} / {s['tokens']} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, 1 and 8 live episodes")
    parser.add_argument("--live", type=int, nargs="+", default=None, help="live episode counts (default 1 8 32)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure, best kept (default 2; quick 1)")
    parser.add_argument("--free-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "rollout.md")
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    live = args.live or ([1, 8] if args.quick else [1, 8, 32])
    repeats = args.repeats or (1 if args.quick else 2)
    rows = measure(live, repeats, args.free_tokens, seed=args.seed)
    report = to_markdown(rows, "python benchmarks/bench_rollout.py " + " ".join(argv), repeats)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    args.output.with_suffix(".json").write_text(json.dumps({"results": rows, "rows": speed_rows(rows)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
