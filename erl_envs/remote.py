"""``erl_envs.remote.RemoteEnv``, kept where earlier releases had it; the client lives in
``erl_envs.integrations.remote``."""

from erl_envs.integrations.remote import RemoteEnv, RemoteEnvError

__all__ = ["RemoteEnv", "RemoteEnvError"]
