"""--report-to: the trackers get every logged row, read back with each tool's own reader, equal to metrics.jsonl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from erl_agents.config import build_config
from erl_agents.tracking import TrackerNotInstalled, open_trackers, parse_report_to, report_to_problem
from erl_agents.train import main as erl_train

ROOT = Path(__file__).resolve().parents[2]


def test_report_to_names_one_or_several_trackers():
    assert parse_report_to("none") == ()
    assert parse_report_to("") == ()
    assert parse_report_to("TensorBoard") == ("tensorboard",)
    assert parse_report_to("trackio, tensorboard,trackio") == ("trackio", "tensorboard")
    assert report_to_problem("tensorboard,wandb") is None
    assert "unknown tracker 'mlflow'" in report_to_problem("tensorboard,mlflow")
    assert "cannot be combined" in report_to_problem("none,wandb")


def test_a_bad_report_to_is_one_error_line(capsys, tmp_path):
    assert erl_train(["--preset", "cpu-tiny", "--report-to", "tensorbord", "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report_to" in err[0] and "'tensorbord'" in err[0]
    with pytest.raises(ValueError, match="report_to"):
        build_config({"preset": "cpu-tiny"}, flags={"report_to": "none,trackio"})


def test_a_missing_tracker_package_names_its_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "trackio", None)  # import trackio now raises ModuleNotFoundError
    with pytest.raises(TrackerNotInstalled, match=r"pip install trackio"):
        open_trackers("trackio", tmp_path, {"seed": 0})


def test_no_tracker_is_a_no_op(tmp_path):
    trackers = open_trackers("none", tmp_path, {})
    trackers.log({"step": 1, "loss": 0.5})
    trackers.log_image(tmp_path / "absent.png")
    trackers.close()
    assert list(tmp_path.iterdir()) == []


def _installed(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


REPORTED = [name for name in ("tensorboard", "trackio", "wandb") if _installed(name)]


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """A 2-step cpu-tiny run reporting to every installed tracker, in its own process (trackio reads TRACKIO_DIR
    when it is imported); nothing reaches the network (W&B offline)."""
    if not REPORTED:
        pytest.skip("no tracker is installed (pip install -e '.[tracking]')")
    folder = tmp_path_factory.mktemp("tracked")
    env = {**os.environ, "TRACKIO_DIR": str(folder / "trackio"), "WANDB_MODE": "offline",
           "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "erl_agents.train", "--preset", "cpu-tiny", "--steps", "2", "--eval-every", "1",
               "--eval-tasks", "4", "--threads", "1", "--no-progress", "--no-save-final-model",
               "--output", str(folder / "run"), "--report-to", ",".join(REPORTED)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    return folder, rows


def _numbers(rows: list[dict]) -> dict[tuple[str, int], float]:
    return {(key, row["step"]): float(value) for row in rows for key, value in row.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)}


@pytest.mark.slow
@pytest.mark.skipif("tensorboard" not in REPORTED, reason="tensorboard is not installed")
def test_tensorboard_reads_back_every_metric(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folder, rows = tracked_run
    events = EventAccumulator(str(folder / "run" / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    read = {(tag, event.step): event.value for tag in events.Tags()["scalars"] for event in events.Scalars(tag)}
    expected = _numbers(rows)
    assert set(read) == set(expected)
    for key, value in expected.items():
        assert read[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key  # stored as float32
    assert {row["step"] for row in rows} == {0, 1, 2}
    assert events.Tags()["images"] == ["curves"]
    assert '"report_to"' in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()


@pytest.mark.slow
@pytest.mark.skipif("trackio" not in REPORTED, reason="trackio is not installed")
def test_trackio_reads_back_every_metric_and_the_config(tracked_run):
    folder, rows = tracked_run
    script = ("import json, sys\nfrom trackio.sqlite_storage import SQLiteStorage\n"
              "print(json.dumps({'logs': SQLiteStorage.get_logs('erl-gym', 'run'),"
              " 'config': SQLiteStorage.get_run_config('erl-gym', 'run')}, default=str))")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TRACKIO_DIR": str(folder / "trackio")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    stored = json.loads(done.stdout)
    read = {(key, log["step"]): value for log in stored["logs"] for key, value in log.items()
            if key not in ("step", "timestamp") and isinstance(value, (int, float))}
    assert read == pytest.approx(_numbers(rows))
    assert any("curves" in log for log in stored["logs"])
    assert stored["config"]["seed"] == 0 and stored["config"]["report_to"] == ",".join(REPORTED)


@pytest.mark.slow
@pytest.mark.skipif("wandb" not in REPORTED, reason="wandb is not installed")
def test_wandb_writes_an_offline_run_holding_the_metrics(tracked_run):
    # wandb 0.31 has no Python reader of its run files; the history's keys and JSON values are stored as text.
    folder, rows = tracked_run
    (run_file,) = (folder / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    stored = run_file.read_bytes()
    for key, value in rows[-1].items():
        if isinstance(value, (int, float)) and key != "step":
            # W&B writes a whole float such as 40.0 as 40
            forms = {json.dumps(value)} | ({json.dumps(int(value))} if float(value).is_integer() else set())
            assert key.encode() in stored and any(f.encode() in stored for f in forms), (key, value)
