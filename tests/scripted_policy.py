"""A policy whose replies are scripted, played through the real rollout path.

``script(policy, reply)`` keeps the policy's model and its ``generate`` (left padding, the preallocated cache, KV
reuse, constrained decoding, the stop tokens) and adds one logits processor that leaves exactly one token possible
at every step: the next token of ``reply(conversation)``, then the end-of-turn token. So every sampled token, its
log-probability (0.0) and every byte the env sees come out of ``erl_agents.rollout`` as in training, while the
replies (and so the rewards) are fixed by the test.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from erl_agents.models import Policy

__all__ = ["Conversation", "parse_conversation", "script"]

_TURN = re.compile(r"<\|(system|user|assistant)\|>(.*?)(?=<\|end\|>|$)", re.DOTALL)


@dataclass
class Conversation:
    """A context as the model reads it: its system prompt, the user turns and its own earlier replies."""

    system: str
    users: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)


def parse_conversation(text: str) -> Conversation:
    """Split a context rendered with the tiny chat template (``<|role|>content<|end|>``) into its turns."""
    conversation = Conversation(system="")
    for role, content in _TURN.findall(text):
        if role == "system":
            conversation.system = content
        elif role == "user":
            conversation.users.append(content)
        elif content:
            conversation.replies.append(content)
    return conversation


class _ForcedReplies(LogitsProcessor):
    """Per row, only the next token of its scripted reply survives (then only end-of-turn)."""

    def __init__(self, policy: Policy, reply: Callable[[Conversation], str]):
        self.policy = policy
        self.reply = reply
        self.width: int | None = None
        self.tokens: list[list[int]] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokenizer, chat = self.policy.tokenizer, self.policy.chat
        if self.width is None:
            self.width = input_ids.shape[1]
            for row in input_ids.tolist():
                context = [t for t in row if t != tokenizer.pad_token_id]
                text = self.reply(parse_conversation(tokenizer.decode(context, skip_special_tokens=False)))
                self.tokens.append(tokenizer(text, add_special_tokens=False)["input_ids"] + [chat.end_of_turn_id])
        step = input_ids.shape[1] - self.width
        forced = torch.full_like(scores, -math.inf)
        for row, tokens in enumerate(self.tokens):
            forced[row, tokens[step] if step < len(tokens) else chat.end_of_turn_id] = 0.0
        return forced


def script(policy: Policy, reply: Callable[[Conversation], str]) -> Policy:
    """Make ``policy`` answer every context with ``reply(conversation)`` (it must fit the reply budget); returns it."""
    generate = policy.model.generate

    def scripted_generate(*args, logits_processor=None, **kwargs):
        processors = LogitsProcessorList(list(logits_processor or []) + [_ForcedReplies(policy, reply)])
        return generate(*args, logits_processor=processors, **kwargs)

    policy.model.generate = scripted_generate
    return policy
