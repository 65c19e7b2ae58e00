"""The RuleReflector's writing: a correct rulebook read off a failed attempt's trace, without any model.

For the grid games the trace's boards are parsed back into cells (``parse_grid``), the agent's symbol is inferred
from what moved, the moves that changed nothing are explained (the edge, a wall, a blocked box, an unreadable reply),
and a rulebook is written from those facts and the env's SymbolSet, with a shortest solution of the attempt's board
when asked (a BFS route for FrozenLake, the solver's for Sokoban). QA traces get an improved search-and-answer prompt;
other envs a lessons list. ``write_rulebook`` is the one entry point.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass
from typing import Sequence

from erl_envs.grid.actions import ACTION_NAMES, MOVES, GridAction, format_action, parse_grid_actions
from erl_envs.grid.sokoban_levels import LevelError, SokobanLevel
from erl_envs.grid.sokoban_solver import solve_sokoban
from erl_envs.grid.text import SymbolSet
from erl_envs.reflection.trace import ReflectionRequest, clip_text

__all__ = ["parse_grid", "write_rulebook"]


# ---------------------------------------------------------------------------------------------- reading grids


def _grid_row(line: str) -> list[str] | None:
    if "\t" not in line:
        return None
    cells = [piece.strip() for piece in line.split("\t")]
    cells = [c for c in cells if c]
    if not cells or any(len(c) != 1 for c in cells):
        return None
    return cells


def parse_grid(text: str) -> list[list[str]] | None:
    """The first grid drawn in an observation (cells ``" S \\t"``, one row per line) as rows of symbols, or None.

    Lenient about surrounding whitespace so that an env that strips its text still parses; other lines (notices,
    step counters) are skipped.
    """
    rows: list[list[str]] = []
    for line in text.split("\n"):
        row = _grid_row(line)
        if row is not None:
            rows.append(row)
        elif rows:
            break
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    return rows


Cell = tuple[int, int]

_AGENT_KINDS = ("agent", "agent_in_hole", "agent_on_goal", "agent_on_target")
_BOX_KINDS = ("box", "box_on_target")
_TARGET_KINDS = ("target", "agent_on_target", "box_on_target")
# The kinds each game's rulebook and planner read: a symbol set with all of them is that game.
_FROZEN_LAKE_KINDS = frozenset({"agent", "goal", "hole", "frozen"})
_SOKOBAN_KINDS = frozenset({"agent", "agent_on_target", "box", "box_on_target", "target", "wall", "floor"})


def _at(cell: Cell) -> str:
    return f"row {cell[0] + 1}, column {cell[1] + 1}"


def _move_words(delta: tuple[int, int]) -> str:
    words = {(-1, 0): "one row up", (1, 0): "one row down", (0, -1): "one column left", (0, 1): "one column right"}
    return words.get(delta, f"by {delta[0]} rows and {delta[1]} columns")


def _steps_words(steps: Sequence[int]) -> str:
    return ("step " if len(steps) == 1 else "steps ") + ", ".join(str(s) for s in steps)


@dataclass
class _GridFacts:
    """What a grid trace shows, in board coordinates (0-based; texts print them 1-based)."""

    boards: list[list[list[str]]]
    kind_of: dict[str, str]
    agent_chars: frozenset[str]
    moved: dict[GridAction, tuple[tuple[int, int], int]]
    no_effect: list[tuple[int, GridAction, Cell, str, str]]  # step, action, where, category, reason text
    unreadable: list[int]  # replies with no readable move that changed nothing
    unreadable_end: int | None  # a reply with no readable move that ended the game (invalid_action="terminate")
    idle: list[int]  # every step after which the board was unchanged
    pushes: list[tuple[int, GridAction, Cell, Cell]]  # step, action, box from, box to
    end_step: int
    end_action: GridAction | None
    end_from: Cell | None
    end_to: Cell | None
    entered: str | None  # the symbol of the cell the last move entered, read on the board before it

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.boards[0]), len(self.boards[0][0])

    def inside(self, cell: Cell) -> bool:
        rows, cols = self.shape
        return 0 <= cell[0] < rows and 0 <= cell[1] < cols

    def find(self, board: list[list[str]], chars: frozenset[str] | set[str]) -> Cell | None:
        cells = [(r, c) for r, row in enumerate(board) for c, ch in enumerate(row) if ch in chars]
        return cells[0] if len(cells) == 1 else None

    def kind(self, board: list[list[str]], cell: Cell) -> str | None:
        return self.kind_of.get(board[cell[0]][cell[1]])


def _infer_agent(boards: list[list[list[str]]]) -> frozenset[str]:
    """The symbol that moves: unique on two consecutive boards and one cell apart. Empty when nothing moved."""
    votes: Counter[str] = Counter()
    for before, after in zip(boards, boards[1:]):
        if before == after:
            continue
        count_b = Counter(ch for row in before for ch in row)
        count_a = Counter(ch for row in after for ch in row)
        for ch in count_b:
            if count_b[ch] != 1 or count_a.get(ch) != 1:
                continue
            p = next((r, c) for r, row in enumerate(before) for c, x in enumerate(row) if x == ch)
            q = next((r, c) for r, row in enumerate(after) for c, x in enumerate(row) if x == ch)
            if abs(p[0] - q[0]) + abs(p[1] - q[1]) == 1:
                votes[ch] += 1
    return frozenset([votes.most_common(1)[0][0]]) if votes else frozenset()


def _blocked(facts: _GridFacts, board: list[list[str]], p: Cell, action: GridAction) -> tuple[str, str] | None:
    """Why a move from ``p`` changed nothing, when the board says so: (category, reason text)."""
    dr, dc = MOVES[action]
    t = (p[0] + dr, p[1] + dc)
    if not facts.inside(t):
        return "edge", "the edge of the board"
    target_char = board[t[0]][t[1]]
    kind = facts.kind_of.get(target_char)
    if kind == "wall":
        return "wall", f"a wall ({target_char}) at {_at(t)}"
    if kind in _BOX_KINDS:
        u = (t[0] + dr, t[1] + dc)
        if not facts.inside(u):
            return "blocked_push", f"a box ({target_char}) at {_at(t)} with the edge of the board behind it"
        behind = board[u[0]][u[1]]
        if facts.kind_of.get(behind) == "wall" or facts.kind_of.get(behind) in _BOX_KINDS:
            return "blocked_push", f"a box ({target_char}) at {_at(t)} with {behind} behind it"
    return None


def _analyse_grid(request: ReflectionRequest, symbols: SymbolSet | None) -> _GridFacts | None:
    boards = [parse_grid(step.observation) for step in request.steps] + [parse_grid(request.final_observation)]
    if not request.steps or any(b is None for b in boards):
        return None
    if len({(len(b), len(b[0])) for b in boards}) != 1:
        return None
    if symbols is not None:
        kind_of = {ch: kind for kind, ch in symbols.symbols.items()}
        agent_chars = frozenset(symbols.symbols[k] for k in _AGENT_KINDS if k in symbols.symbols)
    else:
        kind_of = {}
        agent_chars = _infer_agent(boards)
    if not agent_chars:
        return None
    facts = _GridFacts(boards=boards, kind_of=kind_of, agent_chars=agent_chars, moved={}, no_effect=[],
                       unreadable=[], unreadable_end=None, idle=[], pushes=[], end_step=len(request.steps),
                       end_action=None, end_from=None, end_to=None, entered=None)
    for i, step in enumerate(request.steps):
        before, after = boards[i], boards[i + 1]
        number = i + 1
        p, q = facts.find(before, agent_chars), facts.find(after, agent_chars)
        if before == after:
            facts.idle.append(number)
        # The env's own reading when it gives one (under the paper's format a bare "Up" is no move at all).
        if step.action_reported:
            moves = None if step.action_read is None else parse_grid_actions(step.action_read, max_actions=64)
        else:
            moves = parse_grid_actions(step.action, max_actions=64)
        # A turn of several moves is not attributed to any one of them.
        action = moves[0] if moves is not None and len(moves) == 1 else None
        if number == facts.end_step:
            facts.end_action, facts.end_from, facts.end_to = action, p, q
            if q is not None and q != p:
                facts.entered = before[q[0]][q[1]]
        if moves is None and before == after:
            if step.terminated:
                facts.unreadable_end = number
            else:
                facts.unreadable.append(number)
        if action is None or p is None:
            continue
        if before == after:
            blocked = _blocked(facts, before, p, action)
            category, reason = blocked if blocked else ("unexplained", "")
            facts.no_effect.append((number, action, p, category, reason))
            continue
        if q is None or q == p:
            continue
        delta = (q[0] - p[0], q[1] - p[1])
        facts.moved.setdefault(action, (delta, number))
        if facts.kind(before, q) in _BOX_KINDS:
            facts.pushes.append((number, action, q, (q[0] + delta[0], q[1] + delta[1])))
    return facts


# ---------------------------------------------------------------------------------------------- planning


def _bfs_route(board: list[list[str]], start: Cell, goal: Cell, passable: set[str]) -> list[GridAction] | None:
    """Shortest move list from start to goal through cells whose symbol is in ``passable`` (goal always allowed)."""
    rows, cols = len(board), len(board[0])
    parent: dict[Cell, tuple[Cell, GridAction] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            route = []
            while parent[cell] is not None:
                cell, action = parent[cell]  # type: ignore[misc]
                route.append(action)
            return route[::-1]
        for action in GridAction:
            dr, dc = MOVES[action]
            nxt = (cell[0] + dr, cell[1] + dc)
            if not (0 <= nxt[0] < rows and 0 <= nxt[1] < cols) or nxt in parent:
                continue
            if nxt != goal and board[nxt[0]][nxt[1]] not in passable:
                continue
            parent[nxt] = (cell, action)
            queue.append(nxt)
    return None


def _route_words(route: Sequence[GridAction]) -> str:
    return ", ".join(ACTION_NAMES[a] for a in route) + f" ({len(route)} move{'s' if len(route) != 1 else ''})"


# ---------------------------------------------------------------------------------------------- rulebooks


def _symbol_lines(symbols: SymbolSet, meanings: dict[str, str]) -> list[str]:
    lines = []
    for kind, ch in symbols.symbols.items():
        meaning = meanings.get(kind) or symbols.legend.get(kind) or kind.replace("_", " ")
        lines.append(f"- {ch}: {meaning}")
    return lines


def _board_lines(facts: _GridFacts) -> list[str]:
    rows, cols = facts.shape
    return [
        f"- The board has {rows} rows and {cols} columns, printed one row per line from top to bottom; the cells "
        "of a row are separated by tabs.",
        "- Count rows from 1 at the top and columns from 1 at the left. Find your symbol first, every turn.",
    ]


def _action_lines(facts: _GridFacts) -> list[str]:
    # Only promise the usual directions for untried moves when every tried move went the usual way.
    usual = all(delta == MOVES[a] for a, (delta, _) in facts.moved.items())
    lines = []
    for action in GridAction:
        name = ACTION_NAMES[action]
        if action in facts.moved:
            delta, step = facts.moved[action]
            lines.append(f"- {name} moves you {_move_words(delta)} (seen at step {step}).")
        elif usual:
            lines.append(f"- {name} was not seen moving you in the last attempt; expect it to move you "
                         f"{_move_words(MOVES[action])}.")
        else:
            lines.append(f"- {name} was not seen moving you in the last attempt; try it once to learn its effect.")
    return lines


def _no_effect_lines(facts: _GridFacts, categories: Sequence[str]) -> list[str]:
    lines = []
    for category in categories:
        seen = [(n, a, p, reason) for n, a, p, cat, reason in facts.no_effect if cat == category]
        if not seen:
            continue
        n, a, p, reason = seen[0]
        example = f"step {n}: {ACTION_NAMES[a]} from {_at(p)} ran into {reason}"
        if category == "edge":
            lines.append(f"- A move off the edge of the board leaves you where you are and wastes the turn "
                         f"(seen at {example}).")
        elif category == "wall":
            lines.append(f"- Walking into a wall leaves you where you are and wastes the turn (seen at {example}).")
        elif category == "blocked_push":
            lines.append(f"- A box that cannot move blocks you: nothing moves and the turn is wasted "
                         f"(seen at {example}).")
    for n, a, p, cat, _ in facts.no_effect:
        if cat == "unexplained":
            lines.append(f"- At step {n}, {ACTION_NAMES[a]} from {_at(p)} had no effect.")
    if facts.unreadable:
        lines.append(f"- A reply without a readable move does nothing and wastes the turn "
                     f"(seen at {_steps_words(facts.unreadable)}).")
    if facts.unreadable_end is not None:
        lines.append(f"- A reply without a readable move ended the game at once (seen at step "
                     f"{facts.unreadable_end}).")
    return lines


def _wasted_line(facts: _GridFacts) -> list[str]:
    wasted = facts.idle
    if not wasted:
        return []
    return [f"- Last time {len(wasted)} of {facts.end_step} turns did nothing ({_steps_words(wasted)}); every "
            "turn counts, so make each one a move that changes the board."]


def _truncation_line(request: ReflectionRequest, unmet: str) -> list[str]:
    if not request.steps[-1].truncated:
        return []
    n = len(request.steps)
    return [f"- The last attempt was cut off after {n} turns before {unmet}: finish within {n} moves."]


_FROZEN_LAKE_MEANINGS = {
    "agent": "you.",
    "goal": "the goal. Reaching it wins the game.",
    "hole": "a hole. Stepping onto it ends the game as a failure.",
    "frozen": "safe ice: you can stand on it.",
    "agent_in_hole": "you, after falling into a hole (the game is over).",
    "agent_on_goal": "you, standing on the goal (the game is won).",
}

_SOKOBAN_MEANINGS = {
    "agent": "you.",
    "agent_on_target": "you, standing on a target.",
    "box": "a box that is not on a target yet.",
    "box_on_target": "a box on a target.",
    "target": "an empty target: a box has to end up here.",
    "wall": "a wall: nothing can enter it.",
    "floor": "empty floor: you and boxes can move onto it.",
}


def _frozen_lake_rulebook(request: ReflectionRequest, facts: _GridFacts, symbols: SymbolSet, plan: bool) -> str:
    s = symbols.symbols
    hole, goal = s["hole"], s["goal"]
    rules = ["Symbols:", *_symbol_lines(symbols, _FROZEN_LAKE_MEANINGS), "Reading the board:", *_board_lines(facts),
             "Actions and their effects:", *_action_lines(facts)]
    rules += _no_effect_lines(facts, ("edge",))
    if not any(cat == "edge" for _, _, _, cat, _ in facts.no_effect):
        rules.append("- A move off the edge of the board leaves you where you are and wastes the turn.")
    fell = facts.end_to is not None and (
        facts.kind(facts.boards[-1], facts.end_to) == "agent_in_hole" or facts.entered == hole)
    hole_line = f"- Moving onto {hole} ends the game at once as a failure"
    if fell and facts.end_from is not None and facts.end_action is not None:
        hole_line += (f" (seen at step {facts.end_step}: {ACTION_NAMES[facts.end_action]} "
                      f"from {_at(facts.end_from)} into the hole at {_at(facts.end_to)})")
    rules.append(hole_line + ".")
    rules += ["Objective and end of the game:",
              f"- Reach {goal}. The game ends when you reach {goal} (success), when you step onto {hole} (failure), "
              "or when the steps run out."]
    rules += _truncation_line(request, f"reaching {goal}")

    strategy = [f"- Find yourself ({s['agent']}) and the goal ({goal}), then plan the whole route before moving: "
                f"only {s['frozen']} cells and {goal}, never {hole}."]
    if plan:
        route = _frozen_lake_plan(facts, symbols)
        if route:
            start, target = facts.find(facts.boards[0], {s["agent"]}), facts.find(facts.boards[0], {goal})
            strategy.append(f"- A shortest safe route on this board, from your start at {_at(start)} to the goal "
                            f"at {_at(target)}: {_route_words(route)}.")
    if fell and facts.end_to is not None:
        strategy.append(f"- Last time you fell into the hole at {_at(facts.end_to)}; check the cell you are about "
                        f"to enter every turn.")
    strategy += _wasted_line(facts)
    return _wrap_rulebook("You are playing a grid game, one move per turn. The rules below were learned from "
                          "playing it.", rules, strategy)


def _sokoban_rulebook(request: ReflectionRequest, facts: _GridFacts, symbols: SymbolSet, plan: bool) -> str:
    s = symbols.symbols
    box, wall = s["box"], s["wall"]
    rules = ["Symbols:", *_symbol_lines(symbols, _SOKOBAN_MEANINGS), "Reading the board:", *_board_lines(facts),
             "Actions and their effects:", *_action_lines(facts),
             f"- You cannot walk into a wall ({wall}).",
             f"- Walking into a box pushes it one cell in the same direction, but only if the cell behind it is "
             f"floor ({s['floor']}) or an empty target ({s['target']}); then you step into the box's old cell. "
             "Otherwise nothing moves."]
    if facts.pushes:
        n, a, frm, to = facts.pushes[0]
        rules[-1] += f" (Seen at step {n}: {ACTION_NAMES[a]} pushed a box from {_at(frm)} to {_at(to)}.)"
    rules += [
        "- Boxes can only be pushed, never pulled, and you cannot push two boxes at once.",
        *_no_effect_lines(facts, ("wall", "blocked_push", "edge")),
        "Objective and end of the game:",
        f"- Get every box onto a target. The game is won as soon as no {box} is left on the board (every box shows "
        f"as {s['box_on_target']}); it also ends when the steps run out.",
        *_truncation_line(request, "every box was on a target"),
    ]
    strategy = [
        "- Before each push, check the cell behind the box: it must be floor or an empty target.",
        "- Never push a box into a corner that is not a target: it can never be moved out again.",
        "- Walk around a box to the side opposite to where it has to go, then push.",
    ]
    if plan:
        route = _sokoban_plan(facts, symbols)
        if route:
            strategy.append(f"- A shortest solution for this board from the start: {_route_words(route)}.")
    strategy += _wasted_line(facts)
    return _wrap_rulebook("You are playing a box-pushing puzzle on a grid, one move per turn. The rules below were "
                          "learned from playing it.", rules, strategy)


def _frozen_lake_plan(facts: _GridFacts, symbols: SymbolSet) -> list[GridAction] | None:
    s = symbols.symbols
    first = facts.boards[0]
    start, target = facts.find(first, {s["agent"]}), facts.find(first, {s["goal"]})
    if start is None or target is None:
        return None
    return _bfs_route(first, start, target, {s["frozen"]}) or None


def _plan_prompt(route: Sequence[GridAction]) -> str:
    """The plan-only reflection: the moves to send, written exactly as the env reads them, one per turn."""
    return ("<prompt>\nA shortest solution of this board, one move per turn in this order: "
            + " ".join(format_action(a) for a in route) + "\n</prompt>")


def _brief_rulebook(request: ReflectionRequest, facts: _GridFacts, symbols: SymbolSet, frozen_lake: bool) -> str:
    """A few lines a small model can write itself: the symbols, what a move does, what went wrong, a route."""
    s = symbols.symbols
    if frozen_lake:
        lines = [f"{s['agent']} is you, {s['goal']} is the goal, {s['hole']} is a hole, {s['frozen']} is safe ice.",
                 "Up, Down, Left and Right move you one cell; a move off the board does nothing."]
        fell = facts.end_to is not None and (
            facts.kind(facts.boards[-1], facts.end_to) == "agent_in_hole" or facts.entered == s["hole"])
        if fell and facts.end_from is not None and facts.end_action is not None:
            lines.append(f"Last time {ACTION_NAMES[facts.end_action]} from {_at(facts.end_from)} fell into the hole "
                         f"at {_at(facts.end_to)}.")
        else:
            lines.append(f"Last time: {request.feedback}")
        route = _frozen_lake_plan(facts, symbols)
    else:
        lines = [f"{s['agent']} is you, {s['box']} is a box, {s['target']} is a target, {s['wall']} is a wall, "
                 f"{s['floor']} is floor.",
                 "Up, Down, Left and Right move you one cell; walking into a box pushes it if the cell behind it "
                 "is free.",
                 f"Last time: {request.feedback}"]
        route = _sokoban_plan(facts, symbols)
    if route:
        lines.append("Route from the start to the goal: " + ", ".join(ACTION_NAMES[a] for a in route) + ".")
    return "<prompt>\n" + "\n".join(lines) + "\n</prompt>"


def _sokoban_plan(facts: _GridFacts, symbols: SymbolSet) -> list[GridAction] | None:
    first = facts.boards[0]
    cells = {kind: set() for kind in symbols.symbols}
    for r, row in enumerate(first):
        for c, ch in enumerate(row):
            kind = facts.kind_of.get(ch)
            if kind is None:
                return None
            cells[kind].add((r, c))
    players = cells["agent"] | cells["agent_on_target"]
    if len(players) != 1:
        return None
    boxes = frozenset(cells["box"] | cells["box_on_target"])
    targets = frozenset(set().union(*(cells[k] for k in _TARGET_KINDS)))
    if not boxes or len(targets) < len(boxes):
        return None
    # The game's own optimal solver; a board it cannot read as a playable level gets no plan.
    try:
        level = SokobanLevel(facts.shape[0], facts.shape[1], frozenset(cells["wall"]), boxes, targets,
                             next(iter(players)))
    except LevelError:
        return None
    return solve_sokoban(level)


def _unknown_grid_rulebook(request: ReflectionRequest, facts: _GridFacts) -> str:
    """A grid game whose symbols the reflector was not told: only what the trace itself shows."""
    agent = next(iter(facts.agent_chars))
    seen = sorted({ch for row in facts.boards[0] for ch in row} - {agent})
    rules = ["Symbols:", f"- {agent}: you (this symbol moved when you moved)."]
    for ch in seen:
        if ch == facts.entered and request.steps[-1].terminated:
            rules.append(f"- {ch}: moving onto it ended the game (step {facts.end_step}, return "
                         f"{request.total_return:g}).")
        else:
            rules.append(f"- {ch}: on the board; the last attempt did not show what it does.")
    rules += ["Reading the board:", *_board_lines(facts), "Actions and their effects:", *_action_lines(facts),
              *_no_effect_lines(facts, ("edge",)), "Objective and end of the game:",
              f"- The last attempt ended with: {request.feedback} (return {request.total_return:g}).",
              *_truncation_line(request, "succeeding")]
    strategy = ["- Try a different route from the last attempt, towards symbols it did not visit.",
                *_wasted_line(facts)]
    return _wrap_rulebook("You are playing a grid game, one move per turn. The notes below were learned from "
                          "playing it.", rules, strategy)


def _wrap_rulebook(intro: str, rules: list[str], strategy: list[str]) -> str:
    return ("<prompt>\n" + intro + "\n<game_rules>\n" + "\n".join(rules) + "\n</game_rules>\n<strategy>\n"
            + "\n".join(strategy) + "\n</strategy>\n</prompt>")


_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL | re.IGNORECASE)
_JSON_QUERY = re.compile(r'"query"\s*:\s*"((?:[^"\\]|\\.)*)"')
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def _qa_prompt(request: ReflectionRequest) -> str:
    searches, answers = [], []
    for step in request.steps:
        queries = _SEARCH.findall(step.action) or _JSON_QUERY.findall(step.action)
        searches += [" ".join(q.split()) for q in queries if q.strip()]
        found = _BOXED.findall(step.action) or _ANSWER.findall(step.action)
        answers += [" ".join(a.split()) for a in found if a.strip()]
    lines = [
        "Answer the question by searching a Wikipedia index, then give a short final answer.",
        "How to work:",
        "1. Split the question into its hops: first find the entity the question describes, then the fact it asks "
        "about that entity. For a comparison, find the fact for each side separately.",
        "2. Search for one entity or fact at a time with <search>query</search>; reuse exact names from the "
        "passages in the next query.",
        "3. Answer only when a passage states the fact. Copy the answer's wording from the passage and keep it as "
        "short as possible (a name, a date, yes or no).",
        "4. Give the final answer in \\boxed{...}, in a reply without a search.",
        "Lessons from the previous attempt at this question:",
    ]
    if searches:
        shown = "; ".join(f'"{clip_text(q, 120)}"' for q in searches[:8])
        lines.append(f"- It searched for: {shown}. They did not lead to the correct answer: search for the missing "
                     "hop with different, more specific queries.")
    else:
        lines.append("- It made no search before answering: search first.")
    if answers:
        last = clip_text(answers[-1], 120)
        verdict = "was correct" if request.success else "was not judged correct"
        lines.append(f'- Its final answer "{last}" {verdict} ({request.feedback}). Do not repeat it unless a '
                     "passage clearly supports it.")
    else:
        lines.append("- It gave no final answer in \\boxed{...}: always end with one.")
    return "<prompt>\n" + "\n".join(lines) + "\n</prompt>"


def _generic_prompt(request: ReflectionRequest) -> str:
    lines = [request.base_prompt, "", "Lessons from your previous attempt at this task:",
             f"- It took {len(request.steps)} steps and ended with return {request.total_return:g}: {request.feedback}"]
    idle = [(i + 1, s.action) for i, s in enumerate(request.steps) if not s.took_effect]
    if idle:
        shown = ", ".join(f'"{clip_text(a, 80)}" (step {n})' for n, a in idle[:8])
        lines.append(f"- These actions had no effect: {shown}. Do not repeat them in the same situation.")
    tried = list(dict.fromkeys(clip_text(s.action, 80) for s in request.steps))
    lines.append("- Actions you tried: " + ", ".join(f'"{a}"' for a in tried[:10])
                 + ". Where they failed, try something different.")
    return "<prompt>\n" + "\n".join(lines) + "\n</prompt>"


# ---------------------------------------------------------------------------------------------- the rulebook


def write_rulebook(request: ReflectionRequest, symbols: SymbolSet | None, plan: bool = True,
                   detail: str = "full") -> str:
    """The RuleReflector's reflection text for ``request``: a rulebook for a grid game (with ``detail="plan"`` only
    a shortest solution written as action strings, with ``detail="brief"`` a few lines: symbols, moves, the mistake,
    a route), a search-and-answer prompt for QA, a lessons list else."""
    if request.style == "qa":
        return _qa_prompt(request)
    if request.style == "grid":
        facts = _analyse_grid(request, symbols)
        if facts is not None:
            frozen_lake = symbols is not None and _FROZEN_LAKE_KINDS <= set(symbols.symbols)
            sokoban = symbols is not None and _SOKOBAN_KINDS <= set(symbols.symbols)
            if detail == "plan" and (frozen_lake or sokoban):
                route = _frozen_lake_plan(facts, symbols) if frozen_lake else _sokoban_plan(facts, symbols)
                if route:
                    return _plan_prompt(route)
            if detail == "brief" and (frozen_lake or sokoban):
                return _brief_rulebook(request, facts, symbols, frozen_lake)
            if frozen_lake:
                return _frozen_lake_rulebook(request, facts, symbols, plan)
            if sokoban:
                return _sokoban_rulebook(request, facts, symbols, plan)
            if symbols is None:
                return _unknown_grid_rulebook(request, facts)
    return _generic_prompt(request)
