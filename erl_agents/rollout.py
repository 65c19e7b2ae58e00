"""Batched multi-episode rollouts with token-in/token-out trajectories.

Every live episode is advanced one turn at a time, and all episodes that need a reply of the same kind (an action,
or a reflection, which samples differently) share one ``generate`` call. Each conversation is a single growing token
list: the model's sampled tokens are appended as they came out of ``generate`` (loss mask 1, with their sampling
log-probs), the env's messages are appended as chat-template segments (mask 0), and nothing is ever re-tokenised.

With ``ReflectionWrapper`` an episode holds up to three conversations (first attempt, reflection, second attempt);
``info["new_conversation"]`` closes one and opens the next. The consolidation copies are built from these token lists
afterwards (``erl_agents.batch``): the second attempt with the system-prompt tokens swapped for the initial prompt's.

Across turns the model reads each conversation once (``kv_reuse``): a reply comes back with the keys and values of
its conversation so far (a ``CachedPrefix``), and the next turn's ``generate`` call starts from them, so the model
reads only the env's new message. The samples are the same as when every turn re-reads the whole conversation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import gymnasium as gym
import torch
from transformers import LogitsProcessorList, StaticCache, StoppingCriteriaList
from transformers.cache_utils import DynamicLayer, StaticLayer
from transformers.generation import GenerateDecoderOnlyOutput

from erl_agents.decoding import ActionTrie, ConstraintTable, StopString, TrieConstraint, stop_string_end
from erl_agents.models import Policy
from erl_envs.protocol import instructions_of

__all__ = [
    "ROLES",
    "SamplingParams",
    "Trajectory",
    "Episode",
    "ConstraintTable",
    "CachedPrefix",
    "ResponseBudget",
    "generate_replies",
    "run_episodes",
]

# attempt1: first attempts; reflection: the reflection text; attempt2: raw second attempts; distilled: the second
# attempt re-scored under the initial prompt (imitation) or a first attempt paired with its reflected context
# (reverse-KL consolidation).
ROLES = ("attempt1", "reflection", "attempt2", "distilled")
_ROLE_OF_PHASE = {"attempt1": "attempt1", "reflect": "reflection", "attempt2": "attempt2"}

# generate's cache argument and output field: ``cache`` in recent transformers 5.x, ``past_key_values`` before.
_CACHE = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64


@dataclass
class Trajectory:
    """One conversation as the model saw it: tokens, which of them are the model's, and how they were sampled."""

    role: str
    task: int  # index of the task in the rollout's task list (the GRPO group is (task, role))
    episode: int
    tokens: list[int]
    mask: list[int]  # 1 on tokens the model sampled
    logprobs: list[float]  # sampling log-probs (0.0 where mask is 0)
    constraints: list[int]  # per token: index into ConstraintTable, -1 for free sampling
    prompt_len: int  # tokens of the opening: system prompt + first observation + assistant header
    system_prompt: str
    first_observation: str
    reward: float = 0.0
    success: bool = False
    overflowed: bool = False  # reached max_seq_len; later turns of this conversation were empty replies
    truncated_replies: int = 0  # replies cut off by max_new_tokens (closed with an env end-of-turn token)
    budget_ended: bool = False  # its episode ran out of time or tokens and was ended with reward 0
    response_cut: bool = False  # its attempt was ended by the response budget (run_episodes' response_budget)
    teacher_tokens: list[int] | None = None  # reverse-KL consolidation: the same tokens under the reflected context
    teacher_offset: int = 0  # position of token i of `tokens` in `teacher_tokens` is i + teacher_offset
    advantage: float = 0.0

    @property
    def num_model_tokens(self) -> int:
        return sum(self.mask)

    def append(self, ids: Sequence[int], model: bool, logprobs: Sequence[float] | None = None,
               constraints: Sequence[int] | None = None) -> None:
        self.tokens.extend(ids)
        self.mask.extend([1 if model else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.constraints.extend(constraints if constraints is not None else [-1] * len(ids))


@dataclass
class Episode:
    """Everything one episode produced: its conversations and, through ReflectionWrapper, its record."""

    task: int
    index: int
    trajectories: list[Trajectory] = field(default_factory=list)
    record: dict | None = None
    initial_system_prompt: str = ""
    returns: float = 0.0
    success: bool = False
    generated_tokens: int = 0  # model tokens sampled over all its conversations
    budget_ended: str = ""  # "time" or "tokens" when it was ended for exceeding that budget

    def trajectory(self, role: str) -> Trajectory | None:
        return next((t for t in self.trajectories if t.role == role), None)


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


@dataclass
class Reply:
    ids: list[int]  # sampled tokens, including the end-of-turn token when the model produced it
    logprobs: list[float]
    constraints: list[int]
    finished: bool  # ended with a stop token or the stop string (else it hit max_new_tokens)
    prefix: CachedPrefix | None = None  # with kv_reuse: context and reply as far as the model has read them


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
    for layer, (keys, values) in enumerate(prefix_layers or []):
        cache.update(keys, values, layer)
    return cache


def _cache_layers(cache) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    if not all(type(layer) in (StaticLayer, DynamicLayer) for layer in getattr(cache, "layers", [None])):
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


class ResponseBudget(gym.Wrapper):
    """Lets ``run_episodes`` end an attempt for its response budget: the step the rollout marks comes back
    truncated (unless it terminated), so whatever follows a truncated attempt follows (a ``ReflectionWrapper``
    reflects and retries). Put it between the text env and a ``ReflectionWrapper``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.end_if: Callable[[str], bool] | None = None  # set by the rollout before a step, read after it
        self.ended = False  # the last step was ended here

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.end_if, self.ended = None, False
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        end_if, self.end_if = self.end_if, None
        self.ended = end_if is not None and not (terminated or truncated) and bool(end_if(obs))
        return obs, reward, terminated, truncated or self.ended, info


def _response_budget_of(env: gym.Env) -> ResponseBudget | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, ResponseBudget):
            return env
        env = env.env
    return None


class _Live:
    """Per-episode state while it runs."""

    def __init__(self, env: gym.Env, episode: Episode, valid_actions, started: float):
        self.env = env
        self.started = started
        self.episode = episode
        self.valid_actions = valid_actions
        self.conversation: Trajectory | None = None
        self.prefix: CachedPrefix | None = None  # what the model has already read of the conversation (kv_reuse)
        self.phase = "attempt1"
        self.budget = _response_budget_of(env)


def _valid_actions_of(env: gym.Env) -> list[str] | None:
    actions = getattr(env.unwrapped, "valid_actions", None)
    if actions is None:
        return None
    actions = list(actions)
    if not actions or not all(isinstance(a, str) and a for a in actions):
        raise ValueError(f"env.unwrapped.valid_actions must be a non-empty list of non-empty str, got {actions!r}")
    return actions


def run_episodes(
    policy: Policy,
    envs: Sequence[gym.Env],
    resets: Sequence[tuple[int, dict | None]],
    tasks: Sequence[int],
    sampling: SamplingParams,
    reflect_sampling: SamplingParams | None = None,
    constrained: bool = False,
    max_seq_len: int = 8192,
    table: ConstraintTable | None = None,
    timing: dict[str, float] | None = None,
    mask_truncated: bool = False,
    time_limit: float = 0.0,
    token_limit: int = 0,
    kv_reuse: bool = True,
    response_budget: int = 0,
    reflect_prefix: str = "",
    reflect_stop: str = "",
) -> list[Episode]:
    """Play one episode in each env (``envs[i]`` reset with ``resets[i] = (seed, options)``) until all end.

    ``envs`` may be plain text envs (one conversation per episode) or ``ReflectionWrapper``s (up to three). The
    reflect phase samples with ``reflect_sampling`` and is never constrained. ``timing`` accumulates seconds spent
    in ``generation`` and ``env``.

    Budgets (0 = off): an episode still running after ``time_limit`` seconds, or after generating ``token_limit``
    tokens, is ended there with reward 0 on all its conversations and ``budget_ended`` set, so one runaway episode
    cannot stall a step. ``mask_truncated`` gives replies cut off by max_new_tokens mask 0 (no gradient): their
    reward says little about them.

    ``response_budget`` (the reference's ``max_response_length``, 0 = off) bounds each attempt: the tokens after
    its opening (replies and env turns) may not reach it. A reply may use what is left (and ``max_new_tokens``); a
    reply that reaches it is cut there and its step ends the attempt, and so does a step after which the next turn
    would have no room (the env's reward for that step counts). Every env then needs a ``ResponseBudget`` wrapper.
    Reflections have their own budget, ``reflect_sampling.max_new_tokens``.

    ``kv_reuse`` keeps each conversation's keys and values from one turn to the next, so a turn reads only the
    env's new message; off, every turn re-reads the whole conversation. Both give the same episodes for the same seed.

    ``reflect_prefix`` starts every reflection reply with that text (e.g. ``<prompt>``), put in the context as env
    tokens (no gradient) after the assistant header, and the env receives prefix + reply; ``reflect_stop`` ends a
    reflection once it holds that text (e.g. ``</prompt>``), and the turn is closed with an end-of-turn env token.
    A small model then writes the block's content rather than a preamble, and stops where the block ends.
    """
    if not (len(envs) == len(resets) == len(tasks)):
        raise ValueError(f"envs, resets and tasks must have the same length, got {len(envs)}, {len(resets)}, {len(tasks)}")
    timing = timing if timing is not None else {}
    timing.setdefault("generation", 0.0)
    timing.setdefault("env", 0.0)
    chat = policy.chat
    reflect_sampling = reflect_sampling or sampling
    prefill = policy.tokenizer(reflect_prefix, add_special_tokens=False)["input_ids"] if reflect_prefix else []
    live: list[_Live] = []
    clock = time.perf_counter()
    for index, (env, (seed, options), task) in enumerate(zip(envs, resets, tasks)):
        obs, info = env.reset(seed=seed, options=options)
        episode = Episode(task=task, index=index, initial_system_prompt=instructions_of(env))
        state = _Live(env, episode, _valid_actions_of(env) if constrained else None, clock)
        if response_budget and state.budget is None:
            raise ValueError("response_budget needs every env wrapped in erl_agents.rollout.ResponseBudget (inside "
                             "any ReflectionWrapper), so that an attempt can be ended")
        _open(state, chat, info.get("system_prompt") or episode.initial_system_prompt, obs, info.get("phase", "attempt1"),
              max_seq_len, prefill)
        live.append(state)
    episodes = [state.episode for state in live]
    timing["env"] += time.perf_counter() - clock

    while live:
        replies: dict[int, Reply | None] = {}
        # Group the episodes that need a reply by how it is sampled; each group is one generate call.
        groups: dict[tuple, list[int]] = {}
        for i, state in enumerate(live):
            conversation = state.conversation
            if conversation.overflowed or len(conversation.tokens) + 2 > max_seq_len:
                conversation.overflowed = True
                state.prefix = None
                replies[i] = None
                continue
            reflect = state.phase == "reflect"
            actions = None if reflect or state.valid_actions is None else tuple(state.valid_actions)
            groups.setdefault((reflect, actions), []).append(i)
        clock = time.perf_counter()
        for (reflect, actions), members in groups.items():
            params = reflect_sampling if reflect else sampling
            # Room for the reply and, if it is cut short, the end-of-turn token we close it with.
            budget = min(params.max_new_tokens, max_seq_len - 1 - max(len(live[i].conversation.tokens) for i in members))
            # Each attempt's reply may also use no more than what is left of its response budget (its room).
            rooms = [_room(live[i], response_budget) if response_budget and not reflect else budget + 1
                     for i in members]
            params = SamplingParams(params.temperature, params.top_p, params.top_k, max(min(budget, max(rooms)), 1))
            out = generate_replies(policy, [live[i].conversation.tokens for i in members], params, actions, table,
                                   prefixes=_hand_over_prefixes(live, members) if kv_reuse else None,
                                   stop_string=reflect_stop if reflect else "")
            for i, reply, room in zip(members, out, rooms):
                if room <= budget and len(reply.ids) >= room:
                    _cut_at_budget(live[i], reply, room)
                live[i].prefix, reply.prefix = reply.prefix, None
            replies.update(zip(members, out))
        timing["generation"] += time.perf_counter() - clock

        clock = time.perf_counter()
        still = []
        for i, state in enumerate(live):
            reply = replies[i]
            conversation = state.conversation
            if reply is None:
                text = ""
            else:
                masked = mask_truncated and not reply.finished
                conversation.append(reply.ids, model=not masked, logprobs=None if masked else reply.logprobs,
                                    constraints=None if masked else reply.constraints)
                if not reply.ids or reply.ids[-1] not in chat.stop_ids:
                    # The turn hit max_new_tokens, or the stop string: close it like the template would, as an env
                    # token (no gradient).
                    conversation.append([chat.end_of_turn_id], model=False)
                    conversation.truncated_replies += not reply.finished
                state.episode.generated_tokens += len(reply.ids)
                text = chat.reply_text(reply.ids)
                if state.phase == "reflect":
                    text = reflect_prefix + text
                elif response_budget:
                    left = _room(state, response_budget)
                    state.budget.end_if = (lambda obs: True) if conversation.response_cut else (
                        lambda obs, left=left: len(chat.user_turn(obs)) >= left)
            obs, reward, terminated, truncated, info = state.env.step(text)
            if state.budget is not None and state.budget.ended:
                conversation.response_cut = True
            conversation.reward += float(reward)
            state.episode.returns += float(reward)
            if terminated or truncated:
                _finish(state, info)
            elif over := _over_budget(state, time_limit, token_limit):
                _end_over_budget(state, over)
            elif info.get("new_conversation"):
                _close(state)
                _open(state, chat, info["system_prompt"], obs, info.get("phase", "attempt1"), max_seq_len, prefill)
                still.append(state)
            else:
                state.phase = info.get("phase", state.phase)
                segment = chat.user_turn(obs)
                # A turn that would not fit (with room for one reply token) ends the conversation's growth.
                if len(conversation.tokens) + len(segment) + 2 > max_seq_len:
                    conversation.overflowed = True
                if not conversation.overflowed:
                    conversation.append(segment, model=False)
                still.append(state)
        live = still
        timing["env"] += time.perf_counter() - clock
    return episodes


def _room(state: _Live, response_budget: int) -> int:
    """Tokens the current attempt may still add before it reaches the response budget."""
    conversation = state.conversation
    return response_budget - (len(conversation.tokens) - conversation.prompt_len)


def _cut_at_budget(state: _Live, reply: Reply, limit: int) -> None:
    """A reply that reached its attempt's response budget: cut there (as verl cuts the completion at max_tokens),
    and its step will be the attempt's last (``finish_reason == "length"`` in the reference)."""
    if len(reply.ids) > limit:
        reply.ids, reply.logprobs = reply.ids[:limit], reply.logprobs[:limit]
        reply.constraints = reply.constraints[:limit]
        reply.finished = False
    reply.prefix = None
    state.conversation.response_cut = True


def _hand_over_prefixes(live: list[_Live], members: list[int]) -> list[CachedPrefix | None]:
    """The members' cached prefixes, no longer held by their episodes: each call holds at most one old cache."""
    prefixes = [live[i].prefix for i in members]
    for i in members:
        live[i].prefix = None
    return prefixes


def _open(state: _Live, chat, system_prompt: str, obs: str, phase: str, max_seq_len: int,
          prefill: Sequence[int] = ()) -> None:
    tokens = chat.open(system_prompt, obs)
    if phase == "reflect":
        tokens += list(prefill)  # the reply's first words, given: context, not sampled
    role = _ROLE_OF_PHASE.get(phase, "attempt1")
    state.phase = phase
    state.conversation = Trajectory(
        role=role, task=state.episode.task, episode=state.episode.index, tokens=tokens, mask=[0] * len(tokens),
        logprobs=[0.0] * len(tokens), constraints=[-1] * len(tokens), prompt_len=len(tokens),
        system_prompt=system_prompt, first_observation=obs, overflowed=len(tokens) >= max_seq_len,
    )


def _close(state: _Live) -> None:
    state.prefix = None
    if state.conversation is not None:
        state.episode.trajectories.append(state.conversation)
        state.conversation = None


def _over_budget(state: _Live, time_limit: float, token_limit: int) -> str:
    """Which budget a still-running episode has used up ("time", "tokens"), or "" when it may go on."""
    if time_limit > 0 and time.perf_counter() - state.started >= time_limit:
        return "time"
    if token_limit > 0 and state.episode.generated_tokens >= token_limit:
        return "tokens"
    return ""


def _end_over_budget(state: _Live, reason: str) -> None:
    """End the episode where it stands: reward 0 and not solved for every conversation, flagged with the reason."""
    _close(state)
    episode = state.episode
    episode.budget_ended = reason
    episode.returns, episode.success = 0.0, False
    for trajectory in episode.trajectories:
        trajectory.reward, trajectory.success, trajectory.budget_ended = 0.0, False, True


def _finish(state: _Live, info: dict) -> None:
    _close(state)
    episode = state.episode
    record = info.get("record")
    episode.record = record
    if record is None:
        conversation = episode.trajectories[-1]
        success = info.get("success")
        conversation.success = bool(success) if success is not None else conversation.reward >= 1.0
        episode.success = conversation.success
        return
    # Rewards come from the record so that each role gets exactly the paper's reward: attempt1 -> r1,
    # reflection and attempt2 -> r2.
    r1, r2 = float(record["r1"]), record.get("r2")
    attempts = {"attempt1": record.get("attempt1") or {}, "attempt2": record.get("attempt2") or {}}
    for trajectory in episode.trajectories:
        if trajectory.role == "attempt1":
            trajectory.reward, trajectory.success = r1, bool(attempts["attempt1"].get("success", r1 >= 1.0))
        elif r2 is not None:
            trajectory.reward = float(r2)
            trajectory.success = bool(attempts["attempt2"].get("success", float(r2) >= 1.0))
    episode.success = bool(attempts["attempt1"].get("success", r1 >= 1.0))
