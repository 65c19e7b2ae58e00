"""From played episodes to the rows the update trains on: ERL's consolidation copies, GRPO groups and advantages.

Roles (PAPER.md sections 1-2): ``attempt1`` (first attempts, reward r1), ``reflection`` (the reflection text, reward
r2: a reflection is as good as the retry it led to), ``attempt2`` (second attempts, reward r2) and ``distilled``
(consolidation: the second attempt re-scored under the initial prompt, advantage max(r2, 0), no baseline). Attempts
and reflections are normalised in GRPO groups per (task, role); RLVR has first attempts only.
"""

from __future__ import annotations

from typing import Sequence

import torch

from erl_agents.config import TrainConfig
from erl_agents.grpo import group_advantages, raft_advantages
from erl_agents.models import Policy
from erl_agents.rollout import Episode, Trajectory

__all__ = ["GROUPED_ROLES", "consolidation_copies", "assign_advantages", "zero_variance_groups"]

GROUPED_ROLES = ("attempt1", "reflection", "attempt2")


def consolidation_copies(policy: Policy, episodes: Sequence[Episode], mode: str = "imitation",
                         max_seq_len: int = 8192) -> list[Trajectory]:
    """The ``distilled`` trajectories of ERL's consolidation step, built by swapping prompt tokens.

    * ``imitation`` (the paper): the second attempt's tokens after its opening, behind the opening of the
      *initial* system prompt, rewarded r2 (the trainer gives it advantage max(r2, 0)).
    * ``reverse_kl`` (the paper's future work): the first attempt as sampled (the student's own tokens), paired with
      the same tokens behind the second attempt's reflected system prompt (the teacher context).

    Only episodes whose second attempt scored r2 > 0 yield a copy: the others would get advantage 0 (imitation) or
    weight 0 (the 1(r2 > 0) of reverse-KL) and carry no signal, so they are not scored at all.
    """
    if mode not in ("imitation", "reverse_kl"):
        raise ValueError(f"unknown consolidation mode {mode!r}; choose 'imitation' or 'reverse_kl'")
    chat = policy.chat
    copies = []
    for episode in episodes:
        second = episode.trajectory("attempt2")
        if second is None or second.reward <= 0:
            continue
        if mode == "imitation":
            source, system = second, episode.initial_system_prompt
        else:
            source, system = episode.trajectory("attempt1"), episode.initial_system_prompt
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
