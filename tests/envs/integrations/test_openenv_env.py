"""What erl-serve tells OpenEnv about its env (erl_envs.integrations.openenv_env): /metadata, the session state, the
MCP tools; and the OpenEnv packaging folder (deploy/openenv) that `openenv validate` checks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import pytest

pytest.importorskip("openenv.core", reason="erl-serve needs the [serve] extra (openenv-core)")

from fastapi.testclient import TestClient  # noqa: E402

LOCAL = "http://127.0.0.1"  # TestClient's own host name, testserver, is not one the server answers to

import erl_envs  # noqa: E402,F401
from erl_envs.integrations.openenv_server import build_app  # noqa: E402
from paths import ROOT  # noqa: E402


def _rpc(client, method: str, params: dict, request_id: int = 1) -> dict:
    body = client.post("/mcp", json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).json()
    assert "error" not in body or body["error"] is None, body
    return body["result"]


def test_metadata_names_the_env_and_carries_its_rules_and_schemas():
    with TestClient(build_app("ERL-Sokoban-v0", reflection=True), base_url=LOCAL) as client:
        meta = client.get("/metadata").json()
    assert meta["name"] == "ERL-Sokoban-v0" and meta["author"] == "erl-gym" and meta["version"] == erl_envs.__version__
    assert "box" in meta["description"].lower() and "ReflectionWrapper" in meta["description"]
    readme = meta["readme_content"]
    for part in ("## Instructions the model gets", "## The rules", "push", "## Rewards", "## Episode End",
                 "## Action schema", "## Observation schema", '"kind": "FreeText"'):
        assert part in readme, part
    assert json.loads(readme.split("## Action schema")[1].split("```json")[1].split("```")[0])["required"] == ["text"]


def test_state_is_the_envs_own():
    with TestClient(build_app("ERL-FrozenLake-v0", env_kwargs={"size": 3}), base_url=LOCAL) as client:
        with client.websocket_connect(LOCAL.replace("http", "ws") + "/ws") as ws:
            ws.send_json({"type": "reset", "data": {"seed": 1}})
            first = ws.receive_json()["data"]["observation"]["text"]
            ws.send_json({"type": "step", "data": {"text": "```Left```"}})
            ws.receive_json()
            ws.send_json({"type": "state"})
            state = ws.receive_json()["data"]
    local = gym.make("ERL-FrozenLake-v0", size=3)
    assert first == local.reset(seed=1)[0]
    obs, reward, terminated, truncated, info = local.step("```Left```")
    assert state["env_id"] == "ERL-FrozenLake-v0" and state["step_count"] == 1
    assert state["observation"] == obs and state["total_reward"] == reward
    assert state["done"] == (terminated or truncated) and state["info"]["steps_left"] == info["steps_left"]


@pytest.mark.parametrize("env_id,kwargs,tools", [
    ("ERL-FrozenLake-v0", {"size": 3}, ["act", "move", "start_episode"]),
    ("ERL-HotpotQA-v0", {"data": "synthetic"}, ["act", "answer", "search", "start_episode"]),
])
def test_mcp_tools_play_a_session(env_id, kwargs, tools):
    local = gym.make(env_id, **kwargs)
    with TestClient(build_app(env_id, env_kwargs=kwargs), base_url=LOCAL) as client:
        listed = _rpc(client, "tools/list", {})["tools"]
        assert sorted(t["name"] for t in listed) == tools
        session = _rpc(client, "openenv/session/create", {})["session_id"]
        first = _rpc(client, "tools/call", {"name": "start_episode", "arguments": {"seed": 2},
                                            "session_id": session})
        assert first == local.reset(seed=2)[0]
        if env_id == "ERL-FrozenLake-v0":
            schema = next(t for t in listed if t["name"] == "move")["inputSchema"]["properties"]["direction"]
            assert schema["enum"] == ["Up", "Down", "Left", "Right"]
            got = _rpc(client, "tools/call", {"name": "move", "arguments": {"direction": "Down"}, "session_id": session})
            obs, reward, *_ = local.step("```Down```")
        else:
            got = _rpc(client, "tools/call", {"name": "search", "arguments": {"query": "nationality"},
                                              "session_id": session})
            obs, reward, *_ = local.step("<search>nationality</search>")
        assert got.startswith(obs) and f"[reward {reward:g}" in got


def test_reflection_adds_the_reflect_tool():
    app = build_app("ERL-FrozenLake-v0", reflection=True, env_kwargs={"size": 3})
    with TestClient(app, base_url=LOCAL) as client:
        names = [t["name"] for t in _rpc(client, "tools/list", {})["tools"]]
    assert "reflect" in names


def test_openenv_validate_accepts_the_packaging_folder():
    command = shutil.which("openenv")
    if command is None:
        pytest.skip("the openenv CLI (openenv-core) is not on PATH")
    folder = ROOT / "deploy" / "openenv"
    result = subprocess.run([command, "validate", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "[OK]" in result.stdout, result.stdout + result.stderr
    for name in ("openenv.yaml", "Dockerfile", "uv.lock", "server/app.py"):
        assert (folder / name).is_file()


def test_the_packaged_app_reads_its_env_from_the_environment():
    code = ("import sys; sys.path.insert(0, 'deploy/openenv'); from fastapi.testclient import TestClient; "
            "from server.app import app; c = TestClient(app, base_url='http://127.0.0.1'); "
            "print(c.get('/metadata').json()['name'], c.get('/web').status_code)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ERL_ENV": "ERL-Sokoban-v0", "ENABLE_WEB_INTERFACE": "true",
           "ERL_ENV_KWARGS": json.dumps({"max_steps": 6})}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["ERL-Sokoban-v0", "200"]


def test_the_mcp_answer_tool_only_ever_answers():
    """As TRL's answer tool: tool-call syntax inside the answer never runs a search; the attempt ends."""
    kwargs = {"data": "synthetic", "num_questions": 5}
    with TestClient(build_app("ERL-HotpotQA-v0", env_kwargs=kwargs), base_url=LOCAL) as client:
        for request_id, text in enumerate(["<search>foo</search>", '{"name": "search", "arguments": {"query": "x"}}',
                                           "Paris} \\boxed{London"]):
            session = _rpc(client, "openenv/session/create", {}, request_id)["session_id"]
            _rpc(client, "tools/call", {"name": "start_episode", "arguments": {"seed": 0}, "session_id": session})
            got = _rpc(client, "tools/call", {"name": "answer", "arguments": {"text": text}, "session_id": session})
            assert "Search results" not in got and "episode over]" in got, (text, got)
