"""GridPainter: images of both games' tile kinds, the window mode, and a clear error for unknown kinds."""

import builtins
import itertools

import numpy as np
import pytest
from gymnasium.error import DependencyNotInstalled

from erl_envs.grid.render import TILE_KINDS, GridPainter

FROZEN_KINDS = ["agent", "goal", "hole", "frozen", "agent_in_hole", "agent_on_goal"]
SOKOBAN_KINDS = ["agent", "agent_on_target", "box", "box_on_target", "target", "wall", "floor"]


def test_every_kind_of_both_games_is_drawn():
    assert set(FROZEN_KINDS) | set(SOKOBAN_KINDS) == TILE_KINDS


def test_rgb_array_shape_and_dtype():
    image = GridPainter(cell_size=16).rgb_array([["agent", "goal", "hole"], ["frozen", "frozen", "frozen"]])
    assert image.shape == (2 * 16, 3 * 16, 3) and image.dtype == np.uint8 and image.flags.c_contiguous


@pytest.mark.parametrize("kinds", [FROZEN_KINDS, SOKOBAN_KINDS[1:]])
def test_tile_kinds_of_a_game_look_different(kinds):
    painter = GridPainter(cell_size=20)
    tiles = {k: painter.rgb_array([[k]]) for k in kinds}
    for a, b in itertools.combinations(kinds, 2):
        assert not np.array_equal(tiles[a], tiles[b]), (a, b)


def test_the_picture_is_laid_out_row_major():
    painter = GridPainter(cell_size=10)
    image = painter.rgb_array([["hole", "frozen"], ["frozen", "frozen"]])
    hole, ice = painter.rgb_array([["hole"]]), painter.rgb_array([["frozen"]])
    assert np.array_equal(image[:10, :10], hole) and np.array_equal(image[:10, 10:], ice)
    assert np.array_equal(image[10:, :10], ice)


def test_agent_stands_on_ice_in_frozen_lake_and_on_floor_in_sokoban():
    painter = GridPainter(cell_size=12)
    lake = painter.rgb_array([["agent", "frozen"]])[:, :12]
    room = painter.rgb_array([["agent", "floor"]])[:, :12]
    assert not np.array_equal(lake, room)
    # The corner pixel shows the background the agent stands on.
    assert np.array_equal(lake[6, 1], painter.rgb_array([["frozen"]])[6, 1])
    assert np.array_equal(room[6, 1], painter.rgb_array([["floor"]])[6, 1])


def test_unknown_kinds_and_bad_sizes_are_named():
    painter = GridPainter()
    with pytest.raises(ValueError, match="'lava'"):
        painter.rgb_array([["agent", "lava"]])
    with pytest.raises(ValueError, match="empty"):
        painter.rgb_array([])
    for bad in (4, 10.5, "64", True):
        with pytest.raises(ValueError, match="cell_size"):
            GridPainter(cell_size=bad)


def test_window_mode_runs_headless_and_follows_the_grid_size():
    painter = GridPainter(cell_size=8)
    painter.show([["agent", "goal"]], fps=0, caption="test")
    painter.show([["wall", "wall", "wall"], ["wall", "agent", "wall"]], fps=0)
    assert painter._window_size == (24, 16)
    painter.close()
    painter.close()


def test_missing_pygame_names_the_install_command(monkeypatch):
    real_import = builtins.__import__

    def no_pygame(name, *args, **kwargs):
        if name == "pygame" or name.startswith("pygame."):
            raise ImportError("No module named 'pygame'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pygame)
    with pytest.raises(DependencyNotInstalled, match="pip install pygame"):
        GridPainter().rgb_array([["agent"]])
