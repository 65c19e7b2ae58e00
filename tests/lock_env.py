"""A combination-lock text env for the learning check that only ERL can pass (tests/agents/test_erl_learning.py).

Each episode shows one lock out of ``locks``; exactly one of ``keys`` key strings opens it, by a fixed secret table
(the same in every instance of the env). One turn: reward 1 for the right key, else 0. A first attempt without the
table succeeds by chance 1 / ``keys``, and nothing in the observation tells the keys apart, so an RLVR group of a
few samples rarely holds a success. ``privileged_reflector`` knows the table (it is privileged: it reads the answer,
not the trace) and writes the right key into the retry's system prompt; a retry that copies it succeeds.

Follows erl_envs.protocol (str observations and actions, ``instructions``, ``valid_actions``, ``task_id``,
``success``). The same reset seed gives the same lock. Registered as ``TestLock-v0`` on import (tests only).
"""

from __future__ import annotations

import random
import re
import string

import gymnasium as gym
from gymnasium import spaces

__all__ = ["LockEnv", "secret_key", "privileged_reflector", "instruction_follower", "LOCK_ID"]

LOCK_ID = "TestLock-v0"
_TABLE_SEED = 20_260_423  # fixes the secret lock -> key table


# Names of letters only, so that the tiny tokenizer gives each lock name and each key action one token.
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"


def _name(number: int) -> str:
    first, rest = divmod(number, len(_VOWELS) * len(_CONSONANTS))
    vowel, last = divmod(rest, len(_CONSONANTS))
    return _CONSONANTS[first % len(_CONSONANTS)] + _VOWELS[vowel] + _CONSONANTS[last]


def _lock_name(lock: int) -> str:
    return _name(lock).capitalize()


def _key_action(key: int) -> str:
    return f"```{_name(key + 70)}```"  # key names never equal a lock's name


def secret_key(lock: int, keys: int) -> int:
    """The key that opens ``lock``: a fixed pseudo-random table (locks beyond ``keys`` reuse keys)."""
    order = list(range(keys))
    random.Random(_TABLE_SEED + keys).shuffle(order)
    return order[lock % keys]


class LockEnv(gym.Env):
    """One lock per episode, ``keys`` candidate keys, reward 1 for the one that opens it."""

    metadata = {"render_modes": []}

    def __init__(self, locks: int = 32, keys: int = 32):
        self.locks = locks
        self.keys = keys
        self.observation_space = spaces.Text(256, charset=string.printable)
        self.action_space = spaces.Text(256, charset=string.printable)
        self.instructions = "Open the lock. Reply with one key inside a triple-backtick block."
        self.prompt_style = "generic"
        self.valid_actions = [_key_action(k) for k in range(keys)]

    def _observation(self) -> str:
        return f"Lock {_lock_name(self.lock)}. Which key?"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.lock = int(self.np_random.integers(self.locks))
        return self._observation(), {"task_id": f"lock-{seed}", "task_text": self._observation()}

    def step(self, action: str):
        opened = action.strip() == _key_action(secret_key(self.lock, self.keys))
        info = {"feedback": "the lock opened" if opened else "the lock stayed shut", "took_effect": True,
                "success": opened, "episode_feedback": "Opened." if opened else "Not opened."}
        return self._observation(), float(opened), True, False, info


def privileged_reflector(keys: int = 32):
    """A reflector that knows the secret table (privileged): its prompt names the key of the request's lock."""

    def reflect(request) -> str:
        name = re.search(r"Lock (\w+)\.", request.task_text).group(1)
        lock = next(k for k in range(max(keys, 512)) if _lock_name(k) == name)
        return f"<prompt>{_key_action(secret_key(lock, keys))}</prompt>"

    return reflect


if LOCK_ID not in gym.registry:
    gym.register(LOCK_ID, entry_point=LockEnv)


def instruction_follower(folder: str, locks: int = 32, keys: int = 32, seed: int = 0, steps: int = 400,
                         batch: int = 64, lr: float = 3e-3, hidden: int = 64, layers: int = 2, heads: int = 2,
                         intermediate: int = 128) -> str:
    """Save into ``folder`` a tiny policy that plays the key its system prompt names, and nothing else.

    The stand-in for a pretrained instruction-following model: a tiny Llama built in code (the trainer's own
    tokenizer and model builders) is trained, supervised, to answer a retry's context (system prompt = a key action
    and the wrapper's format reminder, user = a lock) with that key. The keys and locks of its examples are drawn
    independently, so it learns to follow the prompt and nothing of the secret table: under the initial prompt its
    first attempts open a lock by chance. Returns ``folder`` (load it with ``model=folder``).
    """
    import numpy as np
    import torch

    from erl_agents.envs import tiny_corpus
    from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
    from erl_envs.reflection import ReflectionWrapper

    env = LockEnv(locks, keys)
    reminder = ReflectionWrapper(env).format_reminder
    tokenizer = build_tiny_tokenizer(tiny_corpus(env, 200, seed=seed), vocab_size=1024)
    model = build_tiny_model(tokenizer, hidden, layers, heads, intermediate, max_positions=512, seed=seed)
    policy = Policy(model, tokenizer)
    chat = policy.chat
    rng = np.random.default_rng(seed)
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    with torch.random.fork_rng(devices=[]):  # the caller's torch stream is left as it was
        torch.manual_seed(seed)
        model.train()
        for _ in range(steps):
            rows, targets = [], []
            for key, lock in zip(rng.integers(keys, size=batch), rng.integers(locks, size=batch)):
                action = _key_action(int(key))
                context = chat.open(f"{action}\n{reminder}", f"Lock {_lock_name(int(lock))}. Which key?")
                answer = encode(action) + [chat.end_of_turn_id]
                rows.append(context + answer)
                targets.append([-100] * len(context) + answer)
            width = max(map(len, rows))
            pad = tokenizer.pad_token_id
            ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
            mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
            labels = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    model.eval()
    policy.save(folder)
    return folder
