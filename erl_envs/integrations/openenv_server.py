"""``erl-serve``: any registered erl_envs env (optionally inside ``ReflectionWrapper``) as an OpenEnv server.

Two ways in, on one FastAPI app:

* OpenEnv's own interface, built by ``openenv-core``'s ``create_fastapi_app``: ``WS /ws`` (one persistent session
  per connection: ``reset`` / ``step`` / ``state`` messages), ``/health``, ``/schema``, ``/metadata`` and the
  stateless ``POST /reset``. This is what OpenEnv clients (``openenv.core.GenericEnvClient``, TRL's and SkyRL's
  OpenEnv examples) talk to.
* With ``--web`` (or ``ENABLE_WEB_INTERFACE=true``): a page at ``/web`` to play the env in a browser
  (``erl_envs.integrations.openenv_web``). ``/metadata``, the sessions' ``state`` and the ``/mcp`` tools describe and
  act on the env itself (``erl_envs.integrations.openenv_env``).
* HTTP sessions for ``erl_envs.integrations.remote.RemoteEnv`` (plain ``requests``, no WebSocket): ``POST /sessions``,
  ``POST /sessions/{id}/reset``, ``POST /sessions/{id}/step``, ``GET /sessions/{id}/state``,
  ``DELETE /sessions/{id}``, ``GET /sessions`` (counts) and ``GET /info`` (the env's prompt and spaces).

Each session owns its own env, made by ``gymnasium.make``, so sessions never share state; a per-session lock
serialises the calls of one session while different sessions run in parallel. Results use OpenEnv's shape
``{observation: {text, terminated, truncated, info}, reward, done}``; ``info`` is the env's info made JSON-safe.

Errors are 4xx JSON ``{"error": "..."}`` lines that name the problem, never a 500: unknown or expired session
(404), step before reset or after the episode ended (409), malformed body or action (422), bad reset options (400),
too many sessions (503). Sessions idle for longer than ``--session-ttl`` seconds are closed by a sweeper thread
(OpenEnv's reaper does the same for WebSocket sessions). SIGTERM stops the server cleanly: uvicorn finishes the
requests in flight, then every env is closed.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import threading
import time
import uuid
from typing import Any, Callable

import gymnasium as gym

import erl_envs  # noqa: F401  (registers the ERL-* ids)
from erl_envs import protocol
from erl_envs.reflection import ReflectionWrapper, to_jsonable
from erl_envs.integrations.openenv_env import ERLState, describe, mcp_server_for
from erl_envs.integrations.remote import space_to_json

try:
    from fastapi import Body, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation
    from pydantic import BaseModel, ConfigDict, Field
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(f"erl-serve needs openenv-core and uvicorn: pip install 'erl-gym[serve]' ({error})") from None

__all__ = ["ERLAction", "ERLObservation", "ServedEnv", "SessionStore", "EpisodeStateError", "build_app", "main"]

log = logging.getLogger("erl-serve")


class ERLAction(Action):
    """One reply of the agent: the text the env parses (a move block, a search call, an answer, a reflection)."""

    text: str = Field(..., description="the agent's reply; the env parses it exactly as a local env would")


class ERLObservation(Observation):
    """What ``env.step`` returned; ``done`` (OpenEnv's field) is ``terminated or truncated``."""

    text: str = Field(default="", description="the observation text")
    terminated: bool = Field(default=False, description="the episode reached an end state")
    truncated: bool = Field(default=False, description="the episode ran out of budget")
    info: dict[str, Any] = Field(default_factory=dict, description="the env's info dict, JSON-safe")


class EpisodeStateError(RuntimeError):
    """A step that the episode's state does not allow (before the first reset, after the end)."""


def make_env_factory(env_id: str, reflection: bool = False, env_kwargs: dict | None = None) -> Callable[[], gym.Env]:
    """A no-argument function making one env; checks ``env_id`` now so that a typo fails at start-up, not per session."""
    if env_id not in gym.registry:
        erl_ids = sorted(k for k in gym.registry if k.startswith("ERL-"))
        raise ValueError(f"unknown env id {env_id!r}; registered ERL envs: {erl_ids}")
    kwargs = dict(env_kwargs or {})

    def make() -> gym.Env:
        env = gym.make(env_id, **kwargs)
        return ReflectionWrapper(env) if reflection else env

    return make


class ServedEnv(Environment):
    """One session's env behind OpenEnv's ``Environment`` interface; refuses steps its episode state forbids.

    Its metadata, env-specific state and MCP tools come from ``erl_envs.integrations.openenv_env``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, make: Callable[[], gym.Env], env_id: str = "", reflection: bool = False):
        super().__init__()
        self._make = make
        self.env = make()
        self.env_id, self.reflection = env_id, reflection
        self.done: bool | None = None  # None until the first reset
        self._state = ERLState(episode_id=None, step_count=0, env_id=env_id)
        self._mcp_server = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, options: dict | None = None,
              **_: Any) -> ERLObservation:
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except Exception:
            # A reset that raised (bad options) can leave an env half-reset (Gymnasium's checker wrapper then fails
            # on the next step), so the session gets a fresh env and must be reset again.
            self.env.close()
            self.env, self.done = self._make(), None
            raise
        self.done = False
        info = to_jsonable(info)
        self._state = ERLState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, env_id=self.env_id,
                               done=False, observation=obs, info=info)
        return ERLObservation(text=obs, reward=0.0, info=info)

    def step(self, action: ERLAction, timeout_s: float | None = None, **_: Any) -> ERLObservation:
        if self.done is None:
            raise EpisodeStateError("step before reset: reset the session first")
        if self.done:
            raise EpisodeStateError("the episode has ended: reset before stepping again")
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        self.done = bool(terminated or truncated)
        info = to_jsonable(info)
        state = self._state
        state.step_count += 1
        state.done, state.observation, state.info = self.done, obs, info
        state.total_reward += float(reward)
        return ERLObservation(text=obs, reward=float(reward), done=self.done, terminated=bool(terminated),
                              truncated=bool(truncated), info=info)

    @property
    def state(self) -> ERLState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return describe(self.env_id, self.reflection, self.env, ERLAction, ERLObservation)

    @property
    def mcp_server(self):
        """The FastMCP server openenv-core's ``/mcp`` route calls: tools that play this session's env."""
        if self._mcp_server is None:
            self._mcp_server = mcp_server_for(self, ERLAction)
        return self._mcp_server

    def close(self) -> None:
        self.env.close()


class _Session:
    def __init__(self, env: ServedEnv):
        self.env = env
        self.lock = threading.Lock()
        self.last_used = time.monotonic()


class SessionStore:
    """The HTTP sessions: create, look up (refreshing the idle clock), close, and expire the idle ones."""

    def __init__(self, make_served: Callable[[], ServedEnv], ttl_s: float, max_sessions: int):
        self.make_served, self.ttl_s, self.max_sessions = make_served, ttl_s, max_sessions
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self.expired = 0
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> str:
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise _HTTPError(503, f"too many sessions: the server holds at most {self.max_sessions}")
        session_id = uuid.uuid4().hex
        session = _Session(self.make_served())  # outside the lock: making an env may take a while
        with self._lock:
            self._sessions[session_id] = session
        return session_id

    def get(self, session_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise _HTTPError(404, f"unknown session {session_id!r} (never created, closed, or expired after "
                                  f"{self.ttl_s:g} s idle)")
        session.last_used = time.monotonic()
        return session

    def close(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            raise _HTTPError(404, f"unknown session {session_id!r}")
        with session.lock:
            session.env.close()

    def sweep(self) -> int:
        """Close sessions idle for longer than the TTL; a session busy with a call is never idle."""
        now = time.monotonic()
        with self._lock:
            stale = [k for k, s in self._sessions.items() if now - s.last_used > self.ttl_s and not s.lock.locked()]
            doomed = [self._sessions.pop(k) for k in stale]
        for session in doomed:
            session.env.close()
        self.expired += len(doomed)
        return len(doomed)

    def start_sweeper(self) -> None:
        def run():
            while not self._stop.wait(min(max(self.ttl_s / 4, 0.05), 5.0)):
                self.sweep()

        self._sweeper = threading.Thread(target=run, name="erl-serve-sweeper", daemon=True)
        self._sweeper.start()

    def close_all(self) -> int:
        self._stop.set()
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.env.close()
        return len(sessions)


class _HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class _ResetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int | None = Field(default=None, ge=0)
    options: dict[str, Any] | None = None


class _StepBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: ERLAction


def _result(observation: ERLObservation) -> JSONResponse:
    # A JSONResponse skips FastAPI's re-encoding of the (already JSON-safe) dict: a remote step is mostly overhead.
    return JSONResponse({"observation": observation.model_dump(exclude={"reward", "done", "metadata"}),
                         "reward": observation.reward, "done": observation.done})


def _validation_message(errors: list) -> str:
    parts = []
    for error in errors[:3]:
        if error.get("type") == "json_invalid":
            parts.append("the body is not valid JSON")
            continue
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "malformed request: " + "; ".join(parts)


def build_app(env_id: str, reflection: bool = False, env_kwargs: dict | None = None, session_ttl_s: float = 600.0,
              max_sessions: int = 256, web: bool = False) -> FastAPI:
    """The FastAPI app serving ``env_id``: OpenEnv's routes plus the HTTP session routes (module docstring), and
    with ``web`` the browser interface at ``/web`` (``erl_envs.integrations.openenv_web``)."""
    if session_ttl_s <= 0:
        raise ValueError(f"session_ttl_s must be > 0, got {session_ttl_s}")
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    make = make_env_factory(env_id, reflection, env_kwargs)
    make_served = functools.partial(ServedEnv, make, env_id, reflection)
    probe = make()  # for /info, and so a bad env kwarg fails now rather than on the first session
    info = {
        "env_id": env_id, "reflection": reflection, "env_kwargs": to_jsonable(env_kwargs or {}),
        "instructions": protocol.instructions_of(probe), "prompt_style": protocol.prompt_style_of(probe),
        "observation_space": space_to_json(probe.observation_space),
        "action_space": space_to_json(probe.action_space),
        "session_ttl_s": session_ttl_s, "max_sessions": max_sessions,
    }
    probe.close()

    app = create_fastapi_app(make_served, ERLAction, ERLObservation,
                             concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                  session_timeout=session_ttl_s))
    store = SessionStore(make_served, session_ttl_s, max_sessions)
    app.state.sessions = store

    @app.exception_handler(_HTTPError)
    async def _http_error(_: Request, error: _HTTPError):
        return JSONResponse({"error": error.message}, status_code=error.status)

    @app.exception_handler(EpisodeStateError)
    async def _episode_state_error(_: Request, error: EpisodeStateError):
        return JSONResponse({"error": str(error)}, status_code=409)

    @app.exception_handler(RequestValidationError)
    async def _malformed(_: Request, error: RequestValidationError):
        errors = to_jsonable(list(error.errors()))
        return JSONResponse({"error": _validation_message(errors), "detail": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def _bug(_: Request, error: Exception):
        # Only a bug gets here (every refusal above is a 4xx); still answer in JSON, naming the error.
        log.exception("erl-serve: internal error")
        return JSONResponse({"error": f"internal error: {type(error).__name__}: {error}"}, status_code=500)

    @app.get("/info")
    def get_info() -> dict:
        return info

    @app.get("/sessions")
    def count_sessions() -> dict:
        return {"active": len(store), "expired": store.expired, "max_sessions": max_sessions,
                "session_ttl_s": session_ttl_s}

    @app.post("/sessions")
    def create_session() -> dict:
        return {"session_id": store.create()}

    @app.post("/sessions/{session_id}/reset")
    def reset_session(session_id: str, body: _ResetBody = Body(default_factory=_ResetBody)) -> JSONResponse:
        session = store.get(session_id)
        with session.lock:
            try:
                observation = session.env.reset(seed=body.seed, options=body.options)
            except (ValueError, TypeError, KeyError) as error:
                raise _HTTPError(400, f"reset refused by {env_id}: {error}") from None
        return _result(observation)

    @app.post("/sessions/{session_id}/step")
    def step_session(session_id: str, body: _StepBody) -> JSONResponse:
        session = store.get(session_id)
        with session.lock:
            return _result(session.env.step(body.action))

    @app.get("/sessions/{session_id}/state")
    def session_state(session_id: str) -> dict:
        session = store.get(session_id)
        return {**session.env.state.model_dump(), "done": session.env.done}

    @app.delete("/sessions/{session_id}")
    def delete_session(session_id: str) -> dict:
        store.close(session_id)
        return {"closed": session_id}

    def _close_sessions() -> None:
        log.info("erl-serve: shutting down, closed %d sessions", store.close_all())

    # Router hooks, the way openenv-core registers its own reaper (FastAPI's on_event decorator is deprecated).
    app.router.on_startup.append(store.start_sweeper)
    app.router.on_shutdown.append(_close_sessions)

    if web:
        from erl_envs.integrations.openenv_web import mount_web_interface

        mount_web_interface(app, env_id, reflection, env_kwargs, make_env_factory,
                            lambda make_play: SessionStore(make_play, session_ttl_s, max_sessions))
    return app


def _parse_kwargs(pairs: list[str]) -> dict:
    """``--env-kwarg key=value`` pairs; values are read as JSON when they parse (numbers, booleans), else text."""
    import json

    kwargs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env-kwarg expects key=value, got {pair!r}")
        try:
            kwargs[key] = json.loads(value)
        except ValueError:
            kwargs[key] = value
    return kwargs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="erl-serve", description="Serve an erl_envs env over OpenEnv's interface.")
    parser.add_argument("--env", required=True, help="registered env id, e.g. ERL-Sokoban-v0")
    parser.add_argument("--reflection", action="store_true", help="serve the env inside ReflectionWrapper")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument for gymnasium.make (repeatable), e.g. max_steps=8")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--session-ttl", type=float, default=600.0, help="close sessions idle this many seconds")
    parser.add_argument("--max-sessions", type=int, default=256)
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--web", action="store_true",
                        help="serve a browser interface at /web (also ENABLE_WEB_INTERFACE=true, OpenEnv's switch)")
    args = parser.parse_args(argv)
    web = args.web or os.environ.get("ENABLE_WEB_INTERFACE", "").lower() in ("1", "true", "yes")

    import uvicorn

    logging.basicConfig(level=args.log_level.upper(), format="%(message)s")
    try:
        app = build_app(args.env, args.reflection, _parse_kwargs(args.env_kwarg), args.session_ttl, args.max_sessions,
                        web=web)
    except (ValueError, TypeError) as error:
        raise SystemExit(f"erl-serve: {error}") from None
    log.info("erl-serve: %s%s on http://%s:%d%s", args.env, " (reflection)" if args.reflection else "", args.host,
             args.port, " (web interface at /web)" if web else "")
    # uvicorn turns SIGTERM/SIGINT into a graceful shutdown: in-flight requests finish, then the shutdown hook
    # above closes every session's env; then it re-raises the signal, so the exit status reads "terminated".
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)


if __name__ == "__main__":
    main()
