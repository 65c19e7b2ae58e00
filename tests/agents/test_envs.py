"""The envs a run plays: the training task list an epoch goes through, and the epoch order."""

import gymnasium as gym
import pytest

import erl_envs  # noqa: F401  (registers the envs)
from erl_agents.envs import epoch_batch, epoch_steps, training_tasks
from erl_envs.paper_tasks import frozenlake_train_rows, shared_paper_file


def test_training_task_lists_of_each_env():
    # FrozenLake with the paper's generator, sizes and p: the reference's own 10,000 rows.
    lake = training_tasks(gym.make("ERL-FrozenLake-v0"), 10_000)
    first = frozenlake_train_rows()[0]
    assert len(lake) == 10_000 and lake[0] == (first["seed"], {"size": first["size"], "p": first["p"]})
    # Other sizes, or another generator: a task is a reset seed, the same instance every epoch.
    assert training_tasks(gym.make("ERL-FrozenLake-v0", size=(2, 4)), 5) == [(i, None) for i in range(5)]
    assert training_tasks(gym.make("ERL-FrozenLake-v0", generator="feasible"), 3) == [(0, None), (1, None), (2, None)]
    assert training_tasks(gym.make("ERL-Sokoban-v0"), 4) == [(i, None) for i in range(4)]
    # A level file: each level; HotpotQA: each training question.
    levels = ["#####\n#@$.#\n#####", "######\n#@ $.#\n######"]
    assert training_tasks(gym.make("ERL-Sokoban-v0", levels=levels), 99) == [(0, {"level_index": 0}),
                                                                            (1, {"level_index": 1})]
    qa = gym.make("ERL-HotpotQA-v0", data="synthetic")
    tasks = training_tasks(qa, 99)
    assert len(tasks) == len(qa.unwrapped.questions) and tasks[3] == (3, {"index": 3})
    with pytest.raises(ValueError, match="must hold 1 to"):
        training_tasks(gym.make("ERL-Sokoban-v0"), 2**31)


def test_the_paper_sokoban_train_file_is_its_own_task_list():
    path = shared_paper_file("sokoban_train.parquet")
    if path is None:
        pytest.skip("the paper's sokoban_train.parquet is not in the shared paper_tasks folder")
    env = gym.make("ERL-Sokoban-v0", levels=str(path))
    tasks = training_tasks(env, 0)
    assert len(tasks) == 10_000 and tasks[-1] == (9_999, {"level_index": 9_999})
    env.reset(seed=tasks[7][0], options=tasks[7][1])
    assert env.unwrapped.levels[7].key == env.unwrapped.level.key


def test_each_task_once_per_epoch_in_a_seeded_order():
    tasks, per_step = 10, 3
    assert epoch_steps(tasks, per_step) == 3  # the last partial batch is dropped, as verl's loader does
    assert epoch_steps(10_000, 64) * 10 == 1_560  # the reference's 10 epochs over its 10,000 training tasks
    epochs = [[i for step in range(1 + 3 * e, 4 + 3 * e) for i in epoch_batch(tasks, per_step, step, seed=7)]
              for e in range(3)]
    for order in epochs:
        assert len(order) == len(set(order)) == 9  # no task twice in an epoch, one left out
    assert epochs[0] != epochs[1] != epochs[2]  # reshuffled every epoch
    assert epoch_batch(tasks, per_step, 5, seed=7) == epoch_batch(tasks, per_step, 5, seed=7)  # a function of the step
    assert epoch_batch(tasks, per_step, 1, seed=7) != epoch_batch(tasks, per_step, 1, seed=8)
    with pytest.raises(ValueError, match="fewer than tasks_per_step"):
        epoch_steps(2, 3)
