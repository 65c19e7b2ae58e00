"""erl-serve as a real process on 127.0.0.1: concurrent sessions equal local envs, bad requests, expiry, SIGTERM."""

from __future__ import annotations

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
from served import ServerProcess  # noqa: E402

# A server start imports openenv-core (and gradio): tens of seconds on 2 shared cores, so this module is slow.
pytestmark = pytest.mark.slow

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


def test_reflection_server_equals_local_reflection_wrapper(servers):
    _, sokoban = servers
    make_local = lambda: ReflectionWrapper(gym.make("ERL-Sokoban-v0"))  # noqa: E731
    remote = RemoteEnv(sokoban.url)
    assert remote.instructions == make_local().unwrapped.instructions and remote.prompt_style == "grid"
    remote.close()
    for seed in range(4):
        steps, mismatches = _play_against_local(sokoban.url, make_local, seed, 60)
        assert mismatches == 0, f"seed {seed}: {mismatches} of {steps} transitions differ"


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


def test_remote_env_through_gym_make(servers):
    lake, _ = servers
    env = gym.make("ERL-Remote-v0", url=lake.url)
    local = gym.make("ERL-FrozenLake-v0")
    assert env.reset(seed=5) == (local.reset(seed=5)[0], to_jsonable(local.reset(seed=5)[1]))
    assert env.unwrapped.env_id == "ERL-FrozenLake-v0"
    assert env.observation_space.contains(env.reset(seed=5)[0])
    env.close()


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
