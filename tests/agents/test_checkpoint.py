"""Checkpoint files: atomic saves, manifests that catch truncation and corruption, fallback to the previous one."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch

from crafted import RunsCodeWhenUnpickled, evil_pickle, plant
from erl_agents import checkpoint as ckpt
from paths import ROOT


def _payload(step, size=1000):
    return {"weights": torch.full((size,), float(step)), "note": f"step {step}"}


def _save_steps(folder, steps, keep=0):
    return [ckpt.save_checkpoint(folder, step, _payload(step), keep=keep) for step in steps]


def test_save_writes_a_manifest_and_loads_back(tmp_path):
    path = ckpt.save_checkpoint(tmp_path, 7, _payload(7))
    assert path.name == "step_000007.safetensors"
    manifest = json.loads((tmp_path / "step_000007.json").read_text())
    assert manifest["step"] == 7 and manifest["file"] == path.name and manifest["bytes"] == path.stat().st_size
    state = ckpt.load_checkpoint(path)
    assert state["step"] == 7 and state["note"] == "step 7" and torch.equal(state["weights"], _payload(7)["weights"])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_keeps_the_newest_k_and_clears_leftover_temp_files(tmp_path):
    (tmp_path / ".step_000003.safetensors.tmp").write_bytes(b"half a save")
    _save_steps(tmp_path, [1, 2, 3, 10], keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000003.json", "step_000003.safetensors",
                                                           "step_000010.json", "step_000010.safetensors"]
    # Steps sort by number, not by name length.
    ckpt.save_checkpoint(tmp_path, 1000000, _payload(0), keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_000010.safetensors", "step_1000000.safetensors"]


def test_keep_zero_keeps_everything(tmp_path):
    _save_steps(tmp_path, [1, 2, 3], keep=0)
    assert len(ckpt.list_checkpoints(tmp_path)) == 3


def _truncate(path, keep_fraction=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, message", [
    (_truncate, "truncated"),
    (_flip_byte, "sha256 does not match"),
    (lambda p: p.with_suffix(".json").unlink(), "save did not finish"),
    (lambda p: p.with_suffix(".json").write_text("{not json"), "manifest step_000008.json is unreadable"),
])
def test_damaged_checkpoint_is_named_and_the_previous_one_is_used(tmp_path, damage, message):
    _, newest = _save_steps(tmp_path, [4, 8])
    damage(newest)
    with pytest.raises(ckpt.CorruptCheckpointError, match=message):
        ckpt.load_checkpoint(newest)
    with pytest.warns(RuntimeWarning, match="step_000008.safetensors"):
        path, state = ckpt.load_latest_checkpoint(tmp_path)
    assert path.name == "step_000004.safetensors" and state["step"] == 4
    assert torch.equal(state["weights"], _payload(4)["weights"])


def test_a_file_that_is_not_a_checkpoint_is_reported_even_with_a_matching_manifest(tmp_path):
    path = ckpt.save_checkpoint(tmp_path, 1, _payload(1))
    path.write_bytes(b"this is not a safetensors file")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (tmp_path / "step_000001.json").write_text(json.dumps({"step": 1, "bytes": path.stat().st_size,
                                                           "sha256": digest}))
    with pytest.raises(ckpt.CorruptCheckpointError, match="cannot be loaded"):
        ckpt.load_checkpoint(path)
    # Skipping verification still never hands back garbage.
    with pytest.raises(ckpt.CorruptCheckpointError, match="cannot be loaded"):
        ckpt.load_checkpoint(path, verify=False)


def test_no_checkpoint_and_no_usable_checkpoint_are_different_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.load_latest_checkpoint(tmp_path / "missing")
    first, second = _save_steps(tmp_path, [1, 2])
    _truncate(first)
    _flip_byte(second)
    with pytest.warns(RuntimeWarning), pytest.raises(ckpt.CorruptCheckpointError) as info:
        ckpt.load_latest_checkpoint(tmp_path)
    assert "step_000001.safetensors" in str(info.value) and "step_000002.safetensors" in str(info.value)


def test_saving_a_step_again_replaces_its_manifest(tmp_path):
    ckpt.save_checkpoint(tmp_path, 5, _payload(5, size=10))
    ckpt.save_checkpoint(tmp_path, 5, _payload(6, size=5000))
    state = ckpt.load_checkpoint(tmp_path / "step_000005.safetensors")
    assert state["note"] == "step 6" and len(state["weights"]) == 5000


def test_rng_state_round_trip():
    import random

    generator = np.random.default_rng(3)
    state = ckpt.rng_state(generator)
    expected = (random.random(), np.random.rand(), generator.random(), torch.rand(1).item())
    ckpt.set_rng_state(state, generator)
    assert (random.random(), np.random.rand(), generator.random(), torch.rand(1).item()) == expected


SAVER = """
import sys
import torch
from erl_agents.checkpoint import save_checkpoint

for step in range(1, 10_000):
    print(step, flush=True)
    save_checkpoint(sys.argv[1], step, {"weights": torch.full((1_000_000,), float(step))}, keep=2)
"""


@pytest.mark.parametrize("kill_at, delay", [(3, 0.0), (4, 0.015), (5, 0.03)])
def test_sigkill_during_saves_never_leaves_a_checkpoint_that_loads_wrongly(tmp_path, kill_at, delay):
    """A real ``kill -9`` at some point of a save: every checkpoint with a manifest verifies and holds its own
    step, one without is refused, and the newest usable one is at most one save behind the kill."""
    folder = tmp_path / "checkpoints"
    child = subprocess.Popen([sys.executable, "-c", SAVER, str(folder)], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        for line in child.stdout:
            if int(line) == kill_at:
                time.sleep(delay)
                break
        assert child.poll() is None, "the saver ended before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    for path in ckpt.list_checkpoints(folder):
        if not path.with_suffix(".json").exists():
            with pytest.raises(ckpt.CorruptCheckpointError, match="did not finish"):
                ckpt.load_checkpoint(path)
            continue
        state = ckpt.load_checkpoint(path)
        step = int(path.stem.split("_")[1])
        assert state["step"] == step and bool((state["weights"] == float(step)).all())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, state = ckpt.load_latest_checkpoint(folder)
    assert state["step"] >= kill_at - 1


# --- a checkpoint never runs code --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["step_000002.pt", "step_000002.safetensors"])
def test_a_planted_pickle_is_refused_without_running_it(tmp_path, name):
    marker = tmp_path / "code-ran"
    folder = tmp_path / "checkpoints"
    ckpt.save_checkpoint(folder, 1, _payload(1))
    plant(folder / name, evil_pickle(tmp_path, marker))
    with pytest.raises(ckpt.CorruptCheckpointError) as caught:
        ckpt.load_checkpoint(folder / name)
    assert str(caught.value).count("\n") == 0 and name in str(caught.value)
    with pytest.warns(RuntimeWarning, match=name):
        path, state = ckpt.load_latest_checkpoint(folder)
    assert state["step"] == 1 and path.name == "step_000001.safetensors"
    assert not marker.exists(), "loading a checkpoint ran code"


def test_a_checkpoint_holds_only_tensors_and_plain_data(tmp_path):
    """Everything a run saves comes back equal: tensors (a tied pair stored once), tuples, int-keyed dicts, numpy
    arrays and non-finite floats; an object of any other type cannot be saved at all."""
    tied = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    payload = {"model": {"embed.weight": tied, "head.weight": tied}, "scalar": torch.tensor(3.5),
               "bf16": torch.ones(4, dtype=torch.bfloat16), "optimizer": {"state": {0: {"step": torch.tensor(2.0)}},
                                                                          "param_groups": [{"betas": (0.9, 0.99)}]},
               "rng": ckpt.rng_state(np.random.default_rng(5)), "metrics": [{"loss": float("nan"), "x": None}],
               "$odd": {"$tensor": "not a tensor reference"}, "inf": float("-inf")}
    path = ckpt.save_checkpoint(tmp_path, 3, payload)
    state = ckpt.load_checkpoint(path)
    assert torch.equal(state["model"]["embed.weight"], tied) and torch.equal(state["model"]["head.weight"], tied)
    assert state["bf16"].dtype == torch.bfloat16 and state["scalar"].item() == 3.5
    assert state["optimizer"]["state"][0]["step"].item() == 2.0
    assert state["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.99)
    assert state["$odd"] == {"$tensor": "not a tensor reference"} and state["inf"] == float("-inf")
    assert np.isnan(state["metrics"][0]["loss"]) and state["metrics"][0]["x"] is None
    generator = np.random.default_rng(0)
    ckpt.set_rng_state(state["rng"], generator)
    assert generator.random() == np.random.default_rng(5).random()
    with pytest.raises(TypeError, match="cannot hold a RunsCodeWhenUnpickled"):
        ckpt.save_checkpoint(tmp_path, 4, {"x": RunsCodeWhenUnpickled(tmp_path / "m")})


def test_a_step_of_another_type_is_named_with_its_type(tmp_path):
    """A state whose step is the text "4" beside a manifest saying 4: the message shows the two differ."""
    path = tmp_path / "step_000004.safetensors"
    ckpt._write_state_file(path, {"step": "4", **_payload(4)})
    sha256, size = ckpt.file_digest(path)
    (tmp_path / "step_000004.json").write_text(json.dumps({"step": 4, "file": path.name, "bytes": size,
                                                           "sha256": sha256}))
    with pytest.raises(ckpt.CorruptCheckpointError, match=r"holds step '4' \(a str\), its manifest says 4$"):
        ckpt.load_checkpoint(path)
