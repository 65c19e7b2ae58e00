"""erl_envs for TRL's ``GRPOTrainer(environment_factory=...)``: each env becomes a class whose methods are tools.

TRL's contract (trl 1.x, ``GRPOTrainer`` docstring): ``environment_factory`` is a no-argument callable; TRL makes
one instance per rollout, calls ``reset(**row)`` with the dataset row and appends the returned string to the last
user message, exposes every public method except ``reset`` / ``get_reward`` as a tool (name, type hints and
Google-style docstring become the JSON schema), and after the rollout calls ``get_reward()`` as an extra reward
source logged under the class name (``rewards/<ClassName>/mean``). A tool that raises is answered to the model as
``{"error": "..."}``.

Here: ``make_trl_environment(env_id, **env_kwargs)`` returns such a class. ``reset`` plays the instance named by the
row's ``seed`` (and ``options``), so the ``num_generations`` rollouts of a GRPO group, which share a row, share a
task. The tools: ``move(direction)`` for the grid games, ``search(query)`` and ``answer(text)`` for HotpotQA,
``act(text)`` for any other text env; each turns the call into the text action the env parses (```Up```,
``<search>..</search>``, ``\\boxed{..}``), so rewards and dynamics are exactly the env's. After the episode ends
every tool raises, so the model reads an error. ``get_reward`` is the episode's return.

ERL through TRL (``reflection=True``): the env runs inside ``ReflectionWrapper`` and a ``reflect(rulebook)`` tool
is added. A failed first attempt answers with the reflection request (the trace); the model's ``reflect`` call is
the reflection; the second attempt on the same task follows as further tool turns, and ``get_reward`` is the return
of the last attempt played (r1 when attempt 1 succeeded, else r2). What TRL's interfaces cannot express: one
rollout gets one scalar advantage, so the paper's per-role GRPO groups (first attempts / reflections / second
attempts), the reflection's own reward r2 and the distilled copy under the initial prompt need erl-gym's trainer
(``erl_agents``) or a custom TRL ``rollout_func``; the memory slot is not shared across TRL's env instances.

``make_dataset(env_id, n, seed)`` gives the rows: a conversational ``prompt`` (tool-use system prompt, empty user
message that ``reset`` fills with the first observation) and the ``seed`` of each task.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import gymnasium as gym

import erl_envs  # noqa: F401  (registers the ERL-* ids)
from erl_envs import protocol

__all__ = ["make_trl_environment", "make_dataset", "ERLToolEnv", "TOOL_INSTRUCTIONS"]

# The system prompts of tool use: the same tasks as the env's own instructions, acted on through the tools below
# instead of text blocks, so they live beside the tools they describe. Assign to change them.
TOOL_INSTRUCTIONS = {
    "grid": "You are an agent playing a game on a grid. Each turn you see the current grid; act by calling the move "
            "tool with Up, Down, Left or Right. The tool answers with the new grid.",
    "qa": "Answer the question. Call the search tool to look things up in a Wikipedia index as many times as you "
          "need; when you know the answer, call the answer tool with the final answer, as short as possible.",
    "generic": "You are an agent acting in a text environment. Read each observation and call the act tool with "
               "your next action.",
}
REFLECT_TOOL_NOTE = ("If an attempt fails you will get its trace; then call the reflect tool with a rulebook for your "
                     "next attempt at the same task, and play again.")


class EpisodeOver(RuntimeError):
    """Raised by every tool once the episode has ended; TRL shows the message to the model as a tool error."""


class ERLToolEnv:
    """Base of the classes ``make_trl_environment`` builds: the episode bookkeeping behind the tools.

    Subclasses set ``env_id``, ``env_kwargs`` and ``reflection`` as class attributes and mix in tool methods.
    """

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}
    reflection: bool = False

    def __init__(self):
        env = gym.make(self.env_id, **self.env_kwargs)
        if self.reflection:
            from erl_envs.reflection import ReflectionWrapper

            env = ReflectionWrapper(env)
        self._env = env
        self._done = True
        self._phase = "attempt1"
        self._returns: dict[int, float] = {}
        self._attempt = 1
        self.seed: int | None = None
        self.actions: list[str] = []  # the text actions sent to the env this episode (for logs and checks)

    def reset(self, seed: int, options: dict | None = None, **row: Any) -> str:
        """Start the task of this dataset row; the string goes to the model after the row's prompt."""
        obs, info = self._env.reset(seed=int(seed), options=options)
        self.seed, self.actions = int(seed), []
        self._done, self._phase, self._attempt, self._returns = False, info.get("phase", "attempt1"), 1, {1: 0.0}
        return obs

    def get_reward(self) -> float:
        """The return of the last attempt played (the only attempt without ``reflection``)."""
        return self._reward()

    def _reward(self) -> float:
        return self._returns.get(self._attempt, 0.0)

    def _play(self, action: str, phase: str) -> str:
        if self._done:
            raise EpisodeOver(f"The episode is over; its reward is {self._reward():g}. Stop calling tools.")
        needed = "reflect" if self._phase == "reflect" else "attempt"
        if phase != needed:
            raise ValueError("Not now: call reflect first." if needed == "reflect" else
                             "Not now: reflect only after a failed attempt; act with the other tools.")
        self.actions.append(action)
        obs, reward, terminated, truncated, info = self._env.step(action)
        attempt = info.get("attempt", 1) if self.reflection else 1
        if attempt is not None:
            self._attempt = attempt
            self._returns[attempt] = self._returns.get(attempt, 0.0) + float(reward)
        self._phase = info.get("phase", "attempt1")
        self._done = terminated or truncated
        if self.reflection and info.get("new_conversation") and not self._done:
            return f"Second attempt at the same task. Your instructions now:\n{info['system_prompt']}\n\n{obs}"
        if self._done:
            return f"{obs}\nThe episode is over; reward {self._reward():g}."
        return obs


class _GridTools:
    def move(self, direction: str) -> str:
        """Move the agent one cell on the grid.

        Args:
            direction: Up, Down, Left or Right.

        Returns:
            The grid after the move and how many steps remain.
        """
        # Any other word reaches the env as an unparseable reply: no move, one step used (the paper's rule).
        return self._play(f"```{direction}```", "attempt")


class _QATools:
    def search(self, query: str) -> str:
        """Search the Wikipedia index.

        Args:
            query: What to look up, e.g. the name of a person or a work.

        Returns:
            The top passages for the query.
        """
        return self._play(f"<search>{query}</search>", "attempt")

    def answer(self, text: str) -> str:
        """Give the final answer; this ends the attempt.

        Args:
            text: The answer, as short as possible.

        Returns:
            Whether the answer was right.
        """
        return self._play(answer_reply(text), "attempt")


class _GenericTools:
    def act(self, text: str) -> str:
        """Take one action in the environment.

        Args:
            text: The action, in the format the environment asks for.

        Returns:
            The next observation.
        """
        return self._play(text, "attempt")


class _ReflectTools:
    def reflect(self, rulebook: str) -> str:
        """After a failed attempt: write the rules and strategy to follow in the next attempt at the same task.

        Args:
            rulebook: The new instructions: what the symbols mean, what each action does, the goal, and a plan.

        Returns:
            The start of the next attempt.
        """
        return self._play(f"<prompt>{rulebook}</prompt>", "reflect")


_TOOLS_BY_STYLE = {"grid": _GridTools, "qa": _QATools, "generic": _GenericTools}

# Characters that could make an answer read as a tool call (<search>, <tool_call>, a {"name": ...} object, which
# the box's own brace could open) or close its box early. All are ASCII punctuation, which answer scoring removes
# anyway, so dropping them never changes a reward.
_CALL_SYNTAX = str.maketrans("", "", '<>{}"\\')


def answer_reply(text: str) -> str:
    """The reply that gives ``text`` as the final answer and nothing else (see ``_CALL_SYNTAX``)."""
    from erl_envs.qa.tools import parse_qa_calls

    reply = f"\\boxed{{{str(text).translate(_CALL_SYNTAX)}}}"
    calls = parse_qa_calls(reply)
    if len(calls) != 1 or calls[0].kind != "answer":  # cannot happen with the characters above removed
        raise ValueError("this answer cannot be given: it reads as a tool call")
    return reply


def _class_name(env_id: str, reflection: bool) -> str:
    words = re.sub(r"-v\d+$", "", env_id)
    return re.sub(r"[^0-9A-Za-z]", "", words) + ("Reflection" if reflection else "") + "Env"


def make_trl_environment(env_id: str, reflection: bool = False, **env_kwargs: Any) -> type[ERLToolEnv]:
    """A class for ``GRPOTrainer(environment_factory=...)`` playing ``env_id`` made with ``env_kwargs``.

    The class name (e.g. ``ERLFrozenLakeEnv``) is the name TRL logs the env's reward under.
    """
    if env_id not in gym.registry:
        raise ValueError(f"unknown env id {env_id!r}; registered ERL envs: "
                         f"{sorted(k for k in gym.registry if k.startswith('ERL-'))}")
    probe = gym.make(env_id, **env_kwargs)  # fails here, not in TRL's pool, on a bad kwarg
    style = protocol.prompt_style_of(probe)
    probe.close()
    bases = (_TOOLS_BY_STYLE[style],) + ((_ReflectTools,) if reflection else ()) + (ERLToolEnv,)
    attrs = {"env_id": env_id, "env_kwargs": dict(env_kwargs), "reflection": reflection, "prompt_style": style,
             "__doc__": f"{env_id} as TRL tools ({', '.join(_tool_names(bases))})."}
    return type(_class_name(env_id, reflection), bases, attrs)


def _tool_names(bases: tuple[type, ...]) -> list[str]:
    return [name for base in bases[:-1] for name, _ in inspect.getmembers(base, inspect.isfunction)
            if not name.startswith("_")]


def system_prompt(env_cls: type[ERLToolEnv]) -> str:
    text = TOOL_INSTRUCTIONS[env_cls.prompt_style]
    return f"{text} {REFLECT_TOOL_NOTE}" if env_cls.reflection else text


def make_dataset(env_id: str, n: int, seed: int = 0, reflection: bool = False, **env_kwargs: Any):
    """``n`` rows for GRPOTrainer: tasks ``seed, seed + 1, ..., seed + n - 1`` with the tool-use system prompt."""
    from datasets import Dataset

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    env_cls = make_trl_environment(env_id, reflection=reflection, **env_kwargs)
    system = system_prompt(env_cls)
    return Dataset.from_dict({
        "prompt": [[{"role": "system", "content": system}, {"role": "user", "content": ""}] for _ in range(n)],
        "seed": [seed + i for i in range(n)],
    })

