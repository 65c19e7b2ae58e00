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
one at the next ``reset()``; a server that cannot be reached is a ``RemoteEnvError`` with ``status`` None.
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces

from erl_envs.protocol import BoundedText, FreeText

__all__ = ["RemoteEnv", "RemoteEnvError", "space_to_json", "space_from_json"]


class RemoteEnvError(RuntimeError):
    """The server refused a request (``status`` is the HTTP status and the message the server's error line), or
    could not be reached (``status`` is None and the message says why)."""

    def __init__(self, status: int | None, message: str):
        super().__init__(f"erl-serve answered {status}: {message}" if status is not None else message)
        self.status = status
        self.message = message


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


class RemoteEnv(gym.Env[str, str]):
    """One session of a served text env, played through HTTP.

    ## Arguments
    * ``url``: the server's base URL, e.g. ``"http://127.0.0.1:8000"``.
    * ``timeout``: seconds to wait for one answer (30).

    ## Errors
    A request the server refuses raises ``RemoteEnvError`` (status and the server's one-line reason): stepping an
    ended episode (409), an action that is not a string (422), a session the server expired after being idle or
    lost in a restart (404: ``reset()`` then opens a new session and plays on), a server that cannot be reached
    (``status`` None). Requests that are safe to repeat (``reset``, opening a session) are retried once on a fresh
    connection when the connection fails; a ``step`` never is, since the server may have applied it.
    ``close()`` ends the session on the server; a session that is never closed expires after the server's idle TTL.
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, timeout: float = 30.0):
        import requests  # a dependency of datasets/transformers; imported here to keep `import erl_envs` light

        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http(s) URL such as 'http://127.0.0.1:8000', got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = requests.Session()
        self._closed = False
        self.session_id: str | None = None
        info = self._call("GET", "/info", retry=True)
        self.env_id: str = info["env_id"]
        self.instructions: str = info["instructions"]
        self.prompt_style: str = info["prompt_style"]
        self.server_info = info
        self.observation_space = space_from_json(info["observation_space"])
        self.action_space = space_from_json(info["action_space"])
        self.session_id = self._call("POST", "/sessions", retry=True)["session_id"]

    def _call(self, method: str, path: str, payload: dict | None = None, retry: bool = False) -> dict:
        import requests

        for attempt in range(2 if retry else 1):
            try:
                response = self._http.request(method, self.url + path, json=payload, timeout=self.timeout)
                break
            except requests.RequestException as error:
                if attempt or not retry or isinstance(error, requests.Timeout):
                    reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
                    raise RemoteEnvError(None, f"cannot reach erl-serve at {self.url} ({reason})") from None
        try:
            body = response.json()
        except ValueError:
            raise RemoteEnvError(response.status_code, f"not JSON: {response.text[:200]!r}") from None
        if response.status_code >= 400:
            raise RemoteEnvError(response.status_code, str(body.get("error", body) if isinstance(body, dict)
                                                             else body))
        return body

    def _session_path(self, action: str) -> str:
        if self._closed:
            raise gym.error.ResetNeeded("this RemoteEnv is closed; make a new one")
        return f"/sessions/{self.session_id}/{action}"

    @staticmethod
    def _unpack(result: dict) -> tuple[str, float, bool, bool, dict]:
        observation = result["observation"]
        return (observation["text"], float(result["reward"] or 0.0), observation["terminated"],
                observation["truncated"], observation["info"])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        payload = {"seed": seed, "options": options}
        try:
            result = self._call("POST", self._session_path("reset"), payload, retry=True)
        except RemoteEnvError as error:
            if error.status not in (404, None):
                raise
            # The session is gone (expired while idle, or the server restarted): open a new one and reset there.
            self.session_id = self._call("POST", "/sessions", retry=True)["session_id"]
            result = self._call("POST", self._session_path("reset"), payload, retry=True)
        text, _, _, _, info = self._unpack(result)
        return text, info

    def step(self, action: str):
        if not isinstance(action, str):
            raise TypeError(f"action must be a str, got {type(action).__name__}")
        try:
            return self._unpack(self._call("POST", self._session_path("step"), {"action": {"text": action}}))
        except RemoteEnvError as error:
            if error.status != 404:
                raise
            raise RemoteEnvError(404, f"{error.message}; reset() opens a new session") from None

    def close(self):
        if not self._closed:
            self._closed = True
            try:
                self._call("DELETE", f"/sessions/{self.session_id}")
            except (RemoteEnvError, OSError):
                pass  # already expired, or the server is gone: nothing left to free
        self._http.close()
