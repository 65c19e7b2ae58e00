"""A Gymnasium env whose episodes run on an ``erl-serve`` server, so envs can live on another machine.

``RemoteEnv("http://host:8000")`` (or ``gymnasium.make("ERL-Remote-v0", url=...)``) opens one session on the
server, and ``reset``/``step`` become HTTP calls that return exactly what the served env returned: the same
observation text, reward, ``terminated``/``truncated`` and ``info`` (as JSON: numpy values become plain numbers,
tuples lists). ``instructions`` and ``prompt_style`` are copied from the served env, so ``ReflectionWrapper``, the
trainer and ``erl_envs.protocol`` treat a remote env like a local one.

Wire format (the server is ``erl_envs.integrations.openenv_server``): JSON over HTTP, one session per env.

* ``GET /info`` -> ``{env_id, instructions, prompt_style, observation_space, action_space, ...}``
* ``POST /sessions`` -> ``{session_id}``; ``DELETE /sessions/{id}`` closes it
* ``POST /sessions/{id}/reset`` ``{seed, options}`` and ``POST /sessions/{id}/step`` ``{action: {text}}`` ->
  OpenEnv's result shape ``{observation: {text, terminated, truncated, info}, reward, done}``
* errors: a 4xx status and ``{"error": "<one line naming the problem>"}``; ``RemoteEnvError`` carries both.

A session the server no longer has (it expired after being idle, or the server restarted) is replaced by a new
one at the next ``reset()``; a server that cannot be reached is a ``RemoteEnvError`` with ``status`` None. Every
call is bounded against the server (one deadline, a size cap, JSON depth, every field's type: see ``RemoteEnv``).
"""

from __future__ import annotations

import http.client
import json
import math
import re
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from erl_envs.integrations.bounded_http import BoundedHTTP, HTTPDeadlineError, HTTPTooLargeError
from erl_envs.protocol import BoundedText, FreeText
from erl_envs.safe_parse import loads_json

__all__ = ["RemoteEnv", "RemoteEnvError", "space_to_json", "space_from_json", "MAX_RESPONSE_BYTES"]

# The largest reply accepted: an observation with HotpotQA's passages is tens of kilobytes.
MAX_RESPONSE_BYTES = 16 << 20


class RemoteEnvError(RuntimeError):
    """The server refused a request (``status`` is the HTTP status and the message the server's error line), could
    not be reached, did not answer within the call's deadline, or answered with something that is not a reply of
    erl-serve (``status`` None; the message says which). The text is one line naming the server."""

    def __init__(self, status: int | None, message: str, url: str | None = None):
        where = f"erl-serve at {url}" if url else "erl-serve"
        super().__init__(f"{where} answered {status}: {message}" if status is not None else message)
        self.status = status
        self.message = message


class _Unreachable(RemoteEnvError):
    """The connection failed (refused, reset, closed): the server may be restarting, so a reset tries again."""


_TEXT_KINDS = {"FreeText": FreeText, "BoundedText": BoundedText, "Text": spaces.Text}


def space_to_json(space: gym.Space) -> dict:
    """A text space as JSON (``FreeText`` accepts any str; ``BoundedText`` and a plain ``Text`` only their charset
    and lengths, and ``BoundedText`` travels through an async vector env's shared memory)."""
    if not isinstance(space, spaces.Text):
        raise TypeError(f"erl-serve serves text envs only; got a {type(space).__name__} space")
    return {
        "kind": next(name for name, cls in _TEXT_KINDS.items() if isinstance(space, cls)),
        "min_length": space.min_length,
        "max_length": space.max_length,
        "charset": "".join(sorted(space.character_set)),
    }


def space_from_json(data: dict) -> spaces.Text:
    cls = _TEXT_KINDS.get(data["kind"], spaces.Text)
    return cls(min_length=data["min_length"], max_length=data["max_length"], charset=data["charset"])


# Session ids name a URL path: only these characters, so a server cannot steer a later request elsewhere.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


class _Malformed(ValueError):
    """A reply that is valid JSON but not the shape erl-serve sends."""


def _field(data: Any, path: str, kinds: type | tuple[type, ...], what: str) -> Any:
    """``data[a][b]...`` for ``path`` "a.b...", checked to be of ``kinds`` (``what`` names them for the message)."""
    value = data
    for i, key in enumerate(path.split(".")):
        if not isinstance(value, dict):
            where = ".".join(path.split(".")[:i]) or "the reply"
            raise _Malformed(f"{where} is {_kind(value)}, not an object")
        if key not in value:
            raise _Malformed(f"{path} is missing")
        value = value[key]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise _Malformed(f"{path} is a boolean, not {what}")
    if not isinstance(value, kinds):
        raise _Malformed(f"{path} is {_kind(value)}, not {what}")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _space(info: dict, name: str) -> spaces.Text:
    space = _field(info, name, dict, "an object")
    kind = _field(space, "kind", str, "a string")
    if kind not in _TEXT_KINDS:
        raise _Malformed(f"{name}.kind is {kind[:40]!r}, not one of {sorted(_TEXT_KINDS)}")
    low, high = _field(space, "min_length", int, "an integer"), _field(space, "max_length", int, "an integer")
    if not 0 <= low <= high:
        raise _Malformed(f"{name} has lengths {low}..{high}")
    _field(space, "charset", str, "a string")
    try:
        return space_from_json(space)
    except (ValueError, TypeError) as error:
        raise _Malformed(f"{name} is not a text space ({error})") from None


def _step_result(result: Any) -> tuple[str, float, bool, bool, dict]:
    """OpenEnv's result shape, every field checked."""
    reward = _field(result, "reward", (int, float, type(None)), "a number")
    if reward is not None and not math.isfinite(reward):
        raise _Malformed(f"reward is {reward}, not a finite number")
    return (_field(result, "observation.text", str, "a string"), float(reward or 0.0),
            _field(result, "observation.terminated", bool, "a boolean"),
            _field(result, "observation.truncated", bool, "a boolean"),
            _field(result, "observation.info", dict, "an object"))


class RemoteEnv(gym.Env[str, str]):
    """One session of a served text env, played through HTTP.

    ## Arguments
    * ``url``: the server's base URL, e.g. ``"http://127.0.0.1:8000"``.
    * ``timeout``: seconds one call may take in all: connecting, sending, and the whole reply (30).
    * ``max_response_bytes``: the largest reply accepted (``MAX_RESPONSE_BYTES``, 16 MiB).

    ## Errors
    A request the server refuses raises ``RemoteEnvError`` (status and the server's one-line reason): stepping an
    ended episode (409), an action that is not a string (422), a session the server expired after being idle or
    lost in a restart (404: ``reset()`` then opens a new session and plays on), a server that cannot be reached
    (``status`` None). Requests that are safe to repeat (``reset``, opening a session) are retried once on a fresh
    connection when the connection fails; a ``step`` never is, since the server may have applied it.
    ``close()`` ends the session on the server; a session that is never closed expires after the server's idle TTL.

    The client does not trust the server (``erl_envs.integrations.bounded_http``): a call that has not ended within
    ``timeout`` (a server that trickles its reply), a reply longer than ``max_response_bytes`` (refused as it
    streams in), a reply that is not JSON or nests deeper than ``erl_envs.safe_parse.MAX_DEPTH``, and one whose
    fields are not of erl-serve's types (an observation that is not text, a reward that is not a number) are each
    one ``RemoteEnvError`` line naming the server, with ``status`` None.
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, timeout: float = 30.0, max_response_bytes: int = MAX_RESPONSE_BYTES):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL such as 'http://127.0.0.1:8000', got {url!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be a positive int, got {max_response_bytes!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = BoundedHTTP(self.url, timeout, max_response_bytes)
        self._closed = False
        self.session_id: str | None = None
        info = self._call("GET", "/info", retry=True)
        try:
            self.env_id: str = _field(info, "env_id", str, "a string")
            self.instructions: str = _field(info, "instructions", str, "a string")
            self.prompt_style: str = _field(info, "prompt_style", str, "a string")
            self.observation_space = _space(info, "observation_space")
            self.action_space = _space(info, "action_space")
        except _Malformed as error:
            raise self._malformed("GET /info", error) from None
        self.server_info = info
        self.session_id = self._open_session()

    def _malformed(self, call: str, error: Exception) -> RemoteEnvError:
        return RemoteEnvError(None, f"erl-serve at {self.url} sent a malformed reply to {call}: {error}")

    def _open_session(self) -> str:
        session = self._call("POST", "/sessions", retry=True)
        try:
            session_id = _field(session, "session_id", str, "a string")
        except _Malformed as error:
            raise self._malformed("POST /sessions", error) from None
        if not _SESSION_ID.fullmatch(session_id):
            raise self._malformed("POST /sessions", f"the session id {session_id[:60]!r} is not an id")
        return session_id

    def _call(self, method: str, path: str, payload: dict | None = None, retry: bool = False) -> Any:
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        call = f"{method} {path}"
        for attempt in range(2 if retry else 1):
            try:
                status, raw = self._http.request(method, path, body)
                break
            except HTTPDeadlineError:
                raise RemoteEnvError(None, f"erl-serve at {self.url} did not answer {call} within the "
                                           f"{self.timeout:g} s timeout") from None
            except HTTPTooLargeError as error:
                raise RemoteEnvError(None, f"erl-serve at {self.url} sent too much for {call}: {error}") from None
            except (OSError, http.client.HTTPException) as error:
                if attempt or not retry:
                    reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
                    raise _Unreachable(None, f"cannot reach erl-serve at {self.url} ({reason})") from None
        try:
            reply = loads_json(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
            if status >= 400:
                text = " ".join(raw[:200].decode("utf-8", "replace").split())
                raise RemoteEnvError(status, f"(not JSON) {text!r}", self.url) from None
            raise RemoteEnvError(None, f"erl-serve at {self.url} sent a reply to {call} that is not valid JSON "
                                       f"({' '.join(reason.split())[:200]})") from None
        if status >= 400:
            message = reply.get("error", reply) if isinstance(reply, dict) else reply
            raise RemoteEnvError(status, " ".join(str(message).split())[:2000], self.url)
        return reply

    def _session_path(self, action: str) -> str:
        if self._closed:
            raise gym.error.ResetNeeded("this RemoteEnv is closed; make a new one")
        return f"/sessions/{self.session_id}/{action}"

    def _result(self, call: str, result: Any) -> tuple[str, float, bool, bool, dict]:
        try:
            return _step_result(result)
        except _Malformed as error:
            raise self._malformed(call, error) from None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        payload = {"seed": seed, "options": options}
        try:
            result = self._call("POST", self._session_path("reset"), payload, retry=True)
        except RemoteEnvError as error:
            if error.status != 404 and not isinstance(error, _Unreachable):
                raise
            # The session is gone (expired while idle, or the server restarted): open a new one and reset there.
            self.session_id = self._open_session()
            result = self._call("POST", self._session_path("reset"), payload, retry=True)
        text, _, _, _, info = self._result("POST /sessions/{id}/reset", result)
        return text, info

    def step(self, action: str):
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        try:
            result = self._call("POST", self._session_path("step"), {"action": {"text": action}})
        except RemoteEnvError as error:
            if error.status != 404:
                raise
            raise RemoteEnvError(404, f"{error.message}; reset() opens a new session", self.url) from None
        return self._result("POST /sessions/{id}/step", result)

    def close(self):
        if not self._closed:
            self._closed = True
            try:
                self._call("DELETE", f"/sessions/{self.session_id}")
            except (RemoteEnvError, OSError):
                pass  # already expired, or the server is gone: nothing left to free
        self._http.close()
