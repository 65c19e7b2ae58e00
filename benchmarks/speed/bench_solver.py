"""Benchmark the Sokoban solver: BFS vs A* per level on the ERL paper's test set, and on harder generated levels.

    python benchmarks/speed/bench_solver.py            # paper test set (from ../shared) + 30 generated multi-box levels
    python benchmarks/speed/bench_solver.py --quick    # fewer repeats and generated levels, a smoke run

Each time is the best of ``--repeats`` runs of ``solution_stats`` (the per-room tables are cached after the first
solve of a room, as they are in an env that replays its levels; the first run warms them). "states" is the number
of distinct (player, boxes) states the search stored. Both searches are optimal, so their move counts must agree;
the script checks it. Results go to benchmarks/results/solver.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from erl_envs.grid.sokoban_generator import generate_level  # noqa: E402
from erl_envs.grid.sokoban_levels import load_levels  # noqa: E402
from erl_envs.grid.sokoban_solver import solution_stats  # noqa: E402

# Harder levels than the paper's: several boxes, interior walls, long solutions.
HARD_SETTING = dict(size=(10, 10), num_boxes=3, interior_walls=0.1, min_moves=25, max_moves=60)


def timed(level, method: str, repeats: int):
    best = float("inf")
    result = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = solution_stats(level, method=method, max_states=2_000_000)
        best = min(best, time.perf_counter() - start)
    return result, best * 1e3


def compare(levels, names, repeats: int) -> tuple[list[str], dict]:
    rows = ["| level | size | boxes | moves | pushes | BFS ms | BFS states | A* ms | A* states | BFS/A* time |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    bfs_ms, astar_ms, bfs_states, astar_states = [], [], [], []
    for name, level in zip(names, levels):
        bfs, t_bfs = timed(level, "bfs", repeats)
        astar, t_astar = timed(level, "astar", repeats)
        if bfs.moves != astar.moves:
            raise SystemExit(f"BFS and A* disagree on {name}: {bfs.moves} vs {astar.moves} moves")
        bfs_ms.append(t_bfs)
        astar_ms.append(t_astar)
        bfs_states.append(bfs.states)
        astar_states.append(astar.states)
        rows.append(
            f"| {name} | {level.height}x{level.width} | {len(level.boxes)} | {bfs.moves} | {bfs.pushes} | "
            f"{t_bfs:.3f} | {bfs.states} | {t_astar:.3f} | {astar.states} | {t_bfs / t_astar:.2f} |"
        )
    summary = {
        "levels": len(levels),
        "BFS total ms": sum(bfs_ms),
        "A* total ms": sum(astar_ms),
        "BFS median ms": statistics.median(bfs_ms),
        "A* median ms": statistics.median(astar_ms),
        "BFS max ms": max(bfs_ms),
        "A* max ms": max(astar_ms),
        "BFS mean states": statistics.mean(bfs_states),
        "A* mean states": statistics.mean(astar_states),
        "BFS/A* total time": sum(bfs_ms) / sum(astar_ms),
    }
    return rows, summary


def summary_table(summaries: dict[str, dict]) -> list[str]:
    names = list(summaries)
    rows = ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for metric in next(iter(summaries.values())):
        cells = []
        for name in names:
            value = summaries[name][metric]
            cells.append(f"{value:.3f}" if isinstance(value, float) else str(value))
        rows.append(f"| {metric} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and generated levels")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per level and method (best is kept)")
    parser.add_argument("--hard-levels", type=int, default=None, help="generated multi-box levels to time")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "solver.md")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 5)
    hard_count = args.hard_levels or (5 if args.quick else 30)

    sections: list[str] = []
    summaries: dict[str, dict] = {}
    shared = Path(os.environ.get("ERL_SHARED", ROOT.parent / "shared")) / "paper_tasks" / "sokoban_test.parquet"
    if shared.is_file():
        paper = load_levels(shared)
        rows, summaries["paper test set"] = compare(paper, [lv.name for lv in paper], repeats)
        sections += ["## Paper test set (100 levels, 1 box, <= 8 moves)", "", *rows, ""]
    else:
        sections += ["## Paper test set: skipped (../shared/paper_tasks/sokoban_test.parquet not found; set ERL_SHARED)", ""]

    rng = np.random.default_rng(0)
    hard = [generate_level(rng, **HARD_SETTING)[0] for _ in range(hard_count)]
    rows, summaries["generated 10x10, 3 boxes"] = compare(hard, [f"gen-{i}" for i in range(hard_count)], repeats)
    sections += [f"## Generated levels: `{HARD_SETTING}`", "", *rows, ""]

    header = [
        "# Sokoban solver: BFS vs A*",
        "",
        f"Generated by `python benchmarks/speed/bench_solver.py{' --quick' if args.quick else ''}`.",
        f"Machine: {os.cpu_count()} CPUs, {platform.machine()}, {platform.system()}; Python "
        f"{platform.python_version()}, numpy {np.__version__}. Times are the best of {repeats} run(s) per level.",
        "",
        "## Summary",
        "",
        *summary_table(summaries),
        "",
    ]
    text = "\n".join(header + sections)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
