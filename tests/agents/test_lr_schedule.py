"""The learning-rate schedule: linear warm-up, then the paper's constant rate or a cosine to a tenth."""

import math

import pytest

from erl_agents.config import build_config
from erl_agents.trainer import Trainer
from erl_agents.update import lr_factor


def test_warm_up_is_linear_and_constant_stays_at_the_full_rate():
    assert [lr_factor(s, 4, "constant", 10) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_factor(0, 0, "constant", 10) == 1.0


def test_cosine_starts_at_the_full_rate_after_warm_up_and_ends_at_a_tenth():
    total, warmup = 22, 1
    factors = [lr_factor(s, warmup, "cosine", total) for s in range(total)]
    assert factors[0] == 1.0 and factors[1] == 1.0  # warm-up's last step, then the cosine's start
    assert factors[-1] == pytest.approx(0.1)
    assert factors[11] == pytest.approx(0.55)  # half way: the mean of 1 and 0.1
    assert all(a >= b for a, b in zip(factors[1:], factors[2:]))
    assert lr_factor(total + 5, warmup, "cosine", total) == pytest.approx(0.1)  # never below the floor


def test_an_unknown_schedule_is_refused_by_name():
    with pytest.raises(ValueError, match="lr_schedule"):
        build_config(flags=dict(preset="cpu-tiny", lr_schedule="linear"))


def test_the_trainer_logs_the_cosine_rate_step_by_step(tmp_path):
    steps, lr = 4, 1e-2
    config = build_config(flags=dict(
        preset="cpu-tiny", env="ERL-FrozenLake-v0", algo="rlvr", steps=steps, tasks_per_step=2, n_rlvr=2,
        eval_every=0, output=str(tmp_path / "run"), progress=False, save_final_model=False, checkpoint_every=0,
        tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=600, tiny_grid_tokens="cell",
        ppo_epochs=1, minibatches=1, lr=lr, warmup_steps=0, lr_schedule="cosine"))
    metrics = [m for m in Trainer(config).train() if m.get("step", 0) >= 1 and "lr" in m]
    # The logged rate is the one the next update uses: after step s, the factor of scheduler step s.
    expected = [lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / (steps - 1))))) for s in range(1, steps + 1)]
    assert [m["lr"] for m in metrics] == pytest.approx(expected)
