"""Sokoban level generation, levels/s: erl_envs.grid.sokoban_generator vs gym-sokoban's generator (``room_utils``).

    python benchmarks/speed/bench_sokoban_gen.py --gym-sokoban DIR_OR_WHEEL    # 10 s per setting and generator
    python benchmarks/speed/bench_sokoban_gen.py --quick                        # 1 s each

gym-sokoban (PyPI) needs the old ``gym`` package for its envs, but its generator module
``gym_sokoban/envs/room_utils.py`` only needs numpy, so it is loaded by path from an unpacked package or the wheel
itself (``pip download --no-deps gym-sokoban -d DIR``; ``$GYM_SOKOBAN`` also works). Nothing is downloaded at run
time: without it, its rows say so.

The two generators do not do the same work, and the table says how. Ours returns a level *with its optimal
solution length checked by a solver* and rejects levels outside the band (paper: at most 8 moves; 10x10: 10-40
moves). gym-sokoban's ``generate_room`` carves a room by a random walk, places the boxes, and reverse-plays up to 300
states, with no solution-length control (its ``score == 0`` failures are retried, as its env does, and counted in
its time). Settings: *paper* (ours: the paper's distribution; gym-sokoban: the same sizes 6-8 and 1 box, its
default walk of 25 steps) and *10x10, 3 boxes* (ours: 10% interior walls, 10-40 optimal moves; gym-sokoban: its
Sokoban-v0 walk length 1.7 x (10 + 10) = 34 steps). Results: benchmarks/results/sokoban_gen.md (and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
import types
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

ROOM_UTILS = "gym_sokoban/envs/room_utils.py"
SETTINGS = [
    # (name, our generate_level kwargs, gym-sokoban sizes, boxes, walk steps)
    ("paper (sizes 6-8, 1 box)", {}, (6, 7, 8), 1, 25),
    ("10x10, 3 boxes", dict(size=(10, 10), num_boxes=3, interior_walls=0.1, min_moves=10, max_moves=40), (10,), 3, 34),
]


def load_room_utils(location: str | os.PathLike | None) -> types.ModuleType:
    """gym-sokoban's generator module from a wheel, an unpacked package directory or a site-packages directory."""
    if not location:
        raise FileNotFoundError("gym-sokoban not given: run `pip download --no-deps gym-sokoban -d DIR` and pass "
                                "--gym-sokoban DIR/gym_sokoban-*.whl (or set $GYM_SOKOBAN)")
    path = Path(location)
    if path.is_dir() and not (path / ROOM_UTILS).exists():
        wheels = sorted(path.glob("gym_sokoban-*.whl"))
        if wheels:
            path = wheels[-1]
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            source = archive.read(ROOM_UTILS).decode()
    elif (path / ROOM_UTILS).exists():
        source = (path / ROOM_UTILS).read_text()
    else:
        raise FileNotFoundError(f"no {ROOM_UTILS} in {path}")
    module = types.ModuleType("gym_sokoban_room_utils")
    exec(compile(source, f"{path}/{ROOM_UTILS}", "exec"), module.__dict__)
    return module


def ours(setting: dict, seconds: float, max_levels: int, seed: int = 0) -> dict:
    from erl_envs.grid.sokoban_generator import generate_level

    rng = np.random.default_rng(seed)
    moves = []
    start = time.perf_counter()
    while len(moves) < max_levels and time.perf_counter() - start < seconds:
        _, solution = generate_level(rng, **setting)
        moves.append(len(solution))
    elapsed = time.perf_counter() - start
    return {"levels_per_s": len(moves) / elapsed, "levels": len(moves), "note": f"mean optimal moves {np.mean(moves):.1f}"}


def gym_sokoban(room_utils, sizes, boxes: int, walk: int, seconds: float, max_levels: int, seed: int = 0) -> dict:
    # gym-sokoban draws from the global `random` and `np.random` states.
    random.seed(seed)
    np.random.seed(seed)
    levels = failures = 0
    start = time.perf_counter()
    while levels < max_levels and time.perf_counter() - start < seconds:
        size = sizes[np.random.randint(len(sizes))]
        try:
            room_utils.generate_room(dim=(size, size), num_steps=walk, num_boxes=boxes)
            levels += 1
        except (RuntimeError, RuntimeWarning):  # its "score == 0" / "not enough free spots": the env retries
            failures += 1
    elapsed = time.perf_counter() - start
    return {"levels_per_s": levels / elapsed, "levels": levels, "note": f"{failures} failed tries retried"}


def measure(location: str | None, seconds: float, max_levels: int) -> list[dict]:
    try:
        room_utils = load_room_utils(location)
        problem = None
    except Exception as err:  # noqa: BLE001  (an absent baseline is a row of the table, not a crash)
        room_utils, problem = None, f"{type(err).__name__}: {err}"
    rows = []
    for name, setting, sizes, boxes, walk in SETTINGS:
        row = {"setting": name, "ours": ours(setting, seconds, max_levels)}
        if room_utils is None:
            row["gym_sokoban"] = {"error": f"not available ({problem})"}
        else:
            try:
                row["gym_sokoban"] = gym_sokoban(room_utils, sizes, boxes, walk, seconds, max_levels)
            except Exception as err:  # noqa: BLE001  (e.g. a numpy incompatibility: reported, not fatal)
                row["gym_sokoban"] = {"error": f"failed ({type(err).__name__}: {err})"}
        rows.append(row)
    return rows


def speed_rows(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        base = r["gym_sokoban"]
        row = {"measure": f"Sokoban generation, {r['setting']}, levels/s", "ours": r["ours"]["levels_per_s"],
               "baseline_name": "gym-sokoban generate_room", "baseline": base.get("levels_per_s")}
        if "error" in base:
            row["note"] = f"gym-sokoban {base['error']}"
        elif base["levels_per_s"] > 0:
            row["ratio"] = r["ours"]["levels_per_s"] / base["levels_per_s"]
        out.append(row)
    return out


def to_markdown(rows: list[dict], command: str, seconds: float, max_levels: int) -> str:
    lines = [
        "# Sokoban level generation: erl_envs vs gym-sokoban",
        "",
        f"Generated by `{command}`.",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, numpy "
        f"{np.__version__}. Up to {max_levels:,} levels or {seconds:g} s per setting and generator.",
        "Ours checks every level's optimal solution length with a solver; gym-sokoban's generator has no such "
        "control (see the script's docstring), so the ratio compares levels delivered, not identical work.",
        "",
        "| setting | ours levels/s | gym-sokoban levels/s | ratio | ours | gym-sokoban |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        o, g = r["ours"], r["gym_sokoban"]
        if "error" in g:
            lines.append(f"| {r['setting']} | {o['levels_per_s']:,.1f} | {g['error']} | n/a | {o['note']} | |")
        else:
            ratio = f"{o['levels_per_s'] / g['levels_per_s']:.1f}" if g["levels_per_s"] else "n/a"
            lines.append(f"| {r['setting']} | {o['levels_per_s']:,.1f} | {g['levels_per_s']:,.1f} | {ratio} | "
                         f"{o['levels']} levels, {o['note']} | {g['levels']} levels, {g['note']} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gym-sokoban", default=os.environ.get("GYM_SOKOBAN"),
                        help="gym-sokoban wheel or directory (from `pip download --no-deps gym-sokoban`)")
    parser.add_argument("--quick", action="store_true", help="1 s per setting")
    parser.add_argument("--seconds", type=float, default=None, help="time per setting and generator (default 10)")
    parser.add_argument("--max-levels", type=int, default=5000)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "sokoban_gen.md")
    args = parser.parse_args(argv)
    seconds = args.seconds or (1.0 if args.quick else 10.0)
    rows = measure(args.gym_sokoban, seconds, args.max_levels)
    shown = [a for a in argv if not a.startswith("--gym-sokoban") and a != args.gym_sokoban]
    report = to_markdown(rows, " ".join(["python benchmarks/speed/bench_sokoban_gen.py", *shown]), seconds, args.max_levels)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    args.output.with_suffix(".json").write_text(json.dumps({"results": rows, "rows": speed_rows(rows)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
