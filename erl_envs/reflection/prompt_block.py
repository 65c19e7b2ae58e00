"""How a reflection's text becomes the retry's system prompt: the ``<prompt>`` block it holds (``extract_prompt``),
the format reminder after it (``with_reminder``), and how much of a reflection is read (``reflection_char_limit``).

``ReflectionWrapper`` applies these; the trainer's reflection warm-up and prefill read the same block, so the rules
live here once.
"""

from __future__ import annotations

import re

__all__ = ["PROMPT_OPEN", "PROMPT_CLOSE", "MEMORY_RULES", "DEFAULT_MAX_REFLECTION_CHARS", "CHARS_PER_TOKEN",
           "MAX_REFLECTION_CHARS", "extract_prompt", "with_reminder", "reflection_char_limit"]

PROMPT_OPEN, PROMPT_CLOSE = "<prompt>", "</prompt>"  # around a reflection's new system prompt (reflect_prefill)
# How a reflection becomes attempt 2's system prompt and the memory. "project": the last non-empty <prompt> block,
# the reminder on a line of its own, stored (without the reminder) only when the prompt came from the reflection.
# "paper": the reference's: the first block (an empty one is a fallback), the reminder appended once
# (``with_reminder``), and the prompt attempt 2 played with stored on its success, a fallback's included.
MEMORY_RULES = ("project", "paper")

# How much of a reflection is read before its <prompt> block is looked for. The default bounds the work a reflection
# from anywhere costs; a trainer whose policy writes reflections of up to N tokens reads N x CHARS_PER_TOKEN
# characters (``reflection_char_limit``), since the reference reads the whole reflection: 32 characters is more than
# a token of a common tokenizer decodes to (a long run of spaces or dashes), so every reflection of the budget is read
# whole, and MAX_REFLECTION_CHARS keeps the work bounded whatever the budget.
DEFAULT_MAX_REFLECTION_CHARS = 20_000
CHARS_PER_TOKEN = 32
MAX_REFLECTION_CHARS = 1 << 20

_PROMPT_BLOCK = re.compile(r"<prompt>(.*?)</prompt>", re.DOTALL | re.IGNORECASE)


def extract_prompt(text: str, rule: str = "project") -> tuple[str | None, str]:
    """The new system prompt inside ``<prompt>...</prompt>``, or ``(None, why not)``.

    Under the ``"project"`` rule the last non-empty block wins: models often mention the tags while thinking before
    writing the real block. Under ``"paper"`` the first block wins, as in the reference, and an empty first block
    means no prompt. An unclosed block counts as missing (the paper falls back to the base prompt whenever the tags
    are absent).
    """
    if not text.strip():
        return None, "the reflection is empty"
    if rule == "paper":
        first = _PROMPT_BLOCK.search(text)
        if first is None:
            return None, "the reflection has no complete <prompt>...</prompt> block"
        block = first.group(1).strip()
        return (block, "") if block else (None, "the reflection's first <prompt>...</prompt> block is empty")
    blocks = [b.strip() for b in _PROMPT_BLOCK.findall(text)]
    if not blocks:
        return None, "the reflection has no complete <prompt>...</prompt> block"
    filled = [b for b in blocks if b]
    if not filled:
        return None, "the reflection's <prompt>...</prompt> block is empty"
    return filled[-1], ""


def reflection_char_limit(max_new_tokens: int) -> int:
    """The ``max_reflection_chars`` for reflections of at most ``max_new_tokens`` tokens: room for all of them (at
    ``CHARS_PER_TOKEN``), never below the default nor above ``MAX_REFLECTION_CHARS``."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    return min(max(DEFAULT_MAX_REFLECTION_CHARS, max_new_tokens * CHARS_PER_TOKEN), MAX_REFLECTION_CHARS)


def with_reminder(prompt: str, reminder: str) -> str:
    """``prompt`` with the format reminder appended after a blank line, unless it already ends with it (the
    reference's rule: a remembered prompt, which carries the reminder, does not get a second one)."""
    base, tail = prompt.rstrip(), reminder.strip()
    if not base:
        return tail
    return base if base.endswith(tail) else f"{base}\n\n{tail}"
