"""Choosing and wrapping a generation engine (erl_agents/engines/__init__.py, base.py, hf.py)."""

import importlib.util

import pytest
import torch

from erl_agents.engines import as_engine, resolve_engine
from erl_agents.engines.base import Engine, SamplingParams
from erl_agents.engines.hf import HFEngine
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import run_episodes
from text_bandit import TextBanditEnv


@pytest.fixture(scope="module")
def policy():
    env = TextBanditEnv()
    corpus = [env.instructions] + env.valid_actions * 10 + ["Turn 1 of 1. Which door?"] * 5
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=300)
    return Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), tokenizer)


def test_a_policy_is_sampled_by_the_hf_engine_and_an_engine_is_kept(policy):
    engine = as_engine(policy, kv_reuse=False)
    assert isinstance(engine, HFEngine) and engine.policy is policy and not engine.hands_back_prefixes
    assert as_engine(policy).hands_back_prefixes
    assert as_engine(engine) is engine
    with pytest.raises(TypeError, match="expected an erl_agents Engine or Policy, got str"):
        as_engine("gpt")


def test_the_rollout_gives_the_same_episodes_from_a_policy_and_from_its_hf_engine(policy):
    def play(source):
        torch.manual_seed(3)
        envs = [TextBanditEnv(turns=2) for _ in range(4)]
        episodes = run_episodes(source, envs, [(i, None) for i in range(4)], list(range(4)),
                                SamplingParams(1.0, 1.0, 0, 6), constrained=True)
        return [(t.tokens, t.logprobs, t.reward) for e in episodes for t in e.trajectories]

    assert play(policy) == play(HFEngine(policy))


def test_the_engine_choice(monkeypatch):
    assert resolve_engine("hf", "anything") == ("hf", "")
    with pytest.raises(ValueError, match="unknown engine 'trt'; choose one of auto, hf, vllm"):
        resolve_engine("trt", "tiny")
    # auto never picks vLLM for the tiny in-code model (the CPU main job stays on one engine everywhere)
    name, why = resolve_engine("auto", "tiny")
    assert name == "hf" and "tiny model" in why
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real_find_spec(n, *a))
    name, why = resolve_engine("auto", "smollm2-135m")
    assert name == "hf" and why.startswith("vLLM is not installed")
    with pytest.raises(ValueError, match=r'^--engine vllm: vLLM is not installed \(pip install -e ".\[vllm\]"'):
        resolve_engine("vllm", "smollm2-135m")


def test_an_unreadable_model_folder_is_refused_by_name(tmp_path, monkeypatch):
    from erl_agents.engines import vllm as vllm_engine

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "vllm" else real_find_spec(n, *a))
    assert "no config.json naming its architectures" in vllm_engine.vllm_problem(str(tmp_path))
    assert vllm_engine._architectures_of("smollm2-135m") == ["LlamaForCausalLM"]
    (tmp_path / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    assert vllm_engine._architectures_of(str(tmp_path)) == ["Qwen3ForCausalLM"]


def test_the_base_engine_names_what_a_new_engine_must_implement(policy):
    engine = Engine(policy)
    assert engine.tokenizer is policy.tokenizer and engine.chat is policy.chat
    for call in (lambda: engine.sample([[1]], SamplingParams()), lambda: engine.load_weights([]),
                 lambda: engine.sync(policy.model)):
        with pytest.raises(NotImplementedError):
            call()
    engine.sleep(), engine.wake(), engine.close()  # no-ops by default


def test_the_hf_engine_takes_weights_by_name(policy):
    other = build_tiny_model(policy.tokenizer, 32, 2, 2, 64, seed=1)
    clone = Policy(build_tiny_model(policy.tokenizer, 32, 2, 2, 64, seed=0), policy.tokenizer)
    engine = HFEngine(clone)
    engine.sync(other)
    for (name, mine), (_, theirs) in zip(clone.model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(mine, theirs), name
    with pytest.raises(KeyError, match="no weight named 'nope.weight'"):
        engine.load_weights([("nope.weight", torch.zeros(1))])
    engine.sync(clone.model)  # its own model: nothing to copy


class _Recording(Engine):
    """Answers every request with its first allowed token, recording each ``sample`` call."""

    def __init__(self, policy):
        super().__init__(policy)
        self.calls = []

    def sample(self, contexts, sampling, valid_actions=None, table=None, prefixes=None, stop_string=""):
        self.calls.append((len(contexts), sampling, valid_actions, stop_string))
        from erl_agents.engines.base import Reply

        return [Reply([self.chat.end_of_turn_id], [0.0], [-1], True) for _ in contexts]


def test_an_engine_that_does_not_stream_answers_in_rounds_one_call_per_kind_of_request(policy):
    """The lockstep batches the rollout always made: requests sampled alike share a call, sampled up to the shortest
    limit among them (but at least to the largest room); every queued request is answered by one collect."""
    from erl_agents.engines.base import Request

    engine = _Recording(policy)
    act, reflect = SamplingParams(0.7, 1.0, 0, 16), SamplingParams(0.5, 0.9, 0, 128)
    requests = [Request(0, [1, 2], act, ("A",), "", limit=16, room=17),
                Request(1, [1, 2], reflect, None, "</prompt>", limit=128, room=129),
                Request(2, [1, 2, 3], act, ("A",), "", limit=9, room=10),
                Request(3, [1], act, ("A",), "", limit=16, room=5)]
    for r in requests:
        engine.submit(r)
    assert engine.pending() == 4
    answered = engine.collect()
    assert engine.pending() == 0 and sorted(r.key for r, _, _ in answered) == [0, 1, 2, 3]
    assert [(n, s.max_new_tokens, actions, stop) for n, s, actions, stop in engine.calls] == [
        (3, 9, ("A",), ""), (1, 128, None, "</prompt>")]
    assert {r.key: limit for r, _, limit in answered} == {0: 9, 1: 128, 2: 9, 3: 9}


def test_a_rollout_stopped_part_way_leaves_no_request_to_the_next(policy):
    class Broken(TextBanditEnv):
        def step(self, action):
            raise RuntimeError("env failed")

    engine = _Recording(policy)
    submitted = []
    real = engine.submit
    engine.submit = lambda request: (submitted.append(request.key), real(request))
    envs = [TextBanditEnv(turns=2), Broken(turns=2)]
    with pytest.raises(RuntimeError, match="env failed"):
        run_episodes(engine, envs, [(0, None), (1, None)], [0, 1], SamplingParams(1.0, 1.0, 0, 4), constrained=True)
    assert submitted == [0, 1, 0]  # episode 0 asked for its second turn before episode 1's step failed
    assert engine.pending() == 0
