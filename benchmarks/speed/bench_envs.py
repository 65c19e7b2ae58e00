"""Benchmark the text grid envs against Gymnasium's FrozenLake, and Sokoban level generation.

    python benchmarks/speed/bench_envs.py            # full run (a minute or two)
    python benchmarks/speed/bench_envs.py --quick    # a smoke run of a few seconds

Env throughput is steps per second of ``step`` plus a text render, with uniformly random valid actions and a reset
whenever an episode ends (so reset cost, including level generation, is part of it); the table also splits the time
into microseconds per step (+ render) and per reset. The baseline is Gymnasium's ``FrozenLake-v1``
(``render_mode="ansi"``, ``is_slippery=False``, ``render()`` called after every step); our envs return their text as
the observation, so they are only stepped. All envs are built with ``gymnasium.make`` (same wrappers) and play the
paper's protocol (``action_format="paper"``, the replies are ``format_action``'s triple-backtick moves).

Timing is interleaved: ``--windows`` rounds, each running every env for ``--window`` steps in turn (every env keeps
its episode going from one window to the next), and each env's figure sums all its windows. Load from other
processes then falls on every env alike instead of on whichever env's block it hit; the table also gives the
spread of the per-round ratios to the baseline. Generation is levels per second of
``erl_envs.grid.sokoban_generator.generate_level`` for each setting. Results also go to benchmarks/results/envs.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import erl_envs  # noqa: E402,F401  (registers the ERL env ids)
from erl_envs.grid.actions import format_action  # noqa: E402
from erl_envs.paper_tasks import shared_paper_file, sokoban_test_layouts  # noqa: E402

# Gymnasium's default FrozenLake map, for a row that leaves out our level generation.
GYM_4X4 = ["SFFF", "FHFH", "FFFH", "HFFG"]

# (row name, generator function name, settings). ``sample_level`` is what an env calls: the level and the length of
# its optimal solution, without the solution.
GENERATION_SETTINGS = [
    ("paper", "generate_level", {}),
    ("paper, optimal length only (sample_level, as the env)", "sample_level", {}),
    ("10x10, 3 boxes, 10% walls, 10-40 moves", "generate_level",
     dict(size=(10, 10), num_boxes=3, interior_walls=0.1, min_moves=10, max_moves=40)),
]


class _Runner:
    """One env under test: random valid actions, auto-reset, and the time spent stepping and resetting."""

    def __init__(self, env: gym.Env, actions: list, render: bool, options: dict | None, seed: int = 0):
        self.env, self.actions, self.render, self.options = env, actions, render, options
        self.rng = np.random.default_rng(seed)
        self.env.reset(seed=seed, options=options)
        self.steps = self.episodes = 0
        self.elapsed = self.in_reset = 0.0

    def window(self, steps: int) -> float:
        """Run ``steps`` steps; return their wall time."""
        env, actions, options, render = self.env, self.actions, self.options, self.render
        plan = [actions[i] for i in self.rng.integers(len(actions), size=steps)]
        clock = time.perf_counter
        in_reset = 0.0
        start = clock()
        for action in plan:
            _, _, terminated, truncated, _ = env.step(action)
            if render:
                env.render()
            if terminated or truncated:
                t = clock()
                env.reset(options=options)
                in_reset += clock() - t
                self.episodes += 1
        elapsed = clock() - start
        self.steps += steps
        self.elapsed += elapsed
        self.in_reset += in_reset
        return elapsed


def env_cases() -> list[tuple]:
    """(row name, env id, make kwargs, actions, render each step, reset options)."""
    text_actions = [format_action(a) for a in range(4)]
    cases = [("Gymnasium FrozenLake-v1 (ansi render)", "FrozenLake-v1",
              dict(render_mode="ansi", is_slippery=False), [0, 1, 2, 3], True, None),
             ("ERL-FrozenLake-v0 (paper generator, the default)", "ERL-FrozenLake-v0", {}, text_actions, False, None),
             ("ERL-FrozenLake-v0, generator=\"feasible\"", "ERL-FrozenLake-v0", {"generator": "feasible"},
              text_actions, False, None),
             ("ERL-FrozenLake-v0, fixed 4x4 map (no generation, like the baseline)", "ERL-FrozenLake-v0", {},
              text_actions, False, {"map": GYM_4X4}),
             ("ERL-Sokoban-v0 (generator: paper size mix, test layouts excluded; the default)", "ERL-Sokoban-v0", {},
              text_actions, False, None),
             ("ERL-Sokoban-v0, the paper's 100 test layouts (packaged)", "ERL-Sokoban-v0",
              {"levels": ["\n".join(rows) for rows in sokoban_test_layouts()]}, text_actions, False, None)]
    train = shared_paper_file("sokoban_train.parquet")
    if train is not None:
        cases.append(("ERL-Sokoban-v0, the paper's 10,000 train layouts (sokoban_train.parquet)", "ERL-Sokoban-v0",
                      {"levels": str(train)}, text_actions, False, None))
    return cases


def measure_envs(window: int, windows: int) -> dict:
    """Raw timings: per env, each round's wall time, and its steps, episodes and time spent in reset."""
    cases = env_cases()
    runners, skipped = {}, {}
    for name, env_id, kwargs, actions, render, options in cases:
        try:
            runners[name] = _Runner(gym.make(env_id, **kwargs), actions, render, options)
        except Exception as err:  # noqa: BLE001  (a missing env is a row of the table, not a crash)
            skipped[name] = f"{type(err).__name__}: {err}"
    rounds: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(windows):
        for name, runner in runners.items():
            rounds[name].append(runner.window(window))
    for runner in runners.values():
        runner.env.close()
    envs = []
    for name, *_ in cases:
        if name in skipped:
            envs.append({"name": name, "skipped": skipped[name]})
            continue
        r = runners[name]
        envs.append({"name": name, "round_seconds": rounds[name], "steps": r.steps, "episodes": r.episodes,
                     "reset_seconds": r.in_reset, "elapsed_seconds": r.elapsed})
    return {"window": window, "windows": windows, "baseline": cases[0][0], "envs": envs}


def env_rows(raw: dict) -> list[str]:
    """The throughput table, computed from ``measure_envs``'s raw timings."""
    rows = ["| env | steps/s | ratio to baseline | per-round ratio (min-max) | us per step + render | us per reset "
            "| mean episode length |",
            "|---|---|---|---|---|---|---|"]
    by_name = {e["name"]: e for e in raw["envs"]}
    base = by_name.get(raw["baseline"])
    baseline = base["steps"] / base["elapsed_seconds"] if base and "skipped" not in base else None
    for e in raw["envs"]:
        if "skipped" in e:
            rows.append(f"| {e['name']} | skipped: not available ({e['skipped']}) | | | | | |")
            continue
        rate = e["steps"] / e["elapsed_seconds"]
        episodes = max(e["episodes"], 1)
        ratio = f"{rate / baseline:.2f}" if baseline else "n/a"
        per_round = [b / t for b, t in zip(base["round_seconds"], e["round_seconds"])] if baseline else []
        spread = f"{min(per_round):.2f}-{max(per_round):.2f}" if per_round else "n/a"
        rows.append(f"| {e['name']} | {rate:,.0f} | {ratio} | {spread} "
                    f"| {(e['elapsed_seconds'] - e['reset_seconds']) / e['steps'] * 1e6:.2f} "
                    f"| {e['reset_seconds'] / episodes * 1e6:.2f} | {e['steps'] / episodes:.2f} |")
    return rows


def measure_generation(seconds: float, max_levels: int) -> list[dict]:
    """Raw generation runs: per setting, how many levels had each optimal length, and the seconds they took."""
    runs = []
    try:
        from erl_envs.grid import sokoban_generator
    except Exception as err:  # noqa: BLE001
        return [{"name": name, "skipped": f"{type(err).__name__}: {err}"} for name, _, _ in GENERATION_SETTINGS]
    for name, function, setting in GENERATION_SETTINGS:
        generate = getattr(sokoban_generator, function)
        rng = np.random.default_rng(0)
        moves = []
        start = time.perf_counter()
        try:
            while len(moves) < max_levels and time.perf_counter() - start < seconds:
                _, result = generate(rng, **setting)
                moves.append(result if isinstance(result, int) else len(result))
        except Exception as err:  # noqa: BLE001
            runs.append({"name": name, "failed": f"{type(err).__name__}: {err}", "moves": _histogram(moves)})
            continue
        runs.append({"name": name, "moves": _histogram(moves), "seconds": time.perf_counter() - start})
    return runs


def _histogram(moves: list[int]) -> dict[str, int]:
    """{optimal length: levels}, keys as JSON strings."""
    return {str(k): moves.count(k) for k in sorted(set(moves))}


def generation_rows(runs: list[dict]) -> list[str]:
    rows = ["| setting | levels/s | levels | mean optimal moves |", "|---|---|---|---|"]
    for run in runs:
        if "skipped" in run:
            rows.append(f"| {run['name']} | skipped: not available ({run['skipped']}) | | |")
        elif "failed" in run:
            rows.append(f"| {run['name']} | failed ({run['failed']}) | {sum(run['moves'].values())} | |")
        else:
            levels = sum(run["moves"].values())
            mean = sum(int(k) * count for k, count in run["moves"].items()) / levels
            rows.append(f"| {run['name']} | {levels / run['seconds']:,.1f} | {levels} | {mean:.1f} |")
    return rows


def machine() -> str:
    return (f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, "
            f"numpy {np.__version__}, gymnasium {gym.__version__}")


def load() -> str:
    """The 1-minute load average: a shared machine's other jobs slow every env, and the ratios are what is robust."""
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "unknown"


def report(raw: dict) -> str:
    """envs.md, every number computed from the raw results (``--from-json`` rebuilds it from the committed JSON)."""
    env, gen = raw["env_runs"], raw["generation"]
    lines = [
        "# Text grid envs: step throughput and Sokoban generation",
        "",
        f"Generated by `{raw['command']}` (raw timings: `envs.json` beside this file).",
        f"Machine: {raw['machine']}.",
        "",
        f"## Step + text render, random valid actions, auto-reset ({env['windows']} interleaved rounds of "
        f"{env['window']:,} steps per env)",
        "",
        f"Load average at the start: {raw['load_start']} on {raw['cpus']} CPUs.",
        "",
        *env_rows(env),
        "",
        f"Load average at the end: {raw['load_end']}.",
        "",
        f"## Sokoban generation (up to {raw['generation_levels']:,} levels or {raw['generation_seconds']:g} s per "
        "setting)",
        "",
        *generation_rows(gen),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--window", type=int, default=None, help="steps per env per round (default 2,000; quick 500)")
    parser.add_argument("--windows", type=int, default=None, help="rounds over all envs (default 40; quick 4)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "envs.md")
    parser.add_argument("--from-json", action="store_true",
                        help="measure nothing: rebuild --output from the raw JSON beside it")
    args = parser.parse_args(argv)
    raw_path = args.output.with_suffix(".json")
    if args.from_json:
        raw = json.loads(raw_path.read_text())
    else:
        window = args.window or (500 if args.quick else 2_000)
        windows = args.windows or (4 if args.quick else 40)
        gen_seconds, gen_levels = (1.0, 200) if args.quick else (10.0, 5_000)
        raw = {"command": "python benchmarks/speed/bench_envs.py" + (" --quick" if args.quick else ""),
               "machine": machine(), "cpus": os.cpu_count(), "load_start": load()}
        raw["env_runs"] = measure_envs(window, windows)
        raw["load_end"] = load()
        raw.update(generation_seconds=gen_seconds, generation_levels=gen_levels,
                   generation=measure_generation(gen_seconds, gen_levels))
    text = report(raw)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if not args.from_json:
        raw_path.write_text(json.dumps(raw) + "\n")
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
