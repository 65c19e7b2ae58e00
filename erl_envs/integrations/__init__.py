"""Adapters that let the trainers people already use load erl_envs; each needs its own optional extra.

* ``erl_envs.integrations.trl``: TRL's ``GRPOTrainer(environment_factory=...)`` (``pip install -e ".[trl]"``).
* ``erl_envs.integrations.openenv_server``: the ``erl-serve`` OpenEnv server (``pip install -e ".[serve]"``),
  with its metadata, state and MCP tools (``openenv_env``) and its web page (``openenv_web``, ``--web``); its
  client is ``erl_envs.integrations.remote.RemoteEnv``, which needs no extra (its bounded HTTP calls:
  ``bounded_http``); what the server accepts before any env sees a request is ``http_limits``.
* ``erl_envs.integrations.verifiers``: a Verifiers environment (``pip install -e ".[verifiers]"``).

Nothing is imported here, so importing one adapter never requires another ecosystem's packages.
"""
