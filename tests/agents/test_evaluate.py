"""erl_agents.evaluate: the held-out evaluation's progress bar (counts and an ETA) and that it changes no result."""

from __future__ import annotations

import torch

from erl_agents.evaluate import evaluate
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import SamplingParams
from text_bandit import TextBanditEnv


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
