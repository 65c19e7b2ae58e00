"""Benchmark erl-serve: steps per second over the wire (RemoteEnv -> erl-serve on 127.0.0.1) vs in-process.

    python benchmarks/speed/bench_remote.py            # full run (a few minutes on 2 cores)
    python benchmarks/speed/bench_remote.py --quick    # a smoke run

For each env, four rows: one env in-process, 32 envs in-process (stepped round robin in one thread), one
``RemoteEnv`` session, and 32 ``RemoteEnv`` sessions played by 32 client threads at once. Actions are uniformly
random replies (the four moves in backticks); an episode that ends is reset with the next seed, so reset and level
generation are in the figures. Over the wire a step is one HTTP request (JSON in and out, the env's info included);
the server is a real ``erl-serve`` process started here and stopped with SIGTERM. The client and server share the
machine, so on 2 cores the 32-session row measures both sides together. Results go to benchmarks/results/remote.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import erl_envs  # noqa: E402,F401
from erl_envs.integrations.remote import RemoteEnv  # noqa: E402

REPLIES = ["```Up```", "```Down```", "```Left```", "```Right```"]
ENVS = ["ERL-FrozenLake-v0", "ERL-Sokoban-v0"]


def play(env: gym.Env, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    episode = 0
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(REPLIES[rng.integers(4)])
        if terminated or truncated:
            episode += 1
            env.reset(seed=seed * 100_000 + episode)


def in_process(env_id: str, sessions: int, steps: int) -> float:
    envs = [gym.make(env_id) for _ in range(sessions)]
    rngs = [np.random.default_rng(i) for i in range(sessions)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    start = time.perf_counter()
    for _ in range(steps):
        for i, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(REPLIES[rngs[i].integers(4)])
            if terminated or truncated:
                env.reset()
    return sessions * steps / (time.perf_counter() - start)


def over_the_wire(url: str, sessions: int, steps: int) -> float:
    envs = [RemoteEnv(url) for _ in range(sessions)]
    threads = [threading.Thread(target=play, args=(env, steps, i)) for i, env in enumerate(envs)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for env in envs:
        env.close()
    return sessions * steps / elapsed


def start_server(env_id: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "erl_envs.integrations.openenv_server", "--env", env_id,
                                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            requests.get(url + "/health", timeout=1)
            return process, url
        except requests.RequestException:
            time.sleep(0.25)
    process.kill()
    raise RuntimeError(f"erl-serve for {env_id} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few steps, to check that the script runs")
    parser.add_argument("--steps", type=int, default=1000, help="steps of the 1-session rows")
    parser.add_argument("--steps-per-session", type=int, default=300, help="steps per session of the 32 rows")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "remote.md"))
    args = parser.parse_args()
    steps, per_session = (200, 20) if args.quick else (args.steps, args.steps_per_session)
    load_before = os.getloadavg()[0]

    lines = ["# erl-serve: steps per second over the wire vs in-process", "",
             f"`python benchmarks/speed/bench_remote.py{' --quick' if args.quick else ''}`; {os.cpu_count()} CPU cores "
             f"({platform.processor() or platform.machine()}), Python {platform.python_version()}, client and "
             "server on the same machine (127.0.0.1). 1-session rows: "
             f"{steps} steps; 32-session rows: {per_session} steps per session.", "",
             "| env | where | sessions | steps/s | vs in-process |", "|---|---|---|---|---|"]
    for env_id in ENVS:
        process, url = start_server(env_id)
        try:
            for sessions, n in [(1, steps), (32, per_session)]:
                local = in_process(env_id, sessions, n)
                remote = over_the_wire(url, sessions, n)
                lines.append(f"| {env_id} | in-process | {sessions} | {local:,.0f} | 1 |")
                lines.append(f"| {env_id} | erl-serve (HTTP) | {sessions} | {remote:,.0f} | {remote / local:.3f} |")
                print(lines[-2], lines[-1], sep="\n", flush=True)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    lines[2] += (f" Load average (1 min) {load_before:.1f} before the run and {os.getloadavg()[0]:.1f} after it, "
                 f"on {os.cpu_count()} cores.")
    lines += ["", "A remote step costs one HTTP round trip on localhost plus JSON encoding of the observation and "
              "info; the envs themselves step in microseconds, so over the wire the request, not the env, is the "
              "cost. With 32 sessions the server steps sessions in parallel threads, and the client threads overlap "
              "their waits, so throughput grows with sessions until the cores are busy."]
    Path(args.output).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
