"""Bad level and data files: each is refused with one error naming the file, the place in it and the problem.

A training run that silently loads half a level collection, or two questions under one id, trains on the wrong
thing for hours. Every loader is fed the usual ways a file goes bad: empty, truncated, wrong encoding, wrong columns,
duplicated ids, unplayable levels. Where duplicates are harmless the test says so.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import gymnasium as gym
import pandas as pd
import pytest

import erl_envs  # noqa: F401  (registers the env ids)
from erl_envs.grid.frozen_lake import FrozenLakeTextEnv, MapError
from erl_envs.qa.data import DataError, Passage, load_corpus, load_questions
from erl_envs.reflection.memory import ReflectionMemory, RetrievalMemory, load_memory
from erl_envs.qa.search import BM25Index, Tokenizer
from erl_envs.grid.sokoban import SokobanTextEnv
from erl_envs.grid.sokoban_levels import LevelError, load_levels

LEVEL = "#####\n#@$.#\n#####"
OTHER_LEVEL = "######\n#@$ .#\n######"
# The box (row 1, col 3) is at the dead end beyond the goal: the player can never get behind it to push it back.
DEAD_LEVEL = "#####\n#@.$#\n#####"


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def parquet(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_parquet(path)
    return path


def truncated(path: Path, keep: float = 0.5) -> Path:
    """The file cut short, as after a crash mid-copy."""
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * keep)])
    return path


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


# --------------------------------------------------------------------------------------------- Sokoban levels

SOKOBAN_CASES = {
    "empty text": ("e.txt", "", r"e\.txt: the file holds no levels"),
    "only comments": ("c.txt", "; a title\n; nothing else\n", r"c\.txt: the file holds no levels"),
    "truncated text, level cut mid-row": ("t.txt", f"{LEVEL}\n\n{LEVEL[:-3]}",
                                          r"t\.txt: level 1 \(line 5\), file line 7: the level is not closed"),
    "truncated text, goal row lost": ("g.txt", f"{LEVEL}\n\n{LEVEL[:9]}",
                                      r"g\.txt: level 1 \(line 5\).*1 box but 0 goals"),
    "latin-1 text": ("l.txt", f"; caf\xe9\n{LEVEL}".encode("latin-1"),
                     r"l\.txt: not UTF-8 text \(byte 0xe9 at offset 5\)"),
    "utf-16 text": ("u.txt", LEVEL.encode("utf-16"), r"u\.txt: not UTF-8 text"),
    "unknown character": ("x.txt", "#####\n#@$.#\n##X##",
                          r"x\.txt: level 0 \(line 1\), file line 3: unknown character 'X'"),
    "two players": ("p.txt", "######\n#@$.@#\n######", r"p\.txt: level 0 .*2 players"),
    "unsolvable text": ("d.txt", f"{LEVEL}\n\n{DEAD_LEVEL}",
                        r"d\.txt: level 1 \(line 5\), file line 6: the level cannot be solved: "
                        r"the box at row 1, col 3"),
    "corner box": ("k.txt", "######\n#$  .#\n# @  #\n######", r"k\.txt: .*cannot be solved: the box at row 1, col 1"),
    "truncated jsonl": ("t.jsonl", jsonl([{"layout": LEVEL}]) + json.dumps({"layout": LEVEL})[:15],
                        r"t\.jsonl: line 2: invalid JSON"),
    "jsonl without layout": ("w.jsonl", jsonl([{"layout": LEVEL}, {"grid": LEVEL}]),
                             r"w\.jsonl: line 2: expected a JSON object with a 'layout' key"),
    "jsonl layout of the wrong type": ("i.jsonl", jsonl([{"layout": 5}]), r"i\.jsonl: line 1: 'layout' must be"),
    "jsonl not objects": ("n.jsonl", "[1, 2]\n", r"n\.jsonl: line 1: expected a JSON object"),
    "empty jsonl": ("e.jsonl", "", r"e\.jsonl: the file holds no levels"),
    "unsolvable jsonl": ("u.jsonl", jsonl([{"layout": LEVEL}, {"layout": DEAD_LEVEL}]),
                         r"u\.jsonl: line 2: .*cannot be solved"),
    "empty parquet": ("e.parquet", b"", r"e\.parquet: cannot be read as a parquet file"),
    "not parquet": ("n.parquet", b"PAR1 this is not parquet", r"n\.parquet: cannot be read as a parquet file"),
    "unsupported type": ("l.csv", "layout\n", r"l\.csv: unsupported level file type '\.csv'"),
}


@pytest.mark.parametrize("name, content, match", SOKOBAN_CASES.values(), ids=SOKOBAN_CASES.keys())
def test_bad_level_files_are_refused_naming_file_place_and_problem(tmp_path, name, content, match):
    path = write(tmp_path / name, content)
    with pytest.raises(LevelError, match=match) as caught:
        load_levels(path)
    assert str(path) in str(caught.value)
    with pytest.raises(LevelError, match=match):  # an env is never built on part of a collection
        SokobanTextEnv(levels=path)


def test_bad_parquet_level_files(tmp_path):
    rows = LEVEL.split("\n")
    good = parquet(tmp_path / "good.parquet", pd.DataFrame({"layout": [rows] * 50}))
    assert len(load_levels(good)) == 50
    cases = [
        (truncated(parquet(tmp_path / "t.parquet", pd.DataFrame({"layout": [rows] * 50}))),
         r"t\.parquet: cannot be read as a parquet file"),
        (parquet(tmp_path / "c.parquet", pd.DataFrame({"grid": [LEVEL]})),
         r"c\.parquet: no 'layout' column \(columns: \['grid'\]\)"),
        (parquet(tmp_path / "z.parquet", pd.DataFrame({"layout": pd.Series([], dtype=object)})),
         r"z\.parquet: the file holds no levels"),
        (parquet(tmp_path / "n.parquet", pd.DataFrame({"layout": [LEVEL, None]})),
         r"n\.parquet: row 1: 'layout' must be"),
        (parquet(tmp_path / "d.parquet", pd.DataFrame({"layout": [LEVEL, LEVEL, DEAD_LEVEL]})),
         r"d\.parquet: row 2: the level cannot be solved"),
        (parquet(tmp_path / "b.parquet", pd.DataFrame({"layout": [LEVEL, "#####\n#@$ #\n#####"]})),
         r"b\.parquet: row 1: the level has 1 box but 0 goals"),
    ]
    for path, match in cases:
        with pytest.raises(LevelError, match=match):
            load_levels(path)


def test_repeated_levels_and_names_are_allowed(tmp_path):
    # A collection may weight a level by repeating it, and names are labels (the task id is the level's content):
    # neither is an error.
    path = write(tmp_path / "repeat.jsonl", jsonl([{"layout": LEVEL, "uid": "same"}, {"layout": LEVEL, "uid": "same"},
                                                   {"layout": OTHER_LEVEL, "uid": "same"}]))
    levels = load_levels(path)
    assert len(levels) == 3 and levels[0] == levels[1] != levels[2]
    assert [lv.name for lv in levels] == ["same"] * 3
    env = SokobanTextEnv(levels=path)
    ids = {env.reset(options={"level_index": i})[1]["task_id"] for i in range(3)}
    assert len(ids) == 2  # the task id follows the content, so repeats share one and names do not matter


def test_solvable_levels_near_walls_are_not_mistaken_for_dead_ones(tmp_path):
    levels = [
        "#######\n#@$  .#\n#######",  # along a wall, with the goal along the same wall
        "#####\n#*  #\n# @ #\n# $.#\n#####",  # a box on a goal in a corner; another by the wall its goal is on
        "######\n#    #\n# $@ #\n#.   #\n######",
    ]
    path = write(tmp_path / "fine.txt", "\n\n".join(levels))
    assert len(load_levels(path)) == 3


def test_the_paper_level_files_load_completely(paper_tasks):
    assert len(load_levels(paper_tasks / "sokoban_test.parquet")) == 100
    assert len(load_levels(paper_tasks / "sokoban_train.parquet")) == 10_000


# --------------------------------------------------------------------------------------------- FrozenLake maps


@pytest.mark.parametrize(
    "level, match",
    [
        ("", "square"),
        (["SF", "FG", "FF"], r"square \(3 rows of 3 cells\), but row 0 has 2"),
        (["SF\n", "FG"], "row 0 has 3 cells"),
        (["SX", "FG"], r"'X' at row 0, column 1"),
        ([b"SF", b"FG"], "row 0 is a bytes"),
        (["SH", "HG"], r"the goal at \(1, 1\) cannot be reached from the start at \(0, 0\)"),
        ("SFH\nFHF\nHFG", "cannot be reached"),
    ],
)
def test_bad_frozen_lake_maps_are_refused_with_the_reason(level, match):
    env = FrozenLakeTextEnv()
    with pytest.raises(MapError, match=match):
        env.reset(options={"map": level})
    with pytest.raises(gym.error.ResetNeeded):  # the failed reset left nothing to play
        env.step("```Up```")


@pytest.mark.parametrize("level", [None, 5, 2.5, object()])
def test_a_map_of_the_wrong_type_is_a_clear_type_error(level):
    with pytest.raises(TypeError, match=f"map.*{type(level).__name__}"):
        FrozenLakeTextEnv().reset(options={"map": level})


# --------------------------------------------------------------------------------------------- HotpotQA data

QUESTION = {"_id": "q1", "question": "Where was the founder born?", "answer": "Dulind"}
PASSAGE = {"id": "p1", "title": "Dulind", "text": "Dulind is a city."}


def test_bad_question_files_are_refused_naming_file_place_and_problem(tmp_path):
    other = {**QUESTION, "_id": "q2"}
    cases = [
        (write(tmp_path / "e.json", ""), r"e\.json: not valid JSON"),
        (write(tmp_path / "t.json", json.dumps([QUESTION, other])[:40]), r"t\.json: not valid JSON"),
        (write(tmp_path / "o.json", json.dumps({"questions": [QUESTION]})), r"o\.json: expected a JSON list"),
        (write(tmp_path / "t.jsonl", jsonl([QUESTION]) + json.dumps(other)[:20]), r"t\.jsonl, line 2: not valid JSON"),
        (write(tmp_path / "l.jsonl",
               json.dumps({**QUESTION, "question": "Caf\xe9?"}, ensure_ascii=False).encode("latin-1")),
         r"l\.jsonl, line 1: not UTF-8 text"),
        (write(tmp_path / "c.jsonl", jsonl([QUESTION, {"q": "x", "a": "y"}])),
         r"c\.jsonl, record 1: no 'question' text \(fields present: \['a', 'q'\]\)"),
        (write(tmp_path / "a.jsonl", jsonl([{**QUESTION, "answer": ""}])), r"a\.jsonl, record 0: no gold answer"),
        (write(tmp_path / "e.jsonl", ""), r"e\.jsonl: holds no questions"),
        (write(tmp_path / "d.jsonl", jsonl([QUESTION, other, {**QUESTION, "question": "Another question?"}])),
         r"d\.jsonl: records 0 and 2 have the same id 'q1'"),
        (truncated(parquet(tmp_path / "t.parquet", pd.DataFrame([QUESTION] * 30))),
         r"t\.parquet: not a readable parquet"),
        (parquet(tmp_path / "w.parquet", pd.DataFrame([{"foo": 1}])), r"w\.parquet, record 0: no 'question' text"),
        (parquet(tmp_path / "d.parquet", pd.DataFrame([QUESTION, other, QUESTION])),
         r"d\.parquet: records 0 and 2 have the same id 'q1'"),
        (write(tmp_path / "q.csv", "question,answer\n"), r"q\.csv: unsupported file type"),
    ]
    for path, match in cases:
        with pytest.raises(DataError, match=match):
            load_questions(path)
    with pytest.raises(DataError, match="records 0 and 2 have the same id 'q1'"):  # and the env refuses them too
        gym.make("ERL-HotpotQA-v0", data=str(tmp_path / "d.jsonl"), cache_dir=False)


def test_questions_without_ids_get_distinct_ones(tmp_path):
    same = {"question": "A?", "answer": "a"}
    path = write(tmp_path / "plain.jsonl", jsonl([same, same]))
    questions = load_questions(path)
    assert len({q.id for q in questions}) == 2  # the same question twice is allowed; ids come from positions


def test_bad_corpus_files_are_refused_naming_file_place_and_problem(tmp_path):
    cases = [
        (write(tmp_path / "t.jsonl", jsonl([PASSAGE]) + json.dumps(PASSAGE)[:10]), r"t\.jsonl, line 2: not valid JSON"),
        (write(tmp_path / "w.jsonl", jsonl([PASSAGE, {"id": "p2", "body": "x"}])), r"w\.jsonl, passage 1: no 'text'"),
        (write(tmp_path / "e.jsonl", ""), r"e\.jsonl: the corpus holds no passages"),
        (write(tmp_path / "l.jsonl", json.dumps({**PASSAGE, "text": "caf\xe9"}, ensure_ascii=False).encode("latin-1")),
         r"l\.jsonl, line 1: not UTF-8 text"),
        (write(tmp_path / "d.jsonl", jsonl([PASSAGE, {**PASSAGE, "id": "p2"}, {**PASSAGE, "text": "Another text."}])),
         r"d\.jsonl: passages 0 and 2 have the same id 'p1'"),
        (write(tmp_path / "m.jsonl", jsonl([{"id": 1, "title": "A", "text": "a"}, {"title": "B", "text": "b"}])),
         r"m\.jsonl: passages 0 and 1 have the same id '1'"),  # an explicit id colliding with a positional one
    ]
    for path, match in cases:
        with pytest.raises(DataError, match=match):
            load_corpus(path)
    with pytest.raises(DataError, match="passages 0 and 1 have the same id 'x'"):
        load_corpus([Passage("x", "A", "a"), Passage("x", "B", "b")])
    with pytest.raises(DataError, match="passages 0 and 2 have the same id 'p1'"):
        gym.make("ERL-HotpotQA-v0", data="synthetic", corpus=str(tmp_path / "d.jsonl"), cache_dir=False)


@pytest.mark.parametrize("damage", ["truncated", "empty", "another corpus"])
def test_a_damaged_index_cache_is_rebuilt_not_trusted(tmp_path, damage):
    # A unique corpus per test, and no reference kept to the first index (live indexes are held weakly), so the
    # second call must go to the file.
    marker = uuid.uuid4().hex
    passages = [Passage(str(i), f"T{i}", f"{marker} passage {i} about city {i % 3}") for i in range(40)]
    tokenizer = Tokenizer()
    fresh = BM25Index(passages, ids=range(40), tokenizer=tokenizer)
    BM25Index.cached(passages, ids=range(40), tokenizer=tokenizer, cache_dir=tmp_path)
    (cache_file,) = tmp_path.glob("*.npz")
    if damage == "truncated":
        truncated(cache_file)
    elif damage == "empty":
        cache_file.write_bytes(b"")
    else:
        other = [Passage(str(i), "X", f"{marker} unrelated words {i}") for i in range(7)]
        BM25Index(other, ids=range(7), tokenizer=tokenizer).save(cache_file)
    with pytest.warns(UserWarning, match="rebuilding the BM25 index: the cache file .* is unreadable"):
        rebuilt = BM25Index.cached(passages, ids=range(40), tokenizer=tokenizer, cache_dir=tmp_path)
    assert rebuilt.top_k_batch(["city 1 passage"], 5) == fresh.top_k_batch(["city 1 passage"], 5)


# --------------------------------------------------------------------------------------------- memory files


def test_bad_memory_files_are_refused_naming_the_file_and_problem(tmp_path):
    good = tmp_path / "good.json"
    ReflectionMemory("A rulebook.").save(good)
    saved = json.loads(good.read_text(encoding="utf-8"))
    retrieval = RetrievalMemory()
    retrieval.update("rules one", task_text="task one")
    retrieval.update("rules two", task_text="task two")
    retrieval_data = retrieval.to_dict()
    duplicated = {**retrieval_data, "entries": retrieval_data["entries"] + [retrieval_data["entries"][0]]}
    cases = [
        (truncated(write(tmp_path / "t.json", good.read_text())), "not valid UTF-8 JSON"),
        (write(tmp_path / "e.json", b""), "not valid UTF-8 JSON"),
        (write(tmp_path / "l.json", json.dumps({**saved, "prompt": "r\xe8gle"}, ensure_ascii=False).encode("latin-1")),
         "not valid UTF-8 JSON"),
        (write(tmp_path / "a.json", "[]"), "expected a JSON object"),
        (write(tmp_path / "p.json", json.dumps({**saved, "prompt": 5})), "prompt must be a str, got int"),
        (write(tmp_path / "v.json", json.dumps({**saved, "version": 99})), "version 99"),
        (write(tmp_path / "k.json", json.dumps({"prompt": "x"})), "not a 'ReflectionMemory' one"),
    ]
    for path, match in cases:
        with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + match):
            ReflectionMemory.load(path)
    retrieval_cases = [
        (write(tmp_path / "d.json", json.dumps(duplicated)), r"entries 0 and 2 are both for the task text 'task one'"),
        (write(tmp_path / "c.json", json.dumps({k: v for k, v in retrieval_data.items() if k != "capacity"})),
         "the field 'capacity' is missing"),
        (write(tmp_path / "s.json", json.dumps({**retrieval_data, "entries": [
            {**retrieval_data["entries"][0], "stored": "yesterday"}]})), "invalid literal"),
        (write(tmp_path / "x.json", json.dumps({**retrieval_data, "entries": [{"prompt": "p"}]})), "entry 0 must be"),
    ]
    for path, match in retrieval_cases:
        with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + match):
            load_memory(path)
        with pytest.raises(ValueError, match=re.escape(str(path))):
            RetrievalMemory.load(path)
    assert ReflectionMemory.load(good).get() == "A rulebook."


def test_a_memory_holding_lone_surrogates_still_saves(tmp_path):
    # Prompts and task texts are model output: a lone surrogate (lenient decoding) must not make every later save()
    # of the memory fail; it is replaced on the way in.
    memory = ReflectionMemory()
    memory.update("rules \x00\u202e\U0001f600 \ud800 end", task_text="task \udcff")
    memory.save(tmp_path / "m.json")
    assert ReflectionMemory.load(tmp_path / "m.json").get() == memory.get() == "rules \x00\u202e\U0001f600 ? end"
    retrieval = RetrievalMemory()
    retrieval.update("rules", task_text="a task \ud83d")
    retrieval.save(tmp_path / "r.json")
    assert load_memory(tmp_path / "r.json").get("a task ?") == "rules"
