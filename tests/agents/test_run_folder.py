"""The run folder survives anything (erl_agents/run_folder.py, checkpoint.py, train.py): a damaged initial model,
two runs at once, a refused resume, a full or read-only disk, user errors as one line."""

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import text_bandit  # noqa: F401  (registers TextBandit-v0)
from crafted import evil_pickle, plant
from erl_agents import checkpoint as ckpt
from erl_agents.run_folder import (RunFolderError, RunFolderLockedError, RunLock, folder_problem, save_folder,
                                   write_atomically)
from erl_agents.train import main
from paths import ROOT


CLI = ["--env", "TextBandit-v0", "--env-kwargs", '{"turns": 1}', "--algo", "rlvr", "--n-rlvr", "2", "--model", "tiny",
       "--steps", "2", "--tasks-per-step", "2", "--temperature", "1.0", "--max-new-tokens", "4",
       "--constrained-actions", "--lr", "3e-3", "--kl-coef", "0.0", "--eval-every", "0", "--checkpoint-every", "1",
       "--tiny-hidden", "32", "--tiny-layers", "1", "--tiny-heads", "2", "--tiny-intermediate", "64",
       "--tiny-vocab", "300", "--max-seq-len", "256", "--no-progress", "--no-save-final-model", "--threads", "1",
       "--device", "cpu"]


def _main(capsys, *argv):
    status = main([*CLI, *argv])
    return status, capsys.readouterr().err


def _one_error_line(err):
    assert err.startswith("erl-train: error: ") and err.count("\n") == 1, err
    return err


def _subprocess(*argv):
    """``erl-train`` as its own process, on a registered env (TextBandit exists only inside the tests)."""
    env_flags = ["--env", "ERL-FrozenLake-v0", "--env-kwargs", '{"size": [2, 3]}']
    return subprocess.Popen([sys.executable, "-m", "erl_agents.train", *CLI, *env_flags, *argv], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# --- 1. a half-written initial_model/ -----------------------------------------------------------------------------


def _digests(folder):
    return {p.name: ckpt.file_digest(p) for p in sorted(Path(folder).iterdir())}


def test_a_half_written_initial_model_is_rebuilt_identically(tmp_path, capsys):
    assert _main(capsys, "--output", str(tmp_path / "clean"))[0] == 0
    damaged = tmp_path / "damaged"
    (damaged / "initial_model").mkdir(parents=True)
    (damaged / "initial_model" / "config.json").write_text("")  # what a kill during the first save leaves
    (damaged / ".initial_model.tmp").mkdir()  # and the temporary folder of an interrupted save
    with pytest.warns(RuntimeWarning, match="initial_model has no erl_manifest.json.*rebuilding"):
        status, err = _main(capsys, "--output", str(damaged))
    assert status == 0, err
    assert folder_problem(damaged / "initial_model") is None
    # The tiny model is derived from the seed and the config: the rebuilt one is the one a clean run built.
    assert _digests(damaged / "initial_model") == _digests(tmp_path / "clean" / "initial_model")
    # A file altered later is caught by the manifest too, and repaired on the next resume.
    weights = damaged / "initial_model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert "does not match" in folder_problem(damaged / "initial_model")
    with pytest.warns(RuntimeWarning, match="model.safetensors does not match"):
        assert _main(capsys, "--output", str(damaged), "--resume", "--steps", "3")[0] == 0
    assert _digests(damaged / "initial_model") == _digests(tmp_path / "clean" / "initial_model")


def test_save_folder_is_all_or_nothing(tmp_path):
    target = tmp_path / "model"
    save_folder(target, lambda path: (Path(path) / "a.txt").write_text("first"))

    def fails_halfway(path):
        (Path(path) / "a.txt").write_text("second")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RunFolderError, match=f"cannot write {target}: no space left on device"):
        save_folder(target, fails_halfway)
    assert (target / "a.txt").read_text() == "first" and folder_problem(target) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary folder left behind


# --- 2. --resume compares the flags with the run's config.json ---------------------------------------------------


def test_resume_refuses_changes_of_meaning_and_records_the_allowed_ones(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert _main(capsys, "--output", run)[0] == 0
    for flags, named in [(["--lr", "0.5"], "lr 0.003 -> 0.5"), (["--algo", "erl"], "algo 'rlvr' -> 'erl'"),
                         (["--env", "ERL-FrozenLake-v0"], "env 'TextBandit-v0' -> 'ERL-FrozenLake-v0'"),
                         (["--seed", "99"], "seed 0 -> 99"), (["--tasks-per-step", "4"], "tasks_per_step 2 -> 4")]:
        status, err = _main(capsys, "--output", run, "--resume", "--steps", "3", *flags)
        assert status == 2 and named in _one_error_line(err) and "--resume-changes" in err, (flags, err)
    assert [json.loads(line)["step"] for line in open(f"{run}/metrics.jsonl")] == [1, 2]  # untouched
    # Harmless fields change freely; every change is recorded.
    assert _main(capsys, "--output", run, "--resume", "--steps", "3", "--eval-every", "3", "--eval-tasks", "1",
                 "--eval-samples", "1")[0] == 0
    # A change of meaning goes through when named, and takes effect: the optimizer uses the new learning rate.
    assert _main(capsys, "--output", run, "--resume", "--steps", "4", "--lr", "0.01", "--resume-changes", "lr")[0] == 0
    saved = json.loads(Path(run, "config.json").read_text())
    assert saved["lr"] == 0.01 and saved["steps"] == 4
    assert [(h["resumed_at_step"], sorted(h["changes"]), h["allowed"]) for h in saved["history"]] == [
        (2, ["eval_every", "eval_samples", "eval_tasks", "steps"], []),
        (3, ["eval_every", "eval_samples", "eval_tasks", "lr", "steps"], ["lr"])]  # back to the defaults
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(Path(run, "checkpoints")))
    assert state["step"] == 4 and state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.01)


# --- 2b. a folder belongs to one run ----------------------------------------------------------------------------


def _rows(run):
    return [json.loads(line) for line in Path(run, "metrics.jsonl").read_text().splitlines()]


def _same_rows(a, b):
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]  # noqa: E731
    return strip(a) == strip(b)


def test_a_new_run_in_another_runs_folder_is_refused_or_replaces_it_never_mixes(tmp_path, capsys):
    run, clean = tmp_path / "run", tmp_path / "clean"
    assert _main(capsys, "--output", str(run), "--seed", "1")[0] == 0
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    status, err = _main(capsys, "--output", str(run), "--seed", "2")
    assert status == 2 and "holds another run" in _one_error_line(err) and "--resume" in err and "--overwrite" in err
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # nothing of the old run was touched
    # --overwrite replaces the old run: the new one is exactly a run in a clean folder, with only its own files.
    assert _main(capsys, "--output", str(run), "--seed", "2", "--overwrite")[0] == 0
    assert _main(capsys, "--output", str(clean), "--seed", "2")[0] == 0
    assert _same_rows(_rows(run), _rows(clean))
    assert _digests(run / "initial_model") == _digests(clean / "initial_model")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == sorted(
        p.name for p in (clean / "checkpoints").iterdir())
    status, err = _main(capsys, "--output", str(run), "--resume", "--overwrite")
    assert status == 2 and "resume and overwrite" in _one_error_line(err)


def test_an_initial_model_of_another_seed_or_shape_is_never_reused(tmp_path, capsys):
    assert _main(capsys, "--output", str(tmp_path / "clean"))[0] == 0
    for other in (["--seed", "5"], ["--tiny-hidden", "16"]):
        leftover = tmp_path / f"leftover{other[1]}"
        assert _main(capsys, "--output", str(leftover), *other)[0] == 0
        for name in ("config.json", "metrics.jsonl", "checkpoints"):  # only the model is left, as after a kill
            shutil.rmtree(leftover / name) if name == "checkpoints" else (leftover / name).unlink()
        with pytest.warns(RuntimeWarning, match="initial_model was built for another run.*rebuilding"):
            assert _main(capsys, "--output", str(leftover))[0] == 0
        assert _digests(leftover / "initial_model") == _digests(tmp_path / "clean" / "initial_model")
        assert _same_rows(_rows(leftover), _rows(tmp_path / "clean"))


def test_resume_never_changes_the_models_shape(tmp_path, capsys):
    run = tmp_path / "run"
    assert _main(capsys, "--output", str(run))[0] == 0
    for missing_model in (False, True):
        if missing_model:
            shutil.rmtree(run / "initial_model")
        for flags in (["--tiny-hidden", "64", "--resume-changes", "tiny_hidden"],
                      ["--tiny-layers", "2", "--resume-changes", "all"]):
            status, err = _main(capsys, "--output", str(run), "--resume", "--steps", "3", *flags)
            assert status == 2 and "cannot change when a run resumes" in _one_error_line(err), err
    assert [row["step"] for row in _rows(run)] == [1, 2]


def test_a_pickle_planted_in_the_initial_model_is_never_loaded(tmp_path, capsys):
    run = tmp_path / "run"
    assert _main(capsys, "--output", str(run))[0] == 0
    model = run / "initial_model"
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(evil_pickle(tmp_path, tmp_path / "code-ran"))
    files = {p.name: {"bytes": p.stat().st_size, "sha256": ckpt.file_digest(p)[0]}
             for p in model.iterdir() if p.name != "erl_manifest.json"}
    (model / "erl_manifest.json").write_text(json.dumps({"files": files}))  # a manifest that vouches for it
    status, err = _main(capsys, "--output", str(run), "--resume", "--steps", "3")
    assert not (tmp_path / "code-ran").exists(), "loading the initial model ran code"


# --- 3. one run per folder ---------------------------------------------------------------------------------------


def test_two_runs_in_one_folder_one_gets_a_one_line_error(tmp_path):
    run = tmp_path / "run"
    first = _subprocess("--output", str(run), "--steps", "100000", "--checkpoint-every", "0")
    try:
        deadline = time.monotonic() + 240
        while not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        second = _subprocess("--output", str(run), "--steps", "3")
        code, (_, err) = second.wait(timeout=240), second.communicate()
        assert code == 2 and f"is in use by another run (pid {first.pid})" in _one_error_line(err), err
        assert first.poll() is None  # the first run goes on, alone
        time.sleep(1.0)
    finally:
        first.kill()
        first.wait()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()[:-1]]
    assert steps == list(range(1, len(steps) + 1))  # one run's rows only, never [1, 1, 2, 2, ...]


def test_a_lock_left_by_a_killed_process_never_blocks(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from erl_agents.run_folder import RunLock; "
                               "lock = RunLock(sys.argv[1]); print('locked', flush=True); time.sleep(300)", str(run)],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        status, err = _main(capsys, "--output", str(run))
        assert status == 2 and f"(pid {holder.pid})" in _one_error_line(err)
    finally:
        holder.kill()  # SIGKILL: the lock file stays, its lock does not
        holder.wait()
    assert (run / ".lock").read_text().strip() == str(holder.pid)
    assert _main(capsys, "--output", str(run))[0] == 0
    RunLock(run).release()  # and the finished run released it


def test_a_symlinked_lock_leaves_its_target_untouched(tmp_path, capsys):
    """A ``.lock`` planted as a symbolic link (a run folder received from elsewhere) is refused by name, for a new
    run and for ``--resume``; the file it points to keeps its bytes."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / ".lock").symlink_to(victim)
    status, err = _main(capsys, "--output", str(fresh))
    assert status == 2 and "is a symbolic link" in _one_error_line(err)
    assert victim.read_text() == "precious\n"
    received = tmp_path / "received"
    assert _main(capsys, "--output", str(received))[0] == 0
    assert not (received / ".lock").exists()  # removed at the clean end of the run
    (received / ".lock").symlink_to(victim)
    status, err = _main(capsys, "--output", str(received), "--resume", "--steps", "3")
    assert status == 2 and "is a symbolic link" in _one_error_line(err)
    assert victim.read_text() == "precious\n" and (received / ".lock").is_symlink()


def test_a_released_lock_is_removed_and_the_next_run_locks_a_file_of_its_own(tmp_path):
    first = RunLock(tmp_path)
    assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
    first.release()
    assert not (tmp_path / ".lock").exists()
    second = RunLock(tmp_path)  # a new file at .lock, locked: a third run is refused on it
    with pytest.raises(RunFolderLockedError, match=f"pid {os.getpid()}"):
        RunLock(tmp_path)
    second.release()
    assert not (tmp_path / ".lock").exists()


# --- 6. user errors are one line (tracebacks with --debug) --------------------------------------------------------


def _bad_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("steps: 3\nlr: [1, 2\nseed: 1\n")
    return ["--config", str(path)], f"config file {path}: line 3, column 5: not valid YAML"


def _no_manifest(tmp_path):
    run = tmp_path / "run"
    ckpt.save_checkpoint(run / "checkpoints", 1, {"weights": torch.zeros(2)})
    (run / "checkpoints" / "step_000001.json").unlink()  # killed between the rename and its manifest
    return ["--output", str(run), "--resume"], "no usable checkpoint in"


def _planted_pickle(tmp_path):
    """A crafted old-format checkpoint with a manifest that vouches for it: unpickling it would create a file."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    plant(run / "checkpoints" / "step_000001.pt", evil_pickle(tmp_path, tmp_path / "code-ran"))
    return ["--output", str(run), "--resume"], "step_000001.pt is in the old pickle format"


def _under_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    return ["--output", str(tmp_path / "file" / "run")], "cannot create the run folder"


@pytest.mark.parametrize("case", [
    _bad_yaml,
    lambda tmp_path: (["--config", str(tmp_path / "missing.yaml")], "missing.yaml does not exist"),
    lambda tmp_path: (["--env", "ERL-FrozenLak-v0"], "ERL-FrozenLak"),
    _under_a_file,
    _no_manifest,
    _planted_pickle,
    lambda tmp_path: (["--max-grad-norm", "-1"], "max_grad_norm must be positive, got -1.0"),
    lambda tmp_path: (["--env-kwargs", "[" * 50_000 + "]" * 50_000], "--env-kwargs is not valid JSON: nested deeper"),
    lambda tmp_path: (["--env-kwargs", '{"p": NaN}'], "--env-kwargs is not valid JSON: the number NaN"),
    lambda tmp_path: (["--env", "CartPole-v1", "--env-kwargs", "{}"], "CartPole-v1 is not a text env"),
    lambda tmp_path: (["--tasks-per-step", "10000000"], "tasks_per_step must be at least 1 and at most 65,536"),
    lambda tmp_path: (["--eval-tasks", "0"], "eval_tasks must be at least 1 and at most 1,000,000, got 0"),
    lambda tmp_path: (["--device", "tpu"], "device must be one of ['auto', 'cpu', 'cuda'], got 'tpu'"),
], ids=["yaml", "missing-config", "env-typo", "output-under-a-file", "no-usable-checkpoint", "planted-pickle",
        "grad-norm", "deep-env-kwargs", "nan-env-kwargs", "not-a-text-env", "huge-batch", "eval-tasks", "device"])
def test_user_errors_end_with_one_line_and_status_2(tmp_path, capsys, case):
    argv, words = case(tmp_path)
    argv = ["--output", str(tmp_path / "out"), *argv]
    status, err = _main(capsys, *argv)
    assert status == 2 and words in _one_error_line(err), err
    assert not (tmp_path / "code-ran").exists(), "a checkpoint ran code"
    with pytest.raises(Exception):
        main([*CLI, *argv, "--debug"])


def test_the_command_line_shows_no_traceback_for_a_bad_config_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("steps: [\n")
    done = subprocess.run([sys.executable, "-m", "erl_agents.train", "--config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"erl-train: error: config file {path}: line 2") and done.stderr.count("\n") == 1


# --- 10. a full or read-only disk ---------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (root only); skipped where mounting is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root); the fault-injecting tests cover the same path")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_during_a_checkpoint_is_named_and_the_old_checkpoint_survives(small_disk):
    folder = small_disk / "checkpoints"
    ckpt.save_checkpoint(folder, 1, {"weights": torch.zeros(10)})
    with pytest.raises(RunFolderError, match=r"cannot write .*step_000002.safetensors: no space left on device"):
        ckpt.save_checkpoint(folder, 2, {"weights": torch.zeros(1_000_000)})  # 4 MB on a 2 MB disk
    assert sorted(p.name for p in folder.iterdir()) == ["step_000001.json", "step_000001.safetensors"]
    assert ckpt.load_latest_checkpoint(folder)[1]["step"] == 1


def test_erl_train_on_a_full_or_read_only_disk_ends_with_one_line(small_disk, capsys):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (2 * 1024 * 1024 - 64 * 1024))  # leave 64 kB: less than the tiny model needs
    status, err = _main(capsys, "--output", str(small_disk / "run"))
    assert status == 2 and "no space left on device" in _one_error_line(err)
    filler.unlink()
    shutil.rmtree(small_disk / "run")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    status, err = _main(capsys, "--output", str(small_disk / "run"))
    assert status == 2 and "read-only file system" in _one_error_line(err)


def test_a_write_that_fails_midway_is_named_and_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def torch_like_failure(f):
        f.write(b"partial")
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:  # torch reports the failed write as a RuntimeError raised while handling it
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1968128 vs 1968016")

    with pytest.raises(RunFolderError, match=f"cannot write {target}: no space left on device"):
        write_atomically(target, torch_like_failure)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


# --- 12. --eval-set auto finds ../shared --------------------------------------------------------------------------


def test_paper_tasks_are_found_in_erl_shared_and_used_only_when_they_fit(tmp_path, monkeypatch):
    from erl_agents.evaluate import task_fits, paper_tasks_folder

    def _tasks_fit(tasks, env_kwargs):
        return all(task_fits(options, env_kwargs) for _, options in tasks)

    (tmp_path / "paper_tasks").mkdir()
    monkeypatch.delenv("ERL_PAPER_TASKS", raising=False)
    monkeypatch.setenv("ERL_SHARED", str(tmp_path))
    assert paper_tasks_folder() == tmp_path / "paper_tasks"
    monkeypatch.setenv("ERL_PAPER_TASKS", str(tmp_path / "nowhere"))
    assert paper_tasks_folder() == tmp_path / "paper_tasks"
    frozen = [(1, {"size": 3, "p": 0.8}), (2, {"size": 8, "p": 0.8})]
    assert _tasks_fit(frozen, {}) and _tasks_fit(frozen, {"size": [2, 9]}) and not _tasks_fit(frozen, {"size": [2, 4]})
    level = [(0, {"level": ["#####", "#@$.#", "#####"]})]
    assert _tasks_fit(level, {"size": 6}) and not _tasks_fit(level, {"size": [2, 4]})


def test_eval_set_auto_uses_the_shared_paper_tasks_beside_the_checkout(tmp_path, monkeypatch):
    from conftest import PAPER_TASKS
    from erl_agents.config import build_config
    from erl_agents.trainer import Trainer

    if not PAPER_TASKS.is_dir():
        pytest.skip(f"the paper's task sets are not at {PAPER_TASKS}")
    monkeypatch.delenv("ERL_PAPER_TASKS", raising=False)
    monkeypatch.setenv("ERL_SHARED", str(PAPER_TASKS.parent))
    flags = dict(env="ERL-FrozenLake-v0", model="tiny", output=str(tmp_path / "run"), steps=1, tasks_per_step=1,
                 n_erl=1, eval_tasks=5, tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_intermediate=64,
                 tiny_vocab=300, progress=False, eval_set="auto")
    trainer = Trainer(build_config(flags=flags))
    trainer.close()
    from erl_agents.evaluate import paper_tasks

    assert trainer.eval_tasks == paper_tasks("ERL-FrozenLake-v0", PAPER_TASKS)[:5]
    flags.update(env_kwargs={"size": [2, 4]}, output=str(tmp_path / "small"))
    trainer = Trainer(build_config(flags=flags))  # the paper's 2-9 boards do not fit a 2-4 run: seeded tasks
    trainer.close()
    assert trainer.eval_tasks != paper_tasks("ERL-FrozenLake-v0", PAPER_TASKS)[:5]


def test_a_trainer_that_cannot_be_built_releases_its_folder(tmp_path):
    from erl_agents.config import build_config
    from erl_agents.run_folder import ResumeRefusedError
    from erl_agents.trainer import Trainer

    flags = dict(env="TextBandit-v0", env_kwargs={"turns": 1}, algo="rlvr", n_rlvr=2, model="tiny", steps=1,
                 tasks_per_step=2, max_new_tokens=4, constrained_actions=True, eval_every=0, checkpoint_every=1,
                 tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=300, progress=False,
                 save_final_model=False, output=str(tmp_path / "run"))
    Trainer(build_config(flags=flags)).train()
    with pytest.raises(ResumeRefusedError, match="n_rlvr 2 -> 3") as caught:
        Trainer(build_config(flags={**flags, "resume": True, "n_rlvr": 3}))
    assert caught.value is not None  # the failed trainer is still referenced by the traceback, yet the folder is free
    RunLock(tmp_path / "run").release()
