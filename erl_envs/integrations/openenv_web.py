"""The web interface of ``erl-serve --web`` (or ``ENABLE_WEB_INTERFACE=true``, OpenEnv's switch): play the served
env in a browser at ``/web``.

The page shows the board as the env's pygame render (``rgb_array``, as a PNG) beside its text observation, the
buttons and the text box to act (the arrow keys move too), the episode's record (each step's action, reward and
comment; under ``ReflectionWrapper`` the phase, the system prompt in force, e.g. the reflection of attempt 2, and
at the end the wrapper's whole record) and a seed box to start another task. Each browser tab gets its own session
with its own env, apart from the HTTP and WebSocket sessions; tabs idle longer than the server's ``--session-ttl``
are closed.

Routes (JSON unless said): ``GET /web`` (the page, HTML), ``POST /web/api/sessions`` -> ``{session_id}``,
``POST /web/api/sessions/{id}/reset`` ``{seed}`` and ``POST /web/api/sessions/{id}/step`` ``{text}`` -> the view
below, ``GET /web/api/sessions/{id}/board.png`` (the render; 404 for an env without ``rgb_array``). The view:
``{text, reward, total_reward, done, phase, attempt, system_prompt, log, record, info, has_board, moves}``. Errors
are 4xx ``{"error": "..."}`` lines: 404 for an unknown or expired session (the server's), 409 for a step before a
reset or after the end, or for a call while the tab's previous call still runs (answered at once, never queued: a
tab holds at most one worker thread, as an HTTP session does), 400 for a refused reset, 422 for a malformed body.

The page loads nothing from elsewhere and is sent with a Content-Security-Policy that allows only its own inline
script and style (by their sha256) and requests to this server, and that no other site may frame it
(``frame-ancestors 'none'``, ``X-Frame-Options: DENY``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
from typing import Any, Callable

import gymnasium as gym

from erl_envs import protocol
from erl_envs.grid.actions import ACTION_NAMES, format_action
from erl_envs.reflection import to_jsonable

try:
    from fastapi import Body, FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
    from pydantic import BaseModel, ConfigDict, Field
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(f'erl-serve --web needs fastapi: pip install "openenv-core>=0.3,<0.4" uvicorn ({error})') \
        from None

__all__ = ["WebPlay", "WebEpisodeError", "mount_web_interface", "page_headers", "PAGE"]

MAX_REPLY_CHARS = 65_536
MAX_LOG_STEPS = 200  # the page lists the last steps only: an episode of a free-text env may run long


class WebEpisodeError(RuntimeError):
    """A step the tab's episode does not allow (before the first reset, after the end): answered with 409."""


class WebPlay:
    """One browser tab's game: an env (rendering ``rgb_array`` when it can) and the record of its episode."""

    def __init__(self, env: gym.Env, has_board: bool):
        self.env, self.has_board = env, has_board
        self.done: bool | None = None
        self.view: dict[str, Any] = {}
        self.log: list[dict[str, Any]] = []
        self.steps = 0

    def _phase_fields(self, info: dict) -> dict[str, Any]:
        return {"phase": info.get("phase"), "attempt": info.get("attempt"),
                "system_prompt": info.get("system_prompt", self.view.get("system_prompt"))}

    def reset(self, seed: int | None) -> dict[str, Any]:
        obs, info = self.env.reset(seed=seed)
        info = to_jsonable(info)
        self.done, self.log, self.steps = False, [], 0
        self.view = {"text": obs, "reward": 0.0, "total_reward": 0.0, "done": False, "record": None, "info": info,
                     "seed": seed, "system_prompt": protocol.instructions_of(self.env)}
        self.view.update(self._phase_fields(info))
        return self.snapshot()

    def step(self, text: str) -> dict[str, Any]:
        if self.done is None:
            raise WebEpisodeError("step before reset: start an episode first")
        if self.done:
            raise WebEpisodeError("the episode has ended: start a new one")
        phase = self.view.get("phase")
        obs, reward, terminated, truncated, info = self.env.step(text)
        info = to_jsonable(info)
        self.done = bool(terminated or truncated)
        self.steps += 1
        self.log.append({"step": self.steps, "phase": phase, "action": text, "reward": float(reward),
                         "comment": _comment(info), "done": self.done})
        del self.log[:-MAX_LOG_STEPS]
        self.view.update(text=obs, reward=float(reward), total_reward=self.view["total_reward"] + float(reward),
                         done=self.done, info=info, record=info.get("record"))
        self.view.update(self._phase_fields(info))
        return self.snapshot()

    def snapshot(self) -> dict[str, Any]:
        moves = {name: format_action(i) for i, name in enumerate(ACTION_NAMES)} \
            if protocol.prompt_style_of(self.env) == "grid" else {}
        return {**self.view, "log": list(self.log), "steps": self.steps, "has_board": self.has_board,
                "moves": moves}

    def board_png(self) -> bytes | None:
        if not self.has_board or self.done is None:
            return None
        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(self.env.render()).save(buffer, format="PNG")
        return buffer.getvalue()

    def close(self) -> None:
        self.env.close()


def page_headers(page: str) -> dict[str, str]:
    """The security headers of ``page``: its inline ``<script>`` and ``<style>`` allowed by hash, nothing else."""
    def hashes(tag: str) -> str:
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)

    policy = (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; img-src 'self'; "
              "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return {"Content-Security-Policy": policy, "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def _comment(info: dict) -> str:
    """The step's one-line comment: the env's, or under ReflectionWrapper the inner env's (``step_info``)."""
    inner = info.get("step_info") if isinstance(info.get("step_info"), dict) else {}
    return str(info.get("feedback") or inner.get("feedback") or "")


class _WebReset(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)


class _WebStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(..., max_length=MAX_REPLY_CHARS)


def mount_web_interface(app: FastAPI, env_id: str, reflection: bool, env_kwargs: dict | None,
                        make_env_factory: Callable, make_store: Callable) -> None:
    """Add ``/web`` and its API to ``app``, an ``erl-serve`` app: ``make_env_factory(env_id, reflection, kwargs)``
    makes the tabs' envs and ``make_store(make_play)`` their session store (whose lookups refuse unknown and busy
    sessions through the app's own error handler)."""
    kwargs = dict(env_kwargs or {})
    spec_modes = gym.make(env_id, **kwargs).metadata.get("render_modes", [])
    has_board = "rgb_array" in spec_modes
    if has_board:
        kwargs["render_mode"] = "rgb_array"
    make = make_env_factory(env_id, reflection, kwargs)
    store = make_store(lambda: WebPlay(make(), has_board))
    app.state.web_sessions = store
    page = PAGE.replace("__TITLE__", f"{env_id}{' with ReflectionWrapper' if reflection else ''}")
    headers = page_headers(page)

    def _run(session_id: str, action):
        with store.running(session_id) as session:  # a busy tab answers 409 at once
            try:
                return action(session.env)
            except WebEpisodeError as error:
                return JSONResponse({"error": str(error)}, status_code=409)

    @app.get("/", include_in_schema=False)
    def web_root() -> RedirectResponse:
        return RedirectResponse(url="/web")

    @app.get("/web", include_in_schema=False)
    def web_page() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    @app.post("/web/api/sessions")
    def web_session() -> dict:
        return {"session_id": store.create()}

    @app.post("/web/api/sessions/{session_id}/reset")
    def web_reset(session_id: str, body: _WebReset = Body(default_factory=_WebReset)) -> dict:
        try:
            return _run(session_id, lambda play: play.reset(body.seed))
        except (ValueError, TypeError, KeyError) as error:
            return JSONResponse({"error": f"reset refused by {env_id}: {error}"}, status_code=400)

    @app.post("/web/api/sessions/{session_id}/step")
    def web_step(session_id: str, body: _WebStep) -> dict:
        return _run(session_id, lambda play: play.step(body.text))

    @app.get("/web/api/sessions/{session_id}/board.png")
    def web_board(session_id: str) -> Response:
        png = _run(session_id, lambda play: play.board_png())
        if png is None:
            return JSONResponse({"error": f"{env_id} has no board image (no rgb_array render, or no episode yet)"},
                                status_code=404)
        return Response(png, media_type="image/png", headers={"Cache-Control": "no-store"})

    app.router.on_startup.append(store.start_sweeper)
    app.router.on_shutdown.append(store.close_all)


# The page: plain HTML and JavaScript, no outside resources (it works offline and behind a firewall). Env text is
# always written with textContent, never as HTML.
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>erl-gym: __TITLE__</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 1.2em; color: #222; background: #fafafa; }
 h1 { font-size: 1.3em; margin: 0 0 .6em; }
 .row { display: flex; gap: 1.2em; flex-wrap: wrap; align-items: flex-start; }
 .panel { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .8em; }
 #board { width: 320px; height: 320px; image-rendering: pixelated; background: #eee; }
 pre { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: .85em; margin: 0; tab-size: 2; }
 #observation { min-width: 20em; max-width: 48em; max-height: 24em; overflow: auto; }
 button { font-size: 1em; padding: .35em .9em; margin: .15em; cursor: pointer; }
 textarea { width: 100%; min-height: 4em; font-family: ui-monospace, monospace; }
 table { border-collapse: collapse; font-size: .85em; } td, th { border-bottom: 1px solid #eee; padding: .2em .5em;
 text-align: left; vertical-align: top; }
 #status { font-weight: bold; } .error { color: #b00020; }
 .spaced { margin-top: 1em; } .wide { flex: 1; min-width: 22em; } .aside { margin-left: 1em; } #seed { width: 7em; }
</style></head>
<body>
<h1>erl-gym: __TITLE__</h1>
<div class="row">
 <div class="panel"><img id="board" alt="the board"></div>
 <div class="panel"><div id="status">starting...</div><pre id="observation"></pre></div>
</div>
<div class="row spaced">
 <div class="panel wide">
  <div id="moves"></div>
  <textarea id="reply" placeholder="a reply, exactly as a model would write it"></textarea>
  <button id="send">Send reply</button>
  <span class="aside">seed <input id="seed" type="number" min="0">
  <button id="new">New episode</button></span>
  <div id="error" class="error"></div>
 </div>
 <div class="panel wide">
  <div><b>Episode record</b> <span id="phase"></span></div>
  <details><summary>system prompt in force</summary><pre id="prompt"></pre></details>
  <table id="log"><thead><tr><th>#</th><th>phase</th><th>action</th><th>reward</th><th>comment</th></tr></thead>
  <tbody></tbody></table>
  <details id="record-box" hidden><summary>the wrapper's record of the episode</summary><pre id="record"></pre>
  </details>
 </div>
</div>
<script>
"use strict";
let session = null, view = null;
const $ = (id) => document.getElementById(id);
async function call(path, body) {
  const response = await fetch("/web/api/sessions" + path, {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(body || {})});
  const data = await response.json();
  if (!response.ok) { throw new Error(data.error || response.statusText); }
  return data;
}
function show(next) {
  view = next;
  $("error").textContent = "";
  $("observation").textContent = view.text;
  const phase = view.phase ? " (" + view.phase + (view.attempt ? ", attempt " + view.attempt : "") + ")" : "";
  $("status").textContent = (view.done ? "episode over" : "step " + view.steps) + phase +
    ": reward " + view.reward + ", return " + view.total_reward;
  $("phase").textContent = phase;
  $("prompt").textContent = view.system_prompt || "";
  const body = $("log").querySelector("tbody");
  body.replaceChildren();
  for (const entry of view.log) {
    const row = document.createElement("tr");
    for (const cell of [entry.step, entry.phase || "", entry.action, entry.reward, entry.comment]) {
      const td = document.createElement("td"); td.textContent = String(cell); row.appendChild(td);
    }
    body.appendChild(row);
  }
  $("record-box").hidden = !view.record;
  $("record").textContent = view.record ? JSON.stringify(view.record, null, 2) : "";
  if (view.has_board) {
    $("board").src = "/web/api/sessions/" + session + "/board.png?step=" + view.steps + "&t=" + Date.now();
  } else { $("board").hidden = true; }
  const moves = $("moves");
  if (!moves.childElementCount) {
    for (const [name, reply] of Object.entries(view.moves)) {
      const button = document.createElement("button");
      button.textContent = name; button.dataset.move = name;
      button.addEventListener("click", () => act(reply));
      moves.appendChild(button);
    }
  }
  // A reflection is text: during the reflect phase only the reply box acts.
  for (const button of moves.querySelectorAll("button")) { button.disabled = view.done || view.phase === "reflect"; }
  $("reply").placeholder = view.phase === "reflect" ? "your reflection: <prompt>rules and plan for attempt 2</prompt>"
    : "a reply, exactly as a model would write it";
  $("send").disabled = view.done;
  document.body.dataset.steps = String(view.steps);
}
function fail(error) { $("error").textContent = error.message; }
async function act(text) { try { show(await call("/" + session + "/step", {text})); } catch (e) { fail(e); } }
async function newEpisode() {
  const seed = $("seed").value === "" ? null : Number($("seed").value);
  try { show(await call("/" + session + "/reset", {seed})); } catch (e) { fail(e); }
}
$("send").addEventListener("click", () => act($("reply").value));
$("new").addEventListener("click", newEpisode);
document.addEventListener("keydown", (event) => {
  const name = {ArrowUp: "Up", ArrowDown: "Down", ArrowLeft: "Left", ArrowRight: "Right"}[event.key];
  if (!name || !view || view.done || !view.moves[name] || event.target.tagName === "TEXTAREA" ||
      event.target.tagName === "INPUT") { return; }
  event.preventDefault(); act(view.moves[name]);
});
(async () => {
  try {
    session = (await call("", {})).session_id;
    const seed = new URLSearchParams(location.search).get("seed");
    if (seed !== null) { $("seed").value = seed; }
    await newEpisode();
  } catch (e) { fail(e); }
})();
</script>
</body></html>
"""
