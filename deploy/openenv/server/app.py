"""erl-serve's app for OpenEnv tooling (``openenv.yaml``: ``server.app:app``; ``uv run server``; the Dockerfile).

The env is chosen by environment variables, since OpenEnv starts ``app`` without arguments:

* ``ERL_ENV``: a registered erl_envs id (default ``ERL-FrozenLake-v0``);
* ``ERL_REFLECTION``: ``true`` serves it inside ``ReflectionWrapper``;
* ``ERL_ENV_KWARGS``: a JSON object of ``gymnasium.make`` keyword arguments, e.g. ``{"size": [2, 4]}``;
* ``ENABLE_WEB_INTERFACE``: ``true`` adds the browser interface at ``/web`` (OpenEnv's switch);
* ``ERL_SESSION_TTL`` / ``ERL_MAX_SESSIONS``: idle seconds before a session closes (600) and the session cap (256).
"""

from __future__ import annotations

import json
import os

from erl_envs.integrations.openenv_server import build_app


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def _env_kwargs() -> dict:
    text = os.environ.get("ERL_ENV_KWARGS", "").strip()
    if not text:
        return {}
    kwargs = json.loads(text)
    if not isinstance(kwargs, dict):
        raise ValueError(f"ERL_ENV_KWARGS must be a JSON object, got {text!r}")
    return kwargs


app = build_app(os.environ.get("ERL_ENV", "ERL-FrozenLake-v0"), reflection=_flag("ERL_REFLECTION"),
                env_kwargs=_env_kwargs(), session_ttl_s=float(os.environ.get("ERL_SESSION_TTL", "600")),
                max_sessions=int(os.environ.get("ERL_MAX_SESSIONS", "256")), web=_flag("ENABLE_WEB_INTERFACE"))


def main(host: str = "0.0.0.0", port: int = 8000) -> None:
    """Serve ``app`` (``uv run server``, ``python -m server.app``); the container binds every interface."""
    import uvicorn

    uvicorn.run(app, host=host, port=int(os.environ.get("PORT", port)))


if __name__ == "__main__":
    main()
