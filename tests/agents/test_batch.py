"""From episodes to training rows: GRPO groups per (task, role), zero-variance groups, consolidation copies."""

import pytest
import torch

from erl_agents.batch import consolidation_copies, zero_variance_groups
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import Episode, Trajectory
from text_bandit import TextBanditEnv


@pytest.fixture(scope="module")
def policy():
    env = TextBanditEnv(turns=3, contextual=True)
    corpus = [env.instructions] + env.valid_actions * 10 + [
        f"Turn {t} of 3. The prize is behind door {d}. Which door?" for t in range(1, 4) for d in "ABCD"] * 3
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=320)
    torch.manual_seed(0)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), tokenizer)


def _trajectory(role, tokens, mask, prompt_len, system, reward, obs="obs"):
    return Trajectory(role=role, task=0, episode=0, tokens=tokens, mask=mask, logprobs=[0.1 * m for m in mask],
                      constraints=[-1] * len(tokens), prompt_len=prompt_len, system_prompt=system,
                      first_observation=obs, reward=reward, success=reward >= 1)


def _scored(task, role, reward):
    return Trajectory(role=role, task=task, episode=0, tokens=[1], mask=[0], logprobs=[0.0], constraints=[-1],
                      prompt_len=1, system_prompt="", first_observation="", reward=reward)


def test_zero_variance_groups_counts_groups_that_teach_nothing():
    trajectories = [
        _scored(0, "attempt1", 1.0), _scored(0, "attempt1", 1.0),  # all solved: zero variance
        _scored(1, "attempt1", 0.0), _scored(1, "attempt1", 1.0),  # mixed
        _scored(2, "attempt1", 0.0), _scored(2, "attempt1", 0.0), _scored(2, "attempt1", 0.0),
        _scored(2, "attempt2", 0.5),  # a group of one has no variance to speak of: not counted
        _scored(3, "distilled", 1.0), _scored(3, "distilled", 1.0),  # not a GRPO group
    ]
    assert zero_variance_groups(trajectories) == 2
    assert zero_variance_groups([]) == 0


def test_consolidation_copies_swap_the_system_prompt_tokens(policy):
    chat = policy.chat
    opening1 = chat.open("initial prompt", "obs")
    opening2 = chat.open("a much longer reflected rulebook prompt", "obs")
    body = [40, 41, chat.end_of_turn_id] + chat.user_turn("next") + [42, chat.end_of_turn_id]
    body_mask = [1, 1, 1] + [0] * len(chat.user_turn("next")) + [1, 1]
    first = _trajectory("attempt1", opening1 + body, [0] * len(opening1) + body_mask, len(opening1), "initial prompt", 0.0)
    second = _trajectory("attempt2", opening2 + body, [0] * len(opening2) + body_mask, len(opening2),
                         "a much longer reflected rulebook prompt", 1.0)
    episode = Episode(task=0, index=0, trajectories=[first, second], initial_system_prompt="initial prompt")
    failed = Episode(task=0, index=1, trajectories=[first, _trajectory("attempt2", second.tokens, second.mask,
                     second.prompt_len, second.system_prompt, 0.0)], initial_system_prompt="initial prompt")

    (copy,) = consolidation_copies(policy, [episode, failed], "imitation")
    assert copy.role == "distilled" and copy.reward == 1.0 and copy.system_prompt == "initial prompt"
    assert copy.tokens == opening1 + body and copy.mask == [0] * len(opening1) + body_mask
    assert copy.logprobs[len(opening1):] == second.logprobs[len(opening2):]

    (student,) = consolidation_copies(policy, [episode, failed], "reverse_kl")
    assert student.tokens == first.tokens and student.teacher_tokens == opening2 + body
    assert student.teacher_offset == len(opening2) - len(opening1)
    with pytest.raises(ValueError, match="unknown consolidation mode"):
        consolidation_copies(policy, [episode], "sft")
