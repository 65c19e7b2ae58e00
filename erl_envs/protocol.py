"""The small protocol that lets ``ReflectionWrapper`` and the trainer drive any text env, ours or a user's, and the
text pieces every part of erl_envs shares (``FreeText``, ``TEXT_CHARSET``, ``utf8_safe``).

Required: observations and actions are ``str``; ``reset(seed=s, options=o)`` with the same ``s`` and ``o`` gives the
same task instance (the wrapper replays an instance this way for the second attempt).

Optional, with defaults when an env does not provide them:

=========================================  ==========================================================================
``env.unwrapped.instructions``             the initial system prompt (default: ``GENERIC_INSTRUCTIONS``)
``env.unwrapped.prompt_style``             ``"grid"``, ``"qa"`` or ``"generic"``: which reflection instructions
                                           and format reminder apply (default ``"generic"``)
``env.unwrapped.prompt_set``               ``"paper"``, ``"small"`` or ``"lenient"``: with ``game_name``
``env.unwrapped.game_name``                ``"FrozenLake"`` or ``"Sokoban"`` and style ``"grid"``, ``"paper"``
                                           selects the paper's reflection texts, ``"small"`` the short ones for
                                           small models (default ``"lenient"``, no game)
``info["action_read"]`` (each step)        the action as the env read it, listed in paper-set traces (default None)
``info["position"]``, ``["boxes"]``,       cells listed in paper-set traces when all three are given (Sokoban)
``["goals"]`` (each step)
``info["task_id"]`` (from ``reset``)       a stable id of the instance, for memory retrieval and logs
                                           (default: the reset seed)
``info["task_text"]`` (from ``reset``)     text describing the instance, for retrieval memory (default: the
                                           first observation)
``info["feedback"]`` (each step)           a one-line comment on the step, e.g. "moved into a hole"
                                           (default: "reward R")
``info["took_effect"]`` (each step)        whether the action changed anything (default ``True``)
``info["success"]`` (last step)            whether the task is solved (default: return >= the gate threshold)
``info["episode_feedback"]`` (last step)   one line on the outcome for the reflection (default: the return)
=========================================  ==========================================================================
"""

from __future__ import annotations

import string
from typing import Any, Mapping

import gymnasium as gym
from gymnasium import spaces

__all__ = ["GENERIC_INSTRUCTIONS", "STYLES", "TEXT_CHARSET", "FreeText", "utf8_safe", "instructions_of",
           "prompt_style_of", "step_comment", "episode_feedback", "task_id_of"]

# The system prompt of an env that brings none.
GENERIC_INSTRUCTIONS = (
    "You are an agent acting in a text environment. Read each observation and reply with your next action."
)

# The prompt styles an env may declare (``env.unwrapped.prompt_style``): which reflection texts apply to it.
STYLES = ("grid", "qa", "generic")

# Printable ASCII plus the whitespace our messages use. Observations of the grid games only ever hold these
# characters, so ``gymnasium.spaces.Text(charset=TEXT_CHARSET)`` really contains every observation.
TEXT_CHARSET = frozenset(string.ascii_letters + string.digits + string.punctuation + " \t\n")


class FreeText(spaces.Text):
    """A Text space that contains every ``str``.

    The wrapper's observations include the reflection request, which quotes the agent's own replies and
    model-written memory, and its actions include reflections: no character set bounds them. ``max_length`` and
    the charset only shape ``sample()``.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def __repr__(self) -> str:
        return f"FreeText(sample_max_length={self.max_length})"


def utf8_safe(text: str) -> str:
    """``text`` with lone surrogates replaced: a str may hold them (model output decoded leniently), UTF-8 and
    JSON cannot, so one would break every later save of the memory or of an episode record."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")


def instructions_of(env: gym.Env) -> str:
    """The env's initial system prompt."""
    text = getattr(env.unwrapped, "instructions", None)
    return text if isinstance(text, str) and text else GENERIC_INSTRUCTIONS


def prompt_style_of(env: gym.Env) -> str:
    style = getattr(env.unwrapped, "prompt_style", "generic")
    return style if style in STYLES else "generic"


def step_comment(info: Mapping[str, Any], reward: float) -> str:
    comment = info.get("feedback")
    return comment if isinstance(comment, str) and comment else f"reward {reward:g}"


def episode_feedback(info: Mapping[str, Any], total_return: float) -> str:
    line = info.get("episode_feedback")
    return line if isinstance(line, str) and line else f"The episode ended with return {total_return:g}."


def task_id_of(info: Mapping[str, Any], seed: int | None) -> str:
    task_id = info.get("task_id")
    return str(task_id) if task_id is not None else f"seed-{seed}"
