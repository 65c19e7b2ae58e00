"""Token-in/token-out rollouts, constrained decoding and consolidation copies (erl_agents/rollout.py)."""

import re
import time

import pytest
import torch
from transformers import StaticCache

from erl_agents.grpo import token_log_probs
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.engines.hf import _CACHE, generate_replies
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
from text_bandit import TextBanditEnv


@pytest.fixture(scope="module")
def policy():
    env = TextBanditEnv(turns=3, contextual=True)
    corpus = [env.instructions] + env.valid_actions * 10 + [
        f"Turn {t} of 3. The prize is behind door {d}. Which door?" for t in range(1, 4) for d in "ABCD"] * 3
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=320)
    torch.manual_seed(0)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), tokenizer)


class Recording(TextBanditEnv):
    """Records what the rollout hands the env: the last reset's seed and options, and every reply since."""

    def reset(self, *, seed=None, options=None):
        self.reset_with, self.replies = (seed, options), []
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.replies.append(action)
        return super().step(action)


class Slow(TextBanditEnv):
    """Every step takes ``delay`` seconds."""

    def __init__(self, delay, **kwargs):
        super().__init__(**kwargs)
        self.delay = delay

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)


def _recomputed_log_probs(policy, trajectory, table):
    ids = torch.tensor([trajectory.tokens])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, :-1]
    select = torch.tensor(trajectory.mask[1:]).bool()
    constraints = torch.tensor(trajectory.constraints[1:])[select]
    allowed = table.allowed_mask(constraints, logits.shape[-1]) if (constraints >= 0).any() else None
    log_p, _ = token_log_probs(logits[select], ids[0, 1:][select], 1.0, allowed)
    return log_p, torch.tensor(trajectory.logprobs[1:])[select]


@pytest.mark.parametrize("constrained", [True, False])
def test_multi_turn_trajectories_are_built_by_appending_tokens(policy, constrained):
    envs = [TextBanditEnv(turns=3, contextual=True) for _ in range(4)]
    table = ConstraintTable()
    timing = {}
    episodes = run_episodes(policy, envs, [(7, None), (7, None), (8, None), (9, None)], [0, 0, 1, 2],
                            SamplingParams(1.0, 1.0, 0, 6), constrained=constrained, table=table, timing=timing)
    assert [e.task for e in episodes] == [0, 0, 1, 2] and timing["generation"] > 0
    chat = policy.chat
    for episode in episodes:
        (trajectory,) = episode.trajectories
        assert trajectory.role == "attempt1" and trajectory.system_prompt == envs[0].instructions
        assert len(trajectory.tokens) == len(trajectory.mask) == len(trajectory.logprobs) == len(trajectory.constraints)
        # The opening and every user turn are env tokens; exactly three replies were sampled.
        assert trajectory.mask[: trajectory.prompt_len] == [0] * trajectory.prompt_len
        model_positions = [i for i, m in enumerate(trajectory.mask) if m]
        assert all(trajectory.tokens[i] not in (chat.tokenizer.convert_tokens_to_ids("<|user|>"),)
                   for i in model_positions)
        text = policy.tokenizer.decode(trajectory.tokens)
        assert text.count("<|user|>") == 3 and text.startswith("<|system|>" + envs[0].instructions)
        assert trajectory.reward == episode.returns
        # The sampling log-probs are those of the policy the update will score (same temperature, same sets).
        recomputed, stored = _recomputed_log_probs(policy, trajectory, table)
        assert torch.allclose(recomputed, stored, atol=1e-4)
        if constrained:
            replies = [r for r in text.split("<|assistant|>")[1:]]
            assert all(r.split("<|end|>")[0] in envs[0].valid_actions for r in replies)
            assert all(c >= 0 for c, m in zip(trajectory.constraints, trajectory.mask) if m)


def test_generate_replies_respects_max_new_tokens_and_stops(policy):
    replies = generate_replies(policy, [[5, 6, 7], [5]], SamplingParams(1.0, 1.0, 0, 3))
    assert all(len(r.ids) <= 3 for r in replies)
    for r in replies:
        assert r.finished == (r.ids[-1] in policy.chat.stop_ids)


def test_overflowing_conversations_stop_generating(policy):
    env = TextBanditEnv(turns=3, contextual=True)
    opening = len(policy.chat.open(env.instructions, "Turn 1 of 3. The prize is behind door A. Which door?"))
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 4), constrained=True,
                              max_seq_len=opening + 6, table=ConstraintTable())
    (trajectory,) = episode.trajectories
    assert trajectory.overflowed and len(trajectory.tokens) <= opening + 6
    assert episode.returns <= 1.0  # later turns were empty replies, which the env scores 0


# --- the constrained-decoding fast path against the plain transformers path it replaced ---


def _reference_generate_replies(policy, contexts, sampling, valid_actions=None, table=None, cache="static"):
    """generate_replies through ``prefix_allowed_tokens_fn`` (a nested-dict trie walked per row and step) and a
    stacked ``[B, new, V]`` score tensor: the straightforward path the rollout must agree with exactly.

    ``cache="static"`` is transformers' own preallocated cache, which the rollout uses (bit for bit the same);
    ``"dynamic"`` the growing default (the same tokens, log-probs equal up to float summation order)."""
    chat = policy.chat
    width = max(len(c) for c in contexts)
    input_ids = torch.full((len(contexts), width), policy.tokenizer.pad_token_id)
    attention = torch.zeros((len(contexts), width), dtype=torch.long)
    for row, ids in enumerate(contexts):
        input_ids[row, width - len(ids):] = torch.tensor(ids)
        attention[row, width - len(ids):] = 1
    root, kwargs, max_new = {}, {}, sampling.max_new_tokens
    encoded = [policy.tokenizer(a, add_special_tokens=False)["input_ids"] + [chat.end_of_turn_id]
               for a in valid_actions or []]
    for tokens in encoded:
        node = root
        for token in tokens:
            node = node.setdefault(token, {})

    def allowed(prefix):
        node = root
        for token in prefix:
            node = node.get(token)
            if node is None:
                return [chat.end_of_turn_id]
        return list(node) or [chat.end_of_turn_id]

    if valid_actions:
        kwargs["prefix_allowed_tokens_fn"] = lambda _row, ids: allowed(ids[width:].tolist())
        max_new = max(len(t) for t in encoded)
    if cache == "static":
        # A fresh one each call, of the length generate gives its own (``cache_implementation="static"`` would
        # reuse a longer cache kept on the model from an earlier call, changing the attention sums' length).
        kwargs[_CACHE] = StaticCache(config=policy.model.config, max_cache_len=width + max_new - 1)
    out = policy.model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True,
                                temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                max_new_tokens=max_new, eos_token_id=chat.stop_ids,
                                pad_token_id=policy.tokenizer.pad_token_id, output_scores=True,
                                return_dict_in_generate=True, **kwargs)
    new = out.sequences[:, width:]
    logprobs = torch.log_softmax(torch.stack(out.scores, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    replies = []
    for row, ids in enumerate(new.tolist()):
        cut = next((k + 1 for k, token in enumerate(ids) if token in chat.stop_ids), len(ids))
        constraints = [table.intern(allowed(ids[:k])) for k in range(cut)] if valid_actions else [-1] * cut
        replies.append((ids[:cut], logprobs[row, :cut].tolist(), constraints, cut < len(ids) or
                        ids[cut - 1] in chat.stop_ids))
    return replies


@pytest.mark.parametrize("constrained", [True, False])
@pytest.mark.parametrize("sampling", [SamplingParams(1.0, 1.0, 0, 6), SamplingParams(0.7, 0.8, 20, 6)])
def test_generate_replies_matches_the_plain_transformers_path_exactly(policy, constrained, sampling):
    env = TextBanditEnv(turns=3, contextual=True)
    # Replies of one and of several tokens, two sharing their first tokens: every kind of trie node is visited.
    actions = ["```A```", "```B```", "Which door", "Which way", "The prize"] if constrained else None
    lengths = [len(policy.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in actions or []]
    assert not constrained or (min(lengths) == 1 and max(lengths) > 2)
    contexts = [policy.chat.open(env.instructions, f"Turn 1 of 3. The prize is behind door {d}. Which door?")
                for d in "ABCDABCD"]
    contexts[3] = contexts[3] + [40, 41, policy.chat.end_of_turn_id] + policy.chat.user_turn("Turn 2 of 3.")
    for seed in range(3):
        torch.manual_seed(seed)
        old_table = ConstraintTable()
        expected = _reference_generate_replies(policy, contexts, sampling, actions, old_table)
        after_old = torch.rand(1)
        torch.manual_seed(seed)
        table = ConstraintTable()
        replies = generate_replies(policy, contexts, sampling, actions, table)
        assert torch.equal(torch.rand(1), after_old)  # the same random numbers were drawn
        got = [(r.ids, r.logprobs, [table.sets[c] if c >= 0 else c for c in r.constraints], r.finished)
               for r in replies]
        want = [(ids, lp, [old_table.sets[c] if c >= 0 else c for c in cs], done) for ids, lp, cs, done in expected]
        assert got == want  # bit for bit: tokens, log-probs, constraint sets, stop flags


def test_the_preallocated_cache_samples_what_the_growing_cache_samples(policy):
    contexts = [policy.chat.open("Pick a door.", f"The prize is behind door {d}. Which door?") for d in "ABCA"]
    contexts[1] = contexts[1] + [40, 41, policy.chat.end_of_turn_id] + policy.chat.user_turn("Turn 2 of 3.")
    sampling = SamplingParams(0.7, 0.8, 20, 8)
    for seed in range(3):
        torch.manual_seed(seed)
        growing = _reference_generate_replies(policy, contexts, sampling, cache="dynamic")
        torch.manual_seed(seed)
        replies = generate_replies(policy, contexts, sampling)
        assert [r.ids for r in replies] == [ids for ids, *_ in growing]
        for reply, (_, logprobs, _, _) in zip(replies, growing):
            torch.testing.assert_close(torch.tensor(reply.logprobs), torch.tensor(logprobs), atol=1e-5, rtol=1e-5)


def test_rollouts_match_the_plain_transformers_path_exactly(policy, monkeypatch):
    import erl_agents.engines.hf as hf
    import erl_agents.rollout as rollout

    def play(table):
        torch.manual_seed(11)
        envs = [TextBanditEnv(turns=3, contextual=bool(i % 2)) for i in range(6)]
        episodes = run_episodes(policy, envs, [(i, None) for i in range(6)], list(range(6)),
                                SamplingParams(1.0, 1.0, 0, 6), constrained=True, table=table,
                                kv_reuse=False)  # each turn read from scratch, as the reference does (tests/agents/test_rollout_kv_reuse.py)
        return [(t.tokens, t.mask, t.logprobs, [table.sets[c] if c >= 0 else c for c in t.constraints], t.reward)
                for e in episodes for t in e.trajectories]

    fast = play(ConstraintTable())

    def reference(policy, contexts, sampling, valid_actions=None, table=None, prefixes=None, stop_string=""):
        assert prefixes is None and not stop_string
        return [rollout.Reply(ids, lp, cs, done)
                for ids, lp, cs, done in _reference_generate_replies(policy, contexts, sampling, valid_actions, table)]

    monkeypatch.setattr(hf, "generate_replies", reference)
    assert play(ConstraintTable()) == fast


# --- the response budget (the reference's max_response_length per attempt) ---


def _budget_setup(policy):
    from erl_agents.rollout import ResponseBudget

    env = TextBanditEnv(turns=3, contextual=True)
    lengths = {len(policy.tokenizer(a, add_special_tokens=False)["input_ids"]) + 1 for a in env.valid_actions}
    assert len(lengths) == 1, "every door's reply must have the same length for these budgets"
    probe = TextBanditEnv(turns=3, contextual=True)
    probe.reset(seed=1)
    turn2 = probe.step("```A```")[0]
    return ResponseBudget(env), lengths.pop(), len(policy.chat.user_turn(turn2))


def test_a_reply_that_reaches_the_response_budget_is_cut_and_ends_its_attempt(policy):
    env, reply, _ = _budget_setup(policy)
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8), constrained=True,
                              table=ConstraintTable(), response_budget=1)
    (trajectory,) = episode.trajectories
    assert trajectory.num_model_tokens == 1 and trajectory.response_cut  # one token, and no second turn of three
    assert trajectory.truncated_replies == 1  # closed with an end-of-turn token the model did not write


def test_an_attempt_ends_when_its_next_turn_would_have_no_room(policy):
    env, reply, turn = _budget_setup(policy)
    # Room for a reply and the next user turn, exactly: the attempt ends after its first step.
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8), constrained=True,
                              table=ConstraintTable(), response_budget=reply + turn)
    (trajectory,) = episode.trajectories
    assert trajectory.num_model_tokens == reply and trajectory.response_cut and trajectory.truncated_replies == 0
    # One token more: the second reply may use that one token, is cut there, and its step ends the attempt.
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8), constrained=True,
                              table=ConstraintTable(), response_budget=reply + turn + 1)
    (trajectory,) = episode.trajectories
    assert trajectory.num_model_tokens == reply + 1 and trajectory.truncated_replies == 1 and trajectory.response_cut
    # A reply cut by max_new_tokens while its attempt has room left is an ordinary truncated reply.
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 2), response_budget=1000)
    (trajectory,) = episode.trajectories
    assert policy.tokenizer.decode(trajectory.tokens).count("<|assistant|>") == 3 and not trajectory.response_cut
    # Without a budget the episode plays its three turns.
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8), constrained=True,
                              table=ConstraintTable())
    assert episode.trajectories[0].num_model_tokens == 3 * reply and not episode.trajectories[0].response_cut


def test_an_attempt_ended_by_the_budget_is_reflected_on_and_retried(policy):
    from erl_envs.reflection import ReflectionWrapper

    env, _, _ = _budget_setup(policy)
    wrapper = ReflectionWrapper(env, gate_threshold=3.0)  # one step can never pass the gate: attempt 1 fails
    (episode,) = run_episodes(policy, [wrapper], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8),
                              SamplingParams(0.5, 0.9, 0, 5), constrained=True, table=ConstraintTable(),
                              response_budget=1)
    assert [t.role for t in episode.trajectories] == ["attempt1", "reflection", "attempt2"]
    first, reflection, second = episode.trajectories
    assert first.response_cut and second.response_cut and not reflection.response_cut
    assert first.num_model_tokens == second.num_model_tokens == 1  # the reflection has its own budget
    assert len(episode.record["attempt1"]["actions"]) == 1
    with pytest.raises(ValueError, match="ResponseBudget"):
        run_episodes(policy, [TextBanditEnv()], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8), response_budget=5)


# --- reflections started inside <prompt> (prefill) and stopped at a string ---


def test_a_stop_string_cuts_the_reply_after_the_token_that_completes_it(policy):
    """Same seed, same samples up to the stop string; the reply ends right after it, counts as finished, and needs
    no end-of-turn token. The string may span token boundaries."""
    contexts = [[5, 6, 7], [8, 9]]
    params = SamplingParams(1.0, 1.0, 0, 12)
    torch.manual_seed(3)
    free = generate_replies(policy, contexts, params)
    row = max(range(2), key=lambda r: len(free[r].ids))
    ids = [t for t in free[row].ids if t not in policy.chat.stop_ids]
    assert len(ids) >= 4, "the tiny model should write a few tokens"
    stop = policy.tokenizer.decode(ids[1:3])
    assert stop and stop not in policy.tokenizer.decode(ids[:2])
    torch.manual_seed(3)
    cut = generate_replies(policy, contexts, params, stop_string=stop)
    assert cut[row].ids == ids[:3] and cut[row].finished
    assert cut[row].logprobs == pytest.approx(free[row].logprobs[:3], abs=1e-5)
    assert policy.tokenizer.decode(cut[row].ids).endswith(stop)


def _reflecting(policy, prefix, stop, seed=11):
    from erl_envs.reflection import ReflectionWrapper

    envs = [ReflectionWrapper(TextBanditEnv(turns=1, prize=0)) for _ in range(6)]
    torch.manual_seed(seed)
    return run_episodes(policy, envs, [(i, None) for i in range(6)], list(range(6)), SamplingParams(1.0, 1.0, 0, 4),
                        reflect_sampling=SamplingParams(1.0, 1.0, 0, 10), constrained=True, table=ConstraintTable(),
                        reflect_prefix=prefix, reflect_stop=stop)


def test_a_prefilled_reflection_starts_with_the_prefix_as_context_and_the_env_reads_prefix_plus_reply(policy):
    prefix = "<prompt>\n"
    prefix_ids = policy.tokenizer(prefix, add_special_tokens=False)["input_ids"]
    episodes = _reflecting(policy, prefix, "")
    reflections = [(e, e.trajectory("reflection")) for e in episodes if e.trajectory("reflection") is not None]
    assert reflections, "some first attempts must fail"
    for episode, reflection in reflections:
        opening = policy.chat.open(reflection.system_prompt, reflection.first_observation)
        assert reflection.tokens[:reflection.prompt_len] == opening + prefix_ids
        assert reflection.mask[:reflection.prompt_len] == [0] * reflection.prompt_len  # given, not trained
        reply = [t for t, m in zip(reflection.tokens, reflection.mask) if m]
        text = episode.record["reflection"]["text"]
        assert text == prefix + policy.chat.reply_text(reply)
    # Without a prefix the reply is the model's from its first token.
    plain = next(t for e in _reflecting(policy, "", "") if (t := e.trajectory("reflection")) is not None)
    assert plain.prompt_len == len(policy.chat.open(plain.system_prompt, plain.first_observation))


def test_a_reflection_stopped_at_the_string_is_closed_by_an_env_token_and_is_not_truncated(policy):
    free = _reflecting(policy, "<prompt>\n", "")
    chosen = next(e for e in free if (t := e.trajectory("reflection")) is not None and t.num_model_tokens >= 4)
    reply = [t for t, m in zip(*(chosen.trajectory("reflection").tokens, chosen.trajectory("reflection").mask)) if m]
    reply = [t for t in reply if t not in policy.chat.stop_ids]
    stop = policy.tokenizer.decode(reply[1:3])
    assert stop not in policy.tokenizer.decode(reply[:2])
    stopped = _reflecting(policy, "<prompt>\n", stop)[chosen.index].trajectory("reflection")
    trained = [t for t, m in zip(stopped.tokens, stopped.mask) if m]
    assert trained == reply[:3]
    assert stopped.tokens[-1] == policy.chat.end_of_turn_id and stopped.mask[-1] == 0
    assert stopped.truncated_replies == 0


# ----------------------------------------------------------------------------------------------------------------
# How an ended episode's rewards and successes reach its conversations


def _conversation(role: str, reward: float = 0.0):
    from erl_agents.rollout import Trajectory

    return Trajectory(role=role, task=0, episode=0, tokens=[1], mask=[1], logprobs=[0.0], constraints=[-1],
                      prompt_len=0, system_prompt="s", first_observation="o", reward=reward)


def _finished(info: dict, roles=("attempt1", "reflection", "attempt2"), reward: float = 0.0):
    """``_finish`` on an episode whose last conversation (``roles[-1]``) is still open, as at the env's last step."""
    from erl_agents.rollout import Episode, _finish, _Live

    episode = Episode(task=0, index=0, trajectories=[_conversation(role) for role in roles[:-1]])
    state = _Live(TextBanditEnv(), episode, None, 0.0)
    state.conversation = _conversation(roles[-1], reward)
    _finish(state, info)
    return episode


def test_finish_takes_each_roles_success_from_the_envs_verdict_not_from_the_reward():
    # A verdict that disagrees with "reward >= 1" (e.g. a lowered gate, or a QA answer scored 1 without a match).
    record = {"r1": 1.0, "r2": 0.5, "attempt1": {"success": False}, "attempt2": {"success": True}}
    episode = _finished({"record": record})
    assert episode.record is record
    assert [(t.role, t.reward, t.success) for t in episode.trajectories] == [
        ("attempt1", 1.0, False), ("reflection", 0.5, True), ("attempt2", 0.5, True)]
    assert episode.success is False  # the episode's success is its first attempt's
    record = {"r1": 0.25, "attempt1": {"success": True}, "attempt2": None}
    episode = _finished({"record": record}, roles=("attempt1",))
    assert (episode.trajectories[0].reward, episode.trajectories[0].success, episode.success) == (0.25, True, True)


def test_finish_falls_back_to_reward_at_least_one_without_a_verdict():
    for r1, r2, expected in ((1.0, 1.0, (True, True, True)), (0.99, 1.0, (False, True, True)),
                             (0.0, 0.99, (False, False, False))):
        episode = _finished({"record": {"r1": r1, "r2": r2}})
        attempt1, reflection, attempt2 = episode.trajectories
        assert (attempt1.success, attempt2.success, reflection.success) == expected, (r1, r2)
        assert episode.success is expected[0]


def test_finish_without_a_record_is_rlvr_and_reads_the_step_info():
    episode = _finished({"success": False}, roles=("attempt1",), reward=1.0)
    assert episode.record is None and (episode.trajectories[0].success, episode.success) == (False, False)
    episode = _finished({"success": True}, roles=("attempt1",), reward=0.0)
    assert (episode.trajectories[0].success, episode.success) == (True, True)
    for reward, expected in ((1.0, True), (0.99, False)):
        episode = _finished({}, roles=("attempt1",), reward=reward)
        assert (episode.trajectories[0].success, episode.success) == (expected, expected)


# ------------------------------------------------------------------------------------------------ small parts


def test_env_tokens_get_log_prob_zero_and_no_constraint():
    trajectory = _conversation("attempt1")
    trajectory.append([5, 6], model=False)
    trajectory.append([7], model=True, logprobs=[-0.5], constraints=[2])
    assert trajectory.tokens[1:] == [5, 6, 7] and trajectory.mask[1:] == [0, 0, 1]
    assert trajectory.logprobs[1:] == [0.0, 0.0, -0.5] and trajectory.constraints[1:] == [-1, -1, 2]


def test_a_reply_is_cut_only_when_it_passes_the_room_and_always_ends_its_attempt():
    from types import SimpleNamespace

    from erl_agents.rollout import Reply, _cut_at_budget

    def cut(limit):
        state = SimpleNamespace(conversation=_conversation("attempt1"))
        reply = Reply(ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3], constraints=[4, 5, 6], finished=True,
                      prefix="cached")
        _cut_at_budget(state, reply, limit)
        return reply, state.conversation

    reply, conversation = cut(3)  # exactly the room: kept whole, still a finished reply
    assert (reply.ids, reply.finished, reply.prefix, conversation.response_cut) == ([1, 2, 3], True, None, True)
    reply, conversation = cut(2)
    assert (reply.ids, reply.logprobs, reply.constraints) == ([1, 2], [-0.1, -0.2], [4, 5])
    assert reply.finished is False and reply.prefix is None and conversation.response_cut is True


def test_the_response_budget_wrapper_ends_only_steps_that_did_not_end_themselves():
    from erl_agents.rollout import ResponseBudget

    env = ResponseBudget(Recording(turns=2))
    assert (env.end_if, env.ended) == (None, False)
    env.reset(seed=3, options={"x": 1})
    assert env.unwrapped.reset_with == (3, {"x": 1})
    env.end_if = lambda obs: True
    *_, terminated, truncated, _ = env.step("A")
    assert (terminated, truncated, env.ended, env.end_if) == (False, True, True, None)
    env.reset(seed=3)
    env.step("A")  # no end_if this time: the step goes on
    assert env.ended is False
    env.end_if = lambda obs: True
    *_, terminated, truncated, _ = env.step("A")  # the bandit's last turn ends by itself
    assert (terminated or truncated) and env.ended is False


def test_valid_actions_must_be_non_empty_strings():
    from erl_agents.rollout import _valid_actions_of

    env = TextBanditEnv()
    assert _valid_actions_of(env) == env.valid_actions
    for bad in (["A", ""], ["A", 3], []):
        env.valid_actions = bad
        with pytest.raises(ValueError, match=r"^env\.unwrapped\.valid_actions must be a non-empty list of non-empty "
                                             r"str, got " + re.escape(repr(bad)) + "$"):
            _valid_actions_of(env)
    assert _valid_actions_of(object.__new__(type("NoActions", (), {"unwrapped": property(lambda s: s)}))) is None


def test_a_cache_without_full_layers_is_refused_by_name():
    from erl_agents.engines.hf import _cache_layers

    with pytest.raises(ValueError, match="got object; set kv_reuse false"):
        _cache_layers(object())


def test_prefixes_from_different_generate_calls_are_stacked_from_their_own_caches():
    """A batch can hold conversations last read by different calls (e.g. after a reflection): each row's keys and
    values come from its own call's cache, right-aligned, the padding repeating its first position."""
    from erl_agents.engines.hf import CachedPrefix, _stack_prefixes

    a_keys = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).reshape(2, 1, 3, 2)
    b_keys = 100 + torch.arange(1 * 1 * 4 * 2, dtype=torch.float32).reshape(1, 1, 4, 2)
    a = CachedPrefix(tokens=[7, 8], layers=((a_keys, -a_keys),), row=1, columns=torch.tensor([0, 1]))
    b = CachedPrefix(tokens=[7, 8, 9], layers=((b_keys, -b_keys),), row=0, columns=torch.tensor([1, 2, 3]))
    ((keys, values),) = _stack_prefixes([a, None, b], width=4)
    assert torch.equal(keys[0], a_keys[1][:, [0, 0, 0, 1]])
    assert torch.equal(keys[1], torch.zeros(1, 4, 2))
    assert torch.equal(keys[2], b_keys[0][:, [1, 1, 2, 3]])
    assert torch.equal(values, -keys)


# ------------------------------------------------------------------------------------------------ run_episodes' rules


def test_run_episodes_defaults_turn_every_budget_and_extra_off():
    import inspect

    defaults = {name: p.default for name, p in inspect.signature(run_episodes).parameters.items()
                if p.default is not inspect.Parameter.empty}
    assert defaults == {"reflect_sampling": None, "constrained": False, "max_seq_len": 8192, "table": None,
                        "timing": None, "mask_truncated": False, "time_limit": 0.0, "token_limit": 0,
                        "kv_reuse": True, "response_budget": 0, "reflect_prefix": "", "reflect_stop": ""}


def test_timing_adds_up_across_calls_and_stays_within_the_wall_clock(policy):
    timing = {"generation": 5.0, "env": 7.0}
    started = time.perf_counter()
    run_episodes(policy, [Slow(0.05, turns=3)], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 4), timing=timing)
    elapsed = time.perf_counter() - started
    assert 5.0 < timing["generation"] < 5.0 + elapsed and 7.0 + 0.15 <= timing["env"] < 7.0 + elapsed
    fresh = {}
    started = time.perf_counter()
    run_episodes(policy, [Slow(0.05, turns=3)], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 4), timing=fresh)
    assert 0.15 <= fresh["env"] and 0.0 < fresh["generation"] + fresh["env"] <= time.perf_counter() - started


def test_a_conversation_gets_a_reply_while_one_token_and_its_end_still_fit(policy):
    """max_seq_len = opening + 2: one sampled token and the end-of-turn that closes it fill the sequence exactly;
    opening + 1: no reply at all. Nothing ever grows past max_seq_len."""
    env = TextBanditEnv(turns=2)
    opening = len(policy.chat.open(env.instructions, "Turn 1 of 2. Which door?"))
    for room, sampled in ((2, 1), (3, 2), (1, 0), (0, 0)):
        torch.manual_seed(0)
        (episode,) = run_episodes(policy, [TextBanditEnv(turns=2)], [(1, None)], [0],
                                  SamplingParams(1.0, 1.0, 0, 50), max_seq_len=opening + room)
        (trajectory,) = episode.trajectories
        assert trajectory.prompt_len == opening and trajectory.num_model_tokens == sampled, room
        assert len(trajectory.tokens) == opening + (room if sampled else 0) and trajectory.overflowed, room
    # The opening's tokens are context: log-prob 0, no constraint.
    assert trajectory.logprobs[:opening] == [0.0] * opening and trajectory.constraints[:opening] == [-1] * opening


def test_one_overflowing_conversation_does_not_stop_the_others(policy):
    long_winded = Recording(turns=2)
    long_winded.instructions = "Pick a door. " * 40
    short = TextBanditEnv(turns=2)
    opening = len(policy.chat.open(short.instructions, "Turn 1 of 2. Which door?"))
    episodes = run_episodes(policy, [long_winded, short], [(1, None), (2, None)], [0, 1],
                            SamplingParams(1.0, 1.0, 0, 3), constrained=True, table=ConstraintTable(),
                            max_seq_len=opening + 40)
    assert episodes[0].trajectories[0].overflowed and episodes[0].trajectories[0].num_model_tokens == 0
    assert long_winded.replies == ["", ""]  # an overflowed conversation answers every turn with an empty reply
    assert episodes[1].trajectories[0].num_model_tokens > 0 and not episodes[1].trajectories[0].overflowed


def test_attempts_sample_with_their_own_params_and_count_what_they_generate(policy):
    """Attempt replies use ``sampling`` (here at most 1 token), never the reflection's; every reply cut short is
    counted; an episode's generated tokens are all its sampled tokens."""
    from erl_envs.reflection import ReflectionWrapper

    envs = [ReflectionWrapper(TextBanditEnv(turns=3, prize=0), gate_threshold=4.0) for _ in range(3)]
    torch.manual_seed(5)
    episodes = run_episodes(policy, envs, [(i, None) for i in range(3)], [0, 1, 2], SamplingParams(1.0, 1.0, 0, 1),
                            reflect_sampling=SamplingParams(1.0, 1.0, 0, 9))
    for episode in episodes:
        attempts = [t for t in episode.trajectories if t.role != "reflection"]
        for attempt in attempts:
            assert attempt.num_model_tokens <= 3  # three turns of one token each
            assert attempt.truncated_replies == sum(
                1 for i, m in enumerate(attempt.mask) if m and attempt.tokens[i] not in policy.chat.stop_ids)
        assert episode.generated_tokens == sum(t.num_model_tokens for t in episode.trajectories)
    assert max(t.num_model_tokens for e in episodes for t in e.trajectories if t.role == "reflection") > 1
    for reflection in (t for e in episodes for t in e.trajectories if t.role == "reflection"):  # no prefix given
        assert reflection.prompt_len == len(policy.chat.open(reflection.system_prompt, reflection.first_observation))
    assert max(t.truncated_replies for e in episodes for t in e.trajectories if t.role != "reflection") >= 2


def test_replies_cut_by_max_new_tokens_are_masked_when_asked(policy):
    torch.manual_seed(2)
    (episode,) = run_episodes(policy, [TextBanditEnv(turns=3)], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 1),
                              mask_truncated=True)
    (trajectory,) = episode.trajectories
    reply_positions = [i for i in range(trajectory.prompt_len, len(trajectory.tokens))
                       if trajectory.tokens[i] not in policy.chat.stop_ids and trajectory.mask[i] == 0
                       and trajectory.tokens[i] != policy.chat.end_of_turn_id]
    assert trajectory.truncated_replies >= 1 and trajectory.num_model_tokens == 3 - trajectory.truncated_replies
    assert all(trajectory.logprobs[i] == 0.0 and trajectory.constraints[i] == -1 for i in reply_positions)


def test_reset_options_reach_the_env(policy):
    env = Recording()
    run_episodes(policy, [env], [(1, {"level": 3})], [0], SamplingParams(1.0, 1.0, 0, 4))
    assert env.reset_with == (1, {"level": 3})


def test_exact_bounds_of_the_token_budget_and_the_env_turn_guard(policy):
    """Replies of a fixed length R (constrained doors): a token limit of R ends the episode after its first reply;
    an env turn is added when it and one reply token with its end still fit max_seq_len, and not otherwise."""
    env, reply, turn = _budget_setup(policy)
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8), constrained=True,
                              table=ConstraintTable(), token_limit=reply)
    assert episode.budget_ended == "tokens" and episode.generated_tokens == reply
    probe = TextBanditEnv(turns=3, contextual=True)
    opening = len(policy.chat.open(probe.instructions, probe.reset(seed=1)[0]))
    for extra, turns in ((2, 2), (1, 1)):
        limit = opening + reply + turn + extra
        (episode,) = run_episodes(policy, [env], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8), constrained=True,
                                  table=ConstraintTable(), max_seq_len=limit)
        (trajectory,) = episode.trajectories
        text = policy.tokenizer.decode(trajectory.tokens)
        assert text.count("<|user|>") == turns and len(trajectory.tokens) <= limit, extra
        assert len(trajectory.tokens) == (limit if turns == 2 else opening + reply), extra


def test_no_time_limit_by_default_even_for_a_slow_env(policy):
    (episode,) = run_episodes(policy, [Slow(0.55, turns=3)], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 4))
    assert episode.budget_ended == "" and episode.trajectories[0].num_model_tokens > 0


def test_an_episode_samples_with_the_params_it_was_given(policy):
    """The first reply of an episode is what generate_replies draws from the opening with the same seed and the same
    (not neutral) temperature, top-p and top-k; a reflection's stop string never cuts an attempt's reply."""
    env = TextBanditEnv(turns=1)
    params = SamplingParams(0.7, 0.9, 3, 5)
    torch.manual_seed(4)
    (episode,) = run_episodes(policy, [env], [(1, None)], [0], params, kv_reuse=False)
    (trajectory,) = episode.trajectories
    opening = trajectory.tokens[:trajectory.prompt_len]
    torch.manual_seed(4)
    (reply,) = generate_replies(policy, [opening], params)
    sampled = [t for t, m in zip(trajectory.tokens, trajectory.mask) if m]
    assert sampled == reply.ids and trajectory.logprobs[trajectory.prompt_len:][:len(reply.ids)] == pytest.approx(
        reply.logprobs, abs=1e-5)
    (episode,) = run_episodes(policy, [TextBanditEnv(turns=2)], [(1, None)], [0], SamplingParams(1.0, 1.0, 0, 8),
                              constrained=True, table=ConstraintTable(), reflect_stop="`")
    text = policy.tokenizer.decode(episode.trajectories[0].tokens)
    replies = [r.split("<|end|>")[0] for r in text.split("<|assistant|>")[1:]]
    assert replies and all(r in TextBanditEnv().valid_actions for r in replies)
