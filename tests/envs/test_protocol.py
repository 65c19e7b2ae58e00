"""erl_envs.protocol's spaces: async vector envs carry text observations through Gymnasium's shared memory, an
unbounded text space (ReflectionWrapper's) is refused at construction in one line naming the fix that works, and
``action_space.contains`` agrees with ``step``."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest

import erl_envs  # noqa: F401
from erl_envs.protocol import BoundedText, FreeText, SharedTextView
from erl_envs.reflection import ReflectionAsyncVectorEnv, ReflectionSyncVectorEnv, ReflectionWrapper

ENVS = [("ERL-FrozenLake-v0", {"size": (2, 5)}), ("ERL-Sokoban-v0", {}), ("ERL-HotpotQA-v0", {"data": "synthetic"})]
ACTIONS = {"ERL-HotpotQA-v0": [("<search>Raizark</search>", "<search>x</search>"), ("\\boxed{no}", "\\boxed{yes}")]}


def _play(env_id, kwargs, mode, vector_kwargs=None):
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, vector_kwargs=vector_kwargs or {}, **kwargs)
    try:
        obs, _ = envs.reset(seed=[3, 4])
        trace = [(tuple(obs),)]
        for batch in ACTIONS.get(env_id, [("```Up```", "```Right```"), ("```Left```", "```Down```")] * 3):
            obs, rewards, terminated, truncated, _ = envs.step(batch)
            trace.append((tuple(obs), rewards.tolist(), terminated.tolist(), truncated.tolist()))
        return trace
    finally:
        envs.close()


@pytest.mark.parametrize("env_id,kwargs", ENVS)
def test_async_vector_env_with_default_shared_memory_matches_sync(env_id, kwargs):
    sync = _play(env_id, kwargs, "sync")
    assert _play(env_id, kwargs, "async") == sync  # Gymnasium's defaults: shared_memory=True
    assert _play(env_id, kwargs, "async", {"shared_memory": False}) == sync
    assert all(isinstance(o, str) and o.strip() for step in sync for o in step[0])


def test_shared_text_view_is_live_and_copies_to_a_tuple():
    envs = gym.make_vec("ERL-FrozenLake-v0", num_envs=2, vectorization_mode="async", vector_kwargs={"copy": False})
    try:
        first, _ = envs.reset(seed=[0, 1])
        assert isinstance(first, SharedTextView)
        frozen = copy.deepcopy(first)
        assert type(frozen) is tuple and frozen == tuple(first)
        envs.step(("```Up```", "```Up```"))
        assert first != frozen  # the view follows the buffer, as Gymnasium's array views do
    finally:
        envs.close()


def _wrapped_frozen_lake():
    return ReflectionWrapper(gym.make("ERL-FrozenLake-v0", size=(2, 5)))


def _refusal(build):
    with pytest.raises(ValueError) as caught:
        build()
    return caught.value


def test_unbounded_text_is_refused_at_construction_in_one_line_naming_the_fix():
    for build in (lambda: gym.vector.AsyncVectorEnv([_wrapped_frozen_lake] * 2),
                  lambda: gym.make_vec("ERL-FrozenLake-v0", num_envs=2, vectorization_mode="async",
                                       wrappers=[ReflectionWrapper])):
        error = _refusal(build)
        message = str(error)
        # The line a user reads is ours, not Gymnasium's generic one with ours as its cause.
        assert error.__cause__ is None and error.__context__ is None and "\n" not in message
        # It names the fix that works (pipes alone would fail later, at Gymnasium's merge of the wrappers' infos).
        assert "ReflectionAsyncVectorEnv" in message and "shared memory" in message


def test_the_named_fix_plays_wrappers_in_different_phases_as_the_sync_env_does():
    actions = ("```Left```", "```Right```", "```Up```", "```Down```", "<prompt>Go right, then down.</prompt>")
    traces = []
    for cls in (ReflectionSyncVectorEnv, ReflectionAsyncVectorEnv):
        envs = cls([_wrapped_frozen_lake] * 2)
        try:
            obs, info = envs.reset(seed=[0, 1])
            trace, phases = [tuple(obs)], set()
            for t in range(30):
                obs, rewards, terminated, truncated, info = envs.step((actions[t % 5], actions[(3 * t + 1) % 5]))
                phases.add(tuple(info["phase"]))
                trace.append((tuple(obs), rewards.tolist(), terminated.tolist(), truncated.tolist()))
            traces.append(trace)
        finally:
            envs.close()
    assert any(len(set(p)) > 1 for p in phases)  # a step where one wrapper reflects and the other plays
    assert traces[0] == traces[1]


def test_a_too_long_value_is_refused_with_the_fix():
    from gymnasium.vector.utils import create_shared_memory, write_to_shared_memory

    space = BoundedText(max_length=3)
    memory = create_shared_memory(space, n=1)
    write_to_shared_memory(space, 0, "\u00e9t\u00e9", memory)  # 3 characters, 5 UTF-8 bytes: fits
    with pytest.raises(ValueError, match="shared_memory=False"):
        write_to_shared_memory(space, 0, "x" * 13, memory)


@pytest.mark.parametrize("env_id,kwargs", ENVS)
def test_action_space_contains_what_step_accepts(env_id, kwargs):
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    assert isinstance(env.action_space, FreeText) and isinstance(env.observation_space, BoundedText)
    for action in ["", "```Up```", "\u00e9t\u00e9 \u2192 up", "x" * 100_000, "\x00\n\t"]:
        assert env.action_space.contains(action)
        *_, terminated, truncated, _ = env.step(action)  # accepted: an ordinary (maybe invalid) step
        if terminated or truncated:
            env.reset(seed=0)
    assert not env.action_space.contains(b"```Up```") and not env.action_space.contains(3)
    with pytest.raises(TypeError):
        env.step(3)
