"""ERL-Sokoban-v0: Sokoban as text with abstract symbols and an 8-step budget (the ERL paper's setting)."""

from __future__ import annotations

import hashlib
import operator
import os
from functools import lru_cache
from os import PathLike
from typing import Any, Mapping, NamedTuple, Sequence

from erl_envs.grid import draws
from erl_envs.grid.actions import ACTION_NAMES, GridAction
from erl_envs.grid.env import GridTextEnv, MoveOutcome, check_grid_size
from erl_envs.grid.sokoban_generator import (PAPER_SIZES, GenerationError, check_generation_settings, open_room_moves,
                                             sample_level)
from erl_envs.grid.sokoban_levels import (PUSHED, SokobanLevel, apply_move, check_playable, corner_cells, load_levels,
                                          parse_level)
from erl_envs.grid.sokoban_solver import solution_stats
from erl_envs.grid.text import SOKOBAN_SYMBOLS, SymbolSet
from erl_envs.paper_tasks import sokoban_test_layouts

__all__ = ["SokobanTextEnv", "MAX_LEVEL_SIDE", "GENERATOR_OPTIONS", "OPTION_LIMITS", "sokoban_test_keys"]

# Levels given at reset may be this big even when the env itself plays smaller ones: the observation space is
# sized for max(this, the largest level of the collection or of the generator's size).
MAX_LEVEL_SIDE = 20
GENERATOR_OPTIONS = ("size", "num_boxes", "interior_walls", "min_moves", "max_moves")
# Generator settings that reset options ask for are bounded (a served env takes options from any client): more boxes
# or longer solutions than these cost minutes to generate. The settings an env is built with are not limited.
OPTION_LIMITS = {"num_boxes": 8, "max_moves": 200}
# Optimal lengths of levels from a collection or a reset option are remembered up to this many levels.
_OPTIMAL_CACHE_SIZE = 100_000
# What a move did, by direction: built once, since it depends on nothing else.
_BLOCKED = tuple(
    MoveOutcome(False, 0.0, False, f"tried {name}, did not move (wall or blocked push)") for name in ACTION_NAMES
)
_WALKED = tuple(MoveOutcome(True, 0.0, False, f"moved {name}") for name in ACTION_NAMES)
_PUSHED = tuple(MoveOutcome(True, 0.0, False, f"pushed {name}") for name in ACTION_NAMES)
_SOLVED = tuple(MoveOutcome(True, 1.0, True, f"pushed {name} and solved the puzzle") for name in ACTION_NAMES)
# A generated level equal to an excluded one is redrawn, up to this many times in a row.
_EXCLUDED_REDRAWS = 1000
# Empty rooms are remembered up to this many (the paper's generator makes 77: one per goal cell of its 3 rooms).
_ROOM_CACHE_SIZE = 4096


class _EmptyRoom(NamedTuple):
    """What never changes in a level's room: kept per room, since generated levels keep coming back to the same ones.

    The boxes and the player are written over ``text`` (the grid the agent sees) and ``xsb`` (the level's XSB text,
    whose sha1 is ``SokobanLevel.key``); every cell sits at a fixed offset in both.
    """

    corners: frozenset  # floor cells, not goals, with walls on two sides (the deadlock flag)
    kinds: tuple[tuple[str, ...], ...]  # tile kinds, row by row
    text: bytes  # the rendered grid
    xsb: bytes  # XSB rows, right-stripped and joined by newlines as in SokobanLevel.to_xsb
    xsb_row_starts: tuple[int, ...]


def _level_key(level: SokobanLevel, room: _EmptyRoom) -> str:
    """``level.key`` (the sha1 of its XSB text), from its room's XSB text rather than building it cell by cell."""
    xsb, starts = bytearray(room.xsb), room.xsb_row_starts
    for r, c in level.boxes:
        xsb[starts[r] + c] = ord("*" if (r, c) in level.targets else "$")
    r, c = level.player
    xsb[starts[r] + c] = ord("+" if level.player in level.targets else "@")
    return hashlib.sha1(xsb).hexdigest()


@lru_cache(maxsize=1)
def sokoban_test_keys() -> frozenset[str]:
    """``SokobanLevel.key`` of every paper test layout: what generated training levels must never equal."""
    return frozenset(parse_level(rows).key for rows in sokoban_test_layouts())


def _load_file(path: str | PathLike) -> list[SokobanLevel]:
    """``load_levels(path)``, loaded once per file version: a trainer builds hundreds of envs on the same file (the
    paper's 10,000 train layouts take seconds to check), and levels are immutable, so the envs can share them."""
    try:
        stat = os.stat(path)
    except OSError:
        return load_levels(path)  # let it name the problem
    return list(_load_file_version(os.path.abspath(path), stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=8)
def _load_file_version(path: str, mtime_ns: int, size: int) -> tuple[SokobanLevel, ...]:
    return tuple(load_levels(path))


def _coerce_level(value: Any, what: str) -> SokobanLevel:
    """A level given in code (a reset option or an item of ``levels=``), checked as a level file's are."""
    try:
        return check_playable(value if isinstance(value, SokobanLevel) else parse_level(value))
    except ValueError as err:
        raise type(err)(f"{what}: {err}") from None


class SokobanTextEnv(GridTextEnv):
    """Push every box onto a goal in a walled room, reading the board and writing moves as text.

    ## Description
    The player walks a grid room and pushes boxes (never pulls them) onto goal cells. The ERL paper plays it with
    abstract letters for the tiles and reveals no rules: the model works out from its own moves which letter is
    itself, which are boxes and goals, and how pushing works. Its levels are tiny (one box, at most 8 moves) but
    most first attempts still fail, which is what makes Sokoban the paper's clearest case for reflection.

    ## Action Space
    ``FreeText`` (``contains`` is true of every str: ``step`` reads any).
    ``Text``: the agent's whole reply. ``action_format="paper"`` (default, the reference code's rule): the last
    triple-backtick block, stripped and lower-cased, must be exactly ``up``, ``down``, ``left`` or ``right``, or a
    number 1-4 read as 1 Left, 2 Down, 3 Right, 4 Up. ``action_format="lenient"`` (ours): also an ``<answer>``
    tag or the bare reply, aliases, and with ``max_actions_per_turn=k`` up to k moves per reply, digits 1-4 in
    Up/Down/Left/Right order (see ``erl_envs.grid.actions``). ``self.valid_actions`` lists the canonical replies,
    valid in both. A reply that cannot be parsed is an invalid action (see Rewards / Episode End).

    ## Observation Space
    ``BoundedText`` (async vector envs carry it through shared memory).
    ``Text``: the grid, one row per line, each cell written ``" S \\t"``; then a notice if the last action had no
    effect or could not be parsed; then ``Not solved yet. Give your next action.`` while the episode goes on; then
    ``Steps remaining: N``. The first observation is the grid and the steps line.

    ## Starting State
    By default a level from ``generate_level`` drawn with ``self.np_random``: a square room of side 6, 7 or 8
    (walls included) in the proportions of the paper's train set (11/38/51%), an open interior, one box and one
    goal, player, box and goal on distinct random cells, kept only if the fewest-moves solution has 1 to
    ``max_steps`` (8) moves, and redrawn if it equals one of ``exclude`` (default: the paper's 100 test layouts, so
    training never sees a test level). With ``levels=`` the level is drawn uniformly from that collection instead
    (``self.np_random.integers(len(levels))``).

    ## Rewards
    1 on the move that puts the last box on a goal; 0 for everything else (moving, pushing, bumping into a wall or
    a blocked box, invalid actions).

    ## Episode End
    Terminated when every box is on a goal (or, with ``invalid_action="terminate"``, on an unparseable reply);
    truncated when the step budget (``max_steps``, 8) is used up. A deadlock (a box stuck in a corner off its goal)
    does not end the episode, as in the paper; ``info["deadlock"]`` reports it.

    ## Information
    Every ``reset``/``step`` info holds the ``GridTextEnv`` keys (``success``, ``steps_used``, ``steps_left``,
    ``took_effect``, ``feedback``, ``parse_errors``, ``no_effect_moves``, ``optimal_steps``, ``task_id``
    (``"sokoban-"`` + sha1 of the XSB rows), ``task_text``) and: ``boxes_on_target``, ``num_boxes``, ``deadlock``
    (a box off-goal in a corner: the level can no longer be solved), ``level_key`` (sha1 of the level's XSB text,
    ``SokobanLevel.key``), ``level_index`` (position in the collection, else ``None``), ``position`` (the player's
    (row, col)), ``boxes`` and ``goals`` (their cells, sorted). ``feedback`` is ``"moved Left"``, ``"pushed Left"``,
    ``"pushed Left and solved the puzzle"``, ``"tried Left, did not move (wall or blocked push)"`` or ``"could not
    parse the action"``. The last step adds
    ``episode_feedback``: ``Solved the puzzle.``, ``Hit the max step limit before solving the puzzle.`` or ``No
    valid actions: ...``. ``optimal_steps`` is the solver's fewest moves from the start (``None`` if the level is
    unsolvable or too big for ``solver_max_states``).

    ## Arguments
    ``render_mode`` (``"ansi"``, ``"rgb_array"``, ``"human"`` or None); ``max_steps=8``; ``symbols="abstract"``
    (``"xsb"``, a dict of tile kind -> char, or a ``SymbolSet``); ``levels=None`` (a level file path, see
    ``load_levels``, or a sequence of levels, each an XSB string, a list of rows or a ``SokobanLevel``);
    generator settings ``size=None`` (the paper's train mix of 6, 7 and 8; ``"uniform"``: the three equally often,
    erl-gym's earlier default; an int or (height, width)), ``num_boxes=1``,
    ``interior_walls=0.0``, ``min_moves=1``, ``max_moves=None`` (the episode's step budget); ``solver_max_states``
    (200,000: budget of the solver behind ``optimal_steps``); ``invalid_action="noop"`` (or ``"terminate"``);
    ``max_actions_per_turn=1`` (more needs ``action_format="lenient"``); ``action_format="paper"``;
    ``reveal_rules=False``; ``instructions=None`` (default ``prompts.GRID_INSTRUCTIONS``); ``exclude="paper-test"``
    (levels generation never returns: the packaged paper test set, None, or a sequence of levels).
    Reset options: ``level`` (one explicit level), ``level_index`` (into ``levels``), the generator settings above
    (this reset only; not with ``levels``), ``max_steps`` (this episode only). Levels up to
    ``max(20, the largest level or size set at construction)`` per side fit.

    ## Text format
    The level ``["#####", "#@$.#", "#####"]`` (player, box, goal in a row) with abstract symbols, at reset::

         E 	 E 	 E 	 E 	 E 	
         E 	 A 	 B 	 C 	 E 	
         E 	 E 	 E 	 E 	 E 	
        Steps remaining: 8

    Symbols: ``A`` player, ``a`` player on a goal, ``B`` box, ``b`` box on a goal, ``C`` goal, ``E`` wall, ``D``
    floor (``symbols="xsb"``: ``@ + $ * . # _``). Cells outside the outer wall are drawn as walls.

    ## Paper fidelity
    Matches: the room-size mix of the paper's train set, open interior, one box and goal on distinct uniform cells,
    optimal solution of at most 8 moves (uniform over valid layouts within a size, see ``sokoban_generator``), the
    paper's test layouts never generated (``exclude``), the abstract symbols and cell layout, the 8-step budget,
    push-only dynamics, sparse reward, unparseable replies as no-op steps, the per-step messages and the feedback
    lines; the paper's test and train layouts load directly (``levels=`` a parquet file; the test set ships with
    the package, ``erl_envs.paper_tasks``). Departs: the wording of the messages is ours; the generator is ours, so
    a seed gives a different level than the reference's data; cells outside the outer wall of a non-rectangular
    level are drawn as walls (the reference: floor). See docs/fidelity.md.

    ## Version History
    * v0: initial version.
    """

    game_name = "Sokoban"
    symbol_presets = SOKOBAN_SYMBOLS
    level_options = frozenset({"level", "level_index", *GENERATOR_OPTIONS})
    task_prefix = "sokoban"
    rules_text = (
        "Each move takes you one cell in its direction. Walking into a box pushes it one cell, but only if the cell "
        "behind it is free (not a wall, not another box); otherwise nothing moves. Boxes cannot be pulled. Walls "
        "block you. The game is won (reward 1) when every box is on a target. You have {max_steps} moves."
    )
    episode_feedback_lines = {
        "success": "Solved the puzzle.",
        "failure": "The episode ended without solving the puzzle.",
        "step_limit": "Hit the max step limit before solving the puzzle.",
    }

    def __init__(
        self,
        render_mode: str | None = None,
        max_steps: int = 8,
        symbols: str | SymbolSet | Mapping[str, str] = "abstract",
        levels: str | PathLike | Sequence[Any] | None = None,
        size: int | Sequence[int] | None = None,
        num_boxes: int = 1,
        interior_walls: float = 0.0,
        min_moves: int = 1,
        max_moves: int | None = None,
        solver_max_states: int = 200_000,
        option_solver_states: int = 20_000,
        invalid_action: str = "noop",
        max_actions_per_turn: int = 1,
        reveal_rules: bool = False,
        instructions: str | None = None,
        action_format: str = "paper",
        prompts: str = "lenient",
        exclude: str | Sequence[Any] | None = "paper-test",
    ):
        self.levels = self._load_collection(levels)
        self._exclude = self._excluded_keys(exclude)
        self.generator_settings = {
            "size": size, "num_boxes": num_boxes, "interior_walls": interior_walls,
            "min_moves": min_moves, "max_moves": max_moves,
        }
        # max_moves=None follows the episode's step budget, so a generated level is always solvable within it.
        budget = max_steps if max_moves is None else max_moves
        check_generation_settings(**{**self.generator_settings, "max_moves": budget})
        for name, value in (("solver_max_states", solver_max_states), ("option_solver_states", option_solver_states)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.solver_max_states = solver_max_states
        self.option_solver_states = option_solver_states

        rows = cols = MAX_LEVEL_SIDE
        for level in self.levels or ():
            rows, cols = max(rows, level.height), max(cols, level.width)
        gen_rows, gen_cols = self._size_bound(size)
        super().__init__(
            render_mode=render_mode,
            max_grid_shape=(max(rows, gen_rows), max(cols, gen_cols)),
            max_steps=max_steps,
            symbols=symbols,
            invalid_action=invalid_action,
            max_actions_per_turn=max_actions_per_turn,
            reveal_rules=reveal_rules,
            instructions=instructions,
            action_format=action_format,
            prompts=prompts,
        )
        # Every cell is drawn as the same characters around its symbol, so a board is its empty room's text with one
        # character replaced per box and for the player (see _render_grid).
        floor_cell = self.renderer.cell("floor")
        self._cell_width = len(floor_cell)
        self._symbol_offset = floor_cell.index(self.symbols["floor"])
        self._symbol_codes = {kind: ord(char) for kind, char in self.symbols.symbols.items()}
        self._optimal_cache: dict[str, int | None] = {}
        self._level: SokobanLevel | None = None
        self._level_index: int | None = None
        self._level_optimal: int | None = None
        self._player = (0, 0)
        self._boxes: frozenset = frozenset()
        self._room = _EmptyRoom(frozenset(), (), b"", b"", ())
        self._line_width = 0
        self._level_key = ""
        self._goals: tuple = ()
        self._rooms: dict[tuple, _EmptyRoom] = {}

    @staticmethod
    def _load_collection(levels: Any) -> list[SokobanLevel] | None:
        if levels is None:
            return None
        if isinstance(levels, (str, PathLike)):
            collection = _load_file(levels)
            where = str(levels)
        else:
            try:
                items = list(levels)
            except TypeError:
                raise TypeError(
                    f"levels must be a level file path or a sequence of levels, got {type(levels).__name__}"
                ) from None
            collection = [_coerce_level(item, f"levels[{i}]") for i, item in enumerate(items)]
            where = "levels"
        if not collection:
            raise ValueError("levels is empty: give at least one level, or None to generate levels")
        for i, level in enumerate(collection):
            if level.is_solved:
                raise ValueError(f"{where}: level {i} is already solved (every box is on a goal)")
        return collection

    @staticmethod
    def _excluded_keys(exclude: Any) -> frozenset[str]:
        """``SokobanLevel.key`` of every level that generation must not produce."""
        if exclude is None:
            return frozenset()
        if isinstance(exclude, str):
            if exclude != "paper-test":
                raise ValueError(f"exclude must be 'paper-test', None or a sequence of levels, got {exclude!r}")
            return sokoban_test_keys()
        return frozenset(_coerce_level(item, f"exclude[{i}]").key for i, item in enumerate(exclude))

    @staticmethod
    def _size_bound(size: Any) -> tuple[int, int]:
        """The largest level a (validated) generator ``size`` setting can produce."""
        if size is None or size == "uniform":
            return max(PAPER_SIZES), max(PAPER_SIZES)
        try:
            side = operator.index(size)
        except TypeError:
            height, width = size
            return int(height), int(width)
        return side, side

    # ------------------------------------------------------------------ GridTextEnv hooks

    def _new_level(self, options: dict) -> None:
        generator_keys = sorted(set(GENERATOR_OPTIONS) & set(options))
        room = key = None
        index = None
        optimal, solved = None, False  # known up front for generated levels and levels given at reset
        if "level" in options:
            clash = sorted({"level_index", *generator_keys} & set(options))
            if clash:
                raise ValueError(f"the reset option 'level' gives the whole level; do not combine it with {clash}")
            check_grid_size(options["level"], self.max_grid_shape, "level")
            level = _coerce_level(options["level"], "reset option 'level'")
            optimal, solved = self._solve(level, self.option_solver_states), True
        elif self.levels is not None:
            if generator_keys:
                raise ValueError(
                    f"this env plays levels from its collection; the generator options {generator_keys} do not "
                    f"apply (build an env without levels= to generate levels)"
                )
            if "level_index" in options:
                index = self._checked_index(options["level_index"])
            else:
                index = draws.integers(self.np_random, len(self.levels), 1)[0]  # = np_random.integers(len(levels))
            level = self.levels[index]
        else:
            if "level_index" in options:
                raise ValueError("the reset option 'level_index' needs an env built with levels=")
            settings = {**self.generator_settings, **{key: options[key] for key in generator_keys}}
            if settings["max_moves"] is None:
                settings["max_moves"] = self.episode_max_steps
            # Work that reset options ask for is bounded; the env's own settings are not limited.
            from_options = bool(generator_keys) or self.episode_max_steps != self.max_steps
            if from_options:
                self._check_option_limits(settings, generator_keys)
            if generator_keys:  # the constructor's own settings were checked when the env was built
                check_generation_settings(**settings)
                rows, cols = self._size_bound(settings["size"])
                if rows > self.max_grid_shape[0] or cols > self.max_grid_shape[1]:
                    raise ValueError(
                        f"size {settings['size']!r} is bigger than this env's largest level {self.max_grid_shape}; "
                        f"build the env with size={settings['size']!r} to allow it"
                    )
            budget = self.option_solver_states if from_options else None
            for _ in range(_EXCLUDED_REDRAWS):
                try:
                    level, optimal = sample_level(self.np_random, max_states=self.solver_max_states,
                                                  max_total_states=budget, **settings)
                    solved = True
                except GenerationError as err:
                    if budget is None:
                        raise
                    raise ValueError(f"these reset options ask for more generation work than this env allows a "
                                     f"reset: {err}") from None
                if not self._exclude:
                    break
                room = self._empty_room(level)
                key = _level_key(level, room)
                if key not in self._exclude:
                    break
            else:
                raise ValueError(f"{_EXCLUDED_REDRAWS} generated levels in a row were in exclude=; the settings "
                                 f"{settings} leave (almost) nothing else: pass other settings or exclude=None")
        if level.is_solved:
            raise ValueError("the level is already solved (every box is on a goal); give a level with work to do")

        self._level = level
        self._level_index = index
        self._level_optimal = optimal if solved else self._solve(level)
        self._player = level.player
        self._boxes = level.boxes
        if room is None or key is None:  # not already built by the exclusion check
            room = self._empty_room(level)
            key = _level_key(level, room)
        self._room = room
        self._line_width = level.width * self._cell_width + 1
        self._level_key = key
        self._goals = tuple(sorted(level.targets))

    def _check_option_limits(self, settings: dict, generator_keys: list[str]) -> None:
        """Refuse generator settings from reset options beyond ``OPTION_LIMITS``: boxes asked for, and solution
        lengths asked for or implied by a ``max_steps`` option when levels are made by reverse play (several boxes),
        whose walks grow with them."""
        implied = "max_moves" not in generator_keys and self.generator_settings["max_moves"] is None
        for name, limit in OPTION_LIMITS.items():
            value = settings[name]
            asked = name in generator_keys or (name == "max_moves" and implied and settings["num_boxes"] != 1)
            if asked and isinstance(value, int) and not isinstance(value, bool) and value > limit:
                raise ValueError(f"a reset may ask for {name} at most {limit}, got {value}; build the env with "
                                 f"these settings to generate such levels")

    def _empty_room(self, level: SokobanLevel) -> _EmptyRoom:
        key = (level.height, level.width, level.walls, level.floor, level.targets)
        room = self._rooms.get(key)
        if room is None:
            if len(self._rooms) >= _ROOM_CACHE_SIZE:
                self._rooms.clear()
            kinds = [["wall"] * level.width for _ in range(level.height)]
            for r, c in level.floor:
                kinds[r][c] = "target" if (r, c) in level.targets else "floor"
            xsb = [[" "] * level.width for _ in range(level.height)]
            for r, c in level.walls:
                xsb[r][c] = "#"
            for r, c in level.targets:
                xsb[r][c] = "."
            xsb_rows = ["".join(row).rstrip() for row in xsb]
            # A closed room has a wall right of every floor cell, so stripping never cuts a box's or player's cell.
            starts = [0]
            for row in xsb_rows[:-1]:
                starts.append(starts[-1] + len(row) + 1)
            room = _EmptyRoom(
                corners=corner_cells(level),
                kinds=tuple(map(tuple, kinds)),
                text=self.renderer.render(kinds).encode("ascii"),
                xsb="\n".join(xsb_rows).encode("ascii"),
                xsb_row_starts=tuple(starts),
            )
            self._rooms[key] = room
        return room

    def _checked_index(self, value: Any) -> int:
        if isinstance(value, bool):
            raise TypeError("level_index must be an int, got bool")
        try:
            index = operator.index(value)
        except TypeError:
            raise TypeError(f"level_index must be an int, got {type(value).__name__}") from None
        if not 0 <= index < len(self.levels):
            raise ValueError(f"level_index {index} is out of range: the collection has {len(self.levels)} levels")
        return index

    def _solve(self, level: SokobanLevel, max_states: int | None = None) -> int | None:
        """The fewest moves of ``level`` (None: unsolvable, or not settled within ``max_states``, by default the
        env's ``solver_max_states``)."""
        max_states = self.solver_max_states if max_states is None else min(max_states, self.solver_max_states)
        key = (level.key, max_states)
        if key not in self._optimal_cache:
            if len(self._optimal_cache) >= _OPTIMAL_CACHE_SIZE:
                self._optimal_cache.clear()
            # The paper's layouts (one box, open room) are looked up in the generator's table instead of searched.
            moves = open_room_moves(level)
            if moves == -1:
                moves = solution_stats(level, max_states=max_states).moves
            self._optimal_cache[key] = moves
        return self._optimal_cache[key]

    def _apply_move(self, action: GridAction) -> MoveOutcome:
        player, boxes, outcome = apply_move(self._level.floor, self._boxes, self._player, action)
        if player == self._player:
            return _BLOCKED[action]
        self._player, self._boxes = player, boxes
        if outcome != PUSHED:
            return _WALKED[action]
        if boxes == self._level.targets:
            return _SOLVED[action]
        return _PUSHED[action]

    def _is_success(self) -> bool:
        return self._boxes == self._level.targets

    def _tile_kinds(self) -> list[list[str]]:
        kinds = [list(row) for row in self._room.kinds]
        targets = self._level.targets
        for r, c in self._boxes:
            kinds[r][c] = "box_on_target" if (r, c) in targets else "box"
        r, c = self._player
        kinds[r][c] = "agent_on_target" if self._player in targets else "agent"
        return kinds

    def _render_grid(self) -> str:
        # The room's text with the symbols of the boxes and the player written over their cells' symbols.
        text = bytearray(self._room.text)
        line, width, offset = self._line_width, self._cell_width, self._symbol_offset
        codes, targets = self._symbol_codes, self._level.targets
        for r, c in self._boxes:
            text[r * line + c * width + offset] = codes["box_on_target" if (r, c) in targets else "box"]
        r, c = self._player
        text[r * line + c * width + offset] = codes["agent_on_target" if self._player in targets else "agent"]
        return text.decode("ascii")

    def _level_text(self) -> str:
        return "\n".join(self._level.to_xsb())

    def _level_digest(self) -> str:
        return self._level_key  # the sha1 of _level_text()

    def _grid_shape(self) -> tuple[int, int]:
        return self._level.height, self._level.width

    def _optimal_steps(self) -> int | None:
        return self._level_optimal

    def _extra_info(self) -> dict:
        return {
            "boxes_on_target": len(self._boxes & self._level.targets),
            "num_boxes": len(self._boxes),
            "deadlock": not self._room.corners.isdisjoint(self._boxes),
            "level_key": self._level_key,
            "level_index": self._level_index,
            "position": self._player,
            "boxes": tuple(self._boxes) if len(self._boxes) == 1 else tuple(sorted(self._boxes)),
            "goals": self._goals,
        }

    # ------------------------------------------------------------------ read-only views for tools and tests

    @property
    def level(self) -> SokobanLevel:
        """The episode's starting level."""
        if self._level is None:
            raise RuntimeError("no level yet: call reset() first")
        return self._level

    @property
    def state(self) -> SokobanLevel:
        """The current position as a level (same room, current player and boxes)."""
        return self.level.with_state(self._player, self._boxes)
