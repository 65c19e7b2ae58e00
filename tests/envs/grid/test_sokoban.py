"""ERL-Sokoban-v0: the Gymnasium contract, level sources, dynamics, feedback, and property tests of the rules."""


import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import erl_envs  # noqa: F401  (registers the envs)
from erl_envs.grid import prompts as grid_prompts
from erl_envs.grid.actions import MOVES, format_action
from erl_envs.grid.text import GridRenderer, SOKOBAN_SYMBOLS
from erl_envs.grid.sokoban import SokobanTextEnv
from erl_envs.grid.sokoban_levels import LevelError, load_levels, parse_level
from erl_envs.grid.sokoban_solver import solve_sokoban

from paths import ROOT

GOLDEN = ROOT / "tests" / "golden"
CORRIDOR = ["#####", "#@$.#", "#####"]
# A room with a corner next to the box and two boxes to push.
ROOM = ["#######", "#     #", "# $ . #", "#  @  #", "# $ . #", "#     #", "#######"]


def grid_of(obs):
    """The grid lines of an observation (everything before the first message line)."""
    return "\n".join(line for line in obs.split("\n") if "\t" in line)


# --- The Gymnasium contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("render_mode", ["ansi", "rgb_array"])
def test_check_env(render_mode):
    # Through make, so the env has a spec and the checker also tries the other render modes.
    check_env(gym.make("ERL-Sokoban-v0", render_mode=render_mode).unwrapped, skip_render_check=False)


def test_make_and_make_vec():
    env = gym.make("ERL-Sokoban-v0")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and info["num_boxes"] == 1
    assert gym.make("erl_envs:ERL-Sokoban-v0").reset(seed=0)[0] == obs
    vec = gym.make_vec("ERL-Sokoban-v0", num_envs=2, vectorization_mode="sync")
    observations, infos = vec.reset(seed=[0, 1])
    assert observations[0] == obs
    observations, rewards, terminated, truncated, infos = vec.step(("```Up```", "Left"))
    assert len(observations) == 2 and rewards.shape == (2,)
    vec.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_golden_first_observations(seed):
    obs, _ = SokobanTextEnv().reset(seed=seed)
    assert obs == (GOLDEN / f"sokoban_seed{seed}.txt").read_text()


def _xsb_of(obs):
    """Read an observation's grid back into XSB rows (exterior cells come back as walls)."""
    kinds = GridRenderer(SOKOBAN_SYMBOLS["abstract"]).parse(grid_of(obs))
    chars = {"agent": "@", "agent_on_target": "+", "box": "$", "box_on_target": "*", "target": ".",
             "wall": "#", "floor": " "}
    return ["".join(chars[k] for k in row) for row in kinds]


def test_same_seed_same_level_and_task_id():
    first = SokobanTextEnv().reset(seed=42)
    second = SokobanTextEnv().reset(seed=42)
    assert first[0] == second[0] and first[1]["task_id"] == second[1]["task_id"]
    level = parse_level(_xsb_of(first[0]))
    assert first[1]["level_key"] == level.key
    assert first[1]["task_id"] == f"sokoban-{level.key[:16]}"
    assert first[1]["optimal_steps"] == len(solve_sokoban(level))


# Rooms the XSB text of which has exterior cells, ragged rows, thick walls, a closed-off pocket, goals under the
# player and a box: the env hashes a level by writing its boxes and player into its room's cached XSB text.
ODD_LEVELS = [
    ["  ####", "###  #", "# $. #", "#  @ #", "######"],
    ["######", "#+$  #", "# *  #", "######"],
    ["#######", "#@ $ .#", "#######", "#     #", "#######"],
    ["    ####", "#####  #", "#  .$@ #", "#####  #", "    ####"],
]


def test_task_id_and_level_key_are_the_levels_key():
    env = SokobanTextEnv(max_steps=20)
    for rows in ODD_LEVELS:
        level = parse_level(rows)
        obs, info = env.reset(options={"level": rows})
        assert info["level_key"] == level.key and info["task_id"] == f"sokoban-{level.key[:16]}", rows
        obs, *_, info = env.step("```Left```")
        assert info["level_key"] == level.key
    for env in (SokobanTextEnv(), SokobanTextEnv(size=(7, 9), num_boxes=2, interior_walls=0.2, max_steps=12)):
        for seed in range(100):
            info = env.reset(seed=seed)[1]
            assert info["level_key"] == env.level.key and info["task_id"] == f"sokoban-{env.level.key[:16]}"


# --- Level sources ------------------------------------------------------------------------------------------


def test_paper_test_set_solutions_win_within_eight_steps(paper_tasks):
    path = paper_tasks / "sokoban_test.parquet"
    env = SokobanTextEnv(levels=path)
    levels = load_levels(path)
    assert env.levels == levels
    for index, level in enumerate(levels):
        obs, info = env.reset(options={"level_index": index})
        assert info["level_index"] == index and info["level_key"] == level.key
        solution = solve_sokoban(level)
        assert info["optimal_steps"] == len(solution) <= 8
        for i, action in enumerate(solution):
            obs, reward, terminated, truncated, info = env.step(format_action(action))
            assert terminated == (i == len(solution) - 1) and not truncated
        assert reward == 1.0 and info["success"] and info["episode_feedback"] == "Solved the puzzle."
        assert info["boxes_on_target"] == 1


def test_seeds_pick_collection_levels_reproducibly(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("; first\n" + "\n".join(CORRIDOR) + "\n\n; second\n" + "\n".join(ROOM) + "\n")
    env = SokobanTextEnv(levels=str(path))
    picks = [env.reset(seed=seed)[1]["level_index"] for seed in range(20)]
    assert set(picks) == {0, 1}
    assert picks == [SokobanTextEnv(levels=path).reset(seed=seed)[1]["level_index"] for seed in range(20)]
    # A list of XSB strings works the same way as a file.
    same = SokobanTextEnv(levels=["\n".join(CORRIDOR), ROOM])
    assert [same.reset(seed=seed)[1]["level_index"] for seed in range(20)] == picks


def test_explicit_level_option():
    env = SokobanTextEnv(render_mode="ansi")
    obs, info = env.reset(options={"level": "\n".join(CORRIDOR)})
    assert grid_of(obs) == " E \t E \t E \t E \t E \t\n E \t A \t B \t C \t E \t\n E \t E \t E \t E \t E \t"
    assert env.render() == grid_of(obs)
    assert info["level_index"] is None and info["optimal_steps"] == 1 and info["num_boxes"] == 1


def test_generator_settings_from_constructor_and_options():
    env = SokobanTextEnv(size=(9, 10), num_boxes=2, interior_walls=0.1, min_moves=6, max_moves=20, max_steps=30)
    obs, info = env.reset(seed=0)
    assert env.level.height == 9 and env.level.width == 10 and info["num_boxes"] == 2
    assert 6 <= info["optimal_steps"] <= 20
    obs, info = env.reset(seed=1, options={"size": 7, "num_boxes": 1, "min_moves": 2, "max_moves": 3})
    assert env.level.height == 7 and info["num_boxes"] == 1 and 2 <= info["optimal_steps"] <= 3
    # The default band follows the episode's step budget.
    for seed in range(10):
        assert SokobanTextEnv().reset(seed=seed, options={"max_steps": 3})[1]["optimal_steps"] <= 3


@pytest.mark.parametrize(
    "kwargs, options, error, fragment",
    [
        ({}, {"colour": 1}, ValueError, "unknown reset option 'colour'"),
        ({}, {"level_index": 0}, ValueError, "needs an env built with levels="),
        ({}, {"level": CORRIDOR, "size": 6}, ValueError, "do not combine it with ['size']"),
        ({"levels": [CORRIDOR]}, {"num_boxes": 2}, ValueError, "generator options ['num_boxes'] do not apply"),
        ({"levels": [CORRIDOR]}, {"level_index": 1}, ValueError, "out of range"),
        ({"levels": [CORRIDOR]}, {"level_index": "0"}, TypeError, "level_index must be an int"),
        ({}, {"level": ["#####", "#@$x#", "#####"]}, LevelError, "reset option 'level': unknown character 'x'"),
        ({}, {"level": ["####", "#@*#", "####"]}, ValueError, "already solved"),
        ({}, {"size": 30}, ValueError, "bigger than this env's largest level"),
        ({}, {"min_moves": 9}, ValueError, "min_moves <= max_moves"),
    ],
)
def test_bad_reset_options(kwargs, options, error, fragment):
    env = SokobanTextEnv(**kwargs)
    with pytest.raises(error) as err:
        env.reset(seed=0, options=options)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"levels": []}, ValueError, "levels is empty"),
        ({"levels": [CORRIDOR, ["####", "#@*#", "####"]]}, ValueError, "level 1 is already solved"),
        ({"levels": [CORRIDOR, "#####\n#@$$#\n#####"]}, LevelError, "levels[1]: the level has 2 boxes but 0 goals"),
        ({"levels": 5}, TypeError, "levels must be a level file path"),
        ({"levels": "missing.parquet"}, FileNotFoundError, "missing.parquet"),
        ({"num_boxes": 0}, ValueError, "num_boxes"),
        ({"min_moves": 9}, ValueError, "min_moves <= max_moves"),
        ({"solver_max_states": 0}, ValueError, "solver_max_states"),
        ({"symbols": {"agent": "A"}}, ValueError, "must name exactly the tile kinds"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, fragment):
    with pytest.raises(error) as err:
        SokobanTextEnv(**kwargs)
    assert fragment in str(err.value)


def test_big_collection_levels_fit_the_observation_space():
    wide = ["#" * 30, "#@$." + " " * 25 + "#", "#" * 30]
    env = SokobanTextEnv(levels=[wide])
    obs, _ = env.reset(seed=0)
    assert env.max_grid_shape == (20, 30) and env.observation_space.contains(obs)
    with pytest.raises(ValueError, match="levels up to 20 per side"):  # refused before it is parsed
        SokobanTextEnv().reset(options={"level": wide})


# --- Dynamics and feedback ----------------------------------------------------------------------------------


def test_moves_pushes_blocks_and_feedback():
    env = SokobanTextEnv(levels=[ROOM])
    obs, info = env.reset(seed=0)
    assert info["boxes_on_target"] == 0 and info["num_boxes"] == 2 and not info["deadlock"]
    obs, reward, terminated, truncated, info = env.step("```Left```")
    assert info["feedback"] == "moved Left" and info["took_effect"] and reward == 0.0
    assert info["position"] == (3, 2)
    obs, reward, terminated, truncated, info = env.step("```Up```")  # box (2,2) -> (1,2): against the top wall
    assert info["feedback"] == "pushed Up" and env.state.boxes == {(1, 2), (4, 2)}
    obs, reward, terminated, truncated, info = env.step("```Up```")  # the box cannot go into the wall
    assert info["feedback"] == "tried Up, did not move (wall or blocked push)" and not info["took_effect"]
    assert "Your last action had no effect." in obs and info["no_effect_moves"] == 1
    assert not info["deadlock"]  # along the wall, but not in a corner
    env.step("```Left```")
    obs, reward, terminated, truncated, info = env.step("```Left```")  # walks into the outer wall
    assert info["position"] == (2, 1) and not info["took_effect"]


def test_corner_deadlock_is_flagged_but_does_not_end_the_episode():
    env = SokobanTextEnv(levels=[["######", "#    #", "# $@.#", "#    #", "######"]])
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("```Left```")
    assert not info["deadlock"]
    env.step("```Up```")
    env.step("```Left```")
    obs, reward, terminated, truncated, info = env.step("```Down```")  # box (2,1)->(3,1): a corner
    assert info["deadlock"] and not terminated and not truncated


def test_solving_gives_reward_once_and_terminates():
    env = SokobanTextEnv(levels=[ROOM], max_steps=40)
    env.reset(seed=0)
    solution = solve_sokoban(parse_level(ROOM))
    total = 0.0
    for action in solution:
        obs, reward, terminated, truncated, info = env.step(format_action(action))
        total += reward
    assert terminated and total == 1.0 and info["success"] and info["boxes_on_target"] == 2
    assert "Not solved yet" not in obs
    assert info["feedback"].endswith("and solved the puzzle")
    with pytest.raises(gym.error.ResetNeeded):
        env.step("```Up```")


def test_step_limit_and_no_valid_actions_feedback():
    env = SokobanTextEnv(levels=[ROOM], max_steps=3)
    env.reset(seed=0)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step("```Left```")
    assert truncated and not terminated and not info["success"]
    assert info["episode_feedback"] == "Hit the max step limit before solving the puzzle."
    env.reset(seed=0)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step("I am not sure")
    assert truncated and info["parse_errors"] == 3
    assert info["episode_feedback"].startswith("No valid actions")


def test_several_moves_per_turn():
    env = SokobanTextEnv(levels=[["#######", "#@ $ .#", "#######"]], max_actions_per_turn=3, action_format="lenient")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("```Right, Right, Right```")
    assert terminated and reward == 1.0 and info["steps_used"] == 3


def test_xsb_and_custom_symbols():
    env = SokobanTextEnv(symbols="xsb")
    obs, _ = env.reset(options={"level": CORRIDOR})
    assert grid_of(obs).split("\n")[1] == " # \t @ \t $ \t . \t # \t"
    env.step("```Right```")
    assert env.grid_text.split("\n")[1] == " # \t _ \t @ \t * \t # \t"
    custom = dict(SOKOBAN_SYMBOLS["abstract"].symbols, agent="P")
    obs, _ = SokobanTextEnv(symbols=custom).reset(options={"level": CORRIDOR})
    assert " P \t" in obs


def test_reveal_rules_and_instructions():
    env = SokobanTextEnv(reveal_rules=True)
    assert "pushes it one cell" in env.instructions and "- B: a box" in env.instructions
    assert SokobanTextEnv().instructions == grid_prompts.GRID_INSTRUCTIONS
    assert SokobanTextEnv().prompt_style == "grid"


def test_rgb_array_shows_the_state():
    env = SokobanTextEnv(render_mode="rgb_array")
    env.reset(options={"level": ROOM})
    before = env.render()
    assert before.dtype == np.uint8 and before.ndim == 3 and before.shape[2] == 3
    env.step("```Left```")
    assert not np.array_equal(before, env.render())
    env.close()


# --- Property tests of the rules ----------------------------------------------------------------------------

ACTION_TEXT = st.sampled_from(["Up", "Down", "Left", "Right", "```up```", "4", "jump", ""])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), boxes=st.integers(1, 3), walls=st.sampled_from([0.0, 0.15]),
       actions=st.lists(ACTION_TEXT, min_size=1, max_size=25))
def test_rules_hold_for_random_play(seed, boxes, walls, actions):
    env = SokobanTextEnv(size=7, num_boxes=boxes, interior_walls=walls, max_moves=30, max_steps=25)
    obs, info = env.reset(seed=seed)
    level = env.level
    renderer = env.renderer
    for text in actions:
        before = env.state
        obs, reward, terminated, truncated, info = env.step(text)
        after = env.state
        # The player only ever stands on floor; boxes are conserved and stay on floor.
        assert after.player in level.floor
        assert len(after.boxes) == len(level.boxes) and after.boxes <= level.floor
        moved = before.boxes - after.boxes
        if moved:
            # One box moved, one cell, in the direction the player moved, into a cell that was free.
            (src,), (dst,) = moved, after.boxes - before.boxes
            dr, dc = after.player[0] - before.player[0], after.player[1] - before.player[1]
            assert (dr, dc) in MOVES and src == after.player and dst == (src[0] + dr, src[1] + dc)
            assert dst in level.floor and dst not in before.boxes
        else:
            assert abs(after.player[0] - before.player[0]) + abs(after.player[1] - before.player[1]) <= 1
        assert info["took_effect"] == (after.player != before.player)
        # The text shows exactly this state.
        assert renderer.parse(grid_of(obs)) == after.tile_kinds()
        assert env.observation_space.contains(obs)
        assert reward == (1.0 if terminated and after.is_solved else 0.0)
        assert info["boxes_on_target"] == len(after.boxes & level.targets)
        if terminated or truncated:
            break


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_generated_levels_are_won_by_their_optimal_solution(seed):
    env = SokobanTextEnv()
    obs, info = env.reset(seed=seed)
    solution = solve_sokoban(env.level)
    assert len(solution) == info["optimal_steps"] <= 8
    for action in solution:
        obs, reward, terminated, truncated, info = env.step(format_action(action))
    assert terminated and info["success"]


# ----------------------------------------------------------------------------- the paper's data


def test_default_levels_follow_the_paper_train_mix_and_avoid_its_test_set():
    """12,800 default resets (200 steps x 64 tasks): no paper test layout, room sizes within 3 points of 11/38/51."""
    from erl_envs.grid.sokoban import sokoban_test_keys

    test_keys = sokoban_test_keys()
    assert len(test_keys) == 100
    env = SokobanTextEnv()
    env.reset(seed=0)
    sizes, overlap = [], 0
    for _ in range(12_800):
        info = env.reset()[1]
        overlap += info["level_key"] in test_keys
        sizes.append(env.level.height)
    assert overlap == 0
    share = {n: sizes.count(n) / len(sizes) for n in (6, 7, 8)}
    for n, paper in ((6, 0.11), (7, 0.38), (8, 0.51)):
        assert abs(share[n] - paper) < 0.03, share


def test_exclude_redraws_exactly_the_excluded_levels():
    plain = SokobanTextEnv(exclude=None)
    levels = [plain.reset(seed=s)[1]["level_key"] for s in range(30)]
    first = SokobanTextEnv(exclude=None)
    first.reset(seed=3)
    banned = first.level
    env = SokobanTextEnv(exclude=[banned])
    assert env.reset(seed=3)[1]["level_key"] != levels[3]
    assert [env.reset(seed=s)[1]["level_key"] for s in range(30) if s != 3] == [k for s, k in enumerate(levels)
                                                                                if s != 3 and k != banned.key]
    with pytest.raises(ValueError, match="exclude"):
        SokobanTextEnv(exclude="everything")


def test_packaged_test_sets_load_without_shared(tmp_path, monkeypatch):
    from erl_envs.paper_tasks import frozenlake_test_rows, sokoban_test_layouts

    monkeypatch.setenv("ERL_SHARED", str(tmp_path))
    layouts = sokoban_test_layouts()
    assert len(layouts) == 100 and sum(len(rows) == 8 for rows in layouts) == 68
    assert sum(len(rows) == 7 for rows in layouts) == 32
    env = SokobanTextEnv(levels=["\n".join(rows) for rows in layouts])
    assert all(env.reset(options={"level_index": i})[1]["optimal_steps"] <= 8 for i in range(100))
    rows = frozenlake_test_rows()
    assert len(rows) == 100 and {"seed", "size", "p", "map"} <= set(rows[0])


def test_packaged_test_sets_equal_the_shared_ones(paper_tasks):
    import json

    import pandas as pd

    from erl_envs.paper_tasks import frozenlake_test_rows, sokoban_test_layouts

    shared = pd.read_parquet(paper_tasks / "sokoban_test.parquet")
    assert sokoban_test_layouts() == [[str(row) for row in layout] for layout in shared.layout]
    maps = [json.loads(line) for line in (paper_tasks / "frozenlake_test_maps.jsonl").read_text().splitlines()]
    assert frozenlake_test_rows() == maps


def test_a_cornered_box_is_refused_however_the_level_arrives(tmp_path):
    """One check for files, sequences of levels and the reset option: a box stuck in a corner off its goal."""
    cornered = "######\n#$  .#\n# @  #\n######"
    path = tmp_path / "k.txt"
    path.write_text(cornered)
    for build in (lambda: SokobanTextEnv(levels=path), lambda: SokobanTextEnv(levels=[cornered]),
                  lambda: SokobanTextEnv().reset(options={"level": cornered})):
        with pytest.raises(ValueError, match="cannot be solved: the box at row 1, col 1"):
            build()


def test_a_level_file_is_loaded_once_per_version(tmp_path):
    from erl_envs.grid import sokoban

    path = tmp_path / "two.txt"
    path.write_text("#####\n#@$.#\n#####\n\n######\n#@ $.#\n######\n")
    before = sokoban._load_file_version.cache_info()
    first, second = SokobanTextEnv(levels=path), SokobanTextEnv(levels=str(path))
    after = sokoban._load_file_version.cache_info()
    assert after.misses == before.misses + 1 and after.hits == before.hits + 1
    assert first.levels == second.levels and len(first.levels) == 2
    path.write_text("#####\n#@$.#\n#####\n")  # a new version of the file is read again
    assert len(SokobanTextEnv(levels=path).levels) == 1


# --- the work a reset's options ask for is bounded ---------------------------------------------------------------


def _open_room(side):
    return ["#" * side] + ["#" + " " * (side - 2) + "#" for _ in range(side - 2)] + ["#" * side]


def _many_boxes(side=20):
    rows = [list(row) for row in _open_room(side)]
    rows[2][2] = "@"
    for r, c in [(5, 5), (7, 9), (10, 4), (12, 12), (15, 6)]:
        rows[r][c] = "$"
        rows[r + 1][c + 2] = "."
    return ["".join(row) for row in rows]


@pytest.fixture
def solver_states(monkeypatch):
    """Counts the solver states every search of the test spends (the work a reset does grows with them)."""
    from erl_envs.grid import sokoban, sokoban_generator, sokoban_solver

    spent = []
    real = sokoban_solver.solution_stats

    def counted(*args, **kwargs):
        result = real(*args, **kwargs)
        spent.append(result.states)
        return result

    monkeypatch.setattr(sokoban, "solution_stats", counted)
    monkeypatch.setattr(sokoban_generator, "solution_stats", counted)
    return spent


@pytest.mark.parametrize("huge", ["#" * 9_000_000, _open_room(3000), ["#", "#" * 100_000, "#"]],
                         ids=["9MB-text", "3000-rows", "long-row"])
def test_a_huge_level_at_reset_is_refused_before_it_is_parsed(monkeypatch, huge):
    from erl_envs.grid import sokoban

    env = gym.make("ERL-Sokoban-v0")

    def refuse(*_args, **_kwargs):
        raise AssertionError("the level was parsed before its size was checked")

    monkeypatch.setattr(sokoban, "parse_level", refuse)
    with pytest.raises(ValueError, match="levels up to 20 per side"):
        env.reset(seed=0, options={"level": huge})


def test_a_hard_level_at_reset_is_solved_within_the_option_budget(solver_states):
    env = SokobanTextEnv()
    _, info = env.reset(seed=0, options={"level": _many_boxes()})
    assert info["optimal_steps"] is None  # not settled within the budget: unknown, and the episode is played
    assert 0 < sum(solver_states) <= env.option_solver_states == 20_000
    assert env.step("```Down```")[4]["steps_used"] == 1
    # The env's own levels keep the full budget.
    assert SokobanTextEnv(levels=[_many_boxes()]).solver_max_states == 200_000


@pytest.mark.parametrize("options, fragment", [
    ({"size": 20, "num_boxes": 4, "min_moves": 50, "max_moves": 60}, "20,000 solver states ran out"),
    ({"num_boxes": 2, "max_moves": 1_000_000}, "max_moves at most 200"),
    ({"num_boxes": 2, "max_steps": 1_000_000}, "max_moves at most 200"),
    ({"num_boxes": 40, "size": 20}, "num_boxes at most 8"),
])
def test_generator_settings_at_reset_are_bounded(solver_states, options, fragment):
    env = SokobanTextEnv()
    with pytest.raises(ValueError, match=fragment):
        env.reset(seed=0, options=options)
    assert sum(solver_states) <= 20_000
    env.reset(seed=0)  # and the env plays on
    assert env.step("```Up```")[4]["steps_used"] == 1


def test_the_paper_setting_and_constructor_settings_are_not_limited():
    """The option budget applies to work a reset's options ask for, never to the env's own settings."""
    assert SokobanTextEnv(num_boxes=2, size=8).reset(seed=3)[1]["num_boxes"] == 2
    env = SokobanTextEnv()
    assert env.reset(seed=5, options={"size": 8, "max_steps": 500})[1]["steps_left"] == 500


@pytest.mark.parametrize("size", [101, (7, 101), [1e6, 1e6]])
def test_a_size_beyond_the_largest_level_is_refused_at_once(size):
    """``size: [1e6, 1e6]`` ended in a traceback allocating 7.28 TiB; sizes are at most ``LARGEST_LEVEL_SIDE`` (100)
    per side, for the env's settings and for a reset option, checked before anything is allocated."""
    import time

    started = time.monotonic()
    with pytest.raises(ValueError, match="is too large: levels may be at most 100 per side"):
        gym.make("ERL-Sokoban-v0", size=size)
    env = gym.make("ERL-Sokoban-v0")
    with pytest.raises(ValueError, match="levels may be at most 100 per side"):
        env.reset(seed=0, options={"size": size})
    assert time.monotonic() - started < 1.0
    assert env.reset(seed=0)[0]  # still usable
