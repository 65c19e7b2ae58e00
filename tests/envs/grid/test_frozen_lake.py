"""ERL-FrozenLake-v0: API conformance, seeding, the generator's guarantee, dynamics properties and error messages."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

import erl_envs  # noqa: F401  (registers the env ids)
from erl_envs.grid.actions import MOVES, parse_grid_actions
from erl_envs.grid.frozen_lake import (
    MAX_MAP_SIDE,
    FrozenLakeTextEnv,
    MapError,
    generate_frozen_lake,
    shortest_path_length,
    validate_map,
)
from erl_envs.grid.env import NO_EFFECT_NOTICE, NOT_SOLVED_LINE, PARSE_ERROR_NOTICE
from erl_envs.grid.text import FROZEN_LAKE_SYMBOLS, GridRenderer
from paths import ROOT

GOLDEN = ROOT / "tests" / "golden"

TINY = ["SFF", "FHF", "FFG"]


def grid_part(obs):
    return "\n".join(line for line in obs.split("\n") if "\t" in line)


# ----------------------------------------------------------------------------- Gymnasium API


def test_check_env_passes_with_render_checks():
    env = gym.make("ERL-FrozenLake-v0")
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


def test_make_by_id_and_by_module_path():
    for env_id in ("ERL-FrozenLake-v0", "erl_envs:ERL-FrozenLake-v0"):
        env = gym.make(env_id, size=3)
        obs, info = env.reset(seed=5)
        assert isinstance(env.unwrapped, FrozenLakeTextEnv) and info["size"] == 3
        assert env.observation_space.contains(obs)
        env.close()


def test_sync_vector_env_steps_with_text_actions():
    envs = gym.make_vec("ERL-FrozenLake-v0", num_envs=3, vectorization_mode="sync")
    obs, infos = envs.reset(seed=[0, 1, 2])
    assert [o for o in obs] == [(GOLDEN / f"frozen_lake_seed{i}.txt").read_text() for i in range(3)]
    obs, rewards, terminated, truncated, infos = envs.step(("```Up```", "```Left```", "Up"))
    assert rewards.shape == (3,) and infos["parse_errors"].tolist() == [0, 0, 1]
    assert all(isinstance(o, str) for o in obs)
    envs.close()


def test_async_vector_env_matches_sync():
    # Async with Gymnasium's default shared memory (BoundedText's slots, erl_envs.protocol) and through pipes.
    actions = [("Up", "Right"), ("```Left```", "2"), ("Down", "Down")]
    results = []
    for mode, kwargs in (("sync", {}), ("async", {}), ("async", {"shared_memory": False})):
        envs = gym.make_vec("ERL-FrozenLake-v0", num_envs=2, vectorization_mode=mode, vector_kwargs=kwargs)
        trace = [envs.reset(seed=[3, 4])[0]]
        for batch in actions:
            obs, rewards, terminated, truncated, _ = envs.step(batch)
            trace.append((obs, rewards.tolist(), terminated.tolist(), truncated.tolist()))
        envs.close()
        results.append(trace)
    assert results[0] == results[1] == results[2]


# ----------------------------------------------------------------------------- seeding and golden files


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_observation_matches_golden_file(seed):
    env = FrozenLakeTextEnv()
    obs, _ = env.reset(seed=seed)
    assert obs == (GOLDEN / f"frozen_lake_seed{seed}.txt").read_text()


def test_same_seed_gives_same_level_in_another_process():
    code = (
        "from erl_envs.grid.frozen_lake import FrozenLakeTextEnv\n"
        "env = FrozenLakeTextEnv()\n"
        "print(repr([env.reset(seed=s)[0] for s in (11, 12)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    ).stdout.strip()
    env = FrozenLakeTextEnv()
    assert out == repr([env.reset(seed=s)[0] for s in (11, 12)])


def test_unseeded_resets_continue_the_stream():
    a, b = FrozenLakeTextEnv(), FrozenLakeTextEnv()
    a.reset(seed=7)
    b.reset(seed=7)
    assert [a.reset()[1]["task_id"] for _ in range(5)] == [b.reset()[1]["task_id"] for _ in range(5)]


# ----------------------------------------------------------------------------- the generator


@pytest.mark.parametrize("generator, longest", [("paper", 6), ("feasible", 8)])
def test_generator_guarantees_a_short_path_for_every_size(generator, longest):
    rng = np.random.default_rng(0)
    for n in range(2, 10):
        for _ in range(150):
            rows = generate_frozen_lake(rng, size=n, generator=generator)
            assert len(rows) == n and all(len(r) == n for r in rows)
            validate_map(rows)
            length = shortest_path_length(rows)
            assert length is not None and 1 <= length <= longest


def test_generator_respects_other_budgets_and_extreme_p():
    rng = np.random.default_rng(1)
    for budget in (1, 2, 3):
        for p in (0.0, 0.3, 1.0):
            for n in (2, 5, 9):
                rows = generate_frozen_lake(rng, size=n, p=p, max_steps=budget, generator="feasible")
                assert shortest_path_length(rows) <= budget
    # With p = 0 every cell but start and goal is a hole.
    for generator in ("paper", "feasible"):
        rows = generate_frozen_lake(rng, size=6, p=0.0, generator=generator)
        assert "".join(rows).count("F") == 0 and shortest_path_length(rows) == 1
    # With p = 1 there are no holes.
    assert "H" not in "".join(generate_frozen_lake(rng, size=6, p=1.0))


def test_generator_carves_a_path_when_tries_run_out():
    rng = np.random.default_rng(2)
    for _ in range(50):
        rows = generate_frozen_lake(rng, size=9, p=0.0, max_steps=8, max_tries=1, generator="feasible")
        length = shortest_path_length(rows)
        assert length is not None and length <= 8


def test_generator_follows_the_paper_distribution():
    rng = np.random.default_rng(3)
    env = FrozenLakeTextEnv()
    env.reset(seed=3)
    sizes, ps = [], []
    for _ in range(2000):
        info = env.reset()[1]
        sizes.append(info["size"])
        ps.append(info["p"])
    counts = np.bincount(sizes, minlength=10)[2:]
    assert counts.min() > 150 and set(sizes) == set(range(2, 10))
    assert 0.6 <= min(ps) and max(ps) < 0.85 and abs(np.mean(ps) - 0.725) < 0.01
    # Start and goal are distinct and anywhere (not only corners).
    starts = {tuple(np.argwhere(np.array([list(r) for r in generate_frozen_lake(rng, size=4)]) == "S")[0])
              for _ in range(300)}
    assert len(starts) == 16


def test_reported_shortest_path_matches_an_independent_search():
    """The generator measures paths on its own bitmask of the map; check it against the map text's."""
    env = FrozenLakeTextEnv(size=(2, 12), max_steps=12)
    env.reset(seed=0)
    for _ in range(400):
        info = env.reset()[1]
        assert info["optimal_steps"] == shortest_path_length(env.map_rows)
    # Paths carved after every try failed, and maps too big for the table of start/goal pairs.
    for env in (FrozenLakeTextEnv(size=9, p=0.0, generator="feasible"),
                FrozenLakeTextEnv(size=40, p=0.7, max_steps=30, generator="feasible"), FrozenLakeTextEnv(size=40)):
        for seed in range(5):
            info = env.reset(seed=seed)[1]
            assert info["optimal_steps"] == shortest_path_length(env.map_rows)


def test_generator_is_deterministic_given_the_rng():
    a = [generate_frozen_lake(np.random.default_rng(9)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    # The env's seeded reset plays exactly the generator's map for that seed.
    env = FrozenLakeTextEnv()
    for seed in range(20):
        env.reset(seed=seed)
        assert env.map_rows == generate_frozen_lake(np.random.default_rng(seed))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"size": 1}, ValueError, "size"),
        ({"size": (5, 3)}, ValueError, "size"),
        ({"size": 2.5}, TypeError, "size"),
        ({"p": 1.5}, ValueError, "p"),
        ({"p": (0.9, 0.1)}, ValueError, "p"),
        ({"p": "high"}, TypeError, "p"),
        ({"max_steps": 0}, ValueError, "max_steps"),
        ({"max_tries": 0}, ValueError, "max_tries"),
        ({"generator": "bfs"}, ValueError, "generator"),
    ],
)
def test_generator_rejects_impossible_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        generate_frozen_lake(np.random.default_rng(0), **kwargs)
    with pytest.raises(TypeError, match="Generator"):
        generate_frozen_lake(np.random.RandomState(0))


def test_shortest_path_length_on_hand_made_maps():
    assert shortest_path_length(TINY) == 4
    assert shortest_path_length(["SG"]) == 1
    assert shortest_path_length(["SH", "HG"]) is None
    assert shortest_path_length(["SFFFF", "HHHHF", "GFFFF"]) == 10
    assert shortest_path_length(["SHF", "FHF", "FFG"]) == 4


def test_paper_test_rows_generate_valid_maps(paper_tasks):
    import pandas as pd

    rows = pd.read_parquet(paper_tasks / "frozenlake_test.parquet")
    assert rows["size"].between(2, 9).all() and rows["p"].between(0.6, 0.85).all()
    env = FrozenLakeTextEnv()
    for seed, size, p in rows[["seed", "size", "p"]].itertuples(index=False):
        _, info = env.reset(seed=int(seed), options={"size": int(size), "p": float(p)})
        assert info["size"] == size and info["p"] == p and 1 <= info["optimal_steps"] <= 8


# ----------------------------------------------------------------------------- dynamics


def reference_step(rows, pos, move):
    """An independent model of one move: (new position, moved, reward, terminated)."""
    n = len(rows)
    r, c = pos[0] + MOVES[move][0], pos[1] + MOVES[move][1]
    if not (0 <= r < n and 0 <= c < n):
        return pos, False, 0.0, False
    tile = rows[r][c]
    return (r, c), True, float(tile == "G"), tile in "HG"


REPLIES = st.sampled_from(["Up", "Down", "Left", "Right", "```down```", "<answer>left</answer>", "3", "4",
                           "", "jump", "```Up Down```", "I think we should go up"])


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), replies=st.lists(REPLIES, min_size=1, max_size=12),
       symbols=st.sampled_from(["abstract", "gym"]))
def test_dynamics_follow_the_reference_model(seed, replies, symbols):
    env = FrozenLakeTextEnv(symbols=symbols, action_format="lenient")
    obs, info = env.reset(seed=seed)
    rows, n = env.map_rows, info["size"]
    renderer = GridRenderer(FROZEN_LAKE_SYMBOLS[symbols])
    pos = info["position"]
    parse_errors = no_effect = 0
    for turn, reply in enumerate(replies, start=1):
        obs, reward, terminated, truncated, info = env.step(reply)
        moves = parse_grid_actions(reply)
        if moves is None:
            parse_errors += 1
            expected = (pos, False, 0.0, False)
        else:
            expected = reference_step(rows, pos, moves[0])
            no_effect += not expected[1]
        pos = expected[0]
        assert (info["position"], info["took_effect"], reward, terminated) == expected
        assert 0 <= pos[0] < n and 0 <= pos[1] < n
        assert info["steps_used"] == turn and info["steps_left"] == 8 - turn
        assert info["parse_errors"] == parse_errors and info["no_effect_moves"] == no_effect
        assert truncated == (turn == 8 and not terminated)
        assert env.observation_space.contains(obs)
        # The text parses back to the map with the agent where the model says it is.
        kinds = renderer.parse(grid_part(obs))
        r, c = pos
        expected_agent = {"H": "agent_in_hole", "G": "agent_on_goal"}.get(rows[r][c], "agent")
        assert kinds[r][c] == expected_agent
        assert all(kinds[i][j] == {"H": "hole", "G": "goal"}.get(rows[i][j], "frozen")
                   for i in range(n) for j in range(n) if (i, j) != pos)
        assert info["success"] == (reward == 1.0) == (terminated and rows[r][c] == "G")
        if terminated or truncated:
            assert info["episode_feedback"]
            break


def test_observation_text_on_a_hand_made_map():
    env = FrozenLakeTextEnv()
    obs, info = env.reset(options={"map": TINY})
    assert obs == " A \t D \t D \t\n D \t C \t D \t\n D \t D \t B \t\nSteps remaining: 8"
    assert info["position"] == (0, 0) and info["optimal_steps"] == 4 and info["p"] is None
    obs, *_ = env.step("```Right```")
    assert obs == " D \t A \t D \t\n D \t C \t D \t\n D \t D \t B \t\n" + NOT_SOLVED_LINE + "\nSteps remaining: 7"
    obs, *_ = env.step("```Up```")
    assert obs.split("\n")[3:] == [NO_EFFECT_NOTICE, NOT_SOLVED_LINE, "Steps remaining: 6"]
    obs, *_ = env.step("fly")
    assert obs.split("\n")[3] == PARSE_ERROR_NOTICE
    obs, reward, terminated, truncated, info = env.step("```Down```")
    assert grid_part(obs) == " D \t D \t D \t\n D \t X \t D \t\n D \t D \t B \t"
    assert (reward, terminated, info["feedback"], info["episode_feedback"]) == (
        0.0, True, "moved Down and fell into a hole", "Fell into a hole.")


def test_reaching_the_goal():
    env = FrozenLakeTextEnv(symbols="gym", render_mode="ansi")
    env.reset(options={"map": TINY})
    for move in ("```Right```", "```Right```", "```Down```"):
        env.step(move)
    obs, reward, terminated, truncated, info = env.step("```Down```")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["episode_feedback"] == "Reached the goal." and info["feedback"] == "moved Down and reached the goal"
    assert env.render() == " F \t F \t F \t\n F \t H \t F \t\n F \t F \t W \t"


def test_step_limit_and_no_valid_actions_feedback():
    env = FrozenLakeTextEnv()
    env.reset(options={"map": TINY, "max_steps": 2})
    env.step("```Up```")
    *_, truncated, info = env.step("```Left```")
    assert truncated and info["episode_feedback"] == "Hit the max step limit before reaching the goal."
    env.reset(options={"map": TINY, "max_steps": 2})
    env.step("what")
    *_, truncated, info = env.step("?")
    assert truncated and info["episode_feedback"].startswith("No valid actions")


def test_terminate_policy_and_multi_action_turns():
    env = FrozenLakeTextEnv(invalid_action="terminate")
    env.reset(options={"map": TINY})
    *_, terminated, truncated, info = env.step("hop")
    assert terminated and not truncated and not info["success"] and info["parse_errors"] == 1
    env = FrozenLakeTextEnv(max_actions_per_turn=4, action_format="lenient")
    env.reset(options={"map": TINY})
    obs, reward, terminated, _, info = env.step("```Right, Right, Down, Down```")
    assert reward == 1.0 and terminated and info["steps_used"] == 4
    env.reset(options={"map": TINY})
    _, _, terminated, _, info = env.step("```Down Right Right```")
    assert terminated and info["steps_used"] == 2 and info["position"] == (1, 1)


def test_non_text_actions_raise_type_error():
    env = FrozenLakeTextEnv()
    env.reset(seed=0)
    for action in (0, np.int64(2), ["Up"], b"Up"):
        with pytest.raises(TypeError, match="str"):
            env.step(action)


def test_task_id_is_stable_and_symbol_independent():
    a = FrozenLakeTextEnv().reset(options={"map": TINY})[1]["task_id"]
    b = FrozenLakeTextEnv(symbols="gym").reset(options={"map": TINY})[1]["task_id"]
    assert a == b == "frozenlake-" + __import__("hashlib").sha1("SFF\nFHF\nFFG".encode()).hexdigest()[:16]
    assert FrozenLakeTextEnv().reset(options={"map": ["SFF", "FFF", "FFG"]})[1]["task_id"] != a


def test_option_size_p_and_budget_shape_the_level():
    # The feasible generator fits the map to this episode's budget; the paper's ignores the budget.
    env = FrozenLakeTextEnv(generator="feasible")
    _, info = env.reset(seed=0, options={"size": 9, "p": 0.95, "max_steps": 3})
    assert info["size"] == 9 and info["p"] == 0.95 and info["steps_left"] == 3 and info["optimal_steps"] <= 3
    env = FrozenLakeTextEnv()
    _, info = env.reset(seed=0, options={"size": 9, "p": 0.95, "max_steps": 3})
    assert info["steps_left"] == 3 and info["optimal_steps"] <= 6
    _, info = env.reset(seed=0, options={"size": (2, 3)})
    assert info["size"] in (2, 3)
    env = FrozenLakeTextEnv(size=12, p=0.8)
    obs, info = env.reset(seed=0)
    assert info["size"] == 12 and env.observation_space.contains(obs)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "level, match",
    [
        (["SFF", "FF", "FFG"], r"square.*row 1 has 2"),
        (["SFX", "FFF", "FFG"], r"'X' at row 0, column 2"),
        (["FFF", "FFF", "FFG"], r"one start 'S', found 0"),
        (["SFS", "FFF", "FFG"], r"one start 'S', found 2 \(at \[\(0, 0\), \(0, 2\)\]\)"),
        (["SFF", "FFF", "FFF"], r"one goal 'G', found 0"),
        ([], "empty"),
        (["SG", 7], "row 1 is a int"),
        (["SFG"], r"square"),
    ],
)
def test_bad_maps_are_rejected_with_the_reason(level, match):
    env = FrozenLakeTextEnv()
    with pytest.raises(MapError, match=match):
        env.reset(options={"map": level})


def test_map_given_as_one_string_or_an_array():
    env = FrozenLakeTextEnv()
    _, info = env.reset(options={"map": "SFF\nFHF\nFFG\n"})
    assert info["optimal_steps"] == 4
    gym_desc = gym.make("FrozenLake-v1").unwrapped.desc
    assert validate_map(gym_desc) == ["SFFF", "FHFH", "FFFH", "HFFG"]
    assert validate_map(np.array(TINY)) == TINY


def test_bad_options_are_rejected():
    env = FrozenLakeTextEnv()
    with pytest.raises(ValueError, match=r"'sizes'.*allowed options are \['map', 'max_steps', 'p', 'size'\]"):
        env.reset(options={"sizes": 3})
    with pytest.raises(ValueError, match="do not combine"):
        env.reset(options={"map": TINY, "size": 3})
    with pytest.raises(ValueError, match="bigger than this env's largest map side"):
        env.reset(options={"size": MAX_MAP_SIDE + 1})
    with pytest.raises(ValueError, match="takes maps up to 16 per side"):
        env.reset(options={"map": ["S" + "F" * 16] + ["F" * 17] * 15 + ["F" * 16 + "G"]})
    with pytest.raises(ValueError, match="p"):
        env.reset(options={"p": -0.1})


@pytest.mark.parametrize(
    "kwargs, error",
    [({"size": 1}, ValueError), ({"size": "big"}, TypeError), ({"p": 2.0}, ValueError),
     ({"symbols": "sokoban"}, ValueError), ({"max_steps": -1}, ValueError)],
)
def test_bad_constructor_arguments(kwargs, error):
    with pytest.raises(error):
        FrozenLakeTextEnv(**kwargs)


def test_custom_symbols():
    symbols = {"agent": "@", "goal": "$", "hole": "O", "frozen": ".", "agent_in_hole": "x", "agent_on_goal": "*"}
    env = FrozenLakeTextEnv(symbols=symbols, reveal_rules=True)
    obs, _ = env.reset(options={"map": TINY})
    assert grid_part(obs) == " @ \t . \t . \t\n . \t O \t . \t\n . \t . \t $ \t"
    assert "- O: a hole" in env.instructions and env.symbols.symbols == symbols


# ----------------------------------------------------------------------------- rendering


def test_rgb_array_shows_the_state():
    env = FrozenLakeTextEnv(render_mode="rgb_array")
    env.reset(options={"map": TINY})
    first = env.render()
    assert first.shape == (3 * 64, 3 * 64, 3) and first.dtype == np.uint8
    env.step("```Right```")
    second = env.render()
    assert second.shape == first.shape and not np.array_equal(first, second)
    env.step("```Down```")
    assert not np.array_equal(second, env.render())
    env.close()


def test_human_mode_runs_headless():
    env = gym.make("ERL-FrozenLake-v0", render_mode="human")
    env.reset(seed=0)
    for move in ("Up", "Left", "Down", "Right"):
        _, _, terminated, truncated, _ = env.step(move)
        if terminated or truncated:
            env.reset()
    env.close()
    env.close()


def test_render_without_mode_warns_and_returns_none():
    env = FrozenLakeTextEnv()
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


# ----------------------------------------------------------------------------- the paper's generator


@pytest.mark.parametrize("fixture", ["frozenlake_test_maps.jsonl", "frozenlake_generator_check.jsonl"])
def test_paper_generator_reproduces_the_reference_maps(paper_tasks, fixture):
    """Every (seed, size, p) row gives exactly the map the reference code's generator made of it."""
    import json

    rows = [json.loads(line) for line in (paper_tasks / fixture).read_text().splitlines() if line.strip()]
    assert len(rows) in (100, 1000)
    env = FrozenLakeTextEnv()
    wrong = []
    for row in rows:
        env.reset(seed=row["seed"], options={"size": row["size"], "p": row["p"]})
        if env.map_rows != row["map"]:
            wrong.append(row["index"])
        assert env.map_rows == generate_frozen_lake(
            np.random.default_rng(np.random.SeedSequence(row["seed"])), size=row["size"], p=row["p"])
    assert wrong == [], f"{len(wrong)} of {len(rows)} maps differ from the reference's, e.g. rows {wrong[:5]}"


def test_paper_search_is_depth_first_not_shortest_path():
    """The reference accepts a board when its depth-limited DFS finds the goal, which is not "goal within 6 moves".

    In this 7x1 strip the goal is 6 moves away and the only path is straight, so it is accepted; at 7 moves it
    is not, although the feasible generator (budget 8) would take both.
    """
    from erl_envs.grid.frozen_lake_maps import _paper_search_accepts

    for length, accepted in ((6, True), (7, False)):
        n = length + 1
        rows = ["S" + "F" * (length - 1) + "G"] + ["H" * n] * (n - 1)
        flat = "".join(rows).encode()
        assert _paper_search_accepts(flat, n, 0, length) is accepted
    # A DFS marks a cell at the depth it first pops it at: here the right-first detour reaches the cell above the
    # goal after 5 moves, marks it, and never expands it from the 1-move route, so the 2-move goal is missed...
    # ...unless the goal is adjacent to a cell popped early enough. Check agreement with a literal re-statement.
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(2, 8))
        rows = generate_frozen_lake(rng, size=n, p=0.7, generator="feasible")
        flat = "".join(rows).encode()
        assert _paper_search_accepts(flat, n, flat.index(b"S"), flat.index(b"G")) == _literal_dfs(rows)


def test_paper_generator_accepts_exactly_what_the_literal_search_accepts():
    """The shortcuts before the search (distance, shortest path, a goal at most 2 moves away) change no verdict."""
    from erl_envs.grid.frozen_lake_maps import _bfs_length, _paper_search_accepts, _passable_bits

    rng = np.random.default_rng(11)
    for _ in range(3000):
        n = int(rng.integers(2, 10))
        cells = rng.choice(n * n, size=2, replace=False)
        flat = ["F" if u < 0.7 else "H" for u in rng.random(n * n)]
        flat[cells[0]], flat[cells[1]] = "S", "G"
        rows = ["".join(flat[i * n:(i + 1) * n]) for i in range(n)]
        start, goal, text = int(cells[0]), int(cells[1]), "".join(flat)
        shortest = _bfs_length(_passable_bits(text), n, n, start, goal, 6)
        fast = shortest is not None and (shortest <= 2 or _paper_search_accepts(text.encode(), n, start, goal))
        assert fast == _literal_dfs(rows), rows


def _literal_dfs(rows):
    n = len(rows)
    start = next((r, c) for r in range(n) for c in range(n) if rows[r][c] == "S")
    stack, seen = [(start[0], start[1], 0)], set()
    while stack:
        r, c, moves = stack.pop()
        if moves > 5 or (r, c) in seen:
            continue
        seen.add((r, c))
        for nr, nc in ((r + 1, c), (r, c + 1), (r - 1, c), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < n:
                if rows[nr][nc] == "G":
                    return True
                if rows[nr][nc] != "H":
                    stack.append((nr, nc, moves + 1))
    return False


def test_feasible_generator_stays_available():
    env = FrozenLakeTextEnv(generator="feasible")
    lengths = [env.reset(seed=s)[1]["optimal_steps"] for s in range(300)]
    assert max(lengths) > 6 and max(lengths) <= 8
    paper = FrozenLakeTextEnv()
    assert max(paper.reset(seed=s)[1]["optimal_steps"] for s in range(300)) <= 6
    with pytest.raises(ValueError, match="generator"):
        FrozenLakeTextEnv(generator="mine")


def _literal_paper_map(seed, n, p):
    """The reference generator as paper_tasks/README.md describes it, with numpy's own calls and the literal DFS."""
    from gymnasium.utils import seeding

    rng, _ = seeding.np_random(seed)
    while True:
        board = rng.choice(["F", "H"], (n, n), p=[p, 1 - p])
        while True:
            sr, sc, gr, gc = (int(v) for v in rng.integers(0, n, size=4))
            if (sr, sc) != (gr, gc):
                break
        board[sr][sc], board[gr][gc] = "S", "G"
        rows = ["".join(row) for row in board]
        if _literal_dfs(rows):
            return rows


def test_fast_paper_generator_matches_the_literal_one_on_fresh_triples():
    """The generator's shortcuts (cheap draws, distance and shortest-path tests before the search, the search on
    flags) change no map: fresh (seed, size, p) triples, none of them a fixture row, give the literal generator's map."""
    rng = np.random.default_rng(2026)
    env = FrozenLakeTextEnv()
    for _ in range(400):
        seed, n, p = int(rng.integers(100_000, 2**31 - 1)), int(rng.integers(2, 10)), float(rng.uniform(0.6, 0.85))
        env.reset(seed=seed, options={"size": n, "p": p})
        assert env.map_rows == _literal_paper_map(seed, n, p), (seed, n, p)


def test_abstract_symbols_are_the_papers_with_an_ascii_agent_on_the_goal():
    """A agent, B goal, C hole, D frozen, X agent in a hole as in the reference; on the goal it shows a check mark,
    here Y (observations stay ASCII)."""
    env = FrozenLakeTextEnv(render_mode="ansi")
    obs, _ = env.reset(options={"map": TINY})
    assert obs.startswith(" A \t D \t D \t\n D \t C \t D \t\n D \t D \t B \t")
    for move in ("```Right```", "```Right```", "```Down```", "```Down```"):
        env.step(move)
    assert env.render().endswith(" Y \t") and env.render().isascii()
    env.reset(options={"map": TINY})
    env.step("```Right```")
    env.step("```Down```")
    assert " X \t" in env.render()


# --- work per reset is bounded before it starts (a served env takes maps from anyone) ---------------------------


def _no_map_work(monkeypatch):
    """Fail the test if a map's cells are read (the checks and the path search cost grow with its size)."""
    from erl_envs.grid import frozen_lake_maps

    def refuse(*_):
        raise AssertionError("the map was read before its size was checked")

    monkeypatch.setattr(frozen_lake_maps, "_prepare_map", refuse)
    monkeypatch.setattr(frozen_lake_maps, "_prepared_map_cached", refuse)
    monkeypatch.setattr(frozen_lake_maps, "validate_map", refuse)


@pytest.mark.parametrize("huge", [
    "S" + "F" * 4_000_000 + "G",  # 4 MB on one line
    "\n".join(["S" + "F" * 1999] + ["F" * 2000] * 1998 + ["F" * 1999 + "G"]),  # a 2000 x 2000 map, 4 MB
    ["S" + "F" * 1999] + ["F" * 2000] * 1998 + ["F" * 1999 + "G"],
    ["SFG"] * 100_000,
    ["S" + "F" * 100_000 + "G"],
], ids=["one-line", "text-2000", "rows-2000", "many-rows", "one-long-row"])
def test_a_huge_map_is_refused_before_its_cells_are_read(monkeypatch, huge):
    env = gym.make("ERL-FrozenLake-v0")
    _no_map_work(monkeypatch)
    with pytest.raises(ValueError, match="maps up to 16 per side"):
        env.reset(seed=0, options={"map": huge})
    env.reset(seed=0)  # the env is still usable
    assert env.step("```Up```")[4]["steps_used"] == 1


def test_the_biggest_map_that_fits_is_still_played():
    side = 16
    rows = ["S" + "F" * (side - 1)] + ["F" * side] * (side - 2) + ["F" * (side - 1) + "G"]
    env = gym.make("ERL-FrozenLake-v0")
    for form in (rows, "\n".join(rows), "\n".join(rows) + "\n"):
        assert env.reset(seed=0, options={"map": form})[1]["size"] == side


def test_a_map_error_quotes_at_most_a_little_of_the_row():
    with pytest.raises(ValueError) as caught:
        validate_map(["SFG", "F" * 10_000, "FFF"])
    assert len(str(caught.value)) < 300


# ----------------------------------------------------------------------------- held-out hygiene


def test_exclude_paper_test_keeps_every_test_map_out_of_training_draws():
    """On sizes 2-4 about one draw in nine is a paper test map (13 of the 37 small test maps are 2x2 boards, of
    which few exist); with exclude="paper-test" none is, and draws that were not test maps stay the same."""
    from erl_envs.paper_tasks import frozenlake_test_maps

    test_maps = frozenlake_test_maps()
    assert len(test_maps) == 97  # 100 rows, three maps repeated
    plain = FrozenLakeTextEnv(size=(2, 4))
    clean = FrozenLakeTextEnv(size=(2, 4), exclude="paper-test")
    hits = 0
    for seed in range(1500):
        plain.reset(seed=seed)
        clean.reset(seed=seed)
        drawn, kept = "".join(plain.map_rows), "".join(clean.map_rows)
        assert kept not in test_maps
        if drawn in test_maps:
            hits += 1
        else:
            assert kept == drawn  # only the colliding draws are redrawn
    assert hits > 100


def test_excluded_maps_can_still_be_played_when_given():
    from erl_envs.paper_tasks import frozenlake_test_rows

    row = next(r for r in frozenlake_test_rows() if r["size"] == 2)
    env = FrozenLakeTextEnv(size=(2, 4), exclude="paper-test")
    env.reset(seed=1, options={"map": row["map"]})
    assert env.map_rows == row["map"]
    # The same test row through the generator's parameters is a draw, and draws are never test maps.
    env.reset(seed=row["seed"], options={"size": row["size"], "p": row["p"]})
    assert env.map_rows != row["map"]
    assert FrozenLakeTextEnv(size=(2, 4)).reset(seed=row["seed"], options={"size": 2, "p": row["p"]})[1]["task_id"] \
        == env.reset(seed=1, options={"map": row["map"]})[1]["task_id"]


def test_exclude_takes_explicit_maps_and_refuses_anything_else():
    env = FrozenLakeTextEnv(size=2, exclude=[["SF", "FG"], "SF\nHG"])
    assert env.exclude == frozenset({"SFFG", "SFHG"})
    for seed in range(200):
        env.reset(seed=seed)
        assert "".join(env.map_rows) not in env.exclude
    with pytest.raises(ValueError, match="exclude must be"):
        FrozenLakeTextEnv(exclude="test")
    with pytest.raises(TypeError, match="exclude must be"):
        FrozenLakeTextEnv(exclude=3)
    # Excluding every 2x2 map leaves nothing to draw: a clear error, not an endless loop.
    probe = FrozenLakeTextEnv(size=2)
    every_2x2 = set()
    for seed in range(2000):
        probe.reset(seed=seed)
        every_2x2.add("\n".join(probe.map_rows))
    with pytest.raises(ValueError, match="in a row were in exclude="):  # and no endless loop
        FrozenLakeTextEnv(size=2, exclude=sorted(every_2x2)).reset(seed=0)


def test_min_path_redraws_maps_whose_goal_is_too_near():
    env = FrozenLakeTextEnv(size=(5, 6), min_path=4)
    plain = FrozenLakeTextEnv(size=(5, 6))
    near = 0
    for seed in range(300):
        assert env.reset(seed=seed)[1]["optimal_steps"] >= 4
        near += plain.reset(seed=seed)[1]["optimal_steps"] < 4
    assert near > 100  # most paper-generator goals are one to three moves away
    for bad, error in ((-1, ValueError), (9, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="min_path"):
            FrozenLakeTextEnv(min_path=bad)


@pytest.mark.parametrize("size", [101, (2, 101), (2, 10**6), (10**6, 10**6)])
def test_a_size_beyond_the_largest_map_is_refused_at_once(size):
    """An unbounded ``size`` ended in a traceback allocating terabytes; every size is now at most 100 per side, for
    the env's settings and for a reset option, checked before anything is allocated."""
    import time

    started = time.monotonic()
    with pytest.raises(ValueError, match="is too large: maps may be at most 100 per side"):
        gym.make("ERL-FrozenLake-v0", size=size)
    env = gym.make("ERL-FrozenLake-v0")
    with pytest.raises(ValueError, match="maps may be at most 100 per side"):
        env.reset(seed=0, options={"size": size})
    assert time.monotonic() - started < 1.0
    assert gym.make("ERL-FrozenLake-v0", size=(2, 100)).observation_space.max_length > 0  # the largest is allowed
