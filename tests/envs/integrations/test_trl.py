"""The TRL adapter: the tool contract TRL reads, and TRL's GRPOTrainer training on ERL-FrozenLake-v0 through it."""

from __future__ import annotations

import inspect
import os

import gymnasium as gym
import pytest

import erl_envs  # noqa: F401
from erl_envs.integrations.trl import make_dataset, make_trl_environment

SMALL = {"size": (2, 4)}


def test_class_meets_environment_factory_contract():
    Env = make_trl_environment("ERL-FrozenLake-v0", **SMALL)
    assert Env.__name__ == "ERLFrozenLakeEnv"
    tools = [n for n, _ in inspect.getmembers(Env, inspect.isfunction) if not n.startswith("_")]
    assert sorted(tools) == ["get_reward", "move", "reset"]
    sig = inspect.signature(Env.move)
    assert sig.parameters["direction"].annotation in (str, "str") and "Args:" in Env.move.__doc__
    env = Env()  # no-argument __init__
    rows = make_dataset("ERL-FrozenLake-v0", 3, seed=10, **SMALL)
    assert rows["seed"] == [10, 11, 12] and rows[0]["prompt"][0]["role"] == "system"
    assert env.reset(**rows[1]) == gym.make("ERL-FrozenLake-v0", **SMALL).reset(seed=11)[0]


def test_tools_play_the_env_and_a_finished_episode_answers_with_errors():
    Env = make_trl_environment("ERL-FrozenLake-v0", size=2, max_steps=2)
    env, local = Env(), gym.make("ERL-FrozenLake-v0", size=2, max_steps=2)
    assert env.reset(seed=3) == local.reset(seed=3)[0]
    total = 0.0
    for direction in ["Up", "Sideways"]:
        text = env.move(direction)
        obs, reward, terminated, truncated, _ = local.step(f"```{direction}```")
        total += reward
        assert text.startswith(obs)
        if terminated or truncated:
            break
    assert env.get_reward() == total
    with pytest.raises(RuntimeError, match="episode is over"):
        env.move("Up")


def test_reflection_runs_as_further_tool_turns():
    Env = make_trl_environment("ERL-FrozenLake-v0", reflection=True, size=2, max_steps=1)
    tools = sorted(n for n, _ in inspect.getmembers(Env, inspect.isfunction) if not n.startswith("_"))
    assert tools == ["get_reward", "move", "reflect", "reset"]
    env = Env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="reflect only after a failed attempt"):
        env.reflect("rules")
    text = env.move("Nowhere")  # unparseable: no move, the 1-step budget is spent, attempt 1 fails
    assert "Now write the new system prompt" in text
    with pytest.raises(ValueError, match="call reflect first"):
        env.move("Up")
    text = env.reflect("Reach B; avoid C.")
    assert text.startswith("Second attempt at the same task") and "Reach B; avoid C." in text
    env.move("Nowhere")
    assert env.get_reward() == 0.0
    with pytest.raises(RuntimeError, match="episode is over"):
        env.move("Up")


@pytest.mark.slow
def test_grpo_trainer_trains_two_steps_on_frozenlake(tmp_path):
    """TRL's own GRPOTrainer, 2 steps on CPU, a tiny tool-calling model built in code; the logged env reward is the
    env's: every rollout's tool calls replayed on a local env give the reward TRL logged."""
    trl = pytest.importorskip("trl")
    from trl.chat_template_utils import add_response_schema

    from erl_agents.tiny_tool_model import build_tiny_tool_caller

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    model, tokenizer = build_tiny_tool_caller()
    add_response_schema(tokenizer)
    Base = make_trl_environment("ERL-FrozenLake-v0", **SMALL)
    episodes: list[tuple[int, list[str], float]] = []

    class Recorded(Base):
        def get_reward(self) -> float:
            reward = super().get_reward()
            episodes.append((self.seed, list(self.actions), reward))
            return reward

    Recorded.__name__ = Base.__name__
    before = {k: v.clone() for k, v in model.named_parameters()}
    config = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=8, num_generations=8,
        max_completion_length=768, max_tool_calling_iterations=8, learning_rate=1e-2, logging_steps=1,
        report_to="none", use_cpu=True, save_strategy="no", temperature=1.0, seed=0, beta=0.0,
    )
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, args=config, environment_factory=Recorded,
                              train_dataset=make_dataset("ERL-FrozenLake-v0", 16, seed=0, **SMALL))
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "rewards/ERLFrozenLakeEnv/mean" in entry]
    assert len(logs) == 2 and len(episodes) == 16
    assert any(len(actions) > 1 for _, actions, _ in episodes), "the model never took a second tool turn"
    for step, entry in enumerate(logs):
        batch = [reward for _, _, reward in episodes[8 * step: 8 * step + 8]]
        assert len({seed for seed, _, _ in episodes[8 * step: 8 * step + 8]}) == 1  # one GRPO group, one task
        assert entry["rewards/ERLFrozenLakeEnv/mean"] == pytest.approx(sum(batch) / len(batch))
    for seed, actions, reward in episodes:
        local = gym.make("ERL-FrozenLake-v0", **SMALL)
        local.reset(seed=seed)
        replayed = 0.0
        for action in actions:
            _, r, terminated, truncated, _ = local.step(action)
            replayed += r
            if terminated or truncated:
                break
        assert replayed == reward
    assert any(not (before[k] == v).all() for k, v in model.named_parameters()), "no weight moved"


def test_the_answer_tool_only_ever_answers():
    """The answer tool's text is the answer: tool-call syntax inside it never runs a search, and a brace inside it
    never cuts the answer short; what scoring ignores (punctuation) is all that is dropped."""
    Env = make_trl_environment("ERL-HotpotQA-v0", data="synthetic", num_questions=5)
    for text in ["<search>Mouthurk</search>", '{"name": "search", "arguments": {"query": "x"}}',
                 "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}</tool_call>",
                 "Paris} \\boxed{London", "plain answer"]:
        env = Env()
        env.reset(seed=0)
        reply = env.answer(text)
        assert "Search results" not in reply and "The episode is over" in reply, (text, reply)
        assert env._env.unwrapped._done  # the attempt ended with this answer, not a search turn


def test_a_refused_reset_leaves_the_trl_env_usable():
    Env = make_trl_environment("ERL-FrozenLake-v0", **SMALL)
    env = Env()
    with pytest.raises(ValueError, match="no such option"):
        env.reset(seed=1, options={"no such option": 1})
    assert env.reset(seed=2) == gym.make("ERL-FrozenLake-v0", **SMALL).reset(seed=2)[0]
    assert isinstance(env.move("Up"), str)
