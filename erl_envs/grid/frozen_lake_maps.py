"""FrozenLake maps: validating a map someone gives, its shortest path, and drawing new ones (the reference code's
generator, map for map, and ours, ``"feasible"``). ``erl_envs.grid.frozen_lake`` plays them.

A map is a list of equal rows over ``S`` (start), ``F`` (frozen), ``H`` (hole) and ``G`` (goal); drawing works on
the flat row-major string and on bit masks, so that a reset costs microseconds.
"""

from __future__ import annotations

import operator
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from erl_envs.grid import draws

__all__ = [
    "generate_frozen_lake",
    "draw_paper_map",
    "draw_feasible_map",
    "shortest_path_length",
    "validate_map",
    "prepared_map",
    "size_range",
    "p_range",
    "MapError",
    "PAPER_SIZE",
    "PAPER_P",
    "MAX_MAP_SIDE",
    "LARGEST_MAP_SIDE",
    "GENERATORS",
    "GENERATOR_MAX_TRIES",
    "PAPER_SEARCH_DEPTH",
]

PAPER_SIZE = (2, 9)
PAPER_P = (0.6, 0.85)
# Maps given at reset (or sizes asked for) may be this big even when the env generates smaller ones: the
# observation space is sized for max(this, the largest generated size).
MAX_MAP_SIDE = 16
# No map is bigger than this per side (``size`` is refused beyond it before anything is allocated): the generator's
# search and the text of a map grow with its area, and a served env takes sizes from its settings.
LARGEST_MAP_SIDE = 100
MAP_CHARS = "SFHG"
# After this many rejected maps a path is carved through the last one; only reachable for p near 0 on big maps.
GENERATOR_MAX_TRIES = 1000
# Grid texts and task ids of this many maps are kept per env (see _new_level).
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
            raise MapError(f"the map must be square ({n} rows of {n} cells), but row {i} has {len(row)} cells: "
                           f"{row[:40]!r}{'...' if len(row) > 40 else ''}")
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
    lo, hi = size_range(size)
    return lo if lo == hi else lo + draws.integers(rng, hi - lo + 1, 1)[0]


def size_range(size: Any) -> tuple[int, int]:
    """``size`` as an inclusive (lo, hi) range, from an int or a pair."""
    if isinstance(size, (tuple, list)) and len(size) == 2:
        lo, hi = (as_int(v, "size") for v in size)
    else:
        lo = hi = as_int(size, "size")
    if lo < 2 or lo > hi:
        raise ValueError(f"size must be an int >= 2 or a range (lo, hi) with 2 <= lo <= hi, got {size!r}")
    if hi > LARGEST_MAP_SIDE:
        raise ValueError(f"size {size!r} is too large: maps may be at most {LARGEST_MAP_SIDE} per side")
    return lo, hi


def as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or an (lo, hi) pair of ints, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or an (lo, hi) pair of ints, got {value!r}") from None


def p_range(p: Any) -> tuple[float, float]:
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
    lo, hi = p_range(p)
    return lo if lo == hi else lo + (hi - lo) * rng.random()  # what rng.uniform(lo, hi) computes


def prepared_map(value: Any) -> tuple[str, int, int, int, int | None]:
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

# Frozen flags (one byte per cell, 1 frozen, 0 hole) to map letters, and to binary digits, each in one C call.
_FLAGS_TO_CHARS = bytes.maketrans(b"\x00\x01", b"HF")
_FLAGS_TO_DIGITS = bytes.maketrans(b"\x00\x01", b"01")
# Map letters, or frozen flags, to 1 for a hole and 0 for anything else.
_HOLES_MARKED = bytes.maketrans(b"HFSG\x00\x01", b"\x01\x00\x00\x00\x01\x00")


def _flag_bits(flags: bytearray) -> int:
    """The frozen flags as one int, bit i for cell i (so the digits are read last cell first)."""
    return int(flags.translate(_FLAGS_TO_DIGITS)[::-1], 2)


def draw_feasible_map(
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
    """The reference generator's acceptance test, a depth-limited depth-first search from the start, on ``flat``:
    the board as letters (``S``/``F``/``H``/``G``) or as frozen flags (byte 1 frozen, 0 hole).

    It is not a shortest-path test: a cell is marked the first time it is popped, possibly at a larger depth than a
    later route would give, so some maps whose goal is 6 moves away are still rejected. Reproduced step for step
    because the paper's maps depend on exactly which boards it rejects.
    """
    # Equivalent shortcuts: a cell already marked is never pushed (its pop would be skipped), and the cells the
    # search pops at its last depth are only looked at for the goal beside them (their pushes would be skipped).
    neighbours = _neighbour_table(n)
    last = PAPER_SEARCH_DEPTH
    seen = bytearray(flat).translate(_HOLES_MARKED)  # holes are never pushed: marked up front, one test fewer
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


def draw_paper_map(rng: np.random.Generator, n: int, p: float) -> tuple[str, int, int, int]:
    """The reference code's FrozenLake generator (side n >= 2): (flattened map, start, goal, shortest path length).

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
    # draws.integers(rng, n, 4) inlined, the bit generator's interface fetched once per map, not once per try.
    random, bits = rng.random, rng.bit_generator.ctypes
    next_uint32, state, rejected_below = bits.next_uint32, bits.state, (2**32 - n) % n  # (Lemire's method)
    while True:
        board_draws = random(n * n)
        while True:
            cell = []
            for _ in range(4):
                m = next_uint32(state) * n
                while m & 0xFFFFFFFF < rejected_below:
                    m = next_uint32(state) * n
                cell.append(m >> 32)
            sr, sc, gr, gc = cell
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
        if shortest <= 2 or _paper_search_accepts(flags, n, start, goal):
            board = flags.translate(_FLAGS_TO_CHARS)
            board[start], board[goal] = 83, 71  # "S", "G"
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

    * ``generator="paper"`` (default): the reference code's generator, map for map (``draw_paper_map``): boards
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
    budget = as_int(max_steps, "max_steps")
    if budget < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    tries = as_int(max_tries, "max_tries")
    if tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries}")
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {list(GENERATORS)}, got {generator!r}")
    n = _side_choice(rng, size)
    level_p = _p_choice(rng, p)
    if generator == "paper":
        flat, _, _, _ = draw_paper_map(rng, n, level_p)
    else:
        flat, _, _, _ = draw_feasible_map(rng, n, level_p, budget, tries)
    return [flat[i * n:(i + 1) * n] for i in range(n)]


