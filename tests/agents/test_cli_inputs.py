"""Both CLIs read env arguments the same two ways, and a missing model directory is named as such."""

from __future__ import annotations

import pytest

from erl_agents.models import load_policy
from erl_agents.train import main as erl_train, parse_config
from erl_envs.safe_parse import key_values


def test_key_values_read_json_values_else_text():
    assert key_values(["size=3", "symbols=gym", "p=0.8", "reveal_rules=true", "sizes=[2, 4]"]) == {
        "size": 3, "symbols": "gym", "p": 0.8, "reveal_rules": True, "sizes": [2, 4]}
    with pytest.raises(ValueError, match="--env-kwarg expects KEY=VALUE, got 'size'"):
        key_values(["size"])


def test_erl_train_env_kwarg_applies_over_the_preset_or_env_kwargs():
    assert parse_config(["--preset", "cpu-tiny", "--env-kwarg", "max_steps=6"]).env_kwargs == {"size": [2, 4],
                                                                                             "max_steps": 6}
    config = parse_config(["--env-kwargs", '{"size": 3, "max_steps": 5}', "--env-kwarg", "max_steps=6"])
    assert config.env_kwargs == {"size": 3, "max_steps": 6}


def test_erl_serve_reads_both_forms():
    openenv_server = pytest.importorskip("erl_envs.integrations.openenv_server")
    assert openenv_server._parse_kwargs(["max_steps=6"], '{"size": 3}') == {"size": 3, "max_steps": 6}
    with pytest.raises(ValueError, match="must be a JSON object"):
        openenv_server._parse_kwargs([], "[3]")


def test_a_missing_model_directory_is_one_line(capsys, tmp_path):
    with pytest.raises(ValueError, match="no such directory"):
        load_policy(str(tmp_path / "absent"))
    assert erl_train(["--model", str(tmp_path / "absent"), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such directory" in err[0] and "Repo id" not in err[0]
