"""Every prompt erl-gym writes, in one place, so a user can read and override them.

Written in our own words from the ERL paper's description (PAPER.md section 1 and 3). Override by passing your own
strings to the env (``instructions=``) or to ``ReflectionWrapper`` (``reflection_instructions=`` ...), or by
assigning to these module attributes before building envs.
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


def instructions(style: str) -> str:
    return _lookup(INSTRUCTIONS, style)


def format_reminder(style: str) -> str:
    return _lookup(FORMAT_REMINDERS, style)


def reflection_instructions(style: str) -> str:
    return _lookup(REFLECTION_INSTRUCTIONS, style)
