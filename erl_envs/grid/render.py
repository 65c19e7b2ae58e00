"""Pygame pictures of the grid games, drawn from tile-kind names so the text symbols never matter to the GUI.

One painter serves FrozenLake and Sokoban: each tile kind has a small drawing routine, rendered once per cell size
and then blitted. pygame is imported only when a painter first draws, so ``import erl_envs`` stays light.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from gymnasium.error import DependencyNotInstalled

__all__ = ["GridPainter", "TILE_KINDS"]

_ICE = (206, 232, 245)
_ICE_EDGE = (170, 205, 225)
_HOLE = (22, 32, 62)
_FLAG = (240, 185, 20)
_POLE = (90, 70, 50)
_AGENT = (215, 45, 45)
_AGENT_DONE = (40, 160, 70)
_OUTLINE = (30, 30, 30)
_FLOOR = (228, 218, 196)
_FLOOR_EDGE = (200, 188, 165)
_WALL = (118, 62, 42)
_MORTAR = (170, 120, 95)
_TARGET = (205, 40, 120)
_BOX = (210, 140, 50)
_BOX_EDGE = (120, 75, 20)
_BOX_DONE = (60, 170, 90)
_BOX_DONE_EDGE = (25, 95, 45)
_PAD = (0, 0, 0)


def _import_pygame():
    try:
        import pygame
    except ImportError as e:
        raise DependencyNotInstalled(
            'pygame is not installed; install it with `pip install pygame` (or `pip install "gymnasium[toy-text]"`)'
        ) from e
    return pygame


# --- Drawing routines: each paints one tile of kind K on a square surface of side s. ---


def _ice(pg, surf, s):
    surf.fill(_ICE)
    pg.draw.rect(surf, _ICE_EDGE, (0, 0, s, s), max(1, s // 32))


def _hole(pg, surf, s):
    _ice(pg, surf, s)
    pg.draw.ellipse(surf, _HOLE, (s // 10, s // 5, s - 2 * (s // 10), s - 2 * (s // 5)))


def _goal(pg, surf, s):
    _ice(pg, surf, s)
    x = s * 3 // 10
    pg.draw.line(surf, _POLE, (x, s // 6), (x, s * 5 // 6), max(2, s // 16))
    pg.draw.polygon(surf, _FLAG, [(x, s // 6), (s * 8 // 10, s * 3 // 10), (x, s * 9 // 20)])


def _agent_disc(pg, surf, s, colour=_AGENT, scale=0.3):
    r = max(2, int(s * scale))
    pg.draw.circle(surf, colour, (s // 2, s // 2), r)
    pg.draw.circle(surf, _OUTLINE, (s // 2, s // 2), r, max(1, s // 32))


def _agent(pg, surf, s):
    _ice(pg, surf, s)
    _agent_disc(pg, surf, s)


def _agent_in_hole(pg, surf, s):
    _hole(pg, surf, s)
    _agent_disc(pg, surf, s, scale=0.22)
    a, b, w = s * 3 // 10, s * 7 // 10, max(2, s // 16)
    pg.draw.line(surf, _OUTLINE, (a, a), (b, b), w)
    pg.draw.line(surf, _OUTLINE, (a, b), (b, a), w)


def _agent_on_goal(pg, surf, s):
    _goal(pg, surf, s)
    _agent_disc(pg, surf, s, colour=_AGENT_DONE, scale=0.25)


def _floor(pg, surf, s):
    surf.fill(_FLOOR)
    pg.draw.rect(surf, _FLOOR_EDGE, (0, 0, s, s), max(1, s // 32))


def _wall(pg, surf, s):
    surf.fill(_WALL)
    w = max(1, s // 24)
    for y in (0, s // 2):
        pg.draw.line(surf, _MORTAR, (0, y), (s, y), w)
    pg.draw.line(surf, _MORTAR, (s // 2, 0), (s // 2, s // 2), w)
    pg.draw.line(surf, _MORTAR, (s // 4, s // 2), (s // 4, s), w)
    pg.draw.line(surf, _MORTAR, (s * 3 // 4, s // 2), (s * 3 // 4, s), w)


def _target_mark(pg, surf, s):
    c, r = s // 2, s // 4
    pg.draw.polygon(surf, _TARGET, [(c, c - r), (c + r, c), (c, c + r), (c - r, c)], max(2, s // 16))


def _target(pg, surf, s):
    _floor(pg, surf, s)
    _target_mark(pg, surf, s)


def _box_square(pg, surf, s, fill, edge):
    m = s // 8
    pg.draw.rect(surf, fill, (m, m, s - 2 * m, s - 2 * m))
    pg.draw.rect(surf, edge, (m, m, s - 2 * m, s - 2 * m), max(2, s // 16))
    pg.draw.line(surf, edge, (m, m), (s - m - 1, s - m - 1), max(1, s // 24))
    pg.draw.line(surf, edge, (m, s - m - 1), (s - m - 1, m), max(1, s // 24))


def _box(pg, surf, s):
    _floor(pg, surf, s)
    _box_square(pg, surf, s, _BOX, _BOX_EDGE)


def _box_on_target(pg, surf, s):
    _floor(pg, surf, s)
    _box_square(pg, surf, s, _BOX_DONE, _BOX_DONE_EDGE)


def _sokoban_agent(pg, surf, s):
    _floor(pg, surf, s)
    _agent_disc(pg, surf, s)


def _agent_on_target(pg, surf, s):
    _target(pg, surf, s)
    _agent_disc(pg, surf, s, scale=0.15)


# Both games have an "agent" kind: the same red disc, drawn on ice in FrozenLake and on floor in Sokoban (a grid
# with any Sokoban-only kind is a Sokoban grid). "agent@floor" is that internal variant.
_SOKOBAN_ONLY = frozenset({"floor", "wall", "target", "box", "box_on_target", "agent_on_target"})

_DRAWERS: dict[str, Callable] = {
    "frozen": _ice,
    "hole": _hole,
    "goal": _goal,
    "agent": _agent,
    "agent_in_hole": _agent_in_hole,
    "agent_on_goal": _agent_on_goal,
    "floor": _floor,
    "wall": _wall,
    "target": _target,
    "box": _box,
    "box_on_target": _box_on_target,
    "agent_on_target": _agent_on_target,
    "agent@floor": _sokoban_agent,
}

TILE_KINDS = frozenset(_DRAWERS) - {"agent@floor"}


class GridPainter:
    """Draws a grid of tile kinds as an RGB image or in a window (the ``rgb_array`` and ``human`` render modes)."""

    def __init__(self, cell_size: int = 64):
        if isinstance(cell_size, bool) or not isinstance(cell_size, (int, np.integer)) or cell_size < 8:
            raise ValueError(f"cell_size must be an int >= 8 (pixels), got {cell_size!r}")
        self.cell_size = int(cell_size)
        self._pg = None
        self._tiles: dict[str, object] = {}
        self._window = None
        self._window_size: tuple[int, int] | None = None
        self._clock = None

    def rgb_array(self, kinds: Sequence[Sequence[str]]) -> np.ndarray:
        """The picture of the grid as an ``(rows * cell, cols * cell, 3)`` uint8 array."""
        surface = self._draw(kinds)
        pg = self._pg
        # surfarray is (width, height, 3); images are (height, width, 3).
        return np.ascontiguousarray(np.transpose(pg.surfarray.array3d(surface), (1, 0, 2)), dtype=np.uint8)

    def show(self, kinds: Sequence[Sequence[str]], fps: float, caption: str | None = None) -> None:
        """Draw the grid in a window and wait for the next frame; the window follows the grid's size."""
        surface = self._draw(kinds)
        pg = self._pg
        size = surface.get_size()
        if self._window is None:
            pg.display.init()
            self._clock = pg.time.Clock()
        if self._window is None or self._window_size != size:
            self._window = pg.display.set_mode(size)
            self._window_size = size
        if caption:
            pg.display.set_caption(caption)
        pg.event.pump()
        self._window.blit(surface, (0, 0))
        pg.display.flip()
        if fps and fps > 0:
            self._clock.tick(fps)

    def close(self) -> None:
        if self._window is not None:
            self._pg.display.quit()
            self._window = None
            self._window_size = None

    def _draw(self, kinds: Sequence[Sequence[str]]):
        if self._pg is None:
            self._pg = _import_pygame()
        pg = self._pg
        rows = len(kinds)
        cols = max((len(r) for r in kinds), default=0)
        if rows == 0 or cols == 0:
            raise ValueError("cannot draw an empty grid")
        s = self.cell_size
        surface = pg.Surface((cols * s, rows * s))
        surface.fill(_PAD)
        on_floor = any(kind in _SOKOBAN_ONLY for row in kinds for kind in row)
        for r, row in enumerate(kinds):
            for c, kind in enumerate(row):
                if kind == "agent" and on_floor:
                    kind = "agent@floor"
                surface.blit(self._tile(kind), (c * s, r * s))
        return surface

    def _tile(self, kind: str):
        tile = self._tiles.get(kind)
        if tile is None:
            draw = _DRAWERS.get(kind)
            if draw is None:
                raise ValueError(f"no drawing for tile kind {kind!r}; known kinds: {sorted(TILE_KINDS)}")
            s = self.cell_size
            tile = self._pg.Surface((s, s))
            draw(self._pg, tile, s)
            self._tiles[kind] = tile
        return tile
