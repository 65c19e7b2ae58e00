"""The grid games' prompts: the first-attempt system prompt, the lines shown after each turn, and the reminder of
the reply format. Two sets, chosen by the envs' ``prompts=`` argument:

* ``"lenient"`` (the envs' default): our short prompts, written from the paper's description (PAPER.md sections 1
  and 3). They name no game and reveal no rule.
* ``"paper"`` (the paper presets and ``benchmarks/learning/compare.py``): every piece of information the reference
  code's prompts carry, in our own words (``PAPER_SET``; docs/fidelity.md lists each element and where it sits): a
  structured-reasoning system prompt, the valid actions and reply format, Sokoban's push rule, and per-step notices
  about walls and pushing. The paper set's reflection texts live in ``erl_envs.reflection.prompts``.
* ``"small"`` (the ``cpu-smol`` preset): for small instruct models, whose first move copies whatever move a format
  example names (SmolLM2-135M plays the lenient set's example ``Up`` with probability 0.84 on the paper's small
  test maps). Its prompt and reminder name no move (``SMALL_SET``); its reflection texts, a short request and
  instructions sized for a 135M model, live in ``erl_envs.reflection.prompts``.

Override by passing your own strings to the env (``instructions=``), by a templates file (``erl-train --prompts FILE``,
``erl_envs.reflection.prompt_templates``; these texts are its ``grid.*`` names), or by assigning to these module
attributes (or ``PAPER_SET`` entries) before building envs.
"""

from __future__ import annotations

__all__ = ["GRID_INSTRUCTIONS", "GRID_STEP_LINES", "GRID_FORMAT_REMINDER", "PAPER_SET", "SMALL_SET", "PROMPT_SETS",
           "GAMES", "uses_paper_set", "uses_small_set", "instructions", "paper_initial_prompt", "initial_prompt",
           "format_reminder", "step_lines", "moves_shown"]

# --- The first-attempt system prompt. The grid games reveal no rules: the model must infer them by playing. ---

GRID_INSTRUCTIONS = (
    "You are an agent playing a game on a grid. Each turn you see the current grid and choose one move: "
    "Up, Down, Left or Right. Think briefly about what to do, then give your move on its own inside a "
    "triple-backtick block, for example:\n```Up```"
)

# --- The lines of a grid game's observation after each turn (the lenient set; see step_lines). None names a
# symbol, so they read the same under any SymbolSet. (A dict, like PAPER_SET below, so that the tiny tokenizer's
# corpus of module constants stays as it was.)

GRID_STEP_LINES = {
    "not_solved": "Not solved yet. Give your next action.",
    "no_effect": "Your last action had no effect.",
    "some_no_effect": "Some of your last moves had no effect.",
    "parse_error": "Your last action could not be parsed, so nothing happened.",
    "steps_left": "Steps remaining: {}",
    "moved": None,
    "turn": None,
}

# --- The one-line reminder appended to a reflected system prompt on the second attempt. ---

GRID_FORMAT_REMINDER = "Give your move (Up, Down, Left or Right) inside a triple-backtick block, e.g. ```Up```."

# --- The paper set (``prompts="paper"``). A dict, not module constants: the tiny model's tokenizer is trained on the
# prompt modules' constant strings (erl_agents.models.prompt_constants), and the paper set must not change it.

_PAPER_REMINDER = (
    "Always remember:\n"
    "- The valid actions are Up, Down, Left and Right.\n"
    "{extra}"
    "- Reason step by step, but end your reply with a line holding only the next action inside triple backticks, "
    "e.g. ```Up```."
)
_SOKOBAN_PUSH_RULE = "- You can push a box only when the cell behind it, in the direction you push, is free.\n"

PAPER_SET = {
    # The first-attempt system prompt of both grid games, before the reminder of its game.
    "instructions": (
        "You are playing a game on a grid, and you act as a careful reasoning engine. What you believe about how "
        "the game works (your game rules) and about how to win (your strategy) are only your best guesses so far: "
        "they may be incomplete or wrong. The one thing you can do is choose your NEXT ACTION.\n\n"
        "Every turn:\n"
        "1. State analysis: summarise the current board.\n"
        "2. Value of the state: judge how promising this state is for the rest of the game (high, medium or low) "
        "and say why.\n"
        "3. Consequences: for the two most promising actions only, predict what each will do, as \"result, "
        "because reason\".\n"
        "4. Choice: pick the action that leads to the best future state.\n\n"
        "Put parts 1 to 3 inside <reason>...</reason>, headed State analysis, Value of the state (with its "
        "High / Medium / Low verdict) and Consequences (Action A, Action B). After </reason>, give the next action "
        "on its own inside triple backticks, like this:\n```Up```"
    ),
    # Appended to the system prompt of every attempt (the reflected one included) unless it already ends with it, as
    # the reference does. The initial prompt ends with FrozenLake's, so a Sokoban attempt shows two "Always
    # remember" blocks, the second with the push rule (see ``instructions``).
    "reminder": {
        "FrozenLake": _PAPER_REMINDER.format(extra=""),
        "Sokoban": _PAPER_REMINDER.format(extra=_SOKOBAN_PUSH_RULE),
    },
    # Per-step lines that differ from the lenient set (the others are shared: not solved, steps remaining). The
    # paper set also heads every observation with the turn index (the replies so far) and shows the goal line on
    # the first turn too, right under the board, as the reference does.
    "step": {
        "FrozenLake": {
            "turn": "Board at turn {}:",
            "no_effect": "Your last action had no effect: your position did not change. Check your reasoning, the "
                         "action you chose and the reply format: only the next action inside triple backticks, "
                         "e.g. ```Up```.",
            "parse_error": "No valid action was read from your last reply, so nothing happened. Put only the next "
                           "action inside triple backticks, e.g. ```Up```.",
        },
        "Sokoban": {
            "turn": "Board at turn {}:",
            # The reference's Sokoban agent counts its own budget, 64 replies, while the episode ends after 8 steps:
            # this is what the paper's model saw (see "moves_shown" and docs/fidelity.md).
            "steps_left": "At most {} moves remain.",
            "parse_error": "No valid move was read from your last reply, so nothing happened. Give a valid direction "
                           "(Up, Down, Left or Right) inside triple backticks, e.g. ```Up```.",
            "no_effect": "Your last move had no effect: you probably walked into a wall or pushed a box that is "
                         "blocked. Give a valid direction: Up, Down, Left or Right.",
            "some_no_effect": "Some of your last moves had no effect: walls and blocked boxes stop you.",
            "moved": "Your last move worked (you moved, or pushed a box), but the puzzle is not solved yet: plan "
                     "your next move.",
        },
    },
    # The budget the reference's agent tells the model, counting down one per reply, when it is not the episode's:
    # its Sokoban agent is built with 64 moves while the levels end after 8 steps.
    "moves_shown": {"Sokoban": 64},
}

# --- The small-model set (``prompts="small"``): no move named anywhere, so no move is favoured before the model has
# played (a format example is what a 135M model copies). Moves are learned from the step notices and the feedback,
# or taught by the valid-action constraint. Measured: benchmarks/results/reflection_lift.md, "Untrained policy".

SMALL_SET = {
    "instructions": (
        "You are an agent playing a game on a grid. Each turn you see the current grid and choose one move. "
        "Reply with only your move inside a triple-backtick block."
    ),
    "reminder": "Reply with only your move inside a triple-backtick block.",
}

PROMPT_SETS = ("lenient", "paper", "small")
GAMES = ("FrozenLake", "Sokoban")


def _check_set(prompt_set: str) -> None:
    if prompt_set not in PROMPT_SETS:
        raise ValueError(f"unknown prompt set {prompt_set!r}; choose one of {list(PROMPT_SETS)}")


def uses_paper_set(prompt_set: str, game: str | None) -> bool:
    """Whether the paper set applies: it covers the two grid games; another game keeps the lenient set."""
    _check_set(prompt_set)
    return prompt_set == "paper" and game in GAMES


def uses_small_set(prompt_set: str, game: str | None) -> bool:
    """Whether the small-model set applies: like the paper set, to the two grid games only."""
    _check_set(prompt_set)
    return prompt_set == "small" and game in GAMES


def paper_initial_prompt() -> str:
    """The paper set's initial prompt of both grid games, as the reference's workflows hold it: the grid prompt ending
    with the two-line reminder (valid actions, reply format) that FrozenLake's attempts also get."""
    return PAPER_SET["instructions"] + "\n\n" + PAPER_SET["reminder"]["FrozenLake"]


def instructions(prompt_set: str = "lenient", game: str | None = None) -> str:
    """The first attempt's system prompt. Under the paper set it is the initial prompt with the game's reminder
    appended unless it already ends with it, as the reference builds every attempt's prompt: FrozenLake's reminder is
    the one the initial prompt ends with, Sokoban's is a second "Always remember" block that adds the push rule."""
    if uses_paper_set(prompt_set, game):
        initial, reminder = paper_initial_prompt(), PAPER_SET["reminder"][game]
        return initial if initial.endswith(reminder) else initial + "\n\n" + reminder
    if uses_small_set(prompt_set, game):
        return SMALL_SET["instructions"]
    return GRID_INSTRUCTIONS


def initial_prompt(prompt_set: str, game: str | None, attempt_prompt: str) -> str:
    """The reference's initial prompt of an env whose attempts are given ``attempt_prompt``: what a reflection starts
    from while the memory is empty (and what the reference's distilled copies carry). Under the paper set Sokoban's
    attempts see the initial prompt plus the push-rule reminder, and the initial prompt lacks that rule; everywhere
    else (or with instructions of the user's own) the two are the same text."""
    if uses_paper_set(prompt_set, game) and attempt_prompt == instructions(prompt_set, game):
        return paper_initial_prompt()
    return attempt_prompt


def moves_shown(prompt_set: str, game: str | None) -> int | None:
    """The move budget the prompt set tells the model (counting down one per reply) when it is not the episode's
    own; None: the episode's remaining steps are shown."""
    return PAPER_SET["moves_shown"].get(game) if uses_paper_set(prompt_set, game) else None


def format_reminder(prompt_set: str = "lenient", game: str | None = None) -> str:
    if uses_paper_set(prompt_set, game):
        return PAPER_SET["reminder"][game]
    if uses_small_set(prompt_set, game):
        return SMALL_SET["reminder"]
    return GRID_FORMAT_REMINDER


def step_lines(prompt_set: str, game: str | None) -> dict[str, str | None]:
    """The per-step lines of a grid game under a prompt set: not_solved, no_effect, some_no_effect, parse_error,
    steps_left (a template), moved (None: no line after a move that worked) and turn (a template heading the
    observation with the turn index; None: no heading)."""
    lines = dict(GRID_STEP_LINES)
    if uses_paper_set(prompt_set, game):
        lines.update(PAPER_SET["step"].get(game, {}))
    return lines
