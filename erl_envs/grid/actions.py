"""Reading an agent's action out of free text, shared by every env.

Language models answer in prose. Two readers, chosen by the envs' ``action_format``:

* ``"paper"`` (``parse_paper_action``): exactly the reference code's rule. The last triple-backtick block, stripped
  and lower-cased, must be ``left``, ``down``, ``right`` or ``up``, or a number the reference reads as 1 Left,
  2 Down, 3 Right, 4 Up (the same in both games). Anything else is an invalid action.
* ``"lenient"`` (``parse_grid_actions``): ours, for people typing at a terminal and for forgiving experiments: also
  ``<answer>...</answer>``, a reply that is nothing but the action, ``Up.``/``**Up**``, aliases (``u``, ``north``,
  ``^``, arrows), several moves per turn, and digits numbered in ``ACTION_NAMES`` order (1 Up, 2 Down, 3 Left,
  4 Right).

Both find the last block of a reply of any length in linear time. Parsing never raises on text: a reply we cannot
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
    "parse_paper_action",
    "last_backtick_block",
    "parse_actions",
    "ACTION_FORMATS",
    "PAPER_DIGITS",
]

# "paper": the reference code's reader (the default of the registered envs); "lenient": ours.
ACTION_FORMATS = ("paper", "lenient")


class GridAction(IntEnum):
    """The four moves of the grid games (the lenient reader numbers digits 1-4 in this order; see PAPER_DIGITS)."""

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

# Separators between several actions in one reply: commas, semicolons, whitespace, arrows written as "->".
_SPLIT = re.compile(r"(?:->|=>|[,;|\s])+")
_STRIP = " \t\r\n.!?:\"'`*()[]{}"

# The reference's digits: its envs number the moves 1 Left, 2 Down, 3 Right, 4 Up, in both games.
PAPER_DIGITS = {1: GridAction.LEFT, 2: GridAction.DOWN, 3: GridAction.RIGHT, 4: GridAction.UP}
_PAPER_WORDS = {"left": GridAction.LEFT, "down": GridAction.DOWN, "right": GridAction.RIGHT, "up": GridAction.UP}
FENCE = "```"


def last_backtick_block(text: str) -> str | None:
    """The content of the last triple-backtick block, or None when the reply has none.

    Blocks pair up from the start of the reply as a lazy regex ``findall`` of ``r"```(.*?)```"`` (DOTALL) pairs
    them: each block opens at the next fence and closes at the first fence at least three characters later; an
    unclosed fence ends the search. Done with ``str.find``, so a reply of any length costs one linear pass.
    """
    last = None
    at = text.find(FENCE)
    while at >= 0:
        end = text.find(FENCE, at + 3)
        if end < 0:
            break
        last = text[at + 3:end]
        at = text.find(FENCE, end + 3)
    return last


def parse_paper_action(text: str) -> GridAction | None:
    """The reference code's reading of a reply: one move, or None (an invalid action).

    The last block's content, stripped and lower-cased, is a move name, or all digits (``str.isdigit``) whose
    ``int`` is 1-4 in ``PAPER_DIGITS`` order, so ``"```02```"`` is Down. Digit-like characters that ``int`` cannot
    read (superscripts) are invalid here; the reference would raise on them.
    """
    if not isinstance(text, str):
        raise TypeError(f"an action must be a str, got {type(text).__name__}")
    block = last_backtick_block(text)
    if block is None:
        return None
    word = block.strip().lower()
    action = _PAPER_WORDS.get(word)
    if action is None and word.isdigit():
        try:
            action = PAPER_DIGITS.get(int(word))
        except ValueError:
            return None
    return action


def parse_actions(text: str, action_format: str = "paper", max_actions: int = 1) -> list[GridAction] | None:
    """The moves of a reply under ``action_format`` (see ``ACTION_FORMATS``), or None when it is unreadable."""
    if action_format == "paper":
        action = parse_paper_action(text)
        return None if action is None else [action]
    if action_format == "lenient":
        return parse_grid_actions(text, max_actions=max_actions)
    raise ValueError(f"action_format must be one of {list(ACTION_FORMATS)}, got {action_format!r}")


def extract_action_text(text: str) -> str:
    """Return the part of a reply that should hold the action (the lenient reader).

    Order: the last triple-backtick block (its language tag, if it is itself an action word, counts as content),
    else the last ``<answer>`` tag, else the whole reply.
    """
    block = last_backtick_block(text)
    if block is not None:
        # Like r"[ \t]*([^\n`]*)\n?(.*)": a first line up to a backtick is a language tag, the rest the body.
        newline, tick = block.find("\n"), block.find("`")
        cut = min(i for i in (newline, tick, len(block)) if i >= 0)
        tag = block[:cut].lstrip(" \t")
        body = block[cut + 1:] if cut == newline else block[cut:]
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
