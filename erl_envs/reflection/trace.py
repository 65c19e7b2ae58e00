"""The failed attempt as the reflection sees it: its steps as data (``TraceStep``), the trace text the reflect phase
shows (lenient or paper set), and the ``ReflectionRequest`` handed to a reflector.

``ReflectionWrapper`` records the steps and builds the request; a reflector (``erl_envs.reflection.reflectors``) or
the agent reads it. Keeping the text in one place means a reflector sees exactly what the agent would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from erl_envs.grid.text import SymbolSet
from erl_envs.reflection import prompts

__all__ = ["TraceStep", "ReflectionRequest", "clip_text", "format_trace", "format_paper_trace", "format_small_trace",
           "paper_feedback", "paper_metrics", "paper_task", "board_of", "board_lines", "compact_grid",
           "DEFAULT_MAX_FIELD_CHARS", "TRACE_RULES"]

# How the paper set writes an unreadable reply and the attempt's end: as the reference does, or the project's way
# (see format_paper_trace).
TRACE_RULES = ("paper", "project")

# A trace field longer than this (a QA turn's passages, a rambling reply) is cut in the middle: the head holds the
# grid or the first passages, the tail holds the action block, and the reflection prompt stays a sane length.
DEFAULT_MAX_FIELD_CHARS = 4000


@dataclass(frozen=True)
class TraceStep:
    """One step of an attempt: what the agent saw, what it did, and what came of it."""

    observation: str
    action: str
    reward: float
    took_effect: bool
    terminated: bool
    truncated: bool
    comment: str
    action_read: str | None = None  # the move(s) the env read from the reply, comma-separated; None: unreadable
    action_reported: bool = False  # whether the env reported action_read (the grid games do); else read ``action``
    positions: str = ""  # where things stand after the step, when the env says (Sokoban: player, boxes, goals)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def clip_text(text: str, limit: int | None) -> str:
    """Cut ``text`` in the middle to about ``limit`` characters, saying how much was cut."""
    if limit is None or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters omitted ...]\n{text[len(text) - tail:]}"


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def format_trace(steps: Sequence[TraceStep], final_observation: str, total_return: float, feedback: str,
                 max_field_chars: int | None = DEFAULT_MAX_FIELD_CHARS) -> str:
    """The attempt as text: each step (observation, action, reward, took effect, done, comment), then the outcome."""
    parts = [
        prompts.TRACE_STEP.format(
            index=i + 1,
            observation=clip_text(step.observation, max_field_chars),
            action=clip_text(step.action, max_field_chars) if step.action.strip() else "(an empty reply)",
            reward=f"{step.reward:g}",
            took_effect=_yes_no(step.took_effect),
            done=_yes_no(step.done),
            comment=step.comment,
        )
        for i, step in enumerate(steps)
    ]
    parts.append(prompts.TRACE_OUTCOME.format(
        final_observation=clip_text(final_observation, max_field_chars),
        total_return=f"{total_return:g}",
        feedback=feedback,
    ))
    return "\n\n".join(parts)


def _check_trace_rule(rule: str) -> None:
    if rule not in TRACE_RULES:
        raise ValueError(f"trace_rule must be one of {list(TRACE_RULES)}, got {rule!r}")


def _unreadable(step: TraceStep) -> bool:
    return step.action_reported and not step.action_read


def format_paper_trace(steps: Sequence[TraceStep], final_observation: str, total_return: float, feedback: str,
                       max_field_chars: int | None = DEFAULT_MAX_FIELD_CHARS, solved: bool = False,
                       game: str | None = None, rule: str = "paper") -> str:
    """The attempt as the paper prompt set writes it: per step the board, the action *as read* (not the raw reply),
    reward, took effect, episode ended, positions when known and the comment; then the outcome, whether it solved
    the task, and the feedback (``paper_feedback``).

    ``rule`` (``TRACE_RULES``): ``"paper"`` writes an unreadable reply as the reference's trace does (action 0, "did
    not move") and ends with the outcome alone; ``"project"`` says no action was read, keeps the env's comment, and
    shows the board the attempt ended on."""
    _check_trace_rule(rule)
    texts = prompts.PAPER_SET
    unreadable = texts["unreadable"]
    reference = rule == "paper"

    def action_and_comment(step: TraceStep) -> tuple[str, str]:
        if not step.action_reported:
            return clip_text(step.action, max_field_chars), step.comment
        if not _unreadable(step):
            return step.action_read, step.comment
        if reference:
            return unreadable["action"], unreadable["comment"].get(game or "", step.comment)
        return unreadable["project_action"], step.comment

    parts = []
    for i, step in enumerate(steps):
        action, comment = action_and_comment(step)
        parts.append(texts["trace_step"].format(
            index=i + 1,
            observation=clip_text(board_of(step.observation), max_field_chars),
            action=action,
            reward=f"{step.reward:g}",
            took_effect=_yes_no(step.took_effect),
            done=_yes_no(step.done),
            positions=f" {step.positions}" if step.positions else "",
            comment=comment,
        ))
    outcome = texts["trace_outcome"] if reference else texts["trace_outcome_board"]
    parts.append(outcome.format(
        final_observation=clip_text(board_of(final_observation), max_field_chars),
        total_return=f"{total_return:g}",
        solved=_yes_no(solved),
        feedback=feedback,
    ))
    return "\n\n".join(parts)


def paper_feedback(steps: Sequence[TraceStep], outcome: str, total_return: float, success: bool,
                   game: str | None, rule: str = "paper") -> str:
    """The paper set's feedback line: the env's outcome line, then (for a failed attempt) how many actions had no
    effect and a trailing run of two or more of them, the last action, the final state, the reward and the steps.
    An unreadable last reply is named as ``format_paper_trace`` names it under ``rule``."""
    _check_trace_rule(rule)
    texts = prompts.PAPER_SET["feedback"]
    parts = [outcome]
    no_effect = sum(not step.took_effect for step in steps)
    run = 0
    for step in reversed(steps):
        if step.took_effect:
            break
        run += 1
    if not success and no_effect:
        parts.append(texts["no_effect"].format(count=no_effect))
        if run >= 2:
            parts.append(texts["no_effect_run"].format(count=run))
    if steps:
        last = steps[-1]
        unreadable = prompts.PAPER_SET["unreadable"]
        action = last.action_read if last.action_reported else last.action.strip()
        if not action:
            action = unreadable["action"] if rule == "paper" else unreadable["project_last_action"]
        parts.append(texts["last_action"].format(action=action))
        states = prompts.PAPER_SET["final_state"].get(game or "", {})
        ending = "terminated" if last.terminated else "truncated" if last.truncated else None
        if not success and ending in states:
            parts.append(texts["final_state"].format(state=states[ending]))
    parts.append(texts["totals"].format(reward=total_return, steps=len(steps)))
    return " ".join(parts)


def paper_metrics(returns: Sequence[float], successes: Sequence[bool]) -> str:
    """The batch-metrics block of the paper request: mean first-attempt reward, success rate, batch size."""
    size = len(returns)
    return prompts.PAPER_SET["metrics"].format(average=sum(returns) / size, success_rate=sum(successes) / size,
                                               size=size)


def board_of(observation: str) -> str:
    """The board of a grid observation (its rows of tab-ended cells), without the lines about the turn; the whole
    text when it holds no such rows."""
    rows = [line for line in observation.split("\n") if "\t" in line]
    return "\n".join(rows) if rows else observation


def compact_grid(grid: str) -> str:
    """A grid observation (cells ``" S \t"``) as rows of bare symbols, e.g. ``EEEE`` / ``EADE``."""
    return "\n".join(row.replace("\t", "").replace(" ", "") for row in grid.split("\n"))


def paper_task(game: str | None, seed: int | None, info: dict, max_steps: int | None) -> str:
    """The task line of the paper request: FrozenLake's seed, size and p; Sokoban's level name (its size, then its
    goal, box and player cells, as the paper's layout names are written) and its starting board in compact symbols;
    "" for another game."""
    template = prompts.PAPER_SET["task"].get(game or "")
    if template is None:
        return ""
    if game == "FrozenLake":
        p = info.get("p")
        return template.format(seed=seed, size=info.get("size"), p="none (a given map)" if p is None else p)
    layout = compact_grid(str(info.get("task_text", "")))
    rows = layout.split("\n")
    cells = lambda mark, items: "_".join(f"{mark}{r}{c}" for r, c in items)  # noqa: E731
    name = (f"sokoban_{len(rows)}x{max(map(len, rows))}_{cells('g', info.get('goals', ()))}_"
            f"{cells('b', info.get('boxes', ()))}_{cells('p', [info['position']] if 'position' in info else [])}")
    return template.format(name=name, max_steps=max_steps, layout=layout)


def board_lines(observation: str, max_chars: int | None = DEFAULT_MAX_FIELD_CHARS) -> str:
    """The grid of a grid game's observation (its tab-separated rows) without the notices and counters around it;
    an observation with no such row is returned whole (clipped)."""
    rows = [line for line in observation.split("\n") if "\t" in line]
    return clip_text("\n".join(rows) if rows else observation, max_chars)


def format_small_trace(steps: Sequence[TraceStep], final_observation: str, total_return: float, feedback: str,
                       max_field_chars: int | None = DEFAULT_MAX_FIELD_CHARS) -> str:
    """The attempt as the small-model set writes it: the start board, one line per move (the move as the env read
    it and what it did), the end board and the outcome. Every step's board is left out: a small model copies it."""
    texts = prompts.SMALL_SET
    moves = []
    for i, step in enumerate(steps):
        if step.action_reported:
            action = step.action_read or texts["no_move"]
        else:
            action = clip_text(step.action, 200) if step.action.strip() else texts["no_move"]
        moves.append(texts["move"].format(index=i + 1, action=action, comment=step.comment))
    first = steps[0].observation if steps else final_observation
    return texts["trace"].format(
        first_board=board_lines(first, max_field_chars),
        moves="\n".join(moves),
        final_board=board_lines(final_observation, max_field_chars),
        feedback=feedback,
        total_return=f"{total_return:g}",
    )


@dataclass(frozen=True)
class ReflectionRequest:
    """Everything a reflector may use: the messages the agent would see, and the trace as data.

    ``text`` is the reflect phase's observation (base prompt, trace, outcome) and ``system_prompt`` its system
    prompt (the reflection instructions of the env's style). ``symbols`` is the env's SymbolSet when it has one.
    """

    text: str
    system_prompt: str
    base_prompt: str
    style: str
    steps: tuple[TraceStep, ...]
    final_observation: str
    total_return: float
    success: bool
    feedback: str
    task_id: str = ""
    task_text: str = ""
    symbols: SymbolSet | None = None

    def messages(self) -> list[dict[str, str]]:
        """The chat a model reflects in: the reflection instructions as system, the request as user."""
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self.text}]

    def __str__(self) -> str:
        return self.text
