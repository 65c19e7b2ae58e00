"""erl-gym environments: text FrozenLake, Sokoban and HotpotQA for Experiential RL, and the reflection wrapper.

Importing this package registers ``ERL-FrozenLake-v0``, ``ERL-Sokoban-v0`` and ``ERL-HotpotQA-v0`` with Gymnasium,
and ``ERL-Remote-v0`` (``erl_envs.integrations.remote.RemoteEnv``: a session of an env served by ``erl-serve``).
"""

from gymnasium.envs.registration import register, registry

__version__ = "0.1.0"

_ENVS = {
    "ERL-FrozenLake-v0": "erl_envs.grid.frozen_lake:FrozenLakeTextEnv",
    "ERL-Sokoban-v0": "erl_envs.grid.sokoban:SokobanTextEnv",
    "ERL-HotpotQA-v0": "erl_envs.qa.hotpotqa:HotpotQAEnv",
    # A session of an env served by `erl-serve` on another machine: gym.make("ERL-Remote-v0", url="http://...").
    "ERL-Remote-v0": "erl_envs.integrations.remote:RemoteEnv",
}

for _env_id, _entry_point in _ENVS.items():
    if _env_id not in registry:
        # No max_episode_steps here: each env counts its own step budget and reports it as truncation, so that
        # the budget is an env option (the paper's 8 steps) rather than a registration constant.
        # No passive env checker: after a first reset that raised (a bad reset option) it keeps a half-set state
        # and fails every later step with a TypeError; the envs are checked with gymnasium's check_env in the tests
        # instead (`gym.make(..., disable_env_checker=False)` still adds it).
        register(id=_env_id, entry_point=_entry_point, disable_env_checker=True)


def __getattr__(name):
    # Lazy exports keep `import erl_envs` cheap (no pygame, no index building) while allowing
    # `from erl_envs import ReflectionWrapper`.
    lazy = {
        "ReflectionWrapper": "erl_envs.reflection",
        "ReflectionSyncVectorEnv": "erl_envs.reflection",
        "ReflectionAsyncVectorEnv": "erl_envs.reflection",
        "ReflectionMemory": "erl_envs.reflection.memory",
        "RetrievalMemory": "erl_envs.reflection.memory",
        "PoolMemory": "erl_envs.reflection.memory",
        "RuleReflector": "erl_envs.reflection.reflectors",
        "HFReflector": "erl_envs.reflection.reflectors",
        "FrozenLakeTextEnv": "erl_envs.grid.frozen_lake",
        "SokobanTextEnv": "erl_envs.grid.sokoban",
        "HotpotQAEnv": "erl_envs.qa.hotpotqa",
        "BM25Index": "erl_envs.qa.search",
        "RemoteEnv": "erl_envs.integrations.remote",
    }
    if name in lazy:
        import importlib

        return getattr(importlib.import_module(lazy[name]), name)
    raise AttributeError(f"module 'erl_envs' has no attribute {name!r}")
