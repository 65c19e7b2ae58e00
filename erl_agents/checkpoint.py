"""Checkpoints that resume a run exactly: weights, optimizer, scheduler, every RNG, the reflection memory, metrics.

A checkpoint is two files, ``step_XXXXXX.pt`` and its manifest ``step_XXXXXX.json`` (size and sha256 of the
``.pt``). Both are written to a temporary name, flushed to disk and renamed (``os.replace`` is atomic), and the
manifest goes last, so a process killed at any moment leaves either a complete, verifiable checkpoint or one
without a manifest, which loading treats as unfinished. Loading checks the manifest before unpickling anything, so
a truncated or corrupted file is reported by name instead of resuming from garbage, and
``load_latest_checkpoint`` falls back to the newest checkpoint that verifies.
"""

from __future__ import annotations

import json
import os
import random
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from erl_agents.run_folder import RunFolderError, failure_reason, file_digest, write_atomically
from erl_envs.safe_parse import loads_json, read_text_limited

__all__ = [
    "CorruptCheckpointError",
    "rng_state",
    "set_rng_state",
    "save_checkpoint",
    "list_checkpoints",
    "latest_checkpoint",
    "verify_checkpoint",
    "load_checkpoint",
    "load_latest_checkpoint",
]

_NAME = re.compile(r"^step_(\d+)\.pt$")
_STEP_FILE = re.compile(r"^step_(\d+)\.(pt|json)$")
_TEMP = re.compile(r"^\.step_\d+\.(pt|json)\.tmp$")
_MAX_MANIFEST_BYTES = 1 << 16


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file that is incomplete, truncated or altered since it was written."""


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


def _manifest_path(path: Path) -> Path:
    return path.with_suffix(".json")


def save_checkpoint(folder: str | os.PathLike, step: int, payload: dict[str, Any], keep: int = 2) -> Path:
    """Write ``folder/step_XXXXXX.pt`` and its manifest atomically; keep the newest ``keep`` checkpoints (0: all).

    Leftover temporary files of a save that was killed are removed here.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"cannot create the checkpoint folder {folder}: {failure_reason(exc, folder.parent)}") \
            from exc
    for leftover in folder.iterdir():
        if _TEMP.match(leftover.name):
            leftover.unlink(missing_ok=True)
    path = folder / f"step_{step:06d}.pt"
    manifest = _manifest_path(path)
    # A manifest from an earlier life of this step (a resumed run saving it again) must not vouch for the new file.
    manifest.unlink(missing_ok=True)
    write_atomically(path, lambda f: torch.save({"step": step, **payload}, f))
    sha256, size = file_digest(path)
    record = {"step": step, "file": path.name, "bytes": size, "sha256": sha256}
    write_atomically(manifest, lambda f: f.write(json.dumps(record, indent=2).encode()))
    if keep > 0:
        steps = sorted({int(m.group(1)) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name))})
        for stale in steps[:-keep]:
            for suffix in (".pt", ".json"):
                (folder / f"step_{stale:06d}{suffix}").unlink(missing_ok=True)
    return path


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """Every ``step_XXXXXX.pt`` in ``folder``, oldest first (verified or not)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NAME.match(p.name)), key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    found = list_checkpoints(folder)
    return found[-1] if found else None


def _read_manifest(path: Path, manifest_path: Path) -> dict[str, Any]:
    """The manifest of ``path``, checked field by field; a bad field is a ``CorruptCheckpointError`` naming it."""
    def bad(why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"checkpoint {path}: its manifest {manifest_path.name} {why}")

    try:
        manifest = loads_json(read_text_limited(manifest_path, _MAX_MANIFEST_BYTES, "manifest"))
    except UnicodeDecodeError:
        raise bad("is not UTF-8 text") from None
    except ValueError as exc:
        raise bad(f"is unreadable ({exc})") from None
    if not isinstance(manifest, dict):
        raise bad(f"is not a JSON object (got {type(manifest).__name__})")
    step = int(_NAME.match(path.name).group(1)) if _NAME.match(path.name) else None
    checks = {
        "step": (lambda v: type(v) is int and v >= 0 and (step is None or v == step),
                 f"the checkpoint's step ({step})" if step is not None else "a non-negative integer"),
        "file": (lambda v: v == path.name, repr(path.name)),
        "bytes": (lambda v: type(v) is int and v >= 0, "a non-negative integer"),
        "sha256": (lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None,
                   "64 lowercase hex digits"),
    }
    for name, (check, allowed) in checks.items():
        if name == "file" and name not in manifest:
            continue  # optional: the file name is also implied by the manifest's own name
        if name not in manifest:
            raise bad(f"has no {name!r} field")
        if not check(manifest[name]):
            raise bad(f"field {name!r} is {manifest[name]!r}, expected {allowed}")
    return manifest


def verify_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Check ``path`` against its manifest; returns the manifest or raises ``CorruptCheckpointError`` saying why."""
    path = Path(path)
    manifest_path = _manifest_path(path)
    if not path.is_file():
        raise CorruptCheckpointError(f"checkpoint {path} does not exist")
    if not manifest_path.is_file():
        raise CorruptCheckpointError(f"checkpoint {path} has no manifest {manifest_path.name}: its save did not finish")
    manifest = _read_manifest(path, manifest_path)
    expected_size, expected_sha = manifest["bytes"], manifest["sha256"]
    sha256, size = file_digest(path)
    if size != expected_size:
        raise CorruptCheckpointError(f"checkpoint {path} is truncated or padded: {size} bytes, the manifest says "
                                     f"{expected_size}")
    if sha256 != expected_sha:
        raise CorruptCheckpointError(f"checkpoint {path} is corrupt: its sha256 does not match the manifest")
    return manifest


def load_checkpoint(path: str | os.PathLike, verify: bool = True) -> dict[str, Any]:
    """Verify (unless ``verify=False``) and load one checkpoint onto the CPU."""
    path = Path(path)
    manifest = verify_checkpoint(path) if verify else None
    try:
        # Our own files hold numpy/python RNG states, which the safe weights-only loader refuses.
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises several types for a damaged archive
        raise CorruptCheckpointError(f"checkpoint {path} cannot be loaded ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or "step" not in state:
        raise CorruptCheckpointError(f"checkpoint {path} does not hold a training state (no 'step' entry)")
    if manifest is not None and state["step"] != manifest["step"]:
        raise CorruptCheckpointError(f"checkpoint {path} holds step {state['step']}, its manifest says "
                                     f"{manifest['step']}")
    return state


def load_latest_checkpoint(folder: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint in ``folder`` that verifies and loads, with a warning naming each newer one skipped.

    Raises ``FileNotFoundError`` when there is no checkpoint and ``CorruptCheckpointError`` when none is usable.
    """
    found = list_checkpoints(folder)
    if not found:
        raise FileNotFoundError(f"no checkpoint in {folder}")
    problems = []
    for path in reversed(found):
        try:
            state = load_checkpoint(path)
        except CorruptCheckpointError as exc:
            problems.append(str(exc))
            warnings.warn(f"{exc}; trying the previous checkpoint", RuntimeWarning, stacklevel=2)
            continue
        return path, state
    raise CorruptCheckpointError(f"no usable checkpoint in {folder}:\n  " + "\n  ".join(problems))
