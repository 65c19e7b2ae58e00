"""Reflection warm-up (erl_agents/warmup.py): teacher rulebooks as supervised reflection rows, episodes that end at
the reflection, and the trainer's warm-up steps before ERL."""

import json

import gymnasium as gym
import numpy as np
import pytest

from erl_agents.config import build_config
from erl_agents.envs import make_env, tiny_corpus
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
from erl_agents.trainer import Trainer
from erl_agents.warmup import EndAfterReflection, TeacherCapture, teacher_nll, teacher_reflector, teacher_rows
from erl_envs.reflection import ReflectionWrapper
from erl_envs.reflection.reflectors import RuleReflector
from erl_envs.reflection.wrapper import extract_prompt

ENV_KWARGS = {"size": [2, 3], "prompts": "small"}
FAILING = ["```Up```", "```Left```"] * 4  # on the map below: bumps into the edge until the steps run out
MAP = {"map": ["FFG", "FHF", "SFF"]}


@pytest.fixture(scope="module")
def policy():
    env = make_env("ERL-FrozenLake-v0", ENV_KWARGS)
    tokenizer = build_tiny_tokenizer(tiny_corpus(env, episodes=30, seed=0), vocab_size=500)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0).eval(), tokenizer)


def _captured(teacher=None):
    capture = TeacherCapture(teacher or RuleReflector(detail="brief"))
    env = EndAfterReflection(ReflectionWrapper(make_env("ERL-FrozenLake-v0", ENV_KWARGS), reflector=capture), capture)
    env.reset(seed=0, options=MAP)
    for reply in FAILING:
        obs, reward, terminated, truncated, info = env.step(reply)
        if terminated or truncated:
            return env, capture, info
    raise AssertionError("the scripted attempt did not end")


def test_the_episode_ends_once_the_teacher_has_reflected():
    env, capture, info = _captured()
    request, text = capture.last
    assert "Your moves:" in request.text and extract_prompt(text)[0] is not None
    assert info["phase"] == "attempt2" and not info["new_conversation"]  # no retry is played
    env.reset(seed=1, options=MAP)
    assert capture.last is None  # cleared for the next episode


def test_teacher_rows_train_the_rulebook_after_the_prefilled_tag(policy):
    _, capture, _ = _captured()
    request, text = capture.last
    content, _ = extract_prompt(text)
    chat, tokenizer = policy.chat, policy.tokenizer
    (row,) = teacher_rows(policy, [capture, TeacherCapture(lambda r: "")], "<prompt>\n", "</prompt>")
    context = chat.open(request.system_prompt, request.text) + tokenizer("<prompt>\n", add_special_tokens=False)[
        "input_ids"]
    assert row.role == "reflection" and row.advantage == 1.0
    assert row.tokens[:row.prompt_len] == context and row.mask[:row.prompt_len] == [0] * len(context)
    trained = [t for t, m in zip(row.tokens, row.mask) if m]
    assert len(trained) == len(row.tokens) - len(context)
    assert tokenizer.decode(trained) == content + "\n</prompt>"  # the rollout stops there: no end-of-turn token
    # Without a prefill the whole block and the end of the turn are the model's to write.
    (plain,) = teacher_rows(policy, [capture])
    trained = [t for t, m in zip(plain.tokens, plain.mask) if m]
    assert trained[-1] == chat.end_of_turn_id
    assert tokenizer.decode(trained[:-1]) == f"<prompt>\n{content}\n</prompt>"
    # A row that does not fit the context is left out, as is a rulebook without a block.
    assert teacher_rows(policy, [capture], max_seq_len=len(context)) == []
    assert teacher_rows(policy, [TeacherCapture(lambda r: "no block here")]) == []


def test_warm_up_episodes_play_first_attempts_only(policy):
    captures = [TeacherCapture(teacher_reflector("brief")) for _ in range(6)]
    envs = [EndAfterReflection(ReflectionWrapper(make_env("ERL-FrozenLake-v0", ENV_KWARGS), reflector=c), c)
            for c in captures]
    episodes = run_episodes(policy, envs, [(i, None) for i in range(6)], list(range(6)),
                            SamplingParams(1.0, 1.0, 0, 4), constrained=True, table=ConstraintTable())
    assert all([t.role for t in e.trajectories] == ["attempt1"] for e in episodes)
    failed = [c for c, e in zip(captures, episodes) if not e.success]
    assert failed and all(c.last is not None for c in failed)
    assert all(c.last is None for c, e in zip(captures, episodes) if e.success)
    rows = teacher_rows(policy, captures, "<prompt>\n", "</prompt>")
    assert len(rows) == len(failed) and teacher_nll(policy, rows) > 0


def test_unknown_teacher_is_refused():
    with pytest.raises(ValueError, match="unknown teacher"):
        teacher_reflector("oracle")
    with pytest.raises(TypeError, match="callable"):
        TeacherCapture("brief")


def _warmup_config(tmp_path, name, **overrides):
    flags = dict(preset="cpu-tiny", env="ERL-FrozenLake-v0", env_kwargs=ENV_KWARGS, algo="erl", reflector="policy",
                 reflect_prefill=True, reflection_warmup=4, steps=1, tasks_per_step=4, eval_every=0,
                 reflect_max_new_tokens=24, output=str(tmp_path / name), progress=False, save_final_model=False,
                 time_limit_min=0.0, tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_intermediate=64,
                 tiny_vocab=600, tiny_grid_tokens="cell", checkpoint_every=0, ppo_epochs=1, minibatches=1, lr=1e-2,
                 warmup_steps=0, lr_schedule="constant")
    flags.update(overrides)
    return build_config(flags=flags)


def test_the_trainer_warms_the_reflection_role_up_before_erl_and_a_resume_does_not_repeat_it(tmp_path):
    teacher = lambda request: "<prompt>\nA is you and B is the goal.\n</prompt>"  # noqa: E731
    metrics = Trainer(_warmup_config(tmp_path, "w"), warmup_teacher=teacher).train()
    warmup = [m for m in metrics if "warmup_step" in m]
    assert [m["warmup_step"] for m in warmup] == [1, 2, 3, 4] and all(m["step"] == 0 for m in warmup)
    assert all(m["warmup/rows"] > 0 and m["warmup/trained_tokens"] > 0 for m in warmup)
    # The reflection role learns the teacher's text: its negative log-likelihood falls step after step (one
    # optimizer step per warm-up step here, so each is the plain likelihood gradient).
    nll = [m["warmup/nll_before"] for m in warmup]
    assert nll[-1] < 0.85 * nll[0] and nll == sorted(nll, reverse=True)
    # FrozenLake declares its moves: a random player fails the first attempts, and no policy token is sampled.
    assert all(m["warmup/random_player"] == 1.0 and m["tokens/generated"] == 0 for m in warmup)
    first = next(m for m in metrics if m.get("step") == 1)
    assert first["tokens/sampled_total"] == first["tokens/generated"]
    # Resumed after the warm-up, a run goes on with ERL steps, without warming up again.
    resumed = Trainer(_warmup_config(tmp_path, "w", steps=2, resume=True), warmup_teacher=teacher).train()
    assert [m.get("warmup_step") for m in resumed].count(None) == 2 and len(resumed) == 6
    lines = [json.loads(line) for line in (tmp_path / "w" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 0, 0, 0, 1, 2]


def test_without_declared_actions_the_policy_plays_the_warm_up_and_its_tokens_count_in_the_budget(tmp_path):
    config = _warmup_config(tmp_path, "policy_play", reflection_warmup=2, constrained_actions=False)
    trainer = Trainer(config, warmup_teacher=lambda request: "<prompt>\nGo to B.\n</prompt>")
    for env in trainer.envs:
        env.unwrapped.valid_actions = None  # an env that does not say which replies are moves (like HotpotQA)
    metrics = trainer.train()
    warmup = [m for m in metrics if "warmup_step" in m]
    assert all(m["warmup/random_player"] == 0.0 and m["tokens/generated"] > 0 for m in warmup)
    first = next(m for m in metrics if m.get("step") == 1)
    assert first["tokens/sampled_total"] == first["tokens/generated"] + sum(m["tokens/generated"] for m in warmup)


def test_a_random_player_ends_every_episode_and_reports_its_successes():
    from erl_agents.warmup import play_randomly

    envs = [gym.make("ERL-FrozenLake-v0", size=2) for _ in range(40)]
    solved = play_randomly(envs, [(i, None) for i in range(40)], np.random.default_rng(0))
    assert len(solved) == 40 and 0 < sum(solved) < 40
    assert all(env.unwrapped._done for env in envs)


def test_a_warm_up_learning_rate_applies_to_the_warm_up_only(tmp_path):
    teacher = lambda request: "<prompt>\nA is you and B is the goal.\n</prompt>"  # noqa: E731
    slow = Trainer(_warmup_config(tmp_path, "slow", lr=1e-3, reflection_warmup=3), warmup_teacher=teacher)
    slow_nll = [m["warmup/nll_before"] for m in slow.train() if "warmup_step" in m]
    fast = Trainer(_warmup_config(tmp_path, "fast", lr=1e-3, warmup_lr=1e-2, reflection_warmup=3),
                   warmup_teacher=teacher)
    metrics = fast.train()
    fast_nll = [m["warmup/nll_before"] for m in metrics if "warmup_step" in m]
    assert fast_nll[0] == pytest.approx(slow_nll[0]) and fast_nll[-1] < slow_nll[-1] - 0.3
    # ERL's own steps run at the run's rate.
    assert all(group["lr"] == 1e-3 for group in fast.optimizer.param_groups)
    assert next(m for m in metrics if m.get("step") == 1)["lr"] == 1e-3


def test_warm_up_is_off_by_default_and_only_for_erl(tmp_path):
    metrics = Trainer(_warmup_config(tmp_path, "rlvr", algo="rlvr", n_rlvr=2)).train()
    assert not any("warmup_step" in m for m in metrics)
    metrics = Trainer(_warmup_config(tmp_path, "off", reflection_warmup=0)).train()
    assert not any("warmup_step" in m for m in metrics)
    with pytest.raises(ValueError, match="warmup_reflector"):
        _warmup_config(tmp_path, "bad", warmup_reflector="oracle")
