"""Experiment tracking: every logged metrics row, the config and the learning curves, sent to the tools researchers
compare runs in (``--report-to tensorboard,trackio,wandb``, as transformers' ``report_to``).

``metrics.jsonl`` stays the source of truth: a tracker receives a copy of each row as it is written, and a tracker
that is not installed stops the run before it starts, in one line naming the install command. Nothing here reaches
the network: TensorBoard writes event files into the run folder, trackio its local database (``$TRACKIO_DIR``,
default ``~/.cache/huggingface/trackio``), and W&B runs offline unless ``WANDB_MODE`` says otherwise (``wandb sync``
uploads an offline run later).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

__all__ = ["TRACKERS", "TrackerNotInstalled", "parse_report_to", "report_to_problem", "open_trackers", "Trackers"]

TRACKERS = ("tensorboard", "trackio", "wandb")
# What to install for each tracker (the tracking extra holds all three).
_INSTALL = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb"}


class TrackerNotInstalled(ImportError):
    """A tracker named by ``--report-to`` whose package is missing: fix the install, not the code."""


def parse_report_to(value: str) -> tuple[str, ...]:
    """The trackers named by ``--report-to`` ("none", one name, or several joined by commas), in order, once each."""
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    if names in ([], ["none"]):
        return ()
    return tuple(dict.fromkeys(names))


def report_to_problem(value: str) -> str | None:
    """Why ``value`` is not a valid ``--report-to`` (None when it is)."""
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in (*TRACKERS, "none")]
    if unknown:
        return f"unknown tracker {unknown[0]!r}; choose none or any of {', '.join(TRACKERS)} (comma-separated)"
    if "none" in names and len(names) > 1:
        return "'none' cannot be combined with a tracker"
    return None


def _scalars(row: dict) -> dict[str, float]:
    """The row's numbers (``step`` aside); None (a NaN written as null) and non-numbers are left out."""
    return {key: float(value) for key, value in row.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(float(value))}


class _TensorBoard:
    """Event files in ``RUN/tensorboard``: one scalar series per metric, the config as text, the curves as an image."""

    def __init__(self, run_dir: Path, name: str, config: dict) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.writer.add_text("config", "```json\n" + json.dumps(config, indent=1, sort_keys=True) + "\n```")

    def log(self, row: dict) -> None:
        for key, value in _scalars(row).items():
            self.writer.add_scalar(key, value, global_step=int(row.get("step", 0)))

    def log_image(self, path: Path, step: int) -> None:
        import matplotlib.image

        pixels = matplotlib.image.imread(str(path))
        self.writer.add_image(path.stem, pixels[..., :3], global_step=step, dataformats="HWC")

    def close(self) -> None:
        self.writer.close()


class _Trackio:
    """A local trackio run in project ``erl-gym`` named after the run folder (``trackio show`` opens the dashboard)."""

    def __init__(self, run_dir: Path, name: str, config: dict) -> None:
        import trackio

        self.trackio = trackio
        self.run = trackio.init(project="erl-gym", name=name, config=config, resume="allow", embed=False)

    def log(self, row: dict) -> None:
        self.trackio.log(_scalars(row), step=int(row.get("step", 0)))

    def log_image(self, path: Path, step: int) -> None:
        self.trackio.log({path.stem: self.trackio.Image(str(path))}, step=step)

    def close(self) -> None:
        self.trackio.finish()


class _Wandb:
    """A W&B run in project ``erl-gym``, its files in ``RUN/wandb``; offline unless ``WANDB_MODE`` is set."""

    def __init__(self, run_dir: Path, name: str, config: dict) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "erl-gym"), name=name, config=config,
                              dir=str(run_dir), mode=os.environ.get("WANDB_MODE", "offline"), reinit="finish_previous")

    def log(self, row: dict) -> None:
        self.run.log(_scalars(row), step=int(row.get("step", 0)))

    def log_image(self, path: Path, step: int) -> None:
        self.run.log({path.stem: self.wandb.Image(str(path))}, step=step)

    def close(self) -> None:
        self.run.finish()


_CLASSES = {"tensorboard": _TensorBoard, "trackio": _Trackio, "wandb": _Wandb}


class Trackers:
    """The run's trackers as one: each call goes to every one of them (none at all: every call does nothing)."""

    def __init__(self, trackers: Sequence[Any] = ()) -> None:
        self.trackers = list(trackers)
        self.last_step = 0

    def log(self, row: dict) -> None:
        self.last_step = max(self.last_step, int(row.get("step", 0)))
        for tracker in self.trackers:
            tracker.log(row)

    def log_image(self, path: str | os.PathLike) -> None:
        """The learning curves (or any image file) at the latest step, when the file exists."""
        if Path(path).is_file():
            for tracker in self.trackers:
                tracker.log_image(Path(path), self.last_step)

    def close(self) -> None:
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close()


def open_trackers(report_to: str, run_dir: str | os.PathLike, config: dict) -> Trackers:
    """Start the trackers ``report_to`` names for the run in ``run_dir``; a missing package is ``TrackerNotInstalled``,
    whose one line names the install command."""
    run_dir = Path(run_dir)
    started: list[Any] = []
    try:
        for name in parse_report_to(report_to):
            try:
                started.append(_CLASSES[name](run_dir, run_dir.resolve().name, config))
            except ModuleNotFoundError as exc:
                raise TrackerNotInstalled(f"--report-to {name} needs the {_INSTALL[name]} package ({exc.name} is missing): "
                                  f"pip install {_INSTALL[name]}, or pip install -e \".[tracking]\" for all three") \
                    from None
    except BaseException:
        Trackers(started).close()
        raise
    return Trackers(started)
