"""Held-out evaluation, the paper's protocol: first attempt only, initial prompt, no reflection, no memory.

The held-out tasks are the paper's test set for the grid games when its folder is given (``../shared/paper_tasks``
in this project) or asked for (``eval_set="paper"``: the copies shipped with erl_envs), else a seeded split whose
seeds training never draws (training seeds are below ``EVAL_SEED_BASE``).
Unseen seeds give unseen grid games, but an env that draws from a fixed pool (HotpotQA's questions) would replay
its training pool: the trainer then builds its evaluation envs from ``eval_env_kwargs`` (other data, another
synthetic world).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import gymnasium as gym
import numpy as np

from erl_agents.models import Policy
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes

__all__ = ["EVAL_SEED_BASE", "Task", "seeded_tasks", "paper_tasks", "evaluate", "merge_eval_results"]

# Training task seeds are drawn from [0, EVAL_SEED_BASE); held-out seeds start here.
EVAL_SEED_BASE = 2**30

Task = tuple  # (seed, reset options or None)


def seeded_tasks(count: int, base: int = EVAL_SEED_BASE) -> list[Task]:
    return [(base + i, None) for i in range(count)]


def paper_tasks(env_id: str, folder: str | os.PathLike | None = None) -> list[Task] | None:
    """The paper's test instances as ``(seed, options)`` for our envs, or ``None`` when there is none for ``env_id``.

    Read from ``folder`` when it holds them (``../shared/paper_tasks``), else from the copies shipped with erl_envs
    (``erl_envs.paper_tasks``). FrozenLake rows are generator parameters (seed, size, p), which our default
    generator turns into the reference's maps; Sokoban layouts are exact.
    """
    from erl_envs import paper_tasks as packaged

    folder = Path(folder) if folder is not None else None
    if env_id.startswith("ERL-FrozenLake"):
        if folder is not None and (folder / "frozenlake_test.parquet").exists():
            import pandas as pd

            rows = [r._asdict() for r in pd.read_parquet(folder / "frozenlake_test.parquet").itertuples()]
        else:
            rows = packaged.frozenlake_test_rows()
        return [(int(r["seed"]), {"size": int(r["size"]), "p": float(r["p"])}) for r in rows]
    if env_id.startswith("ERL-Sokoban"):
        if folder is not None and (folder / "sokoban_test.parquet").exists():
            import pandas as pd

            rows = pd.read_parquet(folder / "sokoban_test.parquet")
            return [(int(r.index), {"level": [str(line) for line in r.layout]}) for r in rows.itertuples()]
        return [(int(r["index"]), {"level": list(r["layout"])}) for r in packaged._sokoban_records()]
    return None


def evaluate(
    policy: Policy,
    envs: Sequence[gym.Env],
    tasks: Sequence[Task],
    samples: int,
    sampling: SamplingParams,
    constrained: bool = False,
    max_seq_len: int = 8192,
    kv_reuse: bool = True,
) -> dict[str, float]:
    """Success rate and mean return of first attempts, ``samples`` per task, in chunks of ``len(envs)`` episodes."""
    resets = [task for task in tasks for _ in range(samples)]
    owners = [i for i in range(len(tasks)) for _ in range(samples)]
    returns, successes, tokens = [], [], 0
    table = ConstraintTable()
    for start in range(0, len(resets), len(envs)):
        chunk = resets[start:start + len(envs)]
        episodes = run_episodes(policy, envs[: len(chunk)], chunk, owners[start:start + len(chunk)], sampling,
                                constrained=constrained, max_seq_len=max_seq_len, table=table, kv_reuse=kv_reuse)
        for episode in episodes:
            returns.append(episode.returns)
            successes.append(float(episode.success))
            tokens += sum(t.num_model_tokens for t in episode.trajectories)
    per_task = np.asarray(successes).reshape(len(tasks), samples).mean(axis=1)
    return {
        "success": float(np.mean(successes)),
        "reward": float(np.mean(returns)),
        "solved_any": float(np.mean(per_task > 0)),
        "episodes": float(len(resets)),
        "tokens": float(tokens),
    }


def merge_eval_results(parts: Sequence[dict[str, float] | None], samples: int) -> dict[str, float]:
    """One result from several ranks' ``evaluate`` results on disjoint task blocks (None: a rank with no tasks).

    Rates over episodes are weighted by episodes, ``solved_any`` (a rate over tasks, ``samples`` episodes each) by
    tasks; counts add up.
    """
    parts = [p for p in parts if p is not None and p["episodes"] > 0]
    if not parts:
        raise ValueError("no rank evaluated any episode: give eval_tasks at least one task")
    episodes = sum(p["episodes"] for p in parts)
    tasks = [p["episodes"] / samples for p in parts]
    return {
        "success": sum(p["success"] * p["episodes"] for p in parts) / episodes,
        "reward": sum(p["reward"] * p["episodes"] for p in parts) / episodes,
        "solved_any": sum(p["solved_any"] * n for p, n in zip(parts, tasks)) / sum(tasks),
        "episodes": episodes,
        "tokens": sum(p["tokens"] for p in parts),
    }
