"""The run folder: one run at a time (a lock), files that are either complete and verified or absent, every write a
run makes (``RunWriter``), and what a resume may change (``check_resume``).

Every file a run writes goes through ``write_atomically`` (a temporary name in the same folder, flushed to disk,
renamed over the target with ``os.replace``), and a folder of files such as ``initial_model/`` through
``save_folder`` (written whole under a temporary name, with a manifest of sizes and sha256, then renamed into place).
A kill or a full disk at any moment leaves the old file or folder, never half of the new one, and a write that fails
raises ``RunFolderError`` naming the file and the reason ("no space left on device", "read-only file system")
instead of a library's internal message.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import stat
import warnings
from pathlib import Path
from typing import IO, Any, Callable, Sequence

from erl_agents.config import RULES, TrainConfig, config_to_dict
from erl_envs.safe_parse import loads_json, read_text_limited

__all__ = ["RunFolderError", "RunFolderLockedError", "RunLock", "RunWriter", "ResumeRefusedError", "resume_changes",
           "check_resume", "write_atomically", "write_file_atomically", "save_folder", "folder_problem", "file_digest",
           "fsync_dir", "disk_problem", "failure_reason", "FOLDER_MANIFEST", "RUN_FILES", "RunFolderTakenError",
           "run_in_folder", "claim_folder"]

FOLDER_MANIFEST = "erl_manifest.json"
_CHUNK = 1 << 20
_LOW_SPACE = 1 << 20  # bytes: below this a failed write is put down to a full disk
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


class RunFolderError(OSError):
    """A file of the run folder that cannot be created or written; the message names the file and the reason."""


class RunFolderLockedError(RuntimeError):
    """Another live process is running in the same run folder."""


def disk_problem(exc: BaseException, folder: Path) -> str | None:
    """Why a write failed when the disk or the OS is the cause, in words: the OS error behind ``exc`` (torch and
    safetensors wrap it in their own exceptions, or only name it in their message), else a read-only or full file
    system; ``None`` otherwise."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno).lower()
        # Libraries written in Rust (safetensors) put the OS error in their message: "... (os error 28)".
        code = _RUST_OS_ERROR.search(str(seen))
        if code:
            return os.strerror(int(code.group(1))).lower()
        seen = seen.__cause__ or seen.__context__
    try:
        stats = os.statvfs(folder)
        if stats.f_flag & os.ST_RDONLY:
            return os.strerror(errno.EROFS).lower()
        if stats.f_bavail * stats.f_frsize < _LOW_SPACE:
            return os.strerror(errno.ENOSPC).lower()
    except (OSError, AttributeError):  # no statvfs on this platform, or the folder is gone
        pass
    return None


def failure_reason(exc: BaseException, folder: Path) -> str:
    """``disk_problem``, or the exception's own one-line message."""
    return disk_problem(exc, folder) or " ".join(f"{type(exc).__name__}: {exc}".split())


def fsync_dir(folder: Path) -> None:
    # Makes renames durable; not every platform can open a directory.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, flush it to disk and rename it to ``path``.

    On any failure the temporary file is removed, ``path`` keeps its old content (or stays absent), and an OS-level
    problem is raised as ``RunFolderError`` naming ``path``.
    """
    def fill(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            write(f)

    write_file_atomically(path, fill)


def write_file_atomically(path: str | os.PathLike, fill: Callable[[Path], None]) -> None:
    """``write_atomically`` for writers that take a file name (``safetensors.torch.save_file``, ``savefig``):
    ``fill(tmp)`` creates the temporary file, which is then flushed to disk and renamed to ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fill(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        problem = disk_problem(exc, path.parent) if isinstance(exc, Exception) else None
        if problem is not None and not isinstance(exc, RunFolderError):
            raise RunFolderError(f"cannot write {path}: {problem}") from exc
        raise
    fsync_dir(path.parent)


def file_digest(path: Path) -> tuple[str, int]:
    """sha256 (hex) and size in bytes of a file."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def save_folder(folder: str | os.PathLike, save: Callable[[str], None]) -> None:
    """Write a whole folder (``save(path)`` fills it, e.g. ``model.save_pretrained``) under a temporary name, add a
    manifest of every file's size and sha256, then rename it over ``folder``."""
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp")
    old = folder.with_name(f".{folder.name}.old")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save(str(tmp))
        files = {}
        for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
            with open(file, "rb+") as f:
                os.fsync(f.fileno())
            sha256, size = file_digest(file)
            files[file.relative_to(tmp).as_posix()] = {"bytes": size, "sha256": sha256}
        write_atomically(tmp / FOLDER_MANIFEST, lambda f: f.write(json.dumps({"files": files}, indent=1).encode()))
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            os.replace(folder, old)
        os.replace(tmp, folder)
        fsync_dir(folder.parent)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        problem = disk_problem(exc, folder.parent) if isinstance(exc, Exception) else None
        if problem is not None and not isinstance(exc, RunFolderError):
            raise RunFolderError(f"cannot write {folder}: {problem}") from exc
        raise


def folder_problem(folder: str | os.PathLike) -> str | None:
    """``None`` when ``folder`` matches its manifest; otherwise what is wrong, in one sentence naming the file."""
    folder = Path(folder)
    manifest = folder / FOLDER_MANIFEST
    if not folder.is_dir():
        return f"{folder} does not exist"
    if not manifest.is_file():
        return f"{folder} has no {FOLDER_MANIFEST}: it was not written completely"
    try:
        files = loads_json(read_text_limited(manifest, 1 << 20, "manifest"))["files"]
        expected = {str(name): (int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{manifest} is unreadable ({exc})"
    for name, (size, sha256) in expected.items():
        file = folder / name
        if not file.is_file():
            return f"{file} is missing"
        if file_digest(file) != (sha256, size):
            return f"{file} does not match {FOLDER_MANIFEST} (truncated or altered)"
    return None


class RunLock:
    """An exclusive lock on a run folder, held for the run's life and released on any exit.

    ``flock`` on ``FOLDER/.lock``: the kernel releases it when the process ends however it ends (kill -9 included),
    so a lock file left behind by a dead process never blocks the next run. The file holds the owner's pid, for the
    error message a second run gets, and is removed when the run ends (``release``). It is opened with
    ``O_NOFOLLOW``: a ``.lock`` that is a symbolic link (planted in a folder received from elsewhere) is refused by
    name, never followed, so the file it points to is never truncated. A run that takes the lock checks that the
    file it locked is still the one at ``.lock`` (the previous run may have removed it meanwhile), so two runs never
    hold locks on two different files.
    """

    def __init__(self, folder: str | os.PathLike):
        import fcntl

        self.path = Path(folder) / ".lock"
        while True:
            self._file = self._open(Path(folder))
            try:
                fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self._file.seek(0)
                owner = self._file.read(64).strip() or "unknown"
                self._file.close()
                raise RunFolderLockedError(f"{Path(folder)} is in use by another run (pid {owner}); wait for it to "
                                           "finish or choose another --output") from None
            if self._is_current():
                break
            self._file.close()  # the run that held it removed it before we locked it: lock the one there now
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    def _open(self, folder: Path) -> IO[str]:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP or self.path.is_symlink():
                raise RunFolderError(f"{self.path} is a symbolic link; a run's lock file is never followed (it "
                                     "could overwrite the file it points to): remove it and start again") from None
            raise RunFolderError(f"cannot create {self.path}: {failure_reason(exc, folder)}") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RunFolderError(f"{self.path} is not a regular file; remove it and start again")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "r+")

    def _is_current(self) -> bool:
        try:
            at_path = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        held = os.fstat(self._file.fileno())
        return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        """Remove the lock file, then release the lock (closing the descriptor releases the flock)."""
        if not self._file.closed:
            if self._is_current():
                try:
                    self.path.unlink()
                except OSError:
                    pass  # a read-only folder keeps the file; the lock itself is released below all the same
            self._file.close()


class RunWriter:
    """Every file a run writes goes through here, and only the main process writes.

    Whole files are replaced atomically (``erl_agents.run_folder``); a write the disk refuses raises
    ``RunFolderError`` naming the file and the reason.
    """

    def __init__(self, folder: str | os.PathLike, enabled: bool = True):
        self.folder = Path(folder)
        self.enabled = enabled
        if enabled:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RunFolderError(f"cannot create the run folder {self.folder}: "
                                     f"{failure_reason(exc, self.folder.parent)}") from exc

    def write_json(self, name: str, data: Any) -> None:
        if self.enabled:
            text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
            write_atomically(self.folder / name, lambda f: f.write(text.encode("utf-8")))

    def append_metrics(self, row: dict) -> None:
        if self.enabled:
            path = self.folder / "metrics.jsonl"
            try:  # appended in place, so never through a symbolic link planted in the folder
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with os.fdopen(fd, "a") as f:
                    f.write(json.dumps(row, allow_nan=False) + "\n")
            except OSError as exc:
                raise RunFolderError(f"cannot write {path}: {failure_reason(exc, self.folder)}") from exc

    def rewrite_metrics(self, rows: Sequence[dict]) -> None:
        """After a resume: metrics.jsonl holds exactly the checkpoint's rows (drops steps that were lost)."""
        if self.enabled:
            text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
            write_atomically(self.folder / "metrics.jsonl", lambda f: f.write(text.encode("utf-8")))


class ResumeRefusedError(ValueError):
    """``--resume`` with a value that would change what the run is (see ``erl_agents.config.RULES``)."""


def resume_changes(saved: dict, config: TrainConfig) -> tuple[dict[str, list], list[str]]:
    """The fields whose value differs from the run's saved config (``{name: [old, new]}``), and those of them that
    ``--resume`` refuses: "never" fields, and "fixed" fields not named in ``config.resume_changes``."""
    allowed = {name.strip() for name in config.resume_changes.split(",") if name.strip()}
    defaults = config_to_dict(TrainConfig())
    changes = {}
    for name, value in config_to_dict(config).items():
        old = saved.get(name, defaults[name])
        if old != value:
            changes[name] = [old, value]
    refused = [name for name in changes if RULES[name].resume == "never" or (
        RULES[name].resume == "fixed" and "all" not in allowed and name not in allowed)]
    return changes, refused


def check_resume(config: TrainConfig, state: dict) -> list[dict]:
    """Compare ``config`` with the one its run folder was started with; refuse a change of meaning.

    Returns the config history to record: the saved one plus this resume's changes, when there are any.
    """
    path = Path(config.output) / "config.json"
    saved = dict(state.get("config") or {})  # what the checkpoint was trained with, when config.json is unusable
    if path.is_file():
        try:
            from_file = loads_json(read_text_limited(path, 1 << 20, "config file"))
            if not isinstance(from_file, dict):
                raise ValueError(f"a JSON object was expected, got {type(from_file).__name__}")
            saved = from_file
        except (ValueError, UnicodeDecodeError) as exc:
            warnings.warn(f"{path} is unreadable ({exc}); comparing with the checkpoint's config instead",
                          RuntimeWarning, stacklevel=2)
    history = saved.pop("history", [])
    history = list(history) if isinstance(history, list) else []
    changes, refused = resume_changes(saved, config)
    never = [name for name in refused if RULES[name].resume == "never"]
    if never:
        shown = "; ".join(f"{name} {changes[name][0]!r} -> {changes[name][1]!r}" for name in never)
        raise ResumeRefusedError(
            f"--resume refuses to change the model of the run in {config.output} ({shown}): these fields cannot "
            f"change when a run resumes, even with --resume-changes, since its checkpoints hold weights of the old "
            f"shape; resume with its values (see its config.json) or start a new --output")
    if refused:
        shown = "; ".join(f"{name} {changes[name][0]!r} -> {changes[name][1]!r}" for name in refused)
        raise ResumeRefusedError(
            f"--resume refuses to change what the run in {config.output} is ({shown}); resume with its "
            f"values (see its config.json), start a new --output, or allow the change with "
            f"--resume-changes {','.join(refused)}")
    for name in ("resume", "resume_changes", "overwrite"):  # how this process was started, not what the run is
        changes.pop(name, None)
    if changes:
        history.append({"resumed_at_step": int(state["step"]), "changes": changes,
                        "allowed": [name for name in changes if RULES[name].resume == "fixed"]})
    return history


# --- a folder holds one run ---------------------------------------------------------------------------------------

# What a run writes into its folder; --overwrite removes exactly these (and their temporary names), nothing else.
RUN_FILES = ("config.json", "metrics.jsonl", "checkpoints", "initial_model", "final_model", "curves.png")


class RunFolderTakenError(ValueError):
    """A new run (no ``--resume``) asked for a folder that holds another run."""


def run_in_folder(folder: str | os.PathLike) -> str | None:
    """What shows that ``folder`` holds a run (its config, metrics or checkpoints), in words; ``None`` when it holds
    none. An ``initial_model/`` alone does not count: a run killed while building it leaves only that, and it is
    checked against the new run's seed and shape before any use."""
    folder = Path(folder)
    found = []
    if (folder / "config.json").exists():
        found.append("config.json")
    metrics = folder / "metrics.jsonl"
    if metrics.exists():
        found.append("metrics.jsonl")
    checkpoints = folder / "checkpoints"
    steps = sorted(p.name for p in checkpoints.iterdir() if p.name.startswith("step_")) if checkpoints.is_dir() else []
    if steps:
        found.append(f"checkpoints up to {steps[-1]}")
    if (folder / "final_model").exists():
        found.append("final_model/")
    return ", ".join(found) or None


def claim_folder(folder: str | os.PathLike, overwrite: bool) -> None:
    """Make ``folder`` this new run's: refuse one that holds another run (``RunFolderTakenError``), or with
    ``overwrite`` delete that run's files first. Called with the folder's lock held."""
    folder = Path(folder)
    other = run_in_folder(folder)
    if other is None:
        return
    if not overwrite:
        raise RunFolderTakenError(
            f"{folder} holds another run ({other}): continue it with --resume, start this run in another --output, "
            f"or replace that run with --overwrite (which deletes its files)")
    warnings.warn(f"--overwrite: deleting the run in {folder} ({other})", RuntimeWarning, stacklevel=2)
    for name in RUN_FILES:
        for path in (folder / name, folder / f".{name}.tmp", folder / f".{name}.old"):
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            except OSError as exc:
                raise RunFolderError(f"--overwrite cannot delete {path}: {failure_reason(exc, folder)}") from exc
