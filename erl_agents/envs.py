"""The envs a run plays, built from the config, the training tasks they are reset to when a run goes by epochs, and
text drawn from them to train the tiny model's tokenizer."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np

from erl_agents.evaluate import EVAL_SEED_BASE, Task

__all__ = ["make_env", "reflection_wrappers", "training_tasks", "training_data_warnings", "epoch_steps", "epoch_batch", "prompt_constants",
           "tiny_corpus"]


def make_env(env_id: str, env_kwargs: dict) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)``, refusing an env that does not read and write text (the trainer's
    policy is a language model: observations and actions must be ``gymnasium.spaces.Text``)."""
    import erl_envs  # noqa: F401  (registers the ERL envs)

    # JSON and YAML have no tuples; our envs take ranges such as size=(2, 4) as tuples.
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in env_kwargs.items()}
    env = gym.make(env_id, **kwargs)
    spaces = {"observation": env.observation_space, "action": env.action_space}
    wrong = {name: space for name, space in spaces.items() if not isinstance(space, gym.spaces.Text)}
    if wrong:
        env.close()
        shown = ", ".join(f"its {name} space is {type(space).__name__}" for name, space in wrong.items())
        raise ValueError(f"{env_id} is not a text env ({shown}): erl-train trains language models on envs whose "
                         f"observations and actions are text (gymnasium.spaces.Text), such as the ERL-* envs")
    return env



def training_tasks(env: gym.Env, count: int) -> list[Task]:
    """The training task list a run with ``epochs`` goes through, as ``(seed, reset options)`` per task.

    Where the env holds a fixed list, a task is an item of it: a question of HotpotQA's training data (option
    ``index``), a level of a Sokoban level file such as the paper's ``sokoban_train.parquet`` (option
    ``level_index``). FrozenLake with the paper's generator and its default sizes and p plays the reference's own
    10,000 training rows (``erl_envs.paper_tasks.frozenlake_train_rows``: seed, size, p). Any other generator's task
    is a reset seed, the same instance every epoch: seeds 0 .. ``count`` - 1 (the reference's lists hold 10,000).
    """
    from erl_envs.grid.frozen_lake import PAPER_P, PAPER_SIZE
    from erl_envs.paper_tasks import frozenlake_train_rows

    base = env.unwrapped
    questions = getattr(base, "questions", None)
    if questions is not None:
        return [(i, {"index": i}) for i in range(len(questions))]
    levels = getattr(base, "levels", None)
    if levels:
        return [(i, {"level_index": i}) for i in range(len(levels))]
    paper_lake = (getattr(base, "game_name", None) == "FrozenLake" and getattr(base, "generator", None) == "paper"
                  and tuple(np.atleast_1d(base.size)) == PAPER_SIZE and tuple(np.atleast_1d(base.p)) == PAPER_P)
    if paper_lake:
        return [(row["seed"], {"size": row["size"], "p": row["p"]}) for row in frozenlake_train_rows()]
    if not 1 <= count <= EVAL_SEED_BASE:
        raise ValueError(f"the training list of a generator must hold 1 to {EVAL_SEED_BASE} seeds, got {count}")
    return [(i, None) for i in range(count)]


def epoch_steps(tasks: int, tasks_per_step: int) -> int:
    """Training steps in one epoch: a batch of ``tasks_per_step`` distinct tasks each, the last partial batch
    dropped (verl's loader, ``drop_last=True``)."""
    steps = tasks // tasks_per_step
    if steps < 1:
        raise ValueError(f"the training list holds {tasks} task(s), fewer than tasks_per_step ({tasks_per_step}): "
                         "not one full batch per epoch")
    return steps


def epoch_batch(tasks: int, tasks_per_step: int, step: int, seed: int) -> list[int]:
    """The task indices of training step ``step`` (1-based): epoch e plays every task once in an order drawn from
    ``(seed, e)``, batch after batch. A function of the step alone, so a resumed run continues the same order."""
    per_epoch = epoch_steps(tasks, tasks_per_step)
    epoch, position = divmod(step - 1, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(tasks)
    return [int(i) for i in order[position * tasks_per_step:(position + 1) * tasks_per_step]]


def training_data_warnings(preset: str, env_id: str, env_kwargs: dict) -> list[str]:
    """What a run's preset could not give its training tasks, one line each (the trainer warns at start-up): the
    paper preset trains Sokoban on the paper's 10,000 layouts only when their file was found."""
    if preset == "paper-qwen3-4b" and env_id.startswith("ERL-Sokoban") and not env_kwargs.get("levels"):
        return ["the paper-qwen3-4b preset trains Sokoban on generated levels (a level per task seed, the paper's room "
                "sizes), not on the paper's 10,000 train layouts: sokoban_train.parquet was not found (set "
                "ERL_PAPER_TASKS to the folder that holds it, or pass env_kwargs levels=FILE)"]
    return []


def prompt_constants() -> list[str]:
    """Every prompt written as a module constant (``NAME = "..."``) in erl_envs' prompt modules, ordered by name.

    The tiny tokenizer learns these texts, so a prompt set kept in a dict (the paper sets) leaves its vocabulary, and
    every run's tiny model, as they were.
    """
    from erl_envs import protocol
    from erl_envs.grid import prompts as grid_prompts
    from erl_envs.qa import prompts as qa_prompts
    from erl_envs.reflection import prompts as reflection_prompts

    constants = {}
    for module in (protocol, grid_prompts, qa_prompts, reflection_prompts):
        for name in dir(module):
            value = getattr(module, name)
            if name.isupper() and isinstance(value, str) and name != "TEXT_CHARSET":
                constants[name] = value
    return [constants[name] for name in sorted(constants)]


def tiny_corpus(env: gym.Env, episodes: int = 200, seed: int = 0) -> list[str]:
    """Text to train the tiny tokenizer on: every prompt, the env's observations under random play, its actions."""
    from erl_envs.protocol import instructions_of

    rng = random.Random(seed)
    texts = prompt_constants()
    texts.append(instructions_of(env))
    actions = list(getattr(env.unwrapped, "valid_actions", None) or [])
    texts.extend(actions * 20)
    for episode in range(episodes):
        obs, info = env.reset(seed=EVAL_SEED_BASE * 2 + episode)
        texts.append(obs)
        for turn in range(50):
            if actions:
                action = rng.choice(actions)
            else:
                words = obs.split()
                query = " ".join(rng.sample(words, min(4, len(words))))
                action = f"<search>{query}</search>" if turn < 2 else f"\\boxed{{{rng.choice(words or ['x'])}}}"
            texts.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            texts.append(obs)
            for key in ("feedback", "episode_feedback"):
                if isinstance(info.get(key), str):
                    texts.append(info[key])
            if terminated or truncated:
                break
    return texts


def reflection_wrappers(envs: list[gym.Env], config, reflector=None, saved_memory: dict | None = None,
                        data_parallel: bool = False) -> tuple[object, list[gym.Env]]:
    """ERL's episodes: each env in a ``ReflectionWrapper`` sharing the run's memory (restored from ``saved_memory``
    on a resume; a pool gives each wrapper a handle, and every episode takes the pool's next slot), reflecting with
    ``reflector`` (None: the policy). Returns the memory and the wrappers."""
    from erl_envs.reflection import ReflectionWrapper
    from erl_envs.reflection.memory import PoolMemory, ReflectionMemory, memory_from_dict
    from erl_envs.reflection.prompt_block import reflection_char_limit

    if saved_memory is not None:
        memory = memory_from_dict(saved_memory)
    else:
        memory = PoolMemory(config.memory_slots) if config.memory == "pool" else ReflectionMemory()
    episodes = config.tasks_per_step * config.group_size
    if data_parallel and isinstance(memory, PoolMemory) and episodes > memory.slots:
        raise ValueError(f"the pool memory has {memory.slots} slots and a step plays {episodes} episodes: "
                         "under data parallel a step's episodes need a slot each (raise --memory-slots)")
    memories = [memory.handle() if isinstance(memory, PoolMemory) else memory for _ in envs]
    return memory, [ReflectionWrapper(env, memory=handle, gate_threshold=config.gate_threshold,
                                      memory_threshold=config.memory_threshold, reflector=reflector,
                                      no_memory=config.no_memory, no_reflection=config.no_reflection,
                                      reflection_instructions=config.reflection_instructions or None,
                                      memory_rule=config.memory_rule, trace_rule=config.trace_rule,
                                      # every reflection the policy can write is read whole, as the reference does
                                      max_reflection_chars=reflection_char_limit(config.reflect_max_new_tokens))
                    for env, handle in zip(envs, memories)]
