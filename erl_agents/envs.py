"""The envs a run plays, built from the config, and text drawn from them to train the tiny model's tokenizer."""

from __future__ import annotations

import random

import gymnasium as gym

from erl_agents.evaluate import EVAL_SEED_BASE

__all__ = ["make_env", "prompt_constants", "tiny_corpus"]


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
