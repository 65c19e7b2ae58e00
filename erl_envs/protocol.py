"""The small protocol that lets ``ReflectionWrapper`` and the trainer drive any text env, ours or a user's.

Required: observations and actions are ``str``; ``reset(seed=s, options=o)`` with the same ``s`` and ``o`` gives the
same task instance (the wrapper replays an instance this way for the second attempt).

Optional, with defaults when an env does not provide them:

=========================================  ==========================================================================
``env.unwrapped.instructions``             the initial system prompt (default: ``prompts.GENERIC_INSTRUCTIONS``)
``env.unwrapped.prompt_style``             ``"grid"``, ``"qa"`` or ``"generic"``: which reflection instructions
                                           and format reminder apply (default ``"generic"``)
``env.unwrapped.prompt_set``               ``"paper"`` or ``"lenient"``: with ``game_name`` ``"FrozenLake"`` or
``env.unwrapped.game_name``                ``"Sokoban"`` and style ``"grid"``, ``"paper"`` selects the paper's
                                           reflection texts (default ``"lenient"``, no game)
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

from typing import Any, Mapping

import gymnasium as gym

from erl_envs import prompts

__all__ = ["instructions_of", "prompt_style_of", "step_comment", "episode_feedback", "task_id_of"]


def instructions_of(env: gym.Env) -> str:
    """The env's initial system prompt."""
    text = getattr(env.unwrapped, "instructions", None)
    return text if isinstance(text, str) and text else prompts.GENERIC_INSTRUCTIONS


def prompt_style_of(env: gym.Env) -> str:
    style = getattr(env.unwrapped, "prompt_style", "generic")
    return style if style in prompts.STYLES else "generic"


def step_comment(info: Mapping[str, Any], reward: float) -> str:
    comment = info.get("feedback")
    return comment if isinstance(comment, str) and comment else f"reward {reward:g}"


def episode_feedback(info: Mapping[str, Any], total_return: float) -> str:
    line = info.get("episode_feedback")
    return line if isinstance(line, str) and line else f"The episode ended with return {total_return:g}."


def task_id_of(info: Mapping[str, Any], seed: int | None) -> str:
    task_id = info.get("task_id")
    return str(task_id) if task_id is not None else f"seed-{seed}"
