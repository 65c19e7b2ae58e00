"""Reading an agent's action out of free text, shared by every env.

Language models answer in prose. The paper's code reads the *last* triple-backtick block; we also accept
``<answer>...</answer>`` and a reply that is nothing but the action. Parsing never raises on text: a reply we cannot
read is an ordinary event (``None``) that the env turns into an invalid, no-effect step.
"""

from __future__ import annotations

import re
from enum import IntEnum

__all__ = [
    "GridAction",
    "ACTION_NAMES",
    "extract_action_text",
    "parse_grid_action",
    "parse_grid_actions",
    "format_action",
]


class GridAction(IntEnum):
    """The four moves of the grid games; digits 1-4 in replies map to these in this order."""

    UP = 0
    DOWN = 1
    LEFT = 2
    RIGHT = 3


ACTION_NAMES = ("Up", "Down", "Left", "Right")

# (row, col) displacement of each GridAction.
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))

_ALIASES = {
    "up": GridAction.UP, "u": GridAction.UP, "north": GridAction.UP, "n": GridAction.UP,
    "^": GridAction.UP, "\u2191": GridAction.UP, "1": GridAction.UP,
    "down": GridAction.DOWN, "d": GridAction.DOWN, "south": GridAction.DOWN, "s": GridAction.DOWN,
    "v": GridAction.DOWN, "\u2193": GridAction.DOWN, "2": GridAction.DOWN,
    "left": GridAction.LEFT, "l": GridAction.LEFT, "west": GridAction.LEFT, "w": GridAction.LEFT,
    "<": GridAction.LEFT, "\u2190": GridAction.LEFT, "3": GridAction.LEFT,
    "right": GridAction.RIGHT, "r": GridAction.RIGHT, "east": GridAction.RIGHT, "e": GridAction.RIGHT,
    ">": GridAction.RIGHT, "\u2192": GridAction.RIGHT, "4": GridAction.RIGHT,
}

_CODE_BLOCK = re.compile(r"```[ \t]*([^\n`]*)\n?(.*?)```", re.DOTALL)
# Separators between several actions in one reply: commas, semicolons, whitespace, arrows written as "->".
_SPLIT = re.compile(r"(?:->|=>|[,;|\s])+")
_STRIP = " \t\r\n.!?:\"'`*()[]{}"

# Replies longer than this are not scanned in full: an action is a few characters, and regexes over a
# megabyte of model noise on every step would be the slowest part of an env.
MAX_SCAN_CHARS = 20_000


def extract_action_text(text: str) -> str:
    """Return the part of a reply that should hold the action.

    Order: the last triple-backtick block (its language tag, if it is itself an action word, counts as content),
    else the last ``<answer>`` tag, else the whole reply.
    """
    if len(text) > MAX_SCAN_CHARS:
        text = text[-MAX_SCAN_CHARS:]
    blocks = _CODE_BLOCK.findall(text)
    if blocks:
        tag, body = blocks[-1]
        body = body.strip()
        # "```Up```" puts the action where a language tag would go.
        return body if body else tag.strip()
    answer = _last_answer_tag(text)
    return answer.strip() if answer is not None else text.strip()


def _last_answer_tag(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>``, found from the end in one pass.

    A regex ``findall`` is quadratic on a flood of unclosed tags, and model noise early in training is exactly that.
    """
    lower = text.lower()
    end = lower.rfind("</answer>")
    if end < 0:
        return None
    start = lower.rfind("<answer>", 0, end)
    return None if start < 0 else text[start + len("<answer>"):end]


def _parse_token(token: str) -> GridAction | None:
    return _ALIASES.get(token.strip(_STRIP).lower())


def parse_grid_actions(text: str, max_actions: int = 1) -> list[GridAction] | None:
    """Parse up to ``max_actions`` moves from a reply; ``None`` when the reply holds no readable action.

    Every token of the action text must be a move: "Up" and "up, left" parse, "I think Up" does not (it is
    ambiguous prose, and the paper's format asks for the action alone in the block). With ``max_actions=1``
    a block holding several moves is unparseable rather than silently truncated.
    """
    if not isinstance(text, str):
        raise TypeError(f"an action must be a str, got {type(text).__name__}")
    body = extract_action_text(text)
    if not body:
        return None
    tokens = [t for t in _SPLIT.split(body) if t.strip(_STRIP)]
    if not tokens or len(tokens) > max_actions:
        return None
    actions = [_parse_token(t) for t in tokens]
    if any(a is None for a in actions):
        return None
    return actions  # type: ignore[return-value]


def parse_grid_action(text: str) -> GridAction | None:
    """Parse exactly one move from a reply, or ``None``."""
    actions = parse_grid_actions(text, max_actions=1)
    return actions[0] if actions else None


def format_action(action: int) -> str:
    """The canonical reply for a move, in the format the instructions ask for."""
    return f"```{ACTION_NAMES[int(action)]}```"
