"""Training faults: kill -9 and resume, corrupt checkpoints, NaN/inf updates, truncated replies, episode budgets."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from erl_agents.config import build_config
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
from erl_agents.train import build_parser
from erl_agents.batch import assign_advantages
from erl_agents.trainer import Trainer
from erl_agents.update import NonFiniteTrainingError, policy_update
from text_bandit import TextBanditEnv
from paths import ROOT


def _strip(rows):
    """Metrics without wall-clock fields: what must be identical between two runs with the same seed."""
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _rows(path):
    rows = []
    for line in Path(path).read_text().splitlines() if Path(path).exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line the killed process was writing
            pass
    return rows


# ----------------------------------------------------------------------------------------------------------------
# kill -9 in the middle of a run, then --resume


CLI = ["--env", "ERL-FrozenLake-v0", "--env-kwargs", '{"size": [2, 3]}', "--algo", "erl", "--reflector", "rule",
       "--n-erl", "3", "--model", "tiny", "--steps", "8", "--tasks-per-step", "3", "--temperature", "1.0",
       "--max-new-tokens", "8", "--reflect-max-new-tokens", "8", "--constrained-actions", "--lr", "3e-3",
       "--kl-coef", "0.01", "--eval-every", "4", "--eval-tasks", "2", "--eval-samples", "1", "--checkpoint-every", "2",
       "--tiny-hidden", "32", "--tiny-layers", "1", "--tiny-heads", "2", "--tiny-intermediate", "64",
       "--tiny-vocab", "300", "--max-seq-len", "1024", "--no-progress", "--no-save-final-model", "--threads", "1"]


def _erl_train(output: Path, *extra: str) -> subprocess.Popen:
    output.mkdir(parents=True, exist_ok=True)
    with open(output.parent / f"{output.name}.log", "a") as log:  # the child keeps its own copy of the handle
        return subprocess.Popen([sys.executable, "-m", "erl_agents.train", *CLI, "--output", str(output), *extra],
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                                stderr=subprocess.STDOUT)


def _finish(process: subprocess.Popen, log: Path) -> None:
    code = process.wait(timeout=300)
    assert code == 0, f"erl-train exited with {code}:\n{log.read_text()[-3000:]}"


def test_sigkill_mid_run_then_resume_ends_with_the_metrics_of_an_uninterrupted_run(tmp_path):
    straight = _erl_train(tmp_path / "straight")
    killed = _erl_train(tmp_path / "killed")
    metrics = tmp_path / "killed" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    try:
        # Past step 3 the step-2 checkpoint is on disk and step 4 (rollout, update or its checkpoint) is under way.
        while not any(r["step"] >= 3 for r in _rows(metrics)):
            log = (tmp_path / "killed.log").read_text()
            assert killed.poll() is None, f"the run ended before it was killed:\n{log}"
            assert time.monotonic() < deadline, "the run never reached step 3"
            time.sleep(0.01)
        os.kill(killed.pid, signal.SIGKILL)
    finally:
        killed.kill()
        killed.wait()
    assert killed.returncode == -signal.SIGKILL
    assert max(r["step"] for r in _rows(metrics)) < 8
    _finish(_erl_train(tmp_path / "killed", "--resume"), tmp_path / "killed.log")
    _finish(straight, tmp_path / "straight.log")
    resumed, expected = _rows(metrics), _rows(tmp_path / "straight" / "metrics.jsonl")
    assert [r["step"] for r in resumed] == list(range(9))
    assert _strip(resumed) == _strip(expected)


# ----------------------------------------------------------------------------------------------------------------
# In-process runs on a tiny text bandit


def _run_config(tmp_path, name, **overrides):
    flags = dict(env="TextBandit-v0", env_kwargs={"turns": 1}, algo="rlvr", model="tiny", output=str(tmp_path / name),
                 steps=4, tasks_per_step=2, n_rlvr=4, temperature=1.0, max_new_tokens=4, constrained_actions=True,
                 lr=3e-3, kl_coef=0.0, entropy_coef=0.01, eval_every=0, checkpoint_every=0, tiny_hidden=32,
                 tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=300, progress=False,
                 save_final_model=False)
    flags.update(overrides)
    return build_config(flags=flags)


def test_resume_skips_a_truncated_newest_checkpoint_and_still_matches(tmp_path):
    config = _run_config(tmp_path, "run", checkpoint_every=2, keep_checkpoints=3, eval_every=2, eval_tasks=2,
                         eval_samples=1)
    straight = _strip(Trainer(config).train())
    newest = tmp_path / "run" / "checkpoints" / "step_000004.safetensors"
    newest.write_bytes(newest.read_bytes()[:2048])
    with pytest.warns(RuntimeWarning, match="step_000004.safetensors is truncated"):
        trainer = Trainer(_run_config(tmp_path, "run", checkpoint_every=2, keep_checkpoints=3, eval_every=2,
                                      eval_tasks=2, eval_samples=1, resume=True))
    assert trainer.step == 2
    assert [r["step"] for r in _rows(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2]
    assert _strip(trainer.train()) == straight


def _nan_gradient_at(trainer, steps):
    """Make every gradient NaN during the given training steps, as a numerically broken model would."""
    parameter = next(trainer.policy.model.parameters())
    parameter.register_hook(lambda grad: grad * float("nan") if trainer.step in steps else grad)


def test_consecutive_non_finite_steps_stop_the_run_with_a_clear_error(tmp_path):
    trainer = Trainer(_run_config(tmp_path, "nan", steps=6, max_bad_steps=2, minibatches=2))
    before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    _nan_gradient_at(trainer, steps=range(1, 7))
    with pytest.warns(RuntimeWarning) as caught, \
            pytest.raises(NonFiniteTrainingError, match="NaN/inf in 2 consecutive steps .max_bad_steps=2"):
        trainer.train()
    assert [str(w.message).split(" for ")[0] for w in caught] == ["step 1: skipped 2 of 2 updates",
                                                                  "step 2: skipped 2 of 2 updates"]
    rows = _rows(tmp_path / "nan" / "metrics.jsonl")
    assert [(r["step"], r["skipped_updates"]) for r in rows] == [(1, 2), (2, 2)]
    after = trainer.policy.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # skipped updates never touched the weights
    assert not trainer.optimizer.state  # nor Adam's moments


def test_isolated_bad_steps_are_skipped_and_the_run_goes_on(tmp_path):
    trainer = Trainer(_run_config(tmp_path, "blips", steps=5, max_bad_steps=2))
    _nan_gradient_at(trainer, steps={2, 4})
    with pytest.warns(RuntimeWarning) as caught:
        metrics = trainer.train()
    assert [r["skipped_updates"] for r in metrics] == [0, 1, 0, 1, 0]
    assert all("(1 bad step(s) in a row)" in str(w.message) for w in caught) and len(caught) == 2
    assert all(torch.isfinite(p).all() for p in trainer.policy.model.parameters())


def test_max_bad_steps_zero_never_stops(tmp_path):
    trainer = Trainer(_run_config(tmp_path, "never", steps=3, max_bad_steps=0))
    _nan_gradient_at(trainer, steps=range(1, 4))
    with pytest.warns(RuntimeWarning) as caught:
        metrics = trainer.train()
    assert [r["skipped_updates"] for r in metrics] == [1, 1, 1]
    assert "(3 bad step(s) in a row)" in str(caught[-1].message)


def test_budget_and_truncation_counters_reach_the_metrics(tmp_path):
    config = _run_config(tmp_path, "budget", env_kwargs={"turns": 2}, steps=1, constrained_actions=False,
                         max_new_tokens=2, mask_truncated=True, episode_token_limit=1, entropy_coef=0.0)
    row = Trainer(config).train()[-1]
    # Every reply has at least one token, so every episode (two turns) is ended after its first.
    assert row["budget_ended"] == 8 and row["reward/attempt1"] == 0.0
    assert row["groups/zero_variance"] == 2  # all rewards 0 in both groups
    assert row["truncated"] >= 1 and row["skipped_updates"] == 0


# ----------------------------------------------------------------------------------------------------------------
# The pieces: policy_update guards, counters, rollout budgets


@pytest.fixture(scope="module")
def policy():
    env = TextBanditEnv(turns=2, contextual=True)
    corpus = [env.instructions] + env.valid_actions * 10 + [
        f"Turn {t} of 5. The prize is behind door {d}. Which door?" for t in range(1, 6) for d in "ABCD"] * 3
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=320)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), tokenizer)


def _bandit_episodes(policy, count=6, turns=3, seed=0, **kwargs):
    torch.manual_seed(seed)
    envs = [TextBanditEnv(turns=turns, contextual=True) for _ in range(count)]
    tasks = [i // 2 for i in range(count)]
    kwargs.setdefault("sampling", SamplingParams(1.0, 1.0, 0, 8))
    return run_episodes(policy, envs, [(i, None) for i in range(count)], tasks, kwargs.pop("sampling"), **kwargs)


def _update_config(**overrides):
    flags = dict(algo="rlvr", temperature=1.0, kl_coef=0.0, lr=1e-2, output="unused", minibatches=2)
    flags.update(overrides)
    return build_config(flags=flags)


@pytest.mark.parametrize("fault", ["nan_advantage", "inf_gradient"])
def test_a_non_finite_update_is_skipped_and_the_rest_still_train(policy, fault):
    model = build_tiny_model(policy.tokenizer, 32, 2, 2, 64, seed=1)
    table = ConstraintTable()
    trajectories = [t for e in _bandit_episodes(Policy(model, policy.tokenizer), table=table) for t in e.trajectories]
    for i, t in enumerate(trajectories):
        t.reward = float(i % 2)
    config = _update_config()
    assign_advantages(trajectories, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    hook = None
    if fault == "nan_advantage":
        trajectories[0].advantage = float("nan")  # poisons the first of the two minibatches only
    else:
        hook = next(model.parameters()).register_hook(lambda grad: torch.full_like(grad, float("inf")))
    stats = policy_update(model, optimizer, None, trajectories, table, config, policy.tokenizer.pad_token_id)
    if hook is not None:
        hook.remove()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    if fault == "nan_advantage":
        assert stats["skipped_updates"] == 1 and changed and torch.isfinite(torch.tensor(stats["loss"]))
    else:
        assert stats["skipped_updates"] == 2 and not changed and not optimizer.state


def test_truncated_replies_are_counted_and_optionally_masked_from_the_loss(policy):
    sampling = SamplingParams(1.0, 1.0, 0, 2)
    plain = [t for e in _bandit_episodes(policy, sampling=sampling) for t in e.trajectories]
    masked = [t for e in _bandit_episodes(policy, sampling=sampling, mask_truncated=True) for t in e.trajectories]
    assert sum(t.truncated_replies for t in plain) > 0
    for a, b in zip(plain, masked, strict=True):
        assert a.tokens == b.tokens and a.truncated_replies == b.truncated_replies
        dropped = [i for i, (x, y) in enumerate(zip(a.mask, b.mask)) if x != y]
        # Exactly the two sampled tokens of each cut-off reply lose their gradient; nothing else changes.
        assert len(dropped) == 2 * a.truncated_replies
        assert all(a.mask[i] == 1 and b.mask[i] == 0 and b.logprobs[i] == 0.0 for i in dropped)


def _reply_lengths(trajectory):
    """Lengths of the runs of model tokens: one per reply (constrained replies end with end-of-turn, all model)."""
    runs, current = [], 0
    for bit in trajectory.mask + [0]:
        if bit:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs


@pytest.mark.parametrize("limit", [1, 5])
def test_token_budget_ends_an_episode_with_reward_zero_and_a_flag(policy, limit):
    episodes = _bandit_episodes(policy, turns=5, constrained=True, token_limit=limit)
    for episode in episodes:
        (trajectory,) = episode.trajectories
        replies = _reply_lengths(trajectory)
        assert episode.budget_ended == "tokens" and episode.returns == 0.0 and not episode.success
        assert trajectory.budget_ended and trajectory.reward == 0.0 and not trajectory.success
        assert episode.generated_tokens == sum(replies)
        assert sum(replies[:-1]) < limit <= sum(replies) and len(replies) < 5


def test_episodes_within_budget_are_untouched(policy):
    free = _bandit_episodes(policy, turns=3, constrained=True)
    budgeted = _bandit_episodes(policy, turns=3, constrained=True, token_limit=10_000, time_limit=3600.0)
    for a, b in zip(free, budgeted, strict=True):
        assert b.budget_ended == "" and not b.trajectories[0].budget_ended
        assert (a.returns, a.trajectories[0].tokens) == (b.returns, b.trajectories[0].tokens)
        assert len(_reply_lengths(b.trajectories[0])) == 3


def test_time_budget_ends_episodes_after_the_turn_that_overran(policy):
    episodes = _bandit_episodes(policy, turns=3, constrained=True, time_limit=1e-9)
    for episode in episodes:
        assert episode.budget_ended == "time" and episode.returns == 0.0
        assert len(_reply_lengths(episode.trajectories[0])) == 1


def test_budget_inside_a_reflection_episode_stores_nothing(policy):
    from erl_envs.reflection.memory import ReflectionMemory
    from erl_envs.reflection import ReflectionWrapper
    from erl_envs.reflection.reflectors import RuleReflector

    memory = ReflectionMemory()
    envs = [ReflectionWrapper(TextBanditEnv(turns=1, contextual=True), memory=memory, reflector=RuleReflector())
            for _ in range(8)]
    torch.manual_seed(0)
    episodes = run_episodes(policy, envs, [(i, None) for i in range(8)], list(range(8)), SamplingParams(1.0, 1.0, 0, 8),
                            constrained=True, token_limit=1)
    ended = [e for e in episodes if e.budget_ended]
    solved = [e for e in episodes if not e.budget_ended]
    assert ended, "expected at least one failed first attempt"
    # A failed first attempt used the budget: the episode stops before its second attempt, scored 0.
    assert all([t.role for t in e.trajectories] == ["attempt1"] and e.returns == 0.0 for e in ended)
    assert all(e.success and e.record is not None for e in solved)
    assert not memory.get()


def test_fault_fields_are_validated_and_exposed_as_flags():
    for name in ("max_bad_steps", "episode_time_limit", "episode_token_limit"):
        with pytest.raises(ValueError, match=f"{name} must be non-negative"):
            build_config(flags={name: -1})
    args = build_parser().parse_args(["--max-bad-steps", "3", "--mask-truncated", "--episode-time-limit", "2.5",
                                      "--episode-token-limit", "64"])
    assert (args.max_bad_steps, args.mask_truncated, args.episode_time_limit, args.episode_token_limit) == (
        3, True, 2.5, 64)


# ----------------------------------------------------------------------------------------------------------------
# Weights made non-finite by an update; the time limit across a resume


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
def test_an_update_that_makes_the_weights_non_finite_stops_the_run_before_it_is_saved(tmp_path):
    trainer = Trainer(_run_config(tmp_path, "inf", checkpoint_every=1, max_bad_steps=0))
    real_step = trainer.optimizer.step

    def overflowing_step(*args, **kwargs):
        # A finite loss and gradient, but an update that overflows (too large a learning rate, a narrow dtype).
        result = real_step(*args, **kwargs)
        if trainer.step == 2:
            with torch.no_grad():
                next(trainer.policy.model.parameters()).view(-1)[0] = float("inf")
        return result

    trainer.optimizer.step = overflowing_step
    with pytest.raises(NonFiniteTrainingError, match="stopping at step 2: an optimizer step made weights NaN/inf "
                                                     "\\(lr 0.003\\).*--resume-changes lr"):
        trainer.train()
    saved = sorted(p.name for p in (tmp_path / "inf" / "checkpoints").iterdir())
    assert saved == ["step_000001.json", "step_000001.safetensors"]  # nothing non-finite reached a checkpoint


def test_a_step_with_nothing_to_train_writes_strict_json(tmp_path):
    """A step whose every update is skipped has no loss: metrics.jsonl says null, never the non-JSON NaN."""
    trainer = Trainer(_run_config(tmp_path, "skip", steps=2, max_bad_steps=0, minibatches=2))
    _nan_gradient_at(trainer, {1, 2})
    with pytest.warns(RuntimeWarning, match="skipped"):
        rows = trainer.train()
    text = (tmp_path / "skip" / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    written = [json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in metrics.jsonl"))
               for line in text.splitlines()]
    assert written[-1]["loss"] is None and written[-1]["grad_norm"] is None and rows[-1]["loss"] is None


def test_a_non_finite_learning_rate_is_refused_up_front():
    with pytest.raises(TypeError, match="lr must be a finite number, got inf"):
        build_config(flags={"lr": float("inf")})


class _Clock:
    """Stands in for the trainer's ``time`` module: every reading advances one second, so a step takes the same
    "time" in every run and a time-limited run stops at a step that does not depend on the machine's load."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_a_time_limited_run_killed_and_resumed_ends_where_the_uninterrupted_one_does(tmp_path, monkeypatch):
    from erl_agents import trainer as trainer_module

    real_update = trainer_module.policy_update

    def run(name, stop_at=None, **overrides):
        monkeypatch.setattr(trainer_module, "time", _Clock())
        trainer = Trainer(_run_config(tmp_path, name, steps=50, time_limit_min=1.0, checkpoint_every=2, **overrides))

        def update(*args, **kwargs):
            if trainer.step == stop_at:
                raise KeyboardInterrupt  # the process dies in the middle of this step
            return real_update(*args, **kwargs)

        monkeypatch.setattr(trainer_module, "policy_update", update)
        return trainer.train()

    straight = run("straight")
    assert 4 < straight[-1]["step"] < 50  # the limit, not the step count, ended it
    with pytest.raises(KeyboardInterrupt):
        run("killed", stop_at=5)
    resumed = run("killed", resume=True)
    assert resumed[-1]["step"] == straight[-1]["step"]
    assert resumed[-1]["time/training"] == pytest.approx(straight[-1]["time/training"], abs=3.0)
    assert _strip(resumed) == _strip(straight)
