"""erl-serve: as a real process on 127.0.0.1 (slow: concurrent sessions equal local envs, bad requests, expiry,
SIGTERM), and in this process (fast: bounds on requests and connections, isolation of a busy session, errors)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import requests

pytest.importorskip("openenv.core", reason="erl-serve needs the [serve] extra (openenv-core)")

import erl_envs  # noqa: E402,F401
from erl_envs import ReflectionWrapper  # noqa: E402
from erl_envs.reflection import to_jsonable  # noqa: E402
from erl_envs.integrations.remote import RemoteEnv, RemoteEnvError  # noqa: E402
from served import InProcessServer, ServerProcess  # noqa: E402  (served registers Test-Work-v0)

SESSIONS, STEPS = 32, 300
TTL_S = 6.0
GRID_REPLIES = ["```Up```", "```Down```", "```Left```", "```Right```", "```down```", "```2```", "no idea",
                "```Up``` then ```Left```", ""]
REFLECTIONS = ["<prompt>Avoid C tiles. Reach B.</prompt>", "no tags here", "<prompt></prompt>"]


@pytest.fixture(scope="module")
def servers():
    """Two servers started at once: FrozenLake, and Sokoban inside ReflectionWrapper."""
    lake = ServerProcess("--env", "ERL-FrozenLake-v0", "--session-ttl", str(TTL_S)).launch()
    sokoban = ServerProcess("--env", "ERL-Sokoban-v0", "--reflection").launch()
    try:
        yield lake.wait_ready(), sokoban.wait_ready()
    finally:
        lake.stop()
        sokoban.stop()


def _reply(rng: np.random.Generator, info: dict) -> str:
    pool = REFLECTIONS if info.get("phase") == "reflect" else GRID_REPLIES
    return pool[rng.integers(len(pool))]


def _play_against_local(url: str, make_local, seed: int, steps: int) -> tuple[int, int]:
    """Play ``steps`` random replies on a remote and a local env in lockstep; return (steps, mismatches)."""
    remote, local = RemoteEnv(url), make_local()
    rng = np.random.default_rng(seed)
    mismatches, episode = 0, 0
    try:
        remote_first = remote.reset(seed=seed)
        local_obs, local_info = local.reset(seed=seed)
        mismatches += remote_first != (local_obs, to_jsonable(local_info))
        for _ in range(steps):
            action = _reply(rng, local_info)
            got = remote.step(action)
            obs, reward, terminated, truncated, local_info = local.step(action)
            mismatches += got != (obs, float(reward), terminated, truncated, to_jsonable(local_info))
            if terminated or truncated:
                episode += 1
                remote_first = remote.reset(seed=seed * 1000 + episode)
                local_obs, local_info = local.reset(seed=seed * 1000 + episode)
                mismatches += remote_first != (local_obs, to_jsonable(local_info))
    finally:
        remote.close()
        local.close()
    return steps, mismatches


KILLED_CLIENT = textwrap.dedent("""
    import sys, time
    from erl_envs.integrations.remote import RemoteEnv
    env = RemoteEnv(sys.argv[1])
    env.reset(seed=7)
    env.step("```Up```")
    print(env.session_id, flush=True)
    time.sleep(600)
""")


# A server process imports openenv-core (and gradio): tens of seconds on 2 shared cores.
@pytest.mark.slow
def test_32_sessions_equal_local_envs_while_a_client_is_killed(servers):
    lake, _ = servers
    victim = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, lake.url], stdout=subprocess.PIPE, text=True)
    try:
        victim_session = victim.stdout.readline().strip()
        assert victim_session, "the client to be killed never opened its session"
        results: dict[int, tuple[int, int]] = {}
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                results[i] = _play_against_local(lake.url, lambda: gym.make("ERL-FrozenLake-v0"), 100 + i, STEPS)
            except BaseException as error:  # noqa: BLE001 - reported below with the session number
                errors.append(error)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(SESSIONS)]
        for thread in threads:
            thread.start()
        victim.kill()  # mid-episode, while the 32 sessions play
        victim.wait(timeout=30)
        for thread in threads:
            thread.join(timeout=600)
    finally:
        if victim.poll() is None:
            victim.kill()
    assert not errors, errors[:3]
    assert sum(n for n, _ in results.values()) == SESSIONS * STEPS
    assert sum(m for _, m in results.values()) == 0
    # The killed client's session is still held until it has been idle for the TTL, then the sweeper frees it.
    deadline = time.monotonic() + TTL_S * 5
    while time.monotonic() < deadline and requests.get(lake.url + "/sessions").json()["active"] > 0:
        time.sleep(0.5)
    counts = requests.get(lake.url + "/sessions").json()
    assert counts["active"] == 0 and counts["expired"] >= 1
    gone = requests.post(f"{lake.url}/sessions/{victim_session}/step", json={"action": {"text": "```Up```"}})
    assert gone.status_code == 404 and "expired" in gone.json()["error"]


@pytest.mark.slow
def test_reflection_server_equals_local_reflection_wrapper(servers):
    _, sokoban = servers
    make_local = lambda: ReflectionWrapper(gym.make("ERL-Sokoban-v0"))  # noqa: E731
    remote = RemoteEnv(sokoban.url)
    assert remote.instructions == make_local().unwrapped.instructions and remote.prompt_style == "grid"
    remote.close()
    for seed in range(4):
        steps, mismatches = _play_against_local(sokoban.url, make_local, seed, 60)
        assert mismatches == 0, f"seed {seed}: {mismatches} of {steps} transitions differ"


@pytest.mark.slow
def test_bad_requests_get_4xx_json_errors_naming_the_problem(servers):
    lake, _ = servers
    url = lake.url
    sid = requests.post(url + "/sessions").json()["session_id"]

    def post(path, **kwargs):
        response = requests.post(url + path, **kwargs)
        assert response.headers["content-type"].startswith("application/json"), (path, response.text)
        return response.status_code, response.json().get("error")

    assert post(f"/sessions/{sid}/step", json={"action": {"text": "```Up```"}}) == (
        409, "step before reset: reset the session first")
    status, error = post("/sessions/no-such-id/reset", json={})
    assert status == 404 and "unknown session 'no-such-id'" in error
    status, error = post(f"/sessions/{sid}/reset", json={"seed": 1, "options": {"size": 1}})
    assert status == 400 and "size" in error
    assert post(f"/sessions/{sid}/step", json={"action": {"text": "```Up```"}})[0] == 409  # a failed reset: reset again
    status, error = post(f"/sessions/{sid}/reset", json={"seed": -3})
    assert status == 422 and "seed" in error
    status, error = post(f"/sessions/{sid}/reset", json={"seed": 1, "colour": "red"})
    assert status == 422 and "colour" in error
    assert post(f"/sessions/{sid}/reset", json={"seed": 1, "options": {"size": 2, "max_steps": 1}})[0] == 200
    status, error = post(f"/sessions/{sid}/step", json={"action": {"text": 42}})
    assert status == 422 and "action.text" in error
    status, error = post(f"/sessions/{sid}/step", json={"move": "Up"})
    assert status == 422 and "action" in error
    status, error = post(f"/sessions/{sid}/step", data=b"{not json", headers={"content-type": "application/json"})
    assert status == 422 and "not valid JSON" in error
    assert post(f"/sessions/{sid}/step", json={"action": {"text": "no move"}})[0] == 200  # uses the 1-step budget
    status, error = post(f"/sessions/{sid}/step", json={"action": {"text": "```Up```"}})
    assert status == 409 and "episode has ended" in error

    remote = RemoteEnv(url)
    with pytest.raises(RemoteEnvError, match="409.*reset") as caught:
        remote.step("```Up```")
    assert caught.value.status == 409
    remote.close()
    with pytest.raises(gym.error.ResetNeeded):
        remote.step("```Up```")
    assert requests.delete(f"{url}/sessions/{sid}").status_code == 200
    assert requests.delete(f"{url}/sessions/{sid}").status_code == 404
    assert requests.get(url + "/health").status_code == 200  # still serving after all of it


@pytest.mark.slow
def test_openenv_websocket_client_plays_the_same_episode(servers):
    """OpenEnv's own client (WebSocket /ws) sees the transitions a local env gives."""
    from openenv.core import GenericEnvClient

    lake, _ = servers
    local = gym.make("ERL-FrozenLake-v0")
    obs, info = local.reset(seed=11)
    with GenericEnvClient(base_url=lake.url).sync() as client:
        result = client.reset(seed=11)
        assert result.observation["text"] == obs and result.observation["info"] == to_jsonable(info)
        for action in ["```Down```", "```Right```", "bad", "```Up```"]:
            obs, reward, terminated, truncated, info = local.step(action)
            result = client.step({"text": action})
            assert (result.observation["text"], result.reward, result.done) == (obs, reward, terminated or truncated)
            if result.done:
                break


@pytest.mark.slow
def test_remote_env_through_gym_make(servers):
    lake, _ = servers
    env = gym.make("ERL-Remote-v0", url=lake.url)
    local = gym.make("ERL-FrozenLake-v0")
    assert env.reset(seed=5) == (local.reset(seed=5)[0], to_jsonable(local.reset(seed=5)[1]))
    assert env.unwrapped.env_id == "ERL-FrozenLake-v0"
    assert env.observation_space.contains(env.reset(seed=5)[0])
    env.close()


@pytest.mark.slow
def test_sigterm_shuts_down_cleanly(servers):
    """Last in the module: stops the reflection server with two sessions still open."""
    _, sokoban = servers
    for seed in range(2):
        RemoteEnv(sokoban.url).reset(seed=seed)  # left open on purpose: shutdown must close them
    code, output = sokoban.stop()
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status says "stopped by SIGTERM".
    assert code == -signal.SIGTERM, output
    assert "closed 2 sessions" in output and "Application shutdown complete" in output
    assert "Traceback" not in output


# --- in this process: bounds, isolation, errors ------------------------------------------------------------------

import json  # noqa: E402
import socket  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from erl_envs.integrations.openenv_server import MAX_OPTION_DEPTH, build_app  # noqa: E402


def _session(url: str, http=requests) -> str:
    sid = http.post(url + "/sessions").json()["session_id"]
    assert http.post(f"{url}/sessions/{sid}/reset", json={}).status_code == 200
    return sid


def _timed(call):
    start = time.perf_counter()
    response = call()
    return response, time.perf_counter() - start


def test_a_busy_session_never_delays_health_info_or_another_session():
    with InProcessServer(build_app("Test-Work-v0")) as server:
        url = server.url
        busy, other = _session(url), _session(url)
        slow = ThreadPoolExecutor(1).submit(requests.post, f"{url}/sessions/{busy}/step",
                                            json={"action": {"text": "work 6"}})
        time.sleep(0.5)
        # 60 more calls on the busy session (more than the server's worker threads) are refused, not queued.
        with ThreadPoolExecutor(60) as pool:
            piled = list(pool.map(lambda _: requests.post(f"{url}/sessions/{busy}/step",
                                                          json={"action": {"text": "x"}}), range(60)))
        assert {r.status_code for r in piled} == {409} and "busy" in piled[0].json()["error"]
        timings = {}
        for name, call in [("health", lambda: requests.get(url + "/health")),
                           ("info", lambda: requests.get(url + "/info")),
                           ("sessions", lambda: requests.get(url + "/sessions")),
                           ("other session", lambda: requests.post(f"{url}/sessions/{other}/step",
                                                                   json={"action": {"text": "hi"}}))]:
            response, timings[name] = _timed(call)
            assert response.status_code == 200, (name, response.text)
        assert not slow.done(), "the busy call ended before the others were measured: the check proves nothing"
        assert max(timings.values()) < 1.0, timings
        assert slow.result().status_code == 200


def test_the_session_limit_holds_under_concurrent_creation():
    with InProcessServer(build_app("Test-Work-v0", env_kwargs={"make_delay": 0.3}, max_sessions=8)) as server:
        with ThreadPoolExecutor(40) as pool:
            answers = list(pool.map(lambda _: requests.post(server.url + "/sessions"), range(40)))
        assert sorted(r.status_code for r in answers) == [200] * 8 + [503] * 32
        assert requests.get(server.url + "/sessions").json()["active"] == 8


def test_every_error_is_json_with_an_error_line_and_keeps_the_connection():
    with InProcessServer(build_app("Test-Work-v0", max_body_bytes=100_000)) as server:
        url, http = server.url, requests.Session()
        sid = _session(url, http)
        cases = [
            (lambda: http.get(url + "/no/such/route"), 404, "no route GET /no/such/route"),
            (lambda: http.get(f"{url}/sessions/{sid}/step"), 405, "GET is not allowed"),
            (lambda: http.post(f"{url}/sessions/{sid}/step", data=b"{", headers={"content-type": "application/json"}),
             422, "not valid JSON"),
            (lambda: http.post(url + "/reset", json={"options": {"fail": 1}}), 400, "the option 'fail' is refused"),
            (lambda: http.post(f"{url}/sessions/{sid}/reset", json={"options": {"fail": 1}}), 400, "'fail'"),
            (lambda: http.post(f"{url}/sessions/{sid}/reset", json={"options": {"map": _nested(MAX_OPTION_DEPTH)}}),
             400, f"nested deeper than {MAX_OPTION_DEPTH}"),
            (lambda: http.post(f"{url}/sessions/{sid}/step", data=b"[" * 45_000 + b"]" * 45_000,
                               headers={"content-type": "application/json"}), 400, "error parsing the body"),
            (lambda: http.post(f"{url}/sessions/{sid}/step", json={"action": {"text": "x" * 200_000}}), 413,
             "more than this server accepts"),
            (lambda: http.post(f"{url}/sessions/{sid}/step", data=iter([b"{"] * 150_000),
                               headers={"content-type": "application/json"}), 413, "more than the 100,000 bytes"),
        ]
        for call, status, words in cases:
            response = call()
            assert response.status_code == status and words in response.json()["error"], (status, response.text)
        _session(url, http)  # the same keep-alive connection still works after every one of them
        http.post(f"{url}/sessions/{sid}/reset", json={})
        crashed = http.post(f"{url}/sessions/{sid}/step", json={"action": {"text": "crash"}})
        assert crashed.status_code == 500 and "RuntimeError: a bug in the env" in crashed.json()["error"]
        assert http.post(f"{url}/sessions/{sid}/step", json={"action": {"text": "after"}}).json()[
            "observation"]["text"] == "echo after"


def _nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def test_pages_of_other_sites_cannot_drive_the_server():
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with InProcessServer(build_app("Test-Work-v0", allowed_origins=("https://ui.example",))) as server:
        url = server.url
        evil = requests.post(url + "/sessions", headers={"Origin": "https://evil.example"})
        assert evil.status_code == 403 and "--allow-origin https://evil.example" in evil.json()["error"]
        assert requests.post(url + "/sessions", headers={"Origin": url}).status_code == 200  # its own pages
        assert requests.post(url + "/sessions", headers={"Origin": "https://ui.example"}).status_code == 200
        assert requests.get(url + "/sessions").json()["active"] == 2
        ws_url = url.replace("http", "ws") + "/ws"
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url, origin="https://evil.example", open_timeout=10)
        assert refused.value.response.status_code == 403
        with connect(ws_url, open_timeout=10) as ws:  # a program (no Origin) is welcome
            ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(ws.recv(timeout=10))["data"]["observation"]["text"] == "ready"


def test_connections_that_send_nothing_or_trickle_are_closed():
    with InProcessServer(build_app("Test-Work-v0", request_timeout_s=1.0), request_timeout_s=1.0) as server:
        def closed_within(payload: bytes, seconds: float = 8.0) -> bytes:
            with socket.create_connection(("127.0.0.1", server.port), timeout=seconds) as sock:
                sock.sendall(payload)
                received = b""
                while chunk := sock.recv(4096):  # a socket.timeout here means the server kept it open
                    received += chunk
                return received

        assert closed_within(b"") == b""  # half-open: never sends a byte
        assert closed_within(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n") == b""  # headers never finished
        answer = closed_within(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in answer
        http = requests.Session()  # an ordinary keep-alive client is unaffected
        assert http.get(server.url + "/health").status_code == 200
        time.sleep(0.5)
        assert http.get(server.url + "/health").status_code == 200
        from websockets.sync.client import connect

        with connect(server.url.replace("http", "ws") + "/ws", open_timeout=10) as ws:  # a session outlives the limit
            for _ in range(2):
                ws.send(json.dumps({"type": "reset", "data": {}}))
                assert json.loads(ws.recv(timeout=10))["data"]["observation"]["text"] == "ready"
                time.sleep(1.5)


def test_a_4mb_map_is_refused_before_any_work():
    with InProcessServer(build_app("ERL-FrozenLake-v0")) as server:
        url = server.url
        sid = requests.post(url + "/sessions").json()["session_id"]
        huge = {"seed": 0, "options": {"map": "S" + "F" * 4_000_000 + "G"}}
        for path in (f"/sessions/{sid}/reset", "/reset"):
            response = requests.post(url + path, json=huge)
            assert response.status_code == 413 and "more than this server accepts" in response.json()["error"]
    with InProcessServer(build_app("ERL-FrozenLake-v0", max_body_bytes=8 << 20)) as server:
        url = server.url
        sid = requests.post(url + "/sessions").json()["session_id"]
        for path in (f"/sessions/{sid}/reset", "/reset"):
            response = requests.post(url + path, json=huge)
            assert response.status_code == 400 and "maps up to 16 per side" in response.json()["error"]
        assert requests.post(f"{url}/sessions/{sid}/reset", json={"seed": 1}).status_code == 200


def test_a_reply_with_lone_surrogates_never_breaks_an_answer():
    """Through --reflection, the failed attempt's trace quotes the reply in the reflection request: every answer is
    still UTF-8 JSON, and the step it answers was applied once."""
    with InProcessServer(build_app("ERL-FrozenLake-v0", reflection=True)) as server:
        url = server.url
        sid = requests.post(url + "/sessions").json()["session_id"]
        requests.post(f"{url}/sessions/{sid}/reset", json={"seed": 0})
        body = json.dumps({"action": {"text": "```Up``` \ud800 no"}})  # json.dumps writes the \\ud800 escape
        phases = []
        for _ in range(12):
            response = requests.post(f"{url}/sessions/{sid}/step", data=body,
                                     headers={"content-type": "application/json"})
            assert response.status_code == 200, response.text
            phases.append(response.json()["observation"]["info"].get("phase"))
            response.json()["observation"]["text"].encode("utf-8")
            if phases[-1] == "reflect":
                break
        assert phases[-1] == "reflect"


# --- host names, what /info tells, start-up checks, the OpenEnv image's app ---------------------------------------


def test_a_rebound_host_name_gets_no_session_over_http_or_websocket():
    """DNS rebinding: a page of evil.example points its name at 127.0.0.1, and the browser sends Host and Origin
    evil.example. Both are refused before any route runs; names the server was given, and addresses, are served."""
    from websockets.sync.client import connect

    with InProcessServer(build_app("Test-Work-v0", allowed_hosts=("envs.example",))) as server:
        url, port = server.url, server.port
        rebound = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        for response in (requests.post(url + "/sessions", headers=rebound),
                         requests.get(url + "/info", headers=rebound),
                         requests.post(url + "/sessions", headers={"Host": f"evil.example:{port}"})):
            assert response.status_code == 403 and "--allowed-hosts evil.example" in response.json()["error"]
        assert requests.get(url + "/sessions").json()["active"] == 0
        assert _handshake(port, f"evil.example:{port}", f"http://evil.example:{port}").startswith(b"HTTP/1.1 403")
        assert _handshake(port, f"evil.example:{port}").startswith(b"HTTP/1.1 403")
        assert _handshake(port, f"localhost:{port}", f"http://localhost:{port}").startswith(b"HTTP/1.1 101")
        for host in (f"localhost:{port}", f"LOCALHOST.:{port}", f"[::1]:{port}", f"10.1.2.3:{port}",
                     f"envs.example:{port}"):
            assert requests.post(url + "/sessions", headers={"Host": host, "Origin": f"http://{host}"}).ok, host
        with connect(url.replace("http", "ws") + "/ws", open_timeout=10) as ws:  # 127.0.0.1: plays
            ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(ws.recv(timeout=10))["data"]["observation"]["text"] == "ready"


def _handshake(port: int, host: str, origin: str | None = None) -> bytes:
    """The status line of a WebSocket handshake on /ws sent with exactly this Host (and Origin), as a browser
    sends it after DNS rebinding."""
    lines = [b"GET /ws HTTP/1.1", b"Host: " + host.encode(), b"Upgrade: websocket", b"Connection: Upgrade",
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", b"Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(b"Origin: " + origin.encode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n")
        received = b""
        while b"\r\n" not in received and (chunk := sock.recv(4096)):
            received += chunk
    return received.split(b"\r\n", 1)[0]


def test_info_tells_a_client_what_it_needs_and_not_how_the_env_was_built(tmp_path):
    levels = tmp_path / "secret-levels.txt"
    levels.write_text("; one\n######\n#@$ .#\n######\n")
    with InProcessServer(build_app("ERL-Sokoban-v0", env_kwargs={"levels": str(levels)})) as server:
        info = requests.get(server.url + "/info")
        assert info.ok and "secret-levels" not in info.text and "env_kwargs" not in info.json()
        assert {"env_id", "instructions", "prompt_style", "observation_space", "action_space"} <= set(info.json())
        remote = RemoteEnv(server.url)  # all a client needs
        assert remote.reset(seed=0)[0]
        remote.close()
        for page in ("/docs", "/redoc"):  # FastAPI's pages load a script from a CDN: not served
            assert requests.get(server.url + page).status_code == 404
        assert requests.get(server.url + "/openapi.json").ok


@pytest.mark.parametrize("flags,words", [
    (["--max-body-bytes", "0"], "max_body_bytes (--max-body-bytes) must be a whole number >= 1, got 0"),
    (["--max-body-bytes", "-5"], "got -5"),
    (["--request-timeout", "0"], "request_timeout_s (--request-timeout) must be a positive number of seconds"),
    (["--request-timeout", "nan"], "got nan"),
    (["--session-ttl", "inf"], "session_ttl_s (--session-ttl)"),
    (["--port", "99999"], "the port (--port) must be a whole number from 1 to 65535, got 99999"),
    (["--port", "0"], "got 0"),
])
def test_bad_limits_and_ports_stop_the_start_in_one_line(flags, words):
    from erl_envs.integrations.openenv_server import main

    with pytest.raises(SystemExit) as stopped:
        main(["--env", "Test-Work-v0", *flags])
    message = str(stopped.value.code)
    assert message.startswith("erl-serve: ") and words in message and "\n" not in message
    with pytest.raises(ValueError, match="max_body_bytes"):
        build_app("Test-Work-v0", max_body_bytes=0)  # the OpenEnv image's path too: at start-up, not per request


def test_a_bad_port_is_one_line_from_the_command():
    result = subprocess.run([sys.executable, "-m", "erl_envs.integrations.openenv_server", "--env",
                             "ERL-FrozenLake-v0", "--port", "99999"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr[-3000:]
    assert result.stderr.startswith("erl-serve: the port (--port) must be")


@pytest.mark.parametrize("variable,value,words", [
    ("ERL_MAX_BODY_BYTES", "0", "max_body_bytes (--max-body-bytes) must be a whole number >= 1, got 0"),
    ("PORT", "99999", "the port (--port) must be a whole number from 1 to 65535"),
])
def test_the_openenv_image_app_refuses_a_bad_setting_in_one_line(variable, value, words):
    from paths import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), variable: value}
    result = subprocess.run([sys.executable, "-m", "server.app"], cwd=ROOT / "deploy" / "openenv", env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr[-3000:]
    assert result.stderr.startswith("erl-serve (OpenEnv app): ") and words in result.stderr


def _slow_header_connections_closed(port: int, count: int, within_s: float) -> int:
    """Open ``count`` connections that send a request line and trickle header bytes; how many the server closed
    within ``within_s``."""
    import selectors

    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        sock.setblocking(False)
        sockets.append(sock)
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ)
    closed: set = set()
    deadline = time.monotonic() + within_s
    try:
        while len(closed) < count and time.monotonic() < deadline:
            for sock in sockets:
                if sock not in closed:
                    try:
                        sock.send(b"a")  # one header byte at a time: never a complete request
                    except OSError:
                        closed.add(sock)
            for key, _ in selector.select(timeout=0.5):
                try:
                    if not key.fileobj.recv(4096):
                        closed.add(key.fileobj)
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(key.fileobj)
                if key.fileobj in closed:
                    selector.unregister(key.fileobj)
    finally:
        for sock in sockets:
            sock.close()
    return len(closed)


def test_the_openenv_image_app_keeps_erl_serves_limits():
    """deploy/openenv/server/app.py started as the image starts it (``python -m server.app``): 300 connections that
    trickle their headers are all closed after the request timeout, a 15 MB WebSocket message is refused (the
    connection closed with 1009, message too big), a rebound host name is refused, and there is no web page."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from paths import ROOT
    from served import START_TIMEOUT_S, free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PORT": str(port), "ERL_ENV": "ERL-FrozenLake-v0",
           "ERL_REQUEST_TIMEOUT": "2"}
    env.pop("ENABLE_WEB_INTERFACE", None)
    env.pop("ERL_HOST", None)
    process = subprocess.Popen([sys.executable, "-m", "server.app"], cwd=ROOT / "deploy" / "openenv", env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
            try:
                if requests.get(url + "/health", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.25)
        started = time.monotonic()
        assert _slow_header_connections_closed(port, 300, within_s=20.0) == 300
        assert time.monotonic() - started < 20.0
        assert requests.get(url + "/health").ok  # the server is still there for everyone else
        with connect(url.replace("http", "ws") + "/ws", open_timeout=30, max_size=None) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.send("x" * (15 << 20))
                ws.recv(timeout=30)  # an accepted message would be answered (an error line), not closed
            assert closed.value.rcvd is None or closed.value.rcvd.code == 1009
        with connect(url.replace("http", "ws") + "/ws", open_timeout=30) as ws:  # a normal session still plays
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            assert json.loads(ws.recv(timeout=30))["data"]["observation"]["text"]
        assert requests.post(url + "/sessions", headers={"Host": f"evil.example:{port}"}).status_code == 403
        assert requests.get(url + "/web").status_code == 404  # the web page is off unless asked for
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
