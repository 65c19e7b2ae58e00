"""old_logprobs="rollout": PPO's old policy taken from the engine's sampling log-probs instead of a no-grad pass.

Where the engine drew a row from the update's own distribution the two agree to float precision, so the update is
the same; the engine's numbers are really the ones used (a shift shows); rows drawn from another distribution (a
top-k cut) are still scored by the pass; and the agreement check moves to the first mini-batch without going blind.
"""

import copy

import pytest
import torch

from agents.test_update import _bandit_policy, _batch
from erl_agents.batch import assign_advantages
from erl_agents.config import build_config
from erl_agents.update import policy_update


def _config(old_logprobs):
    return build_config(flags=dict(algo="rlvr", temperature=1.0, kl_coef=0.0, lr=3e-2, max_grad_norm=1e9,
                                   ppo_epochs=2, minibatches=2, clip_low=0.05, clip_high=0.05,
                                   old_logprobs=old_logprobs, output="unused"))


def _update(policy, rows, table, old_logprobs, shift=0.0):
    """A copy of the policy after one update; ``shift`` is added to every engine log-prob first."""
    model = copy.deepcopy(policy.model)
    rows = copy.deepcopy(rows)
    for t in rows:
        t.logprobs = [lp + shift if m else lp for lp, m in zip(t.logprobs, t.mask)]
    config = _config(old_logprobs)
    assign_advantages(rows, config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    stats = policy_update(model, optimizer, None, rows, table, config, policy.tokenizer.pad_token_id)
    return [p.detach().clone() for p in model.parameters()], stats


def _same(a, b, atol=1e-4):
    return all(torch.allclose(x, y, atol=atol) for x, y in zip(a, b))


def test_the_engines_log_probs_give_the_recomputed_update():
    policy = _bandit_policy()
    rows, table = _batch(policy)
    recomputed, stats_r = _update(policy, rows, table, "recompute")
    rollout, stats_o = _update(policy, rows, table, "rollout")
    assert stats_r["optimizer_steps"] == stats_o["optimizer_steps"] == 4
    assert not _same(recomputed, [p.detach() for p in policy.model.parameters()])  # the update moved the weights
    assert _same(recomputed, rollout)
    assert stats_o["rollout/logprob_abs_diff"] < 1e-5 and stats_o["rollout/logprob_abs_diff_max"] < 1e-4


def test_rollout_mode_uses_the_engines_numbers_and_its_check_still_sees_a_gap():
    policy = _bandit_policy()
    rows, table = _batch(policy)
    recomputed, _ = _update(policy, rows, table, "recompute")
    shifted_recomputed, stats_r = _update(policy, rows, table, "recompute", shift=0.3)
    shifted_rollout, stats_o = _update(policy, rows, table, "rollout", shift=0.3)
    assert _same(recomputed, shifted_recomputed)  # the pass ignores the engine's numbers
    assert not _same(recomputed, shifted_rollout)  # rollout mode divides by them
    # Both checks report the planted gap: the pass's over every sampled row, rollout mode's over the first mini-batch.
    assert stats_r["rollout/logprob_abs_diff"] == pytest.approx(0.3, abs=1e-4)
    assert stats_o["rollout/logprob_abs_diff"] == pytest.approx(0.3, abs=1e-4)


def test_rows_drawn_under_a_top_k_cut_are_still_scored_by_the_pass():
    policy = _bandit_policy()
    rows, table = _batch(policy, top_k=3)
    assert all(t.top_k == 3 for t in rows)
    recomputed, _ = _update(policy, rows, table, "recompute")
    shifted_rollout, stats = _update(policy, rows, table, "rollout", shift=0.3)
    assert _same(recomputed, shifted_rollout)
    assert stats["rollout/logprob_abs_diff"] != stats["rollout/logprob_abs_diff"]  # NaN: no comparable row


def test_an_unknown_old_logprobs_source_is_refused_by_name():
    with pytest.raises(ValueError, match="old_logprobs"):
        build_config(flags=dict(old_logprobs="cached", output="unused"))
