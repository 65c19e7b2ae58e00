"""RemoteEnv against an in-process erl-serve app (uvicorn in a thread): transitions, errors, idle expiry."""

from __future__ import annotations

import json
import threading
import time

import gymnasium as gym
import pytest

pytest.importorskip("openenv.core", reason="the server side needs the [serve] extra (openenv-core)")
uvicorn = pytest.importorskip("uvicorn")

import erl_envs  # noqa: E402,F401
from erl_envs.integrations.openenv_server import build_app  # noqa: E402
from erl_envs.reflection import to_jsonable  # noqa: E402
from erl_envs.integrations.remote import RemoteEnv, RemoteEnvError  # noqa: E402
from served import free_port  # noqa: E402


@pytest.fixture(scope="module")
def url():
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app("ERL-Sokoban-v0", session_ttl_s=1.0), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the in-process server did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def test_remote_env_matches_local_env(url):
    remote, local = RemoteEnv(url), gym.make("ERL-Sokoban-v0")
    assert remote.instructions == local.unwrapped.instructions and remote.env_id == "ERL-Sokoban-v0"
    obs, info = local.reset(seed=4)
    assert remote.reset(seed=4) == (obs, to_jsonable(info))
    for action in ["```Left```", "```Up```", "what?", "```Right```", "```Down```"] * 2:
        obs, reward, terminated, truncated, info = local.step(action)
        assert remote.step(action) == (obs, reward, terminated, truncated, to_jsonable(info))
        if terminated or truncated:
            break
    remote.close()


def test_remote_env_errors_name_the_problem(url):
    with pytest.raises(ValueError, match="http"):
        RemoteEnv("127.0.0.1:1")
    remote = RemoteEnv(url)
    with pytest.raises(RemoteEnvError, match="step before reset"):
        remote.step("```Up```")
    with pytest.raises(RemoteEnvError, match="unknown reset option 'colour'") as caught:
        remote.reset(seed=0, options={"colour": "red"})
    assert caught.value.status == 400
    with pytest.raises(TypeError, match="must be a str"):
        remote.step(3)
    remote.close()
    remote.close()  # twice is fine
    with pytest.raises(gym.error.ResetNeeded):
        remote.reset(seed=0)


def test_idle_session_expires(url):
    remote = RemoteEnv(url)
    remote.reset(seed=1)
    time.sleep(2.5)  # TTL 1 s; the sweeper runs every 0.25 s
    with pytest.raises(RemoteEnvError, match="expired") as caught:
        remote.step("```Up```")
    assert caught.value.status == 404
    remote.close()


# --- recovery: a 500, an expired session, a restarted server, a dead one -----------------------------------------

from erl_envs.integrations.openenv_server import build_app as _build  # noqa: E402
from served import InProcessServer  # noqa: E402  (registers Test-Work-v0)


def test_a_500_leaves_the_remote_env_usable():
    with InProcessServer(_build("Test-Work-v0")) as server:
        remote = RemoteEnv(server.url)
        remote.reset(seed=0)
        with pytest.raises(RemoteEnvError, match="500: internal error: RuntimeError: a bug in the env") as caught:
            remote.step("crash")
        assert caught.value.status == 500
        assert remote.step("next")[0] == "echo next"  # same connection, no ConnectionResetError
        remote.close()


def test_reset_opens_a_new_session_after_expiry_or_a_server_restart():
    app = _build("Test-Work-v0", session_ttl_s=0.5)
    with InProcessServer(app) as server:
        port = server.port
        remote = RemoteEnv(server.url)
        remote.reset(seed=0)
        first = remote.session_id
        time.sleep(2.0)  # idle past the TTL: the sweeper closes the session
        with pytest.raises(RemoteEnvError, match="404.*reset\\(\\) opens a new session"):
            remote.step("x")
        assert remote.reset(seed=1)[0] == "ready" and remote.session_id != first
        assert remote.step("y")[0] == "echo y"
    with InProcessServer(_build("Test-Work-v0"), port=port):  # the same address, a fresh server: no sessions
        assert remote.reset(seed=2)[0] == "ready"
        assert remote.step("z")[0] == "echo z"
    remote.close()


def test_a_dead_server_is_one_clear_error():
    with InProcessServer(_build("Test-Work-v0")) as server:
        remote = RemoteEnv(server.url, timeout=5)
        remote.reset(seed=0)
    for call in (lambda: remote.step("x"), lambda: remote.reset(seed=1)):
        with pytest.raises(RemoteEnvError, match=f"cannot reach erl-serve at {server.url}") as caught:
            call()
        assert caught.value.status is None and "\n" not in str(caught.value)
    with pytest.raises(RemoteEnvError, match="cannot reach erl-serve"):
        RemoteEnv(server.url, timeout=5)
    remote.close()  # closing against a dead server is quiet


def test_erl_train_against_a_refusing_server_ends_with_one_line(tmp_path, capsys):
    from erl_agents.train import main

    with InProcessServer(_build("ERL-FrozenLake-v0", max_sessions=1)) as server:
        status = main(["--env", "ERL-Remote-v0", "--env-kwargs", json.dumps({"url": server.url}), "--algo", "rlvr",
                       "--n-rlvr", "2", "--tasks-per-step", "1", "--steps", "1", "--output", str(tmp_path / "run"),
                       "--no-progress", "--device", "cpu"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(f"erl-train: error: erl-serve at {server.url} answered 503: too many sessions")
    assert err.count("\n") == 1
