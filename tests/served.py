"""Start a real ``erl-serve`` process on 127.0.0.1 and a free port for a test, and stop it, or run one in the test's
own process; and ``Test-Work-v0``, an env whose steps can be slow or fail (shared by the serve tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import gymnasium as gym
import requests

from erl_envs.protocol import FreeText

START_TIMEOUT_S = 120.0  # openenv-core imports gradio; on a loaded 2-core machine start-up takes tens of seconds


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``with ServerProcess("--env", "ERL-FrozenLake-v0") as server: server.url``; SIGTERM on exit."""

    def __init__(self, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "erl_envs.integrations.openenv_server", *args,
                        "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "info"]
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "ServerProcess":
        return self.launch().wait_ready()

    def launch(self) -> "ServerProcess":
        """Start the process without waiting, so that several servers can start at once."""
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=dict(os.environ))
        return self

    def wait_ready(self) -> "ServerProcess":
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"erl-serve exited with {self.process.returncode}: {self.process.stdout.read()}")
            try:
                requests.get(self.url + "/health", timeout=1).raise_for_status()
                return self
            except requests.RequestException:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"erl-serve did not answer on {self.url} within {START_TIMEOUT_S:g} s")

    def stop(self, timeout: float = 30.0) -> tuple[int, str]:
        """SIGTERM, wait, and return (exit code, output); kill only if it does not stop in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode, self.process.stdout.read()

    def __exit__(self, *exc) -> None:
        self.stop()


class InProcessServer:
    """``with InProcessServer(app, port=...) as server: server.url``: erl-serve's uvicorn configuration
    (``openenv_server.server_config``) in a thread of the test process; starts in a second, not tens."""

    def __init__(self, app, port: int | None = None, **config):
        import uvicorn

        from erl_envs.integrations.openenv_server import server_config

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", self.port, log_level="warning", **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "InProcessServer":
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started, "the in-process server did not start"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)

    def __exit__(self, *exc) -> None:
        self.stop()


class WorkEnv(gym.Env):
    """A text env for server tests: ``work S`` holds the CPU for S seconds (a slow but legal request), ``crash``
    raises (a bug in an env), anything else is echoed. Making one takes ``make_delay`` seconds."""

    metadata = {"render_modes": []}

    def __init__(self, make_delay: float = 0.0):
        time.sleep(make_delay)
        self.observation_space = FreeText(max_length=100)
        self.action_space = FreeText(max_length=100)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options and "fail" in options:
            raise ValueError("the option 'fail' is refused")
        return "ready", {}

    def step(self, action):
        if action.startswith("work "):
            end = time.perf_counter() + float(action.split()[1])
            while time.perf_counter() < end:  # pure Python: holds the GIL between switches, as a slow env does
                sum(range(1000))
        if action == "crash":
            raise RuntimeError("a bug in the env")
        return f"echo {action}", 0.0, False, False, {}


if "Test-Work-v0" not in gym.registry:
    gym.register("Test-Work-v0", entry_point=WorkEnv, disable_env_checker=True)
