"""Soak every env with fuzzed replies and count exceptions and broken invariants (zero of each is the pass mark).

    python benchmarks/soak/soak_envs.py                  # 100,000 steps per env, plain and wrapped (several minutes)
    python benchmarks/soak/soak_envs.py --steps 20000
    python benchmarks/soak/soak_envs.py --quick          # 2,000 steps each, a smoke run; prints, writes nothing
    python benchmarks/soak/soak_envs.py --envs ERL-Sokoban-v0 --wrapped only

A training run feeds an env millions of model replies, most of them malformed early on; a crash or a silently
corrupted episode there costs hours. This script plays each env (``gymnasium.make``) alone and inside
``ReflectionWrapper`` (with a ``ReflectionMemory``) for ``--steps`` ``step`` calls, with replies drawn from a mix of
valid actions, arbitrary Unicode (lone surrogates and control characters included), bytes decoded every which way,
near-miss markup (unclosed code blocks, tags, ``\\boxed{``, broken JSON tool calls), replies of about 1 MB, and
non-``str`` actions; it resets mid-episode (in every phase of the wrapper's episode) and steps again after episodes
have ended. It counts:

* exceptions: anything raised except the two errors the API promises, a ``TypeError`` for a non-``str`` action and
  ``gymnasium.error.ResetNeeded``/``RuntimeError`` for a step after the end (each must name the problem);
* invariant violations, checked on every reset and step by ``EnvChecker`` (the env's own outputs) and
  ``PhaseChecker`` (the wrapper's phases and its episode record); see their docstrings for the list.

The checkers are also used by ``tests/envs/test_fuzz.py``. The exit status is 1 when anything was counted.
Results go to ``benchmarks/results/soak.json`` (the counts) and ``benchmarks/results/soak.md`` (computed from that
file; ``--report`` rewrites it without playing), not with ``--quick``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import erl_envs  # noqa: E402,F401  (registers the ERL env ids)
from erl_envs import protocol  # noqa: E402

__all__ = [
    "ENVS",
    "REWARD_RANGE",
    "EnvChecker",
    "PhaseChecker",
    "ReplyFuzzer",
    "NON_TEXT_ACTIONS",
    "MARKUP_FRAGMENTS",
    "huge_replies",
    "checked",
    "make_env",
    "soak",
    "SoakResult",
]

# The envs and the arguments they are built with. HotpotQA's synthetic data needs no download; no index cache on disk.
ENVS: dict[str, dict[str, Any]] = {
    "ERL-FrozenLake-v0": {},
    "ERL-Sokoban-v0": {},
    "ERL-HotpotQA-v0": {"data": "synthetic", "cache_dir": False},
}

# Every env of erl_envs pays 1 on success and partial QA credit in between; no step pays anything else.
REWARD_RANGE = (0.0, 1.0)
HUGE_CHARS = 1_000_000

# Values that are not text: each must be refused with a TypeError naming its type, the episode left untouched.
NON_TEXT_ACTIONS: tuple[Any, ...] = (
    None, 0, 1, -1, 2**70, 1.5, float("nan"), True, b"Up", bytearray(b"```Up```"), ["Up"], ("Up",),
    {"action": "Up"}, {"Up"}, np.int64(1), np.float32(2.0), np.array(["Up"]), object(), Ellipsis,
)

_PHASES = ("attempt1", "reflect", "attempt2")
# The phase of the next action after a step that does not end the episode, by the phase of the step's action.
_LEGAL_NEXT = {"attempt1": {"attempt1", "reflect", "attempt2"}, "reflect": {"attempt2"}, "attempt2": {"attempt2"}}


def _json_error(value: Any) -> str | None:
    """Why ``value`` cannot be written as strict UTF-8 JSON (no ``default=``, no NaN, no lone surrogate), or None.

    ``ensure_ascii=False`` and the encoding step matter: with ASCII escaping a lone surrogate passes as ``\\udc80``
    and only breaks the file that is later written as UTF-8.
    """
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def _is_reward(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _in_range(reward: float) -> bool:
    return math.isfinite(reward) and REWARD_RANGE[0] <= reward <= REWARD_RANGE[1]


class EnvChecker(gym.Wrapper):
    """Checks every ``reset``/``step`` of the wrapped text env; records violations in ``violations``, never raises.

    Exceptions of the inner env pass through untouched and leave the checker's state as it was, so the next step
    also checks that a refused action changed nothing. Invariants, on every call unless said otherwise:

    * the observation is a ``str`` inside ``observation_space`` (``contains``);
    * the reward is a finite real number in ``REWARD_RANGE``, ``terminated``/``truncated`` are ``bool`` and never
      both True; a step after the end of an episode raised (it did not return);
    * ``info`` is a dict that ``json.dumps`` accepts with no ``default`` and no NaN; it has the protocol keys
      (``erl_envs.protocol``): ``task_id`` and ``task_text`` on reset (and unchanged on every step that repeats
      them), ``feedback`` (non-empty str) and ``took_effect`` (bool) on every step, ``success`` (bool) and
      ``episode_feedback`` (non-empty str) on the last;
    * grid envs: ``steps_used`` grows by 1 to ``max_actions_per_turn`` per step, ``steps_left`` is the episode's
      budget minus it and never negative, ``parse_errors`` and ``no_effect_moves`` never fall, truncation happens
      exactly when the budget runs out, and only a solving step pays (exactly 1);
    * QA envs: ``turn`` grows by exactly 1, ``turns_left`` is ``max_turns - turn`` and never negative,
      ``num_searches`` grows by 1 to ``num_calls`` on a search and stays put otherwise, ``retrieved_titles`` only grows (earlier
      titles keep their order), truncation happens exactly when the turns run out, only the answering step pays,
      and a success pays 1.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.style = protocol.prompt_style_of(env)
        self.violations: list[str] = []
        self.steps_checked = 0
        self._started = False
        self._done = True
        self._reset_info: dict = {}
        self._prev: dict = {}

    def _fail(self, where: str, problem: str) -> None:
        self.violations.append(f"{where}: {problem}")

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        self._check_observation(obs, "reset")
        if self._check_info(info, "reset"):
            for key in ("task_id", "task_text"):
                if not isinstance(info.get(key), str):
                    self._fail("reset", f"info[{key!r}] is {info.get(key)!r}, expected a str")
        self._started, self._done = True, False
        self._reset_info = info if isinstance(info, dict) else {}
        self._prev = {}
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, Any]:
        result = self.env.step(action)
        self.steps_checked += 1
        where = f"step {action[:40]!r}" if isinstance(action, str) else f"step {type(action).__name__}"
        if self._done or not self._started:
            self._fail(where, "a step after the end of the episode (or before reset) returned instead of raising")
        if not (isinstance(result, tuple) and len(result) == 5):
            self._fail(where, f"step returned {type(result).__name__}, not a 5-tuple")
            return result
        obs, reward, terminated, truncated, info = result
        self._check_observation(obs, where)
        if not _is_reward(reward) or not _in_range(float(reward)):
            self._fail(where, f"reward {reward!r} is not a finite number in {REWARD_RANGE}")
            reward = 0.0
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if type(flag) is not bool:
                self._fail(where, f"{name} is {type(flag).__name__}, not bool")
        if terminated and truncated:
            self._fail(where, "terminated and truncated are both True")
        done = bool(terminated) or bool(truncated)
        if self._check_info(info, where):
            self._check_protocol_keys(info, done, where)
            if self.style == "grid":
                self._check_grid(info, float(reward), bool(terminated), bool(truncated), where)
            elif self.style == "qa":
                self._check_qa(info, float(reward), bool(terminated), bool(truncated), where)
            self._prev = info
        self._done = done
        return result

    # ------------------------------------------------------------------ the checks

    def _check_observation(self, obs: Any, where: str) -> None:
        if not isinstance(obs, str):
            self._fail(where, f"the observation is {type(obs).__name__}, not str")
        elif not self.observation_space.contains(obs):
            outside = sorted({c for c in obs if c not in getattr(self.observation_space, "character_set", obs)})
            self._fail(where, f"the observation ({len(obs)} chars) is not in the observation space "
                              f"(characters outside it: {outside[:5]!r})")

    def _check_info(self, info: Any, where: str) -> bool:
        if not isinstance(info, dict):
            self._fail(where, f"info is {type(info).__name__}, not dict")
            return False
        problem = _json_error(info)
        if problem:
            self._fail(where, f"info is not JSON-serialisable ({problem})")
        return True

    def _check_protocol_keys(self, info: dict, done: bool, where: str) -> None:
        feedback = info.get("feedback")
        if not (isinstance(feedback, str) and feedback):
            self._fail(where, f"info['feedback'] is {feedback!r}, expected a non-empty str")
        if type(info.get("took_effect")) is not bool:
            self._fail(where, f"info['took_effect'] is {info.get('took_effect')!r}, expected a bool")
        for key in ("task_id", "task_text"):
            if key in info and info[key] != self._reset_info.get(key):
                self._fail(where, f"info[{key!r}] changed within the episode")
        if done:
            if type(info.get("success")) is not bool:
                self._fail(where, f"last step: info['success'] is {info.get('success')!r}, expected a bool")
            line = info.get("episode_feedback")
            if not (isinstance(line, str) and line):
                self._fail(where, f"last step: info['episode_feedback'] is {line!r}, expected a non-empty str")

    def _check_grid(self, info: dict, reward: float, terminated: bool, truncated: bool, where: str) -> None:
        env = self.unwrapped
        prev = self._prev or {"steps_used": 0, "parse_errors": 0, "no_effect_moves": 0}
        used = info.get("steps_used")
        if not isinstance(used, int):
            self._fail(where, f"info['steps_used'] is {used!r}")
            return
        if not 1 <= used - prev["steps_used"] <= getattr(env, "max_actions_per_turn", 1):
            self._fail(where, f"steps_used went from {prev['steps_used']} to {used}")
        left = info.get("steps_left")
        if left != env.episode_max_steps - used or not isinstance(left, int) or left < 0:
            self._fail(where, f"steps_left is {left!r} with {used} of {env.episode_max_steps} steps used")
        for key in ("parse_errors", "no_effect_moves"):
            if not isinstance(info.get(key), int) or info[key] < prev[key]:
                self._fail(where, f"{key} went from {prev[key]} to {info.get(key)!r}")
        if truncated != (not terminated and left == 0):
            self._fail(where, f"truncated={truncated} with terminated={terminated} and {left!r} steps left")
        solved = terminated and info.get("success") is True
        if reward != (1.0 if solved else 0.0):
            self._fail(where, f"reward {reward} with terminated={terminated}, success={info.get('success')!r}")

    def _check_qa(self, info: dict, reward: float, terminated: bool, truncated: bool, where: str) -> None:
        env = self.unwrapped
        prev = self._prev or {"turn": 0, "num_searches": 0, "retrieved_titles": []}
        turn = info.get("turn")
        if turn != prev["turn"] + 1:
            self._fail(where, f"turn went from {prev['turn']} to {turn!r}")
            return
        left = info.get("turns_left")
        if left != env.max_turns - turn or not isinstance(left, int) or left < 0:
            self._fail(where, f"turns_left is {left!r} at turn {turn} of {env.max_turns}")
        # Every tool call of a reply runs: a search step adds between 1 and num_calls searches.
        calls = info.get("num_calls", 1) if info.get("action") == "search" else 0
        grew = (info.get("num_searches") or 0) - prev["num_searches"]
        if not (min(calls, 1) <= grew <= calls):
            self._fail(where, f"num_searches went from {prev['num_searches']} to {info.get('num_searches')!r} "
                              f"on a {info.get('action')!r} step")
        titles, before = info.get("retrieved_titles"), prev["retrieved_titles"]
        if not isinstance(titles, list) or titles[:len(before)] != before:
            self._fail(where, "retrieved_titles lost or reordered earlier titles")
        if truncated != (not terminated and left == 0):
            self._fail(where, f"truncated={truncated} with terminated={terminated} and {left!r} turns left")
        if reward != 0.0 and not terminated:
            self._fail(where, f"a step that did not answer paid {reward}")
        if info.get("success") is True and reward != 1.0:
            self._fail(where, f"a successful answer paid {reward}, not 1")


class PhaseChecker:
    """Checks what a ``ReflectionWrapper`` returns, call by call; records violations in ``violations``.

    Invariants: the observation is a ``str`` in the wrapper's space; ``info`` is strict-JSON-serialisable and holds
    ``phase`` (one of ``PHASES``), ``system_prompt`` (str), ``new_conversation`` (bool, True exactly when the phase
    changed or the episode (re)started), ``task_id`` and ``episode_seed`` (unchanged through the episode). Phases
    follow the legal order: ``attempt1``+, then the end or (``reflect``, unless a reflector or ``no_reflection``
    skips it) ``attempt2``+ and the end; a reflect step pays 0.0 and has ``attempt`` None, other steps say their
    attempt. The episode ends on a step that has ``record`` and sets ``terminated`` or ``truncated``; no other step
    does either; after it ``wrapper.phase == "done"`` and a further step raises. The record is strict JSON; its
    ``r1``/``r2`` are the sums of the rewards the wrapper returned in each attempt, each attempt has one more
    observation than actions, ``gated`` holds exactly when attempt 1 succeeded and attempt 2 never ran, a reflection
    is recorded exactly when one was taken (a reflect step, or a ``reflector`` called within the step that ended
    attempt 1), attempt 2 started from attempt 1's first observation, and the
    memory was written only after a successful attempt 2 with a prompt that really came from the reflection.
    """

    def __init__(self, wrapper: gym.Env):
        self.wrapper = wrapper
        self.violations: list[str] = []
        self.episodes_ended = 0
        self.outcomes: Counter = Counter()
        self._phase: str | None = None

    def _fail(self, where: str, problem: str) -> None:
        self.violations.append(f"wrapper {where}: {problem}")

    def on_reset(self, obs: Any, info: Any) -> None:
        if not isinstance(obs, str):
            self._fail("reset", f"the observation is {type(obs).__name__}, not str")
        if not isinstance(info, dict):
            self._fail("reset", f"info is {type(info).__name__}, not dict")
            info = {}
        problem = _json_error(info)
        if problem:
            self._fail("reset", f"info is not JSON-serialisable ({problem})")
        if info.get("phase") != "attempt1" or info.get("new_conversation") is not True:
            self._fail("reset", f"phase {info.get('phase')!r}, new_conversation {info.get('new_conversation')!r}; "
                                "expected attempt1 and True")
        if not isinstance(info.get("system_prompt"), str) or not info.get("system_prompt"):
            self._fail("reset", "info['system_prompt'] is not a non-empty str")
        self._phase = "attempt1"
        self._ids = (info.get("task_id"), info.get("episode_seed"))
        self._first_obs = obs
        self._rewards: dict[int, list[float]] = {1: [], 2: []}
        self._reflected = False

    def on_step(self, action: Any, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any) -> None:
        where = f"step in {self._phase}"
        if self._phase in (None, "done"):
            self._fail(where, "a step after the end of the episode (or before reset) returned instead of raising")
            return
        if not isinstance(obs, str) or not self.wrapper.observation_space.contains(obs):
            self._fail(where, f"the observation is {type(obs).__name__}, outside the observation space")
        if not isinstance(info, dict):
            self._fail(where, f"info is {type(info).__name__}, not dict")
            return
        problem = _json_error(info)
        if problem:
            self._fail(where, f"info is not JSON-serialisable ({problem})")
        if (info.get("task_id"), info.get("episode_seed")) != self._ids:
            self._fail(where, "task_id or episode_seed changed within the episode")
        if not _is_reward(reward) or not _in_range(float(reward)):
            self._fail(where, f"reward {reward!r} is not a finite number in {REWARD_RANGE}")
            reward = 0.0
        if type(terminated) is not bool or type(truncated) is not bool:
            self._fail(where, "terminated/truncated are not bools")
        if not isinstance(info.get("system_prompt"), str):
            self._fail(where, "info['system_prompt'] is not a str")

        if self._phase == "reflect":
            self._reflected = True
            if info.get("attempt") is not None or reward != 0.0:
                self._fail(where, f"a reflect step has attempt={info.get('attempt')!r} and reward {reward!r}")
            if type(info.get("reflection_fallback")) is not bool:
                self._fail(where, "a reflect step has no bool info['reflection_fallback']")
        else:
            number = 1 if self._phase == "attempt1" else 2
            if info.get("attempt") != number:
                self._fail(where, f"info['attempt'] is {info.get('attempt')!r}, expected {number}")
            self._rewards[number].append(float(reward))

        if "record" in info:
            if not (terminated or truncated):
                self._fail(where, "the step with the record neither terminates nor truncates")
            if self.wrapper.phase != "done":
                self._fail(where, f"after the last step the wrapper's phase is {self.wrapper.phase!r}, not 'done'")
            self._check_record(info["record"], where)
            self._phase = "done"
            self.episodes_ended += 1
            return
        if terminated or truncated:
            self._fail(where, "the episode ended without info['record']")
        phase = info.get("phase")
        if phase not in _LEGAL_NEXT[self._phase]:
            self._fail(where, f"illegal phase order: {self._phase} -> {phase!r}")
            phase = self._phase
        if info.get("new_conversation") is not (phase != self._phase):
            self._fail(where, f"new_conversation is {info.get('new_conversation')!r} on {self._phase} -> {phase}")
        if phase == "attempt2" and self._phase == "attempt1" and "reflection_fallback" in info:
            self._reflected = True  # a reflector wrote the reflection within this step
        if phase == "attempt2" and self._phase != "attempt2" and obs != self._first_obs:
            self._fail(where, "attempt 2 did not start from attempt 1's first observation")
        self._phase = phase

    def _check_record(self, record: Any, where: str) -> None:
        problem = _json_error(record)
        if problem:
            self._fail(where, f"the record is not JSON-serialisable ({problem})")
        if not isinstance(record, dict):
            return
        attempts = {1: record.get("attempt1"), 2: record.get("attempt2")}
        for number, attempt in attempts.items():
            if attempt is None:
                if self._rewards[number] and number == 2:
                    self._fail(where, "attempt 2 was played but the record has none")
                continue
            rewards = self._rewards[number]
            if attempt.get("rewards") != rewards or not math.isclose(sum(rewards), attempt.get("return", math.nan)):
                self._fail(where, f"attempt {number}'s recorded rewards differ from the rewards returned")
            if len(attempt.get("observations", ())) != len(attempt.get("actions", ())) + 1:
                self._fail(where, f"attempt {number} does not have one more observation than actions")
            if not (attempt.get("terminated") or attempt.get("truncated")):
                self._fail(where, f"attempt {number} is recorded as not ended")
        if record.get("r1") != sum(self._rewards[1]):
            self._fail(where, f"r1={record.get('r1')!r} but attempt 1 paid {sum(self._rewards[1])}")
        gated = record.get("gated")
        if gated is not (attempts[2] is None) or (gated and not attempts[1].get("success")):
            self._fail(where, f"gated={gated!r} with attempt1 success {attempts[1].get('success')!r}")
        if attempts[2] is not None:
            if attempts[1].get("success"):
                self._fail(where, "attempt 2 ran after a successful attempt 1")
            if record.get("r2") != sum(self._rewards[2]):
                self._fail(where, f"r2={record.get('r2')!r} but attempt 2 paid {sum(self._rewards[2])}")
            if record.get("same_start") is not True:
                self._fail(where, f"same_start is {record.get('same_start')!r}: attempt 2 replayed another instance")
        if (record.get("reflection") is not None) != self._reflected:
            self._fail(where, "a reflection is recorded without a reflect step, or the other way round")
        if record.get("memory_updated"):
            reflection = record.get("reflection") or {}
            if not (attempts[2] and attempts[2].get("success")) or reflection.get("fallback") is not False:
                self._fail(where, "the memory was written without a successful attempt 2 on a real reflection")
        self.outcomes["gated" if gated else "attempt 2 played"] += 1
        if attempts[2] is not None and attempts[2].get("success"):
            self.outcomes["attempt 2 solved"] += 1
        if record.get("memory_updated"):
            self.outcomes["memory updated"] += 1


# ---------------------------------------------------------------------------------------------- the replies

MARKUP_FRAGMENTS = (
    "```", "```\n", "\n```", "```python\n", "<answer>", "</answer>", "<search>", "</search>", "<tool_call>",
    "</tool_call>", "<prompt>", "</prompt>", "\\boxed{", "\\fbox{", "\\text{", "{", "}", "[", "]", '"', "'",
    '{"name": "search", "arguments": ', '{"query": ', '"top_k": ', "Up", "down", "LEFT", "right", "1", "4", "5",
    "->", ", ", ";", "\n", "\t", " ", "\r\n", "\x00", "\u200b", "\u202e", "\ufeff", "\ud83d", "\U0001f600",
    "e\u0301", "\uff35\uff50", "yes", "no", "the", "NaN", "1e999", "-1", "9" * 40,
)

# Code points of the random Unicode mix: (low, high, weight). Surrogates and noncharacters are deliberate.
_CODE_POINT_RANGES = (
    (0x20, 0x7F, 0.45), (0x00, 0x20, 0.10), (0x80, 0x800, 0.12), (0x800, 0xD800, 0.10), (0xD800, 0xE000, 0.08),
    (0xE000, 0x10000, 0.07), (0x10000, 0x110000, 0.08),
)


def _random_unicode(rng: np.random.Generator, n: int) -> str:
    lows, highs, weights = (np.array(col) for col in zip(*_CODE_POINT_RANGES))
    which = rng.choice(len(lows), size=n, p=weights / weights.sum())
    points = rng.integers(lows[which].astype(np.int64), highs[which].astype(np.int64)).astype(np.uint32)
    # A str built from raw UTF-32 keeps lone surrogates, which a model's detokenizer can produce.
    return points.astype("<u4").tobytes().decode("utf-32-le", errors="surrogatepass")


def _random_bytes_text(rng: np.random.Generator, n: int) -> str:
    raw = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    how = int(rng.integers(4))
    if how == 0:
        return raw.decode("latin-1")
    if how == 1:
        return raw.decode("utf-8", errors="surrogateescape")
    if how == 2:
        return raw.decode("utf-8", errors="replace")
    return raw[: n - n % 2].decode("utf-16-le", errors="surrogatepass")


def _deep_json(depth: int) -> str:
    return '{"name": "search", "arguments": {"query": ' + "[" * depth + "]" * depth + "}}"


def huge_replies(rng: np.random.Generator, size: int = HUGE_CHARS) -> list[str]:
    """About ``size``-character replies that stress parsers: floods of openers, deep nesting, noise before an action."""

    def flood(unit: str) -> str:
        return unit * (size // len(unit))

    noise = _random_unicode(rng, size)
    return [
        flood("A"),
        noise,
        noise[: size - 10] + "```Up```",
        flood("lorem ipsum ") + "\\boxed{Paris}",
        flood("```"),
        flood("```\n"),
        flood("<answer>"),
        flood("\\boxed{"),
        flood("<search>"),
        flood("<tool_call>"),
        flood("<prompt>"),
        flood('{"name": "search", "arguments": {"query": "x"}} '),
        _deep_json(size // 2),
        flood("\n"),
        flood("\U0001f600"),
    ]


class ReplyFuzzer:
    """Draws agent replies and reflections for one env: valid ones and every kind of malformed text.

    ``valid`` are replies the env should act on (moves for the grid games; searches and answers for QA), the rest
    are ordinary malformed model output, and ``huge`` the ~1 MB replies. All randomness comes from ``rng``.
    """

    def __init__(self, rng: np.random.Generator, env: gym.Env, huge: list[str] | None = None):
        self.rng = rng
        self.unwrapped = env.unwrapped
        self.style = protocol.prompt_style_of(env)
        self.huge = huge if huge is not None else []
        self.answers: tuple[str, ...] = ()
        self.counts: Counter = Counter()
        words = "city river founded born company film band director nationality country same first who which"
        if self.style == "qa":
            questions = getattr(self.unwrapped, "questions", [])[:200]
            words += " " + " ".join(q.question for q in questions)
        self.words = words.split()

    def _pick(self, items: Any) -> Any:
        return items[int(self.rng.integers(len(items)))]

    def set_task(self, task_id: Any) -> None:
        """Look up the gold answers of a QA task so that some replies answer right (and some episodes succeed)."""
        by_id = {q.id: q.answers for q in getattr(self.unwrapped, "questions", [])} if self.style == "qa" else {}
        self.answers = by_id.get(task_id, ())

    def phrase(self, most: int = 6) -> str:
        return " ".join(self._pick(self.words) for _ in range(int(self.rng.integers(1, most + 1))))

    def valid(self) -> str:
        rng = self.rng
        if self.style == "grid":
            name = self._pick(("Up", "Down", "Left", "Right"))
            forms = (f"```{name}```", name, name.lower(), f"```\n{name.upper()}\n```", f"<answer>{name}</answer>",
                     str(1 + ("Up", "Down", "Left", "Right").index(name)), f"I will go {name}.\n```{name}```",
                     np.str_(f"```{name}```"))
            return self._pick(forms)
        form = int(rng.integers(6))
        if form == 0:
            return f"<search>{self.phrase()}</search>"
        if form == 1:
            call = {"name": "search", "arguments": {"query": self.phrase(), "top_k": int(rng.integers(-3, 30))}}
            return json.dumps(call) if rng.random() < 0.5 else f"<tool_call>{json.dumps(call)}</tool_call>"
        if form in (2, 3) and self.answers:
            return f"The answer is \\boxed{{{self._pick(self.answers)}}}"
        if form == 4:
            return f"\\boxed{{{self.phrase(3)}}}"
        return self.phrase(12)

    def malformed(self) -> str:
        rng = self.rng
        kind = int(rng.integers(8))
        n = int(rng.integers(0, 200))
        if kind == 0:
            return self._pick(("", " ", "\n", "\t\r\n ", "\x00", "```", "``````", "<answer></answer>",
                               "\\boxed{}", "<search></search>", "<search>   </search>", "<prompt></prompt>"))
        if kind == 1:
            return _random_unicode(rng, n)
        if kind == 2:
            return _random_bytes_text(rng, n)
        if kind in (3, 4):
            return "".join(self._pick(MARKUP_FRAGMENTS) for _ in range(int(rng.integers(1, 40))))
        if kind == 5:
            return self._pick((
                _deep_json(int(rng.integers(1, 5000))),
                '{"name": "search", "arguments": {"query": "x", "top_k": 1e999}}',
                '{"name": "search", "arguments": {"query": "x", "top_k": -1e999}}',
                '{"name": "search", "arguments": {"query": "x", "top_k": NaN}}',
                '{"name": "search", "arguments": {"query": "x", "top_k": ' + "9" * 5000 + "}}",
                '{"name": "search", "arguments": {"query": "x", "top_k": "' + "9" * 5000 + '"}}',
                '{"name": "search", "arguments": {"query": "x", "top_k": [3]}}',
                '{"name": "search", "arguments": {"query": ["x"]}}',
                '{"name": "search", "arguments": "{not json"}',
                '{"name": "search", "arguments": {"query": "' + "x" * 5000 + '"}}',
                '{"name": "calculator", "arguments": {"expression": "1+1"}}',
                '<tool_call>{"name": "search", "arguments": {"query": "x"}',
                '<tool_call>[{"name": "search", "arguments": {"query": "x"}}]</tool_call>',
                "<tool_call>```json\n{}\n```</tool_call>",
                "\\boxed{" * 50 + "x" + "}" * 49,
                "\\boxed{" + "\\text{" * 300 + "x" + "}" * 301,
                "```" + "Up" * 5000 + "```",
                "Up, " * 2000,
            ))
        if kind == 6:
            return self.valid() + _random_unicode(rng, n)
        return _random_unicode(rng, n) + self.valid()

    def reply(self) -> str:
        """One agent reply: a third valid, the rest malformed, about one in 500 a ~1 MB one."""
        u = self.rng.random()
        if u < 0.002 and self.huge:
            self.counts["huge replies"] += 1
            return self._pick(self.huge)
        return self.valid() if u < 0.35 else self.malformed()

    def reflection(self) -> str:
        """A reflection for the wrapper's reflect phase: a <prompt> block with some text, or anything at all."""
        u = self.rng.random()
        if u < 0.01 and self.huge:
            self.counts["huge reflections"] += 1
            return self._pick(self.huge)
        if u < 0.6:
            body = self.phrase(30) if self.rng.random() < 0.7 else self.malformed()
            return f"Looking back at the attempt.\n<prompt>{body}</prompt>"
        return self.malformed()

    def non_text(self) -> Any:
        return self._pick(NON_TEXT_ACTIONS)


# ---------------------------------------------------------------------------------------------- the soak


def checked(env: gym.Env, wrapped: bool, **wrapper_kwargs: Any) -> tuple[gym.Env, EnvChecker, PhaseChecker | None]:
    """``env`` inside an ``EnvChecker``, and that inside a ``ReflectionWrapper`` when ``wrapped``.

    Returns the env to play, its checker, and the wrapper's ``PhaseChecker`` (None when not wrapped), which the
    caller feeds with every reset and step of the wrapper.
    """
    from erl_envs.reflection import ReflectionWrapper

    checker = EnvChecker(env)
    if not wrapped:
        return checker, checker, None
    outer = ReflectionWrapper(checker, **wrapper_kwargs)
    return outer, checker, PhaseChecker(outer)


def make_env(env_id: str, wrapped: bool, **wrapper_kwargs: Any) -> tuple[gym.Env, EnvChecker, PhaseChecker | None]:
    """``checked(gymnasium.make(env_id, **ENVS[env_id]), wrapped)``."""
    return checked(gym.make(env_id, **ENVS.get(env_id, {})), wrapped, **wrapper_kwargs)


@dataclass
class SoakResult:
    env_id: str
    wrapped: bool
    steps: int = 0
    episodes: int = 0
    seconds: float = 0.0
    exceptions: int = 0
    violations: int = 0
    expected_errors: int = 0
    examples: list[str] = field(default_factory=list)
    coverage: Counter = field(default_factory=Counter)

    def note(self, message: str) -> None:
        if len(self.examples) < 10 and message not in self.examples:
            self.examples.append(message)


def _expected_error(err: Exception, action: Any, after_end: bool) -> bool:
    """Whether ``err`` is the error the API promises for this call, with a message that names the problem."""
    message = str(err).lower()
    if not isinstance(action, str) and isinstance(err, TypeError):
        return type(action).__name__.lower() in message
    if after_end and isinstance(err, (gym.error.ResetNeeded, RuntimeError)):
        return "reset" in message
    return False


def soak(env_id: str, wrapped: bool, steps: int, seed: int = 0, huge: list[str] | None = None,
         progress: Callable[[int], None] | None = None) -> SoakResult:
    """Play ``steps`` fuzzed ``step`` calls on one env (wrapped or not) and count what went wrong."""
    from erl_envs.reflection.memory import ReflectionMemory

    rng = np.random.default_rng(seed)
    memory = ReflectionMemory() if wrapped else None
    env, checker, phases = make_env(env_id, wrapped, memory=memory)
    fuzzer = ReplyFuzzer(rng, env, huge)
    result = SoakResult(env_id, wrapped)

    def reset(episode_seed: int | None) -> None:
        obs, info = env.reset(seed=episode_seed)
        if phases is not None:
            phases.on_reset(obs, info)
        fuzzer.set_task(info.get("task_id"))
        result.episodes += 1

    def fail(err: BaseException, what: str) -> None:
        result.exceptions += 1
        result.note(f"{what}: {type(err).__name__}: {str(err)[:300]}")

    reset(seed)
    done = crashed = False
    reported = -1
    start = time.perf_counter()
    while result.steps < steps:
        if progress is not None and result.steps % 10_000 == 0 and result.steps != reported:
            reported = result.steps
            progress(result.steps)
        u = rng.random()
        next_seed = int(rng.integers(2**31)) if rng.random() < 0.8 else None
        phase = getattr(env, "phase", None)
        # The reflect phase is one step long: reset there more often so that every phase sees resets.
        if done or crashed or u < (0.2 if phase == "reflect" else 0.02):
            if done and rng.random() < 0.15:
                # The episode is over: a further step must raise, whatever the action.
                action = fuzzer.non_text() if rng.random() < 0.3 else fuzzer.reply()
                result.steps += 1
                result.coverage["steps after the end"] += 1
                try:
                    returned = env.step(action)
                except Exception as err:  # noqa: BLE001  (sorting errors is the point)
                    if _expected_error(err, action, after_end=True):
                        result.expected_errors += 1
                    else:
                        fail(err, "step after the end")
                else:  # a violation: EnvChecker has flagged it already; the wrapper's checker flags it here
                    if phases is not None:
                        phases.on_step(action, *returned)
            if not (done or crashed):
                result.coverage[f"resets in {phase or 'mid-episode'}"] += 1
            try:
                reset(next_seed)
            except Exception as err:  # noqa: BLE001
                fail(err, "reset")
                continue
            done = crashed = False
            continue
        if u < 0.05:
            action = fuzzer.non_text()
            result.coverage["non-str actions"] += 1
        elif phase == "reflect":
            action = fuzzer.reflection()
        else:
            action = fuzzer.reply()
        result.steps += 1
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as err:  # noqa: BLE001
            if _expected_error(err, action, after_end=False):
                result.expected_errors += 1
            else:
                fail(err, f"step in {phase or 'an episode'} with {str(action)[:60]!r}")
                crashed = True  # the env is in an unknown state: start afresh
            continue
        if phases is not None:
            phases.on_step(action, obs, reward, terminated, truncated, info)
        done = terminated or truncated
    result.seconds = time.perf_counter() - start

    if memory is not None:
        # The memory a run leaves behind must survive a save and load unchanged.
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "memory.json"
            try:
                memory.save(path)
                if ReflectionMemory.load(path).get() != memory.get():
                    checker.violations.append("the memory changed through save() and load()")
            except Exception as err:  # noqa: BLE001
                fail(err, "memory save/load")
    violations = checker.violations + (phases.violations if phases is not None else [])
    result.violations = len(violations)
    for message in violations[:5]:
        result.note(message)
    result.coverage.update(fuzzer.counts)
    if phases is not None:
        result.coverage.update(phases.outcomes)
    env.close()
    return result


# ---------------------------------------------------------------------------------------------- the report


def machine() -> str:
    return (f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, "
            f"numpy {np.__version__}, gymnasium {gym.__version__}")


def report(results: list[SoakResult], command: str, steps: int, machine_text: str = "", load: tuple = ()) -> str:
    lines = [
        "# Soak: fuzzed replies against every env",
        "",
        f"Generated by `{command}` (run under `nice`); this report by `python benchmarks/soak/soak_envs.py --report` "
        "from [soak.json](soak.json), the counts of that run.",
        f"Machine: {machine_text or machine()}"
        + (f"; load average (1 minute) {min(load):.1f}-{max(load):.1f} while it ran, shared with other jobs, so the "
           "steps/s column is a loaded machine's" if load else "") + ".",
        "",
        f"{steps:,} `step` calls per row with fuzzed replies (see the script's docstring for the mix). *exceptions*: "
        "anything raised other than the promised errors; *violations*: broken invariants (`EnvChecker`, "
        "`PhaseChecker`); *promised errors*: TypeErrors for non-str actions and ResetNeeded/RuntimeError for steps "
        "after the end, each checked to name the problem.",
        "",
        "| env | wrapped | steps | episodes | exceptions | invariant violations | promised errors | steps/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rate = r.steps / r.seconds if r.seconds else float("nan")
        lines.append(f"| {r.env_id} | {'yes' if r.wrapped else 'no'} | {r.steps:,} | {r.episodes:,} | {r.exceptions} "
                     f"| {r.violations} | {r.expected_errors:,} | {rate:,.0f} |")
    lines += ["", "## Coverage", "", "| env | wrapped | what was exercised |", "|---|---|---|"]
    for r in results:
        seen = ", ".join(f"{key}: {count:,}" for key, count in sorted(r.coverage.items()))
        lines.append(f"| {r.env_id} | {'yes' if r.wrapped else 'no'} | {seen} |")
    problems = [(r, m) for r in results for m in r.examples]
    if problems:
        lines += ["", "## First problems", ""]
        lines += [f"- {r.env_id} ({'wrapped' if r.wrapped else 'plain'}): {m}" for r, m in problems]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="step calls per env and wrapping (default 100,000)")
    parser.add_argument("--quick", action="store_true", help="2,000 steps each, print only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS), metavar="ENV_ID")
    parser.add_argument("--wrapped", choices=("both", "only", "no"), default="both")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "soak.md")
    parser.add_argument("--report", action="store_true", help="only rewrite the report from the .json beside it")
    args = parser.parse_args(argv)
    data_path = args.output.with_suffix(".json")
    if args.report:
        data = json.loads(data_path.read_text())
        results = [SoakResult(**{**r, "coverage": Counter(r["coverage"])}) for r in data["results"]]
        args.output.write_text(report(results, data["command"], data["steps"], data["machine"], data["load"]))
        return 0
    steps = args.steps or (2_000 if args.quick else 100_000)
    wrappings = {"both": (False, True), "only": (True,), "no": (False,)}[args.wrapped]

    huge = huge_replies(np.random.default_rng(args.seed))
    load = [os.getloadavg()[0]]
    results = []
    for env_id in args.envs:
        for wrapped in wrappings:
            label = f"{env_id}{' wrapped' if wrapped else ''}"
            result = soak(env_id, wrapped, steps, seed=args.seed, huge=huge,
                          progress=lambda n, label=label: print(f"  {label}: {n:,} steps", file=sys.stderr))
            print(f"{label}: {result.steps:,} steps, {result.exceptions} exceptions, {result.violations} "
                  f"violations, {result.steps / result.seconds:,.0f} steps/s", file=sys.stderr)
            results.append(result)

    command = "python benchmarks/soak/soak_envs.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    load.append(os.getloadavg()[0])
    text = report(results, command, steps, machine(), load)
    print(text)
    if not args.quick:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        data = {"command": command, "steps": steps, "machine": machine(), "load": load,
                "results": [{**asdict(r), "coverage": dict(r.coverage)} for r in results]}
        data_path.write_text(json.dumps(data, indent=1) + "\n")
        args.output.write_text(text)
    return 1 if any(r.exceptions or r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
