"""Batched multi-episode rollouts with token-in/token-out trajectories.

Each live episode asks the generation engine (``erl_agents.engines``: ``hf`` or ``vllm``) for one reply at a time
and takes its turn when the reply comes back. The hf engine answers in rounds (every episode one turn, those whose
replies are sampled alike in one batch); vLLM answers each reply as it finishes, so an episode waiting on a short
action does not wait for another's long reflection (continuous batching). Each conversation is a single growing token list: the model's sampled tokens are appended as they came
out of the engine (loss mask 1, with their sampling log-probs), the env's messages are appended as chat-template
segments (mask 0), and nothing is ever re-tokenised.

With ``ReflectionWrapper`` an episode holds up to three conversations (first attempt, reflection, second attempt);
``info["new_conversation"]`` closes one and opens the next. The consolidation copies are built from these token lists
afterwards (``erl_agents.batch``): the second attempt with the system-prompt tokens swapped for the initial prompt's.

This module never talks to a model itself: prefill, caches, sampling, constraints and stop strings are the engine's.
An engine that caches a conversation's prefix across turns hands it back with each reply, and the episode returns
it with the conversation's next turn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import gymnasium as gym

from erl_agents.decoding import ConstraintTable
from erl_agents.engines import as_engine
from erl_agents.engines.base import Engine, Reply, Request, SamplingParams
from erl_agents.models import Policy
from erl_envs.protocol import instructions_of

__all__ = [
    "ROLES",
    "SamplingParams",
    "Trajectory",
    "Episode",
    "ConstraintTable",
    "Reply",
    "ResponseBudget",
    "run_episodes",
]

# attempt1: first attempts; reflection: the reflection text; attempt2: raw second attempts; distilled: the second
# attempt re-scored under the initial prompt (imitation) or a first attempt paired with its reflected context
# (reverse-KL consolidation).
ROLES = ("attempt1", "reflection", "attempt2", "distilled")
_ROLE_OF_PHASE = {"attempt1": "attempt1", "reflect": "reflection", "attempt2": "attempt2"}

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
    sampled: bool = True  # its model tokens were sampled by the engine (False: supervised rows, e.g. a teacher's)
    temperature: float = 1.0  # what its tokens were sampled with (the engine's log-probs are under these)
    top_k: int = 0
    top_p: float = 1.0
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
        self.prefix: object | None = None  # the engine's record of what it has read of the conversation
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
    engine: Engine | Policy,
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

    ``engine`` samples the replies (``erl_agents.engines``); a bare ``Policy`` is sampled by the hf engine, whose
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
    engine = as_engine(engine, kv_reuse=kv_reuse)
    chat = engine.chat
    reflect_sampling = reflect_sampling or sampling
    prefill = engine.tokenizer(reflect_prefix, add_special_tokens=False)["input_ids"] if reflect_prefix else []
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

    def request(state: _Live) -> None:
        """Ask the engine for the conversation's next reply (or, when its context is full, an empty one)."""
        conversation = state.conversation
        if conversation.overflowed or len(conversation.tokens) + 2 > max_seq_len:
            conversation.overflowed = True
            state.prefix = None
            unanswered.append(state)
            return
        reflect = state.phase == "reflect"
        params = reflect_sampling if reflect else sampling
        actions = None if reflect or state.valid_actions is None else tuple(state.valid_actions)
        # Room for the reply and, if it is cut short, the end-of-turn token we close it with; an attempt's reply
        # may also use no more than what is left of its response budget (its room).
        limit = min(params.max_new_tokens, max_seq_len - 1 - len(conversation.tokens))
        room = _room(state, response_budget) if response_budget and not reflect else limit + 1
        prefix, state.prefix = state.prefix, None
        engine.submit(Request(state.episode.index, conversation.tokens, params, actions,
                              reflect_stop if reflect else "", limit, room, prefix))

    unanswered: list[_Live] = []  # conversations with no room left: they step with an empty reply
    try:
        for state in live:
            request(state)
        while unanswered or engine.pending():
            clock = time.perf_counter()
            answered = engine.collect(table) if engine.pending() else []
            timing["generation"] += time.perf_counter() - clock
            clock = time.perf_counter()
            turns = [(live[r.key], r, reply, limit) for r, reply, limit in answered]
            turns += [(state, None, None, 0) for state in unanswered]
            unanswered.clear()
            for state, req, reply, limit in sorted(turns, key=lambda turn: turn[0].episode.index):
                if reply is not None:
                    conversation = state.conversation
                    conversation.temperature, conversation.top_k, conversation.top_p = (
                        req.sampling.temperature, req.sampling.top_k, req.sampling.top_p)
                    if req.room <= limit and len(reply.ids) >= req.room:
                        _cut_at_budget(state, reply, req.room)
                    state.prefix, reply.prefix = reply.prefix, None
                if _take_turn(state, reply, chat, max_seq_len, prefill, mask_truncated, reflect_prefix,
                              response_budget, time_limit, token_limit):
                    request(state)
            timing["env"] += time.perf_counter() - clock
    finally:
        engine.abort()  # forgets nothing, unless an exception stopped the rollout part-way
    return episodes


def _take_turn(state: _Live, reply: Reply | None, chat, max_seq_len: int, prefill: Sequence[int],
               mask_truncated: bool, reflect_prefix: str, response_budget: int, time_limit: float,
               token_limit: int) -> bool:
    """Append the reply, step the env with its text, and open what comes next; whether the episode goes on."""
    conversation = state.conversation
    if reply is None:
        text = ""
    else:
        masked = mask_truncated and not reply.finished
        conversation.append(reply.ids, model=not masked, logprobs=None if masked else reply.logprobs,
                            constraints=None if masked else reply.constraints)
        if not reply.ids or reply.ids[-1] not in chat.stop_ids:
            # The turn hit max_new_tokens, or the stop string: close it like the template would, as an env token
            # (no gradient).
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
        return False
    if over := _over_budget(state, time_limit, token_limit):
        _end_over_budget(state, over)
        return False
    if info.get("new_conversation"):
        _close(state)
        _open(state, chat, info["system_prompt"], obs, info.get("phase", "attempt1"), max_seq_len, prefill)
        return True
    state.phase = info.get("phase", state.phase)
    segment = chat.user_turn(obs)
    # A turn that would not fit (with room for one reply token) ends the conversation's growth.
    if len(conversation.tokens) + len(segment) + 2 > max_seq_len:
        conversation.overflowed = True
    if not conversation.overflowed:
        conversation.append(segment, model=False)
    return True


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
