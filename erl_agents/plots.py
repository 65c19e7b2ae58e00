"""Learning curves of a run (or several) as one PNG, from the rows of ``metrics.jsonl``.

Each file is written whole (a temporary name, then renamed): a kill or a full disk leaves the previous picture,
and a write the disk refuses is a ``RunFolderError`` naming the file and the reason.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

__all__ = ["plot_learning_curves", "plot_runs"]

_PANELS = (
    ("success", ("success/attempt1", "success/attempt2", "eval/success"), "success rate"),
    ("reward", ("reward/attempt1", "reward/reflection", "reward/attempt2"), "mean reward"),
    ("loss", ("loss",), "loss"),
    ("stability", ("entropy", "clip_frac", "kl"), "entropy / clip fraction / KL"),
)


def _series(rows: Sequence[Mapping], key: str) -> tuple[list[float], list[float]]:
    points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
    return [p[0] for p in points], [p[1] for p in points]


def plot_learning_curves(rows: Sequence[Mapping], path: str | os.PathLike, title: str = "") -> None:
    """Four panels: success (train roles and held-out eval), reward per role, loss, entropy/clip/KL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(_PANELS), figsize=(4.2 * len(_PANELS), 3.4))
    for ax, (_, keys, label) in zip(axes, _PANELS):
        for key in keys:
            xs, ys = _series(rows, key)
            if xs:
                ax.plot(xs, ys, marker="o" if key.startswith("eval/") else None, markersize=3, label=key)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 0.5 ticks on a short run
        ax.set_ylabel(label)
        if ax.lines:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def plot_runs(runs: Mapping[str, Sequence[Mapping]], path: str | os.PathLike, key: str = "eval/success",
              x: str = "time/elapsed", title: str = "") -> None:
    """One curve per run (e.g. RLVR vs ERL): ``key`` against ``x`` (seconds are shown as minutes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rows in runs.items():
        points = [(r.get(x, 0.0), r[key]) for r in rows if key in r]
        if x.startswith("time/"):
            points = [(px / 60.0, py) for px, py in points]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=name)
    ax.set_xlabel("minutes" if x.startswith("time/") else x)
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: str | os.PathLike) -> None:
    import matplotlib.pyplot as plt

    from erl_agents.run_folder import write_file_atomically

    try:
        write_file_atomically(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    finally:
        plt.close(fig)
