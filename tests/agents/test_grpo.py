"""Advantages and losses against hand-computed values (erl_agents/grpo.py)."""

import math

import pytest
import torch

from erl_agents.grpo import (
    aggregate,
    group_advantages,
    k3_kl,
    ppo_token_loss,
    raft_advantages,
    reverse_kl,
    token_log_probs,
)


def test_grpo_advantages_use_the_unbiased_std_per_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    adv = group_advantages(rewards, groups, "grpo")
    # group 0: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735
    assert adv[:4].tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
    # group 1: mean 1/3, unbiased std sqrt((4/9 + 1/9 + 1/9) / 2) = 0.57735
    assert adv[4:].tolist() == pytest.approx([1.154700, -0.577350, -0.577350], abs=1e-5)


def test_identical_rewards_give_zero_advantage():
    for estimator in ("grpo", "dr_grpo"):
        adv = group_advantages(torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]), estimator)
        assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_dr_grpo_only_centres():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.3]), torch.tensor([0, 0, 0, 0]), "dr_grpo")
    assert adv.tolist() == pytest.approx([0.55, -0.45, 0.05, -0.15], abs=1e-6)


def test_single_member_groups_follow_the_documented_choice():
    rewards, groups = torch.tensor([1.0, 0.0, 0.6, 0.0]), torch.tensor([0, 1, 2, 2])
    verl = group_advantages(rewards, groups, "grpo", single_member="reward")
    assert verl[:2].tolist() == [1.0, 0.0]  # raw reward, as verl (the paper's code) does
    zero = group_advantages(rewards, groups, "grpo", single_member="zero")
    assert zero[:2].tolist() == [0.0, 0.0]
    assert verl[2:].tolist() == pytest.approx(zero[2:].tolist())  # larger groups are unaffected
    assert not torch.isnan(verl).any()


def test_raft_is_max_reward_zero():
    assert raft_advantages(torch.tensor([-0.5, 0.0, 0.4, 1.0])).tolist() == pytest.approx([0.0, 0.0, 0.4, 1.0])
    adv = group_advantages(torch.tensor([-1.0, 0.7]), torch.tensor([0, 0]), "raft")
    assert adv.tolist() == pytest.approx([0.0, 0.7])


def test_bad_advantage_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        group_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), "ppo")
    with pytest.raises(ValueError, match="same length"):
        group_advantages(torch.zeros(2), torch.zeros(3, dtype=torch.long))


def test_ppo_loss_clips_asymmetrically_and_pessimistically():
    ratios = torch.tensor([1.5, 0.5, 0.5, 1.5, 1.1])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0])
    loss, clipped = ppo_token_loss(torch.log(ratios), torch.zeros(5), adv, clip_low=0.2, clip_high=0.28)
    # A > 0: the ratio's gain is capped at 1 + 0.28; A < 0: its drop is capped at 1 - 0.2; the max keeps the worse.
    assert loss.tolist() == pytest.approx([-1.28, -0.5, 0.8, 1.5, -1.1], abs=1e-6)
    assert clipped.tolist() == [True, False, True, False, False]


def test_k3_kl_matches_the_formula_and_is_zero_at_equality():
    log_p, ref = torch.tensor([0.0, -1.0]), torch.tensor([math.log(0.5), -1.0])
    assert k3_kl(log_p, ref).tolist() == pytest.approx([0.5 - math.log(0.5) - 1.0, 0.0], abs=1e-6)


def test_dual_clip_caps_the_loss_of_negative_advantages_by_hand():
    # Clip 0.2 / 0.28, c = 3. Per token: PPO's max(-A r, -A clip(r)), then for A < 0 at most -A c.
    ratios = torch.tensor([4.0, 2.0, 0.5, 4.0, 10.0])
    adv = torch.tensor([-1.0, -1.0, -2.0, 1.0, -0.5])
    loss, active = ppo_token_loss(torch.log(ratios), torch.zeros(5), adv, 0.2, 0.28, clip_ratio_c=3.0)
    # r=4, A=-1: max(4, 1.28) = 4, capped at 3.  r=2, A=-1: max(2, 1.28) = 2 < 3.  r=0.5, A=-2: max(1, 1.6) = 1.6.
    # r=4, A=+1: max(-4, -1.28) = -1.28, no dual clip for A > 0.  r=10, A=-0.5: max(5, 0.64) = 5, capped at 1.5.
    assert loss.tolist() == pytest.approx([3.0, 2.0, 1.6, -1.28, 1.5], abs=1e-6)
    assert active.tolist() == [True, False, True, True, True]
    plain, _ = ppo_token_loss(torch.log(ratios), torch.zeros(5), adv, 0.2, 0.28, clip_ratio_c=0.0)
    assert plain.tolist() == pytest.approx([4.0, 2.0, 1.6, -1.28, 5.0], abs=1e-6)
    # A capped token carries no gradient: it can no longer dominate an off-policy mini-batch.
    log_r = torch.log(ratios).requires_grad_()
    ppo_token_loss(log_r, torch.zeros(5), adv, 0.2, 0.28, clip_ratio_c=3.0)[0].sum().backward()
    assert log_r.grad.tolist() == pytest.approx([0.0, 2.0, 0.0, 0.0, 0.0], abs=1e-6)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_token_loss(torch.zeros(1), torch.zeros(1), torch.ones(1), clip_ratio_c=0.5)


def test_k3_kl_and_the_ratio_are_clamped_like_verl():
    # ref - logp = 30 is bounded to 20 before exp(), and k3 to at most 10: finite value, finite (zero) gradient.
    log_p = torch.tensor([-30.0, 0.0], requires_grad=True)
    kl = k3_kl(log_p, torch.tensor([0.0, math.log(0.5)]))
    assert kl.tolist() == pytest.approx([10.0, 0.5 - math.log(0.5) - 1.0], abs=1e-6)
    kl.sum().backward()
    assert torch.isfinite(log_p.grad).all()
    # A log-ratio of 200 would overflow exp() in float32; bounded to 20 it stays finite.
    loss, _ = ppo_token_loss(torch.tensor([200.0]), torch.zeros(1), torch.ones(1), clip_ratio_c=3.0)
    assert loss.tolist() == pytest.approx([-1.28])
    loss, _ = ppo_token_loss(torch.tensor([200.0]), torch.zeros(1), -torch.ones(1), clip_ratio_c=0.0)
    assert loss.item() == pytest.approx(math.exp(20.0), rel=1e-5)


def test_token_log_probs_with_temperature_and_allowed_sets():
    logits = torch.tensor([[2.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    targets = torch.tensor([0, 1])
    log_p, entropy = token_log_probs(logits, targets, temperature=2.0)
    z = math.e + 2
    assert log_p.tolist() == pytest.approx([math.log(math.e / z), math.log(1 / z)], abs=1e-6)
    allowed = torch.tensor([[True, True, False], [False, True, False]])
    log_p, entropy = token_log_probs(logits, targets, temperature=1.0, allowed=allowed)
    assert log_p.tolist() == pytest.approx([math.log(math.e**2 / (math.e**2 + 1)), 0.0], abs=1e-6)
    assert entropy[1].item() == pytest.approx(0.0)
    assert torch.isfinite(entropy).all()


def test_reverse_kl_is_exact_and_zero_for_equal_distributions():
    s = torch.tensor([[0.0, 0.0]])
    t = torch.log(torch.tensor([[0.25, 0.75]]))
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert reverse_kl(s, t).item() == pytest.approx(expected, abs=1e-6)
    assert reverse_kl(t, t).item() == pytest.approx(0.0, abs=1e-6)
    allowed = torch.tensor([[True, False]])
    assert reverse_kl(s, t, allowed=allowed).item() == pytest.approx(0.0, abs=1e-6)


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", 10 / 4),
    ("seq-mean-token-mean", (2 + 4) / 2),
    ("seq-mean-token-sum", (6 + 4) / 2),
])
def test_aggregation_modes(mode, expected):
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_with_global_normalisers_sum_to_the_full_batch(mode):
    full = aggregate(LOSS, MASK, mode)
    parts = sum(aggregate(LOSS[i:i + 1], MASK[i:i + 1], mode, num_tokens=4, num_seqs=2) for i in range(2))
    assert parts.item() == pytest.approx(full.item())


def test_aggregate_rejects_unknown_modes_and_handles_empty_masks():
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(LOSS, MASK, "sum")
    assert aggregate(LOSS, torch.zeros_like(MASK), "token-mean").item() == 0.0


# ------------------------------------------------------------------------------ what mutation testing found unpinned


def test_defaults_are_the_papers():
    """GRPO, the paper's clip range 0.2 / 0.28 and temperature 1 when nothing is passed."""
    rewards, groups = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0])
    assert group_advantages(rewards, groups).tolist() == group_advantages(rewards, groups, "grpo").tolist()
    ratio = torch.tensor([0.5, 1.5]).log()
    loss, _ = ppo_token_loss(ratio, torch.zeros(2), torch.tensor([-1.0, 1.0]))
    assert loss.tolist() == pytest.approx([0.8, -1.28])  # clipped at 1 - 0.2 (negative A) and 1 + 0.28
    logits, target = torch.tensor([[0.0, 1.0]]), torch.tensor([1])
    assert token_log_probs(logits, target)[0].item() == pytest.approx(math.log(math.e / (1 + math.e)))


def test_groups_of_two_use_n_minus_one_and_eps_is_added():
    # Two rewards 0 and 1: mean 0.5, unbiased std sqrt(0.5) = 0.70711; eps is added to the std, not taken off.
    adv = group_advantages(torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), eps=0.1)
    assert adv.tolist() == pytest.approx([-0.5 / (math.sqrt(0.5) + 0.1), 0.5 / (math.sqrt(0.5) + 0.1)], rel=1e-6)
    with pytest.raises(ValueError, match="single_member"):
        group_advantages(torch.tensor([1.0]), torch.tensor([0]), single_member="none")


def test_ppo_ratio_is_new_over_old_probability():
    # old log p = -1, new log p = -0.9: ratio e^0.1 = 1.105 (inside the clip range), loss -A * ratio.
    loss, active = ppo_token_loss(torch.tensor([-0.9]), torch.tensor([-1.0]), torch.tensor([2.0]))
    assert loss.item() == pytest.approx(-2.0 * math.exp(0.1)) and not active.item()


def test_dual_clip_accepts_any_c_above_one_and_refuses_one():
    loss, _ = ppo_token_loss(torch.tensor([2.0]).log(), torch.zeros(1), torch.tensor([-1.0]), clip_ratio_c=1.5)
    assert loss.item() == pytest.approx(1.5)  # min(max(2, 1.2), 1.5) for A = -1
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_token_loss(torch.zeros(1), torch.zeros(1), torch.ones(1), clip_ratio_c=1.0)


def test_entropy_and_reverse_kl_per_row_under_temperature():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
    _, entropy = token_log_probs(logits, torch.tensor([0, 0]))
    assert entropy[0].item() == pytest.approx(math.log(4))  # uniform over four: the largest, and positive
    student = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    teacher = torch.tensor([[0.0, 0.0], [0.0, 4.0]])
    kl = reverse_kl(student, teacher, temperature=2.0)  # both divided by 2 first

    def by_hand(s, t):
        p = torch.softmax(torch.tensor(s) / 2, -1)
        q = torch.softmax(torch.tensor(t) / 2, -1)
        return float((p * (p.log() - q.log())).sum())

    assert kl.shape == (2,)
    assert kl.tolist() == pytest.approx([by_hand([2.0, 0.0], [0.0, 0.0]), by_hand([0.0, 0.0], [0.0, 4.0])], rel=1e-5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
def test_aggregate_divides_by_one_token_or_sequence(mode):
    # One sequence with one masked-in token: the mean is the token itself.
    assert aggregate(torch.tensor([[3.0, 5.0]]), torch.tensor([[1, 0]]), mode).item() == 3.0


def test_dual_clip_leaves_positive_advantages_below_one_alone():
    loss, active = ppo_token_loss(torch.zeros(1), torch.zeros(1), torch.tensor([0.5]), clip_ratio_c=3.0)
    assert loss.item() == pytest.approx(-0.5) and not active.item()


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (3, 1.0), (0, 0.7), (5, 0.9), (1, 0.5)])
def test_the_sampling_cut_keeps_what_transformers_samplers_keep(top_k, top_p):
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    from erl_agents.grpo import truncate_logits

    torch.manual_seed(0)
    logits = torch.randn(6, 40) * 3
    expected = logits.clone()
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1:
        expected = TopPLogitsWarper(top_p)(None, expected)
    got = truncate_logits(logits, torch.full((6,), top_k), torch.full((6,), top_p))
    assert torch.equal(got.isinf(), expected.isinf())
    assert torch.equal(got[~got.isinf()], logits[~got.isinf()])


def test_sampled_log_probs_renormalise_over_the_kept_set():
    from erl_agents.grpo import sampled_log_probs

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [2.0, 1.0, 0.0, -1.0]])
    targets = torch.tensor([1, 1])
    allowed = torch.tensor([[True, True, True, True], [False, True, True, True]])
    got = sampled_log_probs(logits, targets, torch.full((2, 1), 0.5), allowed, torch.tensor([2, 0]),
                            torch.tensor([1.0, 1.0]))
    # row 0: temperature 0.5 keeps logits 4, 2 (top-2); row 1: the constraint drops token 0, all the rest kept
    assert torch.allclose(got[0], torch.log_softmax(torch.tensor([4.0, 2.0]), 0)[1])
    assert torch.allclose(got[1], torch.log_softmax(torch.tensor([2.0, 0.0, -2.0]), 0)[0])
