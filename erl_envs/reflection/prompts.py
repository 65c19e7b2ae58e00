"""What the policy is asked after a failed first attempt: the reflection's system prompt (per prompt style), the
reflection request (the failed attempt's trace), the reminder appended to a reflected system prompt, and the
no-reflection ablation's texts.

Two sets, following the env's prompt set: the lenient one (ours), and for the grid games under ``prompts="paper"``
the paper set (``PAPER_SET``): a request that names the game and lists, step by step, the grid, the action as read
from the reply, the reward, whether it took effect, whether the episode ended and, for Sokoban, where the player,
boxes and goals are (docs/fidelity.md); and for the grid games under ``prompts="small"`` the small-model set
(``SMALL_SET``): instructions and a request sized for a 135M model, whose trace is the start and end boards and the
moves with their effects, not every board (the lenient request of a 4x4 game runs to ~2,300 characters, which such a
model copies back instead of writing rules).

Override through ``ReflectionWrapper``'s arguments (``reflection_instructions=`` ...), by a templates file
(``erl-train --prompts FILE``, ``erl_envs.reflection.prompt_templates``; these texts are its ``reflection.*`` names),
or by assigning to these module attributes (or ``PAPER_SET`` entries) before building wrappers.
"""

from __future__ import annotations

from erl_envs.grid import prompts as grid_prompts
from erl_envs.protocol import STYLES
from erl_envs.qa import prompts as qa_prompts

__all__ = ["GRID_REFLECTION_INSTRUCTIONS", "QA_REFLECTION_INSTRUCTIONS", "GENERIC_REFLECTION_INSTRUCTIONS",
           "GENERIC_FORMAT_REMINDER", "NO_REFLECTION_NOTE", "NO_REFLECTION_PROMPT", "REFLECTION_REQUEST", "TRACE_STEP",
           "TRACE_OUTCOME", "PAPER_SET", "SMALL_SET", "uses_paper_set", "uses_small_set", "format_reminder",
           "reflection_instructions"]

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

# The reminder appended to a reflected system prompt of an env of the generic style (the grid games' and HotpotQA's
# are theirs: erl_envs.grid.prompts, erl_envs.qa.prompts).
GENERIC_FORMAT_REMINDER = "Reply with your next action in the format the environment expects."

# --- The paper set: the grid games' reflection texts under ``prompts="paper"``. A dict, not module constants (see
# erl_envs.grid.prompts).

PAPER_SET = {
    "reflection_instructions": (
        "You are a chief strategist for a game whose rules nobody told you. Your job is to refine the game's Master "
        "Rulebook from field records: a collection of winning and failed playthroughs gathered over a long time, "
        "each with the rulebook used so far (it may be wrong). Compare what was expected with what happened, and "
        "learn above all from the contrast between the games that were won and those that were lost. Think long "
        "term: look for general truths that hold across many situations, not for fixes of one game. Merge what you "
        "find into one unified theory of the game, and state it as definite, authoritative principles, short "
        "enough to follow while playing.\n"
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
        "# Batch metrics\n{metrics}\n\n"
        "# A failed attempt at {game}\n{task}\n\n{trace}\n\n"
        "Think step by step, then write an improved {game} rulebook for the next attempt inside "
        "<prompt>...</prompt>."
    ),
    # The first attempts of the batch the reflection is asked about. The reference's workflow batch is the one
    # episode (its scripts leave the batch size at 1), so these are this attempt's own numbers.
    "metrics": "- Average reward of the first attempts: {average:.4f}\n"
               "- Share of first attempts that succeeded: {success_rate:.4f}\n"
               "- First attempts in the batch: {size}",
    # The task line of each game: FrozenLake's generator parameters, Sokoban's layout (named by its goal, box and
    # player cells, row then column) and its starting board in compact symbols.
    "task": {
        "FrozenLake": "Task: seed {seed}, board size {size}, frozen-tile probability {p}",
        "Sokoban": "Level {name}, step budget {max_steps}. Its starting board:\n{layout}",
    },
    # What the feedback line adds to the outcome: no-effect moves, a trailing run of them, the last action, the
    # final state, the reward and the steps taken.
    "feedback": {
        "no_effect": "{count} of the actions had no effect.",
        "no_effect_run": "The last {count} actions in a row did nothing.",
        "last_action": "Last action: {action}.",
        "final_state": "Final state: {state}.",
        "totals": "Reward {reward:.2f} after {steps} steps.",
    },
    "final_state": {
        "FrozenLake": {"terminated": "in a hole", "truncated": "still on the board when the steps ran out"},
        "Sokoban": {"terminated": "the puzzle unsolved when the episode ended",
                    "truncated": "the puzzle unsolved when the steps ran out"},
    },
    "trace_step": (
        "## Step {index}\nBoard seen before the action:\n{observation}\n"
        "Action read from the reply: {action}\n"
        "Reward: {reward}. Took effect: {took_effect}. Episode ended: {done}.{positions}\n"
        "Comment: {comment}"
    ),
    # The outcome after the steps. The reference's trace ends with the board seen before the last action; the
    # project's trace rule (``trace_rule="project"``) also shows the board the attempt ended on.
    "trace_outcome": "## Outcome\nReward of the attempt: {total_return}. Solved: {solved}.\nFeedback: {feedback}",
    "trace_outcome_board": "## Outcome\nFinal board:\n{final_observation}\nReward of the attempt: {total_return}. "
                           "Solved: {solved}.\nFeedback: {feedback}",
    # A reply from which no action was read. The reference's trace (``trace_rule="paper"``) shows its invalid-action
    # code, 0, with the comment it gives every move that changed nothing, which blames a wall; the project's rule
    # says that no action was read and keeps the env's own comment.
    "unreadable": {
        "action": "0",
        "comment": {"FrozenLake": "did not move (probably a wall or the edge of the board)",
                    "Sokoban": "did not move (probably a wall, or a box that could not be pushed)"},
        "project_action": "none (no valid action in the reply: an invalid action)",
        "project_last_action": "none (no valid action in the reply)",
    },
}

# --- The small-model set: the grid games' reflection texts under ``prompts="small"``. A dict, like PAPER_SET. The
# trace shows the start board, one line per move (the move as read and what it did), the end board and the outcome.

SMALL_SET = {
    "reflection_instructions": (
        "You failed at a grid game. Work out its rules from your moves below. Write new instructions for your next "
        "try inside <prompt>...</prompt>: what each letter means, what each move does, and the moves that reach "
        "the goal."
    ),
    "reflection_request": (
        "Your instructions were:\n{base_prompt}\n\n{trace}\n\n"
        "Write your new instructions inside <prompt>...</prompt>."
    ),
    "trace": "Board at the start:\n{first_board}\nYour moves:\n{moves}\nBoard at the end:\n{final_board}\n"
             "Outcome: {feedback} Reward: {total_return}.",
    "move": "{index}. {action}: {comment}",
    "no_move": "no valid move",
}


def uses_paper_set(style: str, prompt_set: str, game: str | None) -> bool:
    """Whether the paper set applies: it covers the two grid games; other styles and games keep the lenient set."""
    paper = grid_prompts.uses_paper_set(prompt_set, game)  # checks the prompt set whatever the style
    return style == "grid" and paper


def uses_small_set(style: str, prompt_set: str, game: str | None) -> bool:
    """Whether the small-model set applies: the grid games under ``prompts="small"``."""
    small = grid_prompts.uses_small_set(prompt_set, game)  # checks the prompt set whatever the style
    return style == "grid" and small


def format_reminder(style: str, prompt_set: str = "lenient", game: str | None = None) -> str:
    """The line appended to a reflected system prompt: the reply format of the env's style."""
    _check_style(style)
    if style == "grid":
        return grid_prompts.format_reminder(prompt_set, game)
    if style == "qa":
        return qa_prompts.paper_reminder() if prompt_set == "paper" else qa_prompts.QA_FORMAT_REMINDER
    return GENERIC_FORMAT_REMINDER


def reflection_instructions(style: str, prompt_set: str = "lenient", game: str | None = None) -> str:
    """The reflection's system prompt for an env of this style."""
    _check_style(style)
    if uses_paper_set(style, prompt_set, game):
        return PAPER_SET["reflection_instructions"]
    if uses_small_set(style, prompt_set, game):
        return SMALL_SET["reflection_instructions"]
    return {"grid": GRID_REFLECTION_INSTRUCTIONS, "qa": QA_REFLECTION_INSTRUCTIONS,
            "generic": GENERIC_REFLECTION_INSTRUCTIONS}[style]


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {list(STYLES)}")
