"""The shared action parser: every accepted form, and that unreadable replies are None, never an exception."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from erl_envs.grid.actions import (
    GridAction,
    extract_action_text,
    format_action,
    last_backtick_block,
    parse_actions,
    parse_grid_action,
    parse_grid_actions,
    parse_paper_action,
)

L, D, R, U = GridAction.LEFT, GridAction.DOWN, GridAction.RIGHT, GridAction.UP


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("```Up```", GridAction.UP),
        ("I will go down.\n```\ndown\n```", GridAction.DOWN),
        ("```text\nLEFT\n```", GridAction.LEFT),
        ("First ```Up``` no wait ```Right```", GridAction.RIGHT),  # the last block wins
        ("<answer>left</answer>", GridAction.LEFT),
        ("<ANSWER> Up </Answer>", GridAction.UP),
        ("<answer>x</answer> then <answer>down</answer>", GridAction.DOWN),
        ("Right.", GridAction.RIGHT),
        ("  up  ", GridAction.UP),
        ("```1```", GridAction.UP),
        ("```2```", GridAction.DOWN),
        ("```3```", GridAction.LEFT),
        ("```4```", GridAction.RIGHT),
        ("```north```", GridAction.UP),
        ("```\u2190```", GridAction.LEFT),
        ("```'Down'```", GridAction.DOWN),
    ],
)
def test_accepted_forms(reply, expected):
    assert parse_grid_action(reply) == expected


@pytest.mark.parametrize(
    "reply",
    ["", "   ", "I think Up", "```jump```", "```5```", "```Up Left```", "<answer></answer>", "```\n\n```",
     "upward", "\x00\x01", "\ud800"],
)
def test_unreadable_replies_are_none(reply):
    assert parse_grid_action(reply) is None


def test_block_beats_answer_tag_and_prose():
    assert parse_grid_action("<answer>Up</answer>\n```Down```") == GridAction.DOWN


def test_several_actions_per_turn():
    assert parse_grid_actions("```Up, up -> Left; right```", max_actions=4) == [
        GridAction.UP, GridAction.UP, GridAction.LEFT, GridAction.RIGHT]
    assert parse_grid_actions("```Up Left Down```", max_actions=2) is None  # too many is unreadable, not truncated
    assert parse_grid_actions("```Up foo```", max_actions=2) is None


def test_format_action_round_trips():
    for action in GridAction:
        assert parse_grid_action(format_action(action)) == action


def test_non_str_is_a_type_error():
    for bad in (None, 3, b"Up", ["Up"]):
        with pytest.raises(TypeError, match="must be a str"):
            parse_grid_actions(bad)


def test_huge_reply_is_read_in_full():
    assert parse_grid_action("x" * 1_000_000 + "```Left```") == GridAction.LEFT
    assert parse_grid_action("```Left```" + "x" * 1_000_000) == GridAction.LEFT
    # Floods of unclosed markup stay linear (this would take seconds with a backtracking regex).
    assert parse_grid_action("<answer>" * 200_000) is None
    assert extract_action_text("```" * 100_000) is not None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_parses_or_is_none(text):
    result = parse_grid_actions(text, max_actions=3)
    assert result is None or (1 <= len(result) <= 3 and all(isinstance(a, GridAction) for a in result))


# ----------------------------------------------------------------------------- the paper's reader

# The reference code's rule (rllm FrozenLakeAgent/SokobanAgent._parse_model_response): the last ```...``` block of
# a lazy DOTALL findall, .strip().lower(), then a move word, or .isdigit() and int() in 1-4 (1 Left, 2 Down,
# 3 Right, 4 Up, both games). Everything else is the invalid action.
PAPER_CASES = [
    # accepted words, any case, any surrounding whitespace inside the block
    ("```Up```", U), ("```up```", U), ("```UP```", U), ("```Down```", D), ("```left```", L), ("```RIGHT```", R),
    ("```  Left \n```", L), ("```\nRight\n```", R), ("```\tdown\t```", D), ("```\u3000up\u3000```", U),
    # digits in the reference's order
    ("```1```", L), ("```2```", D), ("```3```", R), ("```4```", U), ("``` 4 ```", U), ("```02```", D),
    ("```\u0663```", R),  # an Arabic-Indic three: isdigit() and int() read it
    # the last block wins, whatever comes before or after it
    ("```Up``` then ```Down```", D), ("Thinking...\n```Left```\nDone.", L), ("```Up```" + " x" * 30_000, U),
    ("x" * 50_000 + "```Right```", R), ("```Right``` " + "x" * 25_000, R),
    ("```Up``` and an unclosed ``` fence", U), ("``````Left```", None),  # an empty block, then Left``` is prose
    # rejected: no block, or a block that is not exactly a move
    ("Up", None), ("up", None), ("<answer>Up</answer>", None), ("Up.", None), ("**Up**", None), ("", None),
    ("```Up.```", None), ("```**Up**```", None), ("```u```", None), ("```north```", None), ("```^```", None),
    ("```\u2191```", None), ("```Up Left```", None), ("```move up```", None), ("```python\nUp\n```", None),
    ("```0```", None), ("```5```", None), ("```-1```", None), ("```1.0```", None), ("```\u00b2```", None),
    ("```Up```` ", U),  # the block closes at the first fence; the fourth backtick is prose
    ("```Down``` then ```Jump```", None), ("```Left``` and then ```", L), ("``` ```", None), ("``````", None),
    ("```Up", None), ("Up```", None), ("``Up``", None), ("`Up`", None), ("```'Up'```", None),
]


def _reference_rule(reply):
    """The rule as the reference writes it, with its own regex: the oracle for the table."""
    import re

    matches = re.findall(r"```(.*?)```", reply, re.DOTALL)
    if not matches:
        return None
    word = matches[-1].strip().lower()
    words = {"left": L, "down": D, "right": R, "up": U}
    if word in words:
        return words[word]
    if word.isdigit():
        try:
            return {1: L, 2: D, 3: R, 4: U}.get(int(word))
        except ValueError:
            return None
    return None


@pytest.mark.parametrize("reply, expected", PAPER_CASES, ids=[repr(r)[:40] for r, _ in PAPER_CASES])
def test_paper_reader_follows_the_reference_rule(reply, expected):
    assert len(PAPER_CASES) >= 40
    assert _reference_rule(reply) == expected  # the table itself is right about the reference
    assert parse_paper_action(reply) == expected
    assert parse_actions(reply, "paper") == (None if expected is None else [expected])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["`", "```", "Up", "down", "1", "4", " ", "\n", "x", "LEFT", "2"]), max_size=20))
def test_paper_reader_agrees_with_the_reference_on_random_markup(pieces):
    reply = "".join(pieces)
    assert parse_paper_action(reply) == _reference_rule(reply)


def test_block_pairing_matches_a_lazy_findall():
    import re

    for reply in ["```a``` b ```c```", "````a````", "```a```` b```", "``````", "```a\nb```c```d```", "x```"]:
        matches = re.findall(r"```(.*?)```", reply, re.DOTALL)
        assert last_backtick_block(reply) == (matches[-1] if matches else None)


def test_paper_reader_is_linear_on_huge_and_adversarial_replies():
    import time

    start = time.perf_counter()
    assert parse_paper_action("```Right``` " + "x" * 25_000) == R
    assert parse_paper_action("```" * 300_000) is None  # 100,000 empty blocks
    assert parse_paper_action("``` x" * 200_000) is None
    assert parse_paper_action("x" * 5_000_000 + "```4```") == U
    assert time.perf_counter() - start < 2.0


def test_unknown_action_format_is_rejected():
    with pytest.raises(ValueError, match="action_format"):
        parse_actions("```Up```", "strict")
