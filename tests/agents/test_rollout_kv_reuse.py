"""Multi-turn generation that reuses each conversation's KV cache (erl_agents/rollout.py, ``kv_reuse``).

The contract: with the same seed, reusing the cache gives the same episodes as re-reading every conversation from
scratch, token for token and log-prob for log-prob, while the model reads far fewer positions.
"""

import pytest
import torch

from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.engines.hf import CachedPrefix, generate_replies
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
from erl_agents.envs import make_env, tiny_corpus
from erl_envs.reflection.memory import ReflectionMemory
from erl_envs.reflection import ReflectionWrapper

ENV_KWARGS = {"size": [3, 4]}


@pytest.fixture(scope="module")
def policy():
    """The tiny model, made to end about one free reply in three early (an end-of-turn logit bias), so that rows
    leave a batch at different steps."""
    env = make_env("ERL-FrozenLake-v0", ENV_KWARGS)
    tokenizer = build_tiny_tokenizer(tiny_corpus(env, episodes=30, seed=0), vocab_size=400)
    policy = Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0).eval(), tokenizer)
    model = policy.model
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[policy.chat.end_of_turn_id] = 4.0
    model.config.tie_word_embeddings = False
    model.lm_head = head
    return policy


def _frozen_lakes(count):
    # Budgets of 3 to 6 steps: episodes end at different turns even when an untrained model's replies never parse.
    return [make_env("ERL-FrozenLake-v0", dict(ENV_KWARGS, max_steps=3 + i % 4)) for i in range(count)]


def _with_reflection(envs):
    memory = ReflectionMemory()
    return [ReflectionWrapper(env, memory=memory) for env in envs]


def _play(policy, envs, kv_reuse, seed=3, **kwargs):
    """Every conversation as (role, tokens, mask, constraint sets, reward, overflowed) and its log-probs."""
    table = ConstraintTable()
    torch.manual_seed(seed)
    episodes = run_episodes(policy, envs, [(100 + i, None) for i in range(len(envs))], list(range(len(envs))),
                            table=table, kv_reuse=kv_reuse, **kwargs)
    after = torch.rand(1)  # the same random numbers were drawn on both paths
    exact = [(t.role, t.tokens, t.mask, [table.sets[c] if c >= 0 else c for c in t.constraints], t.reward,
              t.overflowed, t.truncated_replies) for e in episodes for t in e.trajectories]
    logprobs = [torch.tensor(t.logprobs) for e in episodes for t in e.trajectories]
    return exact, logprobs, after, episodes


def _assert_same_episodes(policy, make_envs, **kwargs):
    exact, logprobs, after, episodes = _play(policy, make_envs(), kv_reuse=True, **kwargs)
    want_exact, want_logprobs, want_after, _ = _play(policy, make_envs(), kv_reuse=False, **kwargs)
    assert exact == want_exact
    assert torch.equal(after, want_after)
    for got, want in zip(logprobs, want_logprobs):
        # Reading a context in pieces rounds differently from reading it at once, by float32 noise only.
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    return episodes


def _reply_lengths(trajectory):
    runs, n = [], 0
    for m in trajectory.mask + [0]:
        if m:
            n += 1
        elif n:
            runs, n = runs + [n], 0
    return runs


def _turns(episodes):
    return [len(_reply_lengths(t)) for e in episodes for t in e.trajectories]


@pytest.mark.parametrize("constrained", [True, False])
def test_multi_turn_frozen_lake_is_the_same_with_and_without_reuse(policy, constrained):
    sampling = SamplingParams(1.0, 1.0, 0, 5)
    episodes = _assert_same_episodes(policy, lambda: _frozen_lakes(6), sampling=sampling, constrained=constrained)
    turns = _turns(episodes)
    assert max(turns) >= 3
    if constrained:  # an action per turn: some episodes reach a hole or the goal before the others
        assert min(turns) < max(turns)
    else:  # replies cut at max_new_tokens beside replies that ended earlier, in the same calls
        lengths = [n for e in episodes for t in e.trajectories for n in _reply_lengths(t)]
        assert any(t.truncated_replies for e in episodes for t in e.trajectories) and min(lengths) < 5


@pytest.mark.parametrize("constrained", [True, False])
def test_reflection_episodes_reopen_conversations_with_fresh_contexts(policy, constrained):
    episodes = _assert_same_episodes(policy, lambda: _with_reflection(_frozen_lakes(5)),
                                     sampling=SamplingParams(0.7, 0.8, 20, 4),
                                     reflect_sampling=SamplingParams(0.5, 0.9, 0, 12), constrained=constrained)
    roles = [[t.role for t in e.trajectories] for e in episodes]
    assert ["attempt1", "reflection", "attempt2"] in roles  # a reflection and a retry were generated


def test_conversations_reaching_max_seq_len_are_the_same(policy):
    # An opening of ~170 tokens and ~65 per turn: conversations overflow after a few turns, at different turns.
    episodes = _assert_same_episodes(policy, lambda: _frozen_lakes(4), sampling=SamplingParams(1.0, 1.0, 0, 6),
                                     constrained=False, max_seq_len=420)
    overflowed = [t for e in episodes for t in e.trajectories if t.overflowed]
    assert overflowed and all(len(t.tokens) <= 420 for e in episodes for t in e.trajectories)
    assert max(_turns(episodes)) >= 3


def test_reuse_reads_each_position_once(policy):
    """The whole point: later turns read only the new message, not the conversation again."""
    read = {}

    def count(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        read["positions"] = read.get("positions", 0) + ids.numel()

    handle = policy.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        totals = {}
        for kv_reuse in (False, True):
            read.clear()
            _play(policy, _frozen_lakes(4), kv_reuse, sampling=SamplingParams(1.0, 1.0, 0, 4), constrained=True)
            totals[kv_reuse] = read["positions"]
    finally:
        handle.remove()
    assert totals[True] * 2 < totals[False]


def _left_padded_contexts(policy):
    chat = policy.chat
    first = chat.open("Reach the goal.", " A \t D \t\n C \t B \t")
    second = chat.open("A longer system prompt, so the rows differ in length.", " D \t A \t\n B \t C \t")
    return [first, second, first[:-3] + chat.open("x", "y")]


def test_generate_replies_from_prefixes_matches_reading_from_scratch(policy):
    """Rows with long, short and no cached prefix, new parts of different lengths: all are left-padded twice."""
    chat = policy.chat
    contexts = _left_padded_contexts(policy)
    sampling = SamplingParams(1.0, 1.0, 0, 4)
    torch.manual_seed(0)
    first = generate_replies(policy, contexts, sampling, prefixes=[None] * len(contexts))
    grown = [c + r.ids + ([] if r.finished else [chat.end_of_turn_id]) + chat.user_turn(" D \t D \t")
             for c, r in zip(contexts, first)]
    for r, context in zip(first, contexts):
        assert r.prefix.tokens[: len(context)] == context and len(r.prefix.tokens) >= len(context) + len(r.ids) - 1
    prefixes = [first[0].prefix, None, first[2].prefix]
    torch.manual_seed(1)
    reused = generate_replies(policy, grown, sampling, prefixes=prefixes)
    torch.manual_seed(1)
    scratch = generate_replies(policy, grown, sampling)
    assert [r.ids for r in reused] == [r.ids for r in scratch]
    for a, b in zip(reused, scratch):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5)
    assert all(r.prefix is None for r in scratch)


def test_a_prefix_of_another_conversation_is_refused(policy):
    contexts = _left_padded_contexts(policy)
    (reply,) = generate_replies(policy, contexts[:1], SamplingParams(1.0, 1.0, 0, 2), prefixes=[None])
    with pytest.raises(ValueError, match="proper prefix"):
        generate_replies(policy, contexts[1:2], SamplingParams(1.0, 1.0, 0, 2), prefixes=[reply.prefix])
    with pytest.raises(ValueError, match="proper prefix"):  # nothing new to read
        generate_replies(policy, [reply.prefix.tokens], SamplingParams(1.0, 1.0, 0, 2), prefixes=[reply.prefix])
    with pytest.raises(ValueError, match="one entry per context"):
        generate_replies(policy, contexts, SamplingParams(1.0, 1.0, 0, 2), prefixes=[None])
    assert isinstance(reply.prefix, CachedPrefix)


def test_the_benchmark_plays_the_same_episodes_both_ways(policy, tmp_path):
    from benchmarks.speed import bench_rollout

    rows = bench_rollout.measure_kv_reuse(policy, live_counts=(1, 3), free_tokens=4)
    assert [r["live"] for r in rows] == [1, 3]
    for r in rows:
        assert r["same_episodes"] and r["reuse"]["tokens"] == r["no_reuse"]["tokens"] > 0
        assert r["reuse"]["positions"] * 2 < r["no_reuse"]["positions"]
    text = bench_rollout.kv_markdown(rows, "tiny", "cmd", "Machine: m.", 4)
    assert text.count("| yes |") == 2
    speed = bench_rollout.kv_speed_rows(rows, "tiny")
    assert speed[1]["baseline_name"] == "re-read every turn" and speed[1]["ratio"] == rows[1]["ratio"]


def test_the_previous_cache_is_released_before_generate_grows_the_next(policy):
    """Between turns the conversations hold their cache; during a call only the new one should be alive."""
    import weakref

    chat, sampling = policy.chat, SamplingParams(1.0, 1.0, 0, 3)
    contexts = _left_padded_contexts(policy)
    first = generate_replies(policy, contexts, sampling, prefixes=[None] * len(contexts))
    old = weakref.ref(first[0].prefix.layers[0][0])
    grown = [c + r.ids + ([] if r.finished else [chat.end_of_turn_id]) + chat.user_turn("x")
             for c, r in zip(contexts, first)]
    alive = []
    handle = policy.model.register_forward_pre_hook(lambda *_: alive.append(old() is not None))
    try:
        generate_replies(policy, grown, sampling, prefixes=[first.pop(0).prefix for _ in grown])
    finally:
        handle.remove()
    assert alive and not any(alive)
