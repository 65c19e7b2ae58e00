"""python -m erl_envs.play: terminal play through stdin, and arrow-key play in a headless window."""

import io
import os
import signal
import subprocess
import sys

import gymnasium as gym
import pytest

from erl_envs.play import play_keyboard, play_text
from paths import ROOT


def test_terminal_play_sends_typed_lines_to_the_env():
    result = subprocess.run(
        [sys.executable, "-m", "erl_envs.play", "ERL-FrozenLake-v0", "--seed", "2", "--mode", "ansi"],
        input="Up\n```left```\nhop\nquit\nDown\n", cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("Instructions:")
    assert (ROOT / "tests" / "golden" / "frozen_lake_seed2.txt").read_text() in out
    assert "[reward 0] moved Up" in out and "[reward 0] moved Left" in out
    assert "could not parse the action" in out
    # "quit" stops the session: the "Down" after it is never played.
    assert out.count("[reward") == 3


def test_terminal_play_starts_a_new_level_after_an_episode():
    env = gym.make("ERL-FrozenLake-v0", render_mode="ansi")
    out = io.StringIO()
    finished = play_text(env, 0, io.StringIO("\n".join(["x"] * 8) + "\n"), out)
    assert finished == 1
    text = out.getvalue()
    assert "=== No valid actions" in text and "--- new level ---" in text
    env.close()


def test_unknown_env_id_fails_clearly():
    result = subprocess.run(
        [sys.executable, "-m", "erl_envs.play", "ERL-Nothing-v0", "--mode", "ansi"],
        input="", cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0 and "ERL-Nothing" in result.stderr


def test_arrow_keys_drive_the_env():
    pygame = pytest.importorskip("pygame")
    env = gym.make("ERL-FrozenLake-v0", render_mode="human")
    env.unwrapped.metadata = {**env.unwrapped.metadata, "render_fps": 0}
    pygame.display.init()
    for key in (pygame.K_RIGHT, pygame.K_a, pygame.K_r, pygame.K_DOWN, pygame.K_ESCAPE, pygame.K_UP):
        pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=key))
    out = io.StringIO()
    play_keyboard(env, 0, out)
    text = out.getvalue()
    env.close()
    # Right and Down were played (A is not a move; R started a new level); Escape quit before the last Up.
    assert text.count("[reward") == 2 and "moved Right" in text and "--- new level ---" in text


def _without_display() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER")}
    return {**env, "PYTHONPATH": str(ROOT)}


def test_without_a_display_human_mode_falls_back_to_typed_moves_and_q_quits():
    result = subprocess.run(
        [sys.executable, "-m", "erl_envs.play", "ERL-FrozenLake-v0", "--seed", "2"],
        input="Up\nq\nDown\n", cwd=ROOT, capture_output=True, text=True, timeout=60, env=_without_display(),
    )
    assert result.returncode == 0, result.stderr
    notice = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(notice) == 1 and notice[0].startswith("No display (no DISPLAY or WAYLAND_DISPLAY)")
    assert "[reward 0] moved Up" in result.stdout
    assert result.stdout.count("[reward") == 1  # q ended the session before Down


def test_ctrl_c_quits_a_terminal_session():
    process = subprocess.Popen(
        [sys.executable, "-m", "erl_envs.play", "ERL-FrozenLake-v0", "--seed", "2"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True,
        env=_without_display(),
        # A job started in the background by a shell inherits SIGINT ignored, and Python then keeps it ignored:
        # the child gets the default disposition, as a terminal session has.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        line = ""
        while "Steps remaining" not in line:  # the first level is on screen: the game waits for a move
            line = process.stdout.readline()
            assert line, process.stderr.read()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
        assert "Stopped." in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
        for stream in (process.stdin, process.stdout, process.stderr):
            stream.close()
