"""GRPO advantages and losses as small pure functions on tensors (PAPER.md section 2).

Shapes: ``[B, T]`` token matrices (sequence, position) with a 0/1 ``mask`` marking the model's own tokens, and
``[B]`` per-sequence rewards/advantages. ``aggregate`` is the only place a token-level loss becomes a scalar.
"""

from __future__ import annotations

import torch

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "group_advantages",
    "raft_advantages",
    "token_log_probs",
    "ppo_token_loss",
    "k3_kl",
    "reverse_kl",
    "aggregate",
]

ADVANTAGE_ESTIMATORS = ("grpo", "dr_grpo", "raft")
# Logit given to tokens outside a constrained set: exp() underflows to exactly 0, yet unlike -inf it never turns a
# gradient into nan (0 * -inf) in the entropy or KL terms.
MASKED_LOGIT = -1e9
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def group_advantages(
    rewards: torch.Tensor,
    groups: torch.Tensor,
    estimator: str = "grpo",
    eps: float = 1e-6,
    single_member: str = "reward",
) -> torch.Tensor:
    """One advantage per sequence from its reward and the rewards of its group.

    * ``grpo``: ``(r - mean) / (std + eps)`` with the *unbiased* std (n - 1 denominator), as verl computes it.
    * ``dr_grpo``: ``r - mean`` (Dr. GRPO: no std, so easy and hard groups are not rescaled).
    * ``raft``: ``max(r, 0)``, no baseline (reward-ranked fine-tuning; used for distilled copies).

    Identical rewards in a group give 0 under grpo and dr_grpo. A group of one has no baseline: ``single_member=
    "reward"`` gives it its raw reward (verl's behaviour, so the paper's), ``"zero"`` gives it 0 (no signal).
    """
    if rewards.shape != groups.shape or rewards.dim() != 1:
        raise ValueError(f"rewards and groups must be 1-D of the same length, got {tuple(rewards.shape)} and "
                         f"{tuple(groups.shape)}")
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {list(ADVANTAGE_ESTIMATORS)}")
    if single_member not in ("reward", "zero"):
        raise ValueError(f"single_member must be 'reward' or 'zero', got {single_member!r}")
    rewards = rewards.double()
    if estimator == "raft":
        return raft_advantages(rewards).float()
    _, index, counts = torch.unique(groups, return_inverse=True, return_counts=True)
    n = counts.double()
    sums = torch.zeros_like(n).index_add_(0, index, rewards)
    mean = sums / n
    centred = rewards - mean[index]
    if estimator == "dr_grpo":
        adv = centred
    else:
        square_sums = torch.zeros_like(n).index_add_(0, index, centred**2)
        std = torch.sqrt(square_sums / (n - 1).clamp(min=1))
        adv = centred / (std[index] + eps)
    single = counts[index] == 1
    adv = torch.where(single, rewards if single_member == "reward" else torch.zeros_like(rewards), adv)
    return adv.float()


def raft_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """``max(r, 0)``: imitate what scored, in proportion to its score, and never push anything down."""
    return rewards.clamp(min=0)


def token_log_probs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    allowed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of each target and the entropy of its distribution, under ``softmax(logits / temperature)``.

    ``logits`` is ``[N, V]`` (one row per scored token), ``targets`` ``[N]``. ``allowed`` (``[N, V]`` bool, optional)
    restricts each row to a set of tokens, as constrained decoding sampled it, so the trained policy is exactly
    the sampling policy.
    """
    logits = logits.float() / temperature
    if allowed is not None:
        logits = logits.masked_fill(~allowed, MASKED_LOGIT)
    log_p = torch.log_softmax(logits, dim=-1)
    target_log_p = log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    return target_log_p, entropy


def truncate_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """``logits`` ``[N, V]`` with every token outside its row's sampling set at -inf, as top-k then top-p samplers
    keep it: the ``top_k[i]`` most likely tokens (0: all; ties kept), then the most likely ones until their
    probability reaches ``top_p[i]`` (the most likely token always stays)."""
    logits = logits.clone()
    k = top_k.to(logits.device)
    if bool((k > 0).any()):
        kth = logits.sort(dim=-1, descending=True).values.gather(-1, (k.clamp(min=1) - 1).unsqueeze(-1))
        logits = logits.masked_fill((k > 0).unsqueeze(-1) & (logits < kth), float("-inf"))
    p = top_p.to(logits.device, torch.float32)
    if bool((p < 1).any()):
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(ordered.float(), dim=-1)
        before = probs.cumsum(-1) - probs  # probability of the more likely tokens
        drop = (before >= p.unsqueeze(-1)) & (p < 1).unsqueeze(-1)
        drop[:, 0] = False
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return logits


def sampled_log_probs(logits: torch.Tensor, targets: torch.Tensor, temperature: torch.Tensor,
                      allowed: torch.Tensor | None, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Log-probability of each target under the distribution a sampler drew it from: ``softmax(logits /
    temperature)`` restricted to ``allowed`` and to the row's top-k / top-p set (what generation engines report)."""
    logits = logits.float() / temperature
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    log_p = torch.log_softmax(truncate_logits(logits, top_k, top_p), dim=-1)
    return log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


# verl bounds the log-ratio before exp() in both the PPO ratio and the k3 term, so one token whose probability
# collapsed cannot overflow to inf (and turn the backward pass into 0 * inf = nan); k3 itself is capped at 10.
LOG_RATIO_BOUND = 20.0
K3_BOUND = 10.0


def ppo_token_loss(
    log_p: torch.Tensor,
    old_log_p: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate per token (to minimise) and where the clip was active.

    ``advantages`` broadcasts against ``log_p`` (``[B, 1]`` for one advantage per sequence). Separate low/high clip
    ranges ("clip-higher", DAPO) let unlikely tokens with positive advantage grow faster than likely ones shrink.

    ``clip_ratio_c`` > 1 turns on dual-clip PPO (Ye et al. 2020, verl's default 3.0): for a negative advantage the
    loss is capped at ``-A * c``, so a token whose ratio has grown far past ``c`` in an off-policy mini-batch stops
    pushing the update instead of dominating it; 0 turns it off. The log-ratio is bounded to +-20 first, as verl does.
    """
    if clip_ratio_c and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be above 1 (or 0 for no dual-clip), got {clip_ratio_c}")
    ratio = torch.exp(torch.clamp(log_p - old_log_p, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    active = clipped > unclipped
    if clip_ratio_c:
        capped = torch.minimum(loss, -advantages * clip_ratio_c)
        negative = advantages < 0
        active = active | (negative & (loss > capped))
        loss = torch.where(negative, capped, loss)
    return loss, active


def k3_kl(log_p: torch.Tensor, ref_log_p: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: ``exp(ref - logp) - (ref - logp) - 1`` (>= 0, low variance).

    As in verl, the log-ratio is bounded to +-20 before exp() and the estimate to at most 10, so a token the policy
    has made very unlikely cannot produce an inf loss or a nan gradient.
    """
    log_ratio = torch.clamp(ref_log_p - log_p, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, min=-K3_BOUND, max=K3_BOUND)


def reverse_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact per-position KL(student || teacher) over the vocabulary (rows ``[N, V]``; the teacher is detached).

    ``allowed`` restricts both distributions to the tokens constrained decoding allowed at that position.
    """
    student = student_logits.float() / temperature
    teacher = teacher_logits.detach().float() / temperature
    if allowed is not None:
        student = student.masked_fill(~allowed, MASKED_LOGIT)
        teacher = teacher.masked_fill(~allowed, MASKED_LOGIT)
    log_s = torch.log_softmax(student, dim=-1)
    log_t = torch.log_softmax(teacher, dim=-1)
    return (log_s.exp() * (log_s - log_t)).sum(-1)


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> torch.Tensor:
    """Reduce a ``[B, T]`` token loss to a scalar over the tokens where ``mask`` is 1.

    * ``token-mean``: sum over all tokens / number of tokens (long sequences weigh more).
    * ``seq-mean-token-mean``: mean over tokens in each sequence, then mean over sequences.
    * ``seq-mean-token-sum``: sum over tokens in each sequence, then mean over sequences (the paper's setting).

    ``num_tokens`` / ``num_seqs`` are the normalisers of the *whole* batch when ``loss`` is one micro-batch of it:
    then the micro-batch results sum to the full-batch result, whatever the split (and, later, whatever the rank).
    """
    mask = mask.to(loss.dtype)
    masked = loss * mask
    if mode == "token-mean":
        total = num_tokens if num_tokens is not None else mask.sum()
        return masked.sum() / max(float(total), 1.0)
    if mode not in ("seq-mean-token-mean", "seq-mean-token-sum"):
        raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {list(LOSS_AGGREGATIONS)}")
    per_seq = masked.sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1.0)
    total = num_seqs if num_seqs is not None else loss.shape[0]
    return per_seq.sum() / max(float(total), 1.0)
