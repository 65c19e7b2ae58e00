"""ERL-FrozenLake-v0: deterministic FrozenLake as text, with abstract symbols and an 8-step budget (the ERL paper's)."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

from erl_envs.grid import draws
from erl_envs.grid.actions import ACTION_NAMES, MOVES, GridAction
from erl_envs.grid.env import GridTextEnv, MoveOutcome, check_grid_size
from erl_envs.grid.frozen_lake_maps import (GENERATOR_MAX_TRIES, GENERATORS, MAX_MAP_SIDE, PAPER_P,
                                            PAPER_SEARCH_DEPTH, PAPER_SIZE, MapError, as_int, draw_feasible_map,
                                            draw_paper_map, generate_frozen_lake, p_range, prepared_map,
                                            shortest_path_length, size_range, validate_map)
from erl_envs.grid.text import FROZEN_LAKE_SYMBOLS, SymbolSet
from erl_envs.paper_tasks import frozenlake_test_maps

# Distinct maps whose text and task id an env keeps (small boards repeat: a 2x2 board has 12 layouts).
_MAP_TEXT_CACHE_SIZE = 4096

__all__ = [
    "FrozenLakeTextEnv",
    "generate_frozen_lake",
    "shortest_path_length",
    "validate_map",
    "MapError",
    "PAPER_SIZE",
    "PAPER_P",
    "MAX_MAP_SIDE",
    "GENERATORS",
    "PAPER_SEARCH_DEPTH",
]

_EXCLUDED_REDRAWS = 1000  # a drawn map that exclude= or min_path= refuses is redrawn, this many times at most

_BLOCKED = tuple(MoveOutcome(False, 0.0, False, f"tried {name}, did not move") for name in ACTION_NAMES)
_MOVED = tuple(MoveOutcome(True, 0.0, False, f"moved {name}") for name in ACTION_NAMES)
_FELL = tuple(MoveOutcome(True, 0.0, True, f"moved {name} and fell into a hole") for name in ACTION_NAMES)
_REACHED = tuple(MoveOutcome(True, 1.0, True, f"moved {name} and reached the goal") for name in ACTION_NAMES)


class FrozenLakeTextEnv(GridTextEnv):
    """Cross a frozen lake from the start to the goal without falling into a hole, reading and writing text.

    ## Description
    The agent starts on one cell of a square grid of frozen ice and holes and must reach the goal cell. Moves are
    deterministic (the ice is not slippery). The ERL paper uses this game with abstract letters in place of the
    usual ones and reveals no rules: the model has to work out what the letters mean by playing.

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
    A map drawn by ``generate_frozen_lake`` from ``self.np_random``: side n ~ U{2..9}, frozen probability
    p ~ U[0.6, 0.85), distinct random start and goal; boards are redrawn until the reference code's depth-first
    search (6 moves deep) finds the goal (``generator="paper"``, the default), or until the goal is reachable within
    the step budget (``generator="feasible"``). The agent stands on the start cell, which is ordinary frozen ice.

    ## Rewards
    1 for reaching the goal; 0 for everything else (moving, bumping into the edge, falling in a hole, invalid actions).

    ## Episode End
    Terminated when the agent reaches the goal or falls into a hole (or, with ``invalid_action="terminate"``, gives an
    unparseable reply); truncated when the step budget (``max_steps``, 8) is used up. Every reply, parseable or not,
    uses one step; a reply with k moves uses k.

    ## Information
    Every ``reset``/``step`` info holds ``success``, ``steps_used``, ``steps_left``, ``took_effect``, ``feedback``
    (e.g. ``"moved Left"``, ``"tried Up, did not move"``, ``"moved Down and fell into a hole"``,
    ``"could not parse the action"``), ``parse_errors``, ``no_effect_moves``, ``optimal_steps`` (BFS shortest path),
    ``task_id`` (``"frozenlake-"`` + sha1 of the map rows), ``task_text`` (the first grid), ``position`` (row, col),
    ``size`` (n), ``p`` (the frozen probability, ``None`` for a map given at reset); the last step adds
    ``episode_feedback``: ``Reached the goal.``, ``Fell into a hole.``, ``Hit the max step limit before reaching
    the goal.`` or ``No valid actions: ...``.

    ## Arguments
    ``render_mode`` (``"ansi"``, ``"rgb_array"``, ``"human"`` or None); ``size`` (int or inclusive (lo, hi),
    default (2, 9)); ``p`` (float or (lo, hi), default (0.6, 0.85)); ``max_steps=8``; ``symbols="abstract"``
    (``"gym"``, a dict of tile kind -> char, or a ``SymbolSet``); ``invalid_action="noop"`` (or ``"terminate"``);
    ``max_actions_per_turn=1`` (more needs ``action_format="lenient"``); ``action_format="paper"``;
    ``reveal_rules=False`` (True appends the symbol legend and rules to
    ``instructions``); ``instructions=None`` (the system prompt; default ``prompts.GRID_INSTRUCTIONS``);
    ``generator="paper"`` (or ``"feasible"``, see ``generate_frozen_lake``); ``exclude=None`` (``"paper-test"`` or a
    list of maps: such a drawn map is redrawn, with ``size``/``p`` options too, so evaluate the paper's test rows on
    an env without it; a ``map`` option is always played); ``min_path=0`` (a drawn map whose goal is fewer moves
    away is redrawn: a sparse-reward distribution).
    Reset options: ``size``, ``p``, ``max_steps`` (this episode only), ``map`` (explicit rows of ``S``/``F``/``H``/
    ``G``, checked by ``validate_map``, with a goal reachable from the start; excludes ``size``/``p``). Maps up to
    ``max(16, largest size)`` per side fit.
    Sync and async vector envs work with Gymnasium's defaults (see ``GridTextEnv``).

    ## Text format
    A 3x3 map ``["SFF", "FHF", "FFG"]`` with abstract symbols, after one move Right::

         D 	 A 	 D 	
         D 	 C 	 D 	
         D 	 D 	 B 	
        Not solved yet. Give your next action.
        Steps remaining: 7

    Symbols: ``A`` agent, ``B`` goal, ``C`` hole, ``D`` frozen, ``X`` agent in a hole, ``Y`` agent on the goal
    (``symbols="gym"``: ``P``, ``G``, ``H``, ``F``, ``X``, ``W``).

    ## Paper fidelity
    Matches: the reference generator map for map (``reset(seed=s, options={"size": n, "p": p})`` gives the
    reference's map for its row (s, n, p), so the paper's 100 test maps replay exactly), size and p distributions,
    deterministic moves, the 8-step budget, the abstract symbols and cell layout, unparseable replies as no-op
    steps, sparse reward, the per-step messages and the four feedback lines. Departs: the agent on the goal is
    ``Y`` (the reference writes a non-ASCII check mark); the wording of the messages is ours. ``generator=
    "feasible"`` (ours, not the paper's) accepts goals up to ``max_steps`` moves away by shortest path, draws start
    and goal among pairs at most ``max_steps`` apart, and gives other maps for the same seed. See docs/fidelity.md.

    ## Version History
    * v0: initial version.
    """

    game_name = "FrozenLake"
    symbol_presets = FROZEN_LAKE_SYMBOLS
    level_options = frozenset({"size", "p", "map"})
    task_prefix = "frozenlake"
    rules_text = (
        "Each move takes you one cell in its direction; a move off the edge of the grid leaves you where you are. "
        "Reaching the goal wins (reward 1). Stepping onto a hole ends the game with reward 0. You have {max_steps} "
        "moves."
    )
    episode_feedback_lines = {
        "success": "Reached the goal.",
        "failure": "Fell into a hole.",
        "step_limit": "Hit the max step limit before reaching the goal.",
    }

    def __init__(
        self,
        render_mode: str | None = None,
        size: int | tuple[int, int] = PAPER_SIZE,
        p: float | tuple[float, float] = PAPER_P,
        max_steps: int = 8,
        symbols: str | SymbolSet | Mapping[str, str] = "abstract",
        invalid_action: str = "noop",
        max_actions_per_turn: int = 1,
        reveal_rules: bool = False,
        instructions: str | None = None,
        action_format: str = "paper",
        prompts: str = "lenient",
        generator: str = "paper",
        exclude: str | Sequence[Any] | None = None,
        min_path: int = 0,
    ):
        if generator not in GENERATORS:
            raise ValueError(f"generator must be one of {list(GENERATORS)}, got {generator!r}")
        self.generator = generator
        self.exclude = self._excluded_maps(exclude)
        self.min_path = as_int(min_path, "min_path")
        self.size = size
        self.p = p
        self._sizes = size_range(size)
        self._ps = p_range(p)
        side = max(MAX_MAP_SIDE, self._sizes[1])
        super().__init__(
            render_mode=render_mode,
            max_grid_shape=(side, side),
            max_steps=max_steps,
            symbols=symbols,
            invalid_action=invalid_action,
            max_actions_per_turn=max_actions_per_turn,
            reveal_rules=reveal_rules,
            instructions=instructions,
            action_format=action_format,
            prompts=prompts,
        )
        if not 0 <= self.min_path <= self.max_steps:  # a goal further away could never be reached in time
            raise ValueError(f"min_path must be in [0, max_steps={self.max_steps}], got {min_path!r}")
        cell = self.renderer.cell
        self._cell_width = len(cell("frozen"))
        # str.translate turns a flattened map into its cells in one C call.
        self._cell_table = str.maketrans(
            {"S": cell("frozen"), "F": cell("frozen"), "H": cell("hole"), "G": cell("goal")}
        )
        self._agent_chars = {
            "S": self.symbols["agent"], "F": self.symbols["agent"],
            "H": self.symbols["agent_in_hole"], "G": self.symbols["agent_on_goal"],
        }
        self._flat = ""
        self._n = 0
        self._pos = (0, 0)
        self._goal = (0, 0)
        self._shortest: int | None = None
        self._level_p: float | None = None
        self._map_text = ""
        self._digest = ""
        self._map_texts: dict[str, tuple[str, str]] = {}  # flattened map -> (its grid text, its task digest)
        self._line_width = 0

    @staticmethod
    def _excluded_maps(exclude: Any) -> frozenset[str]:
        """The flattened maps that drawing must not produce: none, the paper's test maps, or the maps given."""
        if exclude is None or exclude == "paper-test":
            return frozenset() if exclude is None else frozenlake_test_maps()
        if isinstance(exclude, str) or not hasattr(exclude, "__iter__"):
            error = ValueError if isinstance(exclude, str) else TypeError
            raise error(f"exclude must be 'paper-test', None or a sequence of maps, got {exclude!r}")
        return frozenset("".join(validate_map(item)) for item in exclude)

    # ------------------------------------------------------------------ GridTextEnv hooks

    def _new_level(self, options: dict) -> None:
        if "map" in options:
            clash = sorted({"size", "p"} & set(options))
            if clash:
                raise ValueError(f"the reset option 'map' gives the whole level; do not combine it with {clash}")
            check_grid_size(options["map"], self.max_grid_shape, "map")
            flat, n, start, goal, shortest = prepared_map(options["map"])
            if n > self.max_grid_shape[0]:
                raise ValueError(
                    f"the map is {n}x{n} but this env was built for maps up to {self.max_grid_shape[0]} per side; "
                    f"build it with size={n} (or a range reaching {n}) to allow it"
                )
            level_p = None
        else:
            sizes = size_range(options["size"]) if "size" in options else self._sizes
            if sizes[1] > self.max_grid_shape[0]:
                raise ValueError(
                    f"size {options['size']!r} is bigger than this env's largest map side "
                    f"({self.max_grid_shape[0]}); build the env with size={options['size']!r} to allow it"
                )
            lo, hi = p_range(options["p"]) if "p" in options else self._ps
            rng = self.np_random
            # rng.integers(lo, hi + 1) and rng.uniform(lo, hi), drawn the cheap way (same numbers, same stream).
            n = sizes[0] if sizes[0] == sizes[1] else sizes[0] + draws.integers(rng, sizes[1] - sizes[0] + 1, 1)[0]
            level_p = lo if lo == hi else lo + (hi - lo) * rng.random()
            for _ in range(_EXCLUDED_REDRAWS):
                if self.generator == "paper":
                    flat, start, goal, shortest = draw_paper_map(rng, n, level_p)
                else:
                    flat, start, goal, shortest = draw_feasible_map(rng, n, level_p, self.episode_max_steps,
                                                                     GENERATOR_MAX_TRIES)
                if flat not in self.exclude and shortest >= self.min_path:
                    break
            else:
                raise ValueError(f"{_EXCLUDED_REDRAWS} drawn {n}x{n} maps in a row were in exclude= or nearer than "
                                 f"min_path={self.min_path}: these settings leave (almost) no map to draw")
        self._flat = flat
        self._n = n
        self._pos = divmod(start, n)
        self._goal = divmod(goal, n)
        self._shortest = shortest
        self._level_p = level_p
        texts = self._map_texts.get(flat)
        if texts is None:
            # Small maps come back often (a 2x2 board has 12 layouts), so their text and task id are kept.
            if len(self._map_texts) >= _MAP_TEXT_CACHE_SIZE:
                self._map_texts.clear()
            rows = "\n".join([flat[i * n:(i + 1) * n] for i in range(n)])  # the cells' table keeps the newlines
            texts = self._map_texts[flat] = (rows.translate(self._cell_table), hashlib.sha1(rows.encode()).hexdigest())
        self._map_text, self._digest = texts
        self._line_width = n * self._cell_width + 1

    def _apply_move(self, action: GridAction) -> MoveOutcome:
        dr, dc = MOVES[action]
        r, c = self._pos
        nr, nc = r + dr, c + dc
        n = self._n
        if not (0 <= nr < n and 0 <= nc < n):
            return _BLOCKED[action]
        self._pos = (nr, nc)
        tile = self._flat[nr * n + nc]
        if tile == "H":
            return _FELL[action]
        if tile == "G":
            return _REACHED[action]
        return _MOVED[action]

    def _is_success(self) -> bool:
        return self._pos == self._goal

    def _tile_kinds(self) -> list[list[str]]:
        kind = {"S": "frozen", "F": "frozen", "H": "hole", "G": "goal"}
        n = self._n
        grid = [[kind[ch] for ch in self._flat[i * n:(i + 1) * n]] for i in range(n)]
        r, c = self._pos
        grid[r][c] = {"frozen": "agent", "hole": "agent_in_hole", "goal": "agent_on_goal"}[grid[r][c]]
        return grid

    def _grid_shape(self) -> tuple[int, int]:
        return self._n, self._n

    def _render_grid(self) -> str:
        # The map text never changes within an episode: splice the agent's symbol into it.
        r, c = self._pos
        at = r * self._line_width + c * self._cell_width + 1
        text = self._map_text
        return text[:at] + self._agent_chars[self._flat[r * self._n + c]] + text[at + 1:]

    def _level_text(self) -> str:
        return "\n".join(self.map_rows)

    def _level_digest(self) -> str:
        return self._digest  # the sha1 of _level_text(), kept with the map's text

    def _optimal_steps(self) -> int | None:
        return self._shortest

    def _extra_info(self) -> dict:
        return {"position": self._pos, "size": self._n, "p": self._level_p}

    # ------------------------------------------------------------------ read-only views for tools and tests

    @property
    def map_rows(self) -> list[str]:
        """The current map as rows of ``S``/``F``/``H``/``G`` (a copy)."""
        n = self._n
        return [self._flat[i * n:(i + 1) * n] for i in range(n)]

    @property
    def position(self) -> tuple[int, int]:
        return self._pos
