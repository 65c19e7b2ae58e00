"""ReflectionWrapper: the ERL episode (attempt, reflection, second attempt) through the ordinary Gymnasium API.

Any text env that follows ``erl_envs.protocol`` can be wrapped: ours, or a user's. The wrapper owns the episode's
seed so that the second attempt replays the very same task instance, gates on the first attempt's outcome, builds
the reflection request from the trace, reads the new system prompt out of the reflection, keeps the memory, and
hands back one complete, JSON-serialisable record of the episode.
"""

from __future__ import annotations

import copy
import math
import operator
import warnings
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from erl_envs import protocol
from erl_envs.grid import prompts as grid_prompts
from erl_envs.grid.text import SymbolSet
from erl_envs.protocol import TEXT_CHARSET, FreeText, utf8_safe
from erl_envs.reflection import prompts
from erl_envs.reflection.prompt_block import (CHARS_PER_TOKEN, DEFAULT_MAX_REFLECTION_CHARS, MAX_REFLECTION_CHARS,
                                              MEMORY_RULES, PROMPT_CLOSE, PROMPT_OPEN, extract_prompt,
                                              reflection_char_limit, with_reminder)
from erl_envs.reflection.record import to_jsonable
from erl_envs.reflection.trace import (DEFAULT_MAX_FIELD_CHARS, TRACE_RULES, ReflectionRequest, TraceStep,
                                       format_paper_trace, format_small_trace, format_trace, paper_feedback,
                                       paper_metrics, paper_task)

__all__ = ["ReflectionWrapper", "PHASES", "MEMORY_RULES", "TRACE_RULES", "PROMPT_OPEN", "PROMPT_CLOSE",
           "extract_prompt", "with_reminder", "reflection_char_limit", "to_jsonable", "DEFAULT_MAX_REFLECTION_CHARS",
           "MAX_REFLECTION_CHARS", "CHARS_PER_TOKEN"]

PHASES = ("attempt1", "reflect", "attempt2")


def _check_text(value: Any, what: str) -> str:
    if isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}; decode it first, "
                        "e.g. value.decode('utf-8', errors='replace')")
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    return value


def _copy_options(options: Any) -> Any:
    try:
        return copy.deepcopy(options)
    except Exception:  # e.g. an open file or a model in the options: share it rather than fail
        return copy.copy(options)


def _as_text(obs: Any) -> str:
    return obs if isinstance(obs, str) else str(obs)


def _positions(info: dict) -> str:
    """Player, boxes and goals after a step, from an env info that has them (Sokoban's); else ""."""
    if not {"position", "boxes", "goals"} <= info.keys():
        return ""
    cells = lambda items: ", ".join(f"({r}, {c})" for r, c in items)  # noqa: E731
    return (f"After it: player at {cells([info['position']])}; boxes at {cells(info['boxes'])}; "
            f"goals at {cells(info['goals'])} (row, column from the top left, counting from 0).")


@dataclass
class _Attempt:
    """One attempt as it unfolds: raw observations (the first included), actions, rewards and inner infos."""

    system_prompt: str
    observations: list[Any]
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False

    def add(self, action: str, obs: Any, reward: float, info: dict, terminated: bool, truncated: bool) -> None:
        self.actions.append(action)
        self.observations.append(obs)
        self.rewards.append(float(reward))
        self.infos.append(info)
        self.terminated, self.truncated = bool(terminated), bool(truncated)

    @property
    def total(self) -> float:
        return float(sum(self.rewards))

    def success(self, threshold: float) -> bool:
        # The env's own verdict when it gives one (HotpotQA: exact match, while the return is partial-credit F1).
        last = self.infos[-1] if self.infos else {}
        if "success" in last:
            return bool(last["success"])
        return self.total >= threshold

    def feedback(self) -> str:
        return protocol.episode_feedback(self.infos[-1] if self.infos else {}, self.total)

    def trace_steps(self) -> tuple[TraceStep, ...]:
        last = len(self.actions) - 1
        return tuple(
            TraceStep(
                observation=_as_text(self.observations[i]),
                action=self.actions[i],
                reward=self.rewards[i],
                took_effect=bool(self.infos[i].get("took_effect", True)),
                terminated=self.terminated and i == last,
                truncated=self.truncated and i == last,
                comment=protocol.step_comment(self.infos[i], self.rewards[i]),
                action_read=self.infos[i].get("action_read"),
                action_reported="action_read" in self.infos[i],
                positions=_positions(self.infos[i]),
            )
            for i in range(len(self.actions))
        )

    def to_record(self, success: bool) -> dict:
        return {
            "system_prompt": self.system_prompt,
            "observations": to_jsonable(self.observations),
            "actions": list(self.actions),
            "rewards": list(self.rewards),
            "infos": to_jsonable(self.infos),
            "return": self.total,
            "success": bool(success),
            "terminated": self.terminated,
            "truncated": self.truncated,
        }


def _check_threshold(value: Any, name: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    if math.isnan(value):
        raise ValueError(f"{name} must not be NaN")
    return value


class ReflectionWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Turn a text env into ERL episodes: attempt 1, then after a failure a reflection and attempt 2 on the same task.

    ## Description
    The paper's experience -> reflection -> retry loop (PAPER.md section 1) as one Gymnasium episode, so any
    agent or trainer that can play a text env can run ERL. Works on every erl_envs env and on any user env that
    follows ``erl_envs.protocol`` (str observations and actions, deterministic in its reset seed); the optional
    protocol hooks (per-step ``feedback``, ``took_effect``, ``success``, ``episode_feedback``, ``task_id``,
    ``task_text``) have defaults.

    ## Phases
    ``info["phase"]`` says which phase the *next* action belongs to; ``info["system_prompt"]`` is the system prompt
    for it; ``info["new_conversation"]`` is True when ``obs`` starts a new conversation (the agent's context
    becomes ``[system_prompt, obs]``).

    1. ``attempt1``: ``reset`` starts the first attempt with the env's initial instructions.
    2. When attempt 1 ends: if it succeeded (the env's ``info["success"]`` on its last step when the env reports
       it, else ``return >= gate_threshold``) the episode ends there. Otherwise the episode goes on (``terminated``
       and ``truncated`` are False) and ``obs`` is the reflection request: the base prompt (the memory's prompt if
       there is one, else the initial instructions; under the grid games' paper set the reference's initial prompt,
       which for Sokoban lacks the push-rule reminder its attempts see), the trace (each step's observation, action,
       reward, whether it took effect, done flag, one-line comment), the return and the episode feedback line.
    3. ``reflect``: the action is the reflection text (reward 0.0). The new system prompt is the last non-empty
       ``<prompt>...</prompt>`` block (``memory_rule="paper"``: the first block, empty meaning none); if there is
       none, the base prompt is used and ``info["reflection_fallback"]`` says so. With a ``reflector`` the wrapper
       calls it itself and this phase is never returned to the agent.
    4. ``attempt2``: the inner env is reset to the same instance (same seed and options) and played with the new
       prompt plus the format reminder (``"paper"``: appended after a blank line unless the prompt already ends
       with it, ``with_reminder``). The episode ends when attempt 2 ends.

    ## Rewards
    Each step returns the inner env's reward; ``info["attempt"]`` says which attempt it belongs to (1 or 2, None on
    the reflect step, whose reward is 0.0). A trainer rewards the reflection with attempt 2's return (r2).

    ## Information
    Every info: ``phase``, ``system_prompt``, ``new_conversation``, ``task_id``, ``episode_seed``. ``reset`` adds
    ``task_text`` and the inner reset info as ``env_info``. ``step`` adds ``attempt`` and, for inner steps,
    ``step_info`` (the inner info). The step that starts attempt 2 adds ``env_info`` (the inner reset info) and,
    after a reflection, ``reflection_fallback`` and ``reflection_fallback_reason`` ("" when the tags were found).
    The last step of the episode adds ``record``; its ``phase`` and ``system_prompt`` are those of the attempt that
    just ended.

    ## The record (``info["record"]``, a plain JSON-serialisable dict)
    ``task_id``, ``task_text``, ``episode_seed``, ``options``, ``style``, ``gated`` (attempt 1 succeeded and the
    episode ended there), ``attempt1`` and ``attempt2`` (None if not run), each ``{system_prompt, observations
    (the first included), actions, rewards, infos (JSON-safe copies), return, success, terminated, truncated}``;
    ``reflection`` (None, or ``{request, system_prompt, text, prompt, fallback, fallback_reason, truncated,
    original_chars}`` where ``prompt`` is what attempt 2 got before the reminder); ``r1``, ``r2`` (None if not
    run); ``memory_updated``; ``memory_prompt_used`` (the reflection's base prompt, None when there was no
    reflection); ``base_prompt_from_memory``; ``same_start`` (attempt 2 began with attempt 1's first observation).

    ## Memory
    ``memory`` (a ``ReflectionMemory``, ``RetrievalMemory``, a ``PoolMemory.handle()`` or anything with
    ``get(task_text)`` and ``update(prompt, task_text)``; an optional ``start_episode()`` is called at every reset)
    may be shared by many wrappers. It is read only as the base of a reflection, never on attempt 1, and written
    when attempt 2 succeeds (the env's ``success``, else ``r2 >= memory_threshold``): under ``memory_rule="project"``
    with the reflection's prompt, and only when it really came from the reflection (not from a fallback); under
    ``"paper"`` (the reference's rule) with attempt 2's whole system prompt, format reminder included, whether it
    came from the reflection or from a fallback to the base prompt.

    ## Arguments
    * ``env``: the text env.
    * ``memory``: see above; None for no memory.
    * ``gate_threshold`` (1.0): attempt 1 at or above this return ends the episode.
    * ``memory_threshold`` (1.0): attempt 2 at or above this return updates the memory.
    * ``reflector``: a callable ``ReflectionRequest -> str`` (``RuleReflector``, ``HFReflector``, your own); None
      means the agent writes the reflection in the ``reflect`` phase.
    * ``no_memory``: the paper's ablation: reflections are used for their episode but never stored or read.
    * ``no_reflection``: the paper's ablation: no reflect phase; attempt 2's system prompt is the initial
      instructions, ``prompts.NO_REFLECTION_NOTE`` and the raw trace. Cannot be combined with a ``reflector``.
    * ``reflection_instructions``, ``format_reminder``: override the prompts of the env's style
      (``prompts.reflection_instructions(style)``, ``prompts.format_reminder(style)``).
    * ``max_reflection_chars`` (20000): a longer reflection is cut to this length before the tags are read (a
      trainer passes ``reflection_char_limit(its reflection token budget)``, so that every reflection is read whole).
    * ``max_trace_field_chars`` (4000): observations and actions longer than this are cut in the middle in traces.
    * ``memory_rule`` (``"project"``): ``"paper"`` for the reference's choice of ``<prompt>`` block, reminder and
      memory writes (see Phases and Memory; ``MEMORY_RULES``).
    * ``trace_rule`` (``"paper"``): how the paper set's trace writes an unreadable reply and the attempt's end:
      ``"paper"`` as the reference (action 0, "did not move", no final board), ``"project"`` with "no valid action",
      the env's comment and the final board (``TRACE_RULES``; only the grid games' paper set has the choice).

    ## Seeding
    ``reset(seed=s)`` plays instance ``s`` (the inner env is reset with ``seed=s``, so it is the instance
    ``env.reset(seed=s)`` gives) and seeds the wrapper's generator; a later ``reset()`` without a seed draws the
    next episode seed from it. Attempt 2 resets the inner env with the same episode seed and options. Two wrappers
    reset with the same seed play the same instance (the trainer's GRPO groups rely on this).

    ## Vector envs
    Gymnasium's vector envs batch info values key by key and cannot batch ``record``, ``step_info`` or
    ``attempt`` (dicts that are absent or None in some episodes, ints that are None on reflect steps); use
    ``ReflectionSyncVectorEnv`` / ``ReflectionAsyncVectorEnv``, which keep those per sub-env. Gymnasium's
    ``AsyncVectorEnv`` with its defaults refuses the wrapper at construction in one line that names
    ``ReflectionAsyncVectorEnv`` (the observations have no length bound, so no shared-memory slot holds them). A
    memory object is shared by the sub-envs of a sync vector env only: an async one gives each process its own copy.

    ## Errors
    A non-str action raises ``TypeError`` naming the type (bytes too: decode first). Stepping before ``reset`` or
    after the episode ended raises ``gymnasium.error.ResetNeeded``. ``reset`` in any phase starts a fresh episode.
    A reflector that raises leaves the episode in the ``reflect`` phase, so a reflection can still be stepped in.

    ## Paper fidelity
    Gate and memory rules use ``>=`` like the reference code (the paper's text says ``>``, which never fires for
    binary rewards). The reflection replaces the system prompt and attempt 2 never sees attempt 1's messages. The
    retrieval memory, the fallback reason and the vector-env classes go beyond the paper.

    ## Version History
    * v0: initial version.
    """

    def __init__(
        self,
        env: gym.Env,
        memory: Any = None,
        gate_threshold: float = 1.0,
        memory_threshold: float = 1.0,
        reflector: Any = None,
        no_memory: bool = False,
        no_reflection: bool = False,
        reflection_instructions: str | None = None,
        format_reminder: str | None = None,
        max_reflection_chars: int = DEFAULT_MAX_REFLECTION_CHARS,
        max_trace_field_chars: int | None = DEFAULT_MAX_FIELD_CHARS,
        memory_rule: str = "project",
        trace_rule: str = "paper",
    ):
        # Recorded so that env.spec can rebuild the wrapped env (gymnasium's convention for wrappers).
        gym.utils.RecordConstructorArgs.__init__(
            self, memory=memory, gate_threshold=gate_threshold, memory_threshold=memory_threshold,
            reflector=reflector, no_memory=no_memory, no_reflection=no_reflection,
            reflection_instructions=reflection_instructions, format_reminder=format_reminder,
            max_reflection_chars=max_reflection_chars, max_trace_field_chars=max_trace_field_chars,
            memory_rule=memory_rule, trace_rule=trace_rule)
        gym.Wrapper.__init__(self, env)
        if memory_rule not in MEMORY_RULES:
            raise ValueError(f"memory_rule must be one of {list(MEMORY_RULES)}, got {memory_rule!r}")
        if trace_rule not in TRACE_RULES:
            raise ValueError(f"trace_rule must be one of {list(TRACE_RULES)}, got {trace_rule!r}")
        if memory is not None and not (callable(getattr(memory, "get", None))
                                       and callable(getattr(memory, "update", None))):
            raise TypeError(f"memory must have get(task_text) and update(prompt, task_text) methods, "
                            f"got {type(memory).__name__}")
        if reflector is not None and not callable(reflector):
            raise TypeError(f"reflector must be callable (request -> text) or None, got {type(reflector).__name__}")
        if no_reflection and reflector is not None:
            raise ValueError("no_reflection=True skips the reflection, so a reflector would never be called; "
                             "pass one or the other")
        for name, text in (("reflection_instructions", reflection_instructions), ("format_reminder", format_reminder)):
            if text is not None and not isinstance(text, str):
                raise TypeError(f"{name} must be a str or None, got {type(text).__name__}")
        for name, value in (("max_reflection_chars", max_reflection_chars),
                            ("max_trace_field_chars", 1 if max_trace_field_chars is None else max_trace_field_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")

        self.memory = memory
        self.gate_threshold = _check_threshold(gate_threshold, "gate_threshold")
        self.memory_threshold = _check_threshold(memory_threshold, "memory_threshold")
        self.reflector = reflector
        self.no_memory = bool(no_memory)
        self.no_reflection = bool(no_reflection)
        self.max_reflection_chars = max_reflection_chars
        self.max_trace_field_chars = max_trace_field_chars
        self.memory_rule = memory_rule
        self.trace_rule = trace_rule
        self.style = protocol.prompt_style_of(env)
        # The env's prompt set (``prompts=`` of the grid games) also picks the reflection texts.
        self.prompt_set = getattr(env.unwrapped, "prompt_set", "lenient")
        self.game_name = getattr(env.unwrapped, "game_name", None)
        texts = (self.style, self.prompt_set, self.game_name)
        self.reflection_instructions = (
            prompts.reflection_instructions(*texts) if reflection_instructions is None else reflection_instructions
        )
        self.format_reminder = prompts.format_reminder(*texts) if format_reminder is None else format_reminder
        # The reflect phase's request and trace layout: the paper's, the small-model one, or ours.
        self._request_set = ("paper" if prompts.uses_paper_set(*texts) else
                             "small" if prompts.uses_small_set(*texts) else "lenient")

        inner_obs = getattr(env, "observation_space", None)
        sample_length = max(getattr(inner_obs, "max_length", 0) or 0, 4096)
        self.observation_space = FreeText(max_length=sample_length, min_length=0, charset=TEXT_CHARSET)
        self.action_space = FreeText(max_length=4096, min_length=0, charset=TEXT_CHARSET)

        self._seed_rng: np.random.Generator | None = None
        self._phase: str | None = None  # None before the first reset; "done" once the episode ended
        self._warned_nondeterministic = False
        self._clear_episode()

    # ------------------------------------------------------------------ state

    @property
    def phase(self) -> str | None:
        """The phase of the next action (``attempt1``/``reflect``/``attempt2``), ``"done"``, or None before reset."""
        return self._phase

    def _clear_episode(self) -> None:
        self._episode_seed: int | None = None
        self._options: Any = None
        self._task_id = ""
        self._task_text = ""
        self._instructions = ""
        self._initial_prompt = ""  # the reflection's base while the memory is empty (``grid_prompts.initial_prompt``)
        self._env_info: dict = {}  # the inner env's reset info of this episode
        self._attempt1: _Attempt | None = None
        self._attempt2: _Attempt | None = None
        self._request: ReflectionRequest | None = None
        self._reflection: dict | None = None
        self._base_from_memory = False
        self._same_start: bool | None = None

    def _memory_on(self) -> bool:
        return self.memory is not None and not self.no_memory

    def _info(self, phase: str, system_prompt: str, new_conversation: bool, **extra: Any) -> dict:
        return {"phase": phase, "system_prompt": system_prompt, "new_conversation": new_conversation,
                "task_id": self._task_id, "episode_seed": self._episode_seed, **extra}

    # ------------------------------------------------------------------ the Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            if isinstance(seed, bool):
                raise TypeError("seed must be an int or None, got bool")
            try:
                seed = operator.index(seed)
            except TypeError:
                raise TypeError(f"seed must be an int or None, got {type(seed).__name__}") from None
            if seed < 0:
                raise ValueError(f"seed must be non-negative, got {seed}")
            self._seed_rng = np.random.default_rng(seed)
            episode_seed = seed
        else:
            if self._seed_rng is None:
                self._seed_rng = np.random.default_rng()
            episode_seed = int(self._seed_rng.integers(0, 2**31 - 1))

        # A failing inner reset must not leave the previous episode steppable.
        self._phase = None
        self._clear_episode()
        # Kept pristine and handed out as copies: an env that edits its options in place must not change attempt 2.
        self._options = _copy_options(options)
        obs, env_info = self.env.reset(seed=episode_seed, options=_copy_options(options))
        start_episode = getattr(self.memory, "start_episode", None)
        if start_episode is not None:  # a PoolMemory handle takes this episode's slot
            start_episode()
        self._episode_seed = episode_seed
        self._task_id = protocol.task_id_of(env_info, episode_seed)
        task_text = env_info.get("task_text")
        self._task_text = task_text if isinstance(task_text, str) and task_text else _as_text(obs)
        self._instructions = protocol.instructions_of(self.env)
        self._initial_prompt = self._instructions
        if self._request_set == "paper":  # the reference reflects from its initial prompt, without Sokoban's push rule
            self._initial_prompt = grid_prompts.initial_prompt(self.prompt_set, self.game_name, self._instructions)
        self._env_info = env_info if isinstance(env_info, dict) else {}
        self._attempt1 = _Attempt(self._instructions, [obs])
        self._phase = "attempt1"
        info = self._info("attempt1", self._instructions, True, task_text=self._task_text, env_info=env_info)
        return obs, info

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        action = _check_text(action, "an action")
        if self._phase is None:
            raise gym.error.ResetNeeded("step() was called before reset(); call reset() first")
        if self._phase == "done":
            raise gym.error.ResetNeeded("step() was called after the episode ended (its last step returned "
                                        "info['record']); call reset() to start a new episode")
        if self._phase == "reflect":
            obs, info = self._take_reflection(action)
            return obs, 0.0, False, False, {"attempt": None, **info}

        number = 1 if self._phase == "attempt1" else 2
        attempt = self._attempt1 if number == 1 else self._attempt2
        obs, reward, terminated, truncated, step_info = self.env.step(action)
        attempt.add(action, obs, reward, step_info, terminated, truncated)
        extra = {"attempt": number, "step_info": step_info}
        if not (terminated or truncated):
            return obs, reward, False, False, self._info(self._phase, attempt.system_prompt, False, **extra)
        if number == 2 or attempt.success(self.gate_threshold):
            return obs, reward, terminated, truncated, self._finish(extra)

        # Attempt 1 failed: the episode goes on.
        if self.no_reflection:
            system_prompt = utf8_safe(prompts.NO_REFLECTION_PROMPT.format(
                instructions=self._instructions, note=prompts.NO_REFLECTION_NOTE,
                trace=self._trace_text(self._attempt1)))
            obs2, env_info = self._start_attempt2(system_prompt)
            return obs2, reward, False, False, self._info("attempt2", system_prompt, True, env_info=env_info, **extra)
        request = self._request = self._build_request()
        # Set before calling a reflector: if it raises, the episode waits in the reflect phase for a reflection.
        self._phase = "reflect"
        if self.reflector is None:
            return request.text, reward, False, False, self._info("reflect", request.system_prompt, True, **extra)
        text = self.reflector(request)
        if not isinstance(text, str):
            raise TypeError(f"the reflector {self.reflector!r} returned {type(text).__name__}, expected a str")
        obs2, info = self._take_reflection(text)
        return obs2, reward, False, False, {**info, **extra}

    # ------------------------------------------------------------------ the phases

    def _trace_text(self, attempt: _Attempt, steps: tuple[TraceStep, ...] | None = None) -> str:
        steps = attempt.trace_steps() if steps is None else steps
        final = _as_text(attempt.observations[-1])
        if self._request_set == "paper":
            success = attempt.success(self.gate_threshold)
            feedback = paper_feedback(steps, attempt.feedback(), attempt.total, success, self.game_name,
                                      self.trace_rule)
            return format_paper_trace(steps, final, attempt.total, feedback, self.max_trace_field_chars,
                                      solved=success, game=self.game_name, rule=self.trace_rule)
        write = format_small_trace if self._request_set == "small" else format_trace
        return write(steps, final, attempt.total, attempt.feedback(), self.max_trace_field_chars)

    def _build_request(self) -> ReflectionRequest:
        attempt = self._attempt1
        base = None
        if self._memory_on():
            base = self.memory.get(task_text=self._task_text)
        self._base_from_memory = isinstance(base, str) and bool(base.strip())
        if not self._base_from_memory:
            base = self._initial_prompt
        steps = attempt.trace_steps()
        trace = utf8_safe(self._trace_text(attempt, steps))  # it quotes the model's replies, which may not be UTF-8
        if self._request_set == "paper":
            success = attempt.success(self.gate_threshold)
            task = paper_task(self.game_name, self._episode_seed, self._env_info, self._env_info.get("steps_left"))
            text = prompts.PAPER_SET["reflection_request"].format(
                base_prompt=base, metrics=paper_metrics([attempt.total], [success]), game=self.game_name, task=task,
                trace=trace)
        elif self._request_set == "small":
            text = prompts.SMALL_SET["reflection_request"].format(base_prompt=base, trace=trace)
        else:
            text = prompts.REFLECTION_REQUEST.format(base_prompt=base, trace=trace)
        symbols = getattr(self.env.unwrapped, "symbols", None)
        return ReflectionRequest(
            text=text,
            system_prompt=self.reflection_instructions,
            base_prompt=base,
            style=self.style,
            steps=steps,
            final_observation=_as_text(attempt.observations[-1]),
            total_return=attempt.total,
            success=attempt.success(self.gate_threshold),
            feedback=attempt.feedback(),
            task_id=self._task_id,
            task_text=self._task_text,
            symbols=symbols if isinstance(symbols, SymbolSet) else None,
        )

    def _take_reflection(self, text: str) -> tuple[Any, dict]:
        text = _check_text(text, "a reflection")
        original_chars = len(text)
        truncated = original_chars > self.max_reflection_chars
        if truncated:
            text = text[: self.max_reflection_chars]
        text = utf8_safe(text)
        prompt, reason = extract_prompt(text, self.memory_rule)
        fallback = prompt is None
        request = self._request
        used = request.base_prompt if fallback else prompt
        if self.memory_rule == "paper":
            system_prompt = with_reminder(used, self.format_reminder)
        else:
            system_prompt = f"{used}\n{self.format_reminder}"
        self._reflection = {
            "request": request.text,
            "system_prompt": request.system_prompt,
            "text": text,
            "prompt": used,
            "fallback": fallback,
            "fallback_reason": reason,
            "truncated": truncated,
            "original_chars": original_chars,
        }
        obs, env_info = self._start_attempt2(system_prompt)
        info = self._info("attempt2", system_prompt, True, env_info=env_info, reflection_fallback=fallback,
                          reflection_fallback_reason=reason)
        return obs, info

    def _start_attempt2(self, system_prompt: str) -> tuple[Any, dict]:
        obs, env_info = self.env.reset(seed=self._episode_seed, options=_copy_options(self._options))
        first = self._attempt1.observations[0]
        try:
            self._same_start = bool(obs == first) if isinstance(obs, str) else bool(np.array_equal(obs, first))
        except Exception:  # an exotic observation type: we cannot tell, so we do not claim either way
            self._same_start = None
        if self._same_start is False and not self._warned_nondeterministic:
            self._warned_nondeterministic = True
            warnings.warn(
                f"{type(self.env.unwrapped).__name__} gave a different first observation when reset again with the "
                "same seed and options, so attempt 2 is not on the same task instance; ReflectionWrapper needs an "
                "env that is deterministic in its reset seed (all randomness from self.np_random)",
                RuntimeWarning,
                stacklevel=3,
            )
        self._attempt2 = _Attempt(system_prompt, [obs])
        self._phase = "attempt2"
        return obs, env_info

    def _finish(self, extra: dict) -> dict:
        ended = self._attempt1 if self._attempt2 is None else self._attempt2
        phase = self._phase
        success1 = self._attempt1.success(self.gate_threshold)
        success2 = None if self._attempt2 is None else self._attempt2.success(self.memory_threshold)
        memory_updated = False
        if success2 and self._memory_on() and self._reflection is not None:
            if self.memory_rule == "paper":  # what attempt 2 played with, reminder and all, a fallback's too
                self.memory.update(self._attempt2.system_prompt, task_text=self._task_text)
                memory_updated = True
            elif not self._reflection["fallback"]:
                self.memory.update(self._reflection["prompt"], task_text=self._task_text)
                memory_updated = True
        reflected = self._reflection is not None
        record = to_jsonable({
            "task_id": self._task_id,
            "task_text": self._task_text,
            "episode_seed": self._episode_seed,
            "options": to_jsonable(self._options),
            "style": self.style,
            "gated": self._attempt2 is None,
            "attempt1": self._attempt1.to_record(success1),
            "attempt2": None if self._attempt2 is None else self._attempt2.to_record(success2),
            "reflection": dict(self._reflection) if reflected else None,
            "r1": self._attempt1.total,
            "r2": None if self._attempt2 is None else self._attempt2.total,
            "memory_updated": memory_updated,
            "memory_prompt_used": self._request.base_prompt if reflected else None,
            "base_prompt_from_memory": self._base_from_memory if reflected else False,
            "same_start": self._same_start,
        })
        self._phase = "done"
        return self._info(phase, ended.system_prompt, False, record=record, **extra)
