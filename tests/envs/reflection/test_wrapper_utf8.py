"""Episode records stay writable as UTF-8 whatever the model typed (to_jsonable in erl_envs.reflection scrubs)."""

import json

import gymnasium as gym
import pytest

import erl_envs  # noqa: F401  (registers the envs)
from erl_envs.reflection import ReflectionWrapper, to_jsonable

LONE = "\udc80"  # a lone surrogate: a str may hold it (lenient decoding of model output), UTF-8 cannot


def _record(env_id, action, **kwargs):
    env = ReflectionWrapper(gym.make(env_id, **kwargs), gate_threshold=0.0)
    env.reset(seed=3)
    for _ in range(500):
        _, _, terminated, truncated, info = env.step(action)
        if "record" in info:
            return info["record"]
    pytest.fail("the episode never ended")


@pytest.mark.parametrize("env_id,action,kwargs", [
    ("ERL-FrozenLake-v0", f"left{LONE}", {"size": 3}),
    ("ERL-Sokoban-v0", f"{LONE}up", {"size": 6}),
    ("ERL-HotpotQA-v0", f"\\boxed{{Paris{LONE}}}", {"data": "synthetic"}),
])
def test_a_lone_surrogate_in_an_action_or_answer_never_reaches_the_record(env_id, action, kwargs):
    record = _record(env_id, action, **kwargs)
    text = json.dumps(record, ensure_ascii=False)
    text.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    assert LONE not in text
    assert action.replace(LONE, "?") in record["attempt1"]["actions"]  # replaced, not dropped silently


def test_to_jsonable_scrubs_strings_and_keys_at_any_depth():
    value = {f"k{LONE}": [f"a{LONE}", (LONE,), {"x": {LONE}}]}
    clean = to_jsonable(value)
    json.dumps(clean, ensure_ascii=False).encode("utf-8")
    assert clean == {"k?": ["a?", ["?"], {"x": ["?"]}]}
    assert to_jsonable("plain") == "plain"


@pytest.mark.parametrize("env_id,action,kwargs", [
    ("ERL-FrozenLake-v0", f"```Up``` {LONE}", {"size": 3}),
    ("ERL-Sokoban-v0", f"{LONE}```Left```", {"size": 6}),
    ("ERL-HotpotQA-v0", f"<search>x{LONE}</search>", {"data": "synthetic", "max_turns": 2}),
])
def test_a_lone_surrogate_never_reaches_the_reflection_request(env_id, action, kwargs):
    """The request quotes the failed attempt's replies; it goes to the model and over the wire, so it is UTF-8."""
    env = ReflectionWrapper(gym.make(env_id, **kwargs))
    env.reset(seed=3)
    for _ in range(50):
        obs, _, terminated, truncated, info = env.step(action)
        if info.get("phase") == "reflect":
            obs.encode("utf-8")
            info["system_prompt"].encode("utf-8")
            json.dumps(to_jsonable(info), ensure_ascii=False).encode("utf-8")
            return
        assert not (terminated or truncated), "the first attempt ended without a reflection request"
    pytest.fail("no reflection request")
