"""The training loop: resume, determinism, learning, held-out evaluation, token budgets, every env end to end."""

import json

import pytest

from erl_agents.config import build_config
from erl_agents.rollout import ROLES
from erl_agents.trainer import Trainer

import text_bandit  # noqa: F401  (registers TextBandit-v0, so this file also runs alone)

TIME_KEYS = ("time/", "lr")


def _run_config(tmp_path, name, **overrides):
    flags = dict(env="TextBandit-v0", env_kwargs={"turns": 1}, algo="rlvr", model="tiny", output=str(tmp_path / name),
                 steps=4, tasks_per_step=2, n_rlvr=4, temperature=1.0, max_new_tokens=4, constrained_actions=True,
                 lr=3e-3, kl_coef=0.0, eval_every=2, eval_tasks=3, eval_samples=2, checkpoint_every=2,
                 tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=300, progress=False,
                 save_final_model=False, threads=0)
    flags.update(overrides)
    return build_config(flags=flags)


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith(TIME_KEYS)} for r in rows]


def test_same_seed_gives_identical_metrics_and_resume_continues_exactly(tmp_path):
    straight = _strip(Trainer(_run_config(tmp_path, "a", kl_coef=0.01)).train())
    again = _strip(Trainer(_run_config(tmp_path, "b", kl_coef=0.01)).train())
    assert straight == again
    Trainer(_run_config(tmp_path, "c", kl_coef=0.01, steps=2)).train()
    resumed = Trainer(_run_config(tmp_path, "c", kl_coef=0.01, steps=4, resume=True)).train()
    assert _strip(resumed) == straight
    lines = (tmp_path / "c" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 3, 4]
    assert (tmp_path / "c" / "curves.png").exists() and (tmp_path / "c" / "config.json").exists()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(_run_config(tmp_path, "empty", resume=True))


def test_tiny_model_learns_a_text_bandit_in_seconds(tmp_path):
    config = _run_config(tmp_path, "learn", env_kwargs={"turns": 1, "prize": 2}, steps=12, tasks_per_step=4,
                         n_rlvr=8, lr=1e-2, eval_every=12, eval_tasks=8, eval_samples=4, checkpoint_every=0,
                         eval_temperature=1.0, eval_top_k=0, eval_top_p=1.0)
    metrics = Trainer(config).train()
    assert metrics[0]["eval/success"] < 0.6  # about 1 in 4 before training
    assert metrics[-1]["eval/success"] >= 0.9
    assert metrics[-1]["success/attempt1"] > metrics[1]["success/attempt1"]


def test_evaluation_runs_on_envs_built_with_eval_env_kwargs(tmp_path):
    # Training episodes last one turn, held-out ones three: the eval token count shows which envs evaluation used.
    config = _run_config(tmp_path, "eval_envs", eval_env_kwargs={"turns": 3}, steps=1, eval_every=1)
    trainer = Trainer(config)
    assert [env.unwrapped.turns for env in trainer.envs] == [1] * 8
    assert [env.unwrapped.turns for env in trainer.eval_envs] == [3] * 8
    # Constrained replies are one action string and the end-of-turn token.
    encode = trainer.policy.tokenizer
    actions = trainer.envs[0].unwrapped.valid_actions
    lengths = [len(encode(a, add_special_tokens=False)["input_ids"]) + 1 for a in actions]
    assert 3 * min(lengths) > max(lengths)  # so three-turn and one-turn episodes cannot give the same count
    for row in trainer.train():
        assert 3 * min(lengths) <= row["eval/tokens"] / row["eval/episodes"] <= 3 * max(lengths)
    plain = Trainer(_run_config(tmp_path, "plain", steps=1, eval_every=1))
    assert plain.eval_envs is plain.envs


ENVS = {
    "ERL-FrozenLake-v0": {"size": [2, 3]},
    "ERL-Sokoban-v0": {},
    "ERL-HotpotQA-v0": {"data": "synthetic"},
}


@pytest.mark.parametrize("env", list(ENVS))
@pytest.mark.parametrize("algo, extra", [
    ("rlvr", {}),
    ("erl", {"reflector": "policy", "distill": "reverse_kl"}),
    ("erl", {"reflector": "rule", "no_memory": True}),
])
def test_rlvr_and_erl_steps_run_end_to_end_on_every_env(tmp_path, env, algo, extra):
    config = build_config({"preset": "cpu-tiny", "env": env}, flags=dict(
        env=env, env_kwargs=ENVS[env], algo=algo, output=str(tmp_path / "run"), steps=1, tasks_per_step=2,
        n_rlvr=2, n_erl=2, max_new_tokens=8, reflect_max_new_tokens=8, eval_every=1, eval_tasks=2, eval_samples=1,
        tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=400, progress=False,
        max_seq_len=1536, time_limit_min=0.0, save_final_model=False, **extra))
    metrics = Trainer(config).train()
    row = metrics[-1]
    assert row["step"] == 1 and row["count/attempt1"] == 4
    assert row["skipped_updates"] == 0 and "eval/success" in row
    if algo == "erl":
        assert row["count/attempt2"] == row["count/attempt1"] - round(row["success/attempt1"] * 4)
        if extra["reflector"] == "policy":
            assert row["count/reflection"] == row["count/attempt2"]
        else:
            assert row["count/reflection"] == 0


def test_no_reflection_ablation_runs(tmp_path):
    config = _run_config(tmp_path, "ablation", env="ERL-FrozenLake-v0", env_kwargs={"size": 2}, algo="erl",
                         no_reflection=True, reflector="policy", n_erl=2, steps=1, eval_every=0, max_new_tokens=4,
                         tiny_vocab=400)
    row = Trainer(config).train()[-1]
    assert row["count/reflection"] == 0 and row["count/attempt1"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["rlvr", "erl"])
def test_tiny_model_improves_on_small_frozen_lake(tmp_path, algo):
    """A short, step-based version of benchmarks/learning/bench_learning.py: 80 cpu-tiny steps (~3 quiet CPU minutes) must
    lift held-out first-attempt success well clear of a random policy (31-38% on sizes 2-4). The config and the bar
    are benchmarks/learning/bench_main_job.py's, which reports this check's numbers (benchmarks/results/main_job.md)."""
    from benchmarks.learning.bench_main_job import ci_check_config, ci_check_passes

    metrics = Trainer(ci_check_config(algo, str(tmp_path / algo))).train()
    evals = [m["eval/success"] for m in metrics if "eval/success" in m]
    assert len(evals) == 5
    assert ci_check_passes(evals), evals


def test_held_out_hotpotqa_questions_must_not_be_training_questions(tmp_path, hotpotqa_sample, capsys):
    from erl_agents.train import main

    train = str(hotpotqa_sample / "dev_distractor_sample_train.jsonl")
    dev = str(hotpotqa_sample / "dev_distractor_sample_dev.jsonl")
    base = ["--preset", "cpu-tiny", "--env", "ERL-HotpotQA-v0", "--output", str(tmp_path / "run"), "--steps", "1",
            "--env-kwargs", json.dumps({"data": train, "mode": "distractor"}), "--no-progress"]
    # No held-out data: evaluation would draw the training questions themselves.
    assert main(base + ["--eval-env-kwargs", "{}"]) == 2
    # The same file again, and a copy with other ids and re-spaced question text: both overlap.
    copy = tmp_path / "copy.jsonl"
    records = [json.loads(line) for line in open(train)][:20]
    copy.write_text("".join(json.dumps(dict(r, id=f"other-{k}", question="  " + r["question"].upper())) + "\n"
                            for k, r in enumerate(records)))
    for data in (train, str(copy)):
        assert main(base + ["--eval-env-kwargs", json.dumps({"data": data})]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(e.startswith("erl-train: error: ") for e in errors)
    assert "training questions" in errors[0] and "20 of the 20 held-out questions" in errors[2]
    assert "--allow-eval-overlap" in errors[1]
    # A disjoint split is accepted; so is an overlap the user allows explicitly (with a warning).
    flags = dict(preset="cpu-tiny", env="ERL-HotpotQA-v0", output=str(tmp_path / "ok"), progress=False,
                 env_kwargs={"data": train, "mode": "distractor"})
    from erl_agents.envs import make_env
    from erl_agents.evaluate import eval_overlap_problem

    assert eval_overlap_problem(make_env("ERL-HotpotQA-v0", {"data": train}),
                                make_env("ERL-HotpotQA-v0", {"data": dev})) is None
    Trainer(build_config(flags=dict(flags, eval_env_kwargs={"data": dev})))
    with pytest.warns(RuntimeWarning, match="allow_eval_overlap"):
        Trainer(build_config(flags=dict(flags, output=str(tmp_path / "allowed"), eval_env_kwargs={},
                                        allow_eval_overlap=True)))


def test_sampled_token_budget_stops_the_run_and_counts_across_resume(tmp_path):
    full = Trainer(_run_config(tmp_path, "full", steps=3, eval_every=0, checkpoint_every=0)).train()
    spent = [row["tokens/generated"] for row in full]
    budget = spent[0] + spent[1] + 1  # crossed during step 3
    stopped = Trainer(_run_config(tmp_path, "budget", steps=5, eval_every=0, max_sampled_tokens=budget)).train()
    assert [row["step"] for row in stopped] == [1, 2, 3]
    assert stopped[-1]["tokens/sampled_total"] == sum(spent[:3]) >= budget
    # A resumed run counts the tokens its first part sampled.
    Trainer(_run_config(tmp_path, "resumed", steps=2, eval_every=0, checkpoint_every=1)).train()
    resumed = Trainer(_run_config(tmp_path, "resumed", steps=5, eval_every=0, max_sampled_tokens=budget,
                                  resume=True)).train()
    assert [row["step"] for row in resumed] == [1, 2, 3]
    with pytest.raises(ValueError, match="max_sampled_tokens must be non-negative"):
        _run_config(tmp_path, "bad", max_sampled_tokens=-1)




def test_memory_rule_flag_reaches_every_reflection_wrapper(tmp_path):
    for rule in ("project", "paper"):
        trainer = Trainer(_run_config(tmp_path, rule, env="ERL-FrozenLake-v0", env_kwargs={"size": 2}, algo="erl",
                                      n_erl=2, memory_rule=rule, reflector="rule"))
        trainer.close()
        assert {env.memory_rule for env in trainer.train_envs} == {rule}


def test_a_scaled_paper_run_builds_the_reference_batch_every_step(tmp_path):
    """The paper preset's rows per step are the reference's 256 + 4F (64 tasks x 4 attempts, F failed first attempts:
    each adds its reflection twice, its retry and a distilled copy of the retry), recorded over a 2-step run.

    Scaled to a CPU test: 2 tasks a step instead of 64 (so 8 + 4F), the tiny model in fp32 instead of Qwen3-4B in
    bf16 autocast, 16-token replies, a 96-token response budget and 24-token reflections instead of 10,240, no
    evaluation. The rows, the reflections by the policy, the epoch order over the reference's 10,000 FrozenLake
    tasks, the pool memory and the update schedule are the preset's."""
    config = build_config(flags=dict(
        preset="paper-qwen3-4b", env="ERL-FrozenLake-v0", model="tiny", device="cpu", dtype="float32", steps=2,
        tasks_per_step=2, max_new_tokens=16, response_budget=96, reflect_max_new_tokens=24, max_seq_len=6144,
        micro_batch_size=16, gradient_checkpointing=False, eval_every=0, checkpoint_every=0, progress=False,
        save_final_model=False, output=str(tmp_path / "paper"), tiny_hidden=32, tiny_layers=1, tiny_heads=2,
        tiny_intermediate=64))
    assert (config.rows, config.logprob_temperature, config.epochs) == ("paper", "rollout", 10)
    Trainer(config).train()
    rows = [json.loads(line) for line in (tmp_path / "paper" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        failed = row["count/attempt2"]  # every failed first attempt is retried
        assert failed > 0 and row["count/attempt1"] == 8
        assert row["count/reflection"] == 2 * failed and row["count/distilled"] == failed
        assert sum(row[f"count/{role}"] for role in ROLES) == 8 + 4 * failed


def test_epochs_play_each_training_task_once_per_epoch(tmp_path, monkeypatch):
    import text_bandit

    played = []
    reset = text_bandit.TextBanditEnv.reset

    def spy(self, *, seed=None, options=None):
        played.append(seed)
        return reset(self, seed=seed, options=options)

    monkeypatch.setattr(text_bandit.TextBanditEnv, "reset", spy)
    config = _run_config(tmp_path, "epochs", steps=0, epochs=2, epoch_tasks=5, tasks_per_step=2, n_rlvr=2,
                         eval_every=0, checkpoint_every=2)
    trainer = Trainer(config)
    assert trainer.total_steps == 4  # 2 epochs of 2 steps: 5 tasks make two batches of 2, the fifth is dropped
    played.clear()
    rows = trainer.train()
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    steps = [played[k:k + 4] for k in range(0, 16, 4)]  # 2 tasks x 2 samples a step, a task's samples together
    assert all(step[0] == step[1] and step[2] == step[3] for step in steps)
    epochs = [[s[k] for s in steps[e:e + 2] for k in (0, 2)] for e in (0, 2)]
    assert all(len(set(e)) == 4 and set(e) <= set(range(5)) for e in epochs) and epochs[0] != epochs[1]
    # --steps stops a run early, in the same order.
    short = Trainer(_run_config(tmp_path, "short", steps=1, epochs=2, epoch_tasks=5, tasks_per_step=2, n_rlvr=2,
                                eval_every=0, checkpoint_every=0))
    played.clear()
    short.train()
    assert played == steps[0]
    with pytest.raises(ValueError, match="steps at least 1, or steps 0 with epochs"):
        _run_config(tmp_path, "none", steps=0)


def test_the_trainer_applies_a_prompts_file_reads_whole_reflections_and_warns_without_the_paper_layouts(tmp_path):
    """--prompts FILE reaches every env the run builds and is put back by close(); the reflection's char limit follows
    the reflection token budget (10,240 tokens in the paper preset); the paper preset says at start-up when it trains
    Sokoban on generated levels because the paper's layouts were not found."""
    import gymnasium as gym

    from erl_agents.envs import training_data_warnings
    from erl_envs.grid import prompts as grid_prompts

    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("grid:\n  paper:\n    reminder:\n      Sokoban: Push boxes into free cells only.\n")
    config = build_config(flags=dict(
        preset="paper-qwen3-4b", env="ERL-Sokoban-v0", env_kwargs={"prompts": "paper"}, prompts=str(prompts),
        model="tiny", device="cpu", dtype="float32", steps=1, tasks_per_step=2, max_new_tokens=16,
        response_budget=96, max_seq_len=6144, gradient_checkpointing=False, eval_every=0, checkpoint_every=0,
        progress=False, save_final_model=False, output=str(tmp_path / "run"), tiny_hidden=32, tiny_layers=1,
        tiny_heads=2, tiny_intermediate=64))
    with pytest.warns(RuntimeWarning, match="trains Sokoban on generated levels .* sokoban_train.parquet was not found"):
        trainer = Trainer(config)
    try:
        assert {(env.max_reflection_chars, env.trace_rule) for env in trainer.train_envs} == {(327_680, "paper")}
        assert all(env.unwrapped.instructions.endswith("\n\nPush boxes into free cells only.")
                   for env in trainer.train_envs)
    finally:
        trainer.close()
    assert gym.make("ERL-Sokoban-v0", prompts="paper").unwrapped.instructions.endswith(
        grid_prompts.PAPER_SET["reminder"]["Sokoban"])
    assert training_data_warnings(config.preset, config.env, {"levels": "train.parquet"}) == []
    assert training_data_warnings("cpu-tiny", config.env, {}) == []
