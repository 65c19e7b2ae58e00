"""From played episodes to the rows the update trains on: ERL's consolidation copies, GRPO groups and advantages.

Roles (PAPER.md sections 1-2): ``attempt1`` (first attempts, reward r1), ``reflection`` (the reflection text, reward
r2: a reflection is as good as the retry it led to), ``attempt2`` (second attempts, reward r2) and ``distilled``
(consolidation: the second attempt re-scored under the initial prompt, advantage max(r2, 0), no baseline). Attempts
and reflections are normalised in GRPO groups per (task, role); RLVR has first attempts only.

Two ways to build a step's rows (``training_rows``, ``--rows``):

* ``erl`` (the default): each conversation once, and a distilled copy of each retry that scored r2 > 0 (a copy of a
  failed retry has advantage 0 and would train nothing but the KL term): 256 + 2F + S rows for 64 tasks x 4
  attempts with F failed first attempts and S successful retries.
* ``paper``: the reference code's batch (its grid workflows). Each episode contributes, in this order, attempt 1,
  the reflection, attempt 2, a distilled copy of attempt 2 whatever r2 was, and the reflection a second time (the
  workflow appends the same updater trajectory to its episode twice): 256 + 4F rows. The repeated reflection counts
  twice in its GRPO group and in the loss; the copy of a failed retry carries the KL term and takes a place in the
  mini-batches. The reference's HotpotQA workflow appends the reflection once (256 + 3F), and its Sokoban copies
  carry the initial prompt without the box-pushing reminder the attempts saw (``distillation_prompt``).
"""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import torch

from erl_agents.config import TrainConfig
from erl_agents.grpo import group_advantages, raft_advantages
from erl_agents.models import Policy
from erl_agents.rollout import Episode, Trajectory
from erl_envs.protocol import instructions_of, prompt_style_of

__all__ = ["GROUPED_ROLES", "consolidation_copies", "distillation_prompt", "reflection_repeats", "training_rows",
           "assign_advantages", "zero_variance_groups"]

GROUPED_ROLES = ("attempt1", "reflection", "attempt2")


def consolidation_copies(policy: Policy, episodes: Sequence[Episode], mode: str = "imitation",
                         max_seq_len: int = 8192, every_retry: bool = False,
                         system_prompt: str | None = None) -> list[Trajectory]:
    """The ``distilled`` trajectories of ERL's consolidation step, built by swapping prompt tokens.

    * ``imitation`` (the paper): the second attempt's tokens after its opening, behind the opening of the
      *initial* system prompt, rewarded r2 (the trainer gives it advantage max(r2, 0)).
    * ``reverse_kl`` (the paper's future work): the first attempt as sampled (the student's own tokens), paired with
      the same tokens behind the second attempt's reflected system prompt (the teacher context).

    Only episodes whose second attempt scored r2 > 0 yield a copy: the others would get advantage 0 (imitation) or
    weight 0 (the 1(r2 > 0) of reverse-KL) and carry no signal, so they are not scored at all. ``every_retry``
    copies every second attempt (the reference's batch), and ``system_prompt`` replaces the episodes' initial
    system prompt in the copies (the reference's Sokoban copies, see ``distillation_prompt``).
    """
    if mode not in ("imitation", "reverse_kl"):
        raise ValueError(f"unknown consolidation mode {mode!r}; choose 'imitation' or 'reverse_kl'")
    chat = policy.chat
    copies = []
    for episode in episodes:
        second = episode.trajectory("attempt2")
        if second is None or (second.reward <= 0 and not every_retry):
            continue
        system = episode.initial_system_prompt if system_prompt is None else system_prompt
        source = second if mode == "imitation" else episode.trajectory("attempt1")
        opening = chat.open(system, source.first_observation)
        body = slice(source.prompt_len, None)
        copy = Trajectory(
            role="distilled", task=episode.task, episode=episode.index,
            tokens=(opening + source.tokens[body])[:max_seq_len],
            mask=([0] * len(opening) + source.mask[body])[:max_seq_len],
            logprobs=([0.0] * len(opening) + source.logprobs[body])[:max_seq_len],
            constraints=([-1] * len(opening) + source.constraints[body])[:max_seq_len],
            prompt_len=len(opening), system_prompt=system, first_observation=source.first_observation,
            reward=second.reward, success=second.success, overflowed=source.overflowed,
        )
        if mode == "reverse_kl":
            teacher_opening = chat.open(second.system_prompt, source.first_observation)
            copy.teacher_tokens = (teacher_opening + source.tokens[body])[: max_seq_len + len(teacher_opening)]
            copy.teacher_offset = len(teacher_opening) - len(opening)
        copies.append(copy)
    return copies


def distillation_prompt(env: gym.Env) -> str:
    """The system prompt of the reference's distilled copies for ``env``: its ``initial_system_prompt``.

    Its FrozenLake and Sokoban workflows start from the same grid prompt, which ends with a two-line reminder (valid
    actions, the backtick format), and every attempt's system prompt gets the game's reminder appended unless it
    already ends with it: FrozenLake's is that same reminder, Sokoban's adds "only push a box if the space behind it
    is free". The copies swap in the initial prompt as it was, so a Sokoban copy lacks the push rule its attempts saw.
    Under ``prompts="paper"`` that prompt is FrozenLake's paper prompt; every other env's copies (HotpotQA's
    included: its initial prompt already holds its boxed-answer reminder) carry the env's own initial prompt.
    """
    from erl_envs.grid import prompts as grid_prompts

    initial = instructions_of(env)
    base = env.unwrapped
    paper_sokoban = getattr(base, "prompt_set", None) == "paper" and getattr(base, "game_name", None) == "Sokoban"
    if paper_sokoban and initial == grid_prompts.instructions("paper", "Sokoban"):
        return grid_prompts.instructions("paper", "FrozenLake")
    return initial


def reflection_repeats(env: gym.Env) -> int:
    """How often the reference's batch holds each reflection: twice in its grid workflows (the updater trajectory is
    appended to the episode when it is produced and again at the end), once in its HotpotQA workflow."""
    return 1 if prompt_style_of(env) == "qa" else 2


def training_rows(policy: Policy, episodes: Sequence[Episode], config: TrainConfig, distill_prompt: str | None = None,
                  repeats: int = 2) -> list[Trajectory]:
    """A step's rows, as ``config.rows`` says (the module docstring): RLVR's are its conversations; ERL's add the
    consolidation copies. Under ``paper`` rows the reflection is the same object ``repeats`` times and the copies
    carry ``distill_prompt`` (``distillation_prompt``; None: each episode's initial prompt)."""
    if config.algo != "erl":
        return [t for e in episodes for t in e.trajectories]
    if config.rows == "erl":
        rows = [t for e in episodes for t in e.trajectories]
        return rows + consolidation_copies(policy, episodes, config.distill, config.max_seq_len)
    rows = []
    for episode in episodes:
        copies = consolidation_copies(policy, [episode], "imitation", config.max_seq_len, every_retry=True,
                                      system_prompt=distill_prompt)
        reflection = episode.trajectory("reflection")
        rows += episode.trajectories + copies + ([reflection] * (repeats - 1) if reflection is not None else [])
    return rows


def assign_advantages(trajectories: Sequence[Trajectory], config: TrainConfig) -> None:
    """GRPO groups per (task, role) for attempts and reflections; distilled copies get max(r2, 0), no baseline."""
    grouped = [t for t in trajectories if t.role in GROUPED_ROLES]
    if grouped:
        keys = {}
        groups = torch.tensor([keys.setdefault((t.task, t.role), len(keys)) for t in grouped])
        rewards = torch.tensor([t.reward for t in grouped], dtype=torch.float64)
        advantages = group_advantages(rewards, groups, config.advantage, single_member=config.single_member)
        for t, a in zip(grouped, advantages.tolist()):
            t.advantage = a
    for t in trajectories:
        if t.role == "distilled":
            # reverse_kl copies are trained by the KL term alone (weight 1(r2 > 0), checked when they were built).
            t.advantage = 0.0 if t.teacher_tokens is not None else float(raft_advantages(torch.tensor(t.reward)))


def zero_variance_groups(trajectories: Sequence[Trajectory]) -> int:
    """GRPO groups of two or more whose rewards are all equal: their advantages are 0, so they teach nothing."""
    rewards: dict[tuple, set[float]] = {}
    sizes: dict[tuple, int] = {}
    for t in trajectories:
        if t.role in GROUPED_ROLES:
            rewards.setdefault((t.task, t.role), set()).add(t.reward)
            sizes[(t.task, t.role)] = sizes.get((t.task, t.role), 0) + 1
    return sum(1 for key, values in rewards.items() if sizes[key] > 1 and len(values) == 1)
