"""From episodes to training rows: GRPO groups per (task, role), zero-variance groups, consolidation copies, and the
two ways to build a step's rows (the paper's text, the reference code's batch).

The same rules on the trainer's whole path, for a scripted step: tests/agents/test_trainer_rows.py."""

import pytest
import torch

from erl_agents.batch import (assign_advantages, consolidation_copies, distillation_prompt, reflection_repeats,
                              training_rows, zero_variance_groups)
from erl_agents.config import TrainConfig
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import ROLES, Episode, Trajectory
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

    second.constraints = [-1] * len(opening2) + [3, 4, 5] + [-1] * len(chat.user_turn("next")) + [6, 7]
    (copy,) = consolidation_copies(policy, [episode, failed], "imitation")
    assert copy.role == "distilled" and copy.reward == 1.0 and copy.system_prompt == "initial prompt"
    assert copy.tokens == opening1 + body and copy.mask == [0] * len(opening1) + body_mask
    # The opening is the env's text: no sampling log-prob (0.0) and no constraint set (-1), as in every trajectory.
    assert copy.logprobs == [0.0] * len(opening1) + second.logprobs[len(opening2):]
    assert copy.constraints == [-1] * len(opening1) + second.constraints[len(opening2):]
    assert copy.prompt_len == len(opening1) and copy.success and not copy.overflowed

    (student,) = consolidation_copies(policy, [episode, failed], "reverse_kl")
    assert student.tokens == first.tokens and student.teacher_tokens == opening2 + body
    assert student.teacher_offset == len(opening2) - len(opening1)
    with pytest.raises(ValueError, match="unknown consolidation mode"):
        consolidation_copies(policy, [episode], "sft")


def test_reverse_kl_copies_are_the_first_attempt_not_the_retry(policy):
    """reverse_kl trains the student on its *own* first attempt (scored under both contexts), imitation on the
    retry: with two different replies, each mode must pick its own (a surviving mutant used the retry for both)."""
    chat = policy.chat
    opening1, opening2 = chat.open("initial prompt", "obs"), chat.open("reflected prompt", "obs")
    first_body, second_body = [40, 41, chat.end_of_turn_id], [50, 51, 52, chat.end_of_turn_id]
    first = _trajectory("attempt1", opening1 + first_body, [0] * len(opening1) + [1] * 3, len(opening1),
                        "initial prompt", 0.0)
    second = _trajectory("attempt2", opening2 + second_body, [0] * len(opening2) + [1] * 4, len(opening2),
                         "reflected prompt", 1.0)
    episode = Episode(task=0, index=0, trajectories=[first, second], initial_system_prompt="initial prompt")
    (student,) = consolidation_copies(policy, [episode], "reverse_kl")
    assert student.tokens == opening1 + first_body and student.teacher_tokens == opening2 + first_body
    (copy,) = consolidation_copies(policy, [episode], "imitation")
    assert copy.tokens == opening1 + second_body

def test_consolidation_copies_cut_at_max_seq_len_keep_the_teacher_aligned_and_the_retrys_flags(policy):
    chat = policy.chat
    opening1, opening2 = chat.open("initial prompt", "obs"), chat.open("a much longer reflected rulebook prompt", "obs")
    body = [40, 41, 42, 43, 44, 45, chat.end_of_turn_id]
    first = _trajectory("attempt1", opening1 + body, [0] * len(opening1) + [1] * len(body), len(opening1),
                        "initial prompt", 0.0)
    second = _trajectory("attempt2", opening2 + body, [0] * len(opening2) + [1] * len(body), len(opening2),
                         "a much longer reflected rulebook prompt", 0.5)
    second.overflowed = True
    episode = Episode(task=0, index=0, trajectories=[first, second], initial_system_prompt="initial prompt")
    cut = len(opening1) + 3

    (copy,) = consolidation_copies(policy, [episode], "imitation", max_seq_len=cut)
    assert copy.tokens == opening1 + body[:3] and len(copy.mask) == len(copy.logprobs) == len(copy.constraints) == cut
    # The copy is the retry's: its reward, its success (a partial score is not one) and its overflow flag.
    assert (copy.reward, copy.success, copy.overflowed) == (0.5, False, True)

    (student,) = consolidation_copies(policy, [episode], "reverse_kl", max_seq_len=cut)
    assert student.tokens == opening1 + body[:3]
    # Every kept student token has its teacher token at the same place in the reflected context.
    for i in range(len(opening1), cut):
        assert student.teacher_tokens[i + student.teacher_offset] == student.tokens[i]

    # The default cut is the trainer's default max_seq_len.
    long_body = list(range(40, 50)) * 900
    second.tokens, second.mask = opening2 + long_body, [0] * len(opening2) + [1] * len(long_body)
    second.logprobs, second.constraints = [0.0] * len(second.tokens), [-1] * len(second.tokens)
    (copy,) = consolidation_copies(policy, [episode])
    assert len(copy.tokens) == TrainConfig().max_seq_len


# ------------------------------------------------------------------------------------ advantages per (task, role)
# One step's rows, by hand: two tasks, every role, partial rewards (HotpotQA-like F1 credit). Expected advantages
# are written out below from the paper's rules (PAPER.md section 2); a row-building mode other than today's
# (issue 21a's paper mode) adds its own table beside EXPECTED.

STEP = [  # (task, role, reward)
    (0, "attempt1", 1.0), (0, "attempt1", 0.0), (0, "attempt1", 0.0), (0, "attempt1", 0.5),
    (0, "reflection", 1.0), (0, "reflection", 0.0), (0, "reflection", 0.5),
    (0, "attempt2", 1.0), (0, "attempt2", 0.0), (0, "attempt2", 0.5),
    (0, "distilled", 1.0), (0, "distilled", 0.5),
    (1, "attempt1", 0.0), (1, "attempt1", 0.0),
    (1, "reflection", 0.6),
    (1, "attempt2", 0.6),
    (1, "distilled", 0.6),
]


def _by_hand(rewards, eps=1e-6):
    n = len(rewards)
    mean = sum(rewards) / n
    std = (sum((r - mean) ** 2 for r in rewards) / (n - 1)) ** 0.5
    return [(r - mean) / (std + eps) for r in rewards]


EXPECTED = {
    "grpo": {
        (0, "attempt1"): _by_hand([1.0, 0.0, 0.0, 0.5]),
        (0, "reflection"): _by_hand([1.0, 0.0, 0.5]),
        (0, "attempt2"): _by_hand([1.0, 0.0, 0.5]),
        (0, "distilled"): [1.0, 0.5],  # max(r2, 0), no baseline
        (1, "attempt1"): [0.0, 0.0],  # identical rewards: no signal
        (1, "reflection"): [0.6],  # a group of one keeps its raw reward (verl), single_member="reward"
        (1, "attempt2"): [0.6],
        (1, "distilled"): [0.6],
    },
}


def _rows(step):
    return [Trajectory(role=role, task=task, episode=k, tokens=[1, 2], mask=[0, 1], logprobs=[0.0, -1.0],
                       constraints=[-1, -1], prompt_len=1, system_prompt="", first_observation="", reward=reward)
            for k, (task, role, reward) in enumerate(step)]


def _advantages(rows):
    out = {}
    for t in rows:
        out.setdefault((t.task, t.role), []).append(t.advantage)
    return out


def test_assign_advantages_groups_per_task_and_role_and_distils_with_max_r2():
    rows = _rows(STEP)
    assign_advantages(rows, TrainConfig())
    got = _advantages(rows)
    assert got.keys() == EXPECTED["grpo"].keys()
    for key, values in EXPECTED["grpo"].items():
        assert got[key] == pytest.approx(values, abs=1e-5), key
    # The first hand-computed value, as a number: mean 0.375, unbiased std 0.4787136.
    assert got[(0, "attempt1")][0] == pytest.approx(1.3055824, abs=1e-5)


def test_assign_advantages_ranks_rewards_at_the_precision_they_were_given():
    # float32 cannot tell 1e8 from 1e8 + 1: rewards grouped in float32 would tie (advantages 0), as Python floats not.
    rows = _rows([(0, "attempt1", 1e8), (0, "attempt1", 1e8 + 1)])
    assign_advantages(rows, TrainConfig())
    assert [t.advantage for t in rows] == pytest.approx([-0.5 ** 0.5, 0.5 ** 0.5], abs=1e-5)


def test_assign_advantages_options_and_reverse_kl_copies():
    rows = _rows(STEP)
    assign_advantages(rows, TrainConfig(single_member="zero", advantage="dr_grpo"))
    got = _advantages(rows)
    assert got[(1, "reflection")] == [0.0] and got[(1, "attempt2")] == [0.0]
    assert got[(0, "attempt1")] == pytest.approx([0.625, -0.375, -0.375, 0.125])
    assert got[(0, "distilled")] == pytest.approx([1.0, 0.5]) and got[(1, "distilled")] == pytest.approx([0.6])
    # A reverse-KL copy is trained by its KL term alone: no policy-gradient advantage.
    rows = _rows([(0, "distilled", 1.0)])
    rows[0].teacher_tokens = [1, 2]
    assign_advantages(rows, TrainConfig())
    assert rows[0].advantage == 0.0


def test_consolidation_copies_only_for_retries_that_scored_and_keep_their_reward(policy):
    chat = policy.chat
    reflected = "Door B is the one."
    episodes = []
    for index, (r1, r2) in enumerate([(0.0, 0.5), (0.0, 0.0), (1.0, None), (0.0, -1.0), (0.5, 1.0)]):
        first = _trajectory("attempt1", chat.open("initial prompt", "obs") + [40, chat.end_of_turn_id],
                            [0] * len(chat.open("initial prompt", "obs")) + [1, 1],
                            len(chat.open("initial prompt", "obs")), "initial prompt", r1)
        trajectories = [first]
        if r2 is not None:
            opening = chat.open(reflected, "obs")
            trajectories.append(_trajectory("attempt2", opening + [41, chat.end_of_turn_id],
                                            [0] * len(opening) + [1, 1], len(opening), reflected, r2))
        for t in trajectories:
            t.task, t.episode = index % 2, index
        episodes.append(Episode(task=index % 2, index=index, trajectories=trajectories,
                                initial_system_prompt="initial prompt"))
    copies = consolidation_copies(policy, episodes)
    assert [(c.episode, c.task, c.reward, c.success) for c in copies] == [(0, 0, 0.5, False), (4, 0, 1.0, True)]
    for copy in copies:
        assert copy.system_prompt == "initial prompt" and copy.first_observation == "obs"
        assert copy.tokens == chat.open("initial prompt", "obs") + [41, chat.end_of_turn_id]
        assert reflected not in policy.tokenizer.decode(copy.tokens)
    assign_advantages(copies, TrainConfig())
    assert [c.advantage for c in copies] == [0.5, 1.0]


# ----------------------------------------------------------------------------------------------------------------
# Rows: the project's (rows="erl") and the reference code's batch (rows="paper")


def _config(rows, **extra):
    from erl_agents.config import TrainConfig

    return TrainConfig(algo="erl", rows=rows, **extra)


def _conversation(policy, role, task, index, system, reward, reply=(40, 41)):
    chat = policy.chat
    opening = chat.open(system, "board")
    tokens = opening + list(reply) + [chat.end_of_turn_id]
    mask = [0] * len(opening) + [1] * (len(reply) + 1)
    return Trajectory(role=role, task=task, episode=index, tokens=tokens, mask=mask,
                      logprobs=[-0.5 * m for m in mask], constraints=[-1] * len(tokens), prompt_len=len(opening),
                      system_prompt=system, first_observation="board", reward=reward, success=reward >= 1)


def _episode(policy, task, index, r1, r2=None):
    """One scripted ERL episode: attempt 1, and when it failed a reflection (reward r2) and attempt 2."""
    trajectories = [_conversation(policy, "attempt1", task, index, "initial prompt", r1)]
    if r2 is not None:
        trajectories += [_conversation(policy, "reflection", task, index, "reflect on this", r2, reply=(50,)),
                         _conversation(policy, "attempt2", task, index, "a reflected rulebook", r2)]
    return Episode(task=task, index=index, trajectories=trajectories, initial_system_prompt="initial prompt")


def _role_advantages(rows, role):
    return [round(t.advantage, 5) for t in rows if t.role == role]


def test_paper_rows_are_the_reference_batch_and_erl_rows_the_papers_text(policy):
    """One task, 4 attempts: r1 = 0, 1, 0, 0; the three retries score r2 = 1, 0, 1 (F = 3 failed first attempts,
    S = 2 successful retries). Every number below is worked out by hand from GRPO's (r - mean) / (std + 1e-6) with
    the unbiased std, a distilled copy's max(r2, 0), and the reference's rules for its batch."""
    episodes = [_episode(policy, 0, 0, 0.0, 1.0), _episode(policy, 0, 1, 1.0), _episode(policy, 0, 2, 0.0, 0.0),
                _episode(policy, 0, 3, 0.0, 1.0)]

    # Both batches hold the same conversation objects: each batch's advantages are read right after assigning them.
    erl_rows = training_rows(policy, episodes, _config("erl"))
    assign_advantages(erl_rows, _config("erl"))
    erl = {role: _role_advantages(erl_rows, role) for role in ROLES}
    assert len(erl_rows) == 4 + 2 * 3 + 2  # 256 + 2F + S at the paper's scale
    assert {t.system_prompt for t in erl_rows if t.role == "distilled"} == {"initial prompt"}

    paper_rows = training_rows(policy, episodes, _config("paper"), distill_prompt="the reference's initial prompt")
    assign_advantages(paper_rows, _config("paper"))
    paper = {role: _role_advantages(paper_rows, role) for role in ROLES}
    assert len(paper_rows) == 4 + 4 * 3  # 256 + 4F at the paper's scale
    # The reference's order within an episode: attempt 1, reflection, attempt 2, its distilled copy, the reflection
    # again (the same object).
    assert [t.role for t in paper_rows[:5]] == ["attempt1", "reflection", "attempt2", "distilled", "reflection"]
    assert paper_rows[1] is paper_rows[4] and paper_rows[5].role == "attempt1" and paper_rows[6].role == "attempt1"
    assert {t.system_prompt for t in paper_rows if t.role == "distilled"} == {"the reference's initial prompt"}

    # First attempts: rewards 0, 1, 0, 0 -> mean 1/4, std 1/2: -1/2 and 3/2, in both batches.
    assert erl["attempt1"] == paper["attempt1"] == [-0.5, 1.5, -0.5, -0.5]
    # Retries: 1, 0, 1 -> mean 2/3, std sqrt(1/3): 1/sqrt(3) and -2/sqrt(3), in both batches.
    assert erl["attempt2"] == paper["attempt2"] == [0.57735, -1.1547, 0.57735]
    # Reflections: erl as the retries; paper holds 1, 1, 0, 0, 1, 1 -> std sqrt(4/15): sqrt(5/12), -2 sqrt(5/12).
    assert erl["reflection"] == [0.57735, -1.1547, 0.57735]
    assert paper["reflection"] == [0.6455, 0.6455, -1.29099, -1.29099, 0.6455, 0.6455]
    # Distilled copies: max(r2, 0), a failed retry's copy included (advantage 0, but a row all the same).
    assert erl["distilled"] == [1.0, 1.0]
    assert paper["distilled"] == [1.0, 0.0, 1.0]
    # HotpotQA's reference workflow holds each reflection once.
    assert len(training_rows(policy, episodes, _config("paper"), repeats=1)) == 4 + 3 * 3


def test_training_rows_cut_distilled_copies_at_the_runs_max_seq_len(policy):
    """The run's ``max_seq_len`` reaches the copies in both row modes (not ``consolidation_copies``' own default)."""
    long_reply = tuple(range(40, 60))
    episodes = [_episode(policy, 0, 0, 0.0, 1.0)]
    episodes[0].trajectories[-1] = _conversation(policy, "attempt2", 0, 0, "a reflected rulebook", 1.0,
                                                 reply=long_reply)
    opening = policy.chat.open("initial prompt", "board")
    cut = len(opening) + 5
    for rows in ("erl", "paper"):
        (copy,) = [t for t in training_rows(policy, episodes, _config(rows, max_seq_len=cut)) if t.role == "distilled"]
        assert copy.tokens == opening + list(long_reply[:5]), rows
        (whole,) = [t for t in training_rows(policy, episodes, _config(rows)) if t.role == "distilled"]
        assert len(whole.tokens) == len(opening) + len(long_reply) + 1, rows


def test_duplicated_reflections_change_advantages_in_23_of_30_binary_patterns(policy):
    """Every pattern of binary retry rewards for 1 to 4 failed first attempts of a task (2 + 4 + 8 + 16 = 30): the
    reflections' advantages differ between the two batches in 23 of them. A lone failed attempt whose retry
    succeeds is the simplest: its reflection gets 1 (a group of one keeps its reward) in erl rows and 0 in paper
    rows (a group of two equal rewards); every mixed pattern changes, since the duplicated group's std differs."""
    import itertools

    changed = patterns = 0
    for failed in range(1, 5):
        for retries in itertools.product((0.0, 1.0), repeat=failed):
            episodes = [_episode(policy, 0, i, 0.0, r2) for i, r2 in enumerate(retries)]
            episodes += [_episode(policy, 0, failed + i, 1.0) for i in range(4 - failed)]
            advantages = {}
            for rows in ("erl", "paper"):
                batch = training_rows(policy, episodes, _config(rows))
                assign_advantages(batch, _config(rows))
                advantages[rows] = {e.index: round(e.trajectory("reflection").advantage, 6) for e in episodes[:failed]}
            patterns += 1
            changed += advantages["erl"] != advantages["paper"]
            if retries == (1.0,):
                assert advantages == {"erl": {0: 1.0}, "paper": {0: 0.0}}
    assert (patterns, changed) == (30, 23)


def test_the_reference_distills_sokoban_without_its_push_reminder():
    """The reference's FrozenLake and Sokoban workflows share one initial prompt, which ends with the two-line
    reminder (valid actions, the backtick format); Sokoban attempts append Sokoban's reminder with the push rule,
    and the distilled copies swap the initial prompt back in."""
    import gymnasium as gym

    import erl_envs  # noqa: F401
    from erl_envs.grid import prompts as grid_prompts
    from erl_envs.protocol import instructions_of

    sokoban = gym.make("ERL-Sokoban-v0", prompts="paper")
    lake = gym.make("ERL-FrozenLake-v0", prompts="paper")
    push_rule = "push a box only when the cell behind it"
    assert push_rule in instructions_of(sokoban)
    assert distillation_prompt(sokoban) == instructions_of(lake) == grid_prompts.instructions("paper", "FrozenLake")
    assert push_rule not in distillation_prompt(sokoban)
    assert distillation_prompt(lake) == instructions_of(lake)
    # Other prompt sets (and instructions of one's own) are distilled under the env's own initial prompt.
    lenient = gym.make("ERL-Sokoban-v0")
    assert distillation_prompt(lenient) == instructions_of(lenient)
    assert reflection_repeats(sokoban) == reflection_repeats(lake) == 2
    assert reflection_repeats(gym.make("ERL-HotpotQA-v0", data="synthetic")) == 1
