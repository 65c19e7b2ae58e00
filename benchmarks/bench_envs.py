"""Benchmark the text grid envs against Gymnasium's FrozenLake, and Sokoban level generation.

    python benchmarks/bench_envs.py            # full run (about a minute)
    python benchmarks/bench_envs.py --quick    # a smoke run of a few seconds

Env throughput is steps per second of ``step`` plus a text render, with uniformly random valid actions and a reset
whenever an episode ends (so reset cost, including level generation, is part of it); the table also splits the time
into microseconds per step (+ render) and per reset. The baseline is Gymnasium's
``FrozenLake-v1`` (``render_mode="ansi"``, ``is_slippery=False``, ``render()`` called after every step); our envs
return their text as the observation, so they are only stepped. All envs are built with ``gymnasium.make`` (same
wrappers). Each figure is the best of ``--repeats`` runs, taken round robin over the envs, which suppresses noise
from other processes. Generation
is levels per second of ``erl_envs.sokoban_generator.generate_level`` for each setting. Results also go to
benchmarks/results/envs.md.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import erl_envs  # noqa: E402,F401  (registers the ERL env ids)
from erl_envs.actions import format_action  # noqa: E402

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


def env_throughput(
    env: gym.Env, actions: list, steps: int, render: bool, options: dict | None = None, seed: int = 0
) -> tuple[float, float, float, float]:
    """(steps/s including resets, us per step + render, us per reset, mean episode length) over random actions."""
    rng = np.random.default_rng(seed)
    plan = [actions[i] for i in rng.integers(len(actions), size=steps)]
    env.reset(seed=seed, options=options)
    episodes = 0
    in_reset = 0.0
    clock = time.perf_counter
    start = clock()
    for action in plan:
        _, _, terminated, truncated, _ = env.step(action)
        if render:
            env.render()
        if terminated or truncated:
            t = clock()
            env.reset(options=options)
            in_reset += clock() - t
            episodes += 1
    elapsed = clock() - start
    episodes = max(episodes, 1)
    return steps / elapsed, (elapsed - in_reset) / steps * 1e6, in_reset / episodes * 1e6, steps / episodes


def env_rows(steps: int, repeats: int) -> list[str]:
    text_actions = [format_action(a) for a in range(4)]
    # (row name, env id, make kwargs, actions, render each step, reset options)
    cases = [("Gymnasium FrozenLake-v1 (ansi render)", "FrozenLake-v1",
              dict(render_mode="ansi", is_slippery=False), [0, 1, 2, 3], True, None),
             ("ERL-FrozenLake-v0", "ERL-FrozenLake-v0", {}, text_actions, False, None),
             ("ERL-FrozenLake-v0, fixed 4x4 map (no generation, like the baseline)", "ERL-FrozenLake-v0", {},
              text_actions, False, {"map": GYM_4X4}),
             ("ERL-Sokoban-v0", "ERL-Sokoban-v0", {}, text_actions, False, None)]
    envs, skipped = {}, {}
    for name, env_id, kwargs, *_ in cases:
        try:
            envs[name] = gym.make(env_id, **kwargs)
        except Exception as err:  # noqa: BLE001  (a missing env is a row of the table, not a crash)
            skipped[name] = f"{type(err).__name__}: {err}"
    # Round robin over the envs, keeping each one's best run: a burst of load from other processes then slows
    # one run of every env rather than every run of one env.
    best: dict[str, tuple[float, ...]] = {}
    for _ in range(repeats):
        for name, _, _, actions, render, options in cases:
            if name in envs:
                run = env_throughput(envs[name], actions, steps, render, options)
                best[name] = max(best.get(name, run), run, key=lambda r: r[0])
    for env in envs.values():
        env.close()
    rows = ["| env | steps/s | ratio to baseline | us per step + render | us per reset | mean episode length |",
            "|---|---|---|---|---|---|"]
    baseline = best[cases[0][0]][0] if cases[0][0] in best else None
    for name, *_ in cases:
        if name in skipped:
            rows.append(f"| {name} | skipped: not available ({skipped[name]}) | | | | |")
        else:
            rate, step_us, reset_us, length = best[name]
            ratio = f"{rate / baseline:.2f}" if baseline else "n/a"
            rows.append(f"| {name} | {rate:,.0f} | {ratio} | {step_us:.2f} | {reset_us:.2f} | {length:.2f} |")
    return rows


def generation_rows(seconds: float, max_levels: int) -> list[str]:
    rows = ["| setting | levels/s | levels | mean optimal moves |", "|---|---|---|---|"]
    try:
        from erl_envs import sokoban_generator
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--steps", type=int, default=None, help="steps per env run (default 30,000; quick 5,000)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per env, best kept (default 5; quick 1)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "envs.md")
    args = parser.parse_args(argv)
    steps = args.steps or (5_000 if args.quick else 30_000)
    repeats = args.repeats or (1 if args.quick else 5)
    gen_seconds, gen_levels = (1.0, 200) if args.quick else (10.0, 5_000)

    command = "python benchmarks/bench_envs.py" + (" --quick" if args.quick else "")
    lines = [
        "# Text grid envs: step throughput and Sokoban generation",
        "",
        f"Generated by `{command}`.",
        f"Machine: {machine()}.",
        "",
        f"## Step + text render, random valid actions, auto-reset ({steps:,} steps, best of {repeats})",
        "",
        *env_rows(steps, repeats),
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
