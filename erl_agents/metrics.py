"""One training step's rollout metrics, their merge over data-parallel ranks, and what the logged rows tell later.

Per role: count (rows of the batch: a reflection the batch holds twice counts twice), mean reward and success; the
r1 -> r2 lift of the retried episodes; tokens; truncated replies, budget-ended episodes and attempts ended by the
response budget; zero-variance GRPO groups; how often a reflection held a usable ``<prompt>`` block. A logged row is
strict JSON (``finite_row``): a number that does not exist (the loss of a step with no update) is null.
"""

from __future__ import annotations

from typing import Sequence

import math

import numpy as np

from erl_agents.batch import zero_variance_groups
from erl_agents.rollout import ROLES, Episode, Trajectory

__all__ = ["rollout_metrics", "merge_rollout_rows", "consecutive_bad_steps", "finite_row"]


def rollout_metrics(episodes: Sequence[Episode], trajectories: Sequence[Trajectory], memory=None) -> dict[str, float]:
    """The rollout part of a step's metrics row (``memory``: the run's reflection memory, or None)."""
    row: dict[str, float] = {}
    for role in ROLES:
        members = [t for t in trajectories if t.role == role]
        row[f"count/{role}"] = len(members)
        if members:
            row[f"reward/{role}"] = float(np.mean([t.reward for t in members]))
            row[f"success/{role}"] = float(np.mean([t.success for t in members]))
    retried = [e for e in episodes if e.trajectory("attempt2") is not None]
    if retried:
        # The r1 -> r2 lift: how much the reflection helped the same task instance.
        row["lift/r1"] = float(np.mean([e.trajectory("attempt1").reward for e in retried]))
        row["lift/r2"] = float(np.mean([e.trajectory("attempt2").reward for e in retried]))
        row["lift"] = row["lift/r2"] - row["lift/r1"]
    row["overflowed"] = sum(t.overflowed for t in trajectories)
    row["truncated"] = sum(t.truncated_replies for e in episodes for t in e.trajectories)
    row["budget_ended"] = sum(bool(e.budget_ended) for e in episodes)
    cut = sum(t.response_cut for e in episodes for t in e.trajectories)
    if cut:
        row["response_cut"] = cut  # attempts ended by the response budget
    row["groups/zero_variance"] = zero_variance_groups(trajectories)
    row["tokens/generated"] = sum(t.num_model_tokens for e in episodes for t in e.trajectories)
    row["tokens/total"] = sum(len(t.tokens) for t in trajectories)
    reflections = [e.record["reflection"] for e in episodes if e.record and e.record.get("reflection")]
    if reflections:
        # How often a reflection held a usable <prompt> block (else attempt 2 fell back to the base prompt).
        row["reflection/count"] = len(reflections)
        row["reflection/prompt_rate"] = float(np.mean([not r["fallback"] for r in reflections]))
        # Retries counted apart by their reflection: a usable <prompt> block, or a fallback to the initial prompt
        # (in effect a plain second try). Counts, so ranks' rows add up.
        for kind in ("usable", "fallback"):
            retried_here = [e for e in episodes if e.record and e.record.get("reflection") and e.record.get("attempt2")
                            and bool(e.record["reflection"]["fallback"]) == (kind == "fallback")]
            row[f"retry/{kind}"] = len(retried_here)
            row[f"retry/{kind}_solved"] = sum(bool(e.record["attempt2"].get("success")) for e in retried_here)
    if memory is not None:
        row["memory/set"] = float(len(memory) > 0)
    return row


def merge_rollout_rows(rows: Sequence[dict]) -> dict:
    """One step's rollout metrics from every rank's: counts and sums add up, means are weighted by what they
    average over (``reward/ROLE`` and ``success/ROLE`` by ``count/ROLE``, the lift by the retried episodes)."""
    merged: dict[str, float] = {}
    for key in dict.fromkeys(k for row in rows for k in row):
        present = [row for row in rows if key in row]
        kind, _, role = key.partition("/")
        if key == "lift":
            continue  # recomputed from its parts below
        if kind in ("reward", "success") or key in ("lift/r1", "lift/r2"):
            weight = f"count/{role}" if kind in ("reward", "success") else "count/attempt2"
            total = sum(row[weight] for row in present)
            merged[key] = float(sum(row[key] * row[weight] for row in present) / total)
        elif key == "reflection/prompt_rate":
            total = sum(row["reflection/count"] for row in present)
            merged[key] = float(sum(row[key] * row["reflection/count"] for row in present) / total)
        elif key == "memory/set":
            merged[key] = max(row[key] for row in present)  # one memory, synchronised across ranks
        else:
            merged[key] = sum(row[key] for row in present)
    if "lift/r1" in merged:
        merged["lift"] = merged["lift/r2"] - merged["lift/r1"]
    return merged


def consecutive_bad_steps(metrics: Sequence[dict]) -> int:
    """How many of the latest training steps in a row skipped an update for a non-finite loss or gradient.

    Read from the logged rows, so the count survives a resume unchanged.
    """
    count = 0
    for row in reversed(metrics):
        if not row.get("skipped_updates"):
            break
        count += 1
    return count


def finite_row(row: dict) -> dict:
    """``row`` with NaN and infinite numbers as None, so that it is strict JSON (``null``) wherever it is written."""
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in row.items()}
