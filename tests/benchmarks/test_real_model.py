"""The two real-model benchmarks' harness: reflection lift (bench_reflection_lift.py) and the ERL/RLVR report
(bench_smol_erl.py). The model here is the tiny one; the measurements themselves need SmolLM2 and an hour."""

import copy
import json
import math
from pathlib import Path

import pytest

from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import SamplingParams
from erl_agents.envs import make_env, tiny_corpus

from benchmarks import reporting
from benchmarks.real_model import bench_reflection_lift as lift
from benchmarks.real_model import bench_smol_erl as smol_erl

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_rate_difference_interval_is_newcombes():
    # Newcombe (1998), Statistics in Medicine 17:873, Table II, example (a): 56/70 - 48/80 = 0.2000 [0.0524, 0.3339].
    d, low, high = reporting.difference(56, 70, 48, 80)
    assert (d, low, high) == pytest.approx((0.2, 0.0524, 0.3339), abs=5e-4)
    # Equal rates: an interval around 0 that is symmetric; no tasks: no number.
    d, low, high = reporting.difference(5, 10, 5, 10)
    assert d == 0 and low == pytest.approx(-high)
    assert all(math.isnan(x) for x in reporting.difference(0, 0, 1, 2))


def test_wilson_interval_matches_hand_computed_values():
    low, high = reporting.wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = reporting.wilson(5, 10)
    assert (low, high) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    low, high = reporting.wilson(37, 37)
    assert high == 1.0 and low == pytest.approx(0.9059, abs=1e-4)
    assert reporting.rate(3, 37) == "3/37 = 0.08 [0.03, 0.21]"
    assert reporting.rate(0, 0) == "n/a (0 tasks)"


def test_regenerating_a_report_keeps_the_written_analysis(tmp_path):
    path = tmp_path / "r.md"
    reporting.write_keeping_analysis(path, "# T\n\n| a |\n")
    path.write_text(path.read_text() + "\nWhat it shows: prose a person wrote.\n")
    reporting.write_keeping_analysis(path, "# T\n\n| b |\n")
    text = path.read_text()
    assert "| b |" in text and "| a |" not in text
    assert text.count(reporting.ANALYSIS_MARKER) == 1 and text.endswith("prose a person wrote.\n")


@pytest.fixture(scope="module")
def tiny_policy():
    env = make_env("ERL-FrozenLake-v0", {"size": [2, 3]})
    tokenizer = build_tiny_tokenizer(tiny_corpus(env, episodes=30, seed=0), vocab_size=400)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0).eval(), tokenizer)


def test_reflection_lift_replays_each_failure_for_every_retry_condition(tiny_policy):
    """All four retries start from the very same failed first attempt (the replay checks its score), and the
    counts add up: failures + first-attempt successes = tasks, retry successes <= failures."""
    settings = {"sampling": SamplingParams(1.0, 1.0, 0, 4), "reflect_sampling": SamplingParams(1.0, 1.0, 0, 6),
                "reflection_instructions": "Write a new system prompt inside <prompt>...</prompt>."}
    result = lift.measure_game(tiny_policy, "frozenlake", 5, constrained=True, batch=3, settings=settings, seed=0,
                               max_size=3)
    assert result["tasks"] == 5 and max(result["sizes"]) <= 3
    assert result["attempt1_successes"] + result["failed"] == 5
    assert result["failed"] > 0, "an untrained tiny model should fail some paper maps"
    assert set(result["retry_successes"]) == set(lift.CONDITIONS)
    assert all(0 <= v <= result["failed"] for v in result["retry_successes"].values())
    assert 0 <= result["usable_prompts"] <= result["failed"] and result["sampled_tokens"] > 0
    assert len(result["load_average"]) == 3
    assert result["first_move"]["maps"] == 5 and sum(result["first_move"]["mean_probability"]) == pytest.approx(1.0)
    assert result["first_move_lenient"]["prompts"] == "lenient" and result["first_move"]["prompts"] == "lenient"
    assert sum(result["first_moves_sampled"].values()) == 5
    report = lift.to_markdown([result], "cmd", settings, True, 1)
    assert "| frozenlake (sizes " in report and "load average" in report
    assert "## Untrained policy: its first move" in report and "| P(Up) | P(Down) | P(Left) | P(Right) |" in report


def _step_towards(observation: str, target: str) -> str:
    """The first move of a shortest path on a FrozenLake text board (A you, C hole) to a ``target`` cell: "B" (the
    goal, around the holes) or "C" (the nearest hole: a quick failure). "```Wait```" (no move) when there is none."""
    rows = [[cell.strip() for cell in line.split("\t") if cell.strip()] for line in observation.splitlines()
            if "\t" in line]
    cells = {(r, c): symbol for r, row in enumerate(rows) for c, symbol in enumerate(row)}
    start = next(p for p, s in cells.items() if s == "A")
    moves = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
    frontier, first = [start], {start: None}
    for cell in frontier:
        if cells[cell] == target:
            return f"```{first[cell]}```"
        if cells[cell] == "C":
            continue
        for name, (dr, dc) in moves.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt in cells and nxt not in first:
                first[nxt] = first[cell] or name
                frontier.append(nxt)
    return "```Wait```"


class LiftScript:
    """Scripted replies with known outcomes for the first five FrozenLake test maps up to size 3 (tasks 0-4):

    attempt 1 solves task 0 and walks into a hole on the others (4 failures); the model's own reflection holds a
    usable <prompt> block for tasks 1 and 2 only; a retry solves its map after its own reflection (tasks 1, 2),
    after RuleReflector's rulebook on tasks 1 and 3, after the no-reflection trace on task 4, and never as a plain
    second try. Expected: own 2, rule 2, no_reflection 1, plain 0 of 4 failures; 2 usable reflections.
    """

    def __init__(self, first_observations: list[str], instructions: str, reflection_instructions: str):
        self.task_of = {obs: k for k, obs in enumerate(first_observations)}
        self.instructions = instructions
        self.reflection_instructions = reflection_instructions

    def __call__(self, conversation):
        from erl_envs.reflection.prompts import NO_REFLECTION_NOTE

        if conversation.system == self.reflection_instructions:
            task = next(k for obs, k in self.task_of.items() if obs in conversation.users[0])
            return "<prompt>OWN</prompt>" if task in (1, 2) else "No idea."
        task = self.task_of[conversation.users[0]]
        if conversation.system == self.instructions:  # attempt 1
            solves = task == 0
        elif conversation.system.startswith("OWN\n"):
            solves = task in (1, 2)
        elif "a move off the board does nothing" in conversation.system:  # the brief RuleReflector's rulebook
            solves = task in (1, 3)
        elif NO_REFLECTION_NOTE in conversation.system:
            solves = task == 4
        else:  # the plain second try (and an own reflection without a usable block)
            solves = False
        return _step_towards(conversation.users[-1], "B" if solves else "C")


def test_reflection_lift_counts_usable_reflections_and_each_conditions_retries(tiny_policy):
    """Scripted replies with known answers: every count of measure_game is checked, so a condition that silently
    lost its reflector, a retry success not counted or a fallback counted usable all show."""
    from erl_envs.protocol import instructions_of
    from scripted_policy import script

    settings = {"sampling": SamplingParams(1.0, 1.0, 0, 8), "reflect_sampling": SamplingParams(1.0, 1.0, 0, 16),
                "reflection_instructions": "Write a new system prompt inside <prompt>...</prompt>."}
    tasks = lift.load_tasks("frozenlake", 5, max_size=3)
    env = make_env("ERL-FrozenLake-v0", {})
    first = [env.reset(seed=seed, options=options)[0] for seed, options in tasks]
    policy = Policy(copy.deepcopy(tiny_policy.model), tiny_policy.tokenizer)  # scripted: not the shared model
    script(policy, LiftScript(first, instructions_of(env), settings["reflection_instructions"]))
    result = lift.measure_game(policy, "frozenlake", 5, constrained=False, batch=5, settings=settings, seed=0,
                               max_size=3)
    assert (result["tasks"], result["attempt1_successes"], result["failed"]) == (5, 1, 4)
    assert result["retry_successes"] == {"own": 2, "rule": 2, "no_reflection": 1, "plain": 0}
    assert result["usable_prompts"] == 2
    assert result["example_reflection"] == "<prompt>OWN</prompt>"
    report = lift.to_markdown([result], "cmd", settings, False, 1)
    assert "| 1/5 = 0.20 [" in report and "| 2/4 = 0.50 [" in report and "| 0/4 = 0.00 [" in report


def test_reflection_lift_reads_the_shipped_test_sets_without_the_shared_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("ERL_SHARED", str(tmp_path / "absent"))
    assert len(lift.load_tasks("frozenlake", 100)) == 100
    sokoban = lift.load_tasks("sokoban", 100)
    assert len(sokoban) == 100 and all("level" in options for _, options in sokoban)
    assert all(options["size"] <= 4 for _, options in lift.load_tasks("frozenlake", 100, max_size=4))


def test_reflection_lift_report_merges_per_game_json_files(tmp_path):
    game = {"game": "sokoban", "tasks": 4, "sizes": [], "attempt1_successes": 1, "failed": 3,
            "retry_successes": {"own": 0, "rule": 2, "no_reflection": 1, "plain": 0}, "usable_prompts": 1,
            "generation_seconds": 2.0, "sampled_tokens": 10, "load_average": [1.0, 2.0], "example_reflection": "x"}
    files = []
    for name in ("frozenlake", "sokoban"):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([dict(game, game=name)]))
        files.append(str(path))
    out = tmp_path / "lift.md"
    assert lift.main(["--tasks", "4", "--from-json", *files, "--output", str(out)]) == 0
    text = out.read_text()
    assert "| frozenlake |" in text and "| sokoban |" in text and "2/3 = 0.67" in text
    assert "Generated by `python benchmarks/real_model/bench_reflection_lift.py --tasks 4 --output" in text
    assert "load average 1.0-2.0" in text and "[lift.png](lift.png)" in text
    assert out.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC


def test_move_summary_matches_hand_computed_values():
    summary = lift.move_summary([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    assert summary["mean_probability"] == [0.625, 0.125, 0.125, 0.125]
    assert summary["entropy_bits"] == pytest.approx(1.0) and summary["top_share"] == pytest.approx(0.625)
    assert summary["maps"] == 2


def test_first_move_distribution_is_what_constrained_sampling_draws(tiny_policy):
    """The computed probabilities of the four replies agree with the frequencies of constrained sampling at
    temperature 1 from the same context (2,000 draws: each within 0.04)."""
    import torch

    from erl_agents.engines.hf import generate_replies
    from erl_agents.rollout import ConstraintTable
    from erl_envs.protocol import instructions_of

    env = make_env("ERL-FrozenLake-v0", {"size": [2, 3], "prompts": "small"})
    task = (4, {"size": 3, "p": 0.7})
    (probabilities,) = lift.first_move_distribution(tiny_policy, env, [task])
    assert sum(probabilities) == pytest.approx(1.0, abs=1e-5)
    obs, _ = env.reset(seed=task[0], options=task[1])
    context = tiny_policy.chat.open(instructions_of(env), obs)
    actions = env.unwrapped.valid_actions
    torch.manual_seed(0)
    replies = generate_replies(tiny_policy, [context] * 2000, SamplingParams(1.0, 1.0, 0, 8), actions,
                               ConstraintTable())
    texts = [tiny_policy.chat.reply_text(r.ids) for r in replies]
    for action, p in zip(actions, probabilities):
        assert texts.count(action) / len(texts) == pytest.approx(p, abs=0.04)


def _fake_run(folder: Path, algo: str, per_step: int, steps: int, evals: dict, budget: int, warmup: int = 0) -> None:
    folder.mkdir(parents=True)
    config = {"algo": algo, "max_sampled_tokens": budget, "steps": 1000, "output": "/machine/path/" + folder.name,
              "env": "ERL-FrozenLake-v0", "model": "/machine/path/warm_start/final_model",
              "eval_env_kwargs": {"exclude": None},
              "env_kwargs": {"size": [2, 4], "exclude": "paper-test"}, "time_limit_min": 0.0}
    (folder / "config.json").write_text(json.dumps(config))
    rows = [{"step": 0, "eval/success": evals[0], "eval/episodes": 37.0}] if 0 in evals else []
    rows += [{"step": 0, "warmup_step": k, "tokens/generated": 0, "warmup/nll_before": 3.0 - k,
              "warmup/trained_tokens": 100} for k in range(1, warmup + 1)]
    for step in range(1, steps + 1):
        row = {"step": step, "tokens/generated": per_step, "tokens/sampled_total": per_step * step,
               "count/attempt1": 4, "success/attempt1": 0.25, "trained_tokens": 50, "time/elapsed": 60.0 * step,
               "time/step": 10.0 * step}
        if algo == "erl":
            row.update({"count/attempt2": 2, "lift/r1": 0.0, "lift/r2": 0.5, "reflection/count": 2,
                        "reflection/prompt_rate": 0.5, "memory/set": 1.0, "count/distilled": 1})
            if warmup:  # runs that log the retry split: one retry after a usable reflection (solved), one after none
                row.update({"retry/usable": 1, "retry/usable_solved": 1, "retry/fallback": 1, "retry/fallback_solved": 0})
        if step in evals:
            row.update({"eval/success": evals[step], "eval/episodes": 37.0})
        rows.append(row)
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_smol_erl_report_pools_seeds_per_arm_from_the_copied_runs(tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        _fake_run(runs / "small" / "rlvr" / f"seed{seed}", "rlvr", 100, 10, {0: 4 / 37, 10: (10 + seed) / 37}, 1000)
        _fake_run(runs / "small" / "erl_warmup" / f"seed{seed}", "erl", 250, 4, {4: 8 / 37}, 1000, warmup=2)
    _fake_run(runs / "small" / "erl_own" / "seed0", "erl", 250, 2, {}, 1000)  # stopped early: not finished
    data, out = tmp_path / "data", tmp_path / "smol_erl.md"
    assert smol_erl.main(["--collect", str(runs), "--data", str(data), "--output", str(out)]) == 0
    copied = json.loads((data / "small" / "rlvr" / "seed0" / "config.json").read_text())
    assert copied["output"] == "runs/small/rlvr/seed0"  # no path of the machine the run was on
    text = out.read_text()
    assert copied["model"] == "final_model"
    assert "| starting policy `final_model` (step 0) | 2 | - | 0 | 0 | 0 | 8/74 = 0.11 [" in text
    # The best constant policy on the same held-out maps (the 37 small paper maps: always Right reaches 7).
    assert "| best constant policy (always Right, no model) | - | - | - | - | - | 7/37 = 0.19 (no sampling" in text
    assert "| RLVR | 2 | token budget | 10, 10 | 1,000, 1,000 (1,000) | 500, 500 | 21/74 = 0.28 [" in text
    assert "| 10/37, 11/37 |" in text
    # Trained tokens: the RL steps' and, apart, the warm-up's.
    assert ("| ERL after reflection warm-up | 2 | token budget | 4 (+2), 4 (+2) | 1,000, 1,000 (1,000) | "
            "200 (+200), 200 (+200) |" in text)
    # Retries split by their reflection, where the runs logged it.
    assert "| ERL after reflection warm-up (2 of 2 seeds) | 8/8 = 1.00 [" in text and "| 0/8 = 0.00 [" in text
    assert "| ERL, own reflections | not logged | not logged | - |" in text
    # Medians of an even count are the mean of the two middle values: RLVR's steps take 10..100 s in both seeds.
    assert "Seconds per training step (median over the arm's steps and seeds; one torch thread, the load above): " \
           "RLVR 55;" in text
    assert "## Compute plan: the four arms from the warm start, 5 seeds x 20,000 sampled tokens" in text
    # r1 and r2 of the same retried episodes, and the usable-<prompt> rate, pooled over seeds and steps.
    assert "| ERL after reflection warm-up | 32 | 0.25 | 16 | 0.00 | 0.50 | 0.50 | 16 | 0.50 | 0.50 | 8 | 2/2 |" in text
    assert "seed 0: 2.00 -> 1.00 over 2 steps" in text
    assert "Not finished" in text and "ERL, own reflections seed 0" in text
    assert out.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC
    # Held-out success minus RLVR's, pooled: 16/74 - 21/74 (Newcombe's interval, tested in reporting's test).
    assert "ERL after reflection warm-up -0.07 [" in text
    # Rewriting from the copies alone gives the same report.
    again = tmp_path / "again" / "smol_erl.md"
    assert smol_erl.main(["--data", str(data), "--output", str(again)]) == 0
    assert again.read_text() == text


def test_smol_erl_study_runs_every_arm_from_one_model_and_resumes(tmp_path):
    commands = smol_erl.study_commands(tmp_path, "WARM/final_model", [0, 1], 20_000, ["rlvr", "erl_warmup"],
                                       engine="vllm")
    assert [folder.relative_to(tmp_path).as_posix() for folder, _ in commands] == [
        "small/rlvr/seed0", "small/rlvr/seed1", "small/erl_warmup/seed0", "small/erl_warmup/seed1"]
    for _, argv in commands:
        assert argv[argv.index("--model") + 1] == "WARM/final_model"
        assert argv[argv.index("--max-sampled-tokens") + 1] == "20000" and argv[-2:] == ["--engine", "vllm"]
    assert "--reflection-warmup" in commands[2][1] and "--no-eval-at-start" not in commands[0][1]
    assert "--engine" not in smol_erl.study_commands(tmp_path, "m", [0], 10, ["rlvr"])[0][1]
    balanced = smol_erl.study_commands(tmp_path, "m", [0, 1], 10, ["rlvr", "erl_own"], seed_major=True)
    assert [folder.relative_to(tmp_path).as_posix() for folder, _ in balanced] == [
        "small/rlvr/seed0", "small/erl_own/seed0", "small/rlvr/seed1", "small/erl_own/seed1"]
    # A run that reached its budget is finished; one that stopped short is not, and is refused without --resume.
    _fake_run(tmp_path / "small" / "rlvr" / "seed0", "rlvr", 100, 10, {}, 1000)
    _fake_run(tmp_path / "small" / "rlvr" / "seed1", "rlvr", 100, 3, {}, 1000)
    assert smol_erl.run_finished(tmp_path / "small" / "rlvr" / "seed0", 1000)
    assert not smol_erl.run_finished(tmp_path / "small" / "rlvr" / "seed1", 1000)
    with pytest.raises(SystemExit, match="pass --resume"):
        smol_erl.run_study(commands[:2], 1000, resume=False, runs=tmp_path)


def _board_run(label: str, probabilities, firsts, moves, constant) -> dict:
    """Board-dependence data of two maps with hand-chosen numbers."""
    maps = []
    for i, (p, sp) in enumerate(zip(probabilities, moves)):
        maps.append({"index": i, "seed": i, "options": {"size": 2}, "size": 2, "optimal_steps": 2, "moves": sp,
                     "probability": p, "episodes": firsts[i]})
    return {"label": label, "model": "m", "maps": maps, "actions": ["Up", "Down", "Left", "Right"], "max_steps": 3,
            "samples": 2, "sampling": {"temperature": 0.7, "top_p": 0.8, "top_k": 20}, "constant": constant,
            "command": "c", "machine": "x", "load": [1.0, 2.0], "seconds": 60.0, "seed": 0}


def test_board_dependence_figures_match_hand_computed_values():
    from benchmarks.real_model import board_dependence as bd

    # Map 0: only Down is a shortest first move; map 1: Right or Down.
    run = _board_run("untrained", [[0.0, 0.5, 0.0, 0.5], [0.0, 0.0, 0.0, 1.0]],
                     [[{"moves": [3, 3, 3], "success": False}, {"moves": [1, 1], "success": True}],
                      [{"moves": [3], "success": True}, {"moves": [3, 1], "success": True}]],
                     [[1], [1, 3]], {"Up": [False, False], "Down": [True, False], "Left": [False, False],
                                     "Right": [False, True]})
    x = bd.summarise(run)
    assert x["sp_exact"] == pytest.approx((0.5 + 1.0) / 2)
    assert x["uniform"] == pytest.approx((1 / 4 + 2 / 4) / 2)
    # Entropies 1 and 0 bits; the mean distribution (0, 0.25, 0, 0.75) has 0.811 bits: MI = 0.811 - 0.5.
    h = -(0.25 * math.log2(0.25) + 0.75 * math.log2(0.75))
    assert x["mutual_information_bits"] == pytest.approx(h - 0.5)
    assert x["sp_sampled"] == 3 and x["firsts"] == 4 and x["successes"] == 3 and x["episodes"] == 4
    # Down and Right tie at one map each: the first of them is the best; the policy's per-map rates 0.5 and 1.0.
    assert x["best"] == "Down" and x["difference"] == pytest.approx((0.5 + 1.0) / 2 - 0.5)
    # One of the three episodes longer than one move repeats a move to the limit (3 steps).
    assert (x["repeat"], x["longer"]) == (1, 3)
    assert x["most_likely"] == {"Down": 1, "Right": 1}  # argmax takes the first of map 0's tie
    warm = _board_run("warm", [[0.0, 1.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.5]],
                      [[{"moves": [1], "success": True}] * 2, [{"moves": [3], "success": True}] * 2], [[1], [1, 3]],
                      run["constant"])
    text = bd.to_markdown({"untrained": run, "warm": warm})
    assert "| always Down or Right: 1/2 = 0.50 [" in text and "| 1 of 3 |" in text
    assert "| P(shortest-path first move), exact, mean over maps | 0.750 | 1.000 |" in text


def test_board_dependence_measures_a_policy_on_the_held_out_maps(tiny_policy):
    from benchmarks.real_model import board_dependence as bd

    config, tasks, make_env_ = bd.setting()
    assert len(tasks) == 37 and all(t[1]["size"] <= 4 for t in tasks)
    data = bd.measure(tiny_policy, config, tasks[:3], make_env_, samples=2, seed=0)
    assert len(data["maps"]) == 3 and all(len(m["episodes"]) == 2 for m in data["maps"])
    assert all(sum(m["probability"]) == pytest.approx(1.0, abs=1e-4) for m in data["maps"])
    assert all(m["moves"] and len(m["moves"]) <= 2 for m in data["maps"])
    assert all(len(e["moves"]) <= data["max_steps"] for m in data["maps"] for e in m["episodes"])
    assert set(data["constant"]) == {"Up", "Down", "Left", "Right"}
    assert all(len(v) == 3 for v in data["constant"].values())
