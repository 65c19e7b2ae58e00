"""Held-out tasks (erl_agents/evaluate.py): the paper's test maps of the trained distribution, replayed exactly by the
held-out envs even when training draws exclude them."""

import gymnasium as gym

import erl_envs  # noqa: F401  (registers the env ids)
from erl_agents.config import build_config
from erl_agents.envs import make_env
from erl_agents.evaluate import eval_tasks
from erl_envs.grid.frozen_lake import shortest_path_length
from erl_envs.paper_tasks import frozenlake_test_rows


def test_cpu_smol_evaluates_on_the_exact_paper_maps_that_its_training_never_draws():
    config = build_config(flags={"preset": "cpu-smol"})
    tasks = eval_tasks(config.env, config.env_kwargs, config.eval_set, config.eval_tasks)
    maps = {(row["seed"], row["size"]): row["map"] for row in frozenlake_test_rows()}
    assert len(tasks) == 37 and all(options["size"] <= 4 for _, options in tasks)
    held_out = make_env(config.env, {**config.env_kwargs, **config.eval_env_kwargs})
    training = make_env(config.env, config.env_kwargs)
    for seed, options in tasks:
        held_out.reset(seed=seed, options=options)
        training.reset(seed=seed, options=options)
        assert held_out.unwrapped.map_rows == maps[(seed, options["size"])]
        assert training.unwrapped.map_rows != maps[(seed, options["size"])]


def test_a_min_path_run_is_evaluated_on_the_test_maps_whose_goal_is_that_far():
    near_and_far = eval_tasks("ERL-FrozenLake-v0", {"size": [5, 6]}, "auto", 100)
    far = eval_tasks("ERL-FrozenLake-v0", {"size": [5, 6], "min_path": 4}, "auto", 100)
    assert len(near_and_far) == 25 and len(far) == 12
    env = gym.make("ERL-FrozenLake-v0")
    for seed, options in near_and_far:
        env.reset(seed=seed, options=options)
        assert ((seed, options) in far) == (shortest_path_length(env.unwrapped.map_rows) >= 4)
