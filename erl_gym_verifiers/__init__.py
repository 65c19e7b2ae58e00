"""The Verifiers plugin id ``erl-gym-verifiers``: Verifiers imports a taskset, its env and its harness from a
top-level module named by the id (``--env.taskset.id erl-gym-verifiers``), so this module re-exports
``erl_envs.integrations.verifiers``, where everything is defined and documented."""

from erl_envs.integrations.verifiers import *  # noqa: F401,F403
from erl_envs.integrations.verifiers import __all__  # noqa: F401
