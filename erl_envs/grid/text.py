"""The one text renderer of the grid games: symbols, grid layout, and the character set of every message.

Every piece of text a grid env emits (observations, per-step feedback, traces for reflection) goes through a
``SymbolSet`` so that switching symbols (the paper's abstract letters, or Gymnasium-style ``SFHG``) changes all of it
consistently. Cells are written as ``" S \\t"`` and rows joined by newlines, the layout of the paper's code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from erl_envs.protocol import TEXT_CHARSET

__all__ = [
    "SymbolSet",
    "FROZEN_LAKE_SYMBOLS",
    "SOKOBAN_SYMBOLS",
    "resolve_symbols",
    "GridRenderer",
]



@dataclass(frozen=True)
class SymbolSet:
    """A name and a mapping from tile kind (e.g. ``"hole"``) to the single character drawn for it."""

    name: str
    symbols: Mapping[str, str]
    # Plain-English names of the symbols, used only where an option asks the env to reveal the rules.
    legend: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        chars = list(self.symbols.values())
        if len(set(chars)) != len(chars):
            raise ValueError(f"symbol set {self.name!r} draws two tile kinds with the same character: {dict(self.symbols)}")
        bad = [c for c in chars if len(c) != 1 or c not in TEXT_CHARSET or c.isspace()]
        if bad:
            raise ValueError(f"symbol set {self.name!r} has symbols that are not single printable characters: {bad}")

    def __getitem__(self, kind: str) -> str:
        return self.symbols[kind]

    def kind_of(self, char: str) -> str:
        for kind, c in self.symbols.items():
            if c == char:
                return kind
        raise KeyError(f"{char!r} is not a symbol of {self.name!r}")


FROZEN_LAKE_SYMBOLS: dict[str, SymbolSet] = {
    "abstract": SymbolSet(
        "abstract",
        {"agent": "A", "goal": "B", "hole": "C", "frozen": "D", "agent_in_hole": "X", "agent_on_goal": "Y"},
        {"agent": "you", "goal": "the goal", "hole": "a hole", "frozen": "safe ice",
         "agent_in_hole": "you, in a hole", "agent_on_goal": "you, on the goal"},
    ),
    # Gymnasium's FrozenLake letters (S start, F frozen, H hole, G goal) with P for the player.
    "gym": SymbolSet(
        "gym",
        {"agent": "P", "goal": "G", "hole": "H", "frozen": "F", "agent_in_hole": "X", "agent_on_goal": "W"},
        {"agent": "you", "goal": "the goal", "hole": "a hole", "frozen": "frozen ice",
         "agent_in_hole": "you, in a hole", "agent_on_goal": "you, on the goal"},
    ),
}

SOKOBAN_SYMBOLS: dict[str, SymbolSet] = {
    "abstract": SymbolSet(
        "abstract",
        {"agent": "A", "agent_on_target": "a", "box": "B", "box_on_target": "b", "target": "C",
         "wall": "E", "floor": "D"},
        {"agent": "you", "agent_on_target": "you, on a target", "box": "a box", "box_on_target": "a box on a target",
         "target": "a target", "wall": "a wall", "floor": "empty floor"},
    ),
    # The XSB letters, minus the space (a cell must be visible in " S \t" layout): floor is '_'.
    "xsb": SymbolSet(
        "xsb",
        {"agent": "@", "agent_on_target": "+", "box": "$", "box_on_target": "*", "target": ".",
         "wall": "#", "floor": "_"},
        {"agent": "you", "agent_on_target": "you, on a target", "box": "a box", "box_on_target": "a box on a target",
         "target": "a target", "wall": "a wall", "floor": "empty floor"},
    ),
}


def resolve_symbols(choice: str | SymbolSet | Mapping[str, str], known: Mapping[str, SymbolSet]) -> SymbolSet:
    """Turn a user's ``symbols=`` argument (a preset name, a SymbolSet, or a dict) into a checked SymbolSet."""
    if isinstance(choice, SymbolSet):
        symbols = choice
    elif isinstance(choice, str):
        if choice not in known:
            raise ValueError(f"unknown symbol set {choice!r}; choose one of {sorted(known)} or pass a dict")
        return known[choice]
    elif isinstance(choice, Mapping):
        symbols = SymbolSet("custom", dict(choice))
    else:
        raise TypeError(f"symbols must be a preset name, a SymbolSet or a dict, got {type(choice).__name__}")
    reference = next(iter(known.values()))
    missing = set(reference.symbols) - set(symbols.symbols)
    extra = set(symbols.symbols) - set(reference.symbols)
    if missing or extra:
        raise ValueError(
            f"symbol set {symbols.name!r} must name exactly the tile kinds {sorted(reference.symbols)}; "
            f"missing {sorted(missing)}, unknown {sorted(extra)}"
        )
    if not symbols.legend:
        symbols = SymbolSet(symbols.name, symbols.symbols, reference.legend)
    return symbols


class GridRenderer:
    """Draw a grid of tile kinds as text, fast: each tile's cell string is built once."""

    def __init__(self, symbols: SymbolSet):
        self.symbols = symbols
        self._cells = {kind: f" {char} \t" for kind, char in symbols.symbols.items()}

    def cell(self, kind: str) -> str:
        return self._cells[kind]

    def render(self, rows: Sequence[Sequence[str]]) -> str:
        """``rows`` is a grid of tile-kind names; returns the paper's layout, one line per row."""
        cells = self._cells
        return "\n".join("".join([cells[k] for k in row]) for row in rows)

    def parse(self, text: str) -> list[list[str]]:
        """Inverse of ``render``: read a rendered grid back into tile kinds (tests use it to check round trips)."""
        by_char = {c: k for k, c in self.symbols.symbols.items()}
        grid = []
        for line in text.split("\n"):
            chars = [c.strip() for c in line.split("\t") if c.strip()]
            grid.append([by_char[c] for c in chars])
        return grid
