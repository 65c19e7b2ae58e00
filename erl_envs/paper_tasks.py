"""The ERL paper's test sets, shipped as package data (``erl_envs/data``, see its NOTICE.md), and its train sets.

The test sets travel with the package so that evaluation on the paper's tasks needs no download and no
``../shared`` folder; the Sokoban train set (10,000 layouts) does not, and is found, when present, in the paper_tasks
folder of the shared data (``$ERL_PAPER_TASKS``, else ``$ERL_SHARED/paper_tasks``, else ``../shared/paper_tasks``
beside the checkout). The FrozenLake train set needs no file: its 10,000 rows are generator parameters drawn from a
fixed NumPy stream, which ``frozenlake_train_rows`` draws again.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = [
    "DATA_DIR",
    "sokoban_test_layouts",
    "frozenlake_test_rows",
    "frozenlake_train_rows",
    "frozenlake_test_maps",
    "shared_paper_file",
]

DATA_DIR = Path(__file__).resolve().parent / "data"


def _jsonl(name: str) -> list[dict]:
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"the packaged paper test set {path} is missing: reinstall erl-gym")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@lru_cache(maxsize=1)
def _sokoban_records() -> tuple[dict, ...]:
    return tuple(_jsonl("sokoban_test.jsonl"))


def sokoban_test_layouts() -> list[list[str]]:
    """The paper's 100 Sokoban test layouts, each a list of XSB rows, in the paper's order."""
    return [list(record["layout"]) for record in _sokoban_records()]


def frozenlake_test_rows() -> list[dict]:
    """The paper's 100 FrozenLake test rows: ``seed``, ``size``, ``p``, ``index`` and the reference's ``map``."""
    return _jsonl("frozenlake_test.jsonl")


@lru_cache(maxsize=1)
def _frozenlake_rows() -> tuple[tuple[dict, ...], tuple[dict, ...]]:
    # The reference's data preparation seeds NumPy's global generator with 42 and draws, in this order, the seeds of
    # 10,000 train and 100 test rows (integers in [0, 100000)), their sizes ([2, 10)) and their p ([0.6, 0.85)). The
    # legacy RandomState stream is frozen by NumPy's compatibility policy, so the same calls give the same rows
    # (checked against the reference's train file and the shipped test rows in tests/envs/test_paper_tasks.py).
    stream = np.random.RandomState(42)
    seeds = stream.randint(0, 100_000, size=10_000), stream.randint(0, 100_000, size=100)
    sizes = stream.randint(2, 10, size=10_000), stream.randint(2, 10, size=100)
    ps = stream.uniform(0.6, 0.85, size=10_000), stream.uniform(0.6, 0.85, size=100)
    train, test = ([{"seed": int(s), "size": int(n), "p": float(p), "index": i}
                    for i, (s, n, p) in enumerate(zip(seeds[k], sizes[k], ps[k]))] for k in (0, 1))
    return tuple(train), tuple(test)


def frozenlake_train_rows() -> list[dict]:
    """The paper's 10,000 FrozenLake training rows (``seed``, ``size``, ``p``, ``index``), in the reference's order;
    ``reset(seed=seed, options={"size": size, "p": p})`` plays the reference's map of each."""
    return [dict(row) for row in _frozenlake_rows()[0]]


@lru_cache(maxsize=1)
def frozenlake_test_maps() -> frozenset[str]:
    """The paper's FrozenLake test maps (97 distinct among the 100 rows), each flattened to one S/F/H/G string."""
    return frozenset("".join(row["map"]) for row in frozenlake_test_rows())


def shared_paper_file(name: str) -> Path | None:
    """A file of the shared paper_tasks folder (e.g. ``sokoban_train.parquet``), or None when it is not there."""
    candidates = []
    if os.environ.get("ERL_PAPER_TASKS"):
        candidates.append(Path(os.environ["ERL_PAPER_TASKS"]))
    if os.environ.get("ERL_SHARED"):
        candidates.append(Path(os.environ["ERL_SHARED"]) / "paper_tasks")
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "paper_tasks")
    for folder in candidates:
        if (folder / name).is_file():
            return folder / name
    return None
