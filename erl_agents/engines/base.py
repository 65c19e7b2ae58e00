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

__all__ = ["SamplingParams", "Reply", "Request", "Engine"]


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


@dataclass
class Request:
    """One reply a conversation waits for. ``limit``: the most tokens it may sample (``sampling.max_new_tokens``
    and what is left of the context), ``room``: where its attempt's response budget cuts it (``limit + 1`` when
    none). ``key``: the caller's name for it (the rollout's episode index)."""

    key: int
    context: Sequence[int]
    sampling: SamplingParams
    valid_actions: tuple[str, ...] | None = None
    stop_string: str = ""
    limit: int = 64
    room: int = 65
    prefix: object | None = None  # the conversation's previous reply's ``prefix`` (engines that hand them back)


class Engine:
    """A model the rollout can sample from. ``policy`` gives the tokenizer and chat format: contexts and replies are
    token ids of that tokenizer, whatever the engine, so trajectories never depend on which engine made them."""

    name = "base"
    # Whether replies carry a ``prefix`` worth handing back on the conversation's next turn (the hf engine's KV cache);
    # an engine that caches prefixes itself (vLLM's prefix caching) ignores them.
    hands_back_prefixes = False

    def __init__(self, policy: Policy):
        self.policy = policy
        self._queue: list[Request] = []  # submitted, not yet collected (engines that answer in rounds)

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

    # --- requests one at a time (the rollout's interface) ---

    # Whether ``collect`` hands back replies as they finish, each conversation going on at its own pace (vLLM's
    # continuous batching), rather than all of a round at once.
    streams = False

    def submit(self, request: Request) -> None:
        """Queue ``request``; its reply comes back from ``collect``."""
        self._queue.append(request)

    def pending(self) -> int:
        """Requests submitted and not yet collected."""
        return len(self._queue)

    def collect(self, table: ConstraintTable | None = None) -> list[tuple[Request, Reply, int]]:
        """Replies to submitted requests, at least one while any is pending, as ``(request, reply, limit)``: the
        limit the reply was sampled under. Here, in rounds: every queued request, those sampled alike (settings,
        valid actions, stop string) in one ``sample`` call, up to the shortest limit among them but at least to
        the largest room, so a batch is as the lockstep rollout has always made it."""
        queued, self._queue = self._queue, []
        groups: dict[tuple, list[Request]] = {}
        for request in queued:
            key = (request.sampling, request.valid_actions, request.stop_string)
            groups.setdefault(key, []).append(request)
        results = []
        for members in groups.values():
            first = members[0].sampling
            limit = max(min(min(r.limit for r in members), max(r.room for r in members)), 1)
            sampling = SamplingParams(first.temperature, first.top_p, first.top_k, limit)
            prefixes = [r.prefix for r in members] if self.hands_back_prefixes else None
            for r in members:
                r.prefix = None  # each call holds at most one old cache
            replies = self.sample([r.context for r in members], sampling, members[0].valid_actions, table,
                                  prefixes=prefixes, stop_string=members[0].stop_string)
            results += [(r, reply, limit) for r, reply in zip(members, replies)]
        return results

    def abort(self) -> None:
        """Forget every request not yet collected (a rollout that stopped part-way must not leave them to the next)."""
        self._queue = []

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
