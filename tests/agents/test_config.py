"""Config dataclass, presets, config files and the generated CLI (erl_agents/config.py, erl_agents/train.py)."""

import ast
import dataclasses
import json
import re

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


def test_help_names_every_value_a_field_accepts():
    """Whatever the checks accept for a field of fixed choices (presets, reflectors, ...), its --help line names."""
    helps = {action.dest: action.help for action in build_parser()._actions}
    checked = []
    for field in dataclasses.fields(TrainConfig):
        if field.type not in (str, "str"):
            continue
        try:
            parse_config(["--" + field.name.replace("_", "-"), "no-such-choice"])
        except ValueError as error:
            listed = re.search(r"one of (\[[^]]*\])", str(error))
            if listed is None:
                continue
            for choice in ast.literal_eval(listed.group(1)):
                assert re.search(rf"(?<![\w-]){re.escape(choice)}(?![\w-])", helps[field.name]), (field.name, choice)
            checked.append(field.name)
    assert {"preset", "reflector", "warmup_reflector", "dtype"} <= set(checked)


def test_summary_table_lists_eval_and_times():
    rows = [{"step": 0, "eval/success": 0.3}, {"step": 1, "success/attempt1": 0.5, "time/generation": 2.0,
                                               "time/update": 1.0, "time/elapsed": 3.0, "eval/success": 0.6}]
    table = summary_table(rows)
    assert "0.300" in table and "0.600" in table and "time in generation | 2.0 s" in table
    assert "| held-out success, step 0 | 0.300 |" in table and "| held-out success, step 1 | 0.600 |" in table
    # A run that evaluated once shows that evaluation once.
    once = summary_table([dict(rows[1], step=8)])
    assert once.count("| held-out success, step 8 | 0.600 |") == 1


def test_summary_table_names_the_curves_and_drops_the_redundant_lift_row():
    rows = [{"step": 1, "success/attempt1": 0.25, "success/attempt2": 0.5, "lift": 0.5, "lift/r1": 0.0,
             "lift/r2": 0.5, "time/elapsed": 3.0}]
    table = summary_table(rows, "runs/x")
    assert "| learning curves | runs/x/curves.png |" in table and "runs/x/metrics.jsonl" in table
    assert "success/attempt2 (last step) | 0.500" in table and "lift" not in table


def test_hotpotqa_cpu_tiny_evaluates_on_a_disjoint_synthetic_set():
    from erl_agents.envs import make_env

    c = build_config({"preset": "cpu-tiny", "env": "ERL-HotpotQA-v0"})
    assert c.eval_env_kwargs == {"seed": 1}
    train = make_env(c.env, c.env_kwargs).unwrapped
    held_out = make_env(c.env, {**c.env_kwargs, **c.eval_env_kwargs}).unwrapped
    assert len(train.questions) == len(held_out.questions) == 200
    assert not {q.id for q in train.questions} & {q.id for q in held_out.questions}
    assert not {q.question for q in train.questions} & {q.question for q in held_out.questions}
    # Another invented world, not new questions about the same entities: no passage title in common either.
    titles = [{p.title for q in env.questions for p in q.paragraphs} for env in (train, held_out)]
    assert titles[0] and not titles[0] & titles[1]
    # The grid games keep evaluating on the training env's own held-out split.
    for env in ("ERL-FrozenLake-v0", "ERL-Sokoban-v0"):
        assert build_config({"preset": "cpu-tiny", "env": env}).eval_env_kwargs == {}


def test_eval_env_kwargs_is_a_flag_and_must_be_a_dict():
    c = parse_config(["--env-kwargs", '{"data": "synthetic"}', "--eval-env-kwargs", '{"seed": 5}'])
    assert c.eval_env_kwargs == {"seed": 5} and c.env_kwargs == {"data": "synthetic"}
    assert "held-out envs only" in build_parser().format_help()
    with pytest.raises(TypeError, match="eval_env_kwargs must be a dict, got list"):
        TrainConfig(eval_env_kwargs=[1])


# --- erl-train's exit: one error line and status 2 for problems the user can fix, a traceback for bugs ---


def _main(argv, capsys):
    from erl_agents.train import main

    status = main(argv)
    err = capsys.readouterr().err
    return status, err


def test_a_bad_config_value_is_one_error_line_and_status_2(capsys):
    status, err = _main(["--algo", "ppo"], capsys)
    assert status == 2
    assert err == "erl-train: error: algo must be one of ['rlvr', 'erl'], got 'ppo'\n"
    status, err = _main(["--eval-env-kwargs", "[1]"], capsys)
    assert status == 2 and err.startswith("erl-train: error: eval_env_kwargs must be a dict")


def test_resume_without_a_checkpoint_is_one_error_line(tmp_path, capsys):
    import text_bandit  # noqa: F401  (registers TextBandit-v0)

    status, err = _main(["--env", "TextBandit-v0", "--output", str(tmp_path / "run"), "--resume", "--no-progress"],
                        capsys)
    assert status == 2
    assert err.startswith("erl-train: error: --resume: no checkpoint in") and err.count("\n") == 1


class _StoppingTrainer:
    """Stands in for Trainer: builds instantly, then fails in train() with the given exception."""

    error: BaseException

    def __init__(self, config, world=None):
        pass

    def train(self):
        raise self.error


def test_a_non_finite_stop_is_one_error_line_and_other_errors_keep_their_traceback(monkeypatch, capsys, tmp_path):
    from erl_agents import trainer

    monkeypatch.setattr(trainer, "Trainer", _StoppingTrainer)
    argv = ["--output", str(tmp_path / "run"), "--no-progress"]
    _StoppingTrainer.error = trainer.NonFiniteTrainingError("stopping at step 3: the loss was NaN\nin 2 steps")
    status, err = _main(argv, capsys)
    assert (status, err) == (2, "erl-train: error: stopping at step 3: the loss was NaN in 2 steps\n")
    # A ValueError from inside the loop is a bug, not a config problem: it propagates.
    _StoppingTrainer.error = ValueError("shapes do not match")
    with pytest.raises(ValueError, match="shapes do not match"):
        _main(argv, capsys)
    _StoppingTrainer.error = RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        _main(argv, capsys)


def test_an_env_server_failing_mid_run_is_one_error_line(monkeypatch, capsys, tmp_path):
    from erl_agents import trainer
    from erl_envs.integrations.remote import RemoteEnvError

    monkeypatch.setattr(trainer, "Trainer", _StoppingTrainer)
    _StoppingTrainer.error = RemoteEnvError(None, "cannot reach erl-serve at http://127.0.0.1:9 (ConnectionError)")
    status, err = _main(["--output", str(tmp_path / "run"), "--no-progress"], capsys)
    assert status == 2 and err.startswith("erl-train: error: cannot reach erl-serve at http://127.0.0.1:9")
    assert "--resume continues" in err and err.count("\n") == 1


def test_the_command_exits_2_without_a_traceback():
    import subprocess
    import sys

    root = ROOT
    done = subprocess.run([sys.executable, "-m", "erl_agents.train", "--lr", "1", "--steps", "0"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == ("erl-train: error: steps and epochs must give a length: steps at least 1, or steps 0 with "
                           "epochs at least 1 (the run then lasts the epochs), got steps=0, epochs=0\n")
    assert "Traceback" not in done.stdout + done.stderr


# --- one validation pass over every field (erl_agents.config.RULES) ---

import dataclasses  # noqa: E402
import math  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from erl_agents.config import JOINT_RULES, RULES  # noqa: E402
from paths import ROOT

FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]


def test_every_field_has_exactly_one_rule_and_a_resume_class():
    assert sorted(RULES) == sorted(FIELDS), "a TrainConfig field without a rule (or a rule without a field)"
    assert {rule.resume for rule in RULES.values()} == {"fixed", "free", "never"}
    for names, _, _ in JOINT_RULES:
        assert set(names) <= set(FIELDS)


ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                                 max_size=2))


def _accepted(rule, value):
    if rule.kind is float:
        typed = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif rule.kind is int:
        typed = isinstance(value, int) and not isinstance(value, bool)
    else:
        typed = isinstance(value, rule.kind)
    return typed and rule.check(value)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(FIELDS), value=ANY_VALUE)
def test_every_field_refuses_what_its_rule_refuses_and_names_field_and_value(name, value):
    rule = RULES[name]
    if _accepted(rule, value):
        try:
            config = TrainConfig(**{name: value})
        except ValueError as exc:  # only a rule tying fields together may still refuse it
            assert any(name in names for names, _, _ in JOINT_RULES), exc
            return
        assert getattr(config, name) == value
        return
    with pytest.raises((TypeError, ValueError)) as caught:
        TrainConfig(**{name: value})
    message = str(caught.value)
    assert message.startswith(f"{name} must be ")
    assert (type(value).__name__ if rule.kind is dict else repr(value)) in message


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(FIELDS), value=st.one_of(st.none(), st.lists(st.integers(), max_size=2),
                                                     st.sampled_from([math.nan, math.inf, -math.inf])))
def test_no_field_takes_none_a_list_or_a_non_finite_number(name, value):
    with pytest.raises((TypeError, ValueError), match=f"^{name} must be"):
        TrainConfig(**{name: value})


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from([n for n, r in RULES.items() if r.kind is int]),
       value=st.floats(-1e6, 1e6).filter(lambda v: v != int(v)))
def test_integer_fields_refuse_fractions(name, value):
    with pytest.raises(TypeError, match=f"^{name} must be an integer, got {value!r}"):
        TrainConfig(**{name: value})


@pytest.mark.parametrize("name,value,allowed", [
    ("max_grad_norm", -1.0, "positive"),
    ("eval_tasks", 0, "at least 1"),
    ("temperature", math.nan, "a finite number"),
    ("lr", math.inf, "a finite number"),
    ("lr", 0.0, "positive"),
    ("device", "tpu", "one of ['auto', 'cpu', 'cuda']"),
    ("top_p", 1.5, "in (0, 1]"),
    ("eval_top_p", 0.0, "in (0, 1]"),
    ("adam_beta2", 1.0, "in [0, 1)"),
    ("clip_low", 1.0, "in [0, 1)"),
    ("steps", 2.5, "an integer"),
    ("seed", -1, "in [0, 4294967295]"),
    ("dtype", "int8", "one of"),
    ("rows", "reference", "one of ['erl', 'paper']"),
    ("logprob_temperature", "0.7", "one of ['sampled', 'rollout']"),
    ("response_budget", -1, "non-negative"),
    ("epochs", -1, "non-negative"),
    ("epoch_tasks", 0, "at least 1"),
    ("precision", "fp8", "one of"),
    ("warmup_steps", -3, "non-negative"),
    ("kl_coef", -0.1, "non-negative"),
    ("keep_checkpoints", -1, "non-negative"),
    ("time_limit_min", -1.0, "non-negative"),
    ("max_seq_len", 1, "at least 2"),
    ("model", "  ", "a non-empty string"),
    ("progress", "yes", "true or false"),
    ("resume_changes", "lr,learning_rate", "comma-separated field names"),
])
def test_out_of_range_values_are_refused_with_field_value_and_what_is_allowed(name, value, allowed):
    with pytest.raises((TypeError, ValueError)) as caught:
        build_config(flags={name: value})
    message = str(caught.value)
    assert message.startswith(f"{name} must be ") and allowed in message and message.endswith(f", got {value!r}")


@pytest.mark.parametrize("name", [n for n, r in RULES.items() if r.kind is int])
def test_every_integer_field_has_an_upper_bound(name):
    """No integer a user types can make the run allocate without end (10,000,000 tasks a step, 10^11 memory
    slots): each has a bound far beyond any real run, and the error names it."""
    with pytest.raises(ValueError, match=f"^{name} must be .*(at most |in \\[0, ).*, got {10**18}$"):
        TrainConfig(**{name: 10**18})


def test_episodes_a_step_are_bounded_together():
    with pytest.raises(ValueError, match="at most 1,048,576 episodes a step"):
        TrainConfig(tasks_per_step=65_536, n_erl=1024)


def test_tiny_heads_must_divide_the_hidden_size_into_even_heads():
    with pytest.raises(ValueError, match="tiny_hidden and tiny_heads must give tiny_hidden divisible by tiny_heads, "
                                         "got tiny_hidden=128, tiny_heads=3"):
        TrainConfig(tiny_heads=3)
    with pytest.raises(ValueError, match="even head size"):
        TrainConfig(tiny_hidden=12, tiny_heads=4)
    assert TrainConfig(tiny_hidden=12, tiny_heads=6).tiny_heads == 6


def test_a_yaml_fraction_for_an_integer_field_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 2.5\n")
    with pytest.raises(TypeError, match="steps must be an integer, got 2.5"):
        build_config(file=path)
    path.write_text("lr: 1\n")  # an integer where a number is expected is fine, and stored as a float
    assert build_config(file=path).lr == 1.0 and isinstance(build_config(file=path).lr, float)


def test_every_preset_passes_validation():
    for preset in PRESETS:
        for env in ("ERL-FrozenLake-v0", "ERL-Sokoban-v0", "ERL-HotpotQA-v0"):
            build_config({"preset": preset, "env": env})


def test_paper_preset_plays_the_grid_games_by_the_papers_protocol(monkeypatch, tmp_path):
    """Its prompt set, pool memory of 1,024 slots and test sets; the train layouts only when the file is there."""
    from erl_agents import presets as presets_module

    for env in ("ERL-FrozenLake-v0", "ERL-Sokoban-v0"):
        cfg = build_config({"preset": "paper-qwen3-4b", "env": env})
        assert cfg.env_kwargs.get("prompts") == "paper" and cfg.memory == "pool" and cfg.memory_slots == 1024
        assert cfg.eval_set == "paper"
    hotpot = build_config({"preset": "paper-qwen3-4b", "env": "ERL-HotpotQA-v0"})
    assert "prompts" not in hotpot.env_kwargs and hotpot.memory == "pool"
    assert hotpot.env_kwargs["protocol"] == "paper" and (hotpot.eval_set, hotpot.eval_tasks) == ("paper", 1024)
    # The reference's memory rule in the paper preset; the project's everywhere else.
    assert cfg.memory_rule == hotpot.memory_rule == "paper" and build_config({"preset": "cpu-tiny"}).memory_rule == "project"
    monkeypatch.setenv("ERL_PAPER_TASKS", str(tmp_path))
    monkeypatch.setenv("ERL_SHARED", str(tmp_path))
    (tmp_path / "sokoban_train.parquet").write_bytes(b"")
    assert presets_module._paper_sokoban_training()["env_kwargs"]["levels"] == str(tmp_path / "sokoban_train.parquet")
    (tmp_path / "sokoban_train.parquet").unlink()
    monkeypatch.setattr("erl_envs.paper_tasks.Path.is_file", lambda self: False)
    assert "levels" not in presets_module._paper_sokoban_training()["env_kwargs"]


def test_paper_preset_runs_the_reference_scripts_and_cpu_tiny_stays_as_it_was():
    """The reference's batch, budgets, log-prob temperature, epochs and mixed precision (docs/fidelity.md); the
    project's own choices everywhere else."""
    for env in ("ERL-FrozenLake-v0", "ERL-Sokoban-v0"):
        cfg = build_config({"preset": "paper-qwen3-4b", "env": env})
        assert (cfg.rows, cfg.logprob_temperature, cfg.dtype) == ("paper", "rollout", "bfloat16")
        assert (cfg.steps, cfg.epochs, cfg.tasks_per_step) == (0, 10, 64)
        assert (cfg.max_new_tokens, cfg.response_budget, cfg.reflect_max_new_tokens) == (10240, 10240, 10240)
    hotpot = build_config({"preset": "paper-qwen3-4b", "env": "ERL-HotpotQA-v0"})
    assert (hotpot.dtype, hotpot.epochs, hotpot.rows, hotpot.ppo_mini_batch_size) == ("float16", 100, "paper", 32)
    assert (hotpot.max_new_tokens, hotpot.response_budget, hotpot.reflect_max_new_tokens) == (2048, 0, 8192)
    assert hotpot.memory_slots == 256  # rLLM's default n_parallel_tasks, which its HotpotQA script keeps
    for preset in ("cpu-tiny", "cpu-smol"):
        cfg = build_config({"preset": preset})
        assert (cfg.rows, cfg.logprob_temperature, cfg.epochs, cfg.response_budget) == ("erl", "sampled", 0, 0)
        assert cfg.dtype == "float32"
    with pytest.raises(ValueError, match="imitation consolidation with paper rows"):
        build_config(flags=dict(rows="paper", distill="reverse_kl"))


@pytest.mark.parametrize("bad", [{"memory": "many"}, {"memory_slots": 0}])
def test_memory_fields_are_checked(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        build_config(flags=bad)


def test_cpu_smol_plays_the_small_model_protocol():
    """The unbiased prompt set, the short reflection request, the prefilled reflection, and held-out hygiene."""
    config = build_config(flags={"preset": "cpu-smol"})
    assert config.env_kwargs == {"size": [2, 4], "prompts": "small", "exclude": "paper-test"}
    assert config.eval_env_kwargs == {"exclude": None}
    assert config.reflect_prefill and config.reflector == "policy" and config.reflection_instructions == ""
    sokoban = build_config(flags={"preset": "cpu-smol", "env": "ERL-Sokoban-v0"})
    assert sokoban.env_kwargs["prompts"] == "small"  # Sokoban's generator always excludes its test layouts
    for name, value in (("reflector", "oracle"), ("warmup_reflector", "policy"), ("reflection_warmup", -1)):
        with pytest.raises(ValueError, match=name):
            build_config(flags={name: value})
