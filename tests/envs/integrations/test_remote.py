"""RemoteEnv against an in-process erl-serve app (uvicorn in a thread): transitions, errors, idle expiry."""

from __future__ import annotations

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
