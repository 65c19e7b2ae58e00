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


def env_rows(window: int, windows: int) -> list[str]:
    cases = env_cases()
    runners, skipped = {}, {}
    for name, env_id, kwargs, actions, render, options in cases:
        try:
            runners[name] = _Runner(gym.make(env_id, **kwargs), actions, render, options)
        except Exception as err:  # noqa: BLE001  (a missing env is a row of the table, not a crash)
            skipped[name] = f"{type(err).__name__}: {err}"
    baseline_name = cases[0][0]
    ratios: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(windows):
        times = {name: runner.window(window) for name, runner in runners.items()}
        for name, seconds in times.items():
            if baseline_name in times:
                ratios[name].append(times[baseline_name] / seconds)
    for runner in runners.values():
        runner.env.close()
    rows = ["| env | steps/s | ratio to baseline | per-round ratio (min-max) | us per step + render | us per reset "
            "| mean episode length |",
            "|---|---|---|---|---|---|---|"]
    baseline = runners[baseline_name].steps / runners[baseline_name].elapsed if baseline_name in runners else None
    for name, *_ in cases:
        if name in skipped:
            rows.append(f"| {name} | skipped: not available ({skipped[name]}) | | | | | |")
            continue
        r = runners[name]
        rate = r.steps / r.elapsed
        episodes = max(r.episodes, 1)
        ratio = f"{rate / baseline:.2f}" if baseline else "n/a"
        spread = f"{min(ratios[name]):.2f}-{max(ratios[name]):.2f}" if ratios[name] else "n/a"
        rows.append(f"| {name} | {rate:,.0f} | {ratio} | {spread} | {(r.elapsed - r.in_reset) / r.steps * 1e6:.2f} "
                    f"| {r.in_reset / episodes * 1e6:.2f} | {r.steps / episodes:.2f} |")
    return rows


def generation_rows(seconds: float, max_levels: int) -> list[str]:
    rows = ["| setting | levels/s | levels | mean optimal moves |", "|---|---|---|---|"]
    try:
        from erl_envs.grid import sokoban_generator
    except Exception as err:  # noqa: BLE001
        for name, _, _ in GENERATION_SETTINGS:
            rows.append(f"| {name} | skipped: not available ({type(err).__name__}: {err}) | | |")
        return rows
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
            rows.append(f"| {name} | failed ({type(err).__name__}: {err}) | {len(moves)} | |")
            continue
        elapsed = time.perf_counter() - start
        rows.append(f"| {name} | {len(moves) / elapsed:,.1f} | {len(moves)} | {np.mean(moves):.1f} |")
    return rows


def machine() -> str:
    return (f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, "
            f"numpy {np.__version__}, gymnasium {gym.__version__}")


def load() -> str:
    """The 1-minute load average: a shared machine's other jobs slow every env, and the ratios are what is robust."""
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--window", type=int, default=None, help="steps per env per round (default 2,000; quick 500)")
    parser.add_argument("--windows", type=int, default=None, help="rounds over all envs (default 40; quick 4)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "envs.md")
    args = parser.parse_args(argv)
    window = args.window or (500 if args.quick else 2_000)
    windows = args.windows or (4 if args.quick else 40)
    gen_seconds, gen_levels = (1.0, 200) if args.quick else (10.0, 5_000)

    command = "python benchmarks/speed/bench_envs.py" + (" --quick" if args.quick else "")
    lines = [
        "# Text grid envs: step throughput and Sokoban generation",
        "",
        f"Generated by `{command}`.",
        f"Machine: {machine()}.",
        "",
        f"## Step + text render, random valid actions, auto-reset ({windows} interleaved rounds of {window:,} steps "
        f"per env)",
        "",
        f"Load average at the start: {load()} on {os.cpu_count()} CPUs.",
        "",
        *env_rows(window, windows),
        "",
        f"Load average at the end: {load()}.",
        "",
        f"## Sokoban generation (up to {gen_levels:,} levels or {gen_seconds:g} s per setting)",
        "",
        *generation_rows(gen_seconds, gen_levels),
        "",
    ]
    report = "\n".join(lines)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
