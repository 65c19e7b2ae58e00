"""Config dataclass, presets, config files and the generated CLI (erl_agents/config.py, erl_agents/train.py)."""

import json

import pytest

from erl_agents.config import PRESETS, TrainConfig, build_config
from erl_agents.train import build_parser, parse_config, summary_table


def test_defaults_are_the_papers_settings():
    c = TrainConfig()
    assert (c.lr, c.clip_low, c.clip_high, c.kl_coef, c.entropy_coef) == (1e-6, 0.2, 0.28, 0.001, 0.0)
    assert (c.n_rlvr, c.n_erl, c.tasks_per_step, c.loss_agg, c.temperature) == (10, 4, 64, "seq-mean-token-sum", 0.7)
    assert (c.eval_every, c.eval_samples, c.eval_top_p, c.eval_top_k) == (5, 4, 0.8, 20)
    assert (c.reflect_temperature, c.reflect_top_p, c.gate_threshold) == (0.5, 0.9, 1.0)
    assert TrainConfig(algo="rlvr").group_size == 10 and TrainConfig(algo="erl").group_size == 4


def test_precedence_defaults_preset_file_flags(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("lr: 0.5\nsteps: 7\n")
    c = build_config({"preset": "cpu-tiny"}, file=path, flags={"steps": 3})
    assert c.lr == 0.5 and c.steps == 3 and c.model == PRESETS["cpu-tiny"]["model"]
    assert c.env_kwargs == {"size": [2, 4]}  # the preset's FrozenLake adjustment
    js = tmp_path / "run.json"
    js.write_text(json.dumps({"algo": "rlvr", "env_kwargs": {"size": 3}}))
    c = build_config(file=js)
    assert c.algo == "rlvr" and c.env_kwargs == {"size": 3}


def test_env_specific_preset_for_hotpotqa():
    c = build_config({"preset": "cpu-tiny", "env": "ERL-HotpotQA-v0"})
    assert c.env_kwargs == {"data": "synthetic"} and not c.constrained_actions


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="algo must be one of"):
        TrainConfig(algo="ppo")
    with pytest.raises(ValueError, match="unknown config keys \\['learning_rate'\\]"):
        build_config(flags={"learning_rate": 1.0})
    with pytest.raises(ValueError, match="unknown preset"):
        build_config({"preset": "gpu-huge"})
    with pytest.raises(ValueError, match="tasks_per_step must be at least 1"):
        TrainConfig(tasks_per_step=0)


def test_bad_config_files(tmp_path):
    txt = tmp_path / "run.txt"
    txt.write_text("lr: 1")
    with pytest.raises(ValueError, match="must end in .yaml"):
        build_config(file=txt)
    bad = tmp_path / "run.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="mapping"):
        build_config(file=bad)


def test_cli_is_generated_from_the_dataclass(tmp_path):
    c = parse_config(["--env", "ERL-Sokoban-v0", "--algo", "rlvr", "--preset", "cpu-tiny", "--steps", "5",
                      "--tasks-per-step", "3", "--no-progress", "--env-kwargs", '{"size": 7}', "--lr", "0.01"])
    assert (c.env, c.algo, c.steps, c.tasks_per_step, c.progress, c.env_kwargs, c.lr) == (
        "ERL-Sokoban-v0", "rlvr", 5, 3, False, {"size": 7}, 0.01)
    # A preset value survives when the flag is not given.
    assert c.max_new_tokens == PRESETS["cpu-tiny"]["max_new_tokens"]
    help_text = build_parser().format_help()
    assert "--no-memory" in help_text and "--clip-high" in help_text and "clip-higher" in help_text
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"steps": 9, "seed": 4}))
    assert parse_config(["--config", str(path), "--seed", "5"]).steps == 9
    assert parse_config(["--config", str(path), "--seed", "5"]).seed == 5


def test_summary_table_lists_eval_and_times():
    rows = [{"step": 0, "eval/success": 0.3}, {"step": 1, "success/attempt1": 0.5, "time/generation": 2.0,
                                               "time/update": 1.0, "time/elapsed": 3.0, "eval/success": 0.6}]
    table = summary_table(rows)
    assert "0.300" in table and "0.600" in table and "time in generation | 2.0 s" in table
