"""What the episode loop asks of a model, whatever runs it: sample replies to token contexts, take new weights.

The rollout (``erl_agents.rollout``) owns envs, turns, budgets and trajectories; an engine owns the model's side:
prefill, caches, sampling, constraints and stop strings. Each engine is one module (``hf``: transformers'
``generate`` on the trainer's own model; ``vllm``: a ``vllm.LLM`` colocated with the trainer), so a third one, such
as an OpenAI-compatible server, is one more module with these few methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from erl_agents.decoding import ConstraintTable
from erl_agents.models import Policy

__all__ = ["SamplingParams", "Reply", "Engine"]


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    max_new_tokens: int = 64


@dataclass
class Reply:
    ids: list[int]  # sampled tokens, including the end-of-turn token when the model produced it
    logprobs: list[float]  # per token, under the distribution it was sampled from (after temperature, top-k, top-p)
    constraints: list[int]  # per token: index into the ConstraintTable of the set it was drawn from, -1 if free
    finished: bool  # ended with a stop token or the stop string (else it hit max_new_tokens)
    prefix: object | None = None  # engine-owned: what the engine has read of context + reply, for its next turn


class Engine:
    """A model the rollout can sample from. ``policy`` gives the tokenizer and chat format: contexts and replies are
    token ids of that tokenizer, whatever the engine, so trajectories never depend on which engine made them."""

    name = "base"
    # Whether replies carry a ``prefix`` worth handing back on the conversation's next turn (the hf engine's KV cache);
    # an engine that caches prefixes itself (vLLM's prefix caching) ignores them.
    hands_back_prefixes = False

    def __init__(self, policy: Policy):
        self.policy = policy

    @property
    def tokenizer(self):
        return self.policy.tokenizer

    @property
    def chat(self):
        return self.policy.chat

    def sample(self, contexts: Sequence[Sequence[int]], sampling: SamplingParams,
               valid_actions: Sequence[str] | None = None, table: ConstraintTable | None = None,
               prefixes: list | None = None, stop_string: str = "") -> list[Reply]:
        """One reply per context, all sampled with ``sampling``: restricted to ``valid_actions`` (then end of turn)
        when given, recording each token's allowed set in ``table``; ended by a stop token, by ``stop_string``
        (cut after the token that completes it) or by ``max_new_tokens``. ``prefixes`` (one per context, or None)
        are the replies' ``prefix`` values of the previous turn; the list is emptied once read."""
        raise NotImplementedError

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Serve these weights (Hugging Face state-dict names, full tensors) from the next ``sample`` on."""
        raise NotImplementedError

    def sync(self, model: torch.nn.Module) -> None:
        """Serve ``model``'s current weights (after an optimizer step)."""
        raise NotImplementedError

    def sleep(self) -> None:
        """Release what the engine holds between rollouts (its KV cache, its weights on a GPU); a no-op by default."""

    def wake(self) -> None:
        """Undo ``sleep`` before the next rollout; a no-op by default."""

    def close(self) -> None:
        """Free the engine for good."""
