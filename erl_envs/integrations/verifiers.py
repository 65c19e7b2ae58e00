"""erl_envs as a Verifiers environment (``verifiers`` 0.4, its ``verifiers.v1`` task API), for prime-rl and co.

Verifiers 0.4 splits an environment into a ``Taskset`` (the rows), an ``Env`` whose ``run()`` drives an episode,
and a ``Harness`` (the program that talks to the model). This module is all three, found by Verifiers' loaders
because it exports one subclass of each in ``__all__``. Verifiers imports a plugin as a top-level module named by its
id, so the id is ``erl-gym-verifiers`` (the ``erl_gym_verifiers`` package re-exports this module):

* ``ERLTaskset``: task ``i`` is the instance ``env.reset(seed=seed + i)``; its prompt is the first observation and
  its system prompt the env's own instructions (the same text erl-gym's trainer uses).
* ``ERLEnv.run``: the env plays the user, as Verifiers' TextArena and OpenEnv tasksets do: each model reply goes to
  ``env.step`` unchanged (so the env's own action parsing applies: the last triple-backtick block for the grid
  games, ``<search>`` / ``\\boxed{}`` for HotpotQA), the next observation comes back as the user turn, and the
  episode's return is recorded as the reward ``erl_return`` (weight 1), so the rollout's reward is the env's.
* ``ERLChatHarness``: Verifiers' own chat program (the one its ``null`` harness runs), started with this Python
  instead of a ``uv``-provisioned copy, so episodes run offline; the model calls go through Verifiers' client to
  any OpenAI-compatible endpoint.

``load_environment(env_id=..., num_tasks=..., seed=..., **env_kwargs)`` returns the ``ERLEnv``. ERL's reflection
loop is available by passing ``reflection=True`` (the env runs inside ``ReflectionWrapper``; the reflection and the
second attempt become further user/assistant turns, and the reward is the episode's total return).

Gold checks (``vf-validate``): ``ERLTask.validate`` replays the instance's reference solution in a fresh env and
reports whether it solves it. The grid games' solution is a shortest sequence of moves, found by breadth-first
search over copies of the env itself (so it is exactly the env's dynamics and step budget); HotpotQA's is the gold
answer in ``\\boxed{}``; another text env has none (the task stays "unchecked"). The checks run no model and need no
sandbox, but ``vf-validate``'s default runtime is a hosted Prime sandbox, so run it with the local one::

    vf-validate erl-gym-verifiers --runtime.type subprocess -n 20 --only-gold
"""

from __future__ import annotations

import copy
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

import gymnasium as gym

import erl_envs  # noqa: F401  (registers the ERL-* ids)
from erl_envs import protocol

try:
    import verifiers.v1 as vf
    from verifiers.v1.harnesses.null import NullHarness
    from verifiers.v1.harnesses.null.harness import NullHarnessConfig
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(f'this adapter needs verifiers>=0.4: pip install "verifiers>=0.4,<0.5" ({error})') from None

__all__ = ["ERLTasksetConfig", "ERLData", "ERLTask", "ERLTaskset", "ERLEnvConfig", "ERLEnv", "ERLChatHarnessConfig",
           "ERLChatHarness", "load_environment", "gold_replies", "TASKSET_ID"]

TASKSET_ID = "erl-gym-verifiers"  # Verifiers imports `erl_gym_verifiers` for it (a top-level module, by its rules)


def make_env(env_id: str, env_kwargs: dict[str, Any], reflection: bool) -> gym.Env:
    env = gym.make(env_id, **env_kwargs)
    if reflection:
        from erl_envs.reflection import ReflectionWrapper

        env = ReflectionWrapper(env)
    return env


class ERLTasksetConfig(vf.TasksetConfig):
    env_id: str = "ERL-FrozenLake-v0"
    """A registered erl_envs id."""
    env_kwargs: dict[str, Any] = {}
    """Keyword arguments for ``gymnasium.make``."""
    num_tasks: int = 100
    """How many instances: seeds ``seed .. seed + num_tasks - 1``."""
    seed: int = 0
    reflection: bool = False
    """Run the env inside ``ReflectionWrapper`` (ERL's attempt -> reflection -> retry as one episode)."""


class ERLData(vf.TaskData):
    info: dict
    """The env id, kwargs and reset seed that rebuild the instance."""


def _grid_key(observation: str) -> str:
    """The board of a grid observation (its cell rows), without the notices and the steps line."""
    return "\n".join(line for line in observation.splitlines() if "\t" in line)


def _shortest_grid_solution(env: gym.Env, observation: str, max_states: int = 20_000) -> list[str] | None:
    """Breadth-first search over copies of a freshly reset grid env: the fewest canonical moves that solve it."""
    moves = list(getattr(env.unwrapped, "valid_actions", []))
    frontier = deque([(env, [])])
    seen = {_grid_key(observation)}
    while frontier and len(seen) < max_states:
        state, path = frontier.popleft()
        for move in moves:
            child = copy.deepcopy(state)
            obs, _, terminated, truncated, info = child.step(move)
            if info.get("success"):
                return path + [move]
            key = _grid_key(obs)
            if terminated or truncated or key in seen:
                continue
            seen.add(key)
            frontier.append((child, path + [move]))
    return None


def gold_replies(env: gym.Env, observation: str, info: dict) -> list[str] | None:
    """Replies that solve the instance ``env`` was just reset to (``observation``, ``info`` from that reset), or
    ``None`` when erl-gym knows no reference solution for the env."""
    style = protocol.prompt_style_of(env)
    if style == "grid":
        return _shortest_grid_solution(env, observation)
    if style == "qa":
        question = next((q for q in getattr(env.unwrapped, "questions", ()) if q.id == info.get("task_id")), None)
        return [f"\\boxed{{{question.answers[0]}}}"] if question is not None and question.answers else None
    return None


class ERLTask(vf.Task[ERLData, vf.State, vf.TaskConfig]):
    async def validate(self, runtime) -> bool | None:
        """The gold check: the instance's reference solution, played in a fresh env, solves it (module docstring);
        ``None`` when there is no reference solution."""
        info = self.data.info
        env = make_env(info["env_id"], info["env_kwargs"], reflection=False)
        try:
            observation, reset_info = env.reset(seed=info["seed"])
            replies = gold_replies(env, observation, reset_info)
            if replies is None:
                return None
            for reply in replies:
                _, _, terminated, truncated, step_info = env.step(reply)
                if terminated or truncated:
                    return bool(step_info.get("success"))
            return False
        finally:
            env.close()


class ERLTaskset(vf.Taskset[ERLTask, ERLTasksetConfig]):
    def load(self) -> Iterator[ERLTask]:
        config = self.config
        if config.num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {config.num_tasks}")
        env = make_env(config.env_id, config.env_kwargs, config.reflection)
        try:
            instructions = protocol.instructions_of(env)
            for i in range(config.num_tasks):
                seed = config.seed + i
                observation, info = env.reset(seed=seed)
                yield ERLTask(
                    ERLData(name=f"{config.env_id}#{seed}", prompt=observation,
                            system_prompt=info.get("system_prompt", instructions),
                            info={"env_id": config.env_id, "env_kwargs": config.env_kwargs, "seed": seed,
                                  "reflection": config.reflection}),
                    config.task,
                )
        finally:
            env.close()


class ERLChatHarnessConfig(NullHarnessConfig):
    pass


class _ThisPython:
    """A runtime view whose ``prepare_uv_script`` runs the script with this interpreter (which has the chat
    program's dependencies, installed with verifiers) instead of provisioning a uv environment over the network."""

    def __init__(self, runtime):
        self._runtime = runtime

    def __getattr__(self, name):
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script, env=None, *, activate=True) -> list[str]:
        path = ".vf-erl-chat-program.py"
        await self._runtime.write(path, script.encode() if isinstance(script, str) else script)
        return [sys.executable, path]


class ERLChatHarness(NullHarness):
    """Verifiers' chat program (its ``null`` harness), run with this Python: no uv, no download."""

    async def setup(self, runtime) -> None:
        return None

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system_prompt, prompt = self.resolve_prompt(data)
        extra = [f"--tool-interception-url={tool_interception_url}"] if tool_interception_url else []
        return await launch_chat_program(CHAT_PROGRAM_SOURCE, self.config, ctx, trace, _ThisPython(runtime),
                                         endpoint, secret, mcp_urls, system_prompt, prompt, extra_args=extra)


class ERLEnvConfig(vf.EnvConfig):
    # A local subprocess runtime: the chat program needs no sandbox (it runs no code), and Verifiers' default
    # (a hosted Prime sandbox) needs an account and the network.
    player: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class ERLEnv(vf.Env[ERLEnvConfig]):
    """The env plays the user: each reply is one ``env.step``; the episode's return is the reward."""

    async def run(self, task, agents):
        info = task.data.info
        env = make_env(info["env_id"], info["env_kwargs"], info["reflection"])
        total, steps, outcome = 0.0, 0, {}
        try:
            env.reset(seed=info["seed"])  # the task's prompt is this reset's observation
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    observation, reward, terminated, truncated, step_info = env.step(segment.last_reply)
                    total += float(reward)
                    steps += 1
                    if terminated or truncated:
                        outcome = {"terminated": bool(terminated), "truncated": bool(truncated),
                                   "success": step_info.get("success")}
                        break
                    if step_info.get("new_conversation"):  # ReflectionWrapper: attempt 2 has a new system prompt
                        observation = f"{step_info['system_prompt']}\n\n{observation}"
                    segment = await interaction.turn(observation)
        finally:
            env.close()
        trace = interaction.trace
        trace.record_reward("erl_return", total, 1.0)
        trace.info["erl_steps"] = steps
        # An object, as the trace is JSON: readers get outcome["success"], not a string to parse again.
        trace.info["erl_outcome"] = {key: value if value is None else bool(value) for key, value in outcome.items()}


def load_environment(env_id: str = "ERL-FrozenLake-v0", num_tasks: int = 100, seed: int = 0,
                     reflection: bool = False, **env_kwargs: Any) -> ERLEnv:
    """The Verifiers environment for ``env_id`` (``env_kwargs`` go to ``gymnasium.make``)."""
    if env_id not in gym.registry:
        raise ValueError(f"unknown env id {env_id!r}; registered ERL envs: "
                         f"{sorted(k for k in gym.registry if k.startswith('ERL-'))}")
    config = vf.resolve_env_config({"taskset": {"id": TASKSET_ID, "env_id": env_id, "env_kwargs": env_kwargs,
                                                "num_tasks": num_tasks, "seed": seed, "reflection": reflection}})
    return vf.load_environment(config)
