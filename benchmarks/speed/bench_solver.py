"""Benchmark the Sokoban solver: BFS vs A* per level on the ERL paper's test set, and on harder generated levels.

    python benchmarks/speed/bench_solver.py            # paper test set (from ../shared) + 30 generated multi-box levels
    python benchmarks/speed/bench_solver.py --quick    # fewer repeats and generated levels, a smoke run
    python benchmarks/speed/bench_solver.py --report   # rewrite solver.md from solver.json (no timing)

Each time is the best of ``--repeats`` runs of ``solution_stats`` (the per-room tables are cached after the first
solve of a room, as they are in an env that replays its levels; the first run warms them). "states" is the number
of distinct (player, boxes) states the search stored. Both searches are optimal, so their move counts must agree;
the script checks it. The per-level measurements go to benchmarks/results/solver.json and the report,
benchmarks/results/solver.md, is computed from that file alone.
"""

from __future__ import annotations

import argparse
import json
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


def measure(levels, names, repeats: int) -> list[dict]:
    """Per level: its shape, the optimal solution's moves and pushes, and each search's best time and states."""
    records = []
    for name, level in zip(names, levels):
        bfs, t_bfs = timed(level, "bfs", repeats)
        astar, t_astar = timed(level, "astar", repeats)
        if bfs.moves != astar.moves:
            raise SystemExit(f"BFS and A* disagree on {name}: {bfs.moves} vs {astar.moves} moves")
        records.append({"level": name, "height": level.height, "width": level.width, "boxes": len(level.boxes),
                        "moves": bfs.moves, "pushes": bfs.pushes, "bfs_ms": t_bfs, "bfs_states": bfs.states,
                        "astar_ms": t_astar, "astar_states": astar.states})
    return records


def compare(records: list[dict]) -> tuple[list[str], dict]:
    """The per-level table and the summary of one level set's records."""
    rows = ["| level | size | boxes | moves | pushes | BFS ms | BFS states | A* ms | A* states | BFS/A* time |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        rows.append(
            f"| {r['level']} | {r['height']}x{r['width']} | {r['boxes']} | {r['moves']} | {r['pushes']} | "
            f"{r['bfs_ms']:.3f} | {r['bfs_states']} | {r['astar_ms']:.3f} | {r['astar_states']} | "
            f"{r['bfs_ms'] / r['astar_ms']:.2f} |"
        )
    bfs_ms, astar_ms = [r["bfs_ms"] for r in records], [r["astar_ms"] for r in records]
    summary = {
        "levels": len(records),
        "BFS total ms": sum(bfs_ms),
        "A* total ms": sum(astar_ms),
        "BFS median ms": statistics.median(bfs_ms),
        "A* median ms": statistics.median(astar_ms),
        "BFS max ms": max(bfs_ms),
        "A* max ms": max(astar_ms),
        "BFS mean states": statistics.mean(r["bfs_states"] for r in records),
        "A* mean states": statistics.mean(r["astar_states"] for r in records),
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


def to_markdown(data: dict) -> str:
    """The report, from the measurements of ``measure_all`` (solver.json)."""
    sections: list[str] = []
    summaries: dict[str, dict] = {}
    if data["paper"]:
        rows, summaries["paper test set"] = compare(data["paper"])
        sections += [f"## Paper test set ({len(data['paper'])} levels, "
                     f"{max(r['boxes'] for r in data['paper'])} box, <= {max(r['moves'] for r in data['paper'])} "
                     "moves)", "", *rows, ""]
    else:
        sections += ["## Paper test set: skipped (../shared/paper_tasks/sokoban_test.parquet not found; set "
                     "ERL_SHARED)", ""]
    rows, summaries["generated 10x10, 3 boxes"] = compare(data["generated"])
    sections += [f"## Generated levels: `{data['hard_setting']}`", "", *rows, ""]
    m = data["machine"]
    header = [
        "# Sokoban solver: BFS vs A*",
        "",
        f"Generated by `{data['command']}`; this report by `python benchmarks/speed/bench_solver.py --report` from "
        "[solver.json](solver.json), the per-level measurements.",
        f"Machine: {m['cpus']} CPUs, {m['arch']}, {m['system']}; Python {m['python']}, numpy {m['numpy']}; load "
        f"average (1 minute) {min(data['load']):.1f}-{max(data['load']):.1f} while it ran, run under `nice`. Times "
        f"are the best of {data['repeats']} run(s) per level.",
        "",
        "## Summary",
        "",
        *summary_table(summaries),
        "",
    ]
    return "\n".join(header + sections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and generated levels")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per level and method (best is kept)")
    parser.add_argument("--hard-levels", type=int, default=None, help="generated multi-box levels to time")
    parser.add_argument("--report", action="store_true", help="only rewrite the report from the .json beside it")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "solver.md")
    args = parser.parse_args()
    data_path = args.out.with_suffix(".json")
    if args.report:
        data = json.loads(data_path.read_text())
    else:
        repeats = args.repeats or (1 if args.quick else 5)
        hard_count = args.hard_levels or (5 if args.quick else 30)
        load = [os.getloadavg()[0]]
        shared = Path(os.environ.get("ERL_SHARED", ROOT.parent / "shared")) / "paper_tasks" / "sokoban_test.parquet"
        paper = []
        if shared.is_file():
            levels = load_levels(shared)
            paper = measure(levels, [lv.name for lv in levels], repeats)
        rng = np.random.default_rng(0)
        hard = [generate_level(rng, **HARD_SETTING)[0] for _ in range(hard_count)]
        generated = measure(hard, [f"gen-{i}" for i in range(hard_count)], repeats)
        load.append(os.getloadavg()[0])
        flags = " ".join(a for a in ("--quick" if args.quick else "", f"--repeats {args.repeats}" if args.repeats else "",
                                     f"--hard-levels {args.hard_levels}" if args.hard_levels else "") if a)
        data = {"command": "python benchmarks/speed/bench_solver.py" + (f" {flags}" if flags else ""),
                "repeats": repeats, "hard_setting": str(HARD_SETTING), "load": load,
                "machine": {"cpus": os.cpu_count(), "arch": platform.machine(), "system": platform.system(),
                            "python": platform.python_version(), "numpy": np.__version__},
                "paper": paper, "generated": generated}
        data_path.parent.mkdir(parents=True, exist_ok=True)
        data_path.write_text(json.dumps(data, indent=1) + "\n")
    text = to_markdown(data)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
