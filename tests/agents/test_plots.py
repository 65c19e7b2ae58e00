"""Learning curves: written whole or not at all, and a full disk is one named error."""

import errno

import pytest

from erl_agents.plots import plot_learning_curves
from erl_agents.run_folder import RunFolderError

ROWS = [{"step": s, "success/attempt1": s / 10, "loss": None if s == 2 else 0.5, "eval/success": 0.1} for s in range(5)]


def test_curves_are_written_and_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "curves.png"
    plot_learning_curves(ROWS, path, title="run")
    old = path.read_bytes()
    assert old.startswith(b"\x89PNG")
    from matplotlib.figure import Figure

    def full_disk(self, fname, **kwargs):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    with pytest.raises(RunFolderError, match=f"cannot write {path}: no space left on device"):
        plot_learning_curves(ROWS[:3], path)
    assert path.read_bytes() == old and sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]
