"""A trivial text env for trainer tests: pick the right door out of four, possibly over several turns."""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces

DOORS = ("A", "B", "C", "D")


class TextBanditEnv(gym.Env):
    """Each turn, reply with a door as ```X```; reward 1 for the prize door. ``contextual`` names it in the text.

    ``near_miss`` (0 by default) is the reward for the door right after the prize (A after D): partial credit, as
    HotpotQA's F1, which never counts as success. Success is the prize door on every turn.

    Follows erl_envs.protocol: str observations and actions, ``instructions``, ``valid_actions``, ``task_id``,
    ``feedback``, ``success``. The same reset seed gives the same prize door.
    """

    metadata = {"render_modes": []}

    def __init__(self, turns: int = 1, contextual: bool = False, prize: int | None = None, near_miss: float = 0.0):
        self.turns = turns
        self.near_miss = near_miss
        self.contextual = contextual
        self.fixed_prize = prize
        self.observation_space = spaces.Text(256, charset=string.printable)
        self.action_space = spaces.Text(256, charset=string.printable)
        self.instructions = "Pick a door. Reply with the door letter inside a triple-backtick block."
        self.prompt_style = "generic"
        self.valid_actions = [f"```{d}```" for d in DOORS]

    def _observation(self) -> str:
        hint = f" The prize is behind door {DOORS[self.prize]}." if self.contextual else ""
        return f"Turn {self.turn + 1} of {self.turns}.{hint} Which door?"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.prize = self.fixed_prize if self.fixed_prize is not None else int(self.np_random.integers(len(DOORS)))
        self.turn = 0
        self.total = 0.0
        self.hits = 0
        return self._observation(), {"task_id": f"bandit-{seed}", "task_text": self._observation()}

    def step(self, action: str):
        hit = action.strip() == self.valid_actions[self.prize]
        near = action.strip() == self.valid_actions[(self.prize + 1) % len(DOORS)]
        reward = 1.0 if hit else self.near_miss if near else 0.0
        self.hits += hit
        self.total += reward
        self.turn += 1
        done = self.turn >= self.turns
        info = {"feedback": "found the prize" if hit else "next to the prize" if near and reward else "no prize",
                "took_effect": True}
        if done:
            info["success"] = self.hits == self.turns
            info["episode_feedback"] = f"Found the prize {self.hits} of {self.turns} times."
        return self._observation(), reward, done, False, info


if "TextBandit-v0" not in gym.registry:
    gym.register("TextBandit-v0", entry_point=TextBanditEnv)
