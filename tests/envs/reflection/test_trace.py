"""The trace text of every prompt set, written out line by line: what a reflector is shown of an attempt.

Each expected text is spelled out here rather than built with the module's own helpers, so a field sent to the
wrong place, a step numbered from 0, a clip applied to the wrong field or not at all, or a verdict flipped shows up
as a difference in the text.
"""

import pytest

from erl_envs.reflection.trace import (
    TraceStep,
    clip_text,
    format_paper_trace,
    format_small_trace,
    format_trace,
    paper_feedback,
)

BOARD = " A \t F \t\n H \t G \t"
OBSERVATION = f"Turn 1 of 5.\n{BOARD}\nYour move?"


def _step(**fields):
    values = dict(observation=OBSERVATION, action="```Right``` I go right", reward=0.0, took_effect=True,
                  terminated=False, truncated=False, comment="You moved right.")
    values.update(fields)
    return TraceStep(**values)


def test_clip_text_keeps_short_text_and_cuts_long_text_in_the_middle():
    assert clip_text("abcde", 5) == "abcde" and clip_text("abcde", None) == "abcde"
    # An odd limit: the head gets limit // 2 characters, the tail the rest.
    assert clip_text("abcdefghij", 5) == "ab\n[... 5 characters omitted ...]\nhij"
    assert clip_text("abcdefghij", 4) == "ab\n[... 6 characters omitted ...]\nij"


def test_paper_trace_shows_the_board_the_action_as_read_and_the_verdicts():
    steps = [
        _step(action_read="Right", action_reported=True, positions="Player at (0, 1)."),
        _step(action="x" * 50, reward=1.0, took_effect=False, terminated=True, comment="Stuck."),
        _step(action_read=None, action_reported=True, truncated=True, comment="Unreadable."),
    ]
    text = format_paper_trace(steps, f"Over.\n{BOARD}", 1.0, "Fell in.", max_field_chars=30, solved=True,
                              rule="project")
    long_action = "x" * 15 + "\n[... 20 characters omitted ...]\n" + "x" * 15
    assert text == "\n\n".join([
        f"## Step 1\nBoard seen before the action:\n{BOARD}\nAction read from the reply: Right\n"
        "Reward: 0. Took effect: yes. Episode ended: no. Player at (0, 1).\nComment: You moved right.",
        f"## Step 2\nBoard seen before the action:\n{BOARD}\nAction read from the reply: {long_action}\n"
        "Reward: 1. Took effect: no. Episode ended: yes.\nComment: Stuck.",
        f"## Step 3\nBoard seen before the action:\n{BOARD}\n"
        "Action read from the reply: none (no valid action in the reply: an invalid action)\n"
        "Reward: 0. Took effect: yes. Episode ended: yes.\nComment: Unreadable.",
        f"## Outcome\nFinal board:\n{BOARD}\nReward of the attempt: 1. Solved: yes.\nFeedback: Fell in.",
    ])
    # The reference's rule: the unreadable reply as its action code 0 with the no-move comment, no final board.
    text = format_paper_trace(steps, f"Over.\n{BOARD}", 1.0, "Fell in.", max_field_chars=30, solved=True,
                              game="Sokoban")
    assert text == "\n\n".join([
        f"## Step 1\nBoard seen before the action:\n{BOARD}\nAction read from the reply: Right\n"
        "Reward: 0. Took effect: yes. Episode ended: no. Player at (0, 1).\nComment: You moved right.",
        f"## Step 2\nBoard seen before the action:\n{BOARD}\nAction read from the reply: {long_action}\n"
        "Reward: 1. Took effect: no. Episode ended: yes.\nComment: Stuck.",
        f"## Step 3\nBoard seen before the action:\n{BOARD}\nAction read from the reply: 0\n"
        "Reward: 0. Took effect: yes. Episode ended: yes.\n"
        "Comment: did not move (probably a wall, or a box that could not be pushed)",
        "## Outcome\nReward of the attempt: 1. Solved: yes.\nFeedback: Fell in.",
    ])
    with pytest.raises(ValueError, match="trace_rule must be one of"):
        format_paper_trace(steps, BOARD, 0.0, "", rule="verl")
    # A text without board rows is shown whole, clipped; an unsolved attempt says so.
    text = format_paper_trace([], "no rows here " * 5, 0.0, "", max_field_chars=20, rule="project")
    assert text == ("## Outcome\nFinal board:\nno rows he\n[... 45 characters omitted ...]\nrows here \n"
                    "Reward of the attempt: 0. Solved: no.\nFeedback: ")


def test_project_trace_shows_every_field_clipped():
    steps = [_step(), _step(action="  ", observation="o" * 40, took_effect=False, truncated=True, comment="c")]
    text = format_trace(steps, "end " * 10, 0.5, "Out of steps.", max_field_chars=20)
    clipped_obs = "o" * 10 + "\n[... 20 characters omitted ...]\n" + "o" * 10
    clipped_action = "```Right``\n[... 2 characters omitted ...]\nI go right"
    assert text == "\n\n".join([
        f"## Step 1\nObservation:\nTurn 1 of \n[... 21 characters omitted ...]\nYour move?\nAction:\n{clipped_action}\n"
        "Reward: 0. Took effect: yes. Done: no.\nComment: You moved right.",
        f"## Step 2\nObservation:\n{clipped_obs}\nAction:\n(an empty reply)\n"
        "Reward: 0. Took effect: no. Done: yes.\nComment: c",
        "## Outcome\nFinal observation:\nend end en\n[... 20 characters omitted ...]\nd end end \n"
        "Return: 0.5\nFeedback: Out of steps.",
    ])


def test_small_trace_lists_the_moves_between_the_start_and_end_boards():
    steps = [_step(action_read="Right", action_reported=True, observation=f"Start.\n{BOARD}"),
             _step(action_read=None, action_reported=True, comment="Nothing happened."),
             _step(action="   ", comment="Empty."), _step(action="y" * 210, comment="Long.")]
    text = format_small_trace(steps, f"End.\n{BOARD}\nBye.", 0.0, "You fell in a hole.", max_field_chars=100)
    long_move = "y" * 100 + "\n[... 10 characters omitted ...]\n" + "y" * 100
    assert text == (f"Board at the start:\n{BOARD}\nYour moves:\n1. Right: You moved right.\n"
                    f"2. no valid move: Nothing happened.\n3. no valid move: Empty.\n4. {long_move}: Long.\n"
                    f"Board at the end:\n{BOARD}\nOutcome: You fell in a hole. Reward: 0.")
    # No moves: the start board is the final one; boards are clipped to the field limit.
    assert format_small_trace([], "z" * 30, 1.0, "Done.", max_field_chars=10) == (
        "Board at the start:\nzzzzz\n[... 20 characters omitted ...]\nzzzzz\nYour moves:\n\n"
        "Board at the end:\nzzzzz\n[... 20 characters omitted ...]\nzzzzz\nOutcome: Done. Reward: 1.")


@pytest.mark.parametrize("game, ending, state", [
    ("FrozenLake", "terminated", "in a hole"),
    ("FrozenLake", "truncated", "still on the board when the steps ran out"),
    ("Sokoban", "terminated", "the puzzle unsolved when the episode ended"),
    ("Sokoban", "truncated", "the puzzle unsolved when the steps ran out"),
])
def test_paper_feedback_of_a_failed_attempt(game, ending, state):
    steps = [_step(), _step(took_effect=False), _step(took_effect=False, action_read="Up", action_reported=True,
                                                      **{ending: True})]
    assert paper_feedback(steps, "The attempt failed.", 0.0, False, game) == (
        "The attempt failed. 2 of the actions had no effect. The last 2 actions in a row did nothing. "
        f"Last action: Up. Final state: {state}. Reward 0.00 after 3 steps.")


def test_paper_feedback_of_a_success_and_of_other_games():
    steps = [_step(took_effect=False), _step(terminated=True, action="  ```Down```  ")]
    # A success names no ineffective actions and no final state.
    assert paper_feedback(steps, "Solved.", 1.0, True, "FrozenLake") == (
        "Solved. Last action: ```Down```. Reward 1.00 after 2 steps.")
    # One ineffective action is counted but is no run; a game without final states names none.
    assert paper_feedback(steps, "Failed.", 0.25, False, None) == (
        "Failed. 1 of the actions had no effect. Last action: ```Down```. Reward 0.25 after 2 steps.")
    # An unreadable last reply: the reference's action code 0, or under the project's rule "none".
    unreadable = [_step(action_read=None, action_reported=True)]
    assert paper_feedback(unreadable, "Failed.", 0.0, False, "Sokoban") == (
        "Failed. Last action: 0. Reward 0.00 after 1 steps.")
    assert paper_feedback(unreadable, "Failed.", 0.0, False, "Sokoban", rule="project") == (
        "Failed. Last action: none (no valid action in the reply). Reward 0.00 after 1 steps.")
    assert paper_feedback([], "Nothing.", 0.0, False, "FrozenLake") == "Nothing. Reward 0.00 after 0 steps."


def test_paper_metrics_average_over_the_batch():
    from erl_envs.reflection import prompts
    from erl_envs.reflection.trace import paper_metrics

    expected = prompts.PAPER_SET["metrics"].format(average=0.5, success_rate=1 / 3, size=3)
    assert paper_metrics([1.0, 0.0, 0.5], [True, False, False]) == expected


def test_paper_trace_clips_a_long_board():
    board = "\n".join(" F \t" * 10 for _ in range(4))  # 4 rows of 40 characters
    text = format_paper_trace([_step(observation=board, action_read="Up", action_reported=True)], board, 0.0, "",
                              max_field_chars=40, rule="project")
    assert text.count(clip_text(board, 40)) == 2 and board not in text
