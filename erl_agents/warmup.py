"""Reflection warm-up: before ERL starts, the reflection role learns the form of a usable reflection from a teacher.

A small model asked to reflect copies the trace back or rambles past its token budget, so no reflection holds a
``<prompt>`` block, every retry falls back to the initial prompt and ERL degenerates to RLVR with fewer attempts
(benchmarks/results/smol_erl.md). ``--reflection-warmup N`` runs N steps before the first ERL step, each:

1. first attempts of ``tasks_per_step x n_erl`` distinct tasks are played (one episode each: the rows need no
   GRPO groups, and more boards teach more): by a uniformly random player over the env's valid actions when
   the env declares them (the grid games; an untrained small policy under the small prompt set plays close to
   that, and no policy token is sampled, so the warm-up spends none of the sampled-token budget RLVR and ERL are
   matched on), else by the policy (its tokens then count in the budget);
2. every failed attempt's reflection request goes to a teacher reflector (``RuleReflector``, or any callable
   ``ReflectionRequest -> str``), and the episode ends there: no retry is played;
3. the teacher's rulebooks become supervised rows of the reflection role: the request as the policy would see it
   (same system prompt, same request, the same ``<prompt>`` prefill as context), the rulebook's tokens trained with
   advantage 1 under the run's loss (one on-policy update: the plain negative log-likelihood gradient).

Then ERL starts and the policy writes its own reflections. The teacher is privileged (it knows the symbols and
writes a shortest route), so a warmed-up run is not an unaided one: it learned the form, and what it writes is its
own from then on.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch

from erl_agents.models import Policy
from erl_agents.rollout import Trajectory
from erl_envs.reflection.wrapper import extract_prompt

__all__ = ["TEACHERS", "teacher_reflector", "TeacherCapture", "EndAfterReflection", "teacher_envs", "play_randomly",
           "teacher_rows", "teacher_nll"]

# The RuleReflector's details a run can name as teacher (config ``warmup_reflector``, and ``reflector``).
TEACHERS = {"rule": "full", "plan": "plan", "brief": "brief"}


def teacher_reflector(name: str) -> Callable:
    """The RuleReflector of that name: ``rule`` (the full rulebook), ``plan`` (a route only), ``brief`` (four lines)."""
    from erl_envs.reflection.reflectors import RuleReflector

    if name not in TEACHERS:
        raise ValueError(f"unknown teacher {name!r}; choose one of {sorted(TEACHERS)}")
    return RuleReflector(detail=TEACHERS[name])


class TeacherCapture:
    """A reflector that asks ``teacher`` and keeps the request and its answer (the warm-up's row)."""

    def __init__(self, teacher: Callable):
        if not callable(teacher):
            raise TypeError(f"a warm-up teacher must be callable (request -> text), got {type(teacher).__name__}")
        self.teacher = teacher
        self.last: tuple[Any, str] | None = None

    def __call__(self, request) -> str:
        text = self.teacher(request)
        if not isinstance(text, str):
            raise TypeError(f"the warm-up teacher {self.teacher!r} returned {type(text).__name__}, expected a str")
        self.last = (request, text)
        return text


class EndAfterReflection(gym.Wrapper):
    """Ends a ``ReflectionWrapper`` episode as soon as its reflector has written the reflection: the warm-up trains
    on the reflection and needs no retry. ``capture`` (the wrapper's reflector) is cleared at every reset."""

    def __init__(self, env: gym.Env, capture: TeacherCapture):
        super().__init__(env)
        self.capture = capture

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.capture.last = None
        return self.env.reset(seed=seed, options=options)

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if info.get("phase") == "attempt2" and info.get("new_conversation"):
            return obs, reward, True, False, {**info, "new_conversation": False}
        return obs, reward, terminated, truncated, info


def teacher_envs(envs: Sequence[gym.Env], teacher: Callable, gate_threshold: float = 1.0,
                 reflection_instructions: str | None = None) -> tuple[list[gym.Env], list[TeacherCapture]]:
    """Each env wrapped to play attempt 1, have ``teacher`` write the reflection on a failure, and end there; with
    the captures that keep each episode's (request, rulebook)."""
    from erl_envs.reflection import ReflectionWrapper

    captures = [TeacherCapture(teacher) for _ in envs]
    wrapped = [EndAfterReflection(ReflectionWrapper(env, reflector=capture, gate_threshold=gate_threshold,
                                                    reflection_instructions=reflection_instructions), capture)
               for env, capture in zip(envs, captures)]
    return wrapped, captures


def play_randomly(envs: Sequence[gym.Env], resets: Sequence[tuple[int, dict | None]],
                  rng: np.random.Generator) -> list[bool]:
    """Play one episode in each env with replies drawn uniformly from its ``valid_actions``; returns which ended
    in success. No model is involved (the warm-up's first attempts on envs that declare their actions)."""
    solved = []
    for env, (seed, options) in zip(envs, resets):
        actions = list(env.unwrapped.valid_actions)
        env.reset(seed=seed, options=options)
        success = False
        for _ in range(_MAX_RANDOM_TURNS):
            _, reward, terminated, truncated, info = env.step(actions[int(rng.integers(len(actions)))])
            if terminated or truncated:
                record = info.get("record")
                success = bool(record["attempt1"]["success"]) if record else bool(info.get("success", reward >= 1))
                break
        else:
            raise RuntimeError(f"a random episode of {env.unwrapped} did not end within {_MAX_RANDOM_TURNS} turns")
        solved.append(success)
    return solved


# A random player's episode longer than this means the env never ends (a bug, not a long game).
_MAX_RANDOM_TURNS = 10_000


def teacher_rows(policy: Policy, captures: Sequence[TeacherCapture], prefix: str = "", stop: str = "",
                 max_seq_len: int = 8192) -> list[Trajectory]:
    """One supervised reflection row per captured (request, rulebook): advantage 1 on the rulebook's tokens.

    The context is what the policy sees when it reflects: the request's system prompt and text, then ``prefix``
    (the rollout's prefill, e.g. ``"<prompt>\\n"``) as context. The trained reply is the block's content followed by
    ``stop`` (``"</prompt>"``), where the rollout stops; without a prefix the whole block and the end-of-turn token
    are trained. A rulebook without a usable block, or a row longer than ``max_seq_len``, gives no row.
    """
    chat, tokenizer = policy.chat, policy.tokenizer
    rows = []
    for index, capture in enumerate(captures):
        if capture.last is None:
            continue
        request, text = capture.last
        content, _ = extract_prompt(text)
        if content is None:
            continue
        if prefix:
            context_text, reply_text = prefix, content + "\n" + stop
            ending: list[int] = []
        else:
            context_text, reply_text = "", f"<prompt>\n{content}\n</prompt>"
            ending = [chat.end_of_turn_id]
        context = chat.open(request.system_prompt, request.text)
        context += tokenizer(context_text, add_special_tokens=False)["input_ids"] if context_text else []
        reply = tokenizer(reply_text, add_special_tokens=False)["input_ids"] + ending
        if len(context) + len(reply) > max_seq_len:
            continue
        rows.append(Trajectory(
            role="reflection", task=index, episode=index, tokens=context + reply,
            mask=[0] * len(context) + [1] * len(reply), logprobs=[0.0] * (len(context) + len(reply)),
            constraints=[-1] * (len(context) + len(reply)), prompt_len=len(context),
            system_prompt=request.system_prompt, first_observation=request.text, advantage=1.0, sampled=False,
        ))
    return rows


@torch.no_grad()
def teacher_nll(policy: Policy, rows: Sequence[Trajectory], micro_batch_size: int = 4) -> float:
    """Mean negative log-likelihood (nats per token, temperature 1) of the rows' trained tokens under the policy:
    how well the reflection role already writes the teacher's rulebooks."""
    if not rows:
        return float("nan")
    from erl_agents.sft import sft_loss

    model, pad = policy.model, policy.tokenizer.pad_token_id
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    for start in range(0, len(rows), micro_batch_size):
        loss, tokens = sft_loss(model, rows[start:start + micro_batch_size], pad)
        total += float(loss)
        count += tokens
    model.train(was_training)
    return total / max(count, 1)
