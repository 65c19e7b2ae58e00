"""The grid games: text FrozenLake and Sokoban on one grid env, with Sokoban's levels, solver and generator.

Data flows one way: ``actions`` (reading a move from a reply), ``text`` (symbols and the text board), ``render``
(pygame), ``draws`` (seeded sampling) and ``prompts`` feed ``env`` (``GridTextEnv``, what both games share), which
``frozen_lake`` (its maps: ``frozen_lake_maps``) and ``sokoban`` build on. Sokoban's ``sokoban_levels`` (the level value, XSB files, the room's dead
squares) is what ``sokoban_solver`` and ``sokoban_generator`` work on.
"""

from erl_envs.grid.actions import GridAction, parse_actions
from erl_envs.grid.frozen_lake import FrozenLakeTextEnv, MapError, generate_frozen_lake
from erl_envs.grid.sokoban import SokobanTextEnv
from erl_envs.grid.sokoban_generator import GenerationError, generate_level
from erl_envs.grid.sokoban_levels import LevelError, SokobanLevel, load_levels, parse_level
from erl_envs.grid.sokoban_solver import solve_sokoban
from erl_envs.grid.text import SymbolSet

__all__ = ["FrozenLakeTextEnv", "SokobanTextEnv", "GridAction", "parse_actions", "generate_frozen_lake", "MapError",
           "SokobanLevel", "LevelError", "parse_level", "load_levels", "solve_sokoban", "generate_level",
           "GenerationError", "SymbolSet"]
