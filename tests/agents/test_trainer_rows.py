"""The rows one training step builds, on the trainer's own code path, for a scripted step whose rewards are known.

A scripted policy (tests/scripted_policy.py: real rollout, every token forced) plays a contextual text bandit whose
door right after the prize pays 0.5 (partial credit, never success). Two tasks of four episodes each:

* task 0 (prize P in A/B): first attempts P, N (the near miss), F1, F2 (the two other doors) -> r1 = 1, .5, 0, 0;
* task 1 (prize P in C/D): first attempts N, N, F1, F2 -> r1 = .5, .5, 0, 0.

After a failed first attempt the policy's reflection depends on the door it chose: after N it writes "Door P."
(the retry scores 1 and the memory stores it), after F1 "Door N." (0.5: no success, no memory), after F2 "Door F2."
(0). The retry plays the door its system prompt names. So every row's reward, group and advantage can be worked
out by hand, and the tests assert exactly those: the paper's roles (PAPER.md sections 1-2), GRPO groups per
(task, role), distilled copies with advantage max(r2, 0) under the initial prompt, the memory.

The paper row-building mode (issue 21a) gets its own expected table beside ``ERL_ROWS`` when it lands.
"""

from __future__ import annotations

import re
import statistics

import numpy as np
import pytest

import erl_agents.trainer as trainer_module
from erl_agents.config import build_config
from erl_agents.trainer import Trainer
from scripted_policy import Conversation, script
from text_bandit import DOORS, TextBanditEnv

INSTRUCTIONS = TextBanditEnv().instructions


def _seed_with_prize(doors: str) -> int:
    env = TextBanditEnv(contextual=True)
    for seed in range(100):
        env.reset(seed=seed)
        if DOORS[env.prize] in doors:
            return seed
    raise AssertionError(f"no seed below 100 puts the prize behind {doors}")


# Task 0's prize is A or B, task 1's C or D: the script tells the tasks apart by it.
SEEDS = (_seed_with_prize("AB"), _seed_with_prize("CD"))


def _doors(prize: str) -> tuple[str, str, str, str]:
    """The prize, its near miss (the next door) and the two far doors."""
    k = DOORS.index(prize)
    return tuple(DOORS[(k + i) % 4] for i in range(4))


class BanditScript:
    """The replies described in the module docstring; first attempts are planned per task, in episode order."""

    def __init__(self):
        self.first_attempts: dict[str, int] = {}

    def __call__(self, conversation: Conversation) -> str:
        prize = re.search(r"prize is behind door ([A-D])", conversation.users[0]).group(1)
        p, n, f1, f2 = _doors(prize)
        if conversation.system == INSTRUCTIONS:
            plan = (p, n, f1, f2) if prize in "AB" else (n, n, f1, f2)
            k = self.first_attempts.get(prize, 0)
            self.first_attempts[prize] = k + 1
            return f"```{plan[k % 4]}```"
        retry = re.match(r"Door ([A-D])\.", conversation.system)
        if retry:
            return f"```{retry.group(1)}```"
        chosen = re.search(r"Action:\n```([A-D])```", conversation.users[0]).group(1)
        return "<prompt>Door " + {n: p, f1: n, f2: f2}[chosen] + ".</prompt>"


# Per task and role, the rewards of its rows in episode order (the rows of the module docstring's step).
ERL_ROWS = {
    (0, "attempt1"): [1.0, 0.5, 0.0, 0.0],
    (0, "reflection"): [1.0, 0.5, 0.0],  # r2, not r1: a reflection is as good as the retry it led to
    (0, "attempt2"): [1.0, 0.5, 0.0],
    (0, "distilled"): [1.0, 0.5],  # only retries that scored r2 > 0
    (1, "attempt1"): [0.5, 0.5, 0.0, 0.0],
    (1, "reflection"): [1.0, 1.0, 0.5, 0.0],
    (1, "attempt2"): [1.0, 1.0, 0.5, 0.0],
    (1, "distilled"): [1.0, 1.0, 0.5],
}
RLVR_ROWS = {(0, "attempt1"): [1.0, 0.5, 0.0, 0.0], (1, "attempt1"): [0.5, 0.5, 0.0, 0.0]}


def _grpo_by_hand(rewards: list[float]) -> list[float]:
    """(r - mean) / (unbiased std + 1e-6), written out independently of erl_agents.grpo."""
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
    return [(r - mean) / (std + 1e-6) for r in rewards]


class _FixedSeeds:
    """The trainer's generator, except that every step's task seeds are the two tasks above."""

    def __init__(self, generator: np.random.Generator):
        self.generator = generator

    def integers(self, low, high, size):
        return np.array(SEEDS[:size])

    def __getattr__(self, name):
        return getattr(self.generator, name)


def _scripted_run(tmp_path, algo: str, steps: int = 1, **overrides):
    """Run ``steps`` trainer steps with the scripted policy; returns the trainer and each step's training rows."""
    config = build_config(flags=dict(
        env="TextBandit-v0", env_kwargs={"turns": 1, "contextual": True, "near_miss": 0.5}, algo=algo,
        reflector="policy", model="tiny", output=str(tmp_path / algo), steps=steps, tasks_per_step=2, n_erl=4,
        n_rlvr=4, max_new_tokens=8, reflect_max_new_tokens=48, constrained_actions=True, lr=1e-3, kl_coef=0.0,
        eval_every=0, checkpoint_every=0, save_final_model=False, progress=False, tiny_hidden=32, tiny_layers=1,
        tiny_heads=2, tiny_intermediate=64, tiny_vocab=300, threads=0, **overrides))
    trainer = Trainer(config)
    trainer.rng = _FixedSeeds(trainer.rng)
    script(trainer.policy, BanditScript())
    steps_rows = []
    update = trainer_module.policy_update

    def recording_update(model, optimizer, scheduler, trajectories, *args, **kwargs):
        steps_rows.append(list(trajectories))
        return update(model, optimizer, scheduler, trajectories, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer_module, "policy_update", recording_update)
        metrics = trainer.train()
    assert [row["skipped_updates"] for row in metrics] == [0] * steps
    return trainer, steps_rows


def _by_group(rows) -> dict[tuple[int, str], list]:
    groups: dict[tuple[int, str], list] = {}
    for t in sorted(rows, key=lambda t: t.episode):
        groups.setdefault((t.task, t.role), []).append(t)
    return groups


@pytest.fixture(scope="module")
def erl_run(tmp_path_factory):
    """Two ERL steps on the same two tasks (the second one reads the memory the first one wrote)."""
    return _scripted_run(tmp_path_factory.mktemp("erl"), "erl", steps=2)


def test_erl_step_rewards_groups_and_advantages_are_the_papers(erl_run):
    trainer, (rows, _) = erl_run
    groups = _by_group(rows)
    assert {key: [t.reward for t in members] for key, members in groups.items()} == ERL_ROWS
    # Which rows exist, episode by episode: a solved first attempt ends its episode (no reflection, no retry); a
    # failed one adds a reflection and a retry; only a retry that scored adds a distilled copy.
    episodes = {}
    for t in rows:
        episodes.setdefault(t.episode, []).append(t.role)
    assert episodes == {0: ["attempt1"],
                        1: ["attempt1", "reflection", "attempt2", "distilled"],
                        2: ["attempt1", "reflection", "attempt2", "distilled"],
                        3: ["attempt1", "reflection", "attempt2"],
                        4: ["attempt1", "reflection", "attempt2", "distilled"],
                        5: ["attempt1", "reflection", "attempt2", "distilled"],
                        6: ["attempt1", "reflection", "attempt2", "distilled"],
                        7: ["attempt1", "reflection", "attempt2"]}
    # GRPO per (task, role), by hand; distilled copies max(r2, 0) with no baseline.
    for (task, role), members in groups.items():
        rewards = [t.reward for t in members]
        expected = [max(r, 0.0) for r in rewards] if role == "distilled" else _grpo_by_hand(rewards)
        assert [t.advantage for t in members] == pytest.approx(expected, abs=1e-5), (task, role)
    assert groups[(0, "attempt1")][0].advantage == pytest.approx(0.625 / 0.4787136, abs=1e-5)
    assert groups[(1, "reflection")][0].advantage == pytest.approx(0.375 / 0.4787136, abs=1e-5)
    # Success is the env's verdict: a near miss scores 0.5 and is no success.
    assert [t.success for t in groups[(0, "attempt1")]] == [True, False, False, False]
    assert [t.success for t in groups[(0, "attempt2")]] == [True, False, False]


def test_erl_distilled_copy_is_the_retry_under_the_initial_prompt(erl_run):
    trainer, (rows, _) = erl_run
    chat, decode = trainer.policy.chat, trainer.policy.tokenizer.decode
    retries = {t.episode: t for t in rows if t.role == "attempt2"}
    copies = [t for t in rows if t.role == "distilled"]
    assert len(copies) == 5
    for copy in copies:
        retry = retries[copy.episode]
        assert retry.system_prompt.startswith("Door ") and copy.system_prompt == INSTRUCTIONS
        opening = chat.open(INSTRUCTIONS, retry.first_observation)
        # The initial prompt's opening, then the retry's own tokens, mask and sampling log-probs, unchanged.
        assert copy.tokens == opening + retry.tokens[retry.prompt_len:]
        assert copy.mask == [0] * len(opening) + retry.mask[retry.prompt_len:]
        assert copy.logprobs[len(opening):] == retry.logprobs[retry.prompt_len:]
        assert copy.prompt_len == len(opening) and copy.task == retry.task and copy.reward == retry.reward
        text = decode(copy.tokens, skip_special_tokens=False)
        assert "Door" not in text and "<prompt>" not in text and INSTRUCTIONS in text
    # The reflection row is the reflect-phase conversation: its request and the reflection the policy wrote.
    for t in rows:
        if t.role == "reflection":
            text = decode(t.tokens, skip_special_tokens=False)
            assert "# Your attempt" in t.first_observation and "<prompt>Door" in text


def test_erl_memory_keeps_the_last_successful_reflection_and_seeds_the_next(erl_run):
    trainer, (first, second) = erl_run
    prize_1 = _doors(re.search(r"door ([A-D])", TextBanditEnv(contextual=True).reset(seed=SEEDS[1])[0]).group(1))[0]
    # Three retries succeeded with a reflected prompt (episodes 1, 4 and 5): three updates per step, the last wins.
    # The 0.5 retry (a near miss) stores nothing: the memory needs r2 >= memory_threshold (1.0).
    assert trainer.memory.updates == 6
    assert trainer.memory.get() == f"Door {prize_1}."
    # The memory is read only as the base of the next reflection: step 1's requests start from the initial
    # instructions, step 2's from the stored prompt; first attempts never see it.
    for rows, base in ((first, INSTRUCTIONS), (second, f"Door {prize_1}.")):
        requests = [t.first_observation for t in rows if t.role == "reflection"]
        assert len(requests) == 7
        assert all(r.startswith(f"# The instructions you were given\n{base}\n") for r in requests)
        assert all(t.system_prompt == INSTRUCTIONS for t in rows if t.role == "attempt1")


def test_erl_no_memory_ablation_stores_nothing(tmp_path):
    trainer, (rows,) = _scripted_run(tmp_path, "erl", no_memory=True)
    assert trainer.memory.updates == 0 and trainer.memory.get() is None
    assert {key: [t.reward for t in members] for key, members in _by_group(rows).items()} == ERL_ROWS


def test_rlvr_step_has_first_attempts_only_grouped_per_task(tmp_path):
    trainer, (rows,) = _scripted_run(tmp_path, "rlvr")
    groups = _by_group(rows)
    assert {key: [t.reward for t in members] for key, members in groups.items()} == RLVR_ROWS
    for members in groups.values():
        assert [t.advantage for t in members] == pytest.approx(_grpo_by_hand([t.reward for t in members]), abs=1e-5)
        assert all(t.system_prompt == INSTRUCTIONS for t in members)
    assert trainer.memory is None
