"""Every prompt erl-gym writes, in one place, so a user can read and override them.

Two sets for the grid games, chosen by the envs' ``prompts=`` argument:

* ``"lenient"`` (the envs' default): our short prompts, written from the paper's description (PAPER.md sections 1
  and 3). They name no game and reveal no rule.
* ``"paper"`` (the paper presets and ``benchmarks/compare.py``): every piece of information the reference code's
  prompts carry, in our own words (``PAPER_SET``; docs/fidelity.md lists each element and where it sits): a
  structured-reasoning system prompt, the valid actions and reply format, Sokoban's push rule, per-step notices
  about walls and pushing, and a reflection request that names the game and lists, step by step, the grid, the
  action as read from the reply, the reward, whether it took effect, whether the episode ended and, for Sokoban,
  where the player, boxes and goals are.

Override by passing your own strings to the env (``instructions=``) or to ``ReflectionWrapper``
(``reflection_instructions=`` ...), or by assigning to these module attributes (or ``PAPER_SET`` entries) before
building envs.
"""

from __future__ import annotations

# --- First-attempt system prompts. The grid games reveal no rules: the model must infer them by playing. ---

GRID_INSTRUCTIONS = (
    "You are an agent playing a game on a grid. Each turn you see the current grid and choose one move: "
    "Up, Down, Left or Right. Think briefly about what to do, then give your move on its own inside a "
    "triple-backtick block, for example:\n```Up```"
)

QA_INSTRUCTIONS = (
    "Answer the question. You can search a Wikipedia index as many times as you need: write "
    "<search>your query</search> and the top passages come back. When you know the answer, reply without a "
    "search and put the final answer, as short as possible, in \\boxed{...}."
)

GENERIC_INSTRUCTIONS = (
    "You are an agent acting in a text environment. Read each observation and reply with your next action."
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
}

# --- The one-line reminder appended to a reflected system prompt on the second attempt. ---

GRID_FORMAT_REMINDER = "Give your move (Up, Down, Left or Right) inside a triple-backtick block, e.g. ```Up```."
QA_FORMAT_REMINDER = "Search with <search>query</search>; give the final answer in \\boxed{...}."
GENERIC_FORMAT_REMINDER = "Reply with your next action in the format the environment expects."

# --- Reflection instructions: what the policy is asked to write after a failed first attempt. ---

GRID_REFLECTION_INSTRUCTIONS = (
    "Your previous attempt at this game did not succeed. Below are the instructions you were given, the full trace "
    "of the attempt (what you saw, what you did, and what happened) and its outcome.\n"
    "Study the trace and work out how the game really works. Then write a new, complete system prompt for your next "
    "attempt at the same game: a rulebook that you will follow. Put it inside <prompt>...</prompt> with two parts:\n"
    "<game_rules>\n"
    "- what each symbol means\n"
    "- how to read the board (rows, columns, where you are)\n"
    "- the actions and exactly what each one does, including moves that have no effect\n"
    "- the objective and what ends the game\n"
    "</game_rules>\n"
    "<strategy>\n"
    "- a concrete plan and tactics that avoid the mistakes of the trace\n"
    "</strategy>\n"
    "Only the text inside <prompt>...</prompt> will be kept."
)

QA_REFLECTION_INSTRUCTIONS = (
    "Your previous answer to this question was not correct. Below are the instructions you were given, the full "
    "trace of your attempt (searches, retrieved passages, answer) and its outcome.\n"
    "Work out what went wrong: missing searches, wrong entity, unsupported answer, wrong answer format. Then write "
    "an improved instruction prompt for your next attempt at the same question, inside <prompt>...</prompt>. It "
    "should say how to decompose the question, what to search for and in which order, how to check the answer "
    "against the passages, and how to write the final answer. Only the text inside <prompt>...</prompt> is kept."
)

GENERIC_REFLECTION_INSTRUCTIONS = (
    "Your previous attempt did not succeed. Below are the instructions you were given, the trace of the attempt and "
    "its outcome. Work out what went wrong and write an improved system prompt for your next attempt inside "
    "<prompt>...</prompt>. Only the text inside the tags is kept."
)

# --- The no_reflection ablation: the second attempt sees the raw trace, with no reflection written. ---

NO_REFLECTION_NOTE = (
    "You already tried this exact task once and did not succeed. Learn from your previous attempt, whose trace "
    "follows, and do better this time."
)

# --- The reflection request: the user message of the reflect phase (its system prompt is the reflection
# instructions above). ``ReflectionWrapper`` fills these templates; the trace lists every step of the failed attempt.

REFLECTION_REQUEST = (
    "# The instructions you were given\n{base_prompt}\n\n"
    "# Your attempt\n{trace}\n\n"
    "Now write the new system prompt for your next attempt inside <prompt>...</prompt>."
)
TRACE_STEP = (
    "## Step {index}\nObservation:\n{observation}\nAction:\n{action}\n"
    "Reward: {reward}. Took effect: {took_effect}. Done: {done}.\nComment: {comment}"
)
TRACE_OUTCOME = "## Outcome\nFinal observation:\n{final_observation}\nReturn: {total_return}\nFeedback: {feedback}"

# The no_reflection ablation's second-attempt system prompt.
NO_REFLECTION_PROMPT = "{instructions}\n\n{note}\n\n# Your previous attempt\n{trace}"

# --- The paper set (``prompts="paper"``). A dict, not module constants: the tiny model's tokenizer is trained on the
# module's constant strings (erl_agents.trainer.tiny_corpus), and the paper set must not change it.

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
    # Appended to the system prompt of every attempt (the reflected one included), as the reference does.
    "reminder": {
        "FrozenLake": _PAPER_REMINDER.format(extra=""),
        "Sokoban": _PAPER_REMINDER.format(extra=_SOKOBAN_PUSH_RULE),
    },
    # Per-step lines that differ from the lenient set (the others are shared: not solved, steps remaining).
    "step": {
        "FrozenLake": {
            "no_effect": "Your last action had no effect: your position did not change. Check your reasoning, the "
                         "action you chose and the reply format: only the next action inside triple backticks, "
                         "e.g. ```Up```.",
            "parse_error": "No valid action was read from your last reply, so nothing happened. Put only the next "
                           "action inside triple backticks, e.g. ```Up```.",
        },
        "Sokoban": {
            "parse_error": "No valid move was read from your last reply, so nothing happened. Give a valid direction "
                           "(Up, Down, Left or Right) inside triple backticks, e.g. ```Up```.",
            "no_effect": "Your last move had no effect: you probably walked into a wall or pushed a box that is "
                         "blocked. Give a valid direction: Up, Down, Left or Right.",
            "some_no_effect": "Some of your last moves had no effect: walls and blocked boxes stop you.",
            "moved": "Your last move worked (you moved, or pushed a box), but the puzzle is not solved yet: plan "
                     "your next move.",
        },
    },
    "reflection_instructions": (
        "You are a chief strategist for a game whose rules nobody told you. You are given the rulebook used so far "
        "(it may be wrong) and the full record of a failed attempt. Compare what was expected with what happened, "
        "work out the principles behind winning and losing, and write the next version of the Master Rulebook: "
        "general, authoritative rules stated as definite principles, short enough to follow while playing.\n"
        "Reply with a single block in exactly this shape:\n"
        "<prompt>\n"
        "<game_rules>\n"
        "**1. Symbol Meanings:** what every symbol stands for (things, terrain, goals, dangers), and which symbol "
        "is you.\n"
        "**2. Information & Interpretation:** how to read the board and what it tells you about the state.\n"
        "**3. Gameplay & Actions:** the mechanics: what you can do and how things interact.\n"
        "**4. Action Effects:** what each action does, including when it does nothing.\n"
        "**5. Game Objective & Termination:** how the game is won, lost or runs out.\n"
        "</game_rules>\n"
        "<strategy>\n"
        "**1. Core Strategies:** the high-level priorities that lead to a win.\n"
        "**2. Tactical Tips:** concrete moves for situations that come up often.\n"
        "</strategy>\n"
        "</prompt>"
    ),
    "reflection_request": (
        "# The rulebook so far (inferred from past attempts; it may be inaccurate)\n{base_prompt}\n\n"
        "# A failed attempt at {game}\n{trace}\n\n"
        "Think step by step, then write an improved {game} rulebook for the next attempt inside "
        "<prompt>...</prompt>."
    ),
    "trace_step": (
        "## Step {index}\nBoard seen before the action:\n{observation}\n"
        "Action read from the reply: {action}\n"
        "Reward: {reward}. Took effect: {took_effect}. Episode ended: {done}.{positions}\n"
        "Comment: {comment}"
    ),
    "trace_outcome": "## Outcome\nFinal board:\n{final_observation}\nReward of the attempt: {total_return}\n"
                     "Feedback: {feedback}",
}

PROMPT_SETS = ("lenient", "paper")
GAMES = ("FrozenLake", "Sokoban")

STYLES = ("grid", "qa", "generic")

INSTRUCTIONS = {"grid": "GRID_INSTRUCTIONS", "qa": "QA_INSTRUCTIONS", "generic": "GENERIC_INSTRUCTIONS"}
FORMAT_REMINDERS = {"grid": "GRID_FORMAT_REMINDER", "qa": "QA_FORMAT_REMINDER", "generic": "GENERIC_FORMAT_REMINDER"}
REFLECTION_INSTRUCTIONS = {
    "grid": "GRID_REFLECTION_INSTRUCTIONS",
    "qa": "QA_REFLECTION_INSTRUCTIONS",
    "generic": "GENERIC_REFLECTION_INSTRUCTIONS",
}


def _lookup(table: dict[str, str], style: str) -> str:
    if style not in table:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {list(STYLES)}")
    # Looked up by attribute name at call time, so assigning to the module attribute overrides it everywhere.
    return globals()[table[style]]


def uses_paper_set(style: str, prompt_set: str, game: str | None) -> bool:
    """Whether the paper set applies: it covers the two grid games; other styles and games keep the lenient set."""
    if prompt_set not in PROMPT_SETS:
        raise ValueError(f"unknown prompt set {prompt_set!r}; choose one of {list(PROMPT_SETS)}")
    return prompt_set == "paper" and style == "grid" and game in GAMES


def instructions(style: str, prompt_set: str = "lenient", game: str | None = None) -> str:
    if uses_paper_set(style, prompt_set, game):
        return PAPER_SET["instructions"] + "\n\n" + PAPER_SET["reminder"][game]
    return _lookup(INSTRUCTIONS, style)


def format_reminder(style: str, prompt_set: str = "lenient", game: str | None = None) -> str:
    if uses_paper_set(style, prompt_set, game):
        return PAPER_SET["reminder"][game]
    return _lookup(FORMAT_REMINDERS, style)


def reflection_instructions(style: str, prompt_set: str = "lenient", game: str | None = None) -> str:
    if uses_paper_set(style, prompt_set, game):
        return PAPER_SET["reflection_instructions"]
    return _lookup(REFLECTION_INSTRUCTIONS, style)


def step_lines(prompt_set: str, game: str | None) -> dict[str, str | None]:
    """The per-step lines of a grid game under a prompt set: not_solved, no_effect, some_no_effect, parse_error,
    steps_left (a template) and moved (None: no line after a move that worked)."""
    lines = dict(GRID_STEP_LINES)
    if uses_paper_set("grid", prompt_set, game):
        lines.update(PAPER_SET["step"].get(game, {}))
    return lines
