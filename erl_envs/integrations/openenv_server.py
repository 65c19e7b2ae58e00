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

Each session owns its own env, made by ``gymnasium.make`` at its first reset, so sessions never share state. A
session runs one call at a time: a call that arrives while the session is busy is refused at once (409), never
queued, so one slow session holds at most one worker thread and never delays the others; ``/health``, ``/info`` and
``/sessions`` run on the event loop and need no worker at all. Results use OpenEnv's shape
``{observation: {text, terminated, truncated, info}, reward, done}``; ``info`` is the env's info made JSON-safe and
every text is valid UTF-8 (lone surrogates from a model's reply are replaced).

Bounds (docs/guarantees.md lists them with their defaults): bodies over ``--max-body-bytes`` (413) or slower than
``--request-timeout`` (408), connections that send no complete request within ``--request-timeout``, reset options
nested deeper than ``MAX_OPTION_DEPTH``, sessions beyond ``--max-sessions`` (503, exact under concurrent creation),
and requests for a host name the server was not given or from a page of another site (403, ``http_limits``); what
one reset may cost is bounded by the envs themselves (map and level sizes checked before any work, a solver budget
for what reset options ask). Errors are JSON
``{"error": "..."}`` lines that name the problem: unknown route or expired session (404), method not allowed (405),
step before reset or after the episode ended, or a busy session (409), malformed body or action (422), bad reset
options (400), too many sessions (503); a 500 is a bug and keeps the connection open. Sessions idle for longer than
``--session-ttl`` seconds are closed by a sweeper thread (OpenEnv's reaper does the same for WebSocket sessions).
SIGTERM stops the server cleanly: uvicorn finishes the requests in flight (at most ``SHUTDOWN_TIMEOUT_S``), then
every env is closed. ``/info`` tells a client what it needs to play (the env id, its instructions and spaces, the
body limit and the idle TTL), not how the env was built (its kwargs may name files). There is no ``/docs`` page
(FastAPI's loads its script from a CDN): ``/openapi.json`` and ``/schema`` describe the routes.

``serve(app, host, port)`` runs an app with the limits it was built with (``server_config``); ``erl-serve`` and the
OpenEnv image (``deploy/openenv/server/app.py``) both start through it. Limits and the port are checked at start-up,
each refusal one line.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
import os
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import gymnasium as gym

import erl_envs  # noqa: F401  (registers the ERL-* ids)
from erl_envs import protocol
from erl_envs.integrations.http_limits import RequestLimits, timed_protocol
from erl_envs.integrations.openenv_env import ERLState, describe, mcp_server_for
from erl_envs.integrations.remote import space_to_json
from erl_envs.protocol import utf8_safe
from erl_envs.reflection import ReflectionWrapper, to_jsonable
from erl_envs.safe_parse import nesting_depth

try:
    from fastapi import Body, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation
    from pydantic import BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(f'erl-serve needs openenv-core and uvicorn: pip install "openenv-core>=0.3,<0.4" uvicorn '
                      f'({error})') from None

__all__ = ["ERLAction", "ERLObservation", "ServedEnv", "SessionStore", "EpisodeStateError", "ResetRefusedError",
           "build_app", "server_config", "serve", "check_limits", "check_port", "main", "MAX_OPTION_DEPTH",
           "SHUTDOWN_TIMEOUT_S"]

log = logging.getLogger("erl-serve")

# Reset options are small flat dicts (a map is a list of rows): deeper nesting is refused before the env sees it.
MAX_OPTION_DEPTH = 8
# SIGTERM waits this long at most for the requests in flight.
SHUTDOWN_TIMEOUT_S = 30


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


class ResetRefusedError(ValueError):
    """Reset options the env refused (unknown, malformed, too big): the client's to fix, answered with 400."""


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
        self._env: gym.Env | None = None  # made at the first reset, in a worker thread, not on the event loop
        self.env_id, self.reflection = env_id, reflection
        self.done: bool | None = None  # None until the first reset
        self._state = ERLState(episode_id=None, step_count=0, env_id=env_id)
        self._mcp_server = None

    @property
    def env(self) -> gym.Env:
        if self._env is None:
            self._env = self._make()
        return self._env

    def reset(self, seed: int | None = None, episode_id: str | None = None, options: dict | None = None,
              **_: Any) -> ERLObservation:
        self.done = None  # a refused reset ends the previous episode: the session must be reset again
        if options is not None and not isinstance(options, dict):
            raise ResetRefusedError(f"reset options must be an object, got {type(options).__name__}")
        if options is not None and nesting_depth(options) > MAX_OPTION_DEPTH:
            raise ResetRefusedError(f"reset options nested deeper than {MAX_OPTION_DEPTH} levels are refused")
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except (ValueError, TypeError, KeyError) as error:
            raise ResetRefusedError(f"reset refused by the env: {' '.join(str(error).split())[:2000]}") from None
        self.done = False
        info = to_jsonable(info)
        obs = utf8_safe(obs)
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
        obs = utf8_safe(obs)
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
        if self._env is not None:
            self._env.close()


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
        self._reserved = 0  # sessions being created: they count against max_sessions already
        self._lock = threading.Lock()
        self.expired = 0
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> str:
        with self._lock:  # the slot is taken here, so concurrent creations never pass the limit together
            if len(self._sessions) + self._reserved >= self.max_sessions:
                raise _HTTPError(503, f"too many sessions: the server holds at most {self.max_sessions}")
            self._reserved += 1
        try:
            session_id = uuid.uuid4().hex
            session = _Session(self.make_served())  # outside the lock: it may take a while
            with self._lock:
                self._sessions[session_id] = session
        finally:
            with self._lock:
                self._reserved -= 1
        return session_id

    def get(self, session_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise _HTTPError(404, f"unknown session {session_id!r} (never created, closed, or expired after "
                                  f"{self.ttl_s:g} s idle; the server may also have restarted): create a new one")
        session.last_used = time.monotonic()
        return session

    @contextlib.contextmanager
    def running(self, session_id: str) -> Iterator[_Session]:
        """The session, held for one call; a call on a session that is busy with another is refused (409)."""
        session = self.get(session_id)
        if not session.lock.acquire(blocking=False):
            raise _HTTPError(409, f"session {session_id!r} is busy with another call: a session runs one call at a "
                                  "time, so wait for the answer before sending the next")
        try:
            yield session
        finally:
            session.last_used = time.monotonic()
            session.lock.release()

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


# The command-line flag of each limit, for the start-up message.
_LIMIT_FLAGS = {"session_ttl_s": "--session-ttl", "request_timeout_s": "--request-timeout",
                "max_sessions": "--max-sessions", "max_body_bytes": "--max-body-bytes"}


def check_limits(session_ttl_s: float, max_sessions: int, max_body_bytes: int, request_timeout_s: float) -> None:
    """Refuse, in one ``ValueError`` line naming the setting, a limit under which every request would fail."""
    for name, value in (("session_ttl_s", session_ttl_s), ("request_timeout_s", request_timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} ({_LIMIT_FLAGS[name]}) must be a positive number of seconds, got {value!r}")
    for name, value in (("max_sessions", max_sessions), ("max_body_bytes", max_body_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} ({_LIMIT_FLAGS[name]}) must be a whole number >= 1, got {value!r}")


def check_port(port: int) -> int:
    """``port`` if it is a TCP port (1 to 65535), else one ``ValueError`` line."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"the port (--port) must be a whole number from 1 to 65535, got {port!r}")
    return port


# FastAPI's documentation pages load their scripts from a CDN: they are not served.
_DOC_PAGES = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc"})


def build_app(env_id: str, reflection: bool = False, env_kwargs: dict | None = None, session_ttl_s: float = 600.0,
              max_sessions: int = 256, max_body_bytes: int = 1 << 20, request_timeout_s: float = 10.0,
              allowed_origins: tuple[str, ...] = (), web: bool = False, allowed_hosts: tuple[str, ...] = ()
              ) -> FastAPI:
    """The FastAPI app serving ``env_id``: OpenEnv's routes plus the HTTP session routes (module docstring), inside
    ``http_limits.RequestLimits`` (host, origin, body size and time, errors as JSON), and with ``web`` the browser
    interface at ``/web`` (``erl_envs.integrations.openenv_web``). ``allowed_hosts`` are the names, besides
    ``localhost`` and IP addresses, that requests may address it by (give the name it is bound to)."""
    check_limits(session_ttl_s, max_sessions, max_body_bytes, request_timeout_s)
    make = make_env_factory(env_id, reflection, env_kwargs)
    make_served = functools.partial(ServedEnv, make, env_id, reflection)
    probe = make()  # for /info, and so a bad env kwarg fails now rather than on the first session
    info = {  # what a client needs to play; not the env's kwargs, which may name files of this machine
        "env_id": env_id, "reflection": reflection,
        "instructions": protocol.instructions_of(probe), "prompt_style": protocol.prompt_style_of(probe),
        "observation_space": space_to_json(probe.observation_space),
        "action_space": space_to_json(probe.action_space),
        "session_ttl_s": session_ttl_s, "max_body_bytes": max_body_bytes,
    }
    probe.close()

    app = create_fastapi_app(make_served, ERLAction, ERLObservation,
                             concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                  session_timeout=session_ttl_s))
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) not in _DOC_PAGES]
    app.docs_url = app.redoc_url = None
    app.add_middleware(RequestLimits, max_body_bytes=max_body_bytes, body_timeout_s=request_timeout_s,
                       allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)
    app.state.limits = {"request_timeout_s": request_timeout_s, "max_body_bytes": max_body_bytes}
    store = SessionStore(make_served, session_ttl_s, max_sessions)
    app.state.sessions = store

    @app.exception_handler(_HTTPError)
    async def _http_error(_: Request, error: _HTTPError):
        return JSONResponse({"error": error.message}, status_code=error.status)

    @app.exception_handler(EpisodeStateError)
    async def _episode_state_error(_: Request, error: EpisodeStateError):
        return JSONResponse({"error": str(error)}, status_code=409)

    @app.exception_handler(ResetRefusedError)
    async def _reset_refused(_: Request, error: ResetRefusedError):
        return JSONResponse({"error": f"{env_id}: {error}"}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def _malformed(_: Request, error: RequestValidationError):
        errors = to_jsonable(list(error.errors()))
        return JSONResponse({"error": _validation_message(errors), "detail": errors}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_exception(request: Request, error: StarletteHTTPException):
        # Routing's own answers (404, 405, a body that is not JSON at all) in the same shape as ours.
        words = {404: f"no route {request.method} {request.url.path} (see /openapi.json for the routes)",
                 405: f"{request.method} is not allowed on {request.url.path}"}
        detail = error.detail if isinstance(error.detail, str) else to_jsonable(error.detail)
        message = words.get(error.status_code, detail if isinstance(detail, str) else f"HTTP {error.status_code}")
        return JSONResponse({"error": message, "detail": detail}, status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    # Answered on the event loop: they need no worker thread, so a server busy with slow envs still answers them.
    @app.get("/info")
    async def get_info() -> dict:
        return info

    @app.get("/sessions")
    async def count_sessions() -> dict:
        return {"active": len(store), "expired": store.expired, "max_sessions": max_sessions,
                "session_ttl_s": session_ttl_s}

    @app.post("/sessions")
    def create_session() -> dict:
        return {"session_id": store.create()}

    @app.post("/sessions/{session_id}/reset")
    def reset_session(session_id: str, body: _ResetBody = Body(default_factory=_ResetBody)) -> JSONResponse:
        with store.running(session_id) as session:
            return _result(session.env.reset(seed=body.seed, options=body.options))

    @app.post("/sessions/{session_id}/step")
    def step_session(session_id: str, body: _StepBody) -> JSONResponse:
        with store.running(session_id) as session:
            return _result(session.env.step(body.action))

    @app.get("/sessions/{session_id}/state")
    async def session_state(session_id: str) -> dict:
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


def server_config(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, request_timeout_s: float | None = None,
                  max_body_bytes: int | None = None, log_level: str = "info"):
    """The uvicorn configuration erl-serve runs ``app`` with: headers and bodies within ``request_timeout_s``,
    WebSocket messages within ``max_body_bytes`` (both, when not given, the limits ``build_app`` gave ``app``),
    SIGTERM waiting at most ``SHUTDOWN_TIMEOUT_S`` for requests."""
    import uvicorn

    limits = getattr(app.state, "limits", {})
    request_timeout_s = limits.get("request_timeout_s", 10.0) if request_timeout_s is None else request_timeout_s
    max_body_bytes = limits.get("max_body_bytes", 1 << 20) if max_body_bytes is None else max_body_bytes
    return uvicorn.Config(app, host=host, port=check_port(port), log_level=log_level, access_log=False,
                          http=timed_protocol(request_timeout_s), ws_max_size=max_body_bytes,
                          timeout_graceful_shutdown=SHUTDOWN_TIMEOUT_S)


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Run ``app`` (from ``build_app``) until SIGTERM or SIGINT, with the limits it was built with: the one way
    ``erl-serve`` and the OpenEnv image start a server."""
    import uvicorn

    # uvicorn turns SIGTERM/SIGINT into a graceful shutdown: in-flight requests finish, then the app's shutdown hook
    # closes every session's env; then it re-raises the signal, so the exit status reads "terminated".
    uvicorn.Server(server_config(app, host, port, log_level=log_level)).run()


def _parse_kwargs(pairs: list[str], json_text: str | None = None) -> dict:
    """``--env-kwargs JSON`` (an object), then each ``--env-kwarg key=value`` over it, as ``erl-train`` reads them."""
    from erl_envs.safe_parse import key_values, loads_json

    kwargs = {}
    if json_text is not None:
        try:
            kwargs = loads_json(json_text, max_chars=1 << 20)
        except ValueError as exc:
            raise ValueError(f"--env-kwargs is not valid JSON: {exc}") from None
        if not isinstance(kwargs, dict):
            raise ValueError(f"--env-kwargs must be a JSON object, got {type(kwargs).__name__}")
    return {**kwargs, **key_values(pairs)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="erl-serve", description="Serve an erl_envs env over OpenEnv's interface.")
    parser.add_argument("--env", required=True, help="registered env id, e.g. ERL-Sokoban-v0")
    parser.add_argument("--reflection", action="store_true", help="serve the env inside ReflectionWrapper")
    parser.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument for gymnasium.make (repeatable), e.g. max_steps=8")
    parser.add_argument("--env-kwargs", metavar="JSON", help='keyword arguments for gymnasium.make as one JSON object, '
                        'e.g. \'{"size": [2, 4]}\' (--env-kwarg pairs apply over it)')
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--session-ttl", type=float, default=600.0, help="close sessions idle this many seconds")
    parser.add_argument("--max-sessions", type=int, default=256)
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20,
                        help="largest request body (and WebSocket message) accepted, in bytes")
    parser.add_argument("--request-timeout", type=float, default=10.0,
                        help="seconds a connection has to send a request's headers, and then its body")
    parser.add_argument("--allowed-hosts", action="append", default=[], metavar="NAME[,NAME...]",
                        help="host names (besides localhost and IP addresses) that requests may address this server "
                             "by, e.g. the machine's DNS name (repeatable; '*' allows any, e.g. behind a proxy that "
                             "checks names); the --host name is allowed")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a web page origin (e.g. https://my-ui.example) allowed to call this server from a "
                             "browser (repeatable; '*' allows every site); pages this server serves are allowed")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--web", action="store_true",
                        help="serve a browser interface at /web (also ENABLE_WEB_INTERFACE=true, OpenEnv's switch)")
    args = parser.parse_args(argv)
    web = args.web or os.environ.get("ENABLE_WEB_INTERFACE", "").lower() in ("1", "true", "yes")

    hosts = tuple(name.strip() for names in args.allowed_hosts for name in names.split(",") if name.strip())
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s")
    try:
        check_port(args.port)
        check_limits(args.session_ttl, args.max_sessions, args.max_body_bytes, args.request_timeout)
        app = build_app(args.env, args.reflection, _parse_kwargs(args.env_kwarg, args.env_kwargs), args.session_ttl,
                        args.max_sessions,
                        args.max_body_bytes, args.request_timeout, tuple(args.allow_origin), web=web,
                        allowed_hosts=(*hosts, args.host))
    except (ValueError, TypeError) as error:
        raise SystemExit(f"erl-serve: {error}") from None
    log.info("erl-serve: %s%s on http://%s:%d%s", args.env, " (reflection)" if args.reflection else "", args.host,
             args.port, " (web interface at /web)" if web else "")
    serve(app, args.host, args.port, args.log_level)


if __name__ == "__main__":
    main()
