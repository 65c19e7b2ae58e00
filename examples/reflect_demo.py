"""Watch one ERL episode on FrozenLake: a random agent fails, RuleReflector writes a rulebook, attempt 2 follows it.

    python examples/reflect_demo.py [--seed 0] [--size 5] [--memory memory.json]   (after pip install -e .)

No model is involved: the first attempt is random moves, the reflection is ``RuleReflector`` (a rulebook read off
the failed trace), and the second attempt is a tiny agent that plays the route written in its system prompt. The
same loop runs with a language model in every role (see ``erl_agents``).
"""

from __future__ import annotations

import argparse
import re

import gymnasium as gym
import numpy as np

import erl_envs  # noqa: F401  (registers the envs)
from erl_envs import ReflectionMemory, ReflectionWrapper, RuleReflector
from erl_envs.grid.actions import ACTION_NAMES, format_action

_ROUTE = re.compile(r"route on this board[^:]*: ((?:Up|Down|Left|Right)(?:, (?:Up|Down|Left|Right))*) \(")


class RandomAgent:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def act(self, system_prompt: str, observation: str) -> str:
        return format_action(int(self.rng.integers(len(ACTION_NAMES))))


class RulebookFollower:
    """Plays the route its system prompt spells out, one move per turn; random moves when there is none."""

    def __init__(self, rng: np.random.Generator):
        self.fallback = RandomAgent(rng)
        self.plan: list[str] | None = None

    def start(self, system_prompt: str) -> None:
        match = _ROUTE.search(system_prompt)
        self.plan = match.group(1).split(", ") if match else None

    def act(self, system_prompt: str, observation: str) -> str:
        if self.plan:
            return f"Following my rulebook's route.\n```{self.plan.pop(0)}```"
        return self.fallback.act(system_prompt, observation)


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.split("\n"))


def run(seed: int, size: int, memory: ReflectionMemory, tries: int = 50) -> dict:
    rng = np.random.default_rng(seed)
    env = ReflectionWrapper(gym.make("ERL-FrozenLake-v0", size=size), memory=memory, reflector=RuleReflector())
    # Look for an instance the random agent fails (it sometimes wins by luck, and then there is nothing to reflect).
    for episode_seed in range(seed, seed + tries):
        obs, info = env.reset(seed=episode_seed)
        first_attempt, second_attempt = RandomAgent(rng), RulebookFollower(rng)
        agent = first_attempt
        print(f"=== Episode seed {episode_seed}, task {info['task_id']} ===")
        print(f"--- attempt 1, system prompt:\n{indent(info['system_prompt'])}")
        print(f"--- first observation:\n{indent(obs)}")
        while True:
            action = agent.act(info["system_prompt"], obs)
            phase = info["phase"]
            obs, reward, terminated, truncated, info = env.step(action)
            move = action.split("```")[-2] if "```" in action else action
            comment = info.get("step_info", {}).get("feedback", "")
            print(f"[{phase}] {move:<5} -> reward {reward:g}, {comment}")
            if terminated or truncated:
                break
            if info["new_conversation"]:  # the reflector ran inside the wrapper: attempt 2 starts now
                print(f"--- attempt 1 failed; RuleReflector wrote this system prompt for attempt 2:\n"
                      f"{indent(info['system_prompt'])}")
                print(f"--- attempt 2, same instance, first observation:\n{indent(obs)}")
                second_attempt.start(info["system_prompt"])
                agent = second_attempt
        record = info["record"]
        print(f"--- final observation:\n{indent(obs)}")
        if record["gated"]:
            print("Attempt 1 succeeded by luck; the episode ends without a reflection. Trying the next seed.\n")
            continue
        print(f"r1 = {record['r1']:g}, r2 = {record['r2']:g}, memory updated: {record['memory_updated']}")
        return record
    raise RuntimeError(f"the random agent won all {tries} episodes; try another --seed or a bigger --size")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="first episode seed (and the agents' random seed)")
    parser.add_argument("--size", type=int, default=5, help="FrozenLake side length (the paper draws 2..9)")
    parser.add_argument("--memory", default=None, help="save the reflection memory to this JSON file afterwards")
    args = parser.parse_args(argv)
    memory = ReflectionMemory()
    record = run(args.seed, args.size, memory)
    if args.memory:
        memory.save(args.memory)
        print(f"memory saved to {args.memory}")
    return record


if __name__ == "__main__":
    main()
