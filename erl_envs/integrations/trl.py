"""erl_envs for TRL's ``GRPOTrainer(environment_factory=...)``: each env becomes a class whose methods are tools.

TRL's contract (trl 1.x, ``GRPOTrainer`` docstring): ``environment_factory`` is a no-argument callable; TRL makes
one instance per rollout (pooled and reused across batches), calls ``reset(**row)`` with the dataset row and appends
the returned string to the last user message, exposes every public method except ``reset`` / ``get_reward`` as a
tool (name, type hints and Google-style docstring become the JSON schema), and after the rollout calls
``get_reward()`` as an extra reward source logged under the class name (``rewards/<ClassName>/mean``). A tool that
raises is answered to the model as ``{"error": "..."}`` and counted in ``tools/failure_frequency``.

Here ``make_trl_environment(env_id, **settings)`` returns such a class, and holds every setting in one place: the
env's ``gymnasium.make`` kwargs, ``reflection``, ``num_generations`` and ``seed``; ``make_dataset(Env, n)`` reads
them from the class. Two ways to give it tasks, both TRL's documented recipes:

* **No dataset** (TRL's primary recipe: ``GRPOTrainer(..., environment_factory=Env)`` with ``max_steps`` and no
  ``train_dataset``): the env owns its tasks. ``reset()`` without a ``seed`` draws the next task of a stream fixed by
  the trainer's seed: rollouts ``k * num_generations .. (k + 1) * num_generations - 1`` of a process play task ``k``,
  whose reset seed is ``task_seed(base, k)``, where ``base`` is the class's ``seed`` or else the seed of torch's
  default generator at the first reset (TRL sets it to ``GRPOConfig.seed`` plus the process index, so ranks play
  different tasks). TRL resets the rollouts of a batch in order and lays GRPO groups out as ``num_generations``
  consecutive rollouts, so with the class's ``num_generations`` equal to ``GRPOConfig``'s a group shares a task
  (evaluation rollouts draw from the same stream; ``restart_task_stream()`` starts it again).
  TRL's placeholder prompt has no system message, so this ``reset`` returns the tool instructions before the
  first observation.
* **A dataset** (``make_dataset(Env, n, seed)``): each row carries its task's ``seed`` and a system prompt with the
  tool instructions; ``reset(seed=s, prompt=...)`` plays task ``s`` and returns the first observation (the
  instructions too when the row's prompt has no system message).

The tools: ``move(direction)`` (an enum of Up, Down, Left, Right in its schema) for the grid games, ``search(query)``
and ``answer(text)`` for HotpotQA, ``act(text)`` for any other text env; each call becomes the text action the env
parses (```Up```, ``<search>..</search>``, ``\\boxed{..}``), so rewards and dynamics are exactly the env's, and the
env's text is shown in tool terms (HotpotQA's "give your final answer in \\boxed{}" reads "... with the answer tool").
A direction outside the enum reaches the env as an unreadable reply: no move, one step used (the paper's rule).

Tool metrics: a call after the episode has ended is refused with a message ("The episode is over ...") that is
returned, not raised, so it does not count in TRL's ``tools/failure_frequency``; that metric then counts only calls
TRL could not run and calls the episode's phase forbids (``reflect`` during an attempt, a move while a reflection is
due). ``calls_after_end`` on the instance counts the refused ones.

ERL through TRL (``reflection=True``): the env runs inside ``ReflectionWrapper`` and a ``reflect(rulebook)`` tool is
added. A failed first attempt answers with the reflection request (the trace); the model's ``reflect`` call is the
reflection; the second attempt on the same task follows as further tool turns, and ``get_reward`` is the return of
the last attempt played (r1 when attempt 1 succeeded, else r2). What TRL's interfaces cannot express: one rollout
gets one scalar advantage, so the paper's per-role GRPO groups (first attempts / reflections / second attempts), the
reflection's own reward r2 and the distilled copy under the initial prompt need erl-gym's trainer (``erl_agents``)
or a custom TRL ``rollout_func``; the memory slot is not shared across TRL's env instances.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Literal

import gymnasium as gym
import numpy as np

import erl_envs  # noqa: F401  (registers the ERL-* ids)
from erl_envs import protocol

__all__ = ["make_trl_environment", "make_dataset", "task_seed", "check_seed", "system_prompt", "ERLToolEnv",
           "TOOL_INSTRUCTIONS", "TOOL_FORMAT_REMINDERS"]

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
# Appended to a reflected system prompt (ReflectionWrapper's format_reminder), in tool terms.
TOOL_FORMAT_REMINDERS = {
    "grid": "Act by calling the move tool with Up, Down, Left or Right.",
    "qa": "Search with the search tool; give the final answer with the answer tool.",
    "generic": "Act by calling the act tool.",
}
REFLECT_TOOL_NOTE = ("If an attempt fails you will get its trace; then call the reflect tool with a rulebook for your "
                     "next attempt at the same task, and play again.")

Direction = Literal["Up", "Down", "Left", "Right"]

# The env's text-protocol phrases and how they read in tool terms (applied in this order).
_QA_PHRASES = (
    ("in \\boxed{...}", "with the answer tool"),
    ("in \\boxed{}", "with the answer tool"),
    ("write <search>your query</search>", "call the search tool"),
)
_TEXT_ACTIONS = {
    "grid": (re.compile(r"```([^`\n]*)```"), 'move(direction="{}")'),
    "qa": (re.compile(r"\\boxed\{([^{}\n]*)\}"), 'answer(text="{}")'),
}
_SEARCH_ACTION = (re.compile(r"<search>(.*?)</search>", re.S), 'search(query="{}")')
_PROMPT_BLOCK = ("inside <prompt>...</prompt>", "with the reflect tool")


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """``seed`` if it is None or a non-negative int (a NumPy integer too), else one ``ValueError`` line: a text or a
    float seed would otherwise be read as some other task."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"{name} must be a non-negative int or None, got {seed!r}")
    return int(seed)


def task_seed(base: int, index: int) -> int:
    """The reset seed of task ``index`` of the stream fixed by ``base`` (no-dataset mode)."""
    return int(np.random.SeedSequence([int(base) % 2**63, int(index)]).generate_state(1, dtype=np.uint32)[0])


def _torch_seed() -> int:
    try:
        import torch
    except ImportError:  # pragma: no cover - TRL always brings torch
        return 0
    return int(torch.initial_seed())


class ERLToolEnv:
    """Base of the classes ``make_trl_environment`` builds: the episode bookkeeping behind the tools.

    Subclasses set the settings (``env_id``, ``env_kwargs``, ``reflection``, ``num_generations``, ``seed``) as class
    attributes and mix in tool methods.
    """

    env_id: str = ""
    env_kwargs: dict[str, Any] = {}
    reflection: bool = False
    num_generations: int = 8
    seed: int | None = None
    prompt_style: str = "generic"
    _resets_without_seed = 0  # per class: the position in the no-dataset task stream
    _stream_base: int | None = None

    def __init__(self):
        env = gym.make(self.env_id, **self.env_kwargs)
        self._env_instructions = protocol.instructions_of(env)
        if self.reflection:
            from erl_envs.reflection import ReflectionWrapper

            env = ReflectionWrapper(env, format_reminder=TOOL_FORMAT_REMINDERS[self.prompt_style])
        self._env = env
        self._done = True
        self._phase = "attempt1"
        self._returns: dict[int, float] = {}
        self._attempt = 1
        self.task_seed: int | None = None
        self.actions: list[str] = []  # the text actions sent to the env this episode (for logs and checks)
        self.calls_after_end = 0  # tool calls refused because the episode had ended (not TRL tool failures)

    @classmethod
    def _next_task_seed(cls) -> int:
        if cls._stream_base is None:
            cls._stream_base = cls.seed if cls.seed is not None else _torch_seed()
        index = cls._resets_without_seed // cls.num_generations
        cls._resets_without_seed += 1
        return task_seed(cls._stream_base, index)

    @classmethod
    def restart_task_stream(cls) -> None:
        """Start the no-dataset task stream again (the next reset reads the base seed anew)."""
        cls._resets_without_seed, cls._stream_base = 0, None

    def reset(self, seed: int | None = None, options: dict | None = None, prompt: Any = None, **row: Any) -> str:
        """Start a task: the row's ``seed``, or without one the next task of the class's stream (module docstring)."""
        task = check_seed(seed)
        task = self._next_task_seed() if task is None else task
        obs, info = self._env.reset(seed=task, options=options)
        self.task_seed, self.actions, self.calls_after_end = task, [], 0
        self._done, self._phase, self._attempt, self._returns = False, info.get("phase", "attempt1"), 1, {1: 0.0}
        text = self._tool_terms(obs)
        if not _has_system_message(prompt):
            text = f"{system_prompt(type(self))}\n\n{text}"
        return text

    def get_reward(self) -> float:
        """The return of the last attempt played (the only attempt without ``reflection``)."""
        return self._reward()

    def _reward(self) -> float:
        return self._returns.get(self._attempt, 0.0)

    def _tool_terms(self, text: str) -> str:
        """The env's text as the model sees it through tools: its own instructions and reply formats replaced."""
        style = self.prompt_style
        text = text.replace(self._env_instructions, TOOL_INSTRUCTIONS[style])
        text = text.replace(*_PROMPT_BLOCK)
        if style == "qa":
            for old, new in _QA_PHRASES:
                text = text.replace(old, new)
            pattern, call = _SEARCH_ACTION
            text = pattern.sub(lambda m: call.format(m.group(1).strip()), text)
        if style in _TEXT_ACTIONS:
            pattern, call = _TEXT_ACTIONS[style]
            text = pattern.sub(lambda m: call.format(m.group(1).strip()), text)
        return text

    def _play(self, action: str, phase: str) -> str:
        if self._done:
            # Returned, not raised: TRL counts a raised error as a tool failure, and this call did nothing wrong.
            self.calls_after_end += 1
            return f"The episode is over; its reward is {self._reward():g}. Stop calling tools."
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
        text = self._tool_terms(obs)
        if self.reflection and info.get("new_conversation") and not self._done:
            if self._phase == "reflect":
                return f"{self._tool_terms(info['system_prompt'])}\n\n{text}"
            return (f"Second attempt at the same task. Your instructions now:\n"
                    f"{self._tool_terms(info['system_prompt'])}\n\n{text}")
        if self._done:
            return f"{text}\nThe episode is over; reward {self._reward():g}."
        return text


def _has_system_message(prompt: Any) -> bool:
    return isinstance(prompt, list) and any(isinstance(m, dict) and m.get("role") == "system" for m in prompt)


class _GridTools:
    def move(self, direction: Direction) -> str:
        """Move the agent one cell on the grid.

        Args:
            direction: The direction to move in.

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


def make_trl_environment(env_id: str, reflection: bool = False, num_generations: int = 8, seed: int | None = None,
                         **env_kwargs: Any) -> type[ERLToolEnv]:
    """A class for ``GRPOTrainer(environment_factory=...)`` playing ``env_id`` made with ``env_kwargs``.

    ``num_generations`` must equal ``GRPOConfig.num_generations`` (TRL's default is 8) for the no-dataset recipe's
    GRPO groups to share a task; ``seed`` fixes that recipe's task stream (default: the trainer's seed). The class
    name (e.g. ``ERLFrozenLakeEnv``) is the name TRL logs the env's reward under.
    """
    if env_id not in gym.registry:
        raise ValueError(f"unknown env id {env_id!r}; registered ERL envs: "
                         f"{sorted(k for k in gym.registry if k.startswith('ERL-'))}")
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations must be a positive int (GRPOConfig's), got {num_generations!r}")
    seed = check_seed(seed)
    probe = gym.make(env_id, **env_kwargs)  # fails here, not in TRL's pool, on a bad kwarg
    style = protocol.prompt_style_of(probe)
    probe.close()
    bases = (_TOOLS_BY_STYLE[style],) + ((_ReflectTools,) if reflection else ()) + (ERLToolEnv,)
    attrs = {"env_id": env_id, "env_kwargs": dict(env_kwargs), "reflection": reflection, "prompt_style": style,
             "num_generations": num_generations, "seed": seed, "_resets_without_seed": 0, "_stream_base": None,
             "__doc__": f"{env_id} as TRL tools ({', '.join(_tool_names(bases))})."}
    return type(_class_name(env_id, reflection), bases, attrs)


def _tool_names(bases: tuple[type, ...]) -> list[str]:
    return [name for base in bases[:-1] for name, _ in inspect.getmembers(base, inspect.isfunction)
            if not name.startswith("_")]


def system_prompt(env_cls: type[ERLToolEnv]) -> str:
    """The tool-use system prompt of an env class (with the reflect tool's note under ``reflection``)."""
    text = TOOL_INSTRUCTIONS[env_cls.prompt_style]
    return f"{text} {REFLECT_TOOL_NOTE}" if env_cls.reflection else text


def make_dataset(env_cls: type[ERLToolEnv], n: int, seed: int = 0):
    """``n`` rows for GRPOTrainer: tasks ``seed, seed + 1, ..., seed + n - 1`` of ``env_cls`` (the class
    ``make_trl_environment`` returned, which holds the env's settings) with the tool-use system prompt."""
    from datasets import Dataset

    if not (isinstance(env_cls, type) and issubclass(env_cls, ERLToolEnv)):
        raise TypeError(f"make_dataset takes the class make_trl_environment returned (it holds the env's settings), "
                        f"got {env_cls!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    system = system_prompt(env_cls)
    return Dataset.from_dict({
        "prompt": [[{"role": "system", "content": system}, {"role": "user", "content": ""}] for _ in range(n)],
        "seed": [seed + i for i in range(n)],
    })
