"""Optimal Sokoban solving (fewest moves) for checking, generating and grading levels.

Two searches over (player, boxes) states, both exact (each also *proves* a level unsolvable when it exhausts the
reachable states within the budget): plain breadth-first search, and A* with an admissible lower bound (pushes each
box needs to reach its nearest goal alone, plus the walk to the nearest box off its goal), the default. Both prune
states that can never be solved, which never changes the optimum:

- *dead squares*: a box on a cell from which no sequence of pushes (ignoring other boxes) reaches any goal, which
  covers boxes in non-goal corners and boxes along a wall with no goal ahead;
- *2x2 freezes*: a pushed box that completes a 2x2 block of walls and boxes not all on goals.

States are ints (box bitmask shifted above the player's flat cell index), so hashing and expanding are cheap.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from erl_envs.grid.actions import MOVES, GridAction
from erl_envs.grid.sokoban_levels import (PUSHED, UNREACHABLE, Cell, SokobanLevel, apply_move, parse_level,
                                     push_distances)

__all__ = [
    "SolveResult",
    "solve_sokoban",
    "solution_stats",
    "METHODS",
]

METHODS = ("auto", "bfs", "astar")
_ACTIONS = tuple(GridAction)


@dataclass(frozen=True)
class SolveResult:
    """What a search found.

    ``status`` is ``"solved"``, ``"unsolvable"`` (proved: no solution, or none within ``max_moves`` when given) or
    ``"budget"`` (gave up after ``max_states`` states: the level may or may not be solvable).
    ``pushes`` counts the pushes of the move-optimal solution found (not the fewest pushes possible).
    """

    status: str
    actions: tuple[GridAction, ...] | None
    pushes: int | None
    states: int
    method: str

    @property
    def solved(self) -> bool:
        return self.actions is not None

    @property
    def moves(self) -> int | None:
        return None if self.actions is None else len(self.actions)


class _Room:
    """The fixed part of a level as flat arrays, computed once per (walls, goals) and shared by every search."""

    def __init__(self, height: int, width: int, floor: frozenset[Cell], targets: frozenset[Cell]):
        self.width = width
        self.size = height * width
        self.free = [False] * self.size
        for r, c in floor:
            self.free[r * width + c] = True
        # Flat-index steps in GridAction order, so a search's action index is the move it made.
        self.deltas = tuple(dr * width + dc for dr, dc in MOVES)
        self.rows = [i // width for i in range(self.size)]
        self.cols = [i % width for i in range(self.size)]
        self.target_mask = 0
        for r, c in targets:
            self.target_mask |= 1 << (r * width + c)
        self.push_distance = push_distances(height, width, floor, targets)
        self.dead = [d >= UNREACHABLE for d in self.push_distance]

    def frozen(self, cell: int, boxes: int) -> bool:
        """Whether the box just pushed to ``cell`` completes a 2x2 block of walls/boxes not all on goals."""
        free, targets, w = self.free, self.target_mask, self.width
        # A floor cell is never on the grid's edge (levels are closed), so its four 2x2 squares are all in the grid.
        for top_left in (cell, cell - 1, cell - w, cell - w - 1):
            stuck = True
            off_goal = False
            for q in (top_left, top_left + 1, top_left + w, top_left + w + 1):
                if (boxes >> q) & 1:
                    if not (targets >> q) & 1:
                        off_goal = True
                elif free[q]:
                    stuck = False
                    break
            if stuck and off_goal:
                return True
        return False


@lru_cache(maxsize=512)
def _room(height: int, width: int, floor: frozenset[Cell], targets: frozenset[Cell]) -> _Room:
    return _Room(height, width, floor, targets)


def _room_of(level: SokobanLevel) -> _Room:
    return _room(level.height, level.width, level.floor, level.targets)


def _as_level(level: SokobanLevel | str | Sequence[str]) -> SokobanLevel:
    return level if isinstance(level, SokobanLevel) else parse_level(level)


def _encode(level: SokobanLevel) -> tuple[int, int]:
    w = level.width
    mask = 0
    for r, c in level.boxes:
        mask |= 1 << (r * w + c)
    return level.player[0] * w + level.player[1], mask


def _path(parents: dict, state: int) -> tuple[GridAction, ...]:
    actions = []
    while True:
        parent = parents[state]
        if parent is None:
            break
        state, action = parent
        actions.append(_ACTIONS[action])
    actions.reverse()
    return tuple(actions)


def _bfs(room: _Room, player: int, boxes: int, max_states: int, max_moves: int) -> tuple[str, tuple | None, int]:
    shift = room.size.bit_length()
    low = (1 << shift) - 1
    free, dead, deltas, goal = room.free, room.dead, room.deltas, room.target_mask
    start = (boxes << shift) | player
    parents: dict[int, tuple[int, int] | None] = {start: None}
    if boxes == goal:
        return "solved", (), 1
    frontier = [start]
    depth = 0
    while frontier and depth < max_moves:
        depth += 1
        nxt = []
        for state in frontier:
            p = state & low
            mask = state >> shift
            for action, d in enumerate(deltas):
                q = p + d
                if not free[q]:
                    continue
                if (mask >> q) & 1:
                    b = q + d
                    if not free[b] or (mask >> b) & 1 or dead[b]:
                        continue
                    new_mask = mask ^ (1 << q) ^ (1 << b)
                    if room.frozen(b, new_mask):
                        continue
                else:
                    new_mask = mask
                child = (new_mask << shift) | q
                if child in parents:
                    continue
                parents[child] = (state, action)
                if new_mask == goal:
                    return "solved", _path(parents, child), len(parents)
                if len(parents) >= max_states:
                    return "budget", None, len(parents)
                nxt.append(child)
        frontier = nxt
    return "unsolvable", None, len(parents)


def _astar(room: _Room, player: int, boxes: int, max_states: int, max_moves: int) -> tuple[str, tuple | None, int]:
    shift = room.size.bit_length()
    low = (1 << shift) - 1
    free, dead, deltas, goal = room.free, room.dead, room.deltas, room.target_mask
    push_distance, rows, cols = room.push_distance, room.rows, room.cols

    def player_bound(p: int, mask: int) -> int:
        # Walks before the next push: the player must first stand next to some box that is off its goal.
        off = mask & ~goal
        if not off:
            return 0
        pr, pc = rows[p], cols[p]
        best = UNREACHABLE
        while off:
            bit = off & -off
            i = bit.bit_length() - 1
            off ^= bit
            dist = abs(rows[i] - pr) + abs(cols[i] - pc)
            if dist < best:
                best = dist
        return best - 1

    box_bound = 0
    m = boxes
    while m:
        bit = m & -m
        box_bound += push_distance[bit.bit_length() - 1]
        m ^= bit
    start = (boxes << shift) | player
    parents: dict[int, tuple[int, int] | None] = {start: None}
    best_g = {start: 0}
    # Entries: (f, -g, tie, state, box part of the bound); deeper first among equal f finds the goal sooner.
    heap = [(box_bound + player_bound(player, boxes), 0, 0, start, box_bound)]
    tie = 0
    while heap:
        f, neg_g, _, state, bound = heapq.heappop(heap)
        g = -neg_g
        if g > best_g[state]:
            continue
        mask = state >> shift
        if mask == goal:
            return "solved", _path(parents, state), len(parents)
        p = state & low
        g1 = g + 1
        for action, d in enumerate(deltas):
            q = p + d
            if not free[q]:
                continue
            child_bound = bound
            if (mask >> q) & 1:
                b = q + d
                if not free[b] or (mask >> b) & 1 or dead[b]:
                    continue
                new_mask = mask ^ (1 << q) ^ (1 << b)
                if room.frozen(b, new_mask):
                    continue
                child_bound += push_distance[b] - push_distance[q]
            else:
                new_mask = mask
            child = (new_mask << shift) | q
            known = best_g.get(child)
            if known is not None and known <= g1:
                continue
            f1 = g1 + child_bound + player_bound(q, new_mask)
            if f1 > max_moves:
                continue
            if known is None and len(parents) >= max_states:
                return "budget", None, len(parents)
            best_g[child] = g1
            parents[child] = (state, action)
            tie += 1
            heapq.heappush(heap, (f1, -g1, tie, child, child_bound))
    return "unsolvable", None, len(parents)


def solution_stats(
    level: SokobanLevel | str | Sequence[str],
    max_states: int = 200_000,
    method: str = "auto",
    max_moves: int | None = None,
) -> SolveResult:
    """Search for a fewest-moves solution and report how it went (see ``SolveResult``).

    Both methods are exact. ``method="auto"`` picks A*: it was faster than BFS on every family of levels we
    measured, from the paper's one-box levels (1.6x) to 10x10 three-box ones (3x), see
    ``benchmarks/speed/bench_solver.py``; BFS stays available as the plain reference search. ``max_moves`` restricts
    the search to solutions of at most that many moves, which makes it much cheaper when only short solutions
    matter (level generation).
    """
    if method not in METHODS:
        raise ValueError(f"unknown solver method {method!r}; choose one of {list(METHODS)}")
    if max_states < 1:
        raise ValueError(f"max_states must be at least 1, got {max_states}")
    level = _as_level(level)
    room = _room_of(level)
    player, boxes = _encode(level)
    limit = UNREACHABLE if max_moves is None else max_moves
    if method == "auto":
        method = "astar"
    if any(room.dead[r * level.width + c] for r, c in level.boxes):
        return SolveResult("unsolvable", None, None, 1, method)
    search = _bfs if method == "bfs" else _astar
    status, actions, states = search(room, player, boxes, max_states, limit)
    pushes = None if actions is None else _count_pushes(level, actions)
    return SolveResult(status, actions, pushes, states, method)


def _count_pushes(level: SokobanLevel, actions: Sequence[GridAction]) -> int:
    player, boxes, pushes = level.player, level.boxes, 0
    for action in actions:
        player, boxes, outcome = apply_move(level.floor, boxes, player, action)
        pushes += outcome == PUSHED
    return pushes


def solve_sokoban(
    level: SokobanLevel | str | Sequence[str],
    max_states: int = 200_000,
    method: str = "auto",
    max_moves: int | None = None,
) -> list[GridAction] | None:
    """A fewest-moves solution of ``level`` as a list of moves, or ``None`` when there is none within the budget.

    Always terminates: the search stops after ``max_states`` distinct states. ``[]`` means already solved.
    """
    result = solution_stats(level, max_states=max_states, method=method, max_moves=max_moves)
    return None if result.actions is None else list(result.actions)
