"""Fair core sharing: erl_agents sets libgomp's spin count before torch loads, leaves a user's own setting alone, and
never changes a number; the thread count does, which is why the cpu-tiny preset fixes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from erl_agents.config import build_config
from erl_agents.cpu_threads import SPIN_COUNT

ROOT = Path(__file__).resolve().parents[2]


def _spin_count_seen(env: dict, code: str = "import erl_agents, os; print(os.environ.get('GOMP_SPINCOUNT'))") -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_importing_erl_agents_sets_a_short_spin_before_torch():
    assert _spin_count_seen({}) == str(SPIN_COUNT)
    # The setting is in place when torch (imported by erl_agents itself or after it) loads libgomp.
    assert _spin_count_seen({}, "import erl_agents, torch, os; print(os.environ['GOMP_SPINCOUNT'])") == str(SPIN_COUNT)


def test_a_users_own_setting_is_kept():
    assert _spin_count_seen({"GOMP_SPINCOUNT": "123"}) == "123"
    assert _spin_count_seen({"OMP_WAIT_POLICY": "PASSIVE"}) == "None"


def test_too_late_once_torch_is_loaded():
    code = "import torch, os, erl_agents; print(os.environ.get('GOMP_SPINCOUNT'))"
    assert _spin_count_seen({}, code) == "None"


def test_the_main_job_fixes_its_thread_count_and_runs_by_steps():
    config = build_config({"preset": "cpu-tiny"})
    assert config.threads == 2 and config.time_limit_min == 0 and config.steps == 340


@pytest.mark.slow
def test_load_never_changes_the_numbers_but_the_thread_count_does(tmp_path):
    """One step of the main job alone, two at once, with OpenMP's passive waiting, and with one thread: every run at
    two threads has the same metrics (time/* aside); one thread sums floats in another order."""
    from benchmarks.speed.bench_core_sharing import _run_at_once

    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    digests = {}
    for name, env, count in (("alone", base, 1), ("together", base, 2),
                             ("passive", {**base, "OMP_WAIT_POLICY": "PASSIVE"}, 1)):
        folder = tmp_path / name
        folder.mkdir()
        result = _run_at_once(count, folder, 1, env)
        assert all(run["returncode"] == 0 for run in result["runs"]), (folder / "run0.log").read_text()[-2000:]
        digests[name] = [run["digest"] for run in result["runs"]]
    assert digests["alone"] == digests["passive"] and digests["together"] == digests["alone"] * 2

    one = tmp_path / "one"
    command = [sys.executable, "-m", "erl_agents.train", "--env", "ERL-FrozenLake-v0", "--algo", "erl", "--preset",
               "cpu-tiny", "--steps", "1", "--threads", "1", "--no-progress", "--no-save-final-model", "--output",
               str(one)]
    done = subprocess.run(command, cwd=ROOT, env=base, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (one / "metrics.jsonl").read_text().splitlines()]
    alone = [json.loads(line) for line in (tmp_path / "alone" / "run0" / "metrics.jsonl").read_text().splitlines()]
    trained = [key for key in alone[-1] if not key.startswith("time/") and isinstance(alone[-1][key], float)]
    assert any(rows[-1][key] != alone[-1][key] for key in trained)
