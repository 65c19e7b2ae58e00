"""The speed benchmarks' harness: run_all's speed table, the baselines' loading and rows. The --quick runs that
time models are marked slow."""

import json
import zipfile

import pytest

from benchmarks.speed import bench_rollout, bench_sokoban_gen, bench_update_vs_trl, run_all


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
def test_rollout_benchmark_times_batched_and_one_at_a_time_play_of_the_same_tasks():
    """Both sides play the same tasks (reset seeds), model and sampling settings, and the ratio is theirs.

    They do not play the same episodes, and cannot without leaving transformers' sampling: ``generate`` draws every
    row of a batch from the one torch random stream, so one call for N episodes and N calls for one consume the
    stream in different orders (and padding changes the float sums slightly); it takes no per-row generator.
    Sampling per episode outside ``generate`` would re-implement what ``generate`` does (STYLE.md). So the
    benchmark compares throughput on the same tasks, and its sampled-token counts differ between the two sides.
    """
    rows = bench_rollout.measure(live_counts=(1, 2), repeats=1, free_tokens=4)
    assert [(r["mode"].split(" ")[0], r["live"]) for r in rows] == [("constrained", 1), ("constrained", 2),
                                                                    ("free", 1), ("free", 2)]
    for r in rows:
        for side in ("batched", "sequential"):
            run = r[side]
            # Every episode samples at least one reply of at least one token.
            assert run["tokens"] >= r["live"]
            assert run["tokens_per_s"] == pytest.approx(run["tokens"] / run["seconds"])
        assert r["ratio"] == pytest.approx(r["batched"]["tokens_per_s"] / r["sequential"]["tokens_per_s"])


def test_smol_timing_report_is_computed_from_the_saved_run(tmp_path):
    from benchmarks.speed import time_smol_train

    rows = [{"step": 0, "eval/episodes": 37.0, "time/eval": 370.0},
            {"step": 1, "count/attempt1": 8, "time/step": 120.0, "time/generation": 90.0, "time/env": 1.0,
             "time/update": 29.0},
            {"step": 2, "count/attempt1": 8, "time/step": 100.0, "eval/episodes": 37.0, "time/eval": 333.0}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "config.json").write_text(json.dumps({"eval_tasks": 100, "eval_samples": 1, "tasks_per_step": 2,
                                                      "n_erl": 4, "max_new_tokens": 16,
                                                      "reflect_max_new_tokens": 128}))
    (tmp_path / "machine.json").write_text(json.dumps({
        "cpus": 2, "machine": "x86_64", "python": "3.11.7", "load_average_before": [2.0, 2.0, 2.0],
        "load_average_after": [2.5, 2.1, 2.0], "wall_seconds": 1000.0, "paper_tasks": True,
        "command": "erl-train --model smollm2-135m --preset cpu-smol --steps 2 --seed 0"}))
    text = time_smol_train.report(tmp_path)
    assert "| held-out evaluation at step 0 | 37 | 370 | 10.0 |" in text
    assert "| training step 1 (generation 90 s, env 1 s, update 29 s) | 8 | 120 | 15.0 |" in text
    assert "[2.0, 2.0, 2.0] before" in text and "paper test set" in text and "1000 s wall" in text


def test_engine_batches_report_computes_each_ratio_from_its_rows():
    from benchmarks.speed.bench_engine_batches import to_markdown

    def row(engine, batch, tokens, seconds):
        return {"round": 0, "engine": engine, "batch": batch, "tokens": tokens, "seconds": seconds, "load": 1.0}

    data = {"command": "c", "machine": "m", "vllm_dtype": "bfloat16", "tokens": 64, "rounds_run": 2,
            "rounds": [row("hf", 1, 64, 4.0), row("vllm", 1, 64, 1.0), row("hf", 8, 512, 16.0),
                       row("vllm", 8, 500, 1.0), row("vllm", 8, 12, 1.0)]}
    text = to_markdown(data, "engine_batches.json")
    assert "| 1 | 64 | 4.0 | 16.0 | 64 | 1.0 | 64.0 | 4.0x |" in text
    assert "| 8 | 512 | 16.0 | 32.0 | 512 | 2.0 | 256.0 | 8.0x |" in text  # both rounds' tokens over both's seconds


def test_core_sharing_report_takes_the_median_lone_run_and_compares_settings():
    from benchmarks.speed.bench_core_sharing import to_markdown

    def part(*seconds, digest="d"):
        return {"wall_s": max(seconds), "load1": [0.5, 1.5], "runs": [{"seconds": s, "digest": digest} for s in seconds]}

    data = {"runs_at_once": 4, "steps": 12, "repeats": 3, "cpus": 2, "python": "3.11", "settings": [
        {"name": "default", "env": {}, "alone": [part(50), part(60), part(55)], "together": part(200, 220)},
        {"name": "spinning", "env": {"GOMP_SPINCOUNT": "300000"}, "alone": [part(40), part(50), part(45, digest="x")],
         "together": part(600)}]}
    report = to_markdown(data)
    assert "| default | erl-train's own | 55 s [50-60] | 220 s | 4.0x | yes |" in report
    assert "| spinning | `GOMP_SPINCOUNT=300000` | 45 s [40-50] | 600 s | 13.3x | no (1 of 4 differ) |" in report
    assert "Alone, default against spinning: 22% slower (medians of 3)." in report
