"""The shared action parser: every accepted form, and that unreadable replies are None, never an exception."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from erl_envs.actions import GridAction, extract_action_text, format_action, parse_grid_action, parse_grid_actions


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


def test_huge_reply_reads_only_the_tail():
    assert parse_grid_action("x" * 1_000_000 + "```Left```") == GridAction.LEFT
    assert parse_grid_action("```Left```" + "x" * 1_000_000) is None
    # Floods of unclosed markup stay linear (this would take seconds with a backtracking regex).
    assert parse_grid_action("<answer>" * 200_000) is None
    assert extract_action_text("```" * 100_000) is not None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_parses_or_is_none(text):
    result = parse_grid_actions(text, max_actions=3)
    assert result is None or (1 <= len(result) <= 3 and all(isinstance(a, GridAction) for a in result))
