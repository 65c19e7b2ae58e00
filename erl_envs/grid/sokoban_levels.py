"""Sokoban levels: the immutable level value, the XSB parser, and loaders for level files.

XSB is the plain-text format every Sokoban collection uses and the one the ERL paper's layouts are written in::

    #  wall          @  player          $  box          .  goal
    space, - or _    floor              +  player on a goal       *  box on a goal

A level is checked once, when it is built, so everything downstream (solver, generator, env) can trust it: one
player, as many goals as boxes, a closed room, every box and goal where the player can walk. The room's static
analysis lives here too (push distances, dead squares, corners): the solver prunes with it, and ``check_playable``
refuses a level whose start is already lost. Positions are
``(row, col)``, 0-based from the top-left corner, in values and in error messages; file line numbers in error
messages are 1-based, like an editor's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from os import PathLike
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from erl_envs.grid.actions import MOVES
from erl_envs.safe_parse import RefusedFileError, check_regular, loads_json, open_regular, read_text_limited

__all__ = [
    "Cell",
    "LevelError",
    "SokobanLevel",
    "parse_level",
    "load_levels",
    "check_playable",
    "push_distances",
    "dead_squares",
    "corner_cells",
    "is_deadlocked",
    "UNREACHABLE",
    "LARGEST_LEVEL_SIDE",
    "MAX_LEVEL_FILE_BYTES",
    "apply_move",
    "replay",
    "MOVED",
    "PUSHED",
    "HIT_WALL",
    "BOX_BLOCKED",
    "XSB_LEGEND",
]

Cell = tuple[int, int]

XSB_LEGEND = "# wall, @ player, + player on a goal, $ box, * box on a goal, . goal, space or - or _ floor"
_FLOOR_CHARS = frozenset(" -_")
_KNOWN_CHARS = frozenset("#@+$*.") | _FLOOR_CHARS
_TEXT_SUFFIXES = (".txt", ".xsb", ".sok")
# No level is bigger than this per side (the largest classic levels are about 20 x 50): checking, drawing and
# solving a level cost more than its size, so a file holding a 3000 x 3000 "level" is refused before it is read.
LARGEST_LEVEL_SIDE = 100
# The largest level file read: Boxoban's million levels as XSB text are about a tenth of this.
MAX_LEVEL_FILE_BYTES = 1 << 30
_MAX_RECORD_CHARS = 1 << 20  # a .jsonl line: a level of that size with its name, many times over
# The push distance of a cell from which no goal can be reached.
UNREACHABLE = 1 << 30


class LevelError(ValueError):
    """A level that cannot be played, with the position of the problem when there is one (0-based)."""

    def __init__(self, message: str, row: int | None = None, col: int | None = None):
        super().__init__(message)
        self.row = row
        self.col = col


def _where(cell: Cell) -> str:
    return f"row {cell[0]}, col {cell[1]}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es" if noun.endswith("x") else f"{n} {noun}s"


@dataclass(frozen=True)
class SokobanLevel:
    """One Sokoban position: the fixed room (walls, goals) and the movable state (player, boxes).

    Construction validates the level and raises ``LevelError`` for one that cannot be played. Cells outside the
    outer wall (and closed-off pockets the player cannot reach) are *exterior*: never walls in ``walls``, never
    reachable, written as spaces by ``to_xsb``. ``name`` is a label (file position, dataset uid) that takes no part
    in equality or in ``key``.
    """

    height: int
    width: int
    walls: frozenset[Cell]
    boxes: frozenset[Cell]
    targets: frozenset[Cell]
    player: Cell
    name: str = field(default="", compare=False)
    # The cells the player can walk to when no box is in the way: the interior of the room.
    floor: frozenset[Cell] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for attr in ("walls", "boxes", "targets"):
            value = getattr(self, attr)
            if not isinstance(value, frozenset):
                object.__setattr__(self, attr, frozenset(tuple(cell) for cell in value))
        object.__setattr__(self, "player", tuple(self.player))
        object.__setattr__(self, "floor", _validate(self))

    @property
    def is_solved(self) -> bool:
        return self.boxes == self.targets

    def to_xsb(self) -> list[str]:
        """The level as XSB rows (trailing exterior spaces trimmed): the canonical text of the level."""
        grid = [[" "] * self.width for _ in range(self.height)]
        for r, c in self.walls:
            grid[r][c] = "#"
        for r, c in self.targets:
            grid[r][c] = "."
        for r, c in self.boxes:
            grid[r][c] = "*" if (r, c) in self.targets else "$"
        r, c = self.player
        grid[r][c] = "+" if self.player in self.targets else "@"
        return ["".join(row).rstrip() for row in grid]

    @cached_property
    def key(self) -> str:
        """A stable content id (sha1 of the XSB text): the same level gives the same key in every process."""
        return hashlib.sha1("\n".join(self.to_xsb()).encode("ascii")).hexdigest()

    def tile_kinds(self) -> list[list[str]]:
        """The grid as tile-kind names (``grid_text.SOKOBAN_SYMBOLS`` kinds); exterior cells are drawn as walls."""
        kinds = [["wall"] * self.width for _ in range(self.height)]
        for r, c in self.floor:
            kinds[r][c] = "target" if (r, c) in self.targets else "floor"
        for r, c in self.boxes:
            kinds[r][c] = "box_on_target" if (r, c) in self.targets else "box"
        r, c = self.player
        kinds[r][c] = "agent_on_target" if self.player in self.targets else "agent"
        return kinds

    def with_state(self, player: Cell, boxes: Iterable[Cell]) -> "SokobanLevel":
        """The same room with the player and boxes moved (validated like any level)."""
        return SokobanLevel(self.height, self.width, self.walls, frozenset(boxes), self.targets, player, self.name)

    def __str__(self) -> str:
        return "\n".join(self.to_xsb())


def trusted_level(height: int, width: int, walls: frozenset[Cell], boxes: frozenset[Cell], targets: frozenset[Cell],
                  player: Cell, floor: frozenset[Cell]) -> SokobanLevel:
    """A level built without the checks, for a generator that guarantees them by construction (distinct cells on
    ``floor``, the floor the player reaches, walls inside the grid): an env's reset then skips a flood fill."""
    level = object.__new__(SokobanLevel)
    for name, value in (("height", height), ("width", width), ("walls", walls), ("boxes", boxes),
                        ("targets", targets), ("player", player), ("name", ""), ("floor", floor)):
        object.__setattr__(level, name, value)
    return level


def _validate(level: SokobanLevel) -> frozenset[Cell]:
    """Check a level and return its floor (the cells reachable from the player through non-wall cells)."""
    h, w = level.height, level.width
    if not (isinstance(h, (int, np.integer)) and isinstance(w, (int, np.integer)) and h >= 1 and w >= 1):
        raise LevelError(f"height and width must be positive integers, got {h!r} x {w!r}")

    def check_inside(cell: Cell, what: str) -> None:
        if len(cell) != 2 or not (0 <= cell[0] < h and 0 <= cell[1] < w):
            raise LevelError(f"{what} at {cell!r} is outside the {h}x{w} grid")
        if cell in level.walls:
            raise LevelError(f"{what} at {_where(cell)} is on a wall", *cell)

    for cell in level.walls:
        if len(cell) != 2 or not (0 <= cell[0] < h and 0 <= cell[1] < w):
            raise LevelError(f"wall at {cell!r} is outside the {h}x{w} grid")
    check_inside(level.player, "the player")
    for cell in sorted(level.boxes):
        check_inside(cell, "box")
    for cell in sorted(level.targets):
        check_inside(cell, "goal")
    if level.player in level.boxes:
        raise LevelError(f"the player and a box share {_where(level.player)}", *level.player)
    if not level.boxes:
        raise LevelError("the level has no boxes")
    if len(level.boxes) != len(level.targets):
        raise LevelError(
            f"the level has {_count(len(level.boxes), 'box')} but {_count(len(level.targets), 'goal')}; "
            f"they must be equal"
        )

    floor = _floor(h, w, level.walls, level.player)
    for what, cells in (("box", level.boxes), ("goal", level.targets)):
        for cell in sorted(cells):
            if cell not in floor:
                raise LevelError(
                    f"{what} at {_where(cell)} is where the player cannot go (outside the walls or in a closed-off "
                    f"area)", *cell,
                )
    return floor


@lru_cache(maxsize=4096)
def _floor(height: int, width: int, walls: frozenset[Cell], player: Cell) -> frozenset[Cell]:
    """Flood fill from the player through non-wall cells, or ``LevelError`` if it reaches the grid's edge.

    Cached because generators and envs build many levels in the same room; the room's walls are the costly key
    part, and a frozenset caches its hash.
    """
    floor = {player}
    frontier = [player]
    while frontier:
        r, c = frontier.pop()
        if r in (0, height - 1) or c in (0, width - 1):
            raise LevelError(
                f"the level is not closed: the player can walk to the grid edge at {_where((r, c))} without "
                f"meeting a wall", r, c,
            )
        for nxt in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if nxt not in floor and nxt not in walls:
                floor.add(nxt)
                frontier.append(nxt)
    return frozenset(floor)


def _split_rows(level: str | Sequence[str]) -> list[str]:
    if isinstance(level, str):
        rows = level.replace("\r\n", "\n").split("\n")
        while rows and not rows[0].strip():
            rows.pop(0)
        while rows and not rows[-1].strip():
            rows.pop()
        return rows
    if isinstance(level, (bytes, bytearray)):
        raise TypeError("a level must be text (str or a sequence of str rows), got bytes; decode it first")
    if isinstance(level, SokobanLevel):
        return level.to_xsb()
    try:
        rows = list(level)
    except TypeError:
        raise TypeError(f"a level must be an XSB string or a sequence of row strings, got {type(level).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, str):
            raise LevelError(f"row {i} is a {type(row).__name__}, not a string", i)
    return [row.rstrip("\r\n") for row in rows]


def _check_level_size(rows: Sequence[str]) -> None:
    height, width = len(rows), max((len(row) for row in rows), default=0)
    if height > LARGEST_LEVEL_SIDE or width > LARGEST_LEVEL_SIDE:
        raise LevelError(f"the level is {height}x{width}; levels may be at most {LARGEST_LEVEL_SIDE} per side")


def parse_level(level: str | Sequence[str], name: str = "") -> SokobanLevel:
    """Parse an XSB level (one string with newlines, or a sequence of row strings) into a ``SokobanLevel``.

    Blank lines around a string level are dropped and row numbers count from the first non-blank line. Ragged rows
    are padded on the right with exterior space, the XSB convention (editors trim trailing spaces); padding can never
    open a closed level because an unclosed row still lets the player walk off the grid, which is rejected.
    """
    rows = _split_rows(level)
    if not rows:
        raise LevelError("the level is empty")
    _check_level_size(rows)
    width = max(len(row) for row in rows)
    walls, boxes, targets, players = set(), set(), set(), []
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            if ch not in _KNOWN_CHARS:
                hint = " (run-length encoded XSB is not supported)" if ch.isdigit() else ""
                raise LevelError(f"unknown character {ch!r} at {_where((r, c))}{hint}; XSB uses {XSB_LEGEND}", r, c)
            if ch == "#":
                walls.add((r, c))
            elif ch in "@+":
                players.append((r, c))
            if ch in "$*":
                boxes.add((r, c))
            if ch in ".*+":
                targets.add((r, c))
    if not players:
        raise LevelError("the level has no player (@, or + on a goal)")
    if len(players) > 1:
        where = "; ".join(_where(p) for p in players)
        raise LevelError(f"the level has {len(players)} players ({where}); it must have exactly one", *players[1])
    return SokobanLevel(len(rows), width, frozenset(walls), frozenset(boxes), frozenset(targets), players[0], name)


# --- The rules of a move ---------------------------------------------------------------------------------------

# Outcomes of apply_move: the player walked, walked pushing a box, or stayed put.
MOVED, PUSHED, HIT_WALL, BOX_BLOCKED = "moved", "pushed", "hit_wall", "box_blocked"


def apply_move(
    floor: frozenset[Cell], boxes: frozenset[Cell], player: Cell, action: int
) -> tuple[Cell, frozenset[Cell], str]:
    """One move of the game: ``(player, boxes, outcome)`` after moving ``action`` (a ``GridAction``).

    Walls (any non-floor cell) stop the player; a box ahead is pushed one cell only if the cell behind it is floor
    without a box, else nothing moves. The outcome is ``MOVED``, ``PUSHED``, ``HIT_WALL`` or ``BOX_BLOCKED``.
    """
    dr, dc = MOVES[action]
    ahead = (player[0] + dr, player[1] + dc)
    if ahead not in floor:
        return player, boxes, HIT_WALL
    if ahead not in boxes:
        return ahead, boxes, MOVED
    beyond = (ahead[0] + dr, ahead[1] + dc)
    if beyond not in floor or beyond in boxes:
        return player, boxes, BOX_BLOCKED
    return ahead, (boxes - {ahead}) | {beyond}, PUSHED


def replay(level: SokobanLevel, actions: Iterable[int]) -> SokobanLevel:
    """The position after playing ``actions`` from ``level`` (moves that are blocked change nothing)."""
    player, boxes = level.player, level.boxes
    for action in actions:
        player, boxes, _ = apply_move(level.floor, boxes, player, action)
    return level.with_state(player, boxes)


# --- Level files -------------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        return read_text_limited(path, MAX_LEVEL_FILE_BYTES, "level file", encoding="utf-8-sig")
    except RefusedFileError as err:  # not a regular file, or too large
        raise LevelError(str(err)) from None
    except UnicodeDecodeError as err:
        raise LevelError(
            f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); save it as UTF-8"
        ) from None


def _text_records(path: Path) -> list[tuple[str, list[str], str, int]]:
    """Split an XSB/Boxoban text file into (where, rows, name, first line) records."""
    records, block, header, start = [], [], "", 0

    def flush() -> None:
        nonlocal block, header
        if block:
            number = len(records)
            name = header or f"{path.stem}-{number}"
            records.append((f"level {number} (line {start})", block, name, start))
        block, header = [], ""

    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(";"):
            flush()
            header = stripped.lstrip(";").strip()
        elif not stripped:
            flush()
        else:
            if not block:
                start = lineno
            block.append(line)
    flush()
    return records


def _layout_rows(value: object, where: str) -> list[str]:
    if isinstance(value, str):
        return _split_rows(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        rows = list(value)
        bad = [type(row).__name__ for row in rows if not isinstance(row, str)]
        if bad:
            raise LevelError(f"{where}: 'layout' must hold strings, found {bad[0]}")
        return rows
    raise LevelError(f"{where}: 'layout' must be a list of row strings or one string, got {type(value).__name__}")


def _name_of(record: dict, fallback: str) -> str:
    for key in ("uid", "layout_name", "name"):
        value = record.get(key)
        if isinstance(value, str) and value:
            return value
    return fallback


def _parquet_records(path: Path) -> list[tuple[str, list[str], str, int]]:
    import pandas as pd

    try:
        with open_regular(path, "level file", MAX_LEVEL_FILE_BYTES) as f:
            frame = pd.read_parquet(f)
    except RefusedFileError as err:  # not a regular file, or too large
        raise LevelError(str(err)) from None
    except Exception as err:  # pyarrow raises several unrelated types for a bad file
        raise LevelError(f"{path}: cannot be read as a parquet file ({type(err).__name__}: {err})") from None
    if "layout" not in frame.columns:
        raise LevelError(f"{path}: no 'layout' column (columns: {list(frame.columns)})")
    records = []
    for i, record in enumerate(frame.to_dict("records")):
        where = f"row {i}"
        rows = _layout_rows(record["layout"], f"{path}: {where}")
        records.append((where, rows, _name_of(record, f"{path.stem}-{i}"), 0))
    return records


def _jsonl_records(path: Path) -> list[tuple[str, list[str], str, int]]:
    records = []
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {lineno}"
        if len(line) > _MAX_RECORD_CHARS:  # no level of LARGEST_LEVEL_SIDE needs it; parsing it would cost gigabytes
            raise LevelError(f"{path}: {where}: longer than {_MAX_RECORD_CHARS:,} characters")
        try:
            record = loads_json(line)
        except json.JSONDecodeError as err:
            raise LevelError(f"{path}: {where}: invalid JSON ({err.msg})") from None
        if not isinstance(record, dict) or "layout" not in record:
            raise LevelError(f"{path}: {where}: expected a JSON object with a 'layout' key")
        rows = _layout_rows(record["layout"], f"{path}: {where}")
        records.append((where, rows, _name_of(record, f"{path.stem}-{len(records)}"), 0))
    return records


# --------------------------------------------------------------------------------------------- room analysis


@lru_cache(maxsize=512)
def push_distances(height: int, width: int, floor: frozenset[Cell], targets: frozenset[Cell]) -> tuple[int, ...]:
    """Fewest pushes from each cell to the nearest goal for a lone box, by flat index ``row * width + col``
    (``UNREACHABLE`` where no goal can be reached): reverse pushes (pulls) from the goals."""
    size = height * width
    free = [False] * size
    for r, c in floor:
        free[r * width + c] = True
    deltas = tuple(dr * width + dc for dr, dc in MOVES)
    dist = [UNREACHABLE] * size
    frontier = [r * width + c for r, c in targets]
    for i in frontier:
        dist[i] = 0
    while frontier:
        nxt = []
        for box in frontier:
            for d in deltas:
                # The box came from box - d, pushed by a player standing at box - 2d.
                prev = box - d
                if free[prev] and free[prev - d] and dist[prev] == UNREACHABLE:
                    dist[prev] = dist[box] + 1
                    nxt.append(prev)
        frontier = nxt
    return tuple(dist)


def dead_squares(level: SokobanLevel) -> frozenset[Cell]:
    """Floor cells from which a lone box can never be pushed onto any goal (a superset of ``corner_cells``)."""
    dist = push_distances(level.height, level.width, level.floor, level.targets)
    return frozenset(cell for cell in level.floor if dist[cell[0] * level.width + cell[1]] >= UNREACHABLE)


def corner_cells(level: SokobanLevel) -> frozenset[Cell]:
    """Floor cells that are not goals and have a wall above or below *and* a wall left or right of them.

    A box pushed onto one can never move again, so the level is lost: the env's ``deadlock`` flag.
    """
    floor = level.floor
    corners = set()
    for r, c in floor:
        if (r, c) in level.targets:
            continue
        vertical = (r - 1, c) not in floor or (r + 1, c) not in floor
        horizontal = (r, c - 1) not in floor or (r, c + 1) not in floor
        if vertical and horizontal:
            corners.add((r, c))
    return frozenset(corners)


def is_deadlocked(level: SokobanLevel) -> bool:
    """The simple corner check: is some box off-goal in a corner (so the level can no longer be solved)?"""
    return not level.boxes.isdisjoint(corner_cells(level))


def check_playable(level: SokobanLevel) -> SokobanLevel:
    """Return ``level``, or raise ``LevelError`` when its start is already lost.

    A box off-goal on a square from which no goal can be reached (such as a corner) makes a broken level, not a
    hard one. Every way a level enters an env (a file, a sequence of levels, the ``level`` reset option) runs this
    one check, so a level is accepted or refused the same way wherever it comes from.
    """
    lost = sorted((level.boxes - level.targets) & dead_squares(level))
    if lost:
        raise LevelError(f"the level cannot be solved: the box at {_where(lost[0])} can never be pushed onto "
                         f"a goal (it is in a corner or against a wall with no goal along it)", *lost[0])
    return level


def load_levels(path: str | PathLike) -> list[SokobanLevel]:
    """Load every level of a file, or raise naming the file, the level and the problem (never a partial load).

    Formats, by extension: ``.txt``/``.xsb``/``.sok`` hold XSB levels separated by blank lines or ``;`` comment lines
    (a comment just before a level, such as Boxoban's ``; 12``, becomes its name); ``.parquet`` and ``.jsonl`` have
    a ``layout`` field holding a list of row strings or one string with newlines (the ERL paper's format), and an
    optional ``uid``/``layout_name``/``name`` used as the level's name.

    A level whose start is already lost (a box off-goal on a square from which no goal can be reached, such as a
    corner) is an error: it is a broken level, not a hard one. Deeper unsolvability is left to the solver (the env
    reports ``optimal_steps=None``): searching every level at load time would make big collections slow to open.
    Repeated levels and repeated names are allowed (a collection may weight a level by repeating it; names are labels).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"level file not found: {path}")
    try:
        check_regular(path, "level file")
    except RefusedFileError as err:
        raise LevelError(str(err)) from None
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        records = _parquet_records(path)
    elif suffix == ".jsonl":
        records = _jsonl_records(path)
    elif suffix in _TEXT_SUFFIXES:
        records = _text_records(path)
    else:
        raise LevelError(
            f"{path}: unsupported level file type {suffix!r}; use {', '.join(_TEXT_SUFFIXES)} (XSB text), "
            f".parquet or .jsonl (with a 'layout' field)"
        )
    if not records:
        raise LevelError(f"{path}: the file holds no levels")
    levels = []
    for where, rows, name, first_line in records:
        try:
            _check_level_size(rows)
            level = check_playable(parse_level(rows, name=name))
        except LevelError as err:
            at = f", file line {first_line + err.row}" if first_line and err.row is not None else ""
            raise LevelError(f"{path}: {where}{at}: {err}") from None
        levels.append(level)
    return levels
