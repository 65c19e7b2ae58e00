"""What ``generate`` may sample and where a reply ends: the valid-action constraint and the stop string.

* Constrained decoding (``constrained_actions``): the env's valid replies as a token trie (``ActionTrie``), a logits
  processor that keeps each row inside it (``TrieConstraint``), and the interned sets each sampled token was drawn
  from (``ConstraintTable``), so the update scores a token under the very set it was sampled from.
* A stop string (``StopString``, ``stop_string_end``): a reflection that closes its ``</prompt>`` block ends there,
  wherever the token boundaries fall.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from transformers import LogitsProcessor, StoppingCriteria

from erl_agents.models import Policy

__all__ = ["ConstraintTable", "ActionTrie", "TrieConstraint", "StopString", "stop_string_end", "reflection_prefill"]


class ConstraintTable:
    """The token sets constrained decoding allowed, interned so a trajectory stores one small int per token."""

    def __init__(self):
        self.sets: list[tuple[int, ...]] = []
        self._index: dict[tuple[int, ...], int] = {}

    def intern(self, allowed: Sequence[int]) -> int:
        key = tuple(sorted(set(allowed)))
        if key not in self._index:
            self._index[key] = len(self.sets)
            self.sets.append(key)
        return self._index[key]

    def allowed_mask(self, indices: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """``[N, V]`` bool: row i allows the set ``indices[i]``, or every token when it is -1."""
        mask = torch.ones(len(indices), vocab_size, dtype=torch.bool)
        for row in torch.nonzero(indices >= 0).flatten().tolist():
            mask[row] = False
            mask[row, list(self.sets[int(indices[row])])] = True
        return mask


class ActionTrie:
    """Valid replies as token sequences (each ending with end-of-turn): what may follow a generated prefix.

    Nodes are numbered so that a generation step can advance every row with one dict lookup and fetch every row's
    mask with one tensor index. A prefix that leaves the trie (a row that already ended and is being padded) lands
    in an absorbing node that allows only end-of-turn, as does a finished reply.
    """

    ROOT = 0

    def __init__(self, policy: Policy, actions: Sequence[str]):
        end = policy.chat.end_of_turn_id
        self._build([policy.tokenizer(text, add_special_tokens=False)["input_ids"] + [end] for text in actions], end)

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]], end: int) -> "ActionTrie":
        """The trie of replies given as token sequences (each ending with ``end``), e.g. ``sequences`` of another."""
        trie = cls.__new__(cls)
        trie._build([list(s) for s in sequences], end)
        return trie

    def _build(self, sequences: list[list[int]], end: int) -> None:
        self.sequences = sequences
        self.children: list[dict[int, int]] = [{}]
        self.depth = 0
        for tokens in sequences:
            self.depth = max(self.depth, len(tokens))
            node = self.ROOT
            for token in tokens:
                if token not in self.children[node]:
                    self.children[node][token] = len(self.children)
                    self.children.append({})
                node = self.children[node][token]
        self.off = len(self.children)  # the absorbing node: off the trie
        self.children.append({})
        self.sets = [tuple(sorted(c)) if c else (end,) for c in self.children]
        self._masks: dict[tuple, torch.Tensor] = {}

    def step(self, node: int, token: int) -> int:
        return self.children[node].get(token, self.off)

    def allowed(self, prefix: Sequence[int]) -> list[int]:
        node = self.ROOT
        for token in prefix:
            node = self.step(node, token)
        return list(self.sets[node])

    def masks(self, like: torch.Tensor) -> torch.Tensor:
        """``[nodes, V]``: 0 where a node allows the token, -inf elsewhere (what gets added to the logits)."""
        key = (like.shape[-1], like.dtype, like.device)
        if key not in self._masks:
            table = torch.full((len(self.sets), like.shape[-1]), -math.inf, dtype=like.dtype)
            for node, allowed in enumerate(self.sets):
                table[node, list(allowed)] = 0
            self._masks[key] = table.to(like.device)
        return self._masks[key]


class TrieConstraint(LogitsProcessor):
    """Restricts each row to what the trie allows after its reply so far.

    The same arithmetic as ``generate``'s ``prefix_allowed_tokens_fn`` processor (add 0 / -inf; rows whose allowed
    tokens are all -inf get the bare mask), so the sampled tokens are the same, but each step costs one dict lookup
    per row and one gather, not a trie walk and a mask write per row. The nodes of every step are kept, which is
    what the constraint sets of the sampled tokens are read from.
    """

    def __init__(self, trie: ActionTrie, prompt_width: int):
        self.trie = trie
        self.prompt_width = prompt_width
        self.nodes: list[list[int]] = []  # per generation step, per row

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] == self.prompt_width:
            nodes = [self.trie.ROOT] * input_ids.shape[0]
        else:
            nodes = [self.trie.step(n, t) for n, t in zip(self.nodes[-1], input_ids[:, -1].tolist())]
        self.nodes.append(nodes)
        mask = self.trie.masks(scores)[torch.tensor(nodes, device=scores.device)]
        processed = scores + mask
        unsatisfiable = processed.amax(dim=-1, keepdim=True).isneginf()
        return torch.where(unsatisfiable, mask, processed)


class StopString(StoppingCriteria):
    """Ends a row once its reply so far holds ``text`` (e.g. ``</prompt>``), wherever token boundaries fall."""

    def __init__(self, tokenizer, text: str, prompt_width: int):
        self.tokenizer = tokenizer
        self.text = text
        self.prompt_width = prompt_width
        # Every token holds at least one character, so the last len(text) + 1 tokens hold any fresh occurrence.
        self.window = len(text) + 1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        tails = input_ids[:, max(self.prompt_width, input_ids.shape[1] - self.window):].tolist()
        done = [self.text in self.tokenizer.decode(tail, skip_special_tokens=True) for tail in tails]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def stop_string_end(tokenizer, ids: Sequence[int], text: str) -> int | None:
    """How many of ``ids`` it takes for their text to hold ``text`` (the reply is cut after that token), or None."""
    window = len(text) + 1
    for end in range(1, len(ids) + 1):
        if text in tokenizer.decode(ids[max(0, end - window): end], skip_special_tokens=True):
            return end
    return None


def reflection_prefill(enabled: bool) -> tuple[str, str]:
    """What starts the policy's reflections (as context) and what stops them: ``<prompt>`` and ``</prompt>`` when
    ``enabled`` (config ``reflect_prefill``), else nothing."""
    from erl_envs.reflection.wrapper import PROMPT_CLOSE, PROMPT_OPEN

    return (PROMPT_OPEN + "\n", PROMPT_CLOSE) if enabled else ("", "")
