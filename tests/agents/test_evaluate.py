"""Held-out evaluation (erl_agents/evaluate.py): the paper's FrozenLake test maps of the trained distribution,
replayed exactly even when training draws exclude them; HotpotQA under eval_set "paper" is the reference's
evaluation, all 1,024 questions of its list once each and in order, played by index on a held-out env that is checked
to hold exactly those questions; the progress bar (counts and an ETA) changes no result."""

import gymnasium as gym
import pandas as pd
import pytest
import torch

import erl_envs  # noqa: F401  (registers the envs)
from erl_agents.config import build_config
from erl_agents.envs import make_env
from erl_agents.evaluate import (EVAL_SEED_BASE, HOTPOTQA_PAPER_FILE, eval_tasks, evaluate, paper_questions,
                                 paper_questions_problem)
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import SamplingParams
from erl_envs.grid.frozen_lake import shortest_path_length
from erl_envs.paper_tasks import frozenlake_test_rows
from text_bandit import TextBanditEnv


def _env(questions, answers):
    data = [{"id": f"q{i}", "question": q, "answer": a, "context": [[f"Page {i}", [f"About {a}."]]]}
            for i, (q, a) in enumerate(zip(questions, answers))]
    return gym.make("ERL-HotpotQA-v0", data=data, protocol="paper")


def test_hotpotqa_paper_eval_is_every_question_once_in_order(paper_tasks, monkeypatch):
    monkeypatch.setenv("ERL_PAPER_TASKS", str(paper_tasks))
    tasks = eval_tasks("ERL-HotpotQA-v0", {}, "paper", 1024)
    assert [options["index"] for _, options in tasks] == list(range(1024))
    assert len({seed for seed, _ in tasks}) == 1024 and min(seed for seed, _ in tasks) >= EVAL_SEED_BASE
    assert len(eval_tasks("ERL-HotpotQA-v0", {}, "paper", 100)) == 100  # eval_tasks still caps it, as for the grids
    assert all(options is None for _, options in eval_tasks("ERL-HotpotQA-v0", {}, "auto", 5))  # "auto": seeded
    monkeypatch.setenv("ERL_PAPER_TASKS", str(paper_tasks / "missing"))
    monkeypatch.setenv("ERL_SHARED", str(paper_tasks / "missing"))
    monkeypatch.setattr("erl_agents.evaluate.paper_tasks_folder", lambda: None)
    with pytest.raises(ValueError, match=HOTPOTQA_PAPER_FILE):
        eval_tasks("ERL-HotpotQA-v0", {}, "paper", 1024)


def test_the_held_out_env_must_hold_the_papers_questions_in_order(paper_tasks):
    frame = pd.read_parquet(paper_tasks / HOTPOTQA_PAPER_FILE)
    questions = paper_questions(paper_tasks)
    assert len(questions) == 1024 and questions == list(frame["question"])
    answers = list(frame["ground_truth"])
    env = _env(questions[:60], answers)  # the first 60 stand for all 1,024: the check is the same
    assert paper_questions_problem(env, questions[:60]) is None
    # Index i plays question i: the order is what makes "once each, in order" hold.
    env.reset(seed=1, options={"index": 7})
    assert env.unwrapped._question.question == questions[7]
    swapped = questions[:3] + [questions[4], questions[3]] + questions[5:40]
    assert "question 3" in paper_questions_problem(_env(swapped, answers), questions[:40])
    assert "has 10" in paper_questions_problem(_env(questions[:10], answers), questions[:40])


def test_the_trainer_refuses_a_paper_evaluation_on_other_questions(paper_tasks, monkeypatch, tmp_path):
    from erl_agents.config import build_config
    from erl_agents.trainer import Trainer

    monkeypatch.setenv("ERL_PAPER_TASKS", str(paper_tasks))
    flags = dict(env="ERL-HotpotQA-v0", env_kwargs={"data": "synthetic", "num_questions": 20},
                 eval_env_kwargs={"seed": 1}, eval_set="paper", eval_tasks=1024, model="tiny", steps=1,
                 tasks_per_step=1, output=str(tmp_path / "run"), progress=False)
    with pytest.raises(ValueError, match="eval_set 'paper' plays the paper's 1024 HotpotQA questions"):
        Trainer(build_config(flags=flags))


def _policy() -> Policy:
    env = TextBanditEnv(turns=1, contextual=True)
    corpus = [env.instructions] + env.valid_actions * 10
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=300)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), tokenizer)


def test_progress_bar_counts_episodes_and_changes_nothing(capsys):
    policy = _policy()
    envs = [TextBanditEnv(turns=1, contextual=True) for _ in range(2)]
    tasks = [(i, None) for i in range(3)]
    sampling = SamplingParams(1.0, 1.0, 0, 4)
    results = []
    for progress in (False, True):
        torch.manual_seed(0)
        results.append(evaluate(policy, envs, tasks, samples=2, sampling=sampling, progress=progress))
    assert results[0] == results[1] and results[0]["episodes"] == 6.0
    err = capsys.readouterr().err
    assert "held-out eval" in err and "6/6" in err and "episode" in err  # tqdm: counts and rate/ETA



def test_cpu_smol_evaluates_on_the_exact_paper_maps_that_its_training_never_draws():
    config = build_config(flags={"preset": "cpu-smol"})
    tasks = eval_tasks(config.env, config.env_kwargs, config.eval_set, config.eval_tasks)
    maps = {(row["seed"], row["size"]): row["map"] for row in frozenlake_test_rows()}
    assert len(tasks) == 37 and all(options["size"] <= 4 for _, options in tasks)
    held_out = make_env(config.env, {**config.env_kwargs, **config.eval_env_kwargs})
    training = make_env(config.env, config.env_kwargs)
    for seed, options in tasks:
        held_out.reset(seed=seed, options=options)
        training.reset(seed=seed, options=options)
        assert held_out.unwrapped.map_rows == maps[(seed, options["size"])]
        assert training.unwrapped.map_rows != maps[(seed, options["size"])]


def test_a_min_path_run_is_evaluated_on_the_test_maps_whose_goal_is_that_far():
    near_and_far = eval_tasks("ERL-FrozenLake-v0", {"size": [5, 6]}, "auto", 100)
    far = eval_tasks("ERL-FrozenLake-v0", {"size": [5, 6], "min_path": 4}, "auto", 100)
    assert len(near_and_far) == 25 and len(far) == 12
    env = gym.make("ERL-FrozenLake-v0")
    for seed, options in near_and_far:
        env.reset(seed=seed, options=options)
        assert ((seed, options) in far) == (shortest_path_length(env.unwrapped.map_rows) >= 4)
