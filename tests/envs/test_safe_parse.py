"""Bounded JSON/YAML parsing (erl_envs/safe_parse.py) and the loaders that use it: a bad file is named with the
place of the problem, never a RecursionError or OverflowError from deep inside a library."""

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
import torch

from erl_agents import checkpoint as ckpt
from erl_agents.config import build_config
from erl_envs.qa.data import DataError, load_corpus, load_questions
from erl_envs.reflection.memory import ReflectionMemory, load_memory
from erl_envs.safe_parse import loads_json, loads_yaml, nesting_depth
from erl_envs.grid.sokoban_levels import LevelError, load_levels

DEEP = "[" * 5000 + "]" * 5000


def test_loads_json_refuses_depth_overflow_and_nan_with_the_place():
    with pytest.raises(json.JSONDecodeError, match="nested deeper than 100 levels: line 1 column 101"):
        loads_json(DEEP)
    with pytest.raises(json.JSONDecodeError, match="the number 1e400 is not a finite float: line 2 column 13"):
        loads_json('{"a": 1,\n "updates": 1e400}')
    with pytest.raises(json.JSONDecodeError, match="NaN is not a finite float"):
        loads_json('[NaN]')
    with pytest.raises(json.JSONDecodeError, match="more than the 10 allowed"):
        loads_json("[" + "1," * 10 + "1]", max_chars=10)
    text = '{"a\\\\": "[[[{{{", "b": [[1]]}'  # brackets inside strings and escapes do not count
    assert loads_json(text, max_depth=3) == {"a\\": "[[[{{{", "b": [[1]]}


def test_loads_yaml_names_the_source_and_place_and_survives_depth_and_aliases():
    with pytest.raises(ValueError, match="run.yaml: line 3, column 2: not valid YAML .expected ',' or ']'"):
        loads_yaml("a: 1\nb: [1\nc: 2\n", "run.yaml")
    with pytest.raises(ValueError, match="run.yaml: nested deeper than"):
        loads_yaml(DEEP, "run.yaml")
    bomb = "a: &a [x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    assert nesting_depth(loads_yaml(bomb, "bomb.yaml")) == 10  # shared lists measured once: no exponential walk
    with pytest.raises(ValueError, match="nested deeper than"):
        loads_yaml("a: &a [1, *a]\n", "loop.yaml")


ALIAS_BOMB = "env_kwargs:\n  a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  {c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdef", "bcdefg"))


def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path, capsys):
    """Aliases that expand a few hundred bytes to millions of values (which every later copy of the config would
    build) are refused while loading; a file that uses a few aliases loads."""
    assert len(ALIAS_BOMB) < 600
    with pytest.raises(ValueError, match="bomb.yaml: its aliases expand to more than 1,000,000 values"):
        loads_yaml(ALIAS_BOMB, "bomb.yaml")
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    from erl_agents.train import main

    assert main(["--config", str(path), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("erl-train: error: config file") and "aliases expand" in err and err.count("\n") == 1
    assert loads_yaml("base: &b {lr: 1}\nrun: *b\nlist: [*b, *b]\n", "ok.yaml")["list"] == [{"lr": 1}] * 2


def test_a_memory_file_with_an_overflowing_count_is_named(tmp_path):
    path = tmp_path / "memory.json"
    ReflectionMemory("a rule").save(path)
    path.write_text(re.sub(r'"updates": \d+', '"updates": 1e400', path.read_text()))
    with pytest.raises(ValueError, match=f"{path.name}.*not a memory file.*1e400 is not a finite float: line"):
        load_memory(path)
    path.write_text('{"kind": ' + DEEP + "}")
    with pytest.raises(ValueError, match=f"{path.name}.*nested deeper than 100 levels: line 1"):
        ReflectionMemory.load(path)


def test_deeply_nested_level_and_data_files_are_named_with_their_line(tmp_path):
    levels = tmp_path / "levels.jsonl"
    levels.write_text('{"layout": ["#####", "#@$.#", "#####"]}\n{"layout": ' + DEEP + "}\n")
    with pytest.raises(LevelError, match=f"{levels}: line 2: invalid JSON \\(nested deeper than 100 levels\\)"):
        load_levels(levels)
    data = tmp_path / "questions.json"
    data.write_text(DEEP)
    with pytest.raises(DataError, match=f"{data}: not valid JSON \\(nested deeper than 100 levels"):
        load_questions(str(data))
    lines = tmp_path / "questions.jsonl"
    lines.write_text('{"question": "q", "answer": 1e999}\n')
    with pytest.raises(DataError, match=f"{lines}, line 1: not valid JSON \\(the number 1e999 is not a finite"):
        load_questions(str(lines))


def test_a_nested_or_malformed_config_file_is_one_value_error(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"steps": ' + DEEP + "}")
    with pytest.raises(ValueError, match="config file .*run.json: line 1, column 110: nested deeper than 100"):
        build_config(file=path)
    path.write_text("x" * (2 << 20))
    with pytest.raises(ValueError, match="too large for a config file"):
        build_config(file=path)


@pytest.mark.parametrize("manifest,problem", [
    ({"bytes": 1, "sha256": "0" * 64}, "has no 'step' field"),
    ({"step": "2", "bytes": 1, "sha256": "0" * 64}, "field 'step' is '2', expected the checkpoint's step \\(2\\)"),
    ({"step": 2.0, "bytes": 1, "sha256": "0" * 64}, "field 'step' is 2.0"),
    ({"step": 3, "bytes": 1, "sha256": "0" * 64}, "field 'step' is 3"),
    ({"step": 2, "bytes": -1, "sha256": "0" * 64}, "field 'bytes' is -1"),
    ({"step": 2, "bytes": 1, "sha256": "xyz"}, "field 'sha256' is 'xyz'"),
    ({"step": 2, "file": "other.pt", "bytes": 1, "sha256": "0" * 64}, "field 'file' is 'other.pt'"),
    ([2], "is not a JSON object"),
    ({"step": 2, "bytes": 1e400, "sha256": "0" * 64}, "is unreadable"),
])
def test_a_manifest_field_that_is_wrong_falls_back_to_the_previous_checkpoint(tmp_path, manifest, problem):
    ckpt.save_checkpoint(tmp_path, 1, {"weights": torch.ones(2)}, keep=0)
    newest = ckpt.save_checkpoint(tmp_path, 2, {"weights": torch.zeros(2)}, keep=0)
    text = json.dumps(manifest).replace("1e+400", "1e400").replace("Infinity", "1e400")
    newest.with_suffix(".json").write_text(text)
    with pytest.raises(ckpt.CorruptCheckpointError, match=problem):
        ckpt.verify_checkpoint(newest)
    with pytest.warns(RuntimeWarning, match=f"step_000002.safetensors: its manifest step_000002.json {problem}"):
        path, state = ckpt.load_latest_checkpoint(tmp_path)
    assert state["step"] == 1


# --- duplicate keys, files that are not files, size caps ------------------------------------------------------------


def test_a_key_written_twice_is_refused_in_json_yaml_and_config_files(tmp_path, capsys):
    """Both parsers would keep the last value silently: a config whose first ``lr`` is what its reader sees would
    train with the second."""
    with pytest.raises(json.JSONDecodeError, match=r'the key "lr" is written twice in one object: line 1 column 23'):
        loads_json('{"lr": 1, "steps": 2, "lr": 3}')
    assert loads_json('{"a": {"lr": 1}, "b": {"lr": 2}}') == {"a": {"lr": 1}, "b": {"lr": 2}}  # other objects
    with pytest.raises(ValueError, match="run.yaml: line 3, column 1: not valid YAML \\(the key 'lr' is written twice"):
        loads_yaml("lr: 0.001\nsteps: 5\nlr: 0.1\n", "run.yaml")
    merged = loads_yaml("base: &b {lr: 1, steps: 2}\nrun:\n  <<: *b\n  lr: 3\n", "ok.yaml")
    assert merged["run"] == {"lr": 3, "steps": 2}  # a merge key's values may be overridden: that is its purpose
    for name, text in (("run.yaml", "seed: 1\nsteps: 5\nseed: 2\n"), ("run.json", '{"seed": 1, "seed": 2}')):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match=f"config file .*{name}: line .*seed.* written twice"):
            build_config(file=path)
        from erl_agents.train import main

        assert main(["--config", str(path), "--output", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("erl-train: error: config file") and "written twice" in err and err.count("\n") == 1


def _not_files(tmp_path, name: str) -> dict[str, str]:
    """A directory, a FIFO nobody writes and /dev/zero (through a link with the right extension), by ``name``'s
    extension, each with the words its refusal must say."""
    folder = tmp_path / f"folder{Path(name).suffix}"
    folder.mkdir()
    fifo = tmp_path / f"fifo{Path(name).suffix}"
    os.mkfifo(fifo)
    zero = tmp_path / f"zero{Path(name).suffix}"
    zero.symlink_to("/dev/zero")
    return {str(folder): "is a directory", str(fifo): "is a FIFO (named pipe)", str(zero): "is a character device"}


def _within(seconds: float, call):
    """``call()`` in a thread: its result or exception, or a failure if it has not returned within ``seconds`` (a
    read that hangs on a FIFO must fail the test, not hang it)."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still reading after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@pytest.mark.parametrize("suffix,load,error", [
    (".txt", load_levels, LevelError), (".jsonl", load_levels, LevelError), (".parquet", load_levels, LevelError),
    (".json", lambda p: load_questions(p), DataError), (".jsonl", lambda p: load_questions(p), DataError),
    (".parquet", lambda p: load_corpus(p), DataError), (".json", load_memory, ValueError),
])
def test_a_data_file_that_is_not_a_file_is_refused_by_name_before_reading(tmp_path, suffix, load, error):
    """/dev/zero read until MemoryError, a FIFO hung, a directory gave a raw IsADirectoryError: each is one error
    naming the path and what it is, at once."""
    for path, words in _not_files(tmp_path, "x" + suffix).items():
        started = time.monotonic()
        with pytest.raises(error, match=re.escape(path) + " " + re.escape(words) + ", not a regular file"):
            _within(10.0, lambda: load(path))
        assert time.monotonic() - started < 2.0


def test_every_data_file_read_has_a_size_cap(tmp_path, monkeypatch):
    import erl_envs.grid.sokoban_levels as levels_module
    import erl_envs.qa.data as data_module
    import erl_envs.reflection.memory as memory_module

    monkeypatch.setattr(levels_module, "MAX_LEVEL_FILE_BYTES", 100)
    monkeypatch.setattr(data_module, "MAX_DATA_FILE_BYTES", 100)
    monkeypatch.setattr(memory_module, "MAX_MEMORY_FILE_BYTES", 100)
    big_levels = tmp_path / "big.txt"
    big_levels.write_text("; a\n#####\n#@$.#\n#####\n\n" * 10)
    with pytest.raises(LevelError, match="big.txt: 230 bytes or more is too large for a level file \\(at most 100\\)"):
        load_levels(big_levels)
    for name in ("big.json", "big.jsonl"):
        path = tmp_path / name
        path.write_text("\n" * 50 + json.dumps([{"question": "q" * 100}]) + "\n")
        with pytest.raises(DataError, match=f"{name}: .* bytes or more is too large for a data file"):
            load_questions(path)
    memory = tmp_path / "memory.json"
    ReflectionMemory("r" * 200).save(memory)
    with pytest.raises(ValueError, match="memory.json: .* bytes or more is too large for a memory file"):
        ReflectionMemory.load(memory)


def test_a_jsonl_file_that_grows_past_its_cap_while_read_is_refused(tmp_path, monkeypatch):
    """The size is checked before reading and the bytes counted while reading: a file that grows meanwhile (or a
    size that lied) is refused when the count passes the cap."""
    import erl_envs.qa.data as data_module

    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "q"}\n' * 5)
    real_open = data_module.open_regular

    def open_then_grow(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        with open(path, "a") as more:
            more.write('{"question": "q"}\n' * 50)
        return handle

    monkeypatch.setattr(data_module, "MAX_DATA_FILE_BYTES", 200)
    monkeypatch.setattr(data_module, "open_regular", open_then_grow)
    with pytest.raises(DataError, match="q.jsonl: .* bytes or more is too large for a data file"):
        load_questions(path)
