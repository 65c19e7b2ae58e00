"""Checkpoints that resume a run exactly: weights, optimizer, scheduler, every RNG, the reflection memory, metrics.

One file per checkpoint, written to a temporary name and renamed (``os.replace`` is atomic), so a crash mid-save
leaves the previous checkpoint intact and never a half-written one.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["rng_state", "set_rng_state", "save_checkpoint", "latest_checkpoint", "load_checkpoint"]

_NAME = re.compile(r"^step_(\d+)\.pt$")


def rng_state(generator: np.random.Generator) -> dict[str, Any]:
    """Python, NumPy (global and the trainer's own generator) and torch RNG states (CUDA too when present)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "generator": generator.bit_generator.state,
        "torch": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], generator: np.random.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    generator.bit_generator.state = state["generator"]
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(folder: str | os.PathLike, step: int, payload: dict[str, Any], keep: int = 2) -> Path:
    """Write ``folder/step_XXXXXX.pt`` atomically and delete all but the newest ``keep`` checkpoints."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:06d}.pt"
    tmp = folder / f".{path.name}.tmp"
    torch.save({"step": step, **payload}, tmp)
    os.replace(tmp, path)
    old = sorted(p for p in folder.iterdir() if _NAME.match(p.name))[:-keep] if keep > 0 else []
    for stale in old:
        stale.unlink()
    return path


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    folder = Path(folder)
    if not folder.is_dir():
        return None
    found = sorted(p for p in folder.iterdir() if _NAME.match(p.name))
    return found[-1] if found else None


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    # Our own files hold numpy/python RNG states, which the safe weights-only loader refuses.
    return torch.load(path, map_location="cpu", weights_only=False)
