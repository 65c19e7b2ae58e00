"""The small protocol that lets ``ReflectionWrapper`` and the trainer drive any text env, ours or a user's, and the
text pieces every part of erl_envs shares (``FreeText``, ``TEXT_CHARSET``, ``utf8_safe``).

Spaces: our envs declare observations as ``BoundedText`` (a ``Text`` space that Gymnasium's async vector envs carry
through shared memory intact, so ``gym.make_vec(..., vectorization_mode="async")`` works with its defaults) and
actions as ``FreeText`` (``contains`` is true of every ``str``, as ``step`` reads any str); an unbounded ``FreeText``
observation space (``ReflectionWrapper``'s) cannot use shared memory, and Gymnasium's ``AsyncVectorEnv`` refuses it at
construction in one line naming ``ReflectionAsyncVectorEnv``: pipes alone would not do, as Gymnasium's info merging
fails at the first step where the wrappers' phases differ (an attempt number beside a reflect step's None).

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

import multiprocessing
import string
from collections.abc import Sequence
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

__all__ = ["GENERIC_INSTRUCTIONS", "STYLES", "TEXT_CHARSET", "FreeText", "BoundedText", "SharedTextView", "utf8_safe",
           "instructions_of",
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


class BoundedText(spaces.Text):
    """A ``Text`` space of at most ``max_length`` characters that Gymnasium's async vector envs can carry through
    shared memory.

    Gymnasium (1.4) reads a shared-memory ``Text`` buffer once, when the vector env is built, into a tuple of str
    that never changes, so every later observation came back as the initial buffer (a string of tabs). Here each
    env owns a slot of ``4 + 4 * max_length`` bytes (a length, then UTF-8), and reading gives a ``SharedTextView``
    that decodes the slot on access, so it follows the buffer as Gymnasium's array views do.
    """


class SharedTextView(Sequence):
    """The observations of an async vector env of ``BoundedText``: a live, read-only view of the shared slots.

    A deep copy (what the vector env returns with its default ``copy=True``) is a plain tuple of str.
    """

    def __init__(self, space: BoundedText, shared_memory, n: int):
        self._slots = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8).reshape(n, _slot_bytes(space))

    def __len__(self) -> int:
        return self._slots.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        slot = self._slots[index]
        length = int.from_bytes(slot[:4].tobytes(), "little")
        return slot[4: 4 + length].tobytes().decode("utf-8")

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTextView({tuple(self)!r})"


def _slot_bytes(space: spaces.Text) -> int:
    return 4 + 4 * space.max_length  # a UTF-8 character takes at most 4 bytes


@create_shared_memory.register(BoundedText)
def _create_bounded_text_memory(space: BoundedText, n: int = 1, ctx=multiprocessing):
    return ctx.Array("B", n * _slot_bytes(space))


@read_from_shared_memory.register(BoundedText)
def _read_bounded_text_memory(space: BoundedText, shared_memory, n: int = 1) -> SharedTextView:
    return SharedTextView(space, shared_memory, n)


@write_to_shared_memory.register(BoundedText)
def _write_bounded_text_memory(space: BoundedText, index: int, value: str, shared_memory) -> None:
    data = value.encode("utf-8")
    if len(data) > 4 * space.max_length:
        raise ValueError(f"an observation of {len(value)} characters does not fit the space's max_length "
                         f"{space.max_length}; make the vector env with shared_memory=False")
    size = _slot_bytes(space)
    slots = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)
    start = index * size
    slots[start: start + 4] = np.frombuffer(len(data).to_bytes(4, "little"), dtype=np.uint8)
    slots[start + 4: start + 4 + len(data)] = np.frombuffer(data, dtype=np.uint8)


@create_shared_memory.register(FreeText)
def _refuse_free_text_memory(space: FreeText, n: int = 1, ctx=multiprocessing):
    # A ValueError, not Gymnasium's CustomSpaceError: AsyncVectorEnv replaces the latter with a vaguer error of its own
    # (suggesting shared_memory=False, which fails later on the infos) and leaves this line as the traceback's cause.
    raise ValueError("FreeText observations (ReflectionWrapper's) have no length bound, so an async vector env cannot "
                     "carry them in shared memory: use erl_envs.ReflectionAsyncVectorEnv(env_fns), which sends them "
                     "through pipes and keeps each sub-env's info whole (Gymnasium's info merging cannot batch the "
                     "wrapper's records)")


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
