"""The OpenEnv entry point of erl-gym's server (``server.app:app``)."""
