"""The ERL paper's test sets, shipped as package data (``erl_envs/data``, see its NOTICE.md), and its train set.

The test sets travel with the package so that evaluation on the paper's tasks needs no download and no
``../shared`` folder; the Sokoban train set (10,000 layouts) does not, and is found, when present, in the paper_tasks
folder of the shared data (``$ERL_PAPER_TASKS``, else ``$ERL_SHARED/paper_tasks``, else ``../shared/paper_tasks``
beside the checkout).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

__all__ = [
    "DATA_DIR",
    "sokoban_test_layouts",
    "frozenlake_test_rows",
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
