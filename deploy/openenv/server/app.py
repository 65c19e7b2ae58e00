"""erl-serve's app for OpenEnv tooling (``openenv.yaml``: ``server.app:app``; ``uv run server``; the Dockerfile).

The env and the server's settings are chosen by environment variables, since OpenEnv starts ``app`` without
arguments; each has the meaning of the ``erl-serve`` flag named beside it, and a bad value stops the start with one
line naming the variable:

* ``ERL_ENV``: a registered erl_envs id (default ``ERL-FrozenLake-v0``); ``ERL_REFLECTION``: ``true`` serves it
  inside ``ReflectionWrapper``; ``ERL_ENV_KWARGS``: a JSON object of ``gymnasium.make`` keyword arguments, e.g.
  ``{"size": [2, 4]}``;
* ``ENABLE_WEB_INTERFACE``: ``true`` adds the browser interface at ``/web`` (OpenEnv's switch; off unless set);
* ``ERL_HOST`` (``--host``, default 127.0.0.1; the image sets 0.0.0.0) and ``PORT`` (``--port``, 8000);
* ``ERL_ALLOWED_HOSTS`` (``--allowed-hosts``, comma-separated names) and ``ERL_ALLOW_ORIGINS`` (``--allow-origin``,
  comma-separated origins);
* ``ERL_SESSION_TTL`` (600 s), ``ERL_MAX_SESSIONS`` (256), ``ERL_MAX_BODY_BYTES`` (1 MiB), ``ERL_REQUEST_TIMEOUT``
  (10 s).

``python -m server.app`` starts it through ``erl_envs.integrations.openenv_server.serve``, the function ``erl-serve``
starts through, so the image keeps every limit of ``erl-serve``: headers and bodies within the request timeout,
bodies and WebSocket messages within the body limit, the host and origin checks.
"""

from __future__ import annotations

import json
import os

from erl_envs.integrations.openenv_server import build_app, check_port, serve


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def _names(name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in os.environ.get(name, "").split(",") if part.strip())


def _number(name: str, default: str, kind: type):
    text = os.environ.get(name, default).strip()
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{name} must be {'a whole number' if kind is int else 'a number'}, got {text!r}") from None


def _env_kwargs() -> dict:
    from erl_envs.safe_parse import loads_json

    text = os.environ.get("ERL_ENV_KWARGS", "").strip()
    if not text:
        return {}
    try:
        kwargs = loads_json(text, max_chars=1 << 20)
    except json.JSONDecodeError as error:
        raise ValueError(f"ERL_ENV_KWARGS is not valid JSON ({error})") from None
    if not isinstance(kwargs, dict):
        raise ValueError(f"ERL_ENV_KWARGS must be a JSON object, got {text[:200]!r}")
    return kwargs


def _host() -> str:
    return os.environ.get("ERL_HOST", "127.0.0.1").strip()


def _port() -> int:
    return check_port(_number("PORT", "8000", int))


def _app():
    try:
        return build_app(os.environ.get("ERL_ENV", "ERL-FrozenLake-v0"), reflection=_flag("ERL_REFLECTION"),
                         env_kwargs=_env_kwargs(), session_ttl_s=_number("ERL_SESSION_TTL", "600", float),
                         max_sessions=_number("ERL_MAX_SESSIONS", "256", int),
                         max_body_bytes=_number("ERL_MAX_BODY_BYTES", str(1 << 20), int),
                         request_timeout_s=_number("ERL_REQUEST_TIMEOUT", "10", float),
                         allowed_origins=_names("ERL_ALLOW_ORIGINS"), web=_flag("ENABLE_WEB_INTERFACE"),
                         allowed_hosts=(*_names("ERL_ALLOWED_HOSTS"), _host()))
    except (ValueError, TypeError) as error:
        raise SystemExit(f"erl-serve (OpenEnv app): {error}") from None


app = _app()


def main() -> None:
    """Serve ``app`` (``uv run server``, ``python -m server.app``) on ``ERL_HOST``:``PORT``."""
    import logging

    logging.basicConfig(level="INFO", format="%(message)s")
    try:
        host, port = _host(), _port()
    except ValueError as error:
        raise SystemExit(f"erl-serve (OpenEnv app): {error}") from None
    serve(app, host, port)


if __name__ == "__main__":
    main()
