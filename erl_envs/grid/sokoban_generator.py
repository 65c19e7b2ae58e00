"""Random Sokoban levels with a guaranteed, solver-checked optimal solution length.

The default settings follow the ERL paper's train set: a square room of side 6, 7 or 8 (walls included) in the
proportions of that set (``PAPER_SIZE_WEIGHTS``: 11.36 / 37.95 / 50.69%), an open interior, one box and one goal,
the player, box and goal on distinct uniformly random cells, kept only if the fewest-moves solution has at most 8
moves. Within a size, sampling placements uniformly and rejecting gives every accepted layout the same probability,
as the paper's data suggest: its train set holds exactly the 1,136 valid 6x6 layouts, deduplicated (see
``tests/envs/grid/test_sokoban_generator.py``). It is not the reference's sampler (whose train set is a deduplicated draw):
a seed gives other levels, and levels repeat across draws; the env keeps the paper's test layouts out of training
(``SokobanTextEnv(exclude=...)``).

Harder settings (several boxes, interior walls, longer solutions) use *reverse play* instead: boxes start on their
goals and the player walks backwards pulling them, so every candidate is solvable by construction; the solver then
measures its exact optimal length and the band check keeps or rejects it.

One box in an open room (the paper's setting) has so few positions that the fewest moves of *every* start can be
tabled: candidates are then looked up instead of searched, which makes an env's reset several times cheaper. The
candidates, the random draws and so the level a seed gives are exactly those of the search (tested on thousands
of seeds).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from erl_envs.grid import draws
from erl_envs.grid.actions import MOVES, GridAction
from erl_envs.grid.sokoban_levels import LARGEST_LEVEL_SIDE, Cell, SokobanLevel, trusted_level
from erl_envs.grid.sokoban_solver import solution_stats

__all__ = [
    "generate_level",
    "sample_level",
    "check_generation_settings",
    "GenerationError",
    "PAPER_SIZES",
    "PAPER_SIZE_WEIGHTS",
    "PLACEMENTS",
    "open_room_moves",
]

PAPER_SIZES = (6, 7, 8)
# Rooms of each side in the paper's 10,000-layout train set: 1,136 of 6x6, 3,795 of 7x7, 5,069 of 8x8.
PAPER_SIZE_WEIGHTS = (0.1136, 0.3795, 0.5069)
_PAPER_SIZE_CUTS = (0.1136, 0.1136 + 0.3795)
# size="uniform": 6, 7 and 8 equally often, erl-gym's earlier default (which gave each seed the same level as now
# generate_level(rng, size="uniform") does).
UNIFORM_PAPER_SIZES = "uniform"
PLACEMENTS = ("auto", "uniform", "reverse")
# A room with interior walls costs more to build than a candidate costs to check, so a few candidates share one.
_CANDIDATES_PER_ROOM = 8
# Reverse play: chance that a backwards move pulls the box behind the player, and that the walk picks a new direction.
_PULL_PROBABILITY = 0.9
_TURN_PROBABILITY = 0.5
# One-box open rooms with up to this many interior cells look candidates up in a table of fewest moves (one table of
# cells^2 entries per goal, filled on first use) instead of searching them: 64 covers every room up to 10x10.
_TABLE_MAX_CELLS = 64


class GenerationError(RuntimeError):
    """No level met the requested settings within ``max_tries`` candidates."""


@dataclass
class _Tally:
    """Why candidates were rejected, reported when generation gives up."""

    too_short: int = 0
    too_long_or_unsolvable: int = 0
    pushes_out_of_band: int = 0
    over_budget: int = 0

    def __str__(self) -> str:
        parts = [f"{name.replace('_', ' ')}: {count}" for name, count in vars(self).items() if count]
        return ", ".join(parts) or "none"


def _check_size(size: int | Sequence[int] | str | None) -> tuple[int, int] | None:
    if size is None or (isinstance(size, str) and size == UNIFORM_PAPER_SIZES):
        return None
    if isinstance(size, (int, np.integer)):
        shape = (int(size), int(size))
    else:
        try:
            shape = tuple(int(v) for v in size)
        except (TypeError, ValueError):
            raise TypeError(f"size must be None, an int or a (height, width) pair, got {size!r}") from None
        if len(shape) != 2:
            raise ValueError(f"size must be a (height, width) pair, got {size!r}")
    if min(shape) < 3:
        raise ValueError(f"size {shape} is too small: the room needs a wall border around at least one floor cell")
    if max(shape) > LARGEST_LEVEL_SIDE:
        raise ValueError(f"size {shape} is too large: levels may be at most {LARGEST_LEVEL_SIDE} per side")
    return shape


def check_generation_settings(
    size: int | Sequence[int] | None = None,
    num_boxes: int = 1,
    interior_walls: float = 0.0,
    min_moves: int = 1,
    max_moves: int = 8,
    min_pushes: int | None = None,
    max_pushes: int | None = None,
    placement: str = "auto",
) -> None:
    """Raise ``ValueError``/``TypeError`` for settings ``generate_level`` can never satisfy (an env checks early)."""
    _checked_settings(size, num_boxes, interior_walls, min_moves, max_moves, min_pushes, max_pushes, placement)


def _checked_settings(size, num_boxes, interior_walls, min_moves, max_moves, min_pushes, max_pushes, placement):
    """Validate the settings; return the fixed shape (or None for the paper's sizes) and the resolved placement."""
    shape = _check_size(size)
    if isinstance(num_boxes, bool) or not isinstance(num_boxes, (int, np.integer)) or num_boxes < 1:
        raise ValueError(f"num_boxes must be a positive integer, got {num_boxes!r}")
    if not isinstance(interior_walls, (int, float)) or not 0.0 <= interior_walls < 1.0:
        raise ValueError(f"interior_walls is a fraction of the interior in [0, 1), got {interior_walls!r}")
    for name, value in (("min_moves", min_moves), ("max_moves", max_moves)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= min_moves <= max_moves:
        raise ValueError(f"need 1 <= min_moves <= max_moves, got min_moves={min_moves}, max_moves={max_moves}")
    if min_pushes is not None and max_pushes is not None and min_pushes > max_pushes:
        raise ValueError(f"min_pushes ({min_pushes}) is larger than max_pushes ({max_pushes})")
    if max_pushes is not None and max_pushes < num_boxes:
        # Every box starts off its goal in both placements, so each needs at least one push.
        raise ValueError(f"max_pushes={max_pushes} is below num_boxes={num_boxes}: each box needs a push")
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of {list(PLACEMENTS)}")
    if placement == "auto":
        placement = "uniform" if num_boxes == 1 else "reverse"
    needed = 2 * num_boxes + 1 if placement == "uniform" else num_boxes + 1
    # Checked for every size the setting allows, so a bad combination fails now, not after max_tries.
    for height, width in [shape] if shape is not None else [(n, n) for n in PAPER_SIZES]:
        interior = (height - 2) * (width - 2)
        floor_cells = interior - int(round(interior_walls * interior))
        if floor_cells < needed:
            raise ValueError(
                f"a {height}x{width} room with interior_walls={interior_walls} has {floor_cells} floor cells; "
                f"{placement} placement of {num_boxes} box(es) needs at least {needed}"
            )
    return shape, placement


_checked_settings_cached = lru_cache(maxsize=256)(_checked_settings)


@lru_cache(maxsize=64)
def _open_floor(height: int, width: int) -> frozenset[Cell]:
    return frozenset(_interior(height, width))


@lru_cache(maxsize=64)
def _border(height: int, width: int) -> frozenset[Cell]:
    return frozenset((r, c) for r in range(height) for c in range(width) if r in (0, height - 1) or c in (0, width - 1))


@lru_cache(maxsize=64)
def _interior(height: int, width: int) -> list[Cell]:
    return [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]


def _connected(cells: set[Cell]) -> bool:
    if not cells:
        return False
    start = next(iter(cells))
    seen = {start}
    stack = [start]
    while stack:
        r, c = stack.pop()
        for nxt in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if nxt in cells and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return len(seen) == len(cells)


def _room(
    rng: np.random.Generator, height: int, width: int, interior_walls: float
) -> tuple[frozenset[Cell], list[Cell]]:
    """Walls and floor cells of a room: the border plus ``interior_walls`` of the interior, floor kept connected."""
    interior = _interior(height, width)
    count = _interior_wall_count(interior_walls, len(interior))
    if count == 0:
        return _border(height, width), interior  # shared, cached: never mutated by callers
    floor = set(interior)
    walls = set(_border(height, width))
    order = [interior[i] for i in rng.permutation(len(interior))]
    # A cell that would cut the floor in two now may not once other walls are in: go round until enough are placed.
    # A connected floor always has a cell whose removal keeps it connected, so every round places at least one.
    while count:
        skipped = []
        for cell in order:
            if count == 0:
                break
            floor.discard(cell)
            if _connected(floor):
                walls.add(cell)
                count -= 1
            else:
                floor.add(cell)
                skipped.append(cell)
        order = skipped
    # Sorted so the cell order (and so every later draw) depends only on the rng, not on set iteration order.
    return frozenset(walls), sorted(floor)


def _pick(rng: np.random.Generator, cells: list[Cell], k: int) -> list[Cell]:
    return [cells[i] for i in draws.choice_without_replacement(rng, len(cells), k)]


def _uniform_candidate(rng, height, width, walls, floor, num_boxes) -> SokobanLevel:
    cells = _pick(rng, floor, 2 * num_boxes + 1)
    boxes, goals = frozenset(cells[1:num_boxes + 1]), frozenset(cells[num_boxes + 1:])
    return SokobanLevel(height, width, walls, boxes, goals, cells[0])


def _reverse_candidate(rng, height, width, walls, floor, num_boxes, walk_length) -> SokobanLevel:
    """Boxes on their goals, then ``walk_length`` backwards moves; a move away from a box usually pulls it along.

    The walk tends to keep its direction (pulling a box in a straight line moves it further from its goal than
    turning back does), which gives more candidates with long solutions.
    """
    cells = _pick(rng, floor, num_boxes + 1)
    goals = frozenset(cells[1:])
    boxes = set(goals)
    player = cells[0]
    floor_set = frozenset(floor)
    directions = rng.integers(0, 4, size=walk_length)
    turns = rng.random(walk_length) < _TURN_PROBABILITY
    pulls = rng.random(walk_length) < _PULL_PROBABILITY
    direction = int(directions[0])
    for i in range(walk_length):
        if turns[i]:
            direction = int(directions[i])
        dr, dc = MOVES[direction]
        ahead = (player[0] + dr, player[1] + dc)
        if ahead not in floor_set or ahead in boxes:
            continue
        behind = (player[0] - dr, player[1] - dc)
        if pulls[i] and behind in boxes:
            boxes.remove(behind)
            boxes.add(player)
        player = ahead
    return SokobanLevel(height, width, walls, frozenset(boxes), goals, player)


# A start from which the box can never reach the goal, in an ``_OpenRoomMoves`` table.
_NEVER = 0xFFFF


class _OpenRoomMoves:
    """Fewest moves of every one-box level in an open room, so that candidates are looked up instead of searched.

    Cells are numbered as in ``_interior`` (row-major inside the border), the numbering candidates are drawn in, so
    a draw indexes the table directly. A goal's table is filled on first use by one breadth-first search backwards
    from the solved positions (box on the goal, player anywhere), which settles every start at once for about the
    cost of searching a few dozen candidates; a room has at most ``_TABLE_MAX_CELLS`` goals.
    """

    def __init__(self, rows: int, cols: int):
        self.cells = rows * cols
        # lines[i]: for each direction, (the cell one step ahead of i, the cell one step behind i), -1 past the border.
        self.lines = []
        for r in range(rows):
            for c in range(cols):
                line = []
                for dr, dc in MOVES:
                    ahead = (r + dr) * cols + c + dc if 0 <= r + dr < rows and 0 <= c + dc < cols else -1
                    behind = (r - dr) * cols + c - dc if 0 <= r - dr < rows and 0 <= c - dc < cols else -1
                    line.append((ahead, behind))
                self.lines.append(tuple(line))
        self._by_goal: list[array | None] = [None] * self.cells

    def moves(self, player: int, box: int, goal: int) -> int | None:
        """Fewest moves from a start of three distinct cells, or ``None`` if the box can never reach the goal."""
        table = self._by_goal[goal]
        if table is None:
            table = self._by_goal[goal] = self._moves_to(goal)
        moves = table[player * self.cells + box]
        return None if moves == _NEVER else moves

    def _moves_to(self, goal: int) -> array:
        """Fewest moves to push the box onto ``goal``, indexed ``player * cells + box``."""
        n, lines = self.cells, self.lines
        table = array("H", [_NEVER]) * (n * n)  # at most n * (n - 1) positions, so every count fits
        frontier = [(player, goal) for player in range(n) if player != goal]
        for player, box in frontier:
            table[player * n + box] = 0
        depth = 0
        while frontier:
            depth += 1
            earlier = []
            for player, box in frontier:
                for ahead, behind in lines[player]:
                    if behind < 0:
                        continue
                    # The last move took the player from `behind` to here: a plain walk...
                    if behind != box and table[behind * n + box] == _NEVER:
                        table[behind * n + box] = depth
                        earlier.append((behind, box))
                    # ...or a push, if it left the box just ahead of the player.
                    if ahead == box and table[behind * n + player] == _NEVER:
                        table[behind * n + player] = depth
                        earlier.append((behind, player))
            frontier = earlier
        return table


@lru_cache(maxsize=64)
def _open_room_moves(rows: int, cols: int) -> _OpenRoomMoves:
    return _OpenRoomMoves(rows, cols)


def open_room_moves(level: SokobanLevel) -> int | None:
    """Fewest moves of a one-box level in an open rectangular room, from the table (no search), or -1 when the
    level is not of that kind (the caller then searches). ``None`` means unsolvable, as for the solver."""
    h, w = level.height, level.width
    if (len(level.boxes) != 1 or (h - 2) * (w - 2) > _TABLE_MAX_CELLS or level.walls != _border(h, w)
            or level.floor != _open_floor(h, w)):
        return -1
    cols = w - 2

    def index(cell: Cell) -> int:
        return (cell[0] - 1) * cols + cell[1] - 1

    (box,), (goal,) = level.boxes, level.targets
    if box == goal:
        return 0
    return _open_room_moves(h - 2, cols).moves(index(level.player), index(box), index(goal))


def _interior_wall_count(interior_walls: float, cells: int) -> int:
    return int(round(interior_walls * cells))


def generate_level(
    rng: np.random.Generator | int,
    size: int | Sequence[int] | None = None,
    num_boxes: int = 1,
    interior_walls: float = 0.0,
    min_moves: int = 1,
    max_moves: int = 8,
    min_pushes: int | None = None,
    max_pushes: int | None = None,
    placement: str = "auto",
    max_tries: int = 1000,
    max_states: int = 200_000,
    max_total_states: int | None = None,
) -> tuple[SokobanLevel, list[GridAction]]:
    """A random level whose fewest-moves solution has between ``min_moves`` and ``max_moves`` moves, and that solution.

    Arguments:
        rng: the only source of randomness (an env passes ``self.np_random``); an int seeds a new generator.
        size: ``None`` for the paper's train mix of 6x6, 7x7 and 8x8 rooms (``PAPER_SIZE_WEIGHTS``),
            ``"uniform"`` for the three equally often (erl-gym's earlier default), an int n for n x n, or
            ``(height, width)``;
            sizes include the wall border.
        num_boxes: boxes (and goals) in the level.
        interior_walls: fraction of interior cells turned into walls, always keeping the floor connected.
        min_moves, max_moves: the band for the optimal number of moves (the paper: 1..8).
        min_pushes, max_pushes: optional band for the pushes of that optimal solution.
        placement: ``"uniform"`` draws player, boxes and goals on distinct random cells (the paper's procedure);
            ``"reverse"`` pulls boxes away from their goals (solvable candidates, far better for many boxes);
            ``"auto"`` picks uniform for one box and reverse otherwise.
        max_tries: candidates to try before raising ``GenerationError``.
        max_states: solver budget per candidate; a candidate the solver cannot settle within it is rejected.
        max_total_states: solver budget of the whole call (None: no limit besides ``max_tries`` x ``max_states``);
            once spent, generation gives up with ``GenerationError``. It bounds the work of a request.
    """
    level, _, actions = _generate(
        rng, size, num_boxes, interior_walls, min_moves, max_moves, min_pushes, max_pushes, placement, max_tries,
        max_states, max_total_states,
    )
    if actions is None:
        # The level was looked up, not searched: search it now, exactly as the candidate loop would have.
        actions = solution_stats(level, max_states=max_states, max_moves=max_moves).actions
    return level, list(actions)


def sample_level(
    rng: np.random.Generator | int,
    size: int | Sequence[int] | None = None,
    num_boxes: int = 1,
    interior_walls: float = 0.0,
    min_moves: int = 1,
    max_moves: int = 8,
    min_pushes: int | None = None,
    max_pushes: int | None = None,
    placement: str = "auto",
    max_tries: int = 1000,
    max_states: int = 200_000,
    max_total_states: int | None = None,
) -> tuple[SokobanLevel, int]:
    """The level ``generate_level`` returns for the same arguments and ``rng`` state, and its fewest number of moves.

    For callers that need the length of the optimal solution but not the solution (an env's ``optimal_steps``):
    in the paper's setting it then takes no search at all.
    """
    level, moves, _ = _generate(
        rng, size, num_boxes, interior_walls, min_moves, max_moves, min_pushes, max_pushes, placement, max_tries,
        max_states, max_total_states,
    )
    return level, moves


def _generate(
    rng, size, num_boxes, interior_walls, min_moves, max_moves, min_pushes, max_pushes, placement, max_tries,
    max_states, max_total_states=None,
) -> tuple[SokobanLevel, int, tuple[GridAction, ...] | None]:
    """The candidate loop: (level, fewest moves, a fewest-moves solution or ``None`` if the moves were looked up)."""
    if isinstance(rng, (int, np.integer)):
        rng = np.random.default_rng(int(rng))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (e.g. env.np_random) or an int seed, got {type(rng).__name__}")
    settings = (size, num_boxes, interior_walls, min_moves, max_moves, min_pushes, max_pushes, placement)
    try:  # an env checks the same settings at every reset
        shape, placement = _checked_settings_cached(*settings)
    except TypeError as err:
        if "unhashable" not in str(err):
            raise
        shape, placement = _checked_settings(*settings)
    if max_tries < 1:
        raise ValueError(f"max_tries must be at least 1, got {max_tries}")

    # The size is drawn once, not per try: redrawing it would favour the sizes whose candidates pass more often.
    if shape is None and size == UNIFORM_PAPER_SIZES:
        shape = (PAPER_SIZES[draws.integers(rng, len(PAPER_SIZES), 1)[0]],) * 2  # = rng.choice(PAPER_SIZES)
    elif shape is None:
        side = PAPER_SIZES[bisect_right(_PAPER_SIZE_CUTS, rng.random())]
        shape = (side, side)
    height, width = shape
    cells = (height - 2) * (width - 2)
    table = None
    if (
        placement == "uniform" and num_boxes == 1 and _interior_wall_count(interior_walls, cells) == 0
        and min_pushes is None and max_pushes is None and cells <= _TABLE_MAX_CELLS
        # A room has cells * (cells - 1) positions, so the search could never have run out of states.
        and max_states > cells * (cells - 1)
    ):
        table = _open_room_moves(height - 2, width - 2)
    tally = _Tally()
    spent, tried = 0, max_tries  # solver states, against max_total_states; candidates tried
    for attempt in range(max_tries):
        if max_total_states is not None and spent >= max_total_states:
            tried = attempt
            break
        if attempt % _CANDIDATES_PER_ROOM == 0:
            walls, floor = _room(rng, height, width, interior_walls)
        if table is not None:
            # _uniform_candidate's draw, looked up instead of built and searched.
            player, box, goal = draws.choice_without_replacement(rng, len(floor), 3)
            moves = table.moves(player, box, goal)
            if moves is None or moves > max_moves:
                tally.too_long_or_unsolvable += 1
            elif moves < min_moves:
                tally.too_short += 1
            else:
                boxes, goals = frozenset([floor[box]]), frozenset([floor[goal]])
                # An open room: every interior cell is floor, and the three cells are distinct interior cells.
                level = trusted_level(height, width, walls, boxes, goals, floor[player], _open_floor(height, width))
                return level, moves, None
            continue
        if placement == "uniform":
            level = _uniform_candidate(rng, height, width, walls, floor, num_boxes)
        else:
            walk = int(rng.integers(min_moves, 3 * max_moves + 1))
            level = _reverse_candidate(rng, height, width, walls, floor, num_boxes, walk)
        budget = max_states if max_total_states is None else min(max_states, max_total_states - spent)
        result = solution_stats(level, max_states=budget, max_moves=max_moves)
        spent += result.states
        if result.status == "budget":
            tally.over_budget += 1
        elif result.actions is None:
            tally.too_long_or_unsolvable += 1
        elif result.moves < min_moves:
            tally.too_short += 1
        elif (min_pushes is not None and result.pushes < min_pushes) or (
            max_pushes is not None and result.pushes > max_pushes
        ):
            tally.pushes_out_of_band += 1
        else:
            return level, result.moves, result.actions
    tries = f"{max_tries} tries" if tried == max_tries else f"{tried} tries, when its {spent:,} solver states ran out"
    raise GenerationError(
        f"no level with {min_moves}..{max_moves} optimal moves"
        + (f" and {min_pushes}..{max_pushes} pushes" if min_pushes is not None or max_pushes is not None else "")
        + f" in {tries} (size={size}, num_boxes={num_boxes}, interior_walls={interior_walls}, "
        f"placement={placement}); rejected: {tally}. Widen the band, raise max_tries or max_states, or use a "
        f"bigger room."
    )
