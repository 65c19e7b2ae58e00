"""The Verifiers adapter: its taskset, and real Verifiers rollouts against an OpenAI-compatible endpoint on 127.0.0.1.

The endpoint is a scripted responder behind the chat-completions wire format (streamed, as Verifiers' client asks):
it plays FrozenLake by breadth-first search on the grid it is shown, or always answers Up (chosen by the first
grid), so the rollouts score both 1 and 0. Verifiers' own chat program, interception server and client carry every
call; the test replays the replies Verifiers recorded on a local env and expects the same reward.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import deque

import gymnasium as gym
import pytest

vf = pytest.importorskip("verifiers.v1", reason="needs the [verifiers] extra")
uvicorn = pytest.importorskip("uvicorn")

from fastapi import FastAPI, Request  # noqa: E402  (module level: FastAPI resolves the handler's annotations here)
from fastapi.responses import StreamingResponse  # noqa: E402

import erl_envs  # noqa: E402,F401
from erl_envs.integrations.verifiers import TASKSET_ID, ERLEnv, load_environment  # noqa: E402
from served import free_port  # noqa: E402

SMALL = {"size": (2, 4)}
MOVES = {(-1, 0): "Up", (1, 0): "Down", (0, -1): "Left", (0, 1): "Right"}


def test_load_environment_builds_the_tasks():
    env = load_environment("ERL-FrozenLake-v0", num_tasks=3, seed=5, **SMALL)
    assert isinstance(env, ERLEnv) and env.config.taskset.id == TASKSET_ID
    tasks = list(env.taskset)
    local = gym.make("ERL-FrozenLake-v0", **SMALL)
    assert [t.data.info["seed"] for t in tasks] == [5, 6, 7]
    assert tasks[1].data.prompt == local.reset(seed=6)[0]
    assert tasks[1].data.system_prompt == local.unwrapped.instructions
    with pytest.raises(ValueError, match="unknown env id"):
        load_environment("ERL-Nope-v0")


@pytest.mark.parametrize("env_id,kwargs", [("ERL-FrozenLake-v0", SMALL), ("ERL-Sokoban-v0", {}),
                                            ("ERL-HotpotQA-v0", {"data": "synthetic"})])
def test_gold_check_solves_every_task(env_id, kwargs):
    """vf-validate's gold check: the reference solution of each instance, replayed in a fresh env, solves it, and it
    is a shortest one for the grid games (the env's own optimal_steps)."""
    from erl_envs.integrations.verifiers import gold_replies

    env = load_environment(env_id, num_tasks=6, seed=0, **kwargs)
    tasks = list(env.taskset)
    assert [asyncio.run(task.validate(None)) for task in tasks] == [True] * 6
    local = gym.make(env_id, **kwargs)
    for task in tasks[:3]:
        obs, info = local.reset(seed=task.data.info["seed"])
        replies = gold_replies(local, obs, info)
        if "optimal_steps" in info:
            assert len(replies) == info["optimal_steps"]


def test_gold_check_catches_a_wrong_solution(monkeypatch):
    from erl_envs.integrations import verifiers as adapter

    task = next(iter(load_environment("ERL-FrozenLake-v0", num_tasks=1, seed=0, **SMALL).taskset))
    monkeypatch.setattr(adapter, "gold_replies", lambda env, obs, info: ["```Up```"] * 8)
    assert asyncio.run(task.validate(None)) is False


def test_vf_validate_reports_checked_tasks(tmp_path):
    """Verifiers' own CLI, with the local runtime (its default is a hosted sandbox): every gold check passes."""
    import shutil
    import subprocess

    from paths import ROOT

    command = shutil.which("vf-validate")
    if command is None:
        pytest.skip("vf-validate is not on PATH")
    result = subprocess.run([command, TASKSET_ID, "--runtime.type", "subprocess", "-n", "4", "--only-gold",
                             "--rich", "false", "--taskset.env-kwargs", json.dumps({"size": [2, 4]})],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(next(tmp_path.glob("outputs/*/summary.json")).read_text())
    assert summary["outcomes"]["valid"] == 4 and summary["outcomes"]["unchecked"] == 0


def _bfs_move(grid: str) -> str:
    """The first move of a shortest path from A to B avoiding C on a rendered FrozenLake grid."""
    rows = [[cell.strip() for cell in line.split("\t") if cell.strip()] for line in grid.splitlines()
            if "\t" in line]
    start = next((r, c) for r, row in enumerate(rows) for c, s in enumerate(row) if s == "A")
    first = {start: None}
    queue = deque([start])
    while queue:
        r, c = queue.popleft()
        if rows[r][c] == "B":
            while first[(r, c)] is not None and first[(r, c)][0] != start:
                r, c = first[(r, c)][0]
            return first[(r, c)][1]
        for (dr, dc), name in MOVES.items():
            nr, nc = r + dr, c + dc
            if 0 <= nr < len(rows) and 0 <= nc < len(rows[nr]) and (nr, nc) not in first and rows[nr][nc] != "C":
                first[(nr, nc)] = ((r, c), name)
                queue.append((nr, nc))
    return "Up"


def _reply(messages: list[dict]) -> str:
    """Plays well when the first grid has an even number of holes, else always says Up."""
    first_grid = next(m["content"] for m in messages if m["role"] == "user")
    return "```Up```" if first_grid.count("C") % 2 else f"```{_bfs_move(messages[-1]['content'])}```"


def _responder():
    """An OpenAI chat-completions endpoint (streamed and plain) answering with ``_reply``."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        text = _reply(body["messages"])
        head = {"id": "scripted", "created": int(time.time()), "model": body["model"]}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not body.get("stream"):
            return {**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

        def events():
            chunk = {**head, "object": "chat.completion.chunk"}
            yield "data: " + json.dumps({**chunk, "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]}) + "\n\n"
            yield "data: " + json.dumps({**chunk, "usage": usage, "choices": [
                {"index": 0, "delta": {}, "finish_reason": "stop"}]}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@pytest.fixture
def endpoint(monkeypatch):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(_responder(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    monkeypatch.setenv("ERL_TEST_OPENAI_KEY", "local")
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.slow
def test_verifiers_rollouts_score_the_env_reward(endpoint):
    env = load_environment("ERL-FrozenLake-v0", num_tasks=4, seed=0, **SMALL)
    tasks = list(env.taskset)
    ctx = vf.ModelContext(client=vf.EvalClientConfig(base_url=endpoint, api_key_var="ERL_TEST_OPENAI_KEY"),
                          model="scripted")

    async def rollouts():
        async with env.serving():
            return [await env.run_slot(slot, ctx, None, None) for task in tasks for slot in env.slots(task, 1)]

    episodes = asyncio.run(asyncio.wait_for(rollouts(), timeout=300))
    rewards = []
    for task, episode in zip(tasks, episodes):
        trace = episode.traces[0]
        assert trace.ok, trace.errors
        replies = [node.message.content for node in trace.nodes if node.message.role == "assistant"]
        local = gym.make("ERL-FrozenLake-v0", **SMALL)
        local.reset(seed=task.data.info["seed"])
        total = 0.0
        for reply in replies:
            _, reward, terminated, truncated, _ = local.step(reply)
            total += reward
            if terminated or truncated:
                break
        assert terminated or truncated, "the rollout stopped before the episode ended"
        assert trace.rewards["erl_return"].score == total
        rewards.append(total)
    assert len(rewards) == 4 and 1.0 in rewards  # the search plays reach the goal: a reward that can be 1
