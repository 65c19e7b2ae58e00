"""Rollout throughput: batched multi-episode generation vs one episode at a time, and KV-cache reuse across turns.

    python benchmarks/speed/bench_rollout.py                    # both parts: 1 / 8 / 32 live episodes
    python benchmarks/speed/bench_rollout.py --only kv_reuse    # the SmolLM2 KV-reuse rows only (the other part's
                                                          # rows are carried over from the .json)
    python benchmarks/speed/bench_rollout.py --quick            # a smoke run (KV reuse on the tiny model)

``erl_agents.rollout.run_episodes`` advances every live episode one turn at a time and answers all of them with one
``generate`` call per turn. The baseline is the same function given one env at a time, N times in a row: the same
model, envs, seeds and sampling, only without batching across episodes. Both sides play whole episodes of
ERL-FrozenLake-v0 (the cpu-tiny model, untrained, at the cpu-tiny sampling settings) and count the tokens the model
sampled; tokens/s is that count over the wall time, episodes/s likewise. Rows: constrained actions (the cpu-tiny
preset: a reply is one action string) and free sampling (replies of up to ``--free-tokens`` tokens). Each figure is
the best of ``--repeats`` runs taken round robin, to damp noise from other processes.

KV reuse (``run_episodes(kv_reuse=...)``): SmolLM2-135M-Instruct (``--kv-model``, loaded with
``erl_agents.models.load_model``) plays ERL-FrozenLake-v0 episodes of up to 8 turns, all live episodes batched, once
keeping each conversation's keys and values from turn to turn and once re-reading the whole conversation every turn,
from the same seed. Besides tokens/s, each row counts the positions the model computed (prefill and decode, padding
included), which does not depend on how busy the machine is, and checks that both runs sampled the same tokens.
Results: benchmarks/results/rollout.md (and .json for run_all).
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def build_policy(seed: int = 0):
    """The cpu-tiny model and tokenizer, as the trainer builds them, through a save/load round trip."""
    from erl_agents.config import PRESETS
    from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer, load_policy
    from erl_agents.envs import make_env, tiny_corpus

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
    from erl_agents.envs import make_env

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


def measure_kv_reuse(policy, live_counts=(1, 8, 32), free_tokens: int = 24, env_kwargs: dict | None = None,
                     seed: int = 0) -> list[dict]:
    """Per live-episode count: the same episodes played with and without KV reuse (free sampling, 8-step budget)."""
    import torch

    from erl_agents.rollout import SamplingParams, run_episodes
    from erl_agents.envs import make_env

    env_kwargs = env_kwargs if env_kwargs is not None else {"size": [2, 4]}
    envs = [make_env("ERL-FrozenLake-v0", env_kwargs) for _ in range(max(live_counts))]
    sampling = SamplingParams(0.7, 1.0, 0, free_tokens)  # the paper's training temperature
    positions = [0]

    def count(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        positions[0] += ids.numel()

    rows = []
    hook = policy.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        for n in live_counts:
            runs, played = {}, {}
            for kv_reuse in (True, False):
                resets = [(seed * 1000 + i, None) for i in range(n)]
                torch.manual_seed(seed)
                positions[0] = 0
                start = time.perf_counter()
                episodes = run_episodes(policy, envs[:n], resets, list(range(n)), sampling, max_seq_len=4096,
                                        kv_reuse=kv_reuse)
                seconds = time.perf_counter() - start
                tokens = sum(t.num_model_tokens for e in episodes for t in e.trajectories)
                turns = sum(sum(1 for m, nxt in zip(t.mask, t.mask[1:] + [0]) if m and not nxt)
                            for e in episodes for t in e.trajectories)
                played[kv_reuse] = [t.tokens for e in episodes for t in e.trajectories]
                runs[kv_reuse] = {"seconds": seconds, "tokens": tokens, "turns": turns, "positions": positions[0],
                                  "tokens_per_s": tokens / seconds, "success": sum(e.success for e in episodes) / n}
            rows.append({"live": n, "reuse": runs[True], "no_reuse": runs[False],
                         "ratio": runs[True]["tokens_per_s"] / runs[False]["tokens_per_s"],
                         "same_episodes": played[True] == played[False]})
            print(f"kv reuse, {n} live: {rows[-1]['ratio']:.2f}x, same episodes: {rows[-1]['same_episodes']}",
                  file=sys.stderr)
    finally:
        hook.remove()
    return rows


def kv_speed_rows(rows: list[dict], model: str) -> list[dict]:
    return [{"measure": f"rollout, KV reuse across turns, {model}, {r['live']} live episodes, tokens/s",
             "ours": r["reuse"]["tokens_per_s"], "baseline": r["no_reuse"]["tokens_per_s"],
             "baseline_name": "re-read every turn", "ratio": r["ratio"]} for r in rows]


def kv_markdown(rows: list[dict], model: str, command: str, machine: str, free_tokens: int) -> str:
    lines = [
        "## KV-cache reuse across turns",
        "",
        f"Generated by `{command}`.",
        f"{machine} Model: {model}. Env: ERL-FrozenLake-v0, sizes 2-4, 8-step budget (episodes of up to 8 "
        f"turns). Free sampling, temperature 0.7, up to {free_tokens} tokens per reply; all live episodes batched, one "
        "run each; both paths generate into a preallocated (static) cache. Positions: tokens the model computed "
        "(prefill + decode, padding included).",
        "",
        "| live episodes | reuse tokens/s | re-read tokens/s | ratio | positions (reuse / re-read) | "
        "sampled tokens | turns | same episodes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["reuse"], r["no_reuse"]
        lines.append(f"| {r['live']} | {a['tokens_per_s']:,.1f} | {b['tokens_per_s']:,.1f} | {r['ratio']:.2f} | "
                     f"{a['positions']:,} / {b['positions']:,} ({b['positions'] / a['positions']:.1f}x fewer) | "
                     f"{a['tokens']} | {a['turns']} | {'yes' if r['same_episodes'] else 'NO'} |")
    lines.append("")
    return "\n".join(lines)


def machine_line() -> str:
    import torch

    # The load average says how much else ran: 1.0 is one busy core (on 2 cores, 2.0 means both were busy).
    return (f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, 1-minute load average {os.getloadavg()[0]:.1f} "
            f"when written; Python {platform.python_version()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} torch threads.")


def speed_rows(rows: list[dict]) -> list[dict]:
    return [{"measure": f"rollout, {r['mode']}, {r['live']} live episodes, tokens/s", "ours": r["batched"]["tokens_per_s"],
             "baseline": r["sequential"]["tokens_per_s"], "baseline_name": "one episode at a time",
             "ratio": r["ratio"]} for r in rows]


def to_markdown(rows: list[dict], command: str, repeats: int) -> str:
    lines = [
        "# Rollout throughput: batched episodes vs one episode at a time",
        "",
        f"Generated by `{command}`.",
        f"{machine_line()} Model: cpu-tiny (untrained). Env: ERL-FrozenLake-v0, sizes 2-4. Best of {repeats} runs.",
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


def load_kv_policy(model: str):
    """The KV-reuse part's model: the cpu-tiny model or a name/directory for ``erl_agents.models.load_model``."""
    if model == "tiny":
        return build_policy()
    from erl_agents.models import load_model

    return load_model(model, dtype="float32")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repeat, 1 and 8 live episodes, KV reuse on tiny")
    parser.add_argument("--live", type=int, nargs="+", default=None, help="live episode counts (default 1 8 32)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per figure, best kept (default 2; quick 1)")
    parser.add_argument("--free-tokens", type=int, default=16)
    parser.add_argument("--kv-model", default=None, help="model of the KV-reuse part (default smollm2-135m; quick tiny)")
    parser.add_argument("--kv-free-tokens", type=int, default=24, help="reply budget of the KV-reuse part")
    parser.add_argument("--only", choices=("batching", "kv_reuse"), default=None,
                        help="run one part; the other part's rows are carried over from the .json")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "rollout.md")
    args = parser.parse_args(argv)
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    live = args.live or ([1, 8] if args.quick else [1, 8, 32])
    repeats = args.repeats or (1 if args.quick else 2)
    kv_model = args.kv_model or ("tiny" if args.quick else "smollm2-135m")
    command = "python benchmarks/speed/bench_rollout.py " + " ".join(argv)
    json_path = args.output.with_suffix(".json")
    saved = json.loads(json_path.read_text()) if args.only and json_path.exists() else {}
    if args.only == "kv_reuse":
        rows, batching_md = saved.get("results", []), saved.get("markdown", "")
    else:
        rows = measure(live, repeats, args.free_tokens, seed=args.seed)
        batching_md = to_markdown(rows, command, repeats)
    if args.only == "batching":
        kv = saved.get("kv_reuse", {"rows": [], "model": kv_model, "markdown": ""})
    else:
        kv_rows = measure_kv_reuse(load_kv_policy(kv_model), live, args.kv_free_tokens, seed=args.seed)
        kv = {"rows": kv_rows, "model": kv_model,
              "markdown": kv_markdown(kv_rows, kv_model, command, machine_line(), args.kv_free_tokens)}
    report = batching_md + ("\n" if batching_md and kv["markdown"] else "") + kv["markdown"]
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    json_path.write_text(json.dumps({"results": rows, "markdown": batching_md, "kv_reuse": kv,
                                     "rows": speed_rows(rows) + kv_speed_rows(kv["rows"], kv["model"])}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
