"""The update and the loop: gradients, micro-batching, resume, determinism, learning, every env end to end."""

import json

import pytest
import torch

from erl_agents.config import build_config
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
from erl_agents.distributed import World
from erl_agents.trainer import Trainer, _micro_batch_loss, assign_advantages, minibatch_plan, policy_update
from text_bandit import TextBanditEnv

TIME_KEYS = ("time/", "lr")


def _bandit_policy(seed=0):
    env = TextBanditEnv(turns=2, contextual=True)
    corpus = [env.instructions] + env.valid_actions * 10 + [
        f"Turn {t} of 2. The prize is behind door {d}. Which door?" for t in range(1, 3) for d in "ABCD"] * 3
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=320)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=seed), tokenizer)


def _batch(policy, seed=0):
    torch.manual_seed(seed)
    envs = [TextBanditEnv(turns=2, contextual=True) for _ in range(8)]
    tasks = [i // 4 for i in range(8)]
    table = ConstraintTable()
    episodes = run_episodes(policy, envs, [(t, None) for t in tasks], tasks, SamplingParams(1.0, 1.0, 0, 5),
                            constrained=False, table=table)
    trajectories = [t for e in episodes for t in e.trajectories]
    for i, t in enumerate(trajectories):
        t.reward = float(i % 3)  # varied rewards, so every group has non-zero advantages
    return trajectories, table


def _config(**overrides):
    base = dict(algo="rlvr", temperature=1.0, kl_coef=0.0, lr=1e-2, max_grad_norm=1e9, output="unused")
    base.update(overrides)
    return build_config(flags=base)


def _grads(policy, trajectories, table, config):
    policy.model.zero_grad()
    optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.0)  # lr 0: we only inspect the gradients
    policy_update(policy.model, optimizer, None, trajectories, table, config, policy.tokenizer.pad_token_id)
    return [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batch_split_does_not_change_the_gradient(agg):
    policy = _bandit_policy()
    trajectories, table = _batch(policy)
    assign_advantages(trajectories, _config())
    whole = _grads(policy, trajectories, table, _config(micro_batch_size=64, loss_agg=agg))
    split = _grads(policy, trajectories, table, _config(micro_batch_size=1, loss_agg=agg))
    assert len(whole) == len(split) > 0
    for a, b in zip(whole, split):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_env_tokens_never_receive_gradient():
    policy = _bandit_policy()
    trajectories, table = _batch(policy)
    config = _config(kl_coef=0.0)
    assign_advantages(trajectories, config)
    t = trajectories[0]
    base, _ = _micro_batch_loss(policy.model, None, [t], table, config, policy.tokenizer.pad_token_id, 10.0, 1.0, None)
    # A trailing env turn changes nothing: env tokens are never prediction targets.
    t.append(policy.chat.user_turn("Turn 3 of 2. Anything at all."), model=False)
    longer, _ = _micro_batch_loss(policy.model, None, [t], table, config, policy.tokenizer.pad_token_id, 10.0, 1.0, None)
    assert longer.item() == pytest.approx(base.item(), abs=1e-6)
    # With every token marked as env, there is no loss and no gradient at all.
    t.mask = [0] * len(t.mask)
    t.advantage = 1.0
    policy.model.zero_grad()
    loss, _ = _micro_batch_loss(policy.model, None, [t], table, config, policy.tokenizer.pad_token_id, 1.0, 1.0, None)
    loss.backward()
    assert loss.item() == 0.0
    assert all(p.grad is None or not p.grad.any() for p in policy.model.parameters())


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
    """A short, step-based version of benchmarks/bench_learning.py: 80 cpu-tiny steps (~3 quiet CPU minutes) must
    lift held-out first-attempt success well clear of a random policy (31-38% on sizes 2-4)."""
    config = build_config({"preset": "cpu-tiny"}, flags=dict(
        env="ERL-FrozenLake-v0", algo=algo, output=str(tmp_path / algo), steps=80, time_limit_min=0.0,
        eval_every=20, eval_tasks=100, eval_samples=2, progress=False, checkpoint_every=0, save_final_model=False))
    metrics = Trainer(config).train()
    evals = [m["eval/success"] for m in metrics if "eval/success" in m]
    assert len(evals) == 5
    assert max(evals[1:]) >= max(0.5, evals[0] + 0.1), evals


def _rows(roles_and_tasks, length=6, vocab=40, seed=0):
    """Scripted trajectories of ``length`` tokens, the last two the model's: the update's cost, not the rollout's."""
    from erl_agents.rollout import Trajectory

    g = torch.Generator().manual_seed(seed)
    rows = []
    for k, (role, task) in enumerate(roles_and_tasks):
        tokens = torch.randint(3, vocab, (length,), generator=g).tolist()
        rows.append(Trajectory(role=role, task=task, episode=k, tokens=tokens, mask=[0] * (length - 2) + [1, 1],
                               logprobs=[0.0] * (length - 2) + [-1.0, -1.0], constraints=[-1] * length,
                               prompt_len=length - 2, system_prompt="", first_observation="",
                               reward=float(k % 2)))
    return rows


def test_paper_schedule_rlvr_one_step_erl_several_at_paper_batch_shapes():
    corpus = ["a b c d e f g h"] * 4
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=300)
    policy = Policy(build_tiny_model(tokenizer, 16, 1, 2, 32, seed=0), tokenizer)
    flags = dict(model="tiny", device="cpu", dtype="float32", output="unused", micro_batch_size=1024,
                 gradient_checkpointing=False, kl_coef=0.0)
    steps = {}
    for algo in ("rlvr", "erl"):
        config = build_config({"preset": "paper-qwen3-4b"}, flags=dict(flags, algo=algo))
        assert (config.ppo_mini_batch_size, config.tasks_per_step, config.clip_ratio_c) == (64, 64, 3.0)
        if algo == "rlvr":  # 64 tasks x 10 first attempts
            layout = [("attempt1", task) for task in range(64) for _ in range(10)]
        else:  # 64 tasks x 4 first attempts; 100 of them failed: + a reflection, a retry and a distilled copy each
            layout = [("attempt1", task) for task in range(64) for _ in range(4)]
            layout += [(role, k % 64) for k in range(100) for role in ("reflection", "attempt2")]
            layout += [("distilled", k % 64) for k in range(100)]
        rows = _rows(layout)
        assign_advantages(rows, config)
        plan = minibatch_plan(rows, config, World())
        # verl's split: consecutive blocks of 64 tasks x n rows, in rollout order, no shuffle.
        block = 64 * config.group_size
        assert [len(p) for p in plan] == [min(block, len(rows) - i) for i in range(0, len(rows), block)]
        assert [t for p in plan for t in p] == rows
        optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-6)
        stats = policy_update(policy.model, optimizer, None, rows, ConstraintTable(), config,
                              tokenizer.pad_token_id)
        steps[algo] = stats["optimizer_steps"]
    assert steps == {"rlvr": 1, "erl": 3}  # 640 rows = 1 x 640; 556 rows = 256 + 256 + 44


def test_mini_batch_schedule_and_minibatches_cannot_both_be_set():
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        _config(ppo_mini_batch_size=8, minibatches=2)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        _config(clip_ratio_c=1.0)


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
    from erl_agents.trainer import eval_overlap_problem, make_env

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


def test_reflection_prompt_rate_is_merged_over_ranks_by_reflection_count():
    from erl_agents.trainer import merge_rollout_rows

    rows = [{"reflection/count": 1, "reflection/prompt_rate": 1.0}, {"reflection/count": 3, "reflection/prompt_rate": 0.0}]
    assert merge_rollout_rows(rows) == {"reflection/count": 4, "reflection/prompt_rate": 0.25}
