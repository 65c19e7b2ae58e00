"""The update: gradients do not depend on micro-batching, env tokens never get gradient, and verl's mini-batch
schedule (rollout order, blocks of ppo_mini_batch_size tasks x n rows) at the paper's batch shapes."""

import pytest
import torch

from erl_agents.batch import assign_advantages
from erl_agents.config import build_config
from erl_agents.distributed import World
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import ConstraintTable, SamplingParams, Trajectory, run_episodes
from erl_agents.update import _micro_batch_loss, minibatch_plan, policy_update
from text_bandit import TextBanditEnv


def _bandit_policy(seed=0):
    env = TextBanditEnv(turns=2, contextual=True)
    corpus = [env.instructions] + env.valid_actions * 10 + [
        f"Turn {t} of 2. The prize is behind door {d}. Which door?" for t in range(1, 3) for d in "ABCD"] * 3
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=320)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=seed), tokenizer)


def _batch(policy, seed=0, top_k=0):
    torch.manual_seed(seed)
    envs = [TextBanditEnv(turns=2, contextual=True) for _ in range(8)]
    tasks = [i // 4 for i in range(8)]
    table = ConstraintTable()
    episodes = run_episodes(policy, envs, [(t, None) for t in tasks], tasks, SamplingParams(1.0, 1.0, top_k, 5),
                            constrained=False, table=table)
    trajectories = [t for e in episodes for t in e.trajectories]
    for i, t in enumerate(trajectories):
        t.reward = float(i % 3)  # varied rewards, so every group has non-zero advantages
    return trajectories, table


def _config(**overrides):
    base = dict(algo="rlvr", temperature=1.0, kl_coef=0.0, lr=1e-2, max_grad_norm=1e9, output="unused")
    base.update(overrides)
    return build_config(flags=base)


def _grads(policy, trajectories, table, config):
    policy.model.zero_grad()
    optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.0)  # lr 0: we only inspect the gradients
    policy_update(policy.model, optimizer, None, trajectories, table, config, policy.tokenizer.pad_token_id)
    return [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batch_split_does_not_change_the_gradient(agg):
    policy = _bandit_policy()
    trajectories, table = _batch(policy)
    assign_advantages(trajectories, _config())
    whole = _grads(policy, trajectories, table, _config(micro_batch_size=64, loss_agg=agg))
    split = _grads(policy, trajectories, table, _config(micro_batch_size=1, loss_agg=agg))
    assert len(whole) == len(split) > 0
    for a, b in zip(whole, split):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_env_tokens_never_receive_gradient():
    policy = _bandit_policy()
    trajectories, table = _batch(policy)
    config = _config(kl_coef=0.0)
    assign_advantages(trajectories, config)
    t = trajectories[0]
    base, _ = _micro_batch_loss(policy.model, None, [t], table, config, policy.tokenizer.pad_token_id, 10.0, 1.0, None)
    # A trailing env turn changes nothing: env tokens are never prediction targets.
    t.append(policy.chat.user_turn("Turn 3 of 2. Anything at all."), model=False)
    longer, _ = _micro_batch_loss(policy.model, None, [t], table, config, policy.tokenizer.pad_token_id, 10.0, 1.0, None)
    assert longer.item() == pytest.approx(base.item(), abs=1e-6)
    # With every token marked as env, there is no loss and no gradient at all.
    t.mask = [0] * len(t.mask)
    t.advantage = 1.0
    policy.model.zero_grad()
    loss, _ = _micro_batch_loss(policy.model, None, [t], table, config, policy.tokenizer.pad_token_id, 1.0, 1.0, None)
    loss.backward()
    assert loss.item() == 0.0
    assert all(p.grad is None or not p.grad.any() for p in policy.model.parameters())


def _rows(roles_and_tasks, length=6, vocab=40, seed=0):
    """Scripted trajectories of ``length`` tokens, the last two the model's: the update's cost, not the rollout's."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k, (role, task) in enumerate(roles_and_tasks):
        tokens = torch.randint(3, vocab, (length,), generator=g).tolist()
        rows.append(Trajectory(role=role, task=task, episode=k, tokens=tokens, mask=[0] * (length - 2) + [1, 1],
                               logprobs=[0.0] * (length - 2) + [-1.0, -1.0], constraints=[-1] * length,
                               prompt_len=length - 2, system_prompt="", first_observation="",
                               reward=float(k % 2)))
    return rows


def test_paper_schedule_rlvr_one_step_erl_several_at_paper_batch_shapes():
    corpus = ["a b c d e f g h"] * 4
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=300)
    policy = Policy(build_tiny_model(tokenizer, 16, 1, 2, 32, seed=0), tokenizer)
    flags = dict(model="tiny", device="cpu", dtype="float32", output="unused", micro_batch_size=1024,
                 gradient_checkpointing=False, kl_coef=0.0)
    steps = {}
    for algo in ("rlvr", "erl"):
        config = build_config({"preset": "paper-qwen3-4b"}, flags=dict(flags, algo=algo))
        assert (config.ppo_mini_batch_size, config.tasks_per_step, config.clip_ratio_c) == (64, 64, 3.0)
        if algo == "rlvr":  # 64 tasks x 10 first attempts
            layout = [("attempt1", task) for task in range(64) for _ in range(10)]
        else:  # 64 tasks x 4 first attempts; 100 of them failed: + a reflection, a retry and a distilled copy each
            layout = [("attempt1", task) for task in range(64) for _ in range(4)]
            layout += [(role, k % 64) for k in range(100) for role in ("reflection", "attempt2")]
            layout += [("distilled", k % 64) for k in range(100)]
        rows = _rows(layout)
        assign_advantages(rows, config)
        plan = minibatch_plan(rows, config, World())
        # verl's split: consecutive blocks of 64 tasks x n rows, in rollout order, no shuffle.
        block = 64 * config.group_size
        assert [len(p) for p in plan] == [min(block, len(rows) - i) for i in range(0, len(rows), block)]
        assert [t for p in plan for t in p] == rows
        optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-6)
        stats = policy_update(policy.model, optimizer, None, rows, ConstraintTable(), config,
                              tokenizer.pad_token_id)
        steps[algo] = stats["optimizer_steps"]
    assert steps == {"rlvr": 1, "erl": 3}  # 640 rows = 1 x 640; 556 rows = 256 + 256 + 44


def test_mini_batch_schedule_and_minibatches_cannot_both_be_set():
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        _config(ppo_mini_batch_size=8, minibatches=2)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        _config(clip_ratio_c=1.0)


def test_the_update_scores_every_row_at_the_rollout_temperature_when_asked():
    """verl passes one temperature for the whole batch (the rollout's, 0.7), so the reference scores its
    reflections, sampled at 0.5, at 0.7; the project's default scores each row at the temperature it was sampled
    at. A reflection row's log-probs (seen through the entropy the loss reports) follow the choice."""
    from erl_agents.update import row_temperatures

    policy = _bandit_policy()
    trajectories, table = _batch(policy)
    rows = trajectories[:3]
    rows[1].role = "reflection"
    sampled = _config(temperature=0.7, reflect_temperature=0.5)
    rollout = _config(temperature=0.7, reflect_temperature=0.5, logprob_temperature="rollout")
    assert row_temperatures(rows, sampled).tolist() == pytest.approx([0.7, 0.5, 0.7])
    assert row_temperatures(rows, rollout).tolist() == pytest.approx([0.7, 0.7, 0.7])

    def entropy(config):
        reflection = [rows[1]]
        pad, tokens = policy.tokenizer.pad_token_id, float(rows[1].num_model_tokens)
        return _micro_batch_loss(policy.model, None, reflection, table, config, pad, tokens, 1.0, None)[1]["entropy"]

    at_07 = entropy(_config(temperature=0.7, reflect_temperature=0.7))
    assert entropy(rollout) == pytest.approx(at_07)
    assert entropy(sampled) != pytest.approx(at_07)


# ----------------------------------------------------------------------------------------------------------------
# The loss, term by term (what mutation testing found unpinned: the KL, entropy and consolidation terms)


def _row(role, tokens, first_model_token, advantage, teacher_tokens=None, teacher_offset=0):
    mask = [0] * first_model_token + [1] * (len(tokens) - first_model_token)
    return Trajectory(role=role, task=0, episode=0, tokens=list(tokens), mask=mask, logprobs=[0.0] * len(tokens),
                      constraints=[-1] * len(tokens), prompt_len=first_model_token, system_prompt="s",
                      first_observation="o", advantage=advantage, teacher_tokens=teacher_tokens,
                      teacher_offset=teacher_offset)


def _by_hand(model, row, temperature):
    """Per model token of ``row``: its logits (position j predicts token j + 1), log-prob and entropy."""
    with torch.no_grad():
        logits = model(torch.tensor([row.tokens])).logits[0, :-1]
    keep = torch.tensor(row.mask[1:], dtype=torch.bool)
    logits = logits[keep].float()
    log_probs = torch.log_softmax(logits / temperature, dim=-1)
    targets = torch.tensor(row.tokens[1:])[keep]
    return logits, log_probs.gather(-1, targets[:, None])[:, 0], -(log_probs.exp() * log_probs).sum(-1)


def _loss_by_hand(model, reference, batch, temperature, kl_coef, entropy_coef, distill_coef, table=None):
    """The micro-batch loss summed over tokens, with its KL and entropy sums, each term from its own definition:
    PPO at ratio 1 (-A per token) + kl_coef * k3(policy, reference) - entropy_coef * entropy, + distill_coef *
    KL(student || teacher) on rows with teacher tokens, the teacher read teacher_offset positions later. With a
    constraint table, each token is scored under the set it was sampled from (every other token masked out)."""
    from erl_agents.grpo import k3_kl

    def log_probs_of(logits, row):
        logits = logits.float() / temperature
        if table is not None:
            sets = [table.sets[c] if c >= 0 else None for c, m in zip(row.constraints[1:], row.mask[1:]) if m]
            allowed = torch.zeros_like(logits, dtype=torch.bool)
            for i, chosen in enumerate(sets):
                allowed[i, list(chosen) if chosen is not None else slice(None)] = True
            logits = logits.masked_fill(~allowed, float("-inf"))
        return torch.log_softmax(logits, dim=-1)

    total, kl_sum, entropy_sum = 0.0, 0.0, 0.0
    for row in batch:
        keep = torch.tensor(row.mask[1:], dtype=torch.bool)
        targets = torch.tensor(row.tokens[1:])[keep]
        with torch.no_grad():
            log_probs = log_probs_of(model(torch.tensor([row.tokens])).logits[0, :-1][keep], row)
            ref_log_probs = log_probs_of(reference(torch.tensor([row.tokens])).logits[0, :-1][keep], row)
        inside = log_probs > float("-inf")
        log_p = log_probs.gather(-1, targets[:, None])[:, 0]
        kl = k3_kl(log_p, ref_log_probs.gather(-1, targets[:, None])[:, 0])
        entropy = -torch.where(inside, log_probs.exp() * log_probs, 0.0).sum(-1)
        per_token = -row.advantage + kl_coef * kl - entropy_coef * entropy
        if row.teacher_tokens is not None:
            with torch.no_grad():
                teacher = model(torch.tensor([row.teacher_tokens])).logits[0, :-1]
            log_t = log_probs_of(teacher[keep.nonzero()[:, 0] + row.teacher_offset], row)
            per_token = per_token + distill_coef * torch.where(inside, log_probs.exp() * (log_probs - log_t),
                                                               0.0).sum(-1)
        total += per_token.sum().item()
        kl_sum += kl.sum().item()
        entropy_sum += entropy.sum().item()
    return total, kl_sum, entropy_sum


def test_the_loss_is_the_papers_terms_with_their_signs_coefficients_and_rows():
    """PPO (ratio 1 on fresh log-probs: -A per token) + kl_coef * k3(policy, reference) - entropy_coef * entropy,
    + distill_coef * KL(student || teacher) on the distilled row only, its teacher read teacher_offset positions
    later in the reflected context; token-mean over the batch's tokens. Each term is recomputed here from its own
    definition on separate forward passes, so a swapped model, sign, coefficient, row or offset changes the sum."""
    tokenizer = build_tiny_tokenizer(["a b c d e f g h i j k l m n o p"], vocab_size=64)
    model, reference = build_tiny_model(tokenizer, 32, 1, 2, 64, seed=1), build_tiny_model(tokenizer, 32, 1, 2, 64,
                                                                                            seed=2)
    attempt = _row("attempt1", [5, 6, 7, 8, 9, 10], 3, advantage=0.7)
    reflected_prefix, prefix = [11, 12, 13, 14, 15], [5, 6, 7]
    distilled = _row("distilled", prefix + [9, 8, 10], 3, advantage=0.0,
                     teacher_tokens=reflected_prefix + [9, 8, 10], teacher_offset=len(reflected_prefix) - len(prefix))
    batch = [attempt, distilled]
    config = build_config(flags=dict(algo="erl", temperature=0.8, kl_coef=0.3, entropy_coef=0.05, distill_coef=2.0,
                                     loss_agg="token-mean", output="unused"))
    num_tokens = sum(sum(t.mask[1:]) for t in batch)
    loss, stats = _micro_batch_loss(model, reference, batch, ConstraintTable(), config, tokenizer.pad_token_id,
                                    num_tokens=num_tokens, num_seqs=len(batch), old=None)

    total, kl_sum, entropy_sum = _loss_by_hand(model, reference, batch, 0.8, kl_coef=0.3, entropy_coef=0.05,
                                               distill_coef=2.0)
    assert loss.item() == pytest.approx(total / num_tokens, rel=1e-4, abs=1e-6)
    assert stats["kl"] == pytest.approx(kl_sum, rel=1e-4) and stats["kl"] > 0
    assert stats["entropy"] == pytest.approx(entropy_sum, rel=1e-4) and stats["tokens"] == num_tokens
    assert stats["reverse_kl_tokens"] == 3 and stats["reverse_kl"] > 0


def test_no_kl_term_without_a_reference_or_at_coefficient_zero():
    tokenizer = build_tiny_tokenizer(["a b c d e f g h"], vocab_size=40)
    model = build_tiny_model(tokenizer, 32, 1, 2, 64, seed=1)
    batch = [_row("attempt1", [5, 6, 7, 8], 2, advantage=1.0)]
    for kl_coef, reference in ((0.0, build_tiny_model(tokenizer, 32, 1, 2, 64, seed=2)), (0.5, None)):
        config = build_config(flags=dict(algo="rlvr", temperature=1.0, kl_coef=kl_coef, loss_agg="token-mean",
                                         output="unused"))
        loss, stats = _micro_batch_loss(model, reference, batch, ConstraintTable(), config, tokenizer.pad_token_id,
                                        num_tokens=2, num_seqs=1, old=None)
        assert "kl" not in stats and loss.item() == pytest.approx(-1.0, abs=1e-6)


def test_a_later_optimizer_step_clips_against_the_sampling_policys_log_probs():
    """With old log-probs from before earlier optimizer steps the ratio moves off 1: the PPO term then uses the run's
    clip_low, clip_high and dual-clip c on exactly those old log-probs."""
    from erl_agents.grpo import ppo_token_loss

    tokenizer = build_tiny_tokenizer(["a b c d e f g h i j"], vocab_size=40)
    model = build_tiny_model(tokenizer, 32, 1, 2, 64, seed=3)
    rows = [_row("attempt1", [5, 6, 7, 8, 9, 10], 2, advantage=-1.5), _row("attempt1", [5, 7, 6, 9, 8], 2,
                                                                          advantage=0.8)]
    config = build_config(flags=dict(algo="rlvr", temperature=1.0, kl_coef=0.0, clip_low=0.1, clip_high=0.3,
                                     clip_ratio_c=2.0, loss_agg="token-mean", output="unused"))
    shifts = torch.tensor([1.5, -0.05, 0.4, -2.0])  # ratios e^-s: some inside the clip range, some far outside
    old, total, tokens = {}, 0.0, 0
    for row, shift in zip(rows, (shifts, -shifts[:3])):
        _, log_p, _ = _by_hand(model, row, 1.0)
        old[id(row)] = log_p + shift
        expected, _ = ppo_token_loss(log_p, old[id(row)], torch.full_like(log_p, row.advantage), 0.1, 0.3, 2.0)
        total += expected.sum().item()
        tokens += len(log_p)
    loss, stats = _micro_batch_loss(model, None, rows, ConstraintTable(), config, tokenizer.pad_token_id,
                                    num_tokens=tokens, num_seqs=2, old=old)
    assert loss.item() == pytest.approx(total / tokens, rel=1e-5) and stats["clipped"] > 0


def test_constrained_rows_are_scored_under_the_sets_they_were_sampled_from():
    """Tokens sampled under constrained decoding carry a constraint-set index: the loss scores them (log-prob,
    entropy, the KL to the reference, the distilled row's teacher) with every other token masked out, as they were
    sampled; a row index of -1 (free sampling) keeps the whole vocabulary. Recomputed here term by term."""
    tokenizer = build_tiny_tokenizer(["a b c d e f g h i j k l m n o p"], vocab_size=64)
    model, reference = build_tiny_model(tokenizer, 32, 1, 2, 64, seed=3), build_tiny_model(tokenizer, 32, 1, 2, 64,
                                                                                            seed=4)
    table = ConstraintTable()
    small, pair = table.intern([7, 8, 9]), table.intern([9, 10])
    attempt = _row("attempt1", [5, 6, 7, 9, 11], 2, advantage=0.5)
    attempt.constraints = [-1, -1, small, pair, -1]  # position i holds the set token i was sampled from
    distilled = _row("distilled", [5, 6, 8, 10], 2, advantage=0.0, teacher_tokens=[12, 13, 5, 6, 8, 10],
                     teacher_offset=2)
    distilled.constraints = [-1, -1, small, pair]
    batch = [attempt, distilled]
    config = build_config(flags=dict(algo="erl", temperature=1.0, kl_coef=0.4, entropy_coef=0.1, distill_coef=1.5,
                                     loss_agg="token-mean", output="unused"))
    num_tokens = sum(sum(t.mask[1:]) for t in batch)
    loss, stats = _micro_batch_loss(model, reference, batch, table, config, tokenizer.pad_token_id,
                                    num_tokens=num_tokens, num_seqs=2, old=None)

    total, kl_sum, entropy_sum = _loss_by_hand(model, reference, batch, 1.0, kl_coef=0.4, entropy_coef=0.1,
                                               distill_coef=1.5, table=table)
    assert stats["entropy"] == pytest.approx(entropy_sum, rel=1e-4)
    assert stats["kl"] == pytest.approx(kl_sum, rel=1e-4, abs=1e-6)
    assert loss.item() == pytest.approx(total / num_tokens, rel=1e-4, abs=1e-6)


def test_the_update_reports_the_losss_terms_per_token_and_counts_its_steps():
    """policy_update's statistics are the loss's own sums over the batch's tokens: one optimizer step (SGD at lr 0:
    the weights stay), its loss, clip fraction (0: fresh log-probs), entropy, KL and reverse KL per token, the
    trained tokens and a finite gradient norm; two PPO epochs are two steps."""
    tokenizer = build_tiny_tokenizer(["a b c d e f g h i j k l m n o p"], vocab_size=64)
    model, reference = build_tiny_model(tokenizer, 32, 1, 2, 64, seed=1), build_tiny_model(tokenizer, 32, 1, 2, 64,
                                                                                            seed=2)
    batch = [_row("attempt1", [5, 6, 7, 8, 9, 10], 3, advantage=0.7),
             _row("distilled", [5, 6, 7, 9, 8, 10], 3, advantage=0.2, teacher_tokens=[11, 12, 5, 6, 7, 9, 8, 10],
                  teacher_offset=2)]
    flags = dict(algo="erl", temperature=1.0, kl_coef=0.3, entropy_coef=0.05, distill_coef=2.0, lr=1e-3,
                 loss_agg="token-mean", max_grad_norm=1e9, minibatches=1, ppo_epochs=1, output="unused")
    config = build_config(flags=flags)
    tokens = sum(sum(t.mask[1:]) for t in batch)
    loss, parts = _micro_batch_loss(model, reference, batch, ConstraintTable(), config, tokenizer.pad_token_id,
                                    num_tokens=tokens, num_seqs=2, old=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = policy_update(model, optimizer, None, batch, ConstraintTable(), config, tokenizer.pad_token_id,
                          ref_model=reference)
    assert stats["loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert (stats["clip_frac"], stats["trained_tokens"], stats["optimizer_steps"], stats["skipped_updates"]) == (
        0.0, tokens, 1, 0)
    assert stats["entropy"] == pytest.approx(parts["entropy"] / tokens, rel=1e-5)
    assert stats["kl"] == pytest.approx(parts["kl"] / tokens, rel=1e-5, abs=1e-9)
    assert stats["reverse_kl"] == pytest.approx(parts["reverse_kl"] / parts["reverse_kl_tokens"], rel=1e-5)
    assert 0 < stats["grad_norm"] < float("inf") and "loss_scale_skips" not in stats
    twice = policy_update(model, optimizer, None, batch, ConstraintTable(), build_config(flags=flags | {
        "ppo_epochs": 2}), tokenizer.pad_token_id, ref_model=reference)
    assert twice["optimizer_steps"] == 2 and twice["trained_tokens"] == 2 * tokens


def test_the_agreement_check_compares_the_engine_with_the_trainer_under_each_rows_sampling():
    """rollout/logprob_abs_diff: the hf engine samples the policy the trainer scores, at the rows' own temperature,
    constraint and top-k / top-p cut, so the two agree to float precision; a shifted engine log-prob shows in full,
    and distilled or supervised rows are left out."""
    from erl_agents.update import logprob_gap, sampled_rows

    env = TextBanditEnv(turns=2)
    tokenizer = build_tiny_tokenizer([env.instructions] + env.valid_actions * 10 + ["Turn 1 of 2. Which door?"] * 5,
                                     vocab_size=300)
    policy = Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), tokenizer)
    config = build_config(flags=dict(preset="cpu-tiny", temperature=0.7, top_p=0.8, top_k=6, reflect_temperature=0.5))
    table = ConstraintTable()
    torch.manual_seed(0)
    rows = []
    for constrained, params in ((True, SamplingParams(0.7, 0.8, 6, 8)), (False, SamplingParams(0.7, 1.0, 0, 8)),
                                (False, SamplingParams(0.7, 0.8, 6, 8))):
        episodes = run_episodes(policy, [TextBanditEnv(turns=2) for _ in range(4)], [(i, None) for i in range(4)],
                                list(range(4)), params, constrained=constrained, table=table)
        rows += [t for e in episodes for t in e.trajectories]
    assert {(t.top_k, t.top_p) for t in rows} == {(6, 0.8), (0, 1.0)}
    mean, largest = logprob_gap(policy.model, rows, table, config, tokenizer.pad_token_id, World())
    assert mean < 1e-5 and largest < 1e-4
    shifted = rows[0]
    shifted.logprobs = [lp + 0.25 if m else lp for lp, m in zip(shifted.logprobs, shifted.mask)]
    tokens = sum(t.num_model_tokens for t in rows)
    mean, largest = logprob_gap(policy.model, rows, table, config, tokenizer.pad_token_id, World())
    assert mean == pytest.approx(0.25 * shifted.num_model_tokens / tokens, abs=1e-4) and largest > 0.24
    distilled = Trajectory(**{**shifted.__dict__, "role": "distilled"})
    teacher = Trajectory(**{**shifted.__dict__, "sampled": False})
    assert sampled_rows([shifted, shifted, distilled, teacher]) == [shifted]
