"""The learning benchmarks' harness: compare.py's matched budget, tables, CSV and plots. The end-to-end --quick runs
that train models are marked slow."""

import csv
import json
import math
from pathlib import Path

import pytest

from benchmarks.learning import compare
from paths import ROOT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _fake_runs():
    """Two methods x two seeds on FrozenLake, with evaluations at steps 0 and 2."""
    runs = []
    for method, base in (("rlvr", 0.3), ("erl", 0.5)):
        for seed in (0, 1):
            metrics = [{"step": 0, "eval/success": 0.2, "eval/reward": 0.2, "time/training": 0.0, "time/elapsed": 0.0}]
            metrics.append({"step": 1, "tokens/sampled_total": 50})
            metrics.append({"step": 2, "tokens/sampled_total": 100, "eval/success": base + 0.1 * seed,
                            "eval/reward": base + 0.1 * seed, "eval/solved_any": 0.9, "time/training": 30.0,
                            "time/elapsed": 40.0})
            runs.append({"env": "ERL-FrozenLake-v0", "method": method, "seed": seed, "budget_tokens": 100,
                         "steps": 2, "sampled_tokens": 100, "seconds": 40.0, "reached_budget": True,
                         "metrics": metrics})
    return runs


def _settings(**changes):
    settings = json.loads(json.dumps(compare.DEFAULTS))
    settings.update(envs=["ERL-FrozenLake-v0"], methods=["rlvr", "erl"], seeds=[0, 1], steps=2)
    settings.update(changes)
    return settings


def test_eval_rows_carry_the_running_token_count():
    rows = compare.eval_rows(_fake_runs())
    assert len(rows) == 8  # 2 methods x 2 seeds x 2 evaluations
    assert [r["sampled_tokens"] for r in rows[:2]] == [0, 100]
    assert set(rows[0]) == set(compare.CSV_FIELDS)


def test_results_files_are_well_formed(tmp_path):
    files = compare.write_results(_fake_runs(), _settings(), tmp_path, "python benchmarks/learning/compare.py --test")
    with open(files["csv"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and tuple(rows[0]) == compare.CSV_FIELDS
    table = files["table"].read_text()
    # Mean +- sample std over the two seeds of the last evaluation. The tiny model is not the paper's protocol: no
    # paper number beside it, and the table says what differs.
    assert "| FrozenLake | 0.35 ± 0.07 (paper: other protocol) | 0.55 ± 0.07 (paper: other protocol) |" in table
    assert "- FrozenLake: no paper number beside these runs; they differ in model 'tiny'" in table
    assert "| task | RLVR | ERL |" in table
    assert files["curves_FrozenLake"].read_bytes().startswith(PNG_MAGIC)


def test_paper_numbers_stand_beside_runs_that_follow_the_papers_protocol(tmp_path):
    settings = compare.load_settings(str(ROOT / "benchmarks" / "configs" / "paper-qwen3-4b.yaml"))
    settings.update(envs=["ERL-FrozenLake-v0"], methods=["rlvr", "erl"], seeds=[0, 1], steps=2)
    table = compare.write_results(_fake_runs(), settings, tmp_path, "test")["table"].read_text()
    assert "| FrozenLake | 0.35 ± 0.07 (paper 0.86) | 0.55 ± 0.07 (paper 0.94) |" in table
    assert "- FrozenLake: the paper's protocol" in table
    settings["trainer"] = {**settings["trainer"], "ppo_mini_batch_size": 0, "eval_samples": 2}
    table = compare.write_results(_fake_runs(), settings, tmp_path, "test")["table"].read_text()
    assert "(paper 0.86)" not in table and "eval_samples 2 (paper 4); ppo_mini_batch_size 0 (paper 64)" in table
    config = compare.run_config(settings, "ERL-Sokoban-v0", "erl", 0, Path("unused"), 2)
    config.trace_rule = "project"
    assert "trace_rule 'project' (paper 'paper')" in compare.protocol_differences(config)


def _hotpotqa_settings(train, held_out, **trainer):
    return _settings(envs=["ERL-HotpotQA-v0"], methods=["rlvr"], seeds=[0], preset="cpu-tiny",
                     trainer=dict(env_kwargs={"data": str(train), "mode": "distractor"},
                                  eval_env_kwargs={"data": str(held_out)} if held_out else {}, **trainer))


def test_hotpotqa_comparison_refuses_held_out_questions_that_are_training_questions(hotpotqa_sample, capsys):
    train, dev = hotpotqa_sample / "dev_distractor_sample_train.jsonl", hotpotqa_sample / "dev_distractor_sample_dev.jsonl"
    for held_out in (train, None):
        with pytest.raises(ValueError, match="allow-eval-overlap"):
            compare.check_settings(_hotpotqa_settings(train, held_out))
    assert compare.check_settings(_hotpotqa_settings(train, dev)) == []
    assert compare.check_settings(_hotpotqa_settings(train, train, allow_eval_overlap=True)) == []
    # The command line: one error line, before anything runs.
    with pytest.raises(SystemExit) as stop:
        compare.main(["--quick", "--envs", "ERL-HotpotQA-v0", "--output", "unused", "--set",
                      f"env_kwargs={{'data': '{train}'}}", f"eval_env_kwargs={{'data': '{train}'}}"])
    assert stop.value.code == 2 and "300 of the 300 held-out questions" in capsys.readouterr().err
    # The paper config does too, once its data is local (its hf: specs are checked by the trainer at load time).
    paper = compare.load_settings(str(ROOT / "benchmarks" / "configs" / "paper-qwen3-4b.yaml"))
    paper["env_trainer"]["ERL-HotpotQA-v0"].update(env_kwargs={"data": str(train), "protocol": "paper"},
                                                   eval_env_kwargs={"data": str(train)})
    with pytest.raises(ValueError, match="held-out questions are also training questions"):
        compare.check_settings(paper)
    paper["env_trainer"]["ERL-HotpotQA-v0"]["eval_env_kwargs"] = {"data": str(dev)}
    assert compare.check_settings(paper) == []


@pytest.mark.slow
def test_quick_hotpotqa_comparison_on_a_disjoint_split_runs(tmp_path, hotpotqa_sample):
    train, dev = hotpotqa_sample / "dev_distractor_sample_train.jsonl", hotpotqa_sample / "dev_distractor_sample_dev.jsonl"
    assert compare.main(["--quick", "--envs", "ERL-HotpotQA-v0", "--methods", "rlvr", "--output", str(tmp_path),
                         "--set", f"env_kwargs={{'data': '{train}', 'mode': 'distractor'}}",
                         f"eval_env_kwargs={{'data': '{dev}'}}"]) == 0
    assert "HotpotQA" in (tmp_path / "table.md").read_text()


def test_one_seed_shows_the_value_without_std():
    assert compare.mean_std([0.25]) == "0.25"
    assert compare.mean_std([0.2, 0.4]) == "0.30 ± 0.14"
    assert compare.mean_std([]) == "-"


def test_a_matched_run_stops_on_the_trainers_own_token_budget():
    """The budget is the trainer's max_sampled_tokens (tested in tests/agents/test_trainer.py: the step that reaches
    it is the last, and the count survives a resume); the unmatched first run has none."""
    settings = _settings()
    assert compare.run_config(settings, "ERL-FrozenLake-v0", "erl", 0, Path("unused"), 100, 5000).max_sampled_tokens == 5000
    assert compare.run_config(settings, "ERL-FrozenLake-v0", "rlvr", 0, Path("unused"), 100).max_sampled_tokens == 0


def test_grid_runs_use_the_papers_action_format_and_prompts_under_any_preset():
    for preset in ("cpu-tiny", "paper-qwen3-4b"):
        settings = _settings(preset=preset)
        for env in ("ERL-FrozenLake-v0", "ERL-Sokoban-v0"):
            config = compare.run_config(settings, env, "erl", 0, Path("unused"), 5)
            assert config.env_kwargs["action_format"] == "paper" and config.env_kwargs["prompts"] == "paper"
    tiny = compare.run_config(_settings(), "ERL-FrozenLake-v0", "erl", 0, Path("unused"), 5)
    assert tiny.env_kwargs["size"] == [2, 4]  # merged under the preset's own env_kwargs, not replacing them
    hotpot = compare.run_config(_settings(), "ERL-HotpotQA-v0", "erl", 0, Path("unused"), 5)
    assert "prompts" not in hotpot.env_kwargs


def test_methods_pin_what_they_mean_whatever_the_preset():
    settings = _settings(methods=list(compare.METHODS))
    configs = {m: compare.run_config(settings, "ERL-FrozenLake-v0", m, 0, Path("unused"), 5) for m in compare.METHODS}
    assert configs["rlvr"].algo == "rlvr"
    assert configs["erl"].reflector == "policy"  # cpu-tiny's own default is the rule reflector
    assert configs["erl_rule"].reflector == "rule"
    assert configs["erl_no_memory"].no_memory and not configs["erl"].no_memory
    assert configs["erl_no_reflection"].no_reflection
    assert all(c.time_limit_min == 0 for c in configs.values())  # a wall-clock stop would break the matched budget


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="unknown envs"):
        compare.check_settings(_settings(envs=["CartPole-v1"]))
    with pytest.raises(ValueError, match="match must be"):
        compare.check_settings(_settings(match="flops"))
    with pytest.raises(ValueError, match="unknown config keys"):
        compare.check_settings(_settings(trainer={"learning_rate": 1.0}))


def test_comparison_config_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("presets: cpu-tiny\n")
    with pytest.raises(ValueError, match="unknown keys"):
        compare.load_settings(str(bad))
    with pytest.raises(ValueError, match="must end in"):
        compare.load_settings(str(tmp_path / "x.toml"))
    # Read with the bounded loaders: a deep or huge file is refused in one line, naming it.
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200 + "]" * 200)
    with pytest.raises(ValueError, match=r"deep.json: line 1, column \d+: nested deeper than"):
        compare.load_settings(str(deep))
    huge = tmp_path / "huge.yaml"
    huge.write_text("steps: 1\n" + "#" * (1 << 20))
    with pytest.raises(ValueError, match="too large for a comparison config"):
        compare.load_settings(str(huge))


def test_paper_gpu_config_is_the_papers_setting():
    settings = compare.load_settings(str(ROOT / "benchmarks" / "configs" / "paper-qwen3-4b.yaml"))
    compare.check_settings(settings)
    rlvr = compare.run_config(settings, "ERL-Sokoban-v0", "rlvr", 0, Path("unused"), settings["steps"])
    erl = compare.run_config(settings, "ERL-Sokoban-v0", "erl", 0, Path("unused"), settings["steps"])
    assert rlvr.model == "Qwen/Qwen3-4B-Instruct-2507" and rlvr.device == "cuda"
    assert (rlvr.group_size, erl.group_size) == (10, 4)  # the paper's compute parity
    assert (rlvr.lr, rlvr.clip_low, rlvr.clip_high, rlvr.kl_coef, rlvr.tasks_per_step) == (1e-6, 0.2, 0.28, 1e-3, 64)
    assert rlvr.loss_agg == "seq-mean-token-sum" and rlvr.temperature == 0.7
    assert settings["match"] == "steps" and set(settings["envs"]) == set(compare.ENVS)


def test_the_documented_paper_command_trains_hotpotqa_in_fp16_with_a_grad_scaler():
    from erl_agents.accelerator import resolve_precision

    settings = compare.load_settings(str(ROOT / "benchmarks" / "configs" / "paper-qwen3-4b.yaml"))
    assert compare.preset_overrides(settings) == []
    for env, dtype, scaled in (("ERL-HotpotQA-v0", "float16", True), ("ERL-Sokoban-v0", "bfloat16", False),
                               ("ERL-FrozenLake-v0", "bfloat16", False)):
        for method in ("rlvr", "erl"):
            config = compare.run_config(settings, env, method, 0, Path("unused"), settings["steps"])
            assert config.dtype == dtype
            precision = resolve_precision(config.dtype, config.precision, "cuda", bf16_supported=True)
            assert precision.loss_scaling is scaled
    # A dtype for every run overrides HotpotQA's float16: the comparison says so before it starts.
    overridden = dict(settings, trainer={**settings["trainer"], "dtype": "bfloat16"})
    assert compare.preset_overrides(overridden) == [
        "trainer.dtype='bfloat16' overrides the paper-qwen3-4b preset's 'float16' for ERL-HotpotQA-v0; set it under "
        "env_trainer for the other envs to keep the preset's"]
    hotpotqa = {**settings["env_trainer"]["ERL-HotpotQA-v0"], "dtype": "float16"}
    kept = dict(overridden, env_trainer={**settings["env_trainer"], "ERL-HotpotQA-v0": hotpotqa})
    assert compare.preset_overrides(kept) == []


@pytest.mark.slow
def test_quick_comparison_end_to_end(tmp_path, capsys):
    assert compare.main(["--quick", "--output", str(tmp_path)]) == 0
    with open(tmp_path / "evals.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["method"] for r in rows} == set(compare.METHODS)
    assert all(0.0 <= float(r["eval_reward"]) <= 1.0 for r in rows)
    budget = int(rows[0]["budget_tokens"])
    finals = compare._final([dict(r, seed=int(r["seed"])) for r in rows])
    assert budget > 0 and all(int(r["sampled_tokens"]) >= budget for r in finals.values())
    table = (tmp_path / "table.md").read_text()
    assert all(label in table for label in compare.LABELS.values())
    assert (tmp_path / "curves_FrozenLake.png").read_bytes().startswith(PNG_MAGIC)
    # A repeated command reuses the finished runs instead of training again.
    capsys.readouterr()
    assert compare.main(["--quick", "--output", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("reusing") == len(compare.METHODS)


def _main_job_run(folder, algo, evals, last_step, reflector="plan", seed=0, steps=None):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"seed": seed, "algo": algo, "reflector": reflector,
                                                    "time_limit_min": 8.0, "threads": 0,
                                                    "steps": last_step if steps is None else steps,
                                                    "env": "ERL-FrozenLake-v0", "env_kwargs": {"size": [2, 4]},
                                                    "eval_env_kwargs": {}, "eval_set": "seeded", "eval_tasks": 6}))
    rows = [{"step": step, "eval/success": k / 100, "eval/episodes": 100} for step, k in evals]
    rows.append({"step": last_step, "time/training": 480.0, "time/elapsed": 600.0})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "load.json").write_text(json.dumps({"load1": [1.5, 2.5]}))


def test_main_job_report_names_the_reflector_and_an_unfinished_ci_run(tmp_path):
    from benchmarks.learning import bench_main_job as main_job

    data = tmp_path
    _main_job_run(data / "main", "erl", [(0, 30), (12, 70)], 12)
    _main_job_run(data / "ci_rlvr", "rlvr", [(0, 34), (20, 41), (40, 46), (60, 52), (80, 43)], 80)
    _main_job_run(data / "ci_erl", "erl", [(0, 34), (20, 40)], 25)
    text = main_job.to_markdown(data)
    assert "the RuleReflector's plan" in text and "This run: 12 steps, 8.0 training minutes" in text
    assert "load average 1.5-2.5" in text and "| 12 | 70/100 = 0.70 [" in text
    # RLVR's last two evaluations average 0.475 >= max(0.45, 0.34 + 0.1); ERL stopped at step 25 is not judged.
    assert "| rlvr | 34/100 = 0.34 [" in text and "| 0.475 | 0.450 | yes |" in text
    assert ("| erl | 34/100 = 0.34 [0.25, 0.44] | 40/100 = 0.40 [0.31, 0.50] | - | - | - | - | 0.450 | "
            "not finished (step 25 of 80) |") in text


def test_ci_check_bar_is_on_the_last_two_evaluations_not_the_best():
    from benchmarks.learning.bench_main_job import ci_check_passes, ci_check_score

    # A run whose best later evaluation clears the bar but which falls back at the end fails it.
    assert not ci_check_passes([0.34, 0.41, 0.46, 0.60, 0.20])
    assert ci_check_score([0.34, 0.41, 0.46, 0.60, 0.20]) == (0.60 + 0.20) / 2
    assert ci_check_passes([0.34, 0.41, 0.46, 0.52, 0.43])
    # Below the floor, or less than 0.1 above step 0, fails; too few evaluations cannot pass.
    assert not ci_check_passes([0.20, 0.30, 0.40, 0.42])
    assert not ci_check_passes([0.40, 0.46, 0.48, 0.49])
    assert not ci_check_passes([0.34, 0.90])


def test_main_job_collect_copies_the_runs_it_finds_and_keeps_the_others(tmp_path):
    from benchmarks.learning import bench_main_job as main_job

    data, runs = tmp_path / "data", tmp_path / "runs"
    for name, algo in (("main", "erl"), ("ci_rlvr", "rlvr"), ("ci_erl", "erl")):
        _main_job_run(data / name, algo, [(0, 30), (20, 40)], 20)
    _main_job_run(runs / "main", "erl", [(0, 30), (200, 69)], 200)  # only the main job was rerun
    kept = (data / "ci_rlvr" / "metrics.jsonl").read_text()
    main_job.collect(runs, data)
    assert (data / "main" / "metrics.jsonl").read_text() == (runs / "main" / "metrics.jsonl").read_text()
    assert (data / "ci_rlvr" / "metrics.jsonl").read_text() == kept
    assert json.loads((data / "main" / "config.json").read_text())["output"] == "runs/main"


def test_mean_interval_is_students_t_over_seeds():
    from benchmarks.reporting import mean_interval

    # Five values with mean 0.7 and sample standard deviation 0.05: half-width 2.776 * 0.05 / sqrt(5).
    mean, low, high = mean_interval([0.65, 0.75, 0.70, 0.65, 0.75])
    half = 2.776 * math.sqrt((4 * 0.05 ** 2) / 4) / math.sqrt(5)
    assert mean == pytest.approx(0.7) and low == pytest.approx(0.7 - half) and high == pytest.approx(0.7 + half)
    # Equal values: no spread; one value: no interval.
    assert mean_interval([0.5, 0.5, 0.5])[1:] == pytest.approx((0.5, 0.5))
    assert math.isnan(mean_interval([0.4])[1])


def test_main_job_report_gives_the_end_across_seeds_and_the_floor_on_the_same_instances(tmp_path):
    from benchmarks.learning import bench_main_job as main_job

    data = tmp_path
    _main_job_run(data / "main", "erl", [(0, 30), (10, 60), (20, 70), (30, 72)], 30, steps=30)
    _main_job_run(data / "main_seed1", "erl", [(0, 30), (10, 62), (20, 66), (30, 80)], 30, seed=1, steps=30)
    _main_job_run(data / "main_seed2", "erl", [(0, 30), (10, 60)], 14, seed=2, steps=30)  # stopped early
    (data / "constant.json").write_text(json.dumps({"constant": {"Up": [True, False, False, False],
                                                                  "Down": [True, True, False, False]}}))
    text = main_job.to_markdown(data)
    assert "| 0 | 30 | 72/100 = 0.72 [" in text and "| 0.673 |" in text  # mean of 0.60, 0.70, 0.72
    assert "| 1 | 30 | 80/100 = 0.80 [" in text
    assert "| 2 | 14 of 30 | not finished | - |" in text
    mean, low, high = main_job.mean_interval([0.72, 0.80])
    assert f"Over 2 finished seeds: held-out at the end {mean:.3f} on average" in text
    assert f"[{low:.3f}, {high:.3f}]), lowest 0.720 (seed 0)" in text
    assert "Seeds ending at or above 0.7: 2 of 2." in text
    assert "same held-out instances: always Down, 2/4 = 0.50 [" in text and "others: Up 1/4" in text


def test_main_job_collect_keeps_an_extra_seeds_evaluations_and_plays_the_constant_policies(tmp_path):
    from benchmarks.learning import bench_main_job as main_job

    data, runs = tmp_path / "data", tmp_path / "runs"
    _main_job_run(runs / "main", "erl", [(0, 30), (20, 40)], 20)
    _main_job_run(runs / "main_seed3", "erl", [(0, 30), (20, 50)], 20, seed=3)
    # Training rows without an evaluation are left out; the last row (the run's end, here with an evaluation) is
    # kept once.
    lines = [json.dumps({"step": 0, "eval/success": 0.3, "eval/episodes": 100}), json.dumps({"step": 7, "loss": 0.1}),
             json.dumps({"step": 20, "eval/success": 0.5, "eval/episodes": 100, "time/elapsed": 600.0})]
    (runs / "main_seed3" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    main_job.collect(runs, data)
    kept = (data / "main_seed3" / "evals.jsonl").read_text().splitlines()
    assert kept == [lines[0], lines[2]] and not (data / "main_seed3" / "metrics.jsonl").exists()
    assert json.loads((data / "main_seed3" / "config.json").read_text())["output"] == "runs/main_seed3"
    record = json.loads((data / "constant.json").read_text())
    assert len(record["tasks"]) == 6 and set(record["constant"]) == {"Up", "Down", "Left", "Right"}
    # The instances the main job evaluates on (its config's: six seeded ones), played in its env.
    from benchmarks.real_model.board_dependence import constant_outcomes
    from erl_agents.envs import make_env
    from erl_agents.evaluate import seeded_tasks

    assert record["tasks"] == [[seed, options] for seed, options in seeded_tasks(6)]
    assert record["constant"] == constant_outcomes(lambda: make_env("ERL-FrozenLake-v0", {"size": [2, 4]}),
                                                   seeded_tasks(6))


def _committed_config(name):
    from benchmarks.learning.bench_main_job import DATA

    return json.loads((DATA / name / "config.json").read_text())


@pytest.mark.parametrize("algo", ["rlvr", "erl"])
def test_ci_check_config_is_the_config_of_its_committed_runs(algo):
    """main_job.md reports the committed runs as the CI check's numbers: a preset change that reaches the check's
    config (the main job's learning rate, its evaluation) would make them another config's."""
    import dataclasses

    from benchmarks.learning.bench_main_job import ci_check_config

    config = dataclasses.asdict(ci_check_config(algo, f"runs/ci_{algo}"))
    committed = _committed_config(f"ci_{algo}")
    # threads: the committed runs said 0 (all cores: 2 on the machine that made them), the preset now says 2.
    assert {k: v for k, v in committed.items() if k != "threads" and config.get(k) != v} == {}


def test_main_job_data_is_the_current_presets_run():
    """The committed main job (and its extra seeds) ran the command the README gives, with today's preset."""
    import dataclasses

    from benchmarks.learning.bench_main_job import DATA, MAIN_ARGS, seed_folders
    from erl_agents.train import parse_config

    for folder in [DATA / "main", *seed_folders(DATA)]:
        committed = _committed_config(folder.name)
        seed = ["--seed", str(committed["seed"])] if folder.name != "main" else []
        config = dataclasses.asdict(parse_config(MAIN_ARGS + seed + ["--output", f"runs/{folder.name}"]))
        # How a run was started (a progress bar, resumed after a pause) is not what it computes.
        started = {"progress", "resume"}
        assert {k: v for k, v in committed.items() if k not in started and config.get(k) != v} == {}, folder.name


def test_end_kind_reads_how_a_frozen_lake_episode_ended():
    """The failure table's kinds agree with the env's own ending: success, a hole (terminated without success), or
    the step limit (truncated)."""
    import gymnasium as gym

    import erl_envs  # noqa: F401
    from benchmarks.learning.bench_main_job import end_kind

    env = gym.make("ERL-FrozenLake-v0", size=[2, 4])
    seen = set()
    for seed in range(60):
        for move in ("```Up```", "```Right```"):
            env.reset(seed=seed)
            terminated = truncated = False
            while not (terminated or truncated):
                _, _, terminated, truncated, info = env.step(move)
            kind = end_kind(env.unwrapped)
            expected = "success" if info["success"] else "hole" if terminated else "step_limit"
            assert kind == expected, (seed, move)
            seen.add(kind)
    assert seen == {"success", "hole", "step_limit"}


def test_main_job_report_splits_the_final_models_by_instances_and_boards(tmp_path):
    from benchmarks.learning import bench_main_job as main_job

    _main_job_run(tmp_path / "main", "erl", [(0, 30), (12, 70)], 12)  # its config: 6 held-out instances
    outcomes = {"main": [[2, 1, "success"]] * 5 + [[4, 3, "hole"]] + [[4, 3, "success"], [4, 3, "step_limit"]],
                "main_seed1": [[2, 1, "success"]] * 6 + [[4, 3, "hole"], [4, 3, "hole"]]}
    (tmp_path / "outcomes.json").write_text(json.dumps({"tasks": 8, "runs": outcomes}))
    text = main_job.to_markdown(tmp_path)
    assert "| run | the first 6 (the evaluation's) | the other 2 | all 8 |" in text
    assert "| main | 5/6 = 0.83 [" in text and "| 1/2 = 0.50 [" in text and "| 6/8 = 0.75 [" in text
    assert "| main_seed1 | 6/6 = 1.00 [" in text and "| 0/2 = 0.00 [" in text
    # Pooled over both models: 11 episodes on 2x2 boards one move from the goal, all solved; 5 on 4x4 boards three
    # moves away: 1 solved, 3 in a hole, 1 at the step limit.
    assert "| 2x2 | 1 | 11 | 1.00 | 0.00 | 0.00 |" in text
    assert "| 4x4 | 3 | 5 | 0.20 | 0.60 | 0.20 |" in text
    # The mix of the instances (read from the first model's: all play the same ones): 4x4 boards are 1 of the first
    # 6 and both of the other 2.
    assert "4x4 boards are 0.17 of the first 6, 1.00 of the other 2; the mean shortest path 1.33 (the first 6)" in text
    # Past the old evaluation's 100 instances, those get a column of their own.
    many = [[2, 1, "success"]] * 100 + [[4, 3, "hole"]] * 100
    (tmp_path / "outcomes.json").write_text(json.dumps({"tasks": 200, "runs": {"main": many}}))
    text = main_job.to_markdown(tmp_path)
    assert "| run | the first 6 (the evaluation's) | the first 100 | the other 194 | all 200 |" in text
    assert "| main | 6/6 = 1.00 [" in text and "| 100/100 = 1.00 [" in text and "| 94/194 = 0.48 [" in text


def test_final_models_play_the_held_out_instances_in_order_and_repeatably(tmp_path, monkeypatch):
    from benchmarks.learning import bench_main_job as main_job
    from erl_agents.config import build_config
    from erl_agents.envs import make_env
    from erl_agents.evaluate import seeded_tasks
    from erl_agents.trainer import Trainer
    from erl_envs.grid.frozen_lake_maps import shortest_path_length

    config = build_config({"preset": "cpu-tiny"}, flags=dict(
        env="ERL-FrozenLake-v0", algo="rlvr", output=str(tmp_path / "runs" / "main"), steps=1, tasks_per_step=2,
        n_rlvr=2, eval_every=0, checkpoint_every=0, tiny_hidden=32, tiny_layers=1, tiny_heads=2,
        tiny_intermediate=64, progress=False, save_final_model=True, threads=1))
    Trainer(config).train()
    run = tmp_path / "runs" / "main"
    outcomes = main_job.play_outcomes(run, tasks=5)
    assert outcomes == main_job.play_outcomes(run, tasks=5)  # the run's seed and one thread: the same episodes
    env = make_env("ERL-FrozenLake-v0", {"size": [2, 4]})
    boards = []
    for seed, options in seeded_tasks(5):
        env.reset(seed=seed, options=options)
        boards.append([len(env.unwrapped.map_rows), shortest_path_length(env.unwrapped.map_rows)])
    assert [outcome[:2] for outcome in outcomes] == boards
    assert {kind for _, _, kind in outcomes} <= set(main_job.END_KINDS)
    # collect plays every run it finds with a final model, and keeps another run's kept outcomes.
    data = tmp_path / "data"
    data.mkdir()
    (data / "outcomes.json").write_text(json.dumps({"tasks": main_job.OUTCOME_TASKS, "runs": {"main_seed9": []}}))
    monkeypatch.setattr(main_job, "play_outcomes", lambda folder, tasks=0: [[2, 1, folder.name]])
    main_job.collect(tmp_path / "runs", data)
    assert json.loads((data / "outcomes.json").read_text())["runs"] == {"main_seed9": [], "main": [[2, 1, "main"]]}
