"""Play a grid env yourself: ``python -m erl_envs.play ENV_ID [--seed N] [--mode human|ansi]``.

Playing a few levels is the quickest way to see what a model sees. ``human`` mode opens a pygame window driven by
the arrow keys; ``ansi`` mode reads replies from the terminal and hands each line to ``env.step`` unchanged. The
env is built with ``action_format="lenient"`` (``--action-format paper`` for the models' rule), so a typed ``Up``
or ``u`` is a move; under the paper's format only a reply with the move in a triple-backtick block would be.

Without a display (no ``DISPLAY`` / ``WAYLAND_DISPLAY`` on Linux, ``SDL_VIDEODRIVER=dummy``, or a display pygame
cannot open) ``human`` mode falls back to typed moves with a one-line notice. ``q`` (or ``quit``, ``exit``) and
Ctrl-C end a session in either mode.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

import gymnasium as gym

import erl_envs  # noqa: F401  (registers the ERL env ids)
from erl_envs.grid.actions import ACTION_FORMATS, GridAction, format_action

__all__ = ["main", "play_text", "play_keyboard", "display_problem", "QUIT_WORDS"]

# Typed lines that end a terminal session instead of going to the env.
QUIT_WORDS = frozenset({"q", "quit", "exit", ":q"})


def _describe_step(reward: float, terminated: bool, truncated: bool, info: dict) -> str:
    line = f"[reward {reward:g}] {info.get('feedback', '')}"
    if terminated or truncated:
        line += f"\n=== {info.get('episode_feedback', 'episode over')} ==="
    return line


def play_text(env: gym.Env, seed: int | None, lines: TextIO, out: TextIO) -> int:
    """Play in the terminal until the input ends or a quit word; returns the number of finished episodes."""
    print(f"Instructions:\n{env.unwrapped.instructions}\n", file=out)
    print("Type a move (q to quit). A new level starts when an episode ends.\n", file=out)
    obs, _ = env.reset(seed=seed)
    print(obs, file=out)
    finished = 0
    for line in lines:
        reply = line.rstrip("\n")
        if reply.strip().lower() in QUIT_WORDS:
            break
        finished += _play_turn(env, reply, out)
    return finished


def _new_level(env: gym.Env, out: TextIO) -> None:
    obs, _ = env.reset()
    print("\n--- new level ---", file=out)
    print(obs, file=out)


def _play_turn(env: gym.Env, reply: str, out: TextIO) -> int:
    """Step with a reply, show what happened, start a new level when the episode ends; returns 1 if it ended."""
    obs, reward, terminated, truncated, info = env.step(reply)
    print(_describe_step(reward, terminated, truncated, info), file=out)
    print(obs, file=out)
    ended = terminated or truncated
    if ended:
        _new_level(env, out)
    out.flush()
    return int(ended)


def play_keyboard(env: gym.Env, seed: int | None, out: TextIO = sys.stdout) -> int:
    """Play with the arrow keys in the env's window (R: new level, Esc or Q: quit); returns finished episodes."""
    try:
        import pygame
    except ImportError as e:
        raise gym.error.DependencyNotInstalled("keyboard play needs pygame: `pip install pygame`") from e
    keys = {
        pygame.K_UP: GridAction.UP,
        pygame.K_DOWN: GridAction.DOWN,
        pygame.K_LEFT: GridAction.LEFT,
        pygame.K_RIGHT: GridAction.RIGHT,
    }
    print("Arrow keys move, R starts a new level, Esc or Q quits.", file=out)
    obs, _ = env.reset(seed=seed)
    print(obs, file=out)
    finished = 0
    while True:
        event = pygame.event.wait(200)  # a timeout, so Ctrl-C (SIGINT) is seen even when no key is pressed
        if event.type == pygame.QUIT or (event.type == pygame.KEYDOWN and event.key in (pygame.K_ESCAPE, pygame.K_q)):
            return finished
        if event.type != pygame.KEYDOWN:
            continue
        if event.key == pygame.K_r:
            _new_level(env, out)
        elif event.key in keys:
            finished += _play_turn(env, format_action(keys[event.key]), out)


def display_problem() -> str | None:
    """Why a pygame window cannot be shown here, or None when it can."""
    driver = os.environ.get("SDL_VIDEODRIVER", "").lower()
    if driver in ("dummy", "offscreen"):
        return f"SDL_VIDEODRIVER={driver}"
    if sys.platform.startswith(("linux", "freebsd", "openbsd")) and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no DISPLAY or WAYLAND_DISPLAY"
    try:
        import pygame

        pygame.display.init()
    except Exception as error:  # pygame missing, or SDL cannot open the display
        return f"pygame cannot open a window ({error})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m erl_envs.play", description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id", help="e.g. ERL-FrozenLake-v0 or ERL-Sokoban-v0")
    parser.add_argument("--seed", type=int, default=None, help="seed of the first level (later levels follow from it)")
    parser.add_argument("--mode", choices=("human", "ansi"), default="human",
                        help="human: pygame window and arrow keys; ansi: type replies in the terminal")
    parser.add_argument("--action-format", choices=ACTION_FORMATS, default="lenient",
                        help="how typed lines are read: lenient (Up, u, ...; default) or paper (```Up``` only)")
    args = parser.parse_args(argv)
    mode = args.mode
    if mode == "human" and (problem := display_problem()):
        print(f"No display ({problem}): playing in the terminal instead; type Up, Down, Left or Right, q to quit.",
              file=sys.stderr)
        mode = "ansi"
    env = gym.make(args.env_id, render_mode=mode, action_format=args.action_format)
    try:
        if mode == "ansi":
            play_text(env, args.seed, sys.stdin, sys.stdout)
        else:
            play_keyboard(env, args.seed)
    except KeyboardInterrupt:
        print("\nStopped.", file=sys.stderr)
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
