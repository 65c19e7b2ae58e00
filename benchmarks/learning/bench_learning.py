"""Learning benchmark: the tiny model on ERL-FrozenLake-v0 (sizes 2-4), RLVR vs ERL, 10 minutes of CPU each.

A random policy succeeds about 31-38% of the time on this distribution; the bar is >= 65% held-out first-attempt
success within 10 minutes of CPU training (2 cores). Prints both curves as a table (held-out success against steps
and minutes), writes benchmarks/results/learning.md and learning.png.

    python benchmarks/learning/bench_learning.py                # both algorithms, 10 minutes each
    python benchmarks/learning/bench_learning.py --minutes 3    # a quicker look
    python benchmarks/learning/bench_learning.py --algos rlvr --extra lr=1e-3 ppo_epochs=1

Wall time depends on what else runs on the machine: the table reports steps as well as minutes, and the load
average at the start, so that runs on a shared machine can be compared fairly.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from erl_agents.config import build_config  # noqa: E402
from erl_agents.plots import plot_runs  # noqa: E402
from erl_agents.trainer import Trainer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BAR = 0.65


def _parse_extra(items):
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def run(algo: str, minutes: float, seed: int, output: Path, extra: dict) -> list[dict]:
    flags = dict(env="ERL-FrozenLake-v0", algo=algo, seed=seed, output=str(output / algo), time_limit_min=minutes,
                 steps=10_000, eval_every=10, eval_tasks=200, eval_samples=2, progress=True, checkpoint_every=0,
                 save_final_model=False)
    flags.update(extra)
    config = build_config({"preset": "cpu-tiny"}, flags=flags)
    return Trainer(config).train()


def curve_table(runs: dict[str, list[dict]]) -> str:
    lines = ["| algo | step | training minutes | wall minutes | held-out success | train success (attempt 1) |",
             "|---|---|---|---|---|---|"]
    for name, rows in runs.items():
        for r in rows:
            if "eval/success" in r:
                lines.append(f"| {name} | {r['step']} | {r.get('time/training', 0.0) / 60:.1f} | "
                             f"{r.get('time/elapsed', 0.0) / 60:.1f} | "
                             f"{r['eval/success']:.3f} | {r.get('success/attempt1', float('nan')):.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget per algorithm (CPU minutes)")
    parser.add_argument("--algos", nargs="+", default=["rlvr", "erl"], choices=["rlvr", "erl"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="runs/bench_learning")
    parser.add_argument("--extra", nargs="*", default=[], help="config overrides as key=value")
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    runs, started = {}, time.time()
    for algo in args.algos:
        runs[algo] = run(algo, args.minutes, args.seed, Path(args.output), _parse_extra(args.extra))
    table = curve_table(runs)
    summary = ["| algo | steps | best held-out success | final held-out success | reaches 65% |", "|---|---|---|---|---|"]
    for name, rows in runs.items():
        evals = [r["eval/success"] for r in rows if "eval/success" in r]
        summary.append(f"| {name} | {rows[-1]['step']} | {max(evals):.3f} | {evals[-1]:.3f} | "
                       f"{'yes' if evals[-1] >= BAR else 'no'} |")
    report = "\n".join([
        "# Learning benchmark: tiny model on ERL-FrozenLake-v0, sizes 2-4",
        "",
        f"Budget {args.minutes:g} CPU minutes per algorithm, preset cpu-tiny, seed {args.seed}, "
        f"{os.cpu_count()} cores, torch threads {__import__('torch').get_num_threads()}, "
        f"load average at start {load:.2f}, {platform.processor() or platform.machine()}. "
        f"Held-out: 200 seeded instances x 2 samples, first attempt only. Bar: {BAR:.0%}.",
        "",
        *summary,
        "",
        table,
        "",
        f"Total wall time {(time.time() - started) / 60:.1f} min. Extra overrides: {args.extra or 'none'}.",
    ])
    print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "learning.md").write_text(report + "\n")
    plot_runs(runs, RESULTS / "learning.png", x="time/training", title="held-out success, ERL-FrozenLake-v0 sizes 2-4")
    return 0


if __name__ == "__main__":
    sys.exit(main())
