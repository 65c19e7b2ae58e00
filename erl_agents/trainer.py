"""The training loop, top to bottom: rollout -> advantages -> loss -> update -> log -> eval -> checkpoint.

``--algo rlvr`` samples n first attempts per task and forms one GRPO group per task. ``--algo erl`` runs each
episode through ``ReflectionWrapper`` (first attempt, reflection on failure, second attempt with the reflection as
system prompt, shared memory) and adds consolidation copies; groups are per (task, role) (PAPER.md sections 1-2).

Data parallel under ``torchrun`` (``erl_agents.distributed``): each rank plays its block of a step's tasks, the loss
uses normalisers of the whole batch (micro-batch and rank results sum to the full-batch loss), DDP all-reduces the
gradients, metrics are reduced over ranks, and every file write goes through ``RunWriter``, which only rank 0
enables. Without ``torchrun`` the same code runs as one process, every collective a no-op.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from erl_agents import checkpoint as ckpt
from erl_agents.accelerator import autocast, autocast_dtype, peak_memory_gb, reset_peak_memory, resolve_device
from erl_agents.config import RULES, TrainConfig, config_to_dict
from erl_agents.distributed import World, shard_bounds
from erl_agents.evaluate import EVAL_SEED_BASE, evaluate, merge_eval_results, paper_tasks, seeded_tasks
from erl_agents.grpo import aggregate, group_advantages, k3_kl, ppo_token_loss, raft_advantages, reverse_kl, token_log_probs
from erl_agents.lora import adapter_state_dict, apply_lora, is_lora, load_adapter_state_dict, reference_weights
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer, load_policy
from erl_agents.rollout import ConstraintTable, SamplingParams, Trajectory, consolidation_copies, run_episodes
from erl_agents.run_folder import (RunFolderError, RunLock, failure_reason, folder_problem, save_folder,
                                   write_atomically)

__all__ = ["Trainer", "RunWriter", "NonFiniteTrainingError", "ResumeRefusedError", "resume_changes",
           "assign_advantages", "zero_variance_groups", "consecutive_bad_steps", "policy_update", "minibatch_plan",
           "micro_batches", "merge_rollout_rows", "TokenScorer", "tiny_corpus", "make_env", "eval_overlap_problem",
           "paper_tasks_folder"]

GROUPED_ROLES = ("attempt1", "reflection", "attempt2")


class NonFiniteTrainingError(RuntimeError):
    """Raised after ``max_bad_steps`` consecutive steps whose loss or gradient was NaN or infinite, or as soon as an
    update leaves a weight NaN or infinite (before that step's checkpoint)."""


class ResumeRefusedError(ValueError):
    """``--resume`` with a value that would change what the run is (see ``erl_agents.config.RULES``)."""


def resume_changes(saved: dict, config: TrainConfig) -> tuple[dict[str, list], list[str]]:
    """The fields whose value differs from the run's saved config (``{name: [old, new]}``), and those of them that
    ``--resume`` refuses: "fixed" fields not named in ``config.resume_changes``."""
    allowed = {name.strip() for name in config.resume_changes.split(",") if name.strip()}
    defaults = config_to_dict(TrainConfig())
    changes = {}
    for name, value in config_to_dict(config).items():
        old = saved.get(name, defaults[name])
        if old != value:
            changes[name] = [old, value]
    refused = [name for name in changes if RULES[name].resume == "fixed" and "all" not in allowed
               and name not in allowed]
    return changes, refused


# ----------------------------------------------------------------------------------------------------------------
# Setup helpers


def make_env(env_id: str, env_kwargs: dict) -> gym.Env:
    import erl_envs  # noqa: F401  (registers the ERL envs)

    # JSON and YAML have no tuples; our envs take ranges such as size=(2, 4) as tuples.
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in env_kwargs.items()}
    return gym.make(env_id, **kwargs)


def eval_overlap_problem(train_env: gym.Env, eval_env: gym.Env) -> str | None:
    """Why held-out evaluation on ``eval_env`` would not be held out, or None when it is (or cannot tell).

    Only envs with a fixed question list (``env.unwrapped.questions``, e.g. HotpotQA) can overlap: the grid envs'
    held-out instances come from their own seeds or the paper's test files.
    """
    from erl_envs.hotpotqa_data import shared_questions

    train = getattr(train_env.unwrapped, "questions", None)
    held_out = getattr(eval_env.unwrapped, "questions", None)
    if train is None or held_out is None:
        return None
    if train_env is eval_env:
        return (f"held-out evaluation would ask the {len(train)} training questions: give it other questions with "
                "--eval-env-kwargs '{\"data\": ...}' (e.g. ../shared/hotpotqa/dev_distractor_sample_dev.jsonl when "
                "training on ..._train.jsonl), or pass --allow-eval-overlap to evaluate on training questions")
    shared = shared_questions(train, held_out)
    if not shared:
        return None
    return (f"{len(shared)} of the {len(held_out)} held-out questions are also training questions (same id or "
            f"same normalised text, e.g. {shared[0].question[:80]!r}): evaluate on a disjoint split, or pass "
            "--allow-eval-overlap to accept the overlap")


def tiny_corpus(env: gym.Env, episodes: int = 200, seed: int = 0) -> list[str]:
    """Text to train the tiny tokenizer on: every prompt, the env's observations under random play, its actions."""
    from erl_envs import prompts
    from erl_envs.protocol import instructions_of

    rng = random.Random(seed)
    texts = [getattr(prompts, name) for name in dir(prompts) if name.isupper() and isinstance(getattr(prompts, name), str)]
    texts.append(instructions_of(env))
    actions = list(getattr(env.unwrapped, "valid_actions", None) or [])
    texts.extend(actions * 20)
    for episode in range(episodes):
        obs, info = env.reset(seed=EVAL_SEED_BASE * 2 + episode)
        texts.append(obs)
        for turn in range(50):
            if actions:
                action = rng.choice(actions)
            else:
                words = obs.split()
                query = " ".join(rng.sample(words, min(4, len(words))))
                action = f"<search>{query}</search>" if turn < 2 else f"\\boxed{{{rng.choice(words or ['x'])}}}"
            texts.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            texts.append(obs)
            for key in ("feedback", "episode_feedback"):
                if isinstance(info.get(key), str):
                    texts.append(info[key])
            if terminated or truncated:
                break
    return texts


class RunWriter:
    """Every file a run writes goes through here, and only the main process writes.

    Whole files are replaced atomically (``erl_agents.run_folder``); a write the disk refuses raises
    ``RunFolderError`` naming the file and the reason.
    """

    def __init__(self, folder: str | os.PathLike, enabled: bool = True):
        self.folder = Path(folder)
        self.enabled = enabled
        if enabled:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RunFolderError(f"cannot create the run folder {self.folder}: "
                                     f"{failure_reason(exc, self.folder.parent)}") from exc

    def write_json(self, name: str, data: Any) -> None:
        if self.enabled:
            text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
            write_atomically(self.folder / name, lambda f: f.write(text.encode("utf-8")))

    def append_metrics(self, row: dict) -> None:
        if self.enabled:
            path = self.folder / "metrics.jsonl"
            try:
                with open(path, "a") as f:
                    f.write(json.dumps(row) + "\n")
            except OSError as exc:
                raise RunFolderError(f"cannot write {path}: {failure_reason(exc, self.folder)}") from exc

    def rewrite_metrics(self, rows: Sequence[dict]) -> None:
        """After a resume: metrics.jsonl holds exactly the checkpoint's rows (drops steps that were lost)."""
        if self.enabled:
            text = "".join(json.dumps(r) + "\n" for r in rows)
            write_atomically(self.folder / "metrics.jsonl", lambda f: f.write(text.encode("utf-8")))


# ----------------------------------------------------------------------------------------------------------------
# Advantages


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


# ----------------------------------------------------------------------------------------------------------------
# Loss and update


def _collate(sequences: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, s in enumerate(sequences):
        ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        attention[row, : len(s)] = 1
    return ids, attention


def _target_matrix(trajectories: Sequence[Trajectory], width: int, field: str, fill) -> torch.Tensor:
    """A per-token field shifted to target positions: column p describes the token predicted at position p."""
    dtype = torch.float32 if isinstance(fill, float) else torch.long
    out = torch.full((len(trajectories), width - 1), fill, dtype=dtype)
    for row, t in enumerate(trajectories):
        values = getattr(t, field)[1:]
        out[row, : len(values)] = torch.tensor(values, dtype=dtype)
    return out


def selected_logits(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                    select: torch.Tensor) -> torch.Tensor:
    """Logits ``[N, V]`` predicting the selected target positions only (``select`` is ``[B, T-1]``).

    The output head runs on the N selected hidden states instead of all B*T, which is most of the memory for a
    150k-token vocabulary. Models that post-process logits (soft-capping, scaling) take the plain path.
    """
    if hasattr(model, "get_base_model"):
        # A LoRA PeftModel: its adapters live inside the wrapped transformer, so the transformer's parts are used.
        model = model.get_base_model()
    config = model.config
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        logits = model(input_ids=ids, attention_mask=attention).logits
        return logits[:, :-1][select]
    hidden = model.base_model(input_ids=ids, attention_mask=attention).last_hidden_state
    return model.get_output_embeddings()(hidden[:, :-1][select])


class TokenScorer(torch.nn.Module):
    """``selected_logits`` as one module call: what DistributedDataParallel wraps, since DDP arms its gradient
    all-reduce in the wrapper's forward and ``selected_logits`` reaches past the model's own ``forward``."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, attention: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        return selected_logits(self.model, ids, attention, select)


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    """The policy itself, for passes that need no gradient (and so no all-reduce)."""
    return model.module.model if isinstance(model, DistributedDataParallel) else model


def _policy_logits(model, ids, attention, select) -> torch.Tensor:
    if isinstance(model, DistributedDataParallel):
        return model(ids, attention, select)
    return selected_logits(model, ids, attention, select)


def _grad_sync(model, sync: bool):
    """Under DDP, micro-batches accumulate gradients locally and the last one's backward all-reduces them."""
    if isinstance(model, DistributedDataParallel) and not sync:
        return model.no_sync()
    return contextlib.nullcontext()


def _idle_loss(model, pad_id: int) -> torch.Tensor:
    """A zero loss over every weight, for a rank that has run out of micro-batches: its backward still joins the
    all-reduce the other ranks are waiting in, and adds exactly nothing to the gradient."""
    device = next(model.parameters()).device
    ids = torch.full((1, 2), pad_id, dtype=torch.long, device=device)
    select = torch.ones((1, 1), dtype=torch.bool, device=device)
    return _policy_logits(model, ids, torch.ones_like(ids), select).sum() * 0.0


def micro_batches(batch: Sequence[Trajectory], size: int, max_tokens: int = 0) -> list[list[Trajectory]]:
    """Consecutive chunks of at most ``size`` sequences and, when ``max_tokens`` > 0, at most ``max_tokens`` padded
    tokens (rows x longest row), the quantity activation memory grows with. A sequence longer than the cap gets a
    chunk of its own. Sort ``batch`` by length first so that chunks pad little."""
    chunks: list[list[Trajectory]] = []
    current: list[Trajectory] = []
    longest = 0
    for t in batch:
        width = max(longest, len(t.tokens))
        if current and (len(current) == size or (max_tokens and width * (len(current) + 1) > max_tokens)):
            chunks.append(current)
            current, width = [], len(t.tokens)
        current.append(t)
        longest = width
    if current:
        chunks.append(current)
    return chunks


def _micro_batch_loss(model, ref_model, batch: Sequence[Trajectory], table: ConstraintTable, config: TrainConfig,
                      pad_id: int, num_tokens: float, num_seqs: float, old: dict | None) -> tuple[torch.Tensor, dict]:
    device = next(model.parameters()).device
    ids, attention = _collate([t.tokens for t in batch], pad_id)
    select = _target_matrix(batch, ids.shape[1], "mask", 0).bool()
    constraints = _target_matrix(batch, ids.shape[1], "constraints", -1)[select]
    ids, attention = ids.to(device), attention.to(device)
    select_d = select.to(device)
    seq_of_row = select.nonzero(as_tuple=True)[0]
    targets = ids[:, 1:][select_d]
    temps = torch.tensor([config.reflect_temperature if t.role == "reflection" else config.temperature for t in batch])
    temperature = temps[seq_of_row].unsqueeze(-1).to(device)
    logits = _policy_logits(model, ids, attention, select_d)
    allowed = table.allowed_mask(constraints, logits.shape[-1]).to(device) if bool((constraints >= 0).any()) else None
    log_p, entropy = token_log_probs(logits, targets, temperature, allowed)
    old_log_p = torch.cat([old[id(t)] for t in batch]).to(device) if old is not None else log_p.detach()
    advantages = torch.tensor([t.advantage for t in batch], dtype=torch.float32, device=device)[seq_of_row.to(device)]
    token_loss, clipped = ppo_token_loss(log_p, old_log_p, advantages, config.clip_low, config.clip_high,
                                         config.clip_ratio_c)
    stats = {"clipped": clipped.float().sum().item(), "entropy": entropy.detach().sum().item(), "tokens": len(targets)}

    if ref_model is not None and config.kl_coef > 0:
        # With LoRA the reference is the policy itself with its adapters switched off.
        with torch.no_grad(), reference_weights(ref_model):
            ref_log_p, _ = token_log_probs(selected_logits(ref_model, ids, attention, select_d), targets, temperature,
                                           allowed)
        kl = k3_kl(log_p, ref_log_p)
        token_loss = token_loss + config.kl_coef * kl
        stats["kl"] = kl.detach().sum().item()
    if config.entropy_coef:
        token_loss = token_loss - config.entropy_coef * entropy

    distilled = [row for row, t in enumerate(batch) if t.teacher_tokens is not None]
    if distilled:
        # Teacher: the same policy, no gradient, with the reflected system prompt; rows align position by position.
        teacher_batch = [batch[row] for row in distilled]
        t_ids, t_attention = _collate([t.teacher_tokens for t in teacher_batch], pad_id)
        t_select = torch.zeros((len(teacher_batch), t_ids.shape[1] - 1), dtype=torch.bool)
        for k, (row, t) in enumerate(zip(distilled, teacher_batch)):
            cols = select[row].nonzero(as_tuple=True)[0] + t.teacher_offset
            t_select[k, cols] = True
        with torch.no_grad():
            teacher_logits = selected_logits(_inner(model), t_ids.to(device), t_attention.to(device),
                                             t_select.to(device))
        is_distilled = torch.zeros(len(batch), dtype=torch.bool)
        is_distilled[distilled] = True
        rows = is_distilled[seq_of_row].to(device)
        rkl = reverse_kl(logits[rows], teacher_logits, temperature[rows],
                         allowed[rows] if allowed is not None else None)
        token_loss = token_loss.clone()
        token_loss[rows] = token_loss[rows] + config.distill_coef * rkl
        stats["reverse_kl"] = rkl.detach().sum().item()
        stats["reverse_kl_tokens"] = int(rows.sum())

    matrix = torch.zeros(select.shape, dtype=token_loss.dtype, device=device)
    matrix[select_d] = token_loss
    loss = aggregate(matrix, select_d, config.loss_agg, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, stats


@torch.no_grad()
def _old_log_probs(model, batch, table, config, pad_id) -> dict[int, torch.Tensor]:
    """Log-probs of the policy that sampled the batch, kept while later optimizer steps move the weights."""
    out = {}
    device = next(model.parameters()).device
    for chunk in micro_batches(batch, config.micro_batch_size, config.max_tokens_per_micro_batch):
        ids, attention = _collate([t.tokens for t in chunk], pad_id)
        select = _target_matrix(chunk, ids.shape[1], "mask", 0).bool()
        constraints = _target_matrix(chunk, ids.shape[1], "constraints", -1)[select]
        logits = selected_logits(model, ids.to(device), attention.to(device), select.to(device))
        allowed = table.allowed_mask(constraints, logits.shape[-1]).to(device) if bool((constraints >= 0).any()) else None
        seq_of_row = select.nonzero(as_tuple=True)[0]
        temps = torch.tensor([config.reflect_temperature if t.role == "reflection" else config.temperature for t in chunk])
        log_p, _ = token_log_probs(logits, ids[:, 1:][select].to(device), temps[seq_of_row].unsqueeze(-1).to(device),
                                   allowed)
        counts = select.sum(-1).tolist()
        for t, part in zip(chunk, torch.split(log_p.cpu(), counts)):
            out[id(t)] = part
    return out


def minibatch_plan(trajectories: Sequence[Trajectory], config: TrainConfig, world: World,
                   rng: np.random.Generator | None = None, shuffle: bool = False) -> list[list[Trajectory]]:
    """The mini-batches of one PPO epoch; each is one optimizer step.

    ``ppo_mini_batch_size`` > 0 is verl's schedule, which the paper's runs used: the batch is cut, in rollout order
    and without shuffling, into consecutive blocks of ``ppo_mini_batch_size x group_size`` rows (split over the
    ranks, as verl divides it by the data-parallel size). RLVR's 64 tasks x 10 rows make one block; ERL's 256 first
    attempts plus a reflection, a retry and a distilled copy per failed attempt make 1-4, the later ones off-policy.
    Otherwise the trainable rows are cut into ``minibatches`` equal parts, shuffled when ``shuffle``. Every rank
    gets the same number of mini-batches (some possibly empty), so their gradient all-reduces pair up.
    """
    if config.ppo_mini_batch_size:
        rows = max(1, config.ppo_mini_batch_size * config.group_size // world.size)
        count = world.max(-(-len(trajectories) // rows))
        blocks = [trajectories[k * rows:(k + 1) * rows] for k in range(count)]
        return [[t for t in block if t.num_model_tokens > 0] for block in blocks]
    trainable = [t for t in trajectories if t.num_model_tokens > 0]
    order = rng.permutation(len(trainable)) if shuffle and rng is not None else np.arange(len(trainable))
    return [[trainable[i] for i in part] for part in np.array_split(order, config.minibatches)]


def policy_update(model, optimizer, scheduler, trajectories: Sequence[Trajectory], table: ConstraintTable,
                  config: TrainConfig, pad_id: int, ref_model=None, rng: np.random.Generator | None = None,
                  world: World | None = None) -> dict:
    """PPO epochs x mini-batches optimizer steps over the batch (``minibatch_plan``), micro-batched with gradient
    accumulation.

    Sequences whose every token has zero loss (advantage 0, no KL or entropy term) are left out of the forward
    passes but still count in the normalisers, so skipping them changes nothing but the time taken.

    Data parallel: ``model`` is a ``DistributedDataParallel(TokenScorer(policy))`` and ``trajectories`` this rank's
    share. The normalisers are summed over ranks, so the ranks' losses add up to the full batch's loss; DDP averages
    gradients over ranks, so each rank scales its loss by the world size to make that average the full-batch
    gradient. Every rank runs the same number of backward passes, and all ranks agree on skipping a bad update.
    """
    world = world or World()
    trainable = [t for t in trajectories if t.num_model_tokens > 0]
    stats = {"loss": 0.0, "clip_frac": 0.0, "entropy": 0.0, "kl": 0.0, "grad_norm": 0.0, "skipped_updates": 0,
             "trained_tokens": 0, "reverse_kl": 0.0, "optimizer_steps": 0}
    if not world.sum([len(trainable)])[0]:
        return stats
    device = next(model.parameters()).device
    precision = autocast_dtype(config.precision, device.type)
    regularised = (ref_model is not None and config.kl_coef > 0) or config.entropy_coef != 0
    # Shuffling equal parts only matters when there is more than one optimizer step.
    shuffle = config.ppo_epochs * config.minibatches > 1
    plan = minibatch_plan(trajectories, config, world, rng, shuffle)
    updates = config.ppo_epochs * len(plan)
    needed = [t for t in trainable if regularised or t.advantage != 0 or t.teacher_tokens is not None]
    old = None
    if updates > 1 and needed:
        with autocast(device, precision):
            old = _old_log_probs(_inner(model), needed, table, config, pad_id)
    sums = {"clipped": 0.0, "entropy": 0.0, "tokens": 0, "kl": 0.0, "reverse_kl": 0.0, "reverse_kl_tokens": 0}
    losses, norms = [], []
    model.train()
    for epoch in range(config.ppo_epochs):
        if epoch:
            plan = minibatch_plan(trajectories, config, world, rng, shuffle)
        for minibatch in plan:
            active = [t for t in minibatch if regularised or t.advantage != 0 or t.teacher_tokens is not None]
            num_tokens, num_seqs, num_active = world.sum(
                [float(sum(t.num_model_tokens for t in minibatch)), float(len(minibatch)), float(len(active))])
            if not num_seqs:
                continue
            active.sort(key=lambda t: len(t.tokens))
            chunks = micro_batches(active, config.micro_batch_size, config.max_tokens_per_micro_batch)
            rounds = world.max(len(chunks))
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            finite = True
            for k in range(rounds):
                with _grad_sync(model, sync=k == rounds - 1):
                    if k >= len(chunks):
                        with autocast(device, precision):
                            idle = _idle_loss(model, pad_id)
                        idle.backward()
                        continue
                    with autocast(device, precision):
                        loss, part_stats = _micro_batch_loss(model, ref_model, chunks[k], table, config, pad_id,
                                                             num_tokens, num_seqs, old)
                    if not torch.isfinite(loss):
                        finite = False
                        if not world.enabled:
                            break
                    # Under DDP a bad loss still runs its backward (the other ranks wait in its all-reduce); the
                    # update is then skipped on every rank below.
                    (loss * world.size if world.enabled else loss).backward()
                total += loss.item()
                for key, value in part_stats.items():
                    sums[key] += value
            if not num_active:
                continue
            if world.enabled:
                total, bad = world.sum([total, float(not finite)])
                finite = not bad
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            if not finite or not torch.isfinite(grad_norm):
                # A NaN/inf loss or gradient would poison the weights and Adam's moments: skip this step, log it.
                optimizer.zero_grad(set_to_none=True)
                stats["skipped_updates"] += 1
                continue
            optimizer.step()
            if not _weights_finite(model):
                # Adam's moments were finite and the gradient clipped, yet the weights are not (an overflowing
                # learning rate, a broken dtype): nothing later can repair them, so stop before they are saved.
                lr = optimizer.param_groups[0]["lr"]
                raise NonFiniteTrainingError(f"an optimizer step made weights NaN/inf (lr {lr:g})")
            stats["optimizer_steps"] += 1
            losses.append(total)
            norms.append(float(grad_norm))
    if scheduler is not None:
        # The schedule counts training steps, including ones whose update was skipped.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
            scheduler.step()
    if world.enabled:
        sums = dict(zip(sums, world.sum(list(sums.values()))))
    tokens = max(sums["tokens"], 1)
    stats.update(
        loss=float(np.mean(losses)) if losses else float("nan"),
        clip_frac=sums["clipped"] / tokens,
        entropy=sums["entropy"] / tokens,
        kl=sums["kl"] / tokens,
        grad_norm=float(np.mean(norms)) if norms else float("nan"),
        trained_tokens=int(sums["tokens"]),
        reverse_kl=sums["reverse_kl"] / max(sums["reverse_kl_tokens"], 1),
    )
    return stats


def _weights_finite(model: torch.nn.Module) -> bool:
    """Whether every trainable weight is finite, with a single device-to-host sync."""
    checks = [torch.isfinite(p).all() for p in model.parameters() if p.requires_grad]
    return bool(torch.stack(checks).all()) if checks else True


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


def paper_tasks_folder() -> Path | None:
    """The paper's task sets: ``$ERL_PAPER_TASKS``, else ``$ERL_SHARED/paper_tasks``, else ``../shared/paper_tasks``
    beside this checkout; ``None`` when none of them is a folder."""
    candidates = [os.environ.get("ERL_PAPER_TASKS", "")]
    if os.environ.get("ERL_SHARED"):
        candidates.append(os.path.join(os.environ["ERL_SHARED"], "paper_tasks"))
    candidates.append(str(Path(__file__).resolve().parents[2] / "shared" / "paper_tasks"))
    return next((Path(c) for c in candidates if c and os.path.isdir(c)), None)


def _task_fits(options: dict | None, env_kwargs: dict) -> bool:
    """Whether a paper instance lies inside the sizes ``env_kwargs`` trains on: FrozenLake's ``size`` is a range of
    board sides, Sokoban's the largest level shape (height, width)."""
    size, options = env_kwargs.get("size"), options or {}
    if size is None:
        return True
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if "size" in options and not min(pair) <= options["size"] <= max(pair):
        return False
    return not ("level" in options and (len(options["level"]) > pair[0] or max(map(len, options["level"])) > pair[1]))


# ----------------------------------------------------------------------------------------------------------------
# The trainer


class Trainer:
    """Owns the policy, optimizer, envs, reflection memory and run directory; ``train()`` is the loop."""

    def __init__(self, config: TrainConfig, is_main_process: bool = True, world: World | None = None):
        self.config = config
        # Data parallel (see erl_agents.distributed): this rank rolls out tasks [task_range) of each step.
        self.world = world or World()
        if config.tasks_per_step < self.world.size:
            raise ValueError(f"tasks_per_step ({config.tasks_per_step}) must be at least the number of ranks "
                             f"({self.world.size}): a task's group is never split across ranks")
        self.task_range = shard_bounds(config.tasks_per_step, self.world.rank, self.world.size)
        self.writer = RunWriter(config.output, enabled=is_main_process and self.world.is_main)
        # One run per folder: a second one would interleave metrics and race on checkpoint names.
        self._lock = RunLock(config.output) if self.writer.enabled else None
        try:
            self._build(config)
        except BaseException:
            self.close()  # a trainer that could not be built must not keep its folder locked
            raise

    def _build(self, config: TrainConfig) -> None:
        """Everything the run needs, in order: seeds, the checkpoint to resume, envs, model, optimizer, eval tasks."""
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device, self.world.local_rank)
        self.precision = autocast_dtype(config.precision, self.device.type)
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)

        # A resume is checked before anything is built: a refused one costs nothing.
        resume_state = self._latest_state() if config.resume else None
        history = self._check_resume(resume_state) if resume_state is not None else []
        # Envs: one per episode of a step, reused every step (HotpotQA's index is built once, not per episode).
        self.group_size = config.group_size
        pool = (self.task_range[1] - self.task_range[0]) * self.group_size
        self.envs = [make_env(config.env, config.env_kwargs) for _ in range(pool)]
        # Held-out envs: the training envs themselves unless eval_env_kwargs points evaluation at other data (an env
        # without a paper test set, such as HotpotQA, would otherwise evaluate on its training questions).
        self.eval_envs = self.envs
        if config.eval_env_kwargs:
            eval_kwargs = {**config.env_kwargs, **config.eval_env_kwargs}
            self.eval_envs = [make_env(config.env, eval_kwargs) for _ in range(pool)]
        overlap = eval_overlap_problem(self.envs[0], self.eval_envs[0])
        if overlap and not config.allow_eval_overlap:
            from erl_envs.hotpotqa_data import EvalOverlapError

            raise EvalOverlapError(overlap)
        if overlap:
            warnings.warn(f"evaluating on training questions (allow_eval_overlap is set): {overlap}", RuntimeWarning,
                          stacklevel=2)
        self.memory = None
        self.train_envs = self.envs
        if config.algo == "erl":
            self.train_envs = self._reflection_wrappers(resume_state)

        # Rank 0 writes the tiny model's files before the other ranks read them.
        if not self.world.is_main:
            self.world.barrier()
        self.policy = self._load_policy()
        if self.world.is_main:
            self.world.barrier()
        self.policy.model.to(self.device)
        if config.gradient_checkpointing:
            # Non-reentrant checkpointing needs no input that requires grad (frozen LoRA bases) and works under DDP.
            self.policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if config.lora_r:
            self.policy.model = apply_lora(self.policy.model, config.lora_r, config.lora_alpha, config.lora_targets)
        # The KL anchor: the initial policy, kept only when the KL term is on. With LoRA it is the policy with its
        # adapters switched off (no second copy of the weights); otherwise a frozen copy.
        self.ref_model = None
        if config.kl_coef > 0 and config.lora_r:
            self.ref_model = self.policy.model
        elif config.kl_coef > 0:
            self.ref_model = self._load_policy(reference=True).model.to(self.device).eval()
            self.ref_model.requires_grad_(False)
        if self.world.rank:
            # Same initial weights on every rank (above), different sampling streams from here on.
            torch.manual_seed(config.seed + 1_000_003 * self.world.rank)
        self.optimizer = torch.optim.AdamW([p for p in self.policy.model.parameters() if p.requires_grad], lr=config.lr,
                                           betas=(0.9, config.adam_beta2), weight_decay=config.weight_decay)
        warmup = max(config.warmup_steps, 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
        self.eval_tasks = self._eval_tasks()
        self.step = 0
        self.metrics: list[dict] = []
        self.time_before = {"training": 0.0, "elapsed": 0.0}  # seconds spent before this process (resumed runs)
        if resume_state is not None:
            self._resume(resume_state)
        else:
            self.writer.rewrite_metrics([])
        self.writer.write_json("config.json", {**config_to_dict(config), **({"history": history} if history else {})})
        # What the update trains through: the policy itself, or under data parallel a DDP wrapper that all-reduces
        # its gradients (DDP also broadcasts rank 0's weights here, so every rank starts identical).
        self.train_model = self.policy.model
        if self.world.enabled:
            self.train_model = DistributedDataParallel(
                TokenScorer(self.policy.model), device_ids=[self.device.index] if self.device.type == "cuda" else None)

    # --- setup ---

    def _reflection_wrappers(self, resume_state: dict | None) -> list[gym.Env]:
        from erl_envs.memory import PoolMemory, ReflectionMemory, memory_from_dict
        from erl_envs.reflection import ReflectionWrapper

        cfg = self.config
        saved = resume_state.get("memory") if resume_state is not None else None
        if saved is not None:
            self.memory = memory_from_dict(saved)
        else:
            self.memory = PoolMemory(cfg.memory_slots) if cfg.memory == "pool" else ReflectionMemory()
        reflector = None
        if cfg.reflector in ("rule", "plan"):
            from erl_envs.reflectors import RuleReflector

            reflector = RuleReflector(detail="full" if cfg.reflector == "rule" else "plan")
        # A pool gives each wrapper a handle; every episode takes the pool's next slot (see PoolMemory).
        memories = [self.memory.handle() if isinstance(self.memory, PoolMemory) else self.memory for _ in self.envs]
        return [ReflectionWrapper(env, memory=memory, gate_threshold=cfg.gate_threshold,
                                  memory_threshold=cfg.memory_threshold, reflector=reflector,
                                  no_memory=cfg.no_memory, no_reflection=cfg.no_reflection,
                                  reflection_instructions=cfg.reflection_instructions or None)
                for env, memory in zip(self.envs, memories)]

    def _load_policy(self, reference: bool = False) -> Policy:
        cfg = self.config
        if cfg.model != "tiny":
            return load_policy(cfg.model, dtype=cfg.dtype, device=str(self.device))
        # The tiny model is built once, saved in the run directory, and from then on loaded like any HF model
        # (the reference model and resumed runs read it back from there). It is derived from the seed and the
        # config alone, so a copy that does not match its manifest (a kill or a full disk during its first save)
        # is rebuilt rather than trusted.
        folder = Path(cfg.output) / "initial_model"
        problem = None if reference else folder_problem(folder)
        if problem is not None and (self.writer.enabled or not folder.exists()):
            if folder.exists():
                warnings.warn(f"{problem}; rebuilding the initial tiny model from the seed and the config",
                              RuntimeWarning, stacklevel=2)
            policy = self._build_tiny_policy()
            if not self.writer.enabled:
                return policy
            save_folder(folder, policy.save)
        return load_policy(str(folder), dtype="float32", device=str(self.device))

    def _build_tiny_policy(self) -> Policy:
        cfg = self.config
        # Row tokens need every row the env can show in the corpus twice; random play repeats rare rows (the agent
        # beside the goal) seldom: 20k episodes (~1 s) cover 338 of the 344 rows of a 2-4 board.
        episodes = 20_000 if cfg.tiny_grid_tokens == "row" else 200
        corpus = tiny_corpus(self.envs[0], episodes, seed=cfg.seed)
        tokenizer = build_tiny_tokenizer(corpus, vocab_size=cfg.tiny_vocab, grid_tokens=cfg.tiny_grid_tokens)
        model = build_tiny_model(tokenizer, cfg.tiny_hidden, cfg.tiny_layers, cfg.tiny_heads, cfg.tiny_intermediate,
                                 max_positions=max(cfg.max_seq_len, 512), seed=cfg.seed)
        return Policy(model, tokenizer)

    def _check_resume(self, state: dict) -> list[dict]:
        """Compare this run's config with the one the run folder was started with; refuse a change of meaning.

        Returns the config history to record: the saved one plus this resume's changes, when there are any.
        """
        from erl_envs.safe_parse import loads_json, read_text_limited

        path = Path(self.config.output) / "config.json"
        saved = dict(state.get("config") or {})  # what the checkpoint was trained with, when config.json is unusable
        if path.is_file():
            try:
                from_file = loads_json(read_text_limited(path, 1 << 20, "config file"))
                if not isinstance(from_file, dict):
                    raise ValueError(f"a JSON object was expected, got {type(from_file).__name__}")
                saved = from_file
            except (ValueError, UnicodeDecodeError) as exc:
                warnings.warn(f"{path} is unreadable ({exc}); comparing with the checkpoint's config instead",
                              RuntimeWarning, stacklevel=2)
        history = saved.pop("history", [])
        history = list(history) if isinstance(history, list) else []
        changes, refused = resume_changes(saved, self.config)
        if refused:
            shown = "; ".join(f"{name} {changes[name][0]!r} -> {changes[name][1]!r}" for name in refused)
            raise ResumeRefusedError(
                f"--resume refuses to change what the run in {self.config.output} is ({shown}); resume with its "
                f"values (see its config.json), start a new --output, or allow the change with "
                f"--resume-changes {','.join(refused)}")
        for name in ("resume", "resume_changes"):  # how this process was started, not what the run is
            changes.pop(name, None)
        if changes:
            history.append({"resumed_at_step": int(state["step"]), "changes": changes,
                            "allowed": [name for name in changes if RULES[name].resume == "fixed"]})
        return history

    def _eval_tasks(self) -> list:
        cfg = self.config
        if cfg.eval_set in ("auto", "paper"):
            # A paper_tasks folder when one is found, else the test sets shipped with erl_envs; only the instances
            # of the sizes the run trains on (a run on 2-4 boards is not evaluated on 9x9 ones).
            tasks = paper_tasks(cfg.env, paper_tasks_folder())
            tasks = [t for t in tasks if _task_fits(t[1], cfg.env_kwargs)] if tasks is not None else []
            if tasks:
                return tasks[: cfg.eval_tasks]
            if cfg.eval_set == "paper":
                raise ValueError(f"no paper test instance for {cfg.env} of the trained sizes "
                                 f"(env_kwargs size {cfg.env_kwargs.get('size')!r}); use --eval-set seeded")
        return seeded_tasks(cfg.eval_tasks)

    def _sampling(self) -> tuple[SamplingParams, SamplingParams, SamplingParams]:
        cfg = self.config
        return (SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens),
                SamplingParams(cfg.reflect_temperature, cfg.reflect_top_p, 0, cfg.reflect_max_new_tokens),
                SamplingParams(cfg.eval_temperature, cfg.eval_top_p, cfg.eval_top_k, cfg.max_new_tokens))

    # --- the loop ---

    def train(self) -> list[dict]:
        """Run the loop to ``steps`` (or the time limit); the run folder's lock is released however it ends."""
        try:
            return self._train()
        finally:
            self.close()

    def close(self) -> None:
        """Release the run folder for the next run (``train`` does this itself)."""
        if self._lock is not None:
            self._lock.release()

    def _train(self) -> list[dict]:
        cfg = self.config
        sampling, reflect_sampling, eval_sampling = self._sampling()
        # Training time (the time limit's clock) and wall time continue from the checkpoint's on a resume.
        started = time.perf_counter()
        first_row = len(self.metrics)
        progress = None
        if cfg.progress and self.writer.enabled:
            from tqdm.auto import tqdm

            progress = tqdm(total=cfg.steps, initial=self.step, desc=f"{cfg.algo} {cfg.env}", dynamic_ncols=True)
        if self.step == 0 and cfg.eval_every:
            self._log(self._evaluate(eval_sampling, {"step": 0}))
        while self.step < cfg.steps:
            self.step += 1
            step_start = time.perf_counter()
            timing: dict[str, float] = {}
            reset_peak_memory(self.device)

            # 1. Rollout: n episodes of each task, all episodes batched turn by turn. Rank 0's draw of the step's
            # task seeds holds for every rank; each rank plays its own block of tasks.
            seeds = self.world.broadcast(self.rng.integers(0, EVAL_SEED_BASE, size=cfg.tasks_per_step))
            tasks = [i for i in range(*self.task_range) for _ in range(self.group_size)]
            resets = [(int(seeds[i]), None) for i in tasks]
            table = ConstraintTable()
            self.policy.model.eval()
            memory_updates = self.memory.updates if self.memory is not None else 0
            with autocast(self.device, self.precision):
                episodes = run_episodes(self.policy, self.train_envs, resets, tasks, sampling, reflect_sampling,
                                        constrained=cfg.constrained_actions, max_seq_len=cfg.max_seq_len, table=table,
                                        timing=timing, mask_truncated=cfg.mask_truncated,
                                        time_limit=cfg.episode_time_limit, token_limit=cfg.episode_token_limit,
                                        kv_reuse=cfg.kv_reuse)
            if self.memory is not None and self.world.enabled:
                self._sync_memory(memory_updates)
            trajectories = [t for e in episodes for t in e.trajectories]
            if cfg.algo == "erl":
                trajectories += consolidation_copies(self.policy, episodes, cfg.distill, cfg.max_seq_len)

            # 2. Advantages: GRPO per (task, role); distilled copies max(r2, 0).
            assign_advantages(trajectories, cfg)

            # 3-4. Loss and update.
            clock = time.perf_counter()
            try:
                update = policy_update(self.train_model, self.optimizer, self.scheduler, trajectories, table, cfg,
                                       self.policy.tokenizer.pad_token_id, self.ref_model, self.rng, world=self.world)
            except NonFiniteTrainingError as exc:
                raise NonFiniteTrainingError(
                    f"stopping at step {self.step}: {exc}; the step was not saved, so resume from the checkpoints in "
                    f"{Path(cfg.output) / 'checkpoints'} with a lower --lr (--resume --resume-changes lr)") from None
            timing["update"] = time.perf_counter() - clock

            # 5. Log (rollout metrics over all ranks; time/ keys are this machine's measurements).
            rollout = self._rollout_metrics(episodes, trajectories)
            if self.world.enabled:
                rollout = merge_rollout_rows(self.world.gather(rollout))
            row = {"step": self.step, **rollout, **update, "lr": self.scheduler.get_last_lr()[0]}
            row.update({f"time/{k}": v for k, v in timing.items()})
            row["time/step"] = time.perf_counter() - step_start
            row["time/generation_tokens_per_s"] = row["tokens/generated"] / max(timing["generation"], 1e-9)
            row["time/update_tokens_per_s"] = update["trained_tokens"] / max(timing["update"], 1e-9)
            row["time/peak_memory_gb"] = self.world.max(peak_memory_gb(self.device))

            # 6. Evaluate.
            # The time limit counts training only: held-out evaluation is measurement, not training.
            training_seconds = (self.time_before["training"] + time.perf_counter() - started
                                - sum(m.get("time/eval", 0.0) for m in self.metrics[first_row:]))
            out_of_time = self.world.any(cfg.time_limit_min > 0 and training_seconds / 60 >= cfg.time_limit_min)
            # The sampled-token budget (what RLVR and ERL runs are matched on); metrics survive a resume, so it
            # counts the whole run. Rollout metrics are already merged over ranks: every rank sees the same sum.
            row["tokens/sampled_total"] = row["tokens/generated"] + sum(m.get("tokens/generated", 0)
                                                                        for m in self.metrics)
            out_of_tokens = bool(cfg.max_sampled_tokens and row["tokens/sampled_total"] >= cfg.max_sampled_tokens)
            out_of_time = out_of_time or out_of_tokens
            last = self.step == cfg.steps or out_of_time
            if cfg.eval_every and (self.step % cfg.eval_every == 0 or last):
                row = self._evaluate(eval_sampling, row)
            row["time/elapsed"] = self.time_before["elapsed"] + time.perf_counter() - started
            row["time/training"] = training_seconds
            self._log(row)
            if progress is not None:
                progress.update(1)
                progress.set_postfix({k: round(row[k], 3) for k in ("success/attempt1", "eval/success") if k in row})
            self._check_numerics(row)

            # 7. Checkpoint.
            if (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0) or last:
                self.save()
            if out_of_time:
                break
        if progress is not None:
            progress.close()
        if cfg.save_final_model and self.writer.enabled:
            save_folder(Path(cfg.output) / "final_model", self.policy.save)
        if self.writer.enabled:
            from erl_agents.plots import plot_learning_curves

            plot_learning_curves(self.metrics, Path(cfg.output) / "curves.png", title=f"{cfg.algo} on {cfg.env}")
        self.world.barrier()  # every rank returns once rank 0's files are complete
        return self.metrics

    # --- pieces of the loop ---

    def _rollout_metrics(self, episodes, trajectories) -> dict[str, float]:
        row: dict[str, float] = {}
        for role in ("attempt1", "reflection", "attempt2", "distilled"):
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
        row["groups/zero_variance"] = zero_variance_groups(trajectories)
        row["tokens/generated"] = sum(t.num_model_tokens for e in episodes for t in e.trajectories)
        row["tokens/total"] = sum(len(t.tokens) for t in trajectories)
        reflections = [e.record["reflection"] for e in episodes if e.record and e.record.get("reflection")]
        if reflections:
            # How often a reflection held a usable <prompt> block (else attempt 2 fell back to the base prompt).
            row["reflection/count"] = len(reflections)
            row["reflection/prompt_rate"] = float(np.mean([not r["fallback"] for r in reflections]))
        if self.memory is not None:
            row["memory/set"] = float(len(self.memory) > 0)
        return row

    def _evaluate(self, sampling: SamplingParams, row: dict) -> dict:
        cfg = self.config
        clock = time.perf_counter()
        self.policy.model.eval()
        # Evaluation draws from its own RNG stream, so evaluating (or not) never changes the training run.
        # Under data parallel each rank evaluates its block of the held-out tasks and the results are merged.
        tasks = self.world.shard(self.eval_tasks)
        with torch.random.fork_rng(devices=[]), autocast(self.device, self.precision):
            torch.manual_seed(cfg.seed * 1_000_003 + self.step + 7_919 * self.world.rank)
            result = evaluate(self.policy, self.eval_envs, tasks, cfg.eval_samples, sampling,
                              constrained=cfg.constrained_actions, max_seq_len=cfg.max_seq_len,
                              kv_reuse=cfg.kv_reuse) if tasks else None
        if self.world.enabled:
            result = merge_eval_results(self.world.gather(result), cfg.eval_samples)
        row = dict(row)
        row.update({f"eval/{k}": v for k, v in result.items()})
        row["time/eval"] = time.perf_counter() - clock
        return row

    def _sync_memory(self, updates_before: int) -> None:
        """One reflection memory for the whole run. Among the ranks that stored a reflection this step the highest
        rank's is kept, as if the ranks' episodes had run one after another; the update counts add up."""
        from erl_envs.memory import ReflectionMemory

        if not isinstance(self.memory, ReflectionMemory):
            return  # a pool's slots stay per rank: each rank is its own set of workers
        states = self.world.gather((self.memory.updates - updates_before, self.memory.to_dict()))
        stored = [state for count, state in states if count > 0]
        if not stored:
            return
        merged = ReflectionMemory.from_dict({**stored[-1], "updates": updates_before + sum(c for c, _ in states)})
        self.memory = merged
        for env in self.train_envs:
            env.memory = merged

    def _log(self, row: dict) -> None:
        self.metrics.append(row)
        self.writer.append_metrics(row)

    def _check_numerics(self, row: dict) -> None:
        """Warn about a step that skipped updates; stop the run once ``max_bad_steps`` such steps come in a row."""
        skipped = row.get("skipped_updates", 0)
        if not skipped:
            return
        cfg = self.config
        bad = consecutive_bad_steps(self.metrics)
        updates = skipped + row.get("optimizer_steps", 0)
        warnings.warn(f"step {self.step}: skipped {skipped} of {updates} updates for a non-finite loss or gradient "
                      f"({bad} bad step(s) in a row)", RuntimeWarning, stacklevel=2)
        if cfg.max_bad_steps and bad >= cfg.max_bad_steps:
            raise NonFiniteTrainingError(
                f"stopping at step {self.step}: the loss or gradient was NaN/inf in {bad} consecutive steps "
                f"(max_bad_steps={cfg.max_bad_steps}). Every bad update was skipped, so the weights hold no NaN; "
                f"check the rewards and the model's dtype, or lower --lr, then resume from the checkpoints in "
                f"{Path(cfg.output) / 'checkpoints'}")

    # --- checkpoints ---

    def save(self) -> None:
        # Every rank's RNG streams go into rank 0's checkpoint, so a resumed run continues each rank exactly.
        rank_rng = self.world.gather(ckpt.rng_state(self.rng)) if self.world.enabled else None
        if not self.writer.enabled:
            return
        payload = {
            # With LoRA only the adapters are saved: the base weights never change.
            "model": adapter_state_dict(self.policy.model) if is_lora(self.policy.model)
            else self.policy.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": ckpt.rng_state(self.rng),
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "metrics": self.metrics,
            "config": config_to_dict(self.config),
            "training_seconds": self.metrics[-1].get("time/training", 0.0) if self.metrics else 0.0,
            "elapsed_seconds": self.metrics[-1].get("time/elapsed", 0.0) if self.metrics else 0.0,
        }
        if rank_rng is not None:
            payload["rank_rng"] = rank_rng
        ckpt.save_checkpoint(Path(self.config.output) / "checkpoints", self.step, payload, self.config.keep_checkpoints)

    def _latest_state(self) -> dict:
        """The newest checkpoint that verifies; a corrupt or unfinished newer one is skipped with a warning."""
        folder = Path(self.config.output) / "checkpoints"
        if ckpt.latest_checkpoint(folder) is None:
            raise FileNotFoundError(f"--resume: no checkpoint in {folder}")
        _, state = ckpt.load_latest_checkpoint(folder)
        return state

    def _resume(self, state: dict) -> None:
        """Weights, optimizer, schedule, RNGs, metrics (the memory was restored before the wrappers were built)."""
        if is_lora(self.policy.model):
            load_adapter_state_dict(self.policy.model, state["model"])
        else:
            self.policy.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        cfg = self.config
        # Update settings a resume was allowed to change (--resume-changes) apply from here on: the optimizer's and
        # the schedule's saved copies would otherwise silently keep the old ones.
        factor = min(1.0, (self.scheduler.last_epoch + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        self.scheduler.base_lrs = [cfg.lr for _ in self.optimizer.param_groups]
        for group in self.optimizer.param_groups:
            group.update(lr=cfg.lr * factor, weight_decay=cfg.weight_decay, betas=(0.9, cfg.adam_beta2))
        rng = state["rng"]
        saved = state.get("rank_rng") or [rng]
        if len(saved) == self.world.size:
            rng = saved[self.world.rank]
        else:
            warnings.warn(f"the checkpoint was written by {len(saved)} rank(s) and this run has {self.world.size}: "
                          "weights, optimizer and schedule resume exactly, sampling does not", RuntimeWarning)
        ckpt.set_rng_state(rng, self.rng)
        if len(saved) != self.world.size and self.world.rank:
            torch.manual_seed(self.config.seed + 1_000_003 * self.world.rank)
        self.metrics = list(state["metrics"])
        self.step = int(state["step"])
        last = self.metrics[-1] if self.metrics else {}
        # Older checkpoints have no time fields: their last metrics row holds the same numbers.
        self.time_before = {"training": float(state.get("training_seconds", last.get("time/training", 0.0))),
                            "elapsed": float(state.get("elapsed_seconds", last.get("time/elapsed", 0.0)))}
        self.writer.rewrite_metrics(self.metrics)
