"""The benchmark harness: compare.py's matched budget, tables, CSV and plots; run_all's speed table; the baselines'
loading. The end-to-end --quick runs that train or time models are marked slow."""

import csv
import importlib
import json
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

compare = importlib.import_module("compare")
run_all = importlib.import_module("run_all")
bench_sokoban_gen = importlib.import_module("bench_sokoban_gen")
bench_update_vs_trl = importlib.import_module("bench_update_vs_trl")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------------------------------------------
# compare.py


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
    files = compare.write_results(_fake_runs(), _settings(), tmp_path, "python benchmarks/compare.py --test")
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


def test_budgeted_trainer_ends_the_run_at_the_step_that_reaches_the_budget():
    from erl_agents.rollout import Episode, Trajectory

    def episode(tokens):
        t = Trajectory(role="attempt1", task=0, episode=0, tokens=[1] * (2 + tokens), mask=[0, 0] + [1] * tokens,
                       logprobs=[0.0] * (2 + tokens), constraints=[-1] * (2 + tokens), prompt_len=2,
                       system_prompt="", first_observation="")
        return Episode(task=0, index=0, trajectories=[t]), t

    trainer = object.__new__(compare.BudgetedTrainer)  # the hook alone, without building a policy
    trainer.memory, trainer.budget, trainer.sampled = None, 10, 0
    trainer.config = compare.run_config(_settings(), "ERL-FrozenLake-v0", "rlvr", 0, Path("unused"), 100)
    for step, expected_steps in ((1, 100), (2, 2)):
        trainer.step = step
        e, t = episode(6)
        row = trainer._rollout_metrics([e], [t])
        assert row["tokens/sampled_total"] == 6 * step
        assert trainer.config.steps == expected_steps


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


# ----------------------------------------------------------------------------------------------------------------
# run_all.py and the baselines


ENVS_MD = """# x

| env | steps/s | ratio to baseline | us per step + render |
|---|---|---|---|
| Gymnasium FrozenLake-v1 (ansi render) | 100,000 | 1.00 | 7.8 |
| ERL-FrozenLake-v0 | 150,000 | 1.50 | 2.4 |
| ERL-Sokoban-v0 | skipped: not available (ImportError: x) | | |
"""

BM25_MD = """| metric | 10000 | 100000 |
|---|---|---|
| build ours (s) | 1.00 | 10.0 |
| build rank-bm25 (s) | 2.00 | 15.0 |
| query ours (ms) | 0.5 | 2.0 |
| query rank-bm25 (ms) | 50.0 | 500.0 |
| identical top-10 | 20/20 | 19/20 |
"""


def test_speed_rows_from_the_other_benchmarks_tables(tmp_path):
    (tmp_path / "envs.md").write_text(ENVS_MD)
    rows = run_all.envs_rows(tmp_path / "envs.md")
    assert rows[0]["ratio"] == pytest.approx(1.5) and rows[0]["baseline"] == 100_000
    assert "ratio" not in rows[1] and "skipped" in rows[1]["note"]
    (tmp_path / "bm25.md").write_text(BM25_MD)
    rows = run_all.bm25_rows(tmp_path / "bm25.md")
    query_100k = next(r for r in rows if "query" in r["measure"] and "100,000" in r["measure"])
    assert query_100k["ratio"] == pytest.approx(250.0) and "19/20" in query_100k["note"]
    build_10k = next(r for r in rows if "build" in r["measure"] and "10,000 " in r["measure"])
    assert build_10k["ratio"] == pytest.approx(2.0)


def test_speed_table_orients_ratios_and_reports_failures():
    rows = {"rollout": [{"measure": "m", "ours": 10.0, "baseline": 5.0, "baseline_name": "b", "ratio": 2.0}]}
    text = run_all.to_markdown(rows, {"bm25": "exit code 1: boom"}, "quick", {"rollout": 3.0}, "a machine", "cmd")
    tables = run_all.read_tables(text)
    assert tables[0][0]["ratio"] == "**2.00**" and tables[0][0]["benchmark"] == "[rollout](rollout.md)"
    assert tables[0][1]["benchmark"] == "bm25" and "boom" in tables[0][1]["note"]
    assert "Machine: a machine." in text


def test_run_all_writes_speed_md_for_a_benchmark_without_its_baseline(tmp_path, monkeypatch):
    monkeypatch.delenv("GYM_SOKOBAN", raising=False)
    assert run_all.main(["--size", "quick", "--only", "sokoban_gen", "--output", str(tmp_path)]) == 0
    table = run_all.read_tables((tmp_path / "speed.md").read_text())[0]
    assert len(table) == 2 and all(r["ratio"] == "n/a" for r in table)
    assert all("gym-sokoban not available" in r["note"] for r in table)
    assert float(table[0]["ours"].replace(",", "")) > 0


def test_gym_sokoban_generator_is_loaded_from_a_wheel(tmp_path):
    wheel = tmp_path / "gym_sokoban-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(bench_sokoban_gen.ROOM_UTILS, "import numpy as np\n"
                         "def generate_room(dim=(10, 10), num_steps=25, num_boxes=3, **_):\n"
                         "    return np.zeros(dim), np.zeros(dim), {}\n")
    module = bench_sokoban_gen.load_room_utils(tmp_path)  # the folder pip download wrote into
    assert module.generate_room(dim=(6, 6))[0].shape == (6, 6)
    result = bench_sokoban_gen.gym_sokoban(module, (6, 7), 1, 25, seconds=0.2, max_levels=20)
    assert result["levels"] == 20 and result["levels_per_s"] > 0
    with pytest.raises(FileNotFoundError, match="pip download --no-deps gym-sokoban"):
        bench_sokoban_gen.load_room_utils(None)
    with pytest.raises(FileNotFoundError, match="no gym_sokoban/envs/room_utils.py"):
        bench_sokoban_gen.load_room_utils(tmp_path / "nothing-here")


def test_trl_speed_rows_say_why_a_side_failed():
    ours = {"step_s": 1.0, "update_s": 0.5, "tokens_per_s": 100.0, "peak_rss_mb": 400.0}
    rows = bench_update_vs_trl.speed_rows({"ours": ours, "trl": {"step_s": 2.0, "update_s": 2.0, "tokens_per_s": 50.0,
                                                                  "peak_rss_mb": 600.0}})
    assert [round(r["ratio"], 2) for r in rows] == [2.0, 4.0, 2.0, 1.5]
    failed = bench_update_vs_trl.speed_rows({"ours": ours, "trl": {"error": "ImportError: no trl"}})
    assert all("ratio" not in r and "no trl" in r["note"] for r in failed)


def test_reward_varies_within_a_group():
    assert len({bench_update_vs_trl.reward_of(t) for t in ("Up", "Down", "Left", "Right", "x")}) > 1


@pytest.mark.slow
def test_quick_trl_comparison(tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "update_vs_trl.md"
    assert bench_update_vs_trl.main(["--quick", "--steps", "1", "--output", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    for side in ("ours", "trl"):
        assert "error" not in data[side], data[side]
        assert data[side]["tokens_per_step"] > 0 and data[side]["peak_rss_mb"] > 0
    assert len(run_all.read_tables(out.read_text())[0]) == 6


@pytest.mark.slow
def test_rollout_batched_and_sequential_play_the_same_episodes():
    bench_rollout = importlib.import_module("bench_rollout")
    rows = bench_rollout.measure(live_counts=(1, 2), repeats=1, free_tokens=4)
    assert [(r["live"]) for r in rows] == [1, 2, 1, 2]
    for r in rows:
        assert r["batched"]["tokens"] > 0 and r["sequential"]["tokens"] > 0 and r["ratio"] > 0
