"""The Sokoban level generator: solvable, optimal, within its band, the paper's distribution, clear failures."""

import itertools
from collections import Counter

import numpy as np
import pytest

from erl_envs.grid import sokoban_generator
from erl_envs.grid.sokoban_generator import (
    GenerationError,
    check_generation_settings,
    generate_level,
    sample_level,
)
from erl_envs.grid.sokoban_levels import SokobanLevel, load_levels, replay
from erl_envs.grid.sokoban_solver import solution_stats


def _open_room(n):
    return frozenset((r, c) for r in range(n) for c in range(n) if r in (0, n - 1) or c in (0, n - 1))


def test_paper_setting_guarantees_over_many_seeds():
    sizes = Counter()
    lengths = Counter()
    for seed in range(600):
        level, solution = generate_level(np.random.default_rng(seed))
        n = level.height
        sizes[n] += 1
        lengths[len(solution)] += 1
        assert level.width == n and n in (6, 7, 8)
        assert level.walls == _open_room(n)  # open interior
        assert len(level.boxes) == len(level.targets) == 1
        assert len({level.player, *level.boxes, *level.targets}) == 3  # distinct cells
        assert 1 <= len(solution) <= 8
        assert replay(level, solution).is_solved
        if seed % 10 == 0:  # the returned solution is optimal
            assert solution_stats(level, method="bfs").moves == len(solution)
    # The paper's train mix: 68, 228 and 304 expected of 600.
    assert 40 <= sizes[6] <= 100 and 180 <= sizes[7] <= 280 and 250 <= sizes[8] <= 360, sizes
    assert set(lengths) == set(range(1, 9))


def test_same_seed_same_level():
    a = generate_level(np.random.default_rng(123))
    b = generate_level(np.random.default_rng(123))
    c = generate_level(123)
    assert a == b == c
    assert a[0].key == b[0].key


def test_paper_train_set_is_exactly_what_the_generator_accepts(paper_tasks):
    """The paper's 1,136 6x6 train layouts are *all* the layouts our acceptance rule allows on a 6x6 board."""
    train = load_levels(paper_tasks / "sokoban_train.parquet")
    six = {lv for lv in train if lv.height == 6}
    assert len(six) == 1136
    walls = _open_room(6)
    cells = [(r, c) for r in range(1, 5) for c in range(1, 5)]
    accepted = set()
    for player, box, goal in itertools.permutations(cells, 3):
        level = SokobanLevel(6, 6, walls, frozenset([box]), frozenset([goal]), player)
        if solution_stats(level, max_moves=8).solved:
            accepted.add(level)
    assert accepted == six


@pytest.mark.parametrize(
    "settings",
    [
        dict(size=(10, 10), num_boxes=3, interior_walls=0.1, min_moves=10, max_moves=40),
        dict(size=7, num_boxes=2, min_moves=5, max_moves=15),
        dict(size=(6, 9), num_boxes=1, interior_walls=0.2, min_moves=4, max_moves=10, placement="reverse"),
        dict(size=8, num_boxes=1, min_moves=6, max_moves=8, min_pushes=3, max_pushes=4),
        dict(size=7, num_boxes=1, interior_walls=0.6, min_moves=1, max_moves=8),
    ],
)
def test_harder_settings_stay_in_their_band(settings):
    rng = np.random.default_rng(5)
    h, w = (settings["size"],) * 2 if isinstance(settings["size"], int) else settings["size"]
    interior = (h - 2) * (w - 2)
    for _ in range(12):
        level, solution = generate_level(rng, **settings)
        assert (level.height, level.width) == (h, w)
        assert len(level.boxes) == settings["num_boxes"]
        assert settings["min_moves"] <= len(solution) <= settings["max_moves"]
        assert replay(level, solution).is_solved
        result = solution_stats(level, max_states=2_000_000)
        assert result.moves == len(solution)
        if "min_pushes" in settings:
            assert settings["min_pushes"] <= result.pushes <= settings["max_pushes"]
        # Interior walls: the requested fraction, and the floor stays one connected region.
        interior_walls = len(level.walls) - 2 * (h + w) + 4
        assert interior_walls == round(settings.get("interior_walls", 0.0) * interior)
        assert len(level.floor) == interior - interior_walls


def test_impossible_band_raises_after_max_tries():
    # A 4x4 room has a 2x2 interior: no one-box level there needs 8 moves.
    expected = r"8\.\.8 optimal moves in 50 tries.*rejected: too long or unsolvable: 50"
    with pytest.raises(GenerationError, match=expected):
        generate_level(np.random.default_rng(0), size=4, min_moves=8, max_moves=8, max_tries=50)


@pytest.mark.parametrize(
    "settings, error, fragment",
    [
        (dict(size=2), ValueError, "too small"),
        (dict(size=(5, 6, 7)), ValueError, r"\(height, width\) pair"),
        (dict(size="big"), TypeError, "size must be"),
        (dict(num_boxes=0), ValueError, "num_boxes"),
        (dict(interior_walls=1.0), ValueError, "interior_walls"),
        (dict(min_moves=5, max_moves=4), ValueError, "min_moves <= max_moves"),
        (dict(min_moves=0), ValueError, "min_moves"),
        (dict(max_moves=8.5), TypeError, "max_moves must be an int"),
        (dict(min_pushes=3, max_pushes=2), ValueError, "min_pushes"),
        (dict(num_boxes=2, max_pushes=1), ValueError, "each box needs a push"),
        (dict(placement="spiral"), ValueError, "unknown placement"),
        (dict(size=4, num_boxes=2, placement="uniform"), ValueError, "4 floor cells; uniform placement .* at least 5"),
    ],
)
def test_bad_settings_fail_at_once(settings, error, fragment):
    with pytest.raises(error, match=fragment):
        check_generation_settings(**settings)
    with pytest.raises(error, match=fragment):
        generate_level(np.random.default_rng(0), **settings)


def test_bad_rng_and_tries():
    with pytest.raises(TypeError, match="numpy Generator"):
        generate_level(np.random.RandomState(0))
    with pytest.raises(ValueError, match="max_tries"):
        generate_level(np.random.default_rng(0), max_tries=0)


# --- The paper setting's fast path: a table of fewest moves in place of the search ---------------------------


def _interior_cells(height, width):
    return [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]


@pytest.mark.parametrize("height, width, sample", [(6, 6, None), (5, 7, None), (4, 4, None), (8, 8, 1500)])
def test_open_room_table_gives_the_solvers_fewest_moves(height, width, sample):
    """Every start (or a random sample of them) of a one-box open room: table lookup == exact search."""
    table = sokoban_generator._open_room_moves(height - 2, width - 2)
    cells = _interior_cells(height, width)
    walls = frozenset((r, c) for r in range(height) for c in range(width)) - frozenset(cells)
    starts = list(itertools.permutations(range(len(cells)), 3))
    if sample is not None:
        rng = np.random.default_rng(0)
        starts = [starts[i] for i in rng.choice(len(starts), size=sample, replace=False)]
    for player, box, goal in starts:
        level = SokobanLevel(height, width, walls, frozenset([cells[box]]), frozenset([cells[goal]]), cells[player])
        assert table.moves(player, box, goal) == solution_stats(level).moves, level


TABLE_SETTINGS = [
    ({}, 2000),  # the paper's
    (dict(size=(5, 9), min_moves=3, max_moves=12), 200),
    (dict(size=10, min_moves=5, max_moves=20), 100),
    (dict(size=7, interior_walls=0.01, max_moves=6), 200),  # rounds to no interior wall: still an open room
]


@pytest.mark.parametrize("settings, seeds", TABLE_SETTINGS)
def test_table_gives_exactly_the_levels_the_search_gives(monkeypatch, settings, seeds):
    """Same seed, same level, same solution and the same draws, with and without the table."""

    def run():
        out = []
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            level, solution = generate_level(rng, **settings)
            out.append((level, solution, rng.random()))
        return out

    with_table = run()
    monkeypatch.setattr(sokoban_generator, "_TABLE_MAX_CELLS", 0)  # every candidate searched, as before the table
    assert run() == with_table


def test_sample_level_is_generate_level_without_the_solution():
    for settings in ({}, dict(size=7, num_boxes=2, min_moves=3, max_moves=10), dict(size=6, interior_walls=0.2)):
        for seed in range(100):
            level, moves = sample_level(np.random.default_rng(seed), **settings)
            expected, solution = generate_level(np.random.default_rng(seed), **settings)
            assert level == expected and moves == len(solution)


def test_a_solver_budget_too_small_for_the_room_still_rejects_candidates():
    # A 6x6 room has 16 * 15 positions; with a budget below that the table must not answer for the search.
    with pytest.raises(GenerationError, match="over budget"):
        generate_level(np.random.default_rng(0), size=6, max_states=2, max_tries=30)


def test_room_size_follows_the_paper_train_mix():
    """One U[0, 1) draw picks the side with the train set's weights; the rest of the level follows from the rng."""
    weights = sokoban_generator.PAPER_SIZE_WEIGHTS
    assert sum(weights) == pytest.approx(1.0) and weights == (0.1136, 0.3795, 0.5069)
    for seed in range(300):
        u = np.random.default_rng(seed).random()
        expected = 6 if u < 0.1136 else 7 if u < 0.1136 + 0.3795 else 8
        assert generate_level(np.random.default_rng(seed))[0].height == expected


def test_open_room_table_agrees_with_the_solver_on_the_paper_layouts():
    from erl_envs.paper_tasks import sokoban_test_layouts
    from erl_envs.grid.sokoban_generator import open_room_moves
    from erl_envs.grid.sokoban_levels import parse_level

    for rows in sokoban_test_layouts():
        level = parse_level(rows)
        assert open_room_moves(level) == solution_stats(level, method="bfs").moves
    # Not an open one-box room: the caller must search.
    assert open_room_moves(parse_level(["#######", "#@$ $.#", "#  . ##", "#######"])) == -1


def test_uniform_sizes_stay_available_as_before():
    """size="uniform" is the earlier default: each seed's room size is rng.choice(PAPER_SIZES)."""
    for seed in range(200):
        expected = int(np.random.default_rng(seed).choice(sokoban_generator.PAPER_SIZES))
        assert generate_level(np.random.default_rng(seed), size="uniform")[0].height == expected
    from erl_envs.grid.sokoban import SokobanTextEnv

    env_level = SokobanTextEnv(size="uniform", exclude=None).reset(seed=5)[1]
    assert env_level["optimal_steps"] <= 8
