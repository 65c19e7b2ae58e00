"""The loss and the optimizer steps: one training step's rows become PPO mini-batches, micro-batches with gradient
accumulation, the clipped token loss with the KL and entropy terms (and reverse-KL consolidation), then the update.

The maths are small functions in ``erl_agents.grpo``; this module feeds them tokens. Data parallel: the model is a
``DistributedDataParallel(TokenScorer(policy))`` and each rank holds its share of the rows (see ``policy_update``).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Sequence

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from erl_agents.accelerator import autocast, resolve_precision
from erl_agents.config import TrainConfig
from erl_agents.distributed import World
from erl_agents.grpo import aggregate, k3_kl, ppo_token_loss, reverse_kl, sampled_log_probs, token_log_probs
from erl_agents.lora import reference_weights
from erl_agents.metrics import consecutive_bad_steps
from erl_agents.sharding import clip_gradients, compute_device, is_sharded, root_call, weights_finite
from erl_agents.rollout import ConstraintTable, Trajectory

__all__ = ["NonFiniteTrainingError", "TokenScorer", "lr_factor", "selected_logits", "micro_batches", "minibatch_plan",
           "row_temperatures", "sampled_rows", "logprob_gap", "policy_update", "check_numerics"]


class NonFiniteTrainingError(RuntimeError):
    """Raised after ``max_bad_steps`` consecutive steps whose loss or gradient was NaN or infinite, or as soon as an
    update leaves a weight NaN or infinite (before that step's checkpoint)."""


def check_numerics(metrics: Sequence[dict], row: dict, step: int, max_bad_steps: int, checkpoints) -> None:
    """Warn about a step that skipped updates; stop the run once ``max_bad_steps`` such steps come in a row."""
    skipped = row.get("skipped_updates", 0)
    if not skipped:
        return
    bad = consecutive_bad_steps(metrics)
    updates = skipped + row.get("optimizer_steps", 0)
    warnings.warn(f"step {step}: skipped {skipped} of {updates} updates for a non-finite loss or gradient "
                  f"({bad} bad step(s) in a row)", RuntimeWarning, stacklevel=3)
    if max_bad_steps and bad >= max_bad_steps:
        raise NonFiniteTrainingError(
            f"stopping at step {step}: the loss or gradient was NaN/inf in {bad} consecutive steps "
            f"(max_bad_steps={max_bad_steps}). Every bad update was skipped, so the weights hold no NaN; "
            f"check the rewards and the model's dtype, or lower --lr, then resume from the checkpoints in {checkpoints}")


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
    # A LoRA PeftModel's adapters live inside the wrapped transformer, so the transformer's parts are used; under FSDP
    # the call is one forward of the sharded root (erl_agents.sharding).
    return root_call(model, _selected_logits, ids, attention, select)


def _selected_logits(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                     select: torch.Tensor) -> torch.Tensor:
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


def _idle_inputs(model, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    device = compute_device(model)
    ids = torch.full((1, 2), pad_id, dtype=torch.long, device=device)
    return ids, torch.ones_like(ids), torch.ones((1, 1), dtype=torch.bool, device=device)


def _idle_loss(model, pad_id: int, ref_model=None, teacher: bool = False) -> torch.Tensor:
    """A zero loss over every weight, for a rank that has run out of micro-batches: its backward still joins the
    all-reduce the other ranks are waiting in, and adds exactly nothing to the gradient. Under FSDP it also runs
    the passes a real micro-batch runs after the policy's (the reference's, the teacher's), since each gathers
    weights with a collective the other ranks are waiting in."""
    ids, attention, select = _idle_inputs(model, pad_id)
    loss = _policy_logits(model, ids, attention, select).sum() * 0.0
    with torch.no_grad():
        if ref_model is not None:
            with reference_weights(ref_model):
                selected_logits(ref_model, ids, attention, select)
        if teacher:
            selected_logits(_inner(model), ids, attention, select)
    return loss


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


def row_temperatures(batch: Sequence[Trajectory], config: TrainConfig) -> torch.Tensor:
    """The temperature each row is scored at in the update. ``logprob_temperature="sampled"``: the one it was
    sampled at (reflections at ``reflect_temperature``). ``"rollout"``: ``temperature`` for every row, as verl does
    (it passes one temperature for the whole batch), so the reference scores its reflections at 0.7, not 0.5."""
    if config.logprob_temperature == "rollout":
        return torch.full((len(batch),), float(config.temperature))
    return torch.tensor([config.reflect_temperature if t.role == "reflection" else config.temperature for t in batch])


def _micro_batch_loss(model, ref_model, batch: Sequence[Trajectory], table: ConstraintTable, config: TrainConfig,
                      pad_id: int, num_tokens: float, num_seqs: float, old: dict | None,
                      teacher_pass: bool = False, gap_rows: set[int] | None = None) -> tuple[torch.Tensor, dict]:
    """``teacher_pass``: under FSDP another rank runs a teacher pass in this round, so this one runs a pass too.
    ``gap_rows``: ids of rows scored before any optimizer step whose engine log-probs are to be compared with
    these (the agreement check when the old log-probs are the engine's: see ``policy_update``)."""
    device = compute_device(model)
    ids, attention = _collate([t.tokens for t in batch], pad_id)
    select = _target_matrix(batch, ids.shape[1], "mask", 0).bool()
    constraints = _target_matrix(batch, ids.shape[1], "constraints", -1)[select]
    ids, attention = ids.to(device), attention.to(device)
    select_d = select.to(device)
    seq_of_row = select.nonzero(as_tuple=True)[0]
    targets = ids[:, 1:][select_d]
    temperature = row_temperatures(batch, config)[seq_of_row].unsqueeze(-1).to(device)
    logits = _policy_logits(model, ids, attention, select_d)
    allowed = table.allowed_mask(constraints, logits.shape[-1]).to(device) if bool((constraints >= 0).any()) else None
    log_p, entropy = token_log_probs(logits, targets, temperature, allowed)
    old_log_p = torch.cat([old[id(t)] for t in batch]).to(device) if old is not None else log_p.detach()
    advantages = torch.tensor([t.advantage for t in batch], dtype=torch.float32, device=device)[seq_of_row.to(device)]
    token_loss, clipped = ppo_token_loss(log_p, old_log_p, advantages, config.clip_low, config.clip_high,
                                         config.clip_ratio_c)
    stats = {"clipped": clipped.float().sum().item(), "entropy": entropy.detach().sum().item(), "tokens": len(targets)}
    if gap_rows:
        parts = torch.split(log_p.detach().float().cpu(), select.sum(-1).tolist())
        gaps = [(engine_log_probs(t) - part).abs() for t, part in zip(batch, parts) if id(t) in gap_rows]
        if gaps:
            gap = torch.cat(gaps)
            stats.update(gap_sum=float(gap.sum()), gap_count=len(gap), gap_max=float(gap.max()) if len(gap) else 0.0)

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
    elif teacher_pass:
        with torch.no_grad():
            selected_logits(_inner(model), *_idle_inputs(model, pad_id))

    matrix = torch.zeros(select.shape, dtype=token_loss.dtype, device=device)
    matrix[select_d] = token_loss
    loss = aggregate(matrix, select_d, config.loss_agg, num_tokens=num_tokens, num_seqs=num_seqs)
    return loss, stats


@torch.no_grad()
def _old_log_probs(model, batch, table, config, pad_id, world: World,
                   as_sampled: bool = False) -> dict[int, torch.Tensor]:
    """Log-probs of the policy that sampled the batch, kept while later optimizer steps move the weights.
    ``as_sampled``: under each row's top-k / top-p cut too, the distribution the engine drew the tokens from."""
    out = {}
    device = compute_device(model)
    chunks = micro_batches(batch, config.micro_batch_size, config.max_tokens_per_micro_batch)
    if is_sharded(model):
        # Every rank runs as many passes (each gathers weights with a collective): ranks with fewer chunks idle.
        for _ in range(world.max(len(chunks)) - len(chunks)):
            selected_logits(model, *_idle_inputs(model, pad_id))
    for chunk in chunks:
        ids, attention = _collate([t.tokens for t in chunk], pad_id)
        select = _target_matrix(chunk, ids.shape[1], "mask", 0).bool()
        constraints = _target_matrix(chunk, ids.shape[1], "constraints", -1)[select]
        logits = selected_logits(model, ids.to(device), attention.to(device), select.to(device))
        allowed = table.allowed_mask(constraints, logits.shape[-1]).to(device) if bool((constraints >= 0).any()) else None
        seq_of_row = select.nonzero(as_tuple=True)[0]
        temps = row_temperatures(chunk, config)
        targets, temperature = ids[:, 1:][select].to(device), temps[seq_of_row].unsqueeze(-1).to(device)
        if as_sampled:
            temperature = torch.tensor([t.temperature for t in chunk])[seq_of_row].unsqueeze(-1).to(device)
            top_k = torch.tensor([t.top_k for t in chunk])[seq_of_row]
            top_p = torch.tensor([t.top_p for t in chunk])[seq_of_row]
            log_p = sampled_log_probs(logits, targets, temperature, allowed, top_k, top_p)
        else:
            log_p, _ = token_log_probs(logits, targets, temperature, allowed)
        counts = select.sum(-1).tolist()
        for t, part in zip(chunk, torch.split(log_p.cpu(), counts)):
            out[id(t)] = part
    return out


def sampled_rows(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Rows whose model tokens the engine sampled in exactly this context, so its log-probs are comparable with the
    trainer's: not the distilled copies (scored under another prompt) nor supervised rows (no sampling log-probs)."""
    unique = {id(t): t for t in trajectories}.values()
    return [t for t in unique if t.num_model_tokens > 0 and t.role != "distilled" and t.teacher_tokens is None
            and t.sampled]


def engine_log_probs(row: Trajectory) -> torch.Tensor:
    """The engine's log-probs of a row's model tokens, in target order (what ``_old_log_probs`` returns per row)."""
    return torch.tensor([lp for lp, m in zip(row.logprobs[1:], row.mask[1:]) if m], dtype=torch.float32)


def split_by_scoring(rows: Sequence[Trajectory], config: TrainConfig) -> tuple[list[Trajectory], list[Trajectory]]:
    """Sampled rows split in two: those the update scores under the very distribution the engine drew them from,
    and those drawn under a top-k / top-p cut or at another temperature than the update scores them at (verl's
    one-temperature scoring of reflections)."""
    plain, cut = [], []
    for t, temp in zip(rows, row_temperatures(rows, config).tolist() if rows else []):
        (cut if t.top_k > 0 or t.top_p < 1 or abs(t.temperature - temp) > 1e-9 else plain).append(t)
    return plain, cut


@torch.no_grad()
def logprob_gap(model, trajectories: Sequence[Trajectory], table: ConstraintTable, config: TrainConfig, pad_id: int,
                world: World, old: dict | None = None) -> tuple[float, float]:
    """The generation engine against the trainer before the update: mean and max of |engine log-prob - trainer
    log-prob| over the sampled tokens (verl's rollout-vs-actor check), the trainer's under the distribution each
    token was drawn from (temperature, action constraint, and the row's top-k / top-p cut). A missed weight sync, a wrong chat template or
    a wrong temperature shows here at once. ``old`` holds rows already scored (their old log-probs); the rest get
    one no-grad pass. Under data parallel the figures cover every rank's rows."""
    rows = sampled_rows(trajectories)
    # Rows sampled under another distribution than the update's are scored as sampled; the rest as the update does.
    plain, cut = split_by_scoring(rows, config)
    missing = [t for t in plain if old is None or id(t) not in old]
    scored = dict(old or {})
    if world.any(bool(missing)):
        scored.update(_old_log_probs(model, missing, table, config, pad_id, world))
    if world.any(bool(cut)):
        scored.update(_old_log_probs(model, cut, table, config, pad_id, world, as_sampled=True))
    total, count, largest = 0.0, 0, 0.0
    for t in rows:
        gap = (engine_log_probs(t) - scored[id(t)].float()).abs()
        total, count = total + float(gap.sum()), count + len(gap)
        largest = max(largest, float(gap.max())) if len(gap) else largest
    if world.enabled:
        total, count = world.sum([total, float(count)])
        largest = world.max(largest)
    return (total / count if count else float("nan")), largest


def minibatch_plan(trajectories: Sequence[Trajectory], config: TrainConfig, world: World,
                   rng: np.random.Generator | None = None, shuffle: bool = False) -> list[list[Trajectory]]:
    """The mini-batches of one PPO epoch; each is one optimizer step.

    ``ppo_mini_batch_size`` > 0 is verl's schedule, which the paper's runs used: the batch is cut, in rollout order
    and without shuffling, into consecutive blocks of ``ppo_mini_batch_size x group_size`` rows (split over the
    ranks, as verl divides it by the data-parallel size). RLVR's 64 tasks x 10 rows make one block; ERL's 256 first
    attempts plus, per failed one, four rows (paper rows: the reflection twice, the retry, its distilled copy) make
    1-5, the later ones off-policy.
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


def lr_factor(step: int, warmup: int, schedule: str, total: int) -> float:
    """The learning rate's multiplier at scheduler step ``step`` (0-based) of ``total``: a linear warm-up over
    ``warmup`` steps, then constant (the paper's) or a cosine down to a tenth of the rate at the last step."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, max(0, step - warmup) / max(1, total - 1 - warmup))
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * progress))


def policy_update(model, optimizer, scheduler, trajectories: Sequence[Trajectory], table: ConstraintTable,
                  config: TrainConfig, pad_id: int, ref_model=None, rng: np.random.Generator | None = None,
                  world: World | None = None, scaler: torch.amp.GradScaler | None = None) -> dict:
    """PPO epochs x mini-batches optimizer steps over the batch (``minibatch_plan``), micro-batched with gradient
    accumulation, each forward and backward under the autocast of ``config.dtype`` / ``config.precision``.

    ``scaler`` (fp16 runs, ``accelerator.grad_scaler``) scales the loss before every backward and unscales the
    gradients before clipping; a step whose scaled gradient overflowed is skipped and the scale halved, which is
    counted in ``loss_scale_skips`` (routine while the scale settles), not in ``skipped_updates``.

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
    if scaler is not None:
        stats["loss_scale_skips"] = 0
    if not world.sum([len(trainable)])[0]:
        return stats
    device = compute_device(model)
    sharded = is_sharded(model)
    precision = resolve_precision(config.dtype, config.precision, device.type).compute
    regularised = (ref_model is not None and config.kl_coef > 0) or config.entropy_coef != 0
    # Shuffling equal parts only matters when there is more than one optimizer step.
    shuffle = config.ppo_epochs * config.minibatches > 1
    plan = minibatch_plan(trajectories, config, world, rng, shuffle)
    updates = config.ppo_epochs * len(plan)
    # A row that is in the batch twice (a reflection under paper rows) is the same object: scored once.
    needed = list({id(t): t for t in trainable if regularised or t.advantage != 0 or t.teacher_tokens is not None}
                  .values())
    # old_logprobs="rollout": rows the engine drew from the update's own distribution keep its log-probs as the old
    # policy's (no pass for them); the agreement check then compares those of the first mini-batch, which is scored
    # before any optimizer step, with the trainer's, at no extra pass.
    engine_ids = ({id(t) for t in split_by_scoring(sampled_rows(trainable), config)[0]}
                  if config.old_logprobs == "rollout" else set())
    gap_rows = engine_ids if config.logprob_check and config.old_logprobs == "rollout" else None
    old = None
    if updates > 1 and world.any(bool(needed)):
        old = {id(t): engine_log_probs(t) for t in needed if id(t) in engine_ids}
        recompute = [t for t in needed if id(t) not in old]
        if world.any(bool(recompute)):
            with autocast(device, precision):
                old.update(_old_log_probs(_inner(model), recompute, table, config, pad_id, world))
    if config.logprob_check and gap_rows is None:
        with autocast(device, precision):
            stats["rollout/logprob_abs_diff"], stats["rollout/logprob_abs_diff_max"] = logprob_gap(
                _inner(model), trajectories, table, config, pad_id, world, old)
    gap = [0.0, 0.0, 0.0]  # the first mini-batch's sum, count and largest |engine - trainer| (old_logprobs="rollout")
    sums = {"clipped": 0.0, "entropy": 0.0, "tokens": 0, "kl": 0.0, "reverse_kl": 0.0, "reverse_kl_tokens": 0}
    losses, norms = [], []
    model.train()
    for epoch in range(config.ppo_epochs):
        if epoch:
            plan = minibatch_plan(trajectories, config, world, rng, shuffle)
        for index, minibatch in enumerate(plan):
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
                # Under FSDP a teacher pass on any rank is a teacher pass on every rank (see _idle_loss).
                teacher = sharded and world.any(k < len(chunks) and any(t.teacher_tokens is not None
                                                                        for t in chunks[k]))
                with _grad_sync(model, sync=k == rounds - 1):
                    if k >= len(chunks):
                        with autocast(device, precision):
                            idle = _idle_loss(model, pad_id, ref_model if sharded and config.kl_coef > 0 else None,
                                              teacher)
                        # Through the scaler too: a rank's scaler must have scaled a loss before it unscales.
                        (scaler.scale(idle) if scaler is not None else idle).backward()
                        continue
                    with autocast(device, precision):
                        loss, part_stats = _micro_batch_loss(model, ref_model, chunks[k], table, config, pad_id,
                                                             num_tokens, num_seqs, old, teacher,
                                                             gap_rows if epoch == 0 and index == 0 else None)
                    if not torch.isfinite(loss):
                        finite = False
                        if not world.enabled:
                            break
                    # Under DDP a bad loss still runs its backward (the other ranks wait in its all-reduce); the
                    # update is then skipped on every rank below.
                    scaled = loss * world.size if world.enabled else loss
                    (scaler.scale(scaled) if scaler is not None else scaled).backward()
                total += loss.item()
                gap = [gap[0] + part_stats.pop("gap_sum", 0.0), gap[1] + part_stats.pop("gap_count", 0),
                       max(gap[2], part_stats.pop("gap_max", 0.0))]
                for key, value in part_stats.items():
                    sums[key] += value
            if not num_active:
                continue
            if world.enabled:
                total, bad = world.sum([total, float(not finite)])
                finite = not bad
            if scaler is not None:
                scaler.unscale_(optimizer)
            grad_norm = clip_gradients(model.parameters(), config.max_grad_norm, world)
            if not finite or not torch.isfinite(grad_norm):
                # A NaN/inf loss or gradient would poison the weights and Adam's moments: skip this step, log it.
                # Under loss scaling a finite loss with an overflowing gradient only means the scale is too high.
                optimizer.zero_grad(set_to_none=True)
                if scaler is not None:
                    scaler.update()
                stats["loss_scale_skips" if finite and scaler is not None else "skipped_updates"] += 1
                continue
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            if not weights_finite(model.parameters(), world):
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
    if gap_rows is not None:
        total_gap, count = world.sum(gap[:2])
        stats["rollout/logprob_abs_diff"] = total_gap / count if count else float("nan")
        stats["rollout/logprob_abs_diff_max"] = world.max(float(gap[2]))
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

