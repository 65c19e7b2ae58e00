"""Sokoban levels: XSB parsing, validation errors, the rules of a move, and level files."""

import hashlib
import json

import pandas as pd
import pytest

from erl_envs.grid.actions import GridAction
from erl_envs.grid.sokoban_levels import (
    BOX_BLOCKED,
    HIT_WALL,
    MOVED,
    PUSHED,
    LevelError,
    SokobanLevel,
    apply_move,
    load_levels,
    parse_level,
    replay,
)

CORRIDOR = ["#####", "#@$.#", "#####"]

ROOM = """
######
#    #
# @$ #
#  . #
######
"""


def test_parse_reads_every_xsb_character():
    level = parse_level(["#######", "#+*$ .#", "#-_ $ #", "#######"])
    assert level.player == (1, 1)
    assert level.boxes == {(1, 2), (1, 3), (2, 4)}
    assert level.targets == {(1, 1), (1, 2), (1, 5)}
    assert (2, 1) in level.floor and (2, 2) in level.floor
    assert level.height == 4 and level.width == 7


def test_string_and_rows_parse_to_the_same_level_and_round_trip():
    from_string = parse_level(ROOM)
    from_rows = parse_level(ROOM.strip("\n").split("\n"))
    assert from_string == from_rows
    assert parse_level(from_string.to_xsb()) == from_string
    assert "\n".join(from_string.to_xsb()) == ROOM.strip("\n")


def test_key_is_a_stable_content_hash():
    level = parse_level(CORRIDOR)
    assert level.key == hashlib.sha1("#####\n#@$.#\n#####".encode()).hexdigest()
    assert level.key == "679e986d21131044e9174d3f6ef9ce9480e3bb8e"
    # The name is a label only.
    assert parse_level(CORRIDOR, name="other").key == level.key
    assert parse_level(CORRIDOR, name="other") == level


def test_exterior_cells_are_not_floor_and_are_drawn_as_walls():
    level = parse_level(["  #####", "  #@$.#", "  #####"])
    assert level.floor == {(1, 3), (1, 4), (1, 5)}
    assert level.tile_kinds()[1][:3] == ["wall", "wall", "wall"]
    assert level.to_xsb() == ["  #####", "  #@$.#", "  #####"]


def test_ragged_rows_are_padded_with_exterior():
    level = parse_level(["#####", "#@$.#", "####"])
    assert level.width == 5
    assert (2, 4) not in level.walls and (2, 4) not in level.floor


def test_tile_kinds_name_every_tile():
    level = parse_level(["#######", "#+*$.$#", "#     #", "#######"])
    assert level.tile_kinds()[1] == ["wall", "agent_on_target", "box_on_target", "box", "target", "box", "wall"]
    assert level.tile_kinds()[2][1] == "floor"


@pytest.mark.parametrize(
    "rows, fragment, where",
    [
        (["#####", "#.$.#", "#####"], "no player", None),
        (["#####", "#@$@#", "#.  #", "#####"], "2 players", (1, 3)),
        (["#####", "#@ .#", "#####"], "no boxes", None),
        (["######", "#@$$.#", "######"], "2 boxes but 1 goal", None),
        (["#####", "#@  #", "#####"], "no boxes", None),
        (["#####", "#@x.#", "#####"], "unknown character 'x' at row 1, col 2", (1, 2)),
        (["#####", "#@3.#", "#####"], "run-length", (1, 2)),
        (["#####", "#@$. ", "#####"], "not closed", (1, 4)),
        (["#####", "#@$.#", "## ##", "#   #"], "not closed", None),
        (["#######", "#@$#. #", "#######"], "goal at row 1, col 4 is where the player cannot go", (1, 4)),
        (["#######", "#@.#$ #", "#######"], "box at row 1, col 4 is where the player cannot go", (1, 4)),
        ([], "empty", None),
        (["#####", "#@\t.#", "#####"], "unknown character '\\t'", (1, 2)),
    ],
)
def test_malformed_levels_say_what_and_where(rows, fragment, where):
    with pytest.raises(LevelError) as err:
        parse_level(rows)
    assert fragment in str(err.value)
    if where is not None:
        assert (err.value.row, err.value.col) == where


def test_non_text_levels_raise_type_errors():
    with pytest.raises(TypeError, match="decode"):
        parse_level(b"#####\n#@$.#\n#####")
    with pytest.raises(TypeError):
        parse_level(42)
    with pytest.raises(LevelError, match="row 1 is a int"):
        parse_level(["#####", 5, "#####"])


def test_a_constructed_level_is_validated_too():
    walls = parse_level(CORRIDOR).walls
    with pytest.raises(LevelError, match="on a wall"):
        SokobanLevel(3, 5, walls, frozenset({(1, 2)}), frozenset({(1, 3)}), (0, 0))
    with pytest.raises(LevelError, match="share"):
        SokobanLevel(3, 5, walls, frozenset({(1, 2)}), frozenset({(1, 3)}), (1, 2))
    with pytest.raises(LevelError, match="outside"):
        SokobanLevel(3, 5, walls, frozenset({(1, 9)}), frozenset({(1, 3)}), (1, 1))


def test_apply_move_walks_pushes_and_blocks():
    level = parse_level(["#######", "#@$ $.#", "#.    #", "#######"])
    floor, boxes = level.floor, level.boxes
    player, boxes1, outcome = apply_move(floor, boxes, level.player, GridAction.RIGHT)
    assert (player, outcome) == ((1, 2), PUSHED) and boxes1 == {(1, 3), (1, 4)}
    # Two boxes in a row cannot be pushed.
    assert apply_move(floor, boxes1, player, GridAction.RIGHT) == (player, boxes1, BOX_BLOCKED)
    assert apply_move(floor, boxes, level.player, GridAction.UP) == (level.player, boxes, HIT_WALL)
    assert apply_move(floor, boxes, level.player, GridAction.DOWN) == ((2, 1), boxes, MOVED)
    # A box against a wall cannot be pushed into it.
    end = replay(level, [GridAction.DOWN, GridAction.RIGHT, GridAction.RIGHT, GridAction.RIGHT, GridAction.UP])
    assert end.player == (2, 4) and end.boxes == {(1, 2), (1, 4)}


def test_replay_solves_the_corridor():
    assert replay(parse_level(CORRIDOR), [GridAction.RIGHT]).is_solved


# --- Level files ---------------------------------------------------------------------------------------------


BOXOBAN_TEXT = """; 0
#####
#@$.#
#####

; 1
######
#    #
# @$ #
#  . #
######
"""


def test_load_boxoban_style_text(tmp_path):
    path = tmp_path / "levels.txt"
    path.write_text(BOXOBAN_TEXT)
    levels = load_levels(path)
    assert [lv.name for lv in levels] == ["0", "1"]
    assert levels[0] == parse_level(CORRIDOR)
    assert levels[1] == parse_level(ROOM)


def test_load_blank_separated_text_without_headers(tmp_path):
    path = tmp_path / "plain.xsb"
    path.write_text("\n".join(CORRIDOR) + "\n\n\n" + ROOM.strip("\n") + "\n")
    levels = load_levels(str(path))
    assert len(levels) == 2
    assert levels[0].name == "plain-0" and levels[1].name == "plain-1"


def test_load_jsonl_and_parquet(tmp_path):
    jsonl = tmp_path / "levels.jsonl"
    jsonl.write_text(json.dumps({"layout": CORRIDOR, "uid": "c"}) + "\n\n" + json.dumps({"layout": ROOM}) + "\n")
    parquet = tmp_path / "levels.parquet"
    pd.DataFrame({"layout": [CORRIDOR, ROOM.strip("\n").split("\n")], "uid": ["a", "b"]}).to_parquet(parquet)
    from_jsonl = load_levels(jsonl)
    from_parquet = load_levels(parquet)
    assert from_jsonl == from_parquet == [parse_level(CORRIDOR), parse_level(ROOM)]
    assert [lv.name for lv in from_parquet] == ["a", "b"]
    assert from_jsonl[0].name == "c"


def test_load_the_paper_test_set(paper_tasks):
    levels = load_levels(paper_tasks / "sokoban_test.parquet")
    assert len(levels) == 100
    assert sorted({(lv.height, lv.width) for lv in levels}) == [(7, 7), (8, 8)]
    assert sum(lv.height == 8 for lv in levels) == 68
    assert all(len(lv.boxes) == 1 and not lv.is_solved for lv in levels)
    assert levels[0].name == "sokoban_8x8_g46_b45_p66_10000"
    # The uid spells out goal, box and player positions.
    assert levels[0].targets == {(4, 6)} and levels[0].boxes == {(4, 5)} and levels[0].player == (6, 6)


@pytest.mark.parametrize(
    "name, content, fragment",
    [
        ("empty.txt", "", "holds no levels"),
        ("comments.txt", "; just a comment\n;another\n\n", "holds no levels"),
        ("bad.txt", BOXOBAN_TEXT + "\n; 2\n#####\n#@$x#\n#####\n", "level 2 (line 14), file line 15: unknown char"),
        ("bad.jsonl", json.dumps({"layout": CORRIDOR}) + "\n{not json\n", "line 2: invalid JSON"),
        ("nokey.jsonl", json.dumps({"rows": CORRIDOR}) + "\n", "line 1: expected a JSON object with a 'layout' key"),
        ("badlayout.jsonl", json.dumps({"layout": 5}) + "\n", "'layout' must be a list of row strings"),
        ("levels.csv", "layout\n", "unsupported level file type '.csv'"),
    ],
)
def test_bad_level_files_name_the_file_and_problem(tmp_path, name, content, fragment):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(LevelError) as err:
        load_levels(path)
    assert fragment in str(err.value)
    assert str(path) in str(err.value)


def test_bad_parquet_files(tmp_path):
    no_column = tmp_path / "nolayout.parquet"
    pd.DataFrame({"rows": [CORRIDOR]}).to_parquet(no_column)
    with pytest.raises(LevelError, match="no 'layout' column"):
        load_levels(no_column)
    bad_level = tmp_path / "badlevel.parquet"
    pd.DataFrame({"layout": [CORRIDOR, ["#####", "#@$. ", "#####"]]}).to_parquet(bad_level)
    with pytest.raises(LevelError, match=r"row 1: the level is not closed"):
        load_levels(bad_level)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not parquet")
    with pytest.raises(LevelError, match="cannot be read as a parquet file"):
        load_levels(garbage)


def test_missing_file_directory_and_wrong_encoding(tmp_path):
    with pytest.raises(FileNotFoundError, match="level file not found"):
        load_levels(tmp_path / "nope.txt")
    with pytest.raises(LevelError, match="is a directory"):
        load_levels(tmp_path)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("; niveau \xe9t\xe9\n#####\n#@$.#\n#####\n".encode("latin-1"))
    with pytest.raises(LevelError, match="not UTF-8 text"):
        load_levels(latin)


def test_a_level_file_with_an_enormous_level_is_refused_before_parsing(tmp_path, monkeypatch):
    """A 9 MB file holding one 3000 x 3000 level: refused by its size, before a cell is read."""
    from erl_envs.grid import sokoban_levels

    path = tmp_path / "huge.txt"
    side = 3000
    path.write_text("\n".join(["#" * side] + ["#@" + " " * (side - 3) + "#"] + ["#" * side] * (side - 2)) + "\n")
    assert path.stat().st_size > 9_000_000

    def refuse(*_args, **_kwargs):
        raise AssertionError("the level was parsed before its size was checked")

    monkeypatch.setattr(sokoban_levels, "parse_level", refuse)
    with pytest.raises(LevelError, match=f"level 0 \\(line 1\\): the level is {side}x{side}; levels may be at most "
                                         f"{sokoban_levels.LARGEST_LEVEL_SIDE} per side"):
        sokoban_levels.load_levels(path)


def test_a_level_file_line_longer_than_any_level_is_refused_before_parsing(tmp_path):
    path = tmp_path / "levels.jsonl"
    path.write_text(json.dumps({"layout": ["#####", "#@$.#", "#####"]}) + "\n"
                    + json.dumps({"layout": "#" * 2_000_000}) + "\n")
    with pytest.raises(LevelError, match="levels.jsonl: line 2: longer than 1,048,576 characters"):
        load_levels(path)
