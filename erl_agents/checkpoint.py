"""Checkpoints that resume a run exactly: weights, optimizer, scheduler, every RNG, the reflection memory, metrics.

A checkpoint is two files, ``step_XXXXXX.safetensors`` and its manifest ``step_XXXXXX.json`` (size and sha256 of the
first). Both are written to a temporary name, flushed to disk and renamed (``os.replace`` is atomic), and the
manifest goes last, so a process killed at any moment leaves either a complete, verifiable checkpoint or one
without a manifest, which loading treats as unfinished. Loading checks the manifest before reading anything, so
a truncated or corrupted file is reported by name instead of resuming from garbage, and
``load_latest_checkpoint`` falls back to the newest checkpoint that verifies.

Loading a checkpoint never runs code, whoever wrote the file (run folders travel between people and machines, and
a manifest only proves that the file is the one its writer meant). The file is safetensors: every tensor of the
state (weights, optimizer moments, torch RNG states) as raw data, plus one ``uint8`` tensor holding everything else
as JSON (``encode_state``): dicts, lists, strings, numbers, booleans and null, with tagged objects for the few other
types a training state holds (tuples, dicts with non-string keys, numeric numpy arrays, non-finite floats, tensor
references). Decoding builds only those types. Checkpoints of older erl-gym versions (``step_XXXXXX.pt``, a pickle,
which can run any code when loaded) are refused by name, never opened.

A sharded run (``--sharding fsdp``) writes a folder instead, ``step_XXXXXX/``: ``shards/`` holds one safetensors file
per rank, written by ``torch.distributed.checkpoint`` (its JSON header says where the rank's pieces sit in the
whole tensors, so any number of ranks can read them back), and ``state.safetensors`` the rest of the state as
above. Its manifest ``step_XXXXXX.json`` lists every file with its size and sha256 and is written last, once all
ranks have written; a file it does not list (in ``shards/`` every file would be read) makes the checkpoint corrupt.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from erl_agents.run_folder import (RunFolderError, failure_reason, file_digest, write_atomically,
                                   write_file_atomically)
from erl_envs.safe_parse import loads_json, read_text_limited

__all__ = [
    "CorruptCheckpointError",
    "rng_state",
    "set_rng_state",
    "encode_state",
    "decode_state",
    "save_checkpoint",
    "save_sharded_checkpoint",
    "list_checkpoints",
    "latest_checkpoint",
    "verify_checkpoint",
    "load_checkpoint",
    "load_latest_checkpoint",
]

SUFFIX = ".safetensors"
_NAME = re.compile(r"^step_(\d+)\.(safetensors|pt)$")
_STEP_FILE = re.compile(r"^step_(\d+)\.(safetensors|pt|json)$")
_TEMP = re.compile(r"^\.step_\d+\.(safetensors|pt|json)\.tmp$")
_DIR = re.compile(r"^step_(\d+)$")  # a sharded checkpoint's folder
SHARDS = "shards"
STATE_FILE = "state.safetensors"
_MAX_MANIFEST_BYTES = 1 << 16
_MAX_SHARDED_MANIFEST_BYTES = 1 << 22  # a line per file: room for thousands of ranks
_STATE_KEY = "erl/state.json"  # the tensor holding the JSON part of a checkpoint
_FORMAT = {"format": "erl-gym checkpoint", "version": "2"}
# numpy arrays a checkpoint may hold (the legacy RNG's key): plain numbers only, never object arrays.
_ARRAY_KINDS = "biuf"


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file that is incomplete, truncated, altered since it was written, or not a checkpoint at all."""


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


# --- the state as JSON and tensors -------------------------------------------------------------------------------


def encode_state(value: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """``value`` as JSON-ready data and the tensors it references (``{"$tensor": name}``).

    A tensor met twice (tied weights) is stored once; a tensor that shares memory with another one in any other way
    is copied, since safetensors stores each tensor's bytes once and refuses overlapping ones.
    """
    tensors: dict[str, torch.Tensor] = {}
    names: dict[tuple, str] = {}
    storages: set[tuple] = set()

    def tensor_name(tensor: torch.Tensor, path: str) -> str:
        view = (tensor.device, tensor.dtype, tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if tensor.numel() and view in names:
            return names[view]
        data = tensor.detach()
        storage = (tensor.device, data.untyped_storage().data_ptr())
        if storage in storages or not data.is_contiguous():
            data = data.clone(memory_format=torch.contiguous_format)
        storages.add((data.device, data.untyped_storage().data_ptr()))
        name = path or "tensor"
        while name in tensors:
            name += "'"
        tensors[name] = data.to("cpu")
        if tensor.numel():
            names[view] = name
        return name

    def encode(item: Any, path: str) -> Any:
        if isinstance(item, torch.Tensor):
            return {"$tensor": tensor_name(item, path)}
        if item is None or isinstance(item, (bool, str)):
            return item
        if isinstance(item, (int, np.integer)) and not isinstance(item, np.bool_):
            return int(item)
        if isinstance(item, np.bool_):
            return bool(item)
        if isinstance(item, (float, np.floating)):
            return float(item) if math.isfinite(item) else {"$float": repr(float(item))}
        if isinstance(item, np.ndarray) and item.dtype.kind in _ARRAY_KINDS:
            return {"$ndarray": item.tolist(), "dtype": item.dtype.name}
        if isinstance(item, tuple):
            return {"$tuple": [encode(v, f"{path}/{i}") for i, v in enumerate(item)]}
        if isinstance(item, list):
            return [encode(v, f"{path}/{i}") for i, v in enumerate(item)]
        if isinstance(item, dict):
            if all(type(k) is str and not k.startswith("$") for k in item):
                return {k: encode(v, f"{path}/{k}" if path else k) for k, v in item.items()}
            return {"$dict": [[encode(k, f"{path}/key"), encode(v, f"{path}/{k}")] for k, v in item.items()]}
        raise TypeError(f"a checkpoint cannot hold a {type(item).__name__} (at {path or 'the top'}): only tensors, "
                        "numeric numpy arrays, dicts, lists, tuples, strings, numbers, booleans and None")

    return encode(value, ""), tensors


def decode_state(data: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of ``encode_state``; builds nothing but plain data and the given tensors (``ValueError`` on a
    tag it does not know or a tensor that is not there)."""
    def decode(item: Any) -> Any:
        if isinstance(item, list):
            return [decode(v) for v in item]
        if not isinstance(item, dict):
            return item
        tags = [k for k in item if k.startswith("$")]
        if not tags:
            return {k: decode(v) for k, v in item.items()}
        tag = tags[0]
        if tag == "$tensor" and set(item) == {"$tensor"} and isinstance(item["$tensor"], str):
            if item["$tensor"] not in tensors:
                raise ValueError(f"the state refers to a tensor {item['$tensor']!r:.80} that the file does not hold")
            return tensors[item["$tensor"]]
        if tag == "$tuple" and set(item) == {"$tuple"} and isinstance(item["$tuple"], list):
            return tuple(decode(v) for v in item["$tuple"])
        if tag == "$dict" and set(item) == {"$dict"} and isinstance(item["$dict"], list):
            pairs = [decode(pair) for pair in item["$dict"]]
            if not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
                raise ValueError("a tagged dict must hold [key, value] pairs")
            try:
                return dict(pairs)
            except TypeError:
                raise ValueError("a tagged dict has a key that is not a string, number or tuple") from None
        if tag == "$float" and set(item) == {"$float"} and item["$float"] in ("nan", "inf", "-inf"):
            return float(item["$float"])
        if tag == "$ndarray" and set(item) == {"$ndarray", "dtype"}:
            dtype = np.dtype(item["dtype"]) if item["dtype"] in _ARRAY_DTYPES else None
            if dtype is None:
                raise ValueError(f"a numpy array of dtype {item['dtype']!r:.40} is not allowed in a checkpoint")
            return np.array(item["$ndarray"], dtype=dtype)
        raise ValueError(f"unknown tagged object {sorted(item)!r:.120} in the checkpoint state")

    return decode(data)


_ARRAY_DTYPES = frozenset(np.dtype(code).name for code in "?bBhHiIlLqQefd")


def _manifest_path(path: Path) -> Path:
    return path.with_suffix(".json")


def save_checkpoint(folder: str | os.PathLike, step: int, payload: dict[str, Any], keep: int = 2) -> Path:
    """Write ``folder/step_XXXXXX.safetensors`` and its manifest atomically; keep the newest ``keep`` checkpoints
    (0: all). ``payload`` holds tensors and plain data (see ``encode_state``).

    Leftover temporary files of a save that was killed are removed here.
    """
    folder = Path(folder)
    _prepare_folder(folder, step)
    path = folder / f"step_{step:06d}{SUFFIX}"
    _write_state_file(path, {"step": step, **payload})
    sha256, size = file_digest(path)
    record = {"step": step, "file": path.name, "bytes": size, "sha256": sha256}
    write_atomically(_manifest_path(path), lambda f: f.write(json.dumps(record, indent=2).encode()))
    _prune(folder, keep)
    return path


def _write_state_file(path: Path, value: dict[str, Any]) -> None:
    """``value`` as one safetensors file: its tensors, and the rest as JSON in a byte tensor (atomically)."""
    from safetensors.torch import save_file

    state, tensors = encode_state(value)
    if _STATE_KEY in tensors:
        raise ValueError(f"{_STATE_KEY!r} is a reserved name in a checkpoint")
    text = json.dumps(state, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")
    tensors[_STATE_KEY] = torch.frombuffer(bytearray(text), dtype=torch.uint8) if text else torch.zeros(0)
    write_file_atomically(path, lambda tmp: save_file(tensors, str(tmp), metadata=_FORMAT))


def _prepare_folder(folder: Path, step: int) -> None:
    """Create ``folder``, remove leftovers of a killed save, and whatever an earlier life of ``step`` left (a resumed
    run saving it again): its manifest must not vouch for the new files."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"cannot create the checkpoint folder {folder}: {failure_reason(exc, folder.parent)}") \
            from exc
    for leftover in folder.iterdir():
        if _TEMP.match(leftover.name):
            leftover.unlink(missing_ok=True)
    (folder / f"step_{step:06d}.json").unlink(missing_ok=True)
    shutil.rmtree(folder / f"step_{step:06d}", ignore_errors=True)


def _prune(folder: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints, files and folders alike (0: all)."""
    if keep <= 0:
        return
    steps = sorted({int(m.group(1)) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name) or _DIR.match(p.name))})
    for stale in steps[:-keep]:
        for suffix in (SUFFIX, ".pt", ".json"):
            (folder / f"step_{stale:06d}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(folder / f"step_{stale:06d}", ignore_errors=True)


def save_sharded_checkpoint(folder: str | os.PathLike, step: int, write_shards: Callable[[Path], dict[str, Any]],
                            payload: dict[str, Any] | None, world, keep: int = 2) -> Path:
    """Write the folder checkpoint ``folder/step_XXXXXX/``; every rank calls this (``world``: the ranks).

    ``write_shards(shards_folder)`` runs on every rank and writes its shards (a collective); what it returns on rank
    0 joins ``payload`` (rank 0's; None elsewhere) in ``state.safetensors``. The manifest goes last.
    """
    folder = Path(folder)
    path = folder / f"step_{step:06d}"
    if world.is_main:
        _prepare_folder(folder, step)
    world.barrier()
    extra = write_shards(path / SHARDS)
    if world.is_main:
        _write_state_file(path / STATE_FILE, {"step": step, **(payload or {}), **extra})
        files = {}
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            sha256, size = file_digest(file)
            files[file.relative_to(path).as_posix()] = {"bytes": size, "sha256": sha256}
        record = {"step": step, "folder": path.name, "files": files}
        write_atomically(_manifest_path(path), lambda f: f.write(json.dumps(record, indent=1).encode()))
        _prune(folder, keep)
    world.barrier()
    return path


def _step_of(path: Path) -> int:
    return int((_NAME.match(path.name) or _DIR.match(path.name)).group(1))


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """Every ``step_XXXXXX.safetensors`` and sharded ``step_XXXXXX/`` in ``folder`` (and old ``.pt`` ones, which
    loading refuses), oldest first, verified or not."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _NAME.match(p.name) or (_DIR.match(p.name) and p.is_dir())]
    return sorted(found, key=_step_of)


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


def _verify_sharded(path: Path, manifest_path: Path) -> dict[str, Any]:
    """A folder checkpoint against its manifest: the same files, each of the listed size and sha256."""
    def bad(why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"checkpoint {path}: {why}")

    try:
        manifest = loads_json(read_text_limited(manifest_path, _MAX_SHARDED_MANIFEST_BYTES, "manifest"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"its manifest {manifest_path.name} is unreadable ({' '.join(str(exc).split())[:200]})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    step = manifest.get("step") if isinstance(manifest, dict) else None
    if type(step) is not int or step != _step_of(path):
        raise bad(f"its manifest {manifest_path.name} has step {step!r:.40}, expected {_step_of(path)}")
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise bad(f"its manifest {manifest_path.name} has no 'files' object")
    present = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() or p.is_symlink()}
    if present != set(files):
        extra, missing = sorted(present - set(files)), sorted(set(files) - present)
        raise bad(f"its files differ from its manifest (not listed: {extra[:3]}, missing: {missing[:3]})")
    if STATE_FILE not in files:
        raise bad(f"it has no {STATE_FILE}")
    for name, record in files.items():
        file = path / name
        if file.is_symlink() or not file.is_file():
            raise bad(f"{name} is not a regular file")
        sha256, size = file_digest(file)
        if size != record.get("bytes"):
            raise bad(f"{name} is truncated or padded: {size} bytes, the manifest says {record.get('bytes')!r:.40}")
        if sha256 != record.get("sha256"):
            raise bad(f"{name} is corrupt: its sha256 does not match the manifest")
    return manifest


def verify_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Check ``path`` against its manifest; returns the manifest or raises ``CorruptCheckpointError`` saying why."""
    path = Path(path)
    manifest_path = _manifest_path(path)
    if path.is_dir() and _DIR.match(path.name):
        if not manifest_path.is_file():
            raise CorruptCheckpointError(f"checkpoint {path} has no manifest {manifest_path.name}: its save did not "
                                         "finish")
        return _verify_sharded(path, manifest_path)
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
    """Verify (unless ``verify=False``) and load one checkpoint onto the CPU; nothing in the file is executed. A
    sharded checkpoint's state names its shards' folder under ``"shards"``."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    sharded = path.is_dir() and _DIR.match(path.name) is not None
    if path.suffix != SUFFIX and not sharded:
        raise CorruptCheckpointError(
            f"checkpoint {path} is in the old pickle format of earlier erl-gym checkpoints, which can run any code "
            f"when it is loaded, so it is never opened; resume from a {SUFFIX} checkpoint or start the run again")
    manifest = verify_checkpoint(path) if verify else None
    file = path / STATE_FILE if sharded else path
    try:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        raw = tensors.pop(_STATE_KEY, None)
        if raw is None or raw.dtype != torch.uint8 or raw.dim() != 1:
            raise ValueError(f"no {_STATE_KEY!r} entry of bytes: not an erl-gym checkpoint")
        state = decode_state(loads_json(bytes(raw.numpy()).decode("utf-8", "surrogatepass")), tensors)
    except (SafetensorError, ValueError, TypeError, OverflowError, OSError, RuntimeError) as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise CorruptCheckpointError(f"checkpoint {path} cannot be loaded ({reason})") from exc
    if not isinstance(state, dict) or "step" not in state:
        raise CorruptCheckpointError(f"checkpoint {path} does not hold a training state (no 'step' entry)")
    if manifest is not None and state["step"] != manifest["step"]:
        raise CorruptCheckpointError(f"checkpoint {path} holds step {state['step']!r} (a "
                                     f"{type(state['step']).__name__}), its manifest says {manifest['step']!r}")
    if sharded:
        state["shards"] = str(path / SHARDS)  # the weights and optimizer state: erl_agents.sharding reads them
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
