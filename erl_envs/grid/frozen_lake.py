"""ERL-FrozenLake-v0: deterministic FrozenLake as text, with abstract symbols and an 8-step budget (the ERL paper's)."""

from __future__ import annotations

import hashlib
import operator
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from erl_envs.grid import draws
from erl_envs.grid.actions import ACTION_NAMES, MOVES, GridAction
from erl_envs.grid.env import GridTextEnv, MoveOutcome
from erl_envs.grid.text import FROZEN_LAKE_SYMBOLS, SymbolSet
from erl_envs.paper_tasks import frozenlake_test_maps

__all__ = [
    "FrozenLakeTextEnv",
    "generate_frozen_lake",
    "shortest_path_length",
    "validate_map",
    "MapError",
    "PAPER_SIZE",
    "PAPER_P",
    "MAX_MAP_SIDE",
    "GENERATORS",
    "PAPER_SEARCH_DEPTH",
]

# The paper's distribution: side n ~ U{2..9}, frozen-tile probability p ~ U[0.6, 0.85).
PAPER_SIZE = (2, 9)
PAPER_P = (0.6, 0.85)
# Maps given at reset (or sizes asked for) may be this big even when the env generates smaller ones: the
# observation space is sized for max(this, the largest generated size).
MAX_MAP_SIDE = 16
MAP_CHARS = "SFHG"
# After this many rejected maps a path is carved through the last one; only reachable for p near 0 on big maps.
GENERATOR_MAX_TRIES = 1000
_EXCLUDED_REDRAWS = 1000  # a drawn map that exclude= or min_path= refuses is redrawn, this many times at most
# Grid texts and task ids of this many maps are kept per env (see _new_level).
_MAP_TEXT_CACHE_SIZE = 4096
# "paper": the reference code's generator, map for map; "feasible": ours, every map solvable within the step budget.
GENERATORS = ("paper", "feasible")
# The reference generator's search expands cells reached in at most this many moves, so its goal is at most one
# move further (6 moves) along the path that search happened to find.
PAPER_SEARCH_DEPTH = 5


class MapError(ValueError):
    """A FrozenLake map that cannot be played: the message says what is wrong and where."""


def _as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def validate_map(rows: str | Sequence[str]) -> list[str]:
    """Check a map (rows of ``S``/``F``/``H``/``G``, or one string with newlines) and return it as a list of rows.

    A map must be square, hold exactly one start ``S`` and one goal ``G``, and use only those four characters.
    """
    if isinstance(rows, str):
        rows = rows.strip("\n").split("\n")
    elif isinstance(rows, np.ndarray):
        # Gymnasium's FrozenLake keeps its map as a 2-D array of single bytes; parquet columns give 1-D arrays of rows.
        if rows.ndim == 2:
            rows = ["".join(_as_text(cell) for cell in row) for row in rows]
        else:
            rows = [_as_text(row) for row in rows]
    else:
        try:
            rows = list(rows)
        except TypeError:
            raise TypeError(f"a map must be a list of row strings (or one string with newlines) of S/F/H/G, got "
                            f"{type(rows).__name__}") from None
    if not rows:
        raise MapError("the map is empty")
    for i, row in enumerate(rows):
        if not isinstance(row, str):
            raise MapError(f"map row {i} is a {type(row).__name__}, not a str")
    n = len(rows)
    for i, row in enumerate(rows):
        if len(row) != n:
            raise MapError(f"the map must be square ({n} rows of {n} cells), but row {i} has {len(row)} cells: {row!r}")
    counts = {"S": [], "G": []}
    for i, row in enumerate(rows):
        for j, ch in enumerate(row):
            if ch not in MAP_CHARS:
                raise MapError(
                    f"unknown map character {ch!r} at row {i}, column {j}; use S start, F frozen, H hole, G goal"
                )
            if ch in counts:
                counts[ch].append((i, j))
    for ch, name in (("S", "start"), ("G", "goal")):
        if len(counts[ch]) != 1:
            where = f" (at {counts[ch]})" if counts[ch] else ""
            raise MapError(f"the map must hold exactly one {name} {ch!r}, found {len(counts[ch])}{where}")
    return rows


def _find(rows: Sequence[str], ch: str) -> tuple[int, int]:
    for i, row in enumerate(rows):
        j = row.find(ch)
        if j >= 0:
            return i, j
    raise MapError(f"the map has no {ch!r}")


@lru_cache(maxsize=64)
def _edge_masks(height: int, width: int) -> tuple[int, int]:
    """Bitmasks of the cells that may move right (not in the last column) and left (not in the first column)."""
    last = sum(1 << (r * width + width - 1) for r in range(height))
    first = sum(1 << (r * width) for r in range(height))
    full = (1 << (height * width)) - 1
    return full & ~last, full & ~first


def _bfs_length(passable: int, height: int, width: int, start: int, goal: int, limit: int) -> int | None:
    """Moves from ``start`` to ``goal`` through ``passable`` cells (bit i = flat cell i), or None beyond ``limit``.

    The whole frontier advances at once with shifts of one big int: a map is at most a few hundred cells, so this
    is several times faster than a queue of cells, and map generation runs it on every candidate map.
    """
    if start == goal:
        return 0
    can_go_right, can_go_left = _edge_masks(height, width)
    target = 1 << goal
    frontier = 1 << start
    unseen = passable & ~frontier  # passable cells not reached yet
    for depth in range(1, limit + 1):
        f = frontier
        frontier = ((f << width) | (f >> width) | ((f & can_go_right) << 1) | ((f & can_go_left) >> 1)) & unseen
        if frontier & target:
            return depth
        if not frontier:
            return None
        unseen ^= frontier
    return None


def _passable_bits(flat: str) -> int:
    return sum(1 << i for i, ch in enumerate(flat) if ch != "H")


def shortest_path_length(rows: Sequence[str]) -> int | None:
    """Fewest moves from ``S`` to ``G`` that never step on a hole ``H``; ``None`` if the goal cannot be reached."""
    height, width = len(rows), len(rows[0])
    if any(len(row) != width for row in rows):
        raise MapError("the map rows must all have the same length")
    (sr, sc), (gr, gc) = _find(rows, "S"), _find(rows, "G")
    flat = "".join(rows)
    return _bfs_length(_passable_bits(flat), height, width, sr * width + sc, gr * width + gc, height * width)


def _side_choice(rng: np.random.Generator, size: Any) -> int:
    lo, hi = _size_range(size)
    return lo if lo == hi else lo + draws.integers(rng, hi - lo + 1, 1)[0]


def _size_range(size: Any) -> tuple[int, int]:
    """``size`` as an inclusive (lo, hi) range, from an int or a pair."""
    if isinstance(size, (tuple, list)) and len(size) == 2:
        lo, hi = (_as_int(v, "size") for v in size)
    else:
        lo = hi = _as_int(size, "size")
    if lo < 2 or lo > hi:
        raise ValueError(f"size must be an int >= 2 or a range (lo, hi) with 2 <= lo <= hi, got {size!r}")
    return lo, hi


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or an (lo, hi) pair of ints, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or an (lo, hi) pair of ints, got {value!r}") from None


def _p_range(p: Any) -> tuple[float, float]:
    if isinstance(p, (tuple, list)) and len(p) == 2:
        lo, hi = float(p[0]), float(p[1])
    elif isinstance(p, (int, float, np.floating)) and not isinstance(p, bool):
        lo = hi = float(p)
    else:
        raise TypeError(f"p must be a float or a (lo, hi) pair of floats, got {p!r}")
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"p (the frozen-tile probability) must satisfy 0 <= lo <= hi <= 1, got {p!r}")
    return lo, hi


def _p_choice(rng: np.random.Generator, p: Any) -> float:
    lo, hi = _p_range(p)
    return lo if lo == hi else lo + (hi - lo) * rng.random()  # what rng.uniform(lo, hi) computes


def _prepared_map(value: Any) -> tuple[str, int, int, int, int | None]:
    """(flattened map, side, start index, goal index, shortest path) of a map given at reset, checked."""
    if isinstance(value, (str, tuple, list)):
        try:
            # Replaying the same map (an evaluation set given as maps) then skips the checks and the search.
            return _prepared_map_cached(value if isinstance(value, str) else tuple(value))
        except TypeError:  # unhashable rows: let the uncached path say what is wrong with them
            pass
    return _prepare_map(value)


def _prepare_map(value: Any) -> tuple[str, int, int, int, int | None]:
    rows = validate_map(value)
    n = len(rows)
    flat = "".join(rows)
    start, goal = flat.index("S"), flat.index("G")
    shortest = _bfs_length(_passable_bits(flat), n, n, start, goal, n * n)
    if shortest is None:  # a level nobody can win teaches nothing: it is a broken map, not a hard one
        raise MapError(f"the goal at {divmod(goal, n)} cannot be reached from the start at {divmod(start, n)} "
                       f"without stepping on a hole")
    return flat, n, start, goal, shortest


_prepared_map_cached = lru_cache(maxsize=1024)(_prepare_map)


# Above this many cells the table of start/goal pairs would be big; such maps draw pairs by rejection instead.
_PAIR_TABLE_MAX_CELLS = 32 * 32


@lru_cache(maxsize=64)
def _pair_table(n: int, budget: int) -> tuple[tuple[int, int], ...] | None:
    """All ordered pairs (start, goal) of distinct cells at most ``budget`` apart, as flat indices; None if too big.

    Python ints rather than an array: a reset picks one pair, and indexing a tuple is far cheaper than an array.
    """
    if n * n > _PAIR_TABLE_MAX_CELLS:
        return None
    r, c = np.divmod(np.arange(n * n), n)
    dist = np.abs(r[:, None] - r[None, :]) + np.abs(c[:, None] - c[None, :])
    starts, goals = np.nonzero((dist > 0) & (dist <= budget))
    return tuple(zip(starts.tolist(), goals.tolist()))


def _start_and_goal(rng: np.random.Generator, n: int, budget: int, u: float) -> tuple[int, int]:
    """Distinct start and goal at most ``budget`` apart, uniform over such ordered pairs; ``u`` is a U[0, 1) draw.

    Pairs further apart could never pass the path check, so this is the distribution of drawing any pair and
    rejecting, without the wasted draws.
    """
    table = _pair_table(n, budget)
    if table is not None:
        return table[int(u * len(table))]
    cells = n * n
    while True:
        starts = rng.integers(cells, size=1024)
        goals = rng.integers(cells - 1, size=1024)
        goals += goals >= starts
        ok = np.abs(starts // n - goals // n) + np.abs(starts % n - goals % n) <= budget
        if ok.any():
            k = int(np.argmax(ok))
            return int(starts[k]), int(goals[k])


# What a move did, by direction: built once, since it depends on nothing else.
_BLOCKED = tuple(MoveOutcome(False, 0.0, False, f"tried {name}, did not move") for name in ACTION_NAMES)
_MOVED = tuple(MoveOutcome(True, 0.0, False, f"moved {name}") for name in ACTION_NAMES)
_FELL = tuple(MoveOutcome(True, 0.0, True, f"moved {name} and fell into a hole") for name in ACTION_NAMES)
_REACHED = tuple(MoveOutcome(True, 1.0, True, f"moved {name} and reached the goal") for name in ACTION_NAMES)

# Frozen flags (one byte per cell, 1 frozen, 0 hole) to map letters, and to binary digits, each in one C call.
_FLAGS_TO_CHARS = bytes.maketrans(b"\x00\x01", b"HF")
_FLAGS_TO_DIGITS = bytes.maketrans(b"\x00\x01", b"01")
# Map letters to 1 for a hole and 0 for anything else.
_HOLES_MARKED = bytes.maketrans(b"HFSG", b"\x01\x00\x00\x00")


def _flag_bits(flags: bytearray) -> int:
    """The frozen flags as one int, bit i for cell i (so the digits are read last cell first)."""
    return int(flags.translate(_FLAGS_TO_DIGITS)[::-1], 2)


def _draw_map(
    rng: np.random.Generator, n: int, p: float, budget: int, max_tries: int
) -> tuple[str, int, int, int]:
    """The generator's core: (flattened map, start index, goal index, shortest path length)."""
    for attempt in range(max_tries):
        # One draw per cell, plus one that picks the start/goal pair.
        u = rng.random(n * n + 1)
        start, goal = _start_and_goal(rng, n, budget, float(u[-1]))
        flags = bytearray((u[:-1] < p).tobytes())
        flags[start] = flags[goal] = 1
        length = _bfs_length(_flag_bits(flags), n, n, start, goal, budget)
        if length is None and attempt == max_tries - 1:
            _carve_path(rng, flags, n, start, goal)
            length = _bfs_length(_flag_bits(flags), n, n, start, goal, budget)
        if length is not None:
            chars = flags.translate(_FLAGS_TO_CHARS)
            chars[start], chars[goal] = ord("S"), ord("G")
            return chars.decode("ascii"), start, goal, length
    raise AssertionError("unreachable: the last try carves a path within the budget")


def _carve_path(rng: np.random.Generator, flags: bytearray, n: int, start: int, goal: int) -> None:
    (r, c), (gr, gc) = divmod(start, n), divmod(goal, n)
    steps = [(1 if gr > r else -1, 0)] * abs(gr - r) + [(0, 1 if gc > c else -1)] * abs(gc - c)
    for k in rng.permutation(len(steps)):
        r, c = r + steps[k][0], c + steps[k][1]
        flags[r * n + c] = 1


# ----------------------------------------------------------------------------- the paper's generator


@lru_cache(maxsize=64)
def _neighbour_table(n: int) -> tuple[tuple[int, ...], ...]:
    """Flat indices of each cell's on-board neighbours, in the order the reference search visits them:
    one row down, one column right, one row up, one column left."""
    table = []
    for cell in range(n * n):
        r, c = divmod(cell, n)
        table.append(tuple(
            nr * n + nc for nr, nc in ((r + 1, c), (r, c + 1), (r - 1, c), (r, c - 1)) if 0 <= nr < n and 0 <= nc < n
        ))
    return tuple(table)


def _paper_search_accepts(flat: bytes | bytearray, n: int, start: int, goal: int) -> bool:
    """The reference generator's acceptance test: a depth-limited depth-first search from the start.

    It is not a shortest-path test: a cell is marked the first time it is popped, possibly at a larger depth than a
    later route would give, so some maps whose goal is 6 moves away are still rejected. Reproduced step for step
    because the paper's maps depend on exactly which boards it rejects.
    """
    # Equivalent shortcuts: a cell already marked is never pushed (its pop would be skipped), and the cells the
    # search pops at its last depth are only looked at for the goal beside them (their pushes would be skipped).
    neighbours = _neighbour_table(n)
    last = PAPER_SEARCH_DEPTH
    # Holes are never pushed, so never marked; marking them up front saves a test per neighbour.
    seen = bytearray(flat).translate(_HOLES_MARKED)
    # A stack entry is cell * 8 + moves (moves <= 5): one int, no tuple to build and unpack.
    stack = [start * 8]
    pop, push = stack.pop, stack.append
    while stack:
        entry = pop()
        cell = entry >> 3
        if seen[cell]:
            continue
        seen[cell] = 1
        around = neighbours[cell]
        if goal in around:
            return True
        moves = entry & 7
        if moves < last:
            for nxt in around:
                if not seen[nxt]:
                    push(nxt * 8 + moves + 1)
    return False


def _draw_paper_map(rng: np.random.Generator, n: int, p: float) -> tuple[str, int, int, int]:
    """The reference code's FrozenLake generator: (flattened map, start index, goal index, shortest path length).

    Each try draws the whole board (frozen with probability p, else a hole), then start and goal as four integers
    (start row, start column, goal row, goal column) redrawn until the two cells differ, and keeps the board when
    ``_paper_search_accepts``. The draws are the ones the reference makes through ``Generator.choice`` and
    ``Generator.integers``, taken more cheaply (``random`` for the board, ``draws.integers`` for the cells), which
    yields the same numbers from the same stream. There is no try limit, as in the reference: a start next to the
    goal is always accepted, so every try succeeds with probability at least 2/n^2.

    Two cheap tests run first and only ever reject boards the search would reject too: a goal more than
    ``PAPER_SEARCH_DEPTH + 1`` rows plus columns away, or beyond that by the shortest hole-free path. A goal one or
    two moves away is accepted without the search, which always finds it: every neighbour of the start is pushed
    at depth 1, so each is popped, and looked around, at depth 5 or less before the search can end.
    """
    # Generator.choice(["F", "H"], p=[p, 1 - p]) picks "F" exactly when a U[0, 1) draw is below this.
    frozen_below = p / (p + (1.0 - p))
    reach = PAPER_SEARCH_DEPTH + 1
    while True:
        board_draws = rng.random(n * n)
        while True:
            sr, sc, gr, gc = draws.integers(rng, n, 4)
            if sr != gr or sc != gc:
                break
        if abs(sr - gr) + abs(sc - gc) > reach:
            continue
        flags = bytearray((board_draws < frozen_below).tobytes())
        start, goal = sr * n + sc, gr * n + gc
        flags[start] = flags[goal] = 1
        shortest = _bfs_length(_flag_bits(flags), n, n, start, goal, reach)
        if shortest is None:
            continue
        board = flags.translate(_FLAGS_TO_CHARS)
        board[start], board[goal] = 83, 71  # "S", "G"
        if shortest <= 2 or _paper_search_accepts(board, n, start, goal):
            return board.decode("ascii"), start, goal, shortest


def generate_frozen_lake(
    rng: np.random.Generator,
    size: int | tuple[int, int] = PAPER_SIZE,
    p: float | tuple[float, float] = PAPER_P,
    max_steps: int = 8,
    max_tries: int = GENERATOR_MAX_TRIES,
    generator: str = "paper",
) -> list[str]:
    """A random square map with a start ``S``, a goal ``G``, frozen cells ``F`` and holes ``H``.

    ``size`` is the side n (an int, or an inclusive range drawn uniformly); ``p`` the probability that a cell other
    than start and goal is frozen (a float, or a range drawn uniformly); start and goal are distinct random cells.
    Size and p are drawn once (no draw for a fixed value), then:

    * ``generator="paper"`` (default): the reference code's generator, map for map (``_draw_paper_map``): boards
      are redrawn until a depth-first search limited to 6 moves finds the goal. ``max_steps`` and ``max_tries``
      play no part. ``FrozenLakeTextEnv().reset(seed=s, options={"size": n, "p": p})`` gives the reference's map
      for the paper's test row (s, n, p).
    * ``generator="feasible"``: ours: start, goal and holes are redrawn until the shortest hole-free path fits
      ``max_steps``; should ``max_tries`` maps all fail (only plausible for p near 0), the last one gets a random
      monotone path of frozen cells carved from start to goal. It accepts goals up to ``max_steps`` (8) moves
      away where the paper's stop at 6, and draws other maps from the same seed.

    Deterministic given ``rng``: ``FrozenLakeTextEnv().reset(seed=s)`` plays
    ``generate_frozen_lake(np.random.default_rng(s))``.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (e.g. np.random.default_rng(0)), got {type(rng).__name__}"
        )
    budget = _as_int(max_steps, "max_steps")
    if budget < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    tries = _as_int(max_tries, "max_tries")
    if tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries}")
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {list(GENERATORS)}, got {generator!r}")
    n = _side_choice(rng, size)
    level_p = _p_choice(rng, p)
    if generator == "paper":
        flat, _, _, _ = _draw_paper_map(rng, n, level_p)
    else:
        flat, _, _, _ = _draw_map(rng, n, level_p, budget, tries)
    return [flat[i * n:(i + 1) * n] for i in range(n)]


class FrozenLakeTextEnv(GridTextEnv):
    """Cross a frozen lake from the start to the goal without falling into a hole, reading and writing text.

    ## Description
    The agent starts on one cell of a square grid of frozen ice and holes and must reach the goal cell. Moves are
    deterministic (the ice is not slippery). The ERL paper uses this game with abstract letters in place of the
    usual ones and reveals no rules: the model has to work out what the letters mean by playing.

    ## Action Space
    ``Text``: the agent's whole reply. ``action_format="paper"`` (default, the reference code's rule): the last
    triple-backtick block, stripped and lower-cased, must be exactly ``up``, ``down``, ``left`` or ``right``, or a
    number 1-4 read as 1 Left, 2 Down, 3 Right, 4 Up. ``action_format="lenient"`` (ours): also an ``<answer>``
    tag or the bare reply, aliases, and with ``max_actions_per_turn=k`` up to k moves per reply, digits 1-4 in
    Up/Down/Left/Right order (see ``erl_envs.grid.actions``). ``self.valid_actions`` lists the canonical replies,
    valid in both. A reply that cannot be parsed is an invalid action (see Rewards / Episode End).

    ## Observation Space
    ``Text``: the grid, one row per line, each cell written ``" S \\t"``; then a notice if the last action had no
    effect or could not be parsed; then ``Not solved yet. Give your next action.`` while the episode goes on; then
    ``Steps remaining: N``. The first observation is the grid and the steps line.

    ## Starting State
    A map drawn by ``generate_frozen_lake`` from ``self.np_random``: side n ~ U{2..9}, frozen probability
    p ~ U[0.6, 0.85), distinct random start and goal; boards are redrawn until the reference code's depth-first
    search (6 moves deep) finds the goal (``generator="paper"``, the default), or until the goal is reachable within
    the step budget (``generator="feasible"``). The agent stands on the start cell, which is ordinary frozen ice.

    ## Rewards
    1 for reaching the goal; 0 for everything else (moving, bumping into the edge, falling in a hole, invalid actions).

    ## Episode End
    Terminated when the agent reaches the goal or falls into a hole (or, with ``invalid_action="terminate"``, gives an
    unparseable reply); truncated when the step budget (``max_steps``, 8) is used up. Every reply, parseable or not,
    uses one step; a reply with k moves uses k.

    ## Information
    Every ``reset``/``step`` info holds ``success``, ``steps_used``, ``steps_left``, ``took_effect``, ``feedback``
    (e.g. ``"moved Left"``, ``"tried Up, did not move"``, ``"moved Down and fell into a hole"``,
    ``"could not parse the action"``), ``parse_errors``, ``no_effect_moves``, ``optimal_steps`` (BFS shortest path),
    ``task_id`` (``"frozenlake-"`` + sha1 of the map rows), ``task_text`` (the first grid), ``position`` (row, col),
    ``size`` (n), ``p`` (the frozen probability, ``None`` for a map given at reset); the last step adds
    ``episode_feedback``: ``Reached the goal.``, ``Fell into a hole.``, ``Hit the max step limit before reaching
    the goal.`` or ``No valid actions: ...``.

    ## Arguments
    ``render_mode`` (``"ansi"``, ``"rgb_array"``, ``"human"`` or None); ``size`` (int or inclusive (lo, hi),
    default (2, 9)); ``p`` (float or (lo, hi), default (0.6, 0.85)); ``max_steps=8``; ``symbols="abstract"``
    (``"gym"``, a dict of tile kind -> char, or a ``SymbolSet``); ``invalid_action="noop"`` (or ``"terminate"``);
    ``max_actions_per_turn=1`` (more needs ``action_format="lenient"``); ``action_format="paper"``;
    ``reveal_rules=False`` (True appends the symbol legend and rules to
    ``instructions``); ``instructions=None`` (the system prompt; default ``prompts.GRID_INSTRUCTIONS``);
    ``generator="paper"`` (or ``"feasible"``, see ``generate_frozen_lake``); ``exclude=None`` (``"paper-test"`` or a
    list of maps: such a drawn map is redrawn, with ``size``/``p`` options too, so evaluate the paper's test rows on
    an env without it; a ``map`` option is always played); ``min_path=0`` (a drawn map whose goal is fewer moves
    away is redrawn: a sparse-reward distribution).
    Reset options: ``size``, ``p``, ``max_steps`` (this episode only), ``map`` (explicit rows of ``S``/``F``/``H``/
    ``G``, checked by ``validate_map``, with a goal reachable from the start; excludes ``size``/``p``). Maps up to
    ``max(16, largest size)`` per side fit.
    Async vector envs need ``vector_kwargs={"shared_memory": False}`` (see ``GridTextEnv``).

    ## Text format
    A 3x3 map ``["SFF", "FHF", "FFG"]`` with abstract symbols, after one move Right::

         D 	 A 	 D 	
         D 	 C 	 D 	
         D 	 D 	 B 	
        Not solved yet. Give your next action.
        Steps remaining: 7

    Symbols: ``A`` agent, ``B`` goal, ``C`` hole, ``D`` frozen, ``X`` agent in a hole, ``Y`` agent on the goal
    (``symbols="gym"``: ``P``, ``G``, ``H``, ``F``, ``X``, ``W``).

    ## Paper fidelity
    Matches: the reference generator map for map (``reset(seed=s, options={"size": n, "p": p})`` gives the
    reference's map for its row (s, n, p), so the paper's 100 test maps replay exactly), size and p distributions,
    deterministic moves, the 8-step budget, the abstract symbols and cell layout, unparseable replies as no-op
    steps, sparse reward, the per-step messages and the four feedback lines. Departs: the agent on the goal is
    ``Y`` (the reference writes a non-ASCII check mark); the wording of the messages is ours. ``generator=
    "feasible"`` (ours, not the paper's) accepts goals up to ``max_steps`` moves away by shortest path, draws start
    and goal among pairs at most ``max_steps`` apart, and gives other maps for the same seed. See docs/fidelity.md.

    ## Version History
    * v0: initial version.
    """

    game_name = "FrozenLake"
    symbol_presets = FROZEN_LAKE_SYMBOLS
    level_options = frozenset({"size", "p", "map"})
    task_prefix = "frozenlake"
    rules_text = (
        "Each move takes you one cell in its direction; a move off the edge of the grid leaves you where you are. "
        "Reaching the goal wins (reward 1). Stepping onto a hole ends the game with reward 0. You have {max_steps} "
        "moves."
    )
    episode_feedback_lines = {
        "success": "Reached the goal.",
        "failure": "Fell into a hole.",
        "step_limit": "Hit the max step limit before reaching the goal.",
    }

    def __init__(
        self,
        render_mode: str | None = None,
        size: int | tuple[int, int] = PAPER_SIZE,
        p: float | tuple[float, float] = PAPER_P,
        max_steps: int = 8,
        symbols: str | SymbolSet | Mapping[str, str] = "abstract",
        invalid_action: str = "noop",
        max_actions_per_turn: int = 1,
        reveal_rules: bool = False,
        instructions: str | None = None,
        action_format: str = "paper",
        prompts: str = "lenient",
        generator: str = "paper",
        exclude: str | Sequence[Any] | None = None,
        min_path: int = 0,
    ):
        if generator not in GENERATORS:
            raise ValueError(f"generator must be one of {list(GENERATORS)}, got {generator!r}")
        self.generator = generator
        self.exclude = self._excluded_maps(exclude)
        self.min_path = _as_int(min_path, "min_path")
        self.size = size
        self.p = p
        self._sizes = _size_range(size)
        self._ps = _p_range(p)
        side = max(MAX_MAP_SIDE, self._sizes[1])
        super().__init__(
            render_mode=render_mode,
            max_grid_shape=(side, side),
            max_steps=max_steps,
            symbols=symbols,
            invalid_action=invalid_action,
            max_actions_per_turn=max_actions_per_turn,
            reveal_rules=reveal_rules,
            instructions=instructions,
            action_format=action_format,
            prompts=prompts,
        )
        if not 0 <= self.min_path <= self.max_steps:  # a goal further away could never be reached in time
            raise ValueError(f"min_path must be in [0, max_steps={self.max_steps}], got {min_path!r}")
        cell = self.renderer.cell
        self._cell_width = len(cell("frozen"))
        # str.translate turns a flattened map into its cells in one C call.
        self._cell_table = str.maketrans(
            {"S": cell("frozen"), "F": cell("frozen"), "H": cell("hole"), "G": cell("goal")}
        )
        self._agent_chars = {
            "S": self.symbols["agent"], "F": self.symbols["agent"],
            "H": self.symbols["agent_in_hole"], "G": self.symbols["agent_on_goal"],
        }
        self._flat = ""
        self._n = 0
        self._pos = (0, 0)
        self._goal = (0, 0)
        self._shortest: int | None = None
        self._level_p: float | None = None
        self._map_text = ""
        self._digest = ""
        self._map_texts: dict[str, tuple[str, str]] = {}  # flattened map -> (its grid text, its task digest)
        self._line_width = 0

    @staticmethod
    def _excluded_maps(exclude: Any) -> frozenset[str]:
        """The flattened maps that drawing must not produce: none, the paper's test maps, or the maps given."""
        if exclude is None or exclude == "paper-test":
            return frozenset() if exclude is None else frozenlake_test_maps()
        if isinstance(exclude, str) or not hasattr(exclude, "__iter__"):
            error = ValueError if isinstance(exclude, str) else TypeError
            raise error(f"exclude must be 'paper-test', None or a sequence of maps, got {exclude!r}")
        return frozenset("".join(validate_map(item)) for item in exclude)

    # ------------------------------------------------------------------ GridTextEnv hooks

    def _new_level(self, options: dict) -> None:
        if "map" in options:
            clash = sorted({"size", "p"} & set(options))
            if clash:
                raise ValueError(f"the reset option 'map' gives the whole level; do not combine it with {clash}")
            flat, n, start, goal, shortest = _prepared_map(options["map"])
            if n > self.max_grid_shape[0]:
                raise ValueError(
                    f"the map is {n}x{n} but this env was built for maps up to {self.max_grid_shape[0]} per side; "
                    f"build it with size={n} (or a range reaching {n}) to allow it"
                )
            level_p = None
        else:
            sizes = _size_range(options["size"]) if "size" in options else self._sizes
            if sizes[1] > self.max_grid_shape[0]:
                raise ValueError(
                    f"size {options['size']!r} is bigger than this env's largest map side "
                    f"({self.max_grid_shape[0]}); build the env with size={options['size']!r} to allow it"
                )
            lo, hi = _p_range(options["p"]) if "p" in options else self._ps
            rng = self.np_random
            # rng.integers(lo, hi + 1) and rng.uniform(lo, hi), drawn the cheap way (same numbers, same stream).
            n = sizes[0] if sizes[0] == sizes[1] else sizes[0] + draws.integers(rng, sizes[1] - sizes[0] + 1, 1)[0]
            level_p = lo if lo == hi else lo + (hi - lo) * rng.random()
            for _ in range(_EXCLUDED_REDRAWS):
                if self.generator == "paper":
                    flat, start, goal, shortest = _draw_paper_map(rng, n, level_p)
                else:
                    flat, start, goal, shortest = _draw_map(rng, n, level_p, self.episode_max_steps,
                                                            GENERATOR_MAX_TRIES)
                if flat not in self.exclude and shortest >= self.min_path:
                    break
            else:
                raise ValueError(f"{_EXCLUDED_REDRAWS} drawn {n}x{n} maps in a row were in exclude= or nearer than "
                                 f"min_path={self.min_path}: these settings leave (almost) no map to draw")
        self._flat = flat
        self._n = n
        self._pos = divmod(start, n)
        self._goal = divmod(goal, n)
        self._shortest = shortest
        self._level_p = level_p
        texts = self._map_texts.get(flat)
        if texts is None:
            # Small maps come back often (a 2x2 board has 12 layouts), so their text and task id are kept.
            if len(self._map_texts) >= _MAP_TEXT_CACHE_SIZE:
                self._map_texts.clear()
            cells = flat.translate(self._cell_table)
            width = n * self._cell_width
            map_text = "\n".join([cells[i * width:(i + 1) * width] for i in range(n)])
            rows = "\n".join([flat[i * n:(i + 1) * n] for i in range(n)])
            texts = self._map_texts[flat] = (map_text, hashlib.sha1(rows.encode()).hexdigest())
        self._map_text, self._digest = texts
        self._line_width = n * self._cell_width + 1

    def _apply_move(self, action: GridAction) -> MoveOutcome:
        dr, dc = MOVES[action]
        r, c = self._pos
        nr, nc = r + dr, c + dc
        n = self._n
        if not (0 <= nr < n and 0 <= nc < n):
            return _BLOCKED[action]
        self._pos = (nr, nc)
        tile = self._flat[nr * n + nc]
        if tile == "H":
            return _FELL[action]
        if tile == "G":
            return _REACHED[action]
        return _MOVED[action]

    def _is_success(self) -> bool:
        return self._pos == self._goal

    def _tile_kinds(self) -> list[list[str]]:
        kind = {"S": "frozen", "F": "frozen", "H": "hole", "G": "goal"}
        n = self._n
        grid = [[kind[ch] for ch in self._flat[i * n:(i + 1) * n]] for i in range(n)]
        r, c = self._pos
        grid[r][c] = {"frozen": "agent", "hole": "agent_in_hole", "goal": "agent_on_goal"}[grid[r][c]]
        return grid

    def _grid_shape(self) -> tuple[int, int]:
        return self._n, self._n

    def _render_grid(self) -> str:
        # The map text never changes within an episode: splice the agent's symbol into it.
        r, c = self._pos
        at = r * self._line_width + c * self._cell_width + 1
        text = self._map_text
        return text[:at] + self._agent_chars[self._flat[r * self._n + c]] + text[at + 1:]

    def _level_text(self) -> str:
        return "\n".join(self.map_rows)

    def _level_digest(self) -> str:
        return self._digest  # the sha1 of _level_text(), kept with the map's text

    def _optimal_steps(self) -> int | None:
        return self._shortest

    def _extra_info(self) -> dict:
        return {"position": self._pos, "size": self._n, "p": self._level_p}

    # ------------------------------------------------------------------ read-only views for tools and tests

    @property
    def map_rows(self) -> list[str]:
        """The current map as rows of ``S``/``F``/``H``/``G`` (a copy)."""
        n = self._n
        return [self._flat[i * n:(i + 1) * n] for i in range(n)]

    @property
    def position(self) -> tuple[int, int]:
        return self._pos
