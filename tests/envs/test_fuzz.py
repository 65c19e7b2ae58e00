"""Fuzzing every env, plain and inside ReflectionWrapper: nothing a model or a user sends may crash an env or break
its invariants.

The invariants themselves live in ``benchmarks/soak/soak_envs.py`` (``EnvChecker`` for an env's own outputs,
``PhaseChecker`` for the wrapper's phases and record), shared with the long soak run. Here Hypothesis drives the
envs: a state machine per env interleaves replies (valid, arbitrary Unicode with lone surrogates, decoded bytes,
near-miss markup), reflections, non-``str`` actions, resets in any phase and steps after the end; then come
megabyte replies, resets in each phase of a two-attempt episode, and checks that the checkers do catch a broken env.
"""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import erl_envs  # noqa: F401  (registers the env ids)
from erl_envs.reflection.memory import ReflectionMemory
from erl_envs.qa.scoring import extract_answer
from erl_envs.qa.tools import parse_qa_reply
from erl_envs.reflection import PHASES
from erl_envs.reflection.reflectors import RuleReflector
from benchmarks.soak import soak_envs

ENV_IDS = list(soak_envs.ENVS)
END_ERRORS = (gym.error.ResetNeeded, RuntimeError)

_built: dict[str, gym.Env] = {}


def built_env(env_id: str) -> gym.Env:
    """One ``gymnasium.make`` per env id for the whole module: building HotpotQA's index per example is wasteful."""
    if env_id not in _built:
        _built[env_id] = gym.make(env_id, **soak_envs.ENVS[env_id])
    return _built[env_id]


def style_of(env_id: str) -> str:
    return "qa" if "HotpotQA" in env_id else "grid"


# A reply that keeps an attempt going without winning, and one that ends a QA attempt with a wrong answer.
KEEP_GOING = {"grid": "I am not sure which way to go.", "qa": "<search>city river</search>"}
WRONG_ANSWER = {"grid": "I am not sure which way to go.", "qa": "\\boxed{certainly not the answer}"}


class Player:
    """An env under the soak checkers: ``reset``/``step`` feed the wrapper's PhaseChecker, ``violations`` collects."""

    def __init__(self, env_id: str, wrapped: bool, memory: ReflectionMemory | None = None, **wrapper_kwargs):
        self.style = style_of(env_id)
        self.env, self.checker, self.phases = soak_envs.checked(built_env(env_id), wrapped, memory=memory,
                                                                **wrapper_kwargs)
        self.done = True

    @property
    def phase(self) -> str | None:
        return getattr(self.env, "phase", None)

    def reset(self, seed: int | None = None):
        obs, info = self.env.reset(seed=seed)
        if self.phases is not None:
            self.phases.on_reset(obs, info)
        self.done = False
        self.task_id = info["task_id"]
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.phases is not None:
            self.phases.on_step(action, obs, reward, terminated, truncated, info)
        self.done = terminated or truncated
        return obs, reward, terminated, truncated, info

    def step_until_phase_changes(self, reply: str, limit: int = 50):
        """Step ``reply`` until the wrapper leaves its current phase (or the episode ends); the last step's result."""
        start = self.phase
        for _ in range(limit):
            result = self.step(reply)
            if self.done or self.phase != start:
                return result
        raise AssertionError(f"still in {start} after {limit} steps of {reply!r}")

    def violations(self) -> list[str]:
        return self.checker.violations + (self.phases.violations if self.phases is not None else [])


# --------------------------------------------------------------------------------------------- strategies

unicode_text = st.text(st.characters(exclude_categories=()), max_size=60)  # surrogates and controls included
decoded_bytes = st.builds(
    lambda raw, how: raw.decode(*how),
    st.binary(max_size=60),
    st.sampled_from([("latin-1",), ("utf-8", "surrogateescape"), ("utf-8", "replace"), ("cp1252", "replace")]),
)
markup = st.lists(st.sampled_from(soak_envs.MARKUP_FRAGMENTS) | unicode_text, max_size=12).map("".join)
edge_cases = st.sampled_from(["", " ", "\n", "\x00", "```", "``````", "```\n```", "<answer></answer>", "\\boxed{}",
                              "<search></search>", "<tool_call></tool_call>", "\ufeff```Up```", "Up" * 3000])
words = st.lists(st.sampled_from("city river born founded company film band who which the of in".split()),
                 min_size=1, max_size=6).map(" ".join)
top_k = st.integers(-5, 50) | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=5) | st.none()

VALID = {
    "grid": st.sampled_from(["```Up```", "```Down```", "```Left```", "```Right```", "up", "DOWN", "```\nleft\n```",
                             "<answer>Right</answer>", "1", "```4```", "Let me think.\n```Down```",
                             np.str_("```Up```")]),
    "qa": st.one_of(
        words.map(lambda q: f"<search>{q}</search>"),
        st.builds(lambda q, k: json.dumps({"name": "search", "arguments": {"query": q, "top_k": k}}), words, top_k),
        st.builds(lambda q: f'<tool_call>{{"name": "search", "arguments": {{"query": "{q}"}}}}</tool_call>', words),
        (words | unicode_text).map(lambda a: f"The answer is \\boxed{{{a}}}."),
        words.map(lambda a: f"<answer>{a}</answer>"),
    ),
}


def replies(style: str) -> st.SearchStrategy[str]:
    valid = VALID[style]
    return st.one_of(valid, unicode_text, decoded_bytes, markup, edge_cases,
                     st.tuples(valid, unicode_text).map("".join), st.tuples(unicode_text, valid).map("".join))


def reflections(style: str) -> st.SearchStrategy[str]:
    return (words | unicode_text | markup).map(lambda body: f"<prompt>{body}</prompt>") | replies(style)


non_text = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.binary(max_size=8),
    st.lists(st.text(max_size=3), max_size=2), st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.sampled_from(soak_envs.NON_TEXT_ACTIONS),
)
seeds = st.integers(0, 2**31 - 1)


# --------------------------------------------------------------------------------------------- the state machines


def _machine_test(env_id: str, wrapped: bool, max_examples: int):
    style = style_of(env_id)

    class EnvMachine(RuleBasedStateMachine):
        """Any interleaving of replies, reflections, bad types, resets and late steps keeps every invariant."""

        def __init__(self):
            super().__init__()
            self.player = Player(env_id, wrapped, ReflectionMemory() if wrapped else None)

        @initialize(seed=seeds)
        def start(self, seed):
            self.player.reset(seed)

        @precondition(lambda self: not self.player.done and self.player.phase != "reflect")
        @rule(batch=st.lists(replies(style), min_size=1, max_size=6))
        def reply(self, batch):
            for reply in batch:  # several per rule, so that episodes get long enough to end between resets
                self.player.step(reply)
                if self.player.done or self.player.phase == "reflect":
                    break

        @precondition(lambda self: not self.player.done and self.player.phase != "reflect")
        @rule()
        def fail_the_attempt(self):
            self.player.step_until_phase_changes(WRONG_ANSWER[style])

        @precondition(lambda self: not self.player.done and style == "qa" and self.player.phase != "reflect")
        @rule()
        def answer_right(self):
            env = self.player.env.unwrapped
            question = next(q for q in env.questions if q.id == self.player.task_id)
            self.player.step(f"\\boxed{{{question.answer}}}")

        @precondition(lambda self: self.player.phase == "reflect")
        @rule(text=reflections(style))
        def reflect(self, text):
            self.player.step(text)

        @precondition(lambda self: not self.player.done)
        @rule(value=non_text)
        def non_text_action(self, value):
            phase = self.player.phase
            with pytest.raises(TypeError) as caught:
                self.player.step(value)
            assert type(value).__name__ in str(caught.value)
            assert self.player.phase == phase  # the refused action changed nothing (the checkers see the rest)

        @rule(seed=st.none() | seeds)
        def reset(self, seed):
            self.player.reset(seed)

        @precondition(lambda self: self.player.done)
        @rule(action=replies(style) | non_text)
        def step_after_end(self, action):
            expected = END_ERRORS if isinstance(action, str) else END_ERRORS + (TypeError,)
            with pytest.raises(expected, match="(?i)reset|str"):
                self.player.env.step(action)

        @invariant()
        def invariants_hold(self):
            assert self.player.violations() == []

    EnvMachine.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    return EnvMachine.TestCase


TestFrozenLakeFuzz = _machine_test("ERL-FrozenLake-v0", wrapped=False, max_examples=40)
TestFrozenLakeWrappedFuzz = _machine_test("ERL-FrozenLake-v0", wrapped=True, max_examples=40)
TestSokobanFuzz = _machine_test("ERL-Sokoban-v0", wrapped=False, max_examples=30)
TestSokobanWrappedFuzz = _machine_test("ERL-Sokoban-v0", wrapped=True, max_examples=30)
TestHotpotQAFuzz = _machine_test("ERL-HotpotQA-v0", wrapped=False, max_examples=30)
TestHotpotQAWrappedFuzz = _machine_test("ERL-HotpotQA-v0", wrapped=True, max_examples=30)


# --------------------------------------------------------------------------------------------- targeted cases


@pytest.fixture(scope="module")
def megabyte_replies() -> list[str]:
    return soak_envs.huge_replies(np.random.default_rng(0), size=1_000_000)


@pytest.mark.timeout(120)  # a hang guard: a parser that rescans the reply per tag would take hours here
@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "wrapped"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_megabyte_replies_are_ordinary_steps(env_id, wrapped, megabyte_replies):
    player = Player(env_id, wrapped)
    for seed, reply in enumerate(megabyte_replies):
        player.reset(seed)
        player.step(reply)
        if wrapped and not player.done:
            # Also as a reflection: the wrapper cuts it to max_reflection_chars and records that it did.
            player.step_until_phase_changes(WRONG_ANSWER[player.style])
            if player.phase == "reflect":
                _, _, _, _, info = player.step(reply)
                assert info["phase"] == "attempt2"
    assert player.violations() == []


def _reference_boxed(text: str) -> str | None:
    """The last closed \\boxed{} the plain way (rescanning from every box): the behaviour the fast parser keeps."""
    for match in reversed(list(re.finditer(r"\\(?:boxed|fbox)\s*\{", text))):
        depth = 1
        for i in range(match.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                body = text[match.end():i]
                for _ in range(8):
                    body = re.sub(r"\\(?:text|textbf|textit|mathrm|mathbf|emph|texttt)\s*\{([^{}]*)\}", r"\1", body)
                return body.strip()
    return None


tag_soup = st.lists(st.sampled_from(["\\boxed{", "\\fbox {", "\\text{", "{", "}", "<answer>", "</answer>", "<ANSWER>",
                                     "<search>", "</Search>", "a", "b c", " ", "\n"]), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=tag_soup)
def test_linear_reply_parsing_reads_what_the_plain_regexes_read(text):
    # qa.py reads tags and boxes in one pass (a flood of unclosed ones was quadratic); same results as before.
    expected = _reference_boxed(text)
    answers = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL | re.IGNORECASE)
    if expected is None and answers:
        expected = _reference_boxed(answers[-1]) or answers[-1].strip()
    assert extract_answer(text) == expected
    search = re.search(r"<search>(.*?)</search>", text, re.DOTALL | re.IGNORECASE)
    reply = parse_qa_reply(text)
    if search and search.group(1).strip():
        assert reply.kind == "search" and reply.query == search.group(1)
    elif "<search>" in text.lower():
        assert reply.kind == "invalid"


@pytest.mark.parametrize("env_id", ["ERL-FrozenLake-v0", "ERL-Sokoban-v0"])
def test_a_move_after_a_megabyte_of_noise_is_still_read(env_id, megabyte_replies):
    noisy_up = next(r for r in megabyte_replies if r.endswith("```Up```") and len(r) > 100_000)
    player = Player(env_id, wrapped=False)
    player.reset(0)
    _, _, _, _, info = player.step(noisy_up)
    assert info["parse_errors"] == 0 and "Up" in info["feedback"]


def test_an_answer_after_a_megabyte_of_text_is_still_read(megabyte_replies):
    long_answer = next(r for r in megabyte_replies if r.endswith("\\boxed{Paris}"))
    player = Player("ERL-HotpotQA-v0", wrapped=False)
    player.reset(0)
    _, _, terminated, _, info = player.step(long_answer)
    assert terminated and info["answer"] == "Paris"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_steps_before_reset_and_after_the_end_raise_clearly(env_id):
    kwargs = soak_envs.ENVS[env_id]
    fresh = gym.make(env_id, **kwargs)
    with pytest.raises(gym.error.ResetNeeded):
        fresh.step("```Up```")
    unwrapped = fresh.unwrapped.__class__(**kwargs)
    with pytest.raises(END_ERRORS, match="(?i)reset"):
        unwrapped.step("```Up```")

    player = Player(env_id, wrapped=False)
    player.reset(3)
    while not player.done:
        player.step(WRONG_ANSWER[player.style])
    for late in ["```Up```", "", "\\boxed{x}"]:
        with pytest.raises(END_ERRORS, match="(?i)reset"):
            player.env.step(late)
    player.reset(3)  # and the env is usable again
    player.step(KEEP_GOING[player.style])
    assert player.violations() == []


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_wrapper_steps_before_reset_and_after_the_end_raise_clearly(env_id):
    player = Player(env_id, wrapped=True)
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        player.env.step("```Up```")
    player.reset(5)
    while not player.done:
        reply = "<prompt>Try harder.</prompt>" if player.phase == "reflect" else WRONG_ANSWER[player.style]
        player.step(reply)
    assert player.phase == "done"
    for late in ["```Up```", "<prompt>x</prompt>"]:
        with pytest.raises(gym.error.ResetNeeded, match="reset"):
            player.env.step(late)
    assert player.violations() == []


BAD_RESETS = {
    "grid": [({"bogus": 1}, ValueError, "unknown reset option 'bogus'"), ("opts", TypeError, "dict or None, got str"),
             ({"max_steps": 0}, ValueError, "max_steps")],
    "qa": [({"bogus": 1}, ValueError, "unknown reset options"), ("opts", TypeError, "dict or None, got str"),
           ({"index": "3"}, TypeError, "'index' must be an int, got str"),
           ({"index": 2.5}, TypeError, "'index' must be an int, got float"),
           ({"index": 10**9}, ValueError, "out of range"), ({"task_id": ["q"]}, ValueError, "no question")],
}


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "wrapped"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_failed_reset_names_the_problem_and_leaves_nothing_half_played(env_id, wrapped):
    player = Player(env_id, wrapped)
    for options, error, match in BAD_RESETS[player.style]:
        player.reset(1)
        player.step(KEEP_GOING[player.style])
        with pytest.raises(error, match=match):
            player.env.reset(seed=2, options=options)
        with pytest.raises(END_ERRORS):
            player.env.step(KEEP_GOING[player.style])
    player.reset(3)
    player.step(KEEP_GOING[player.style])
    assert player.violations() == []


HOSTILE_TOOL_CALLS = [
    ('{"name": "search", "arguments": {"query": "x", "top_k": 1e999}}', "top_k must be a whole number"),
    ('{"name": "search", "arguments": {"query": "x", "top_k": ' + "9" * 5000 + "}}", "a number is too long"),
    # (30,000 deep, so the whole call lies within the last MAX_REPLY_CHARS characters the env reads of a reply)
    ('{"name": "search", "arguments": {"query": ' + "[" * 30_000 + "]" * 30_000 + "}}", "nested too deeply"),
    ('<tool_call>{"name": "search", "arguments": ' + "[" * 50_000 + "</tool_call>", "nested too deeply"),
    ('{"name": "search", "arguments": "' + "[" * 50_000 + '"}', "arguments are not valid JSON"),
]


@pytest.mark.parametrize("reply, reason", HOSTILE_TOOL_CALLS,
                         ids=["inf top_k", "huge int", "deep", "deep tag", "deep args"])
def test_hostile_tool_calls_are_unreadable_calls_not_crashes(reply, reason):
    player = Player("ERL-HotpotQA-v0", wrapped=False)
    player.reset(0)
    obs, reward, terminated, truncated, info = player.step(reply)
    assert info["action"] == "invalid" and not info["took_effect"] and reason in obs
    assert (reward, terminated) == (0.0, False) and player.violations() == []


def _drive_to(player: Player, phase: str) -> None:
    """From a fresh reset, play a failing first attempt up to ``phase`` (attempt2 and done: one step into it)."""
    style = player.style
    if phase == "attempt1":
        player.step(KEEP_GOING[style])
        return
    player.step_until_phase_changes(WRONG_ANSWER[style])
    assert player.phase == "reflect"
    if phase == "reflect":
        return
    player.step("<prompt>Read the grid, then move one cell per turn.</prompt>")
    if phase == "attempt2":
        player.step(KEEP_GOING[style])
        return
    while not player.done:
        player.step(WRONG_ANSWER[style])
    assert player.phase == "done"


def _play_script(player: Player, seed: int) -> list:
    """Reset with ``seed`` and play a fixed failing episode to the end; everything the wrapper returned."""
    outputs = [player.reset(seed)]
    while not player.done:
        reply = "<prompt>Think first.</prompt>" if player.phase == "reflect" else WRONG_ANSWER[player.style]
        outputs.append(player.step(reply))
    return json.loads(json.dumps(outputs))


@pytest.mark.parametrize("phase", [*PHASES, "done"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_in_any_phase_starts_a_clean_episode(env_id, phase):
    memory = ReflectionMemory("A remembered rulebook.")
    interrupted = Player(env_id, wrapped=True, memory=memory)
    interrupted.reset(11)
    _drive_to(interrupted, phase)
    assert interrupted.phase == phase
    after_interruption = _play_script(interrupted, seed=12)

    fresh = Player(env_id, wrapped=True, memory=ReflectionMemory("A remembered rulebook."))
    assert after_interruption == _play_script(fresh, seed=12)
    assert memory.get() == "A remembered rulebook." and memory.updates == 0  # failures never write the memory
    assert interrupted.violations() == [] and fresh.violations() == []


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "wrapped"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_soak_smoke(env_id, wrapped, megabyte_replies):
    """A short run of the soak script itself, with its own reply mix, finds nothing to count."""
    result = soak_envs.soak(env_id, wrapped, steps=600, seed=7, huge=megabyte_replies[:4])
    assert (result.exceptions, result.violations) == (0, 0), result.examples
    assert result.expected_errors > 0 and result.episodes > 1


@pytest.mark.parametrize("variant", ["rule reflector", "no reflection"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_wrapper_variants_keep_the_phase_order_under_fuzzed_replies(env_id, variant):
    # A reflector turns the reflect phase into part of the step that ends attempt 1, and no_reflection skips it:
    # both must still follow the legal order, and the RuleReflector must cope with traces of garbage replies.
    kwargs = {"reflector": RuleReflector()} if variant == "rule reflector" else {"no_reflection": True}
    player = Player(env_id, wrapped=True, memory=ReflectionMemory(), **kwargs)
    fuzzer = soak_envs.ReplyFuzzer(np.random.default_rng(3), player.env)
    phases_seen = set()
    for episode in range(40):
        _, info = player.reset(episode)
        fuzzer.set_task(info["task_id"])
        while not player.done:
            _, _, _, _, info = player.step(fuzzer.reply())
            phases_seen.add(info["phase"])
    assert "reflect" not in phases_seen and "attempt2" in phases_seen
    assert player.violations() == []


# --------------------------------------------------------------------------------------------- the checkers catch


class _Corrupting(gym.Wrapper):
    """A FrozenLake that breaks one promise, to show the checkers notice."""

    def __init__(self, env, fault: str):
        super().__init__(env)
        self.fault = fault
        self.ended = False

    def step(self, action):
        if self.ended and self.fault == "no_error_after_end":
            return "late", 0.0, True, False, {}
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.ended = terminated or truncated
        if self.fault == "reward":
            reward = 2.0
        elif self.fault == "nan_reward":
            reward = float("nan")
        elif self.fault == "info_not_json":
            info = {**info, "position": np.array(info["position"])}
        elif self.fault == "counter":
            info = {**info, "steps_left": info["steps_left"] + 1}
        elif self.fault == "observation":
            obs = obs + "\u00e9"
        elif self.fault == "numpy_bool":
            terminated = np.bool_(terminated)
        elif self.fault == "no_feedback":
            info = {key: value for key, value in info.items() if key != "feedback"}
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("fault", ["reward", "nan_reward", "info_not_json", "counter", "observation", "numpy_bool",
                                   "no_feedback", "no_error_after_end"])
def test_env_checker_catches_a_broken_env(fault):
    env = soak_envs.EnvChecker(_Corrupting(gym.make("ERL-FrozenLake-v0").unwrapped, fault))
    env.reset(seed=0)
    for _ in range(9):  # one step past the 8-step budget
        try:
            env.step("nonsense")
        except gym.error.ResetNeeded:
            break
    assert env.violations, f"the checker missed the fault {fault!r}"


def test_env_checker_catches_a_refused_action_that_changed_the_state():
    class Leaky(gym.Wrapper):
        def step(self, action):
            if not isinstance(action, str):
                self.env.unwrapped._steps_used += 1  # counts the step, then refuses it
                raise TypeError(f"an action must be a str, got {type(action).__name__}")
            return self.env.step(action)

    env = soak_envs.EnvChecker(Leaky(gym.make("ERL-FrozenLake-v0").unwrapped))
    env.reset(seed=0)
    with pytest.raises(TypeError):
        env.step(None)
    env.step("nonsense")
    assert any("steps_used went from 0 to 2" in v for v in env.violations)


def test_phase_checker_catches_an_illegal_order_and_a_bad_record():
    player = Player("ERL-FrozenLake-v0", wrapped=True)
    obs, info = player.reset(0)
    phases = player.phases
    base = {"system_prompt": "p", "task_id": info["task_id"], "episode_seed": info["episode_seed"]}
    phases.on_step("x", "obs", 0.0, False, False, {**base, "phase": "reflect", "new_conversation": True,
                                                   "attempt": 1})
    phases.on_step("x", "obs", 0.0, False, False, {**base, "phase": "attempt1", "new_conversation": False,
                                                   "attempt": None, "reflection_fallback": False})
    assert any("illegal phase order: reflect -> 'attempt1'" in v for v in phases.violations)

    phases.violations.clear()
    player.reset(0)
    record = {"attempt1": {"rewards": [1.0], "return": 1.0, "observations": ["a"], "actions": ["x"],
                           "terminated": True, "success": False},
              "attempt2": None, "gated": True, "r1": 1.0, "reflection": None}
    phases.on_step("x", "obs", 0.5, True, False, {**base, "phase": "attempt1", "new_conversation": False,
                                                  "attempt": 1, "record": record})
    problems = "\n".join(phases.violations)
    assert "recorded rewards differ" in problems and "one more observation" in problems and "gated=True" in problems


# --- a refused reset never breaks an env -------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "reflection"])
@pytest.mark.parametrize("played_before", [False, True], ids=["first-reset", "after-an-episode"])
def test_a_refused_reset_leaves_the_env_usable(env_id, wrapped, played_before):
    """A reset with a bad option raises, and the env then resets and steps as if it never happened, even when the
    refused reset was its first (Gymnasium's passive checker used to keep a broken state from it for good)."""
    from erl_envs.reflection import ReflectionWrapper

    env = gym.make(env_id, **soak_envs.ENVS[env_id])
    env = ReflectionWrapper(env) if wrapped else env
    if played_before:
        env.reset(seed=1)
        env.step("```Up```")
    with pytest.raises((ValueError, TypeError)):
        env.reset(seed=2, options={"no such option": 1})
    with pytest.raises(gym.error.ResetNeeded):
        env.step("```Up```")  # the refused reset ended the previous episode
    for seed in (3, 4):
        obs, info = env.reset(seed=seed)
        assert isinstance(obs, str)
        assert len(env.step("```Up```")) == 5
