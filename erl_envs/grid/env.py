"""The logic FrozenLake and Sokoban share: text spaces, step budget, action parsing policy, counters, info, rendering.

A grid game only has to say how a move changes its level and what its tiles are; everything an agent or the
reflection wrapper sees about turns (the observation layout, the notices, the counters, the feedback lines) lives
here so that both games speak exactly the same text protocol (``erl_envs.protocol``).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping
from typing import Any, NamedTuple

import gymnasium as gym

from erl_envs.grid import prompts as prompt_texts  # (``prompts`` is the name of the prompt-set argument)
from erl_envs.grid.actions import ACTION_FORMATS, ACTION_NAMES, GridAction, format_action, parse_actions
from erl_envs.grid.text import GridRenderer, SymbolSet, resolve_symbols
from erl_envs.protocol import TEXT_CHARSET, BoundedText, FreeText

__all__ = [
    "GridTextEnv",
    "MoveOutcome",
    "INVALID_ACTION_POLICIES",
    "MAX_STEPS_LIMIT",
    "ACTION_MAX_LENGTH",
    "check_grid_size",
]

# --- Every line a grid env writes about a turn. None names a symbol, so they read the same under any SymbolSet. ---

# The lenient set's lines (prompts.GRID_STEP_LINES); an env reads its own set's lines from prompts.step_lines.
NOT_SOLVED_LINE = prompt_texts.GRID_STEP_LINES["not_solved"]
NO_EFFECT_NOTICE = prompt_texts.GRID_STEP_LINES["no_effect"]
SOME_NO_EFFECT_NOTICE = prompt_texts.GRID_STEP_LINES["some_no_effect"]
PARSE_ERROR_NOTICE = prompt_texts.GRID_STEP_LINES["parse_error"]
STEPS_LEFT_LINE = prompt_texts.GRID_STEP_LINES["steps_left"]

# One-line comments of a turn (info["feedback"]) that are not about a particular game's dynamics.
FEEDBACK_RESET = "the episode started"
FEEDBACK_UNPARSED = "could not parse the action"
FEEDBACK_UNPARSED_TERMINATE = "could not parse the action, which ended the episode"

# Default one-line outcomes (info["episode_feedback"]) by end reason; subclasses override "success" and "failure".
EPISODE_FEEDBACK = {
    "success": "Solved the task.",
    "failure": "The episode ended without solving the task.",
    "step_limit": "Hit the max step limit before solving the task.",
    "no_valid_actions": "No valid actions: none of the actions in the episode could be parsed.",
    "invalid_action": "Gave an action that could not be parsed, which ended the episode.",
}

INVALID_ACTION_POLICIES = ("noop", "terminate")
# A step budget is counted in the observation text; the bound keeps the observation space finite and honest.
MAX_STEPS_LIMIT = 1_000_000
# Replies are free text; the parser only reads the last block, so a long reply is fine but the space needs a bound.
ACTION_MAX_LENGTH = 4096

_BASE_OPTIONS = frozenset({"max_steps"})


def check_grid_size(value: Any, max_shape: tuple[int, int], what: str) -> None:
    """Refuse a grid given at reset (one string with newlines, a sequence of rows, or an array) with more rows or
    longer rows than ``max_shape``, before any cell of it is read: a served env takes levels from any client, and
    checking, searching and solving a level cost more than its size. Anything else is left to the game's parser."""
    rows, cols = max_shape
    allowed = f"{rows} per side" if rows == cols else f"{rows} rows of {cols} cells"
    fix = f"this env takes {what}s up to {allowed} (build it with a larger size to allow bigger ones)"
    if isinstance(value, str):
        limit = (rows + 2) * (cols + 2)  # every row ended by a line break, blank lines around
        if len(value) > limit:
            raise ValueError(f"the {what} is {len(value):,} characters long, more than fits {rows}x{cols}; {fix}")
        return
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) == 2 and (shape[0] > rows or shape[1] > cols):
        raise ValueError(f"the {what} is {shape[0]}x{shape[1]}; {fix}")
    if isinstance(value, (list, tuple)) or shape is not None:
        if len(value) > rows:
            raise ValueError(f"the {what} has {len(value):,} rows; {fix}")
        for i, row in enumerate(value):
            if isinstance(row, (str, bytes)) and len(row) > cols:
                raise ValueError(f"row {i} of the {what} has {len(row):,} cells; {fix}")


def _is_moved_notice(notice: str | None, lines: Mapping[str, str | None]) -> bool:
    """Whether ``notice`` is the prompt set's comment on a move that worked (not shown once the episode is over)."""
    return notice is not None and notice is lines["moved"]


class MoveOutcome(NamedTuple):
    """What one move did; ``_apply_move`` may return this or any plain 4-tuple in this order."""

    took_effect: bool
    reward: float
    terminated: bool
    comment: str


def _check_steps(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if not 1 <= value <= MAX_STEPS_LIMIT:
        raise ValueError(f"{name} must be between 1 and {MAX_STEPS_LIMIT}, got {value}")
    return value


class GridTextEnv(gym.Env[str, str]):
    """Base class of the text grid games: one move (or a few) per turn, a step budget, and text in and out.

    Subclasses (``FrozenLakeTextEnv``, ``SokobanTextEnv``) implement the game; this class owns the turn protocol.

    Turn protocol
    -------------
    ``step(action)`` takes a ``str`` (anything else raises ``TypeError`` naming the type) and parses it with
    ``erl_envs.grid.actions.parse_actions(action, action_format, max_actions_per_turn)``: ``action_format="paper"``
    (default) is the reference code's rule, one move per reply; ``"lenient"`` is ours (see ``erl_envs.grid.actions``).

    * Parsed moves are applied in order with ``_apply_move``; each uses one step of the budget; application stops
      when a move terminates the episode or the budget runs out (the remaining moves of the turn are dropped).
    * An unparseable reply uses one step and changes nothing (``invalid_action="noop"``, the paper's rule) or ends
      the episode with reward 0 (``invalid_action="terminate"``).
    * When the steps used reach the budget without termination, ``truncated`` is True.
    * Stepping after the episode ended, or before the first reset, raises ``gymnasium.error.ResetNeeded``.

    Observation layout: the grid (cells ``" S \\t"``, rows joined by ``"\\n"``), then a notice line if the last
    reply could not be parsed or a move had no effect, then ``NOT_SOLVED_LINE`` while the episode goes on, then
    ``"Steps remaining: N"``. The first observation is the grid and the steps line. All lines are module constants.

    Vector envs: ``gymnasium.make_vec(id, n, vectorization_mode="sync" | "async")`` works with Gymnasium's defaults.
    The observation space is ``erl_envs.protocol.BoundedText``, whose shared-memory slots are read afresh on every
    access (Gymnasium 1.4 reads a plain ``Text`` buffer once, at construction, so every later batch would repeat that
    stale, empty text).

    Subclass contract
    -----------------
    Class attributes to set:

    * ``symbol_presets: Mapping[str, SymbolSet]``: the presets ``symbols=`` may name (e.g. ``FROZEN_LAKE_SYMBOLS``);
      a dict or SymbolSet argument must name exactly the tile kinds of these presets.
    * ``level_options: frozenset[str]``: the reset option keys the subclass understands (``max_steps`` is the
      base's own); any other key raises ``ValueError`` listing the allowed keys.
    * ``task_prefix: str``: prefix of ``info["task_id"]`` (e.g. ``"frozenlake"``).
    * ``rules_text: str``: plain rules appended to the instructions when ``reveal_rules=True``; may use
      ``{max_steps}``; must not name symbol characters (the legend of the SymbolSet is listed separately).
    * ``episode_feedback_lines: Mapping[str, str]``: outcome lines by end reason, merged over ``EPISODE_FEEDBACK``
      (keys ``success``, ``failure``, ``step_limit``, ``no_valid_actions``, ``invalid_action``).

    ``__init__`` must call ``super().__init__(render_mode=..., max_grid_shape=(rows, cols), max_steps=...,
    symbols=..., invalid_action=..., max_actions_per_turn=..., reveal_rules=..., instructions=...)``, where
    ``max_grid_shape`` bounds every grid the env can show (it sizes ``observation_space``; ``reset`` raises
    ``ValueError`` for a bigger level). After it returns, ``self.symbols`` (the resolved SymbolSet),
    ``self.np_random`` and ``self.max_steps`` are usable.

    Methods to implement (called by ``reset``/``step``/``render``; none of them should touch the counters):

    * ``_new_level(options: dict) -> None``: build the episode's level from ``self.np_random`` and ``options`` (only
      keys in ``level_options`` are passed; values unchecked, so raise ``ValueError`` for bad ones).
      ``self.episode_max_steps`` already holds this episode's budget.
    * ``_apply_move(action: GridAction) -> MoveOutcome``: apply one move to the current state and return
      ``(took_effect, reward, terminated, comment)``; ``comment`` is a short lowercase phrase such as
      ``"moved Left"`` or ``"did not move"``.
    * ``_is_success() -> bool``: whether the current state solves the task (read after a terminating move).
    * ``_tile_kinds() -> list[list[str]]``: the current grid as tile-kind names of ``self.symbols`` (row-major);
      used for the text grid and for the pygame drawing.
    * ``_level_text() -> str``: symbol-independent canonical text of the current level at its start (e.g. the
      XSB rows); its sha1 makes ``info["task_id"]`` = ``f"{task_prefix}-{sha1[:16]}"``. Called once per reset.
    * ``_optimal_steps() -> int | None``: length of a shortest solution of the level (``None`` if none is known).
      Called once per reset, right after ``_new_level``.
    * ``_extra_info() -> dict``: game-specific info keys, a new dict each call (no shared mutable values).

    Optional overrides: ``_render_grid() -> str`` (default ``self.renderer.render(self._tile_kinds())``; called
    after reset and after every turn that took effect; override for speed), ``_grid_shape() -> (rows, cols)``
    (default: from ``_tile_kinds()``; checked against ``max_grid_shape`` once per reset),
    ``_episode_feedback(reason: str) -> str`` (default: ``episode_feedback_lines[reason]``),
    ``_level_digest() -> str`` (default: the sha1 hex digest of ``_level_text()``; override when the level already
    knows it, to skip hashing it again).

    Public attributes: ``instructions``, ``prompt_style = "grid"``, ``symbols``, ``renderer`` (GridRenderer),
    ``valid_actions`` (the four canonical replies, ``format_action(a)`` for a in 0..3), ``max_steps``,
    ``episode_max_steps``, ``invalid_action``, ``max_actions_per_turn``, ``action_format``, ``reveal_rules``;
    read-only properties
    ``steps_used``, ``steps_left``, ``episode_over``, ``grid_text``.

    Info keys (every reset and step): ``success``, ``steps_used``, ``steps_left``, ``took_effect``, ``feedback``,
    ``parse_errors`` (turns whose reply could not be parsed), ``no_effect_moves`` (parsed moves that changed
    nothing), ``optimal_steps``, ``task_id``, ``task_text`` (the first observation's grid); on steps
    ``action_read`` (the move names read from the reply, comma-separated, or None for an unreadable reply); on the
    last step also ``episode_feedback``; plus the subclass's ``_extra_info()``.
    """

    metadata = {"render_modes": ["ansi", "rgb_array", "human"], "render_fps": 4}
    prompt_style = "grid"
    game_name = ""  # the game's name, which the paper prompt set uses ("FrozenLake", "Sokoban")

    symbol_presets: Mapping[str, SymbolSet] = {}
    level_options: frozenset[str] = frozenset()
    task_prefix = "grid"
    rules_text = ""
    episode_feedback_lines: Mapping[str, str] = {}

    def __init__(
        self,
        render_mode: str | None = None,
        *,
        max_grid_shape: tuple[int, int],
        max_steps: int = 8,
        symbols: str | SymbolSet | Mapping[str, str] = "abstract",
        invalid_action: str = "noop",
        max_actions_per_turn: int = 1,
        reveal_rules: bool = False,
        instructions: str | None = None,
        action_format: str = "paper",
        prompts: str = "lenient",
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        if invalid_action not in INVALID_ACTION_POLICIES:
            raise ValueError(f"invalid_action must be one of {list(INVALID_ACTION_POLICIES)}, got {invalid_action!r}")
        rows, cols = (int(n) for n in max_grid_shape)
        if rows < 1 or cols < 1:
            raise ValueError(f"max_grid_shape must be positive, got {max_grid_shape}")
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be a str or None, got {type(instructions).__name__}")
        if prompts not in prompt_texts.PROMPT_SETS:
            raise ValueError(f"prompts must be one of {list(prompt_texts.PROMPT_SETS)}, got {prompts!r}")
        if action_format not in ACTION_FORMATS:
            raise ValueError(f"action_format must be one of {list(ACTION_FORMATS)}, got {action_format!r}")
        if action_format == "paper" and max_actions_per_turn != 1:
            raise ValueError(f"max_actions_per_turn={max_actions_per_turn} needs action_format='lenient': the "
                             f"paper's format reads exactly one move per reply")

        self.render_mode = render_mode
        self.max_steps = _check_steps(max_steps, "max_steps")
        self.episode_max_steps = self.max_steps
        self.max_actions_per_turn = _check_steps(max_actions_per_turn, "max_actions_per_turn")
        self.action_format = action_format
        self.prompt_set = prompts
        self._lines = prompt_texts.step_lines(prompts, self.game_name)
        self._moves_shown = prompt_texts.moves_shown(prompts, self.game_name)
        self.invalid_action = invalid_action
        self.reveal_rules = bool(reveal_rules)
        self.max_grid_shape = (rows, cols)
        self.symbols = resolve_symbols(symbols, self.symbol_presets)
        self.renderer = GridRenderer(self.symbols)
        self.valid_actions = [format_action(a) for a in range(len(ACTION_NAMES))]
        # The commonest replies, parsed once: a dict lookup instead of three regexes on the hot path. Built with the
        # parser itself, so the shortcut can never disagree with it.
        self._known_replies = {
            text: tuple(moves)
            for text in self.valid_actions + [n for name in ACTION_NAMES for n in (name, name.lower(), name.upper())]
            if (moves := self._parse(text)) is not None
        }
        self._feedback_lines = {**EPISODE_FEEDBACK, **self.episode_feedback_lines}

        base = prompt_texts.instructions(prompts, self.game_name) if instructions is None else instructions
        self.instructions = base + self._rules_appendix() if self.reveal_rules else base

        self.observation_space = BoundedText(
            min_length=0, max_length=self._max_observation_length(rows, cols), charset=TEXT_CHARSET
        )
        # step reads any str (a malformed reply is an ordinary step), so every str is in the action space;
        # ACTION_MAX_LENGTH and the charset only shape sample().
        self.action_space = FreeText(min_length=0, max_length=ACTION_MAX_LENGTH, charset=TEXT_CHARSET)

        self._painter = None
        self._started = False
        self._done = True
        self._steps_used = 0
        self._turns = 0
        self._parse_errors = 0
        self._no_effect_moves = 0
        self._grid_text = ""
        self._task_id = ""
        self._task_text = ""
        self._optimal: int | None = None

    # ------------------------------------------------------------------ the Gymnasium API

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        # A reset that fails on a bad option must not leave a half-built level steppable.
        self._started = False
        self._done = True
        options = self._checked_options(options)
        self.episode_max_steps = (
            _check_steps(options.pop("max_steps"), "max_steps option") if "max_steps" in options else self.max_steps
        )
        self._new_level(options)
        self._check_grid_fits()

        self._started = True
        self._done = False
        self._steps_used = 0
        self._turns = 0
        self._parse_errors = 0
        self._no_effect_moves = 0
        self._grid_text = self._render_grid()
        self._task_text = self._grid_text
        self._task_id = f"{self.task_prefix}-{self._level_digest()[:16]}"
        self._optimal = self._optimal_steps()

        obs = self._observation(None, False)
        info = self._info(False, FEEDBACK_RESET)
        if self.render_mode == "human":
            self.render()
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not isinstance(action, str):
            raise TypeError(
                f"an action must be a str (the agent's reply text), got {type(action).__name__}; "
                f"e.g. env.step({self.valid_actions[0]!r})"
            )
        if self._done:
            raise gym.error.ResetNeeded(
                "step() was called after the episode ended (or before the first reset()); call reset() first"
            )
        budget = self.episode_max_steps
        moves = self._known_replies.get(action)
        if moves is None:
            moves = self._parse(action)
        self._turns += 1
        reward = 0.0
        terminated = False
        end_reason = None

        if moves is None:
            self._parse_errors += 1
            self._steps_used += 1
            took_effect = False
            notice = self._lines["parse_error"]
            if self.invalid_action == "terminate":
                terminated = True
                end_reason = "invalid_action"
                comment = FEEDBACK_UNPARSED_TERMINATE
            else:
                comment = FEEDBACK_UNPARSED
        else:
            took_effect = False
            no_effect = 0
            comments = []
            for move in moves:
                if self._steps_used >= budget:
                    break
                moved, move_reward, move_terminated, move_comment = self._apply_move(move)
                self._steps_used += 1
                reward += move_reward
                comments.append(move_comment)
                if moved:
                    took_effect = True
                else:
                    no_effect += 1
                if move_terminated:
                    terminated = True
                    end_reason = "success" if self._is_success() else "failure"
                    break
            self._no_effect_moves += no_effect
            comment = comments[0] if len(comments) == 1 else "; ".join(comments)
            if no_effect == 0:
                notice = self._lines["moved"]  # None unless the prompt set comments on moves that worked
            else:
                notice = self._lines["no_effect"] if no_effect == len(comments) else self._lines["some_no_effect"]
            if took_effect:
                self._grid_text = self._render_grid()

        truncated = not terminated and self._steps_used >= budget
        done = terminated or truncated
        if truncated:
            end_reason = "no_valid_actions" if self._parse_errors == self._turns else "step_limit"
        self._done = done
        if done and _is_moved_notice(notice, self._lines):
            notice = None  # nothing to plan after the last turn

        obs = self._observation(notice, done)

        info = self._info(took_effect, comment)
        # The move(s) as read from the reply, for traces: what the paper's reflection request lists per step.
        info["action_read"] = None if moves is None else ", ".join(ACTION_NAMES[m] for m in moves)
        if done:
            info["success"] = end_reason == "success"
            info["episode_feedback"] = self._episode_feedback(end_reason)
        if self.render_mode == "human":
            self.render()
        return obs, reward, terminated, truncated, info

    def _observation(self, notice: str | None, done: bool) -> str:
        """The grid, a notice about the last reply, the goal line while the episode goes on, the budget line. The
        lenient set shows no goal line on the first turn; the paper set heads it with the turn index and puts the
        goal line right under the board, every turn."""
        lines = self._lines
        budget = self.episode_max_steps - self._steps_used if self._moves_shown is None \
            else self._moves_shown - self._turns
        if lines["turn"] is None:
            parts = [self._grid_text]
            if notice is not None:
                parts.append(notice)
            if not done and self._turns:
                parts.append(lines["not_solved"])
        else:
            parts = [lines["turn"].format(self._turns), self._grid_text]
            if not done:
                parts.append(lines["not_solved"])
            if notice is not None:
                parts.append(notice)
        parts.append(lines["steps_left"].format(budget))
        return "\n".join(parts)

    def render(self):
        if self.render_mode is None:
            gym.logger.warn(
                "render() was called without a render_mode; pass render_mode='ansi', 'rgb_array' or 'human' "
                "when building the env"
            )
            return None
        if self.render_mode == "ansi":
            return self._render_text()
        return self._render_gui(self.render_mode)

    def close(self) -> None:
        if self._painter is not None:
            self._painter.close()
            self._painter = None

    # ------------------------------------------------------------------ state read by tools and tests

    @property
    def steps_used(self) -> int:
        return self._steps_used

    @property
    def steps_left(self) -> int:
        return self.episode_max_steps - self._steps_used

    @property
    def episode_over(self) -> bool:
        return self._done

    @property
    def grid_text(self) -> str:
        """The current grid as text (what ``render()`` returns in ``ansi`` mode)."""
        return self._grid_text

    # ------------------------------------------------------------------ internals

    def _parse(self, reply: str) -> list[GridAction] | None:
        return parse_actions(reply, self.action_format, self.max_actions_per_turn)

    def _render_text(self) -> str:
        if not self._started:
            raise gym.error.ResetNeeded("render() needs a level: call reset() first")
        return self._grid_text

    def _render_gui(self, mode: str):
        if not self._started:
            raise gym.error.ResetNeeded("render() needs a level: call reset() first")
        if self._painter is None:
            from erl_envs.grid.render import GridPainter

            self._painter = GridPainter()
        kinds = self._tile_kinds()
        if mode == "rgb_array":
            return self._painter.rgb_array(kinds)
        self._painter.show(kinds, self.metadata["render_fps"], caption=type(self).__name__)
        return None

    def _render_grid(self) -> str:
        return self.renderer.render(self._tile_kinds())

    def _episode_feedback(self, reason: str) -> str:
        return self._feedback_lines[reason]

    def _level_digest(self) -> str:
        return hashlib.sha1(self._level_text().encode()).hexdigest()

    def _info(self, took_effect: bool, feedback: str) -> dict:
        info = {
            "success": False,
            "steps_used": self._steps_used,
            "steps_left": self.episode_max_steps - self._steps_used,
            "took_effect": took_effect,
            "feedback": feedback,
            "parse_errors": self._parse_errors,
            "no_effect_moves": self._no_effect_moves,
            "optimal_steps": self._optimal,
            "task_id": self._task_id,
            "task_text": self._task_text,
        }
        info.update(self._extra_info())
        return info

    def _checked_options(self, options: Mapping[str, Any] | None) -> dict:
        if options is None:
            return {}
        if not isinstance(options, Mapping):
            raise TypeError(f"reset options must be a dict or None, got {type(options).__name__}")
        allowed = _BASE_OPTIONS | self.level_options
        unknown = [key for key in options if key not in allowed]
        if unknown:
            raise ValueError(f"unknown reset option {unknown[0]!r}; allowed options are {sorted(allowed)}")
        return dict(options)

    def _grid_shape(self) -> tuple[int, int]:
        kinds = self._tile_kinds()
        return len(kinds), max((len(r) for r in kinds), default=0)

    def _check_grid_fits(self) -> None:
        rows, cols = self._grid_shape()
        max_rows, max_cols = self.max_grid_shape
        if rows > max_rows or cols > max_cols:
            raise ValueError(
                f"the level is {rows}x{cols} but this env was built for grids up to {max_rows}x{max_cols} "
                f"(its observation space is sized from that); build the env for bigger levels"
            )

    def _rules_appendix(self) -> str:
        legend = self.symbols.legend
        symbol_lines = "\n".join(
            f"- {char}: {legend.get(kind, kind.replace('_', ' '))}" for kind, char in self.symbols.symbols.items()
        )
        rules = self.rules_text.format(max_steps=self.max_steps)
        actions = ", ".join(ACTION_NAMES)
        return f"\n\nSymbols:\n{symbol_lines}\nActions: {actions}.\nRules: {rules}"

    def _max_observation_length(self, rows: int, cols: int) -> int:
        grid = rows * cols * len(self.renderer.cell(next(iter(self.symbols.symbols)))) + (rows - 1)
        lines = self._lines
        notice = max(len(lines[key] or "") for key in ("no_effect", "some_no_effect", "parse_error", "moved"))
        steps = len(lines["steps_left"].format(-MAX_STEPS_LIMIT))
        turn = len(lines["turn"].format(MAX_STEPS_LIMIT)) + 1 if lines["turn"] else 0
        return turn + grid + 1 + notice + 1 + len(lines["not_solved"]) + 1 + steps

    # ------------------------------------------------------------------ the game: subclasses implement these

    def _new_level(self, options: dict) -> None:
        raise NotImplementedError

    def _apply_move(self, action: GridAction) -> MoveOutcome:
        raise NotImplementedError

    def _is_success(self) -> bool:
        raise NotImplementedError

    def _tile_kinds(self) -> list[list[str]]:
        raise NotImplementedError

    def _level_text(self) -> str:
        raise NotImplementedError

    def _optimal_steps(self) -> int | None:
        raise NotImplementedError

    def _extra_info(self) -> dict:
        return {}
