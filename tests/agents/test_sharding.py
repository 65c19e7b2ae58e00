"""FSDP2 sharding (erl_agents/sharding.py), sharded checkpoints, and the trainer under ``--sharding fsdp``.

The multi-rank tests launch ``torchrun`` with the gloo backend on CPU (tests/distributed_worker.py), as the DDP
tests in test_distributed.py do, and compare against the same single-process updates.
"""

import json
import os
import pickle
import subprocess
import sys
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file

from erl_agents import checkpoint as ckpt
from erl_agents.batch import assign_advantages
from erl_agents.config import PRESETS, build_config
from erl_agents.distributed import World
from erl_agents.models import build_tiny_model
from erl_agents.sharding import (clip_gradients, decoder_layers, gathered_weights, is_sharded, load_sharded_state,
                                 save_sharded_state)
from erl_agents.update import policy_update
from paths import ROOT
from agents.test_distributed import _bandit_batch, _update_config, update_cases

WORKER = ROOT / "tests" / "distributed_worker.py"


def _launch(ranks: int, *args, timeout: int = 600) -> None:
    """The worker under torchrun with ``ranks`` gloo ranks (1: a plain process, a world of one)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]
                if ranks > 1 else [sys.executable])
    done = subprocess.run([*launcher, str(WORKER), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{ranks} rank(s) failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


# ----------------------------------------------------------------------------------------------------------------
# One process


def _tiny(seed=0):
    policy, _, _ = _bandit_batch(tasks=1, samples=1, seed=seed)
    return policy


def test_sharding_flags_are_validated_and_the_paper_preset_shards():
    assert build_config().sharding == "ddp" and not build_config().offload
    assert PRESETS["paper-qwen3-4b"]["sharding"] == "fsdp"
    assert build_config(flags={"sharding": "fsdp", "offload": True}).offload
    with pytest.raises(ValueError, match="sharding"):
        build_config(flags={"sharding": "zero3"})
    with pytest.raises(ValueError, match="offload only with sharding fsdp"):
        build_config(flags={"offload": True})


def test_an_unsharded_model_yields_its_state_dict_through_every_wrapper():
    from torch.nn.parallel import DistributedDataParallel

    from erl_agents.update import TokenScorer

    model = _tiny().model
    expected = model.state_dict()
    assert not is_sharded(model) and len(decoder_layers(model)) == 2
    scorer = TokenScorer(model)
    with mock.patch.object(DistributedDataParallel, "__init__", lambda self, module: torch.nn.Module.__init__(self)):
        ddp = DistributedDataParallel(scorer)
    ddp.module = scorer
    for wrapped in (model, scorer, ddp):
        got = dict(gathered_weights(wrapped))
        assert list(got) == list(expected)
        assert all(torch.equal(got[k], expected[k]) for k in expected)


def test_lora_weights_are_merged_under_their_hugging_face_names():
    pytest.importorskip("peft")
    from erl_agents.lora import apply_lora

    model = apply_lora(_tiny().model, 4, 16.0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()  # fresh adapters are zero: the merge would be invisible
    got = dict(gathered_weights(model))
    merged = model.merge_and_unload().state_dict()
    assert list(got) == list(merged)
    for name, tensor in merged.items():
        assert torch.allclose(got[name], tensor, atol=1e-6), name
    assert any(not torch.equal(got[n], _tiny().model.state_dict()[n]) for n in got if "q_proj" in n)


def test_decoder_layers_of_a_model_without_them_is_an_error():
    with pytest.raises(ValueError, match="cannot find the decoder layers of Linear"):
        decoder_layers(torch.nn.Linear(2, 2))


def test_unsharded_clipping_is_torchs():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    b.load_state_dict(a.state_dict())
    for m in (a, b):
        m(torch.ones(2, 3)).pow(2).sum().backward()
    ours = clip_gradients(a.parameters(), 0.1, World())
    theirs = torch.nn.utils.clip_grad_norm_(b.parameters(), 0.1)
    assert ours == pytest.approx(float(theirs)) and float(ours) > 0.1
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p.grad, q.grad)


def _trained_state(seed=0):
    policy, trajectories, table = _bandit_batch(tasks=2, samples=2, seed=seed)
    config = _update_config(lr=0.1)
    assign_advantages(trajectories, config)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=0.01)
    policy_update(policy.model, optimizer, None, trajectories, table, config, policy.tokenizer.pad_token_id)
    return policy.model, optimizer


def _sharded_checkpoint(tmp_path, step=3):
    model, optimizer = _trained_state()

    def write(shards):
        return {"optimizer_groups": save_sharded_state(shards, model, optimizer)}

    path = ckpt.save_sharded_checkpoint(tmp_path, step, write, {"note": "x"}, World())
    return path, model, optimizer


def test_a_sharded_checkpoint_round_trips_its_weights_and_moments(tmp_path):
    path, model, optimizer = _sharded_checkpoint(tmp_path)
    assert ckpt.latest_checkpoint(tmp_path) == path and path.name == "step_000003"
    state = ckpt.load_checkpoint(path)
    assert state["step"] == 3 and state["note"] == "x" and state["shards"] == str(path / "shards")
    fresh = build_tiny_model(_tiny().tokenizer, 32, 2, 2, 64, seed=1)  # other weights: the load must replace them
    adam = torch.optim.AdamW(fresh.parameters(), lr=0.5)
    load_sharded_state(state["shards"], fresh, adam, state["optimizer_groups"])
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    assert adam.param_groups[0]["lr"] == 0.01
    for p, q in zip(model.parameters(), fresh.parameters()):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(optimizer.state[p][key], adam.state[q][key]), key


def test_a_sharded_checkpoint_refuses_tampering(tmp_path):
    path, _, _ = _sharded_checkpoint(tmp_path)
    shard = next((path / "shards").iterdir())
    ckpt.verify_checkpoint(path)
    (path / "shards" / "extra.safetensors").write_bytes(shard.read_bytes())
    with pytest.raises(ckpt.CorruptCheckpointError, match="not listed: \\['shards/extra.safetensors'\\]"):
        ckpt.load_checkpoint(path)
    (path / "shards" / "extra.safetensors").unlink()
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ckpt.CorruptCheckpointError, match="is corrupt: its sha256"):
        ckpt.load_checkpoint(path)
    ckpt._manifest_path(path).unlink()
    with pytest.raises(ckpt.CorruptCheckpointError, match="its save did not finish"):
        ckpt.verify_checkpoint(path)


def test_sharded_and_file_checkpoints_are_pruned_together(tmp_path):
    model, optimizer = _trained_state()
    ckpt.save_checkpoint(tmp_path, 1, {"a": 1}, keep=2)
    for step in (2, 3):
        ckpt.save_sharded_checkpoint(tmp_path, step, lambda shards: {"optimizer_groups": save_sharded_state(
            shards, model, optimizer)}, {}, World(), keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_000002", "step_000003"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000002", "step_000002.json", "step_000003",
                                                          "step_000003.json"]


def test_a_sharded_checkpoint_loads_no_pickle(tmp_path):
    path, model, _ = _sharded_checkpoint(tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load reached pickle")

    with mock.patch.object(pickle, "load", refuse), mock.patch.object(pickle, "loads", refuse), \
            mock.patch.object(pickle, "Unpickler", refuse), mock.patch.object(torch, "load", refuse):
        state = ckpt.load_checkpoint(path)
        fresh = build_tiny_model(_tiny().tokenizer, 32, 2, 2, 64, seed=1)
        load_sharded_state(state["shards"], fresh, torch.optim.AdamW(fresh.parameters()), state["optimizer_groups"])
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    names = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert names == ["shards/shard-00001-model-00001-of-00001.safetensors", "state.safetensors"]


# ----------------------------------------------------------------------------------------------------------------
# Several ranks under torchrun


def _check_fsdp_updates(tmp_path, expected, ranks):
    for name, (state, stats, initial, merged) in [*expected.items(), ("offload", expected["paper_loss"])]:
        got = torch.load(tmp_path / f"fsdp_{name}.pt", weights_only=False)
        moved = max((state[k] - initial[k]).abs().max().item() for k in state)
        assert moved > 1e-3, f"{name}: the update hardly moved the weights, so the comparison would be empty"
        tied = set(state) - set(got["state"])
        assert tied <= {"lm_head.weight", "base_model.model.lm_head.weight"}, tied  # a tied weight is saved once
        for key, value in got["state"].items():
            assert torch.allclose(value, state[key], atol=1e-5, rtol=0), f"{name}: {key} differs"
        for key in ("loss", "grad_norm", "clip_frac", "kl", "entropy"):
            assert got["stats"][key] == pytest.approx(stats[key], rel=1e-4, abs=1e-6), f"{name}: {key}"
        # The engine's weight sync: Hugging Face names, full tensors, LoRA merged.
        assert list(got["weights"]) == list(merged)
        for key, value in merged.items():
            assert torch.allclose(got["weights"][key], value, atol=1e-5, rtol=0), f"{name}: synced {key}"
        # Each rank holds about 1/W of the weights and of AdamW's moments.
        assert len(got["held"]) == ranks
        for held in got["held"]:
            for part in ("params", "moments"):
                share = held[part] / held[f"whole_{part}"]
                assert abs(share - 1 / ranks) < 0.02, f"{name}: a rank holds {share:.3f} of the {part}"
    mixed = torch.load(tmp_path / "fsdp_mixed.pt", weights_only=False)
    for dtype, result in mixed.items():
        assert result["dtypes"] == ["torch.float32"], dtype  # the master shards stay fp32 under bf16/fp16 compute
        layers = [k for k in result["before"] if ".layers." in k and k.endswith("proj.weight")]
        changed = sum(int((result["after"][k] != result["before"][k]).sum()) for k in layers)
        total = sum(result["before"][k].numel() for k in layers)
        assert changed / total >= 0.9, f"{dtype}: an lr 1e-6 step moved only {changed / total:.1%} of the weights"
        # The same gradient as the fp32 update (the paper_loss case), up to the compute dtype's rounding.
        assert result["stats"]["optimizer_steps"] == 1
        assert result["stats"]["grad_norm"] == pytest.approx(expected["paper_loss"][1]["grad_norm"], rel=0.03)


def test_two_fsdp_ranks_give_the_single_process_update(tmp_path):
    """2 FSDP ranks == one process on the DDP test's cases (to 1e-5): the paper's loss with uneven micro-batches,
    LoRA with the adapters-off KL reference and clipping over the shards, verl's schedule; plus the weight sync,
    each rank's share of weights and moments, the first case with CPU offload, and fp32 master shards under bf16
    and fp16 (with the sharded loss scaler)."""
    expected = update_cases(tmp_path)
    _launch(2, "update", tmp_path, "fsdp")
    _check_fsdp_updates(tmp_path, expected, 2)


@pytest.mark.slow
def test_four_fsdp_ranks_give_the_single_process_update(tmp_path):
    expected = update_cases(tmp_path)
    _launch(4, "update", tmp_path, "fsdp")
    _check_fsdp_updates(tmp_path, expected, 4)


RESUME_SPEC = dict(env="TextBandit-v0", env_kwargs={"turns": 1}, algo="rlvr", model="tiny", steps=2,
                   tasks_per_step=4, n_rlvr=4, temperature=1.0, max_new_tokens=4, constrained_actions=True, lr=3e-3,
                   kl_coef=0.01, eval_every=0, checkpoint_every=2, tiny_hidden=32, tiny_layers=2, tiny_heads=2,
                   tiny_intermediate=64, tiny_vocab=300, progress=False, save_final_model=False, threads=1,
                   sharding="fsdp", seed=0)


@pytest.mark.slow
def test_a_two_rank_fsdp_run_resumes_alike_on_one_two_and_four_ranks(tmp_path):
    """A 2-rank FSDP run's checkpoint, resumed on 1, 2 and 4 ranks, continues to the same weights (one more update
    on the same batch, to 1e-5): weights and AdamW's moments are resharded exactly."""
    (tmp_path / "train.json").write_text(json.dumps(RESUME_SPEC))
    _launch(2, "first", tmp_path)
    for ranks in (1, 2, 4):
        _launch(ranks, "continue", tmp_path)
    results = {ranks: torch.load(tmp_path / f"continued_{ranks}.pt") for ranks in (1, 2, 4)}
    initial = load_file(str(tmp_path / "run" / "initial_model" / "model.safetensors"))
    moved = max((results[2][k] - initial[k]).abs().max().item() for k in initial)
    assert moved > 1e-3
    for ranks in (1, 4):
        for key, value in results[2].items():
            assert torch.allclose(results[ranks][key], value, atol=1e-5, rtol=0), f"{ranks} ranks: {key}"


def _erl_train(ranks, output, *flags):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), "-m",
           "erl_agents.train", "--preset", "cpu-tiny", "--steps", "2", "--seed", "0", "--threads", "1",
           "--no-progress", "--output", str(output), *flags]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.mark.slow
def test_fsdp_and_ddp_training_write_the_same_final_model(tmp_path):
    """The issue's check: erl-train --preset cpu-tiny for 2 steps on 2 ranks, sharded and not, writes final_model/
    weights that agree to 1e-4; the sharded one is a Hugging Face folder that from_pretrained loads."""
    from transformers import AutoModelForCausalLM

    _erl_train(2, tmp_path / "fsdp", "--sharding", "fsdp")
    _erl_train(2, tmp_path / "ddp", "--sharding", "ddp")
    fsdp = load_file(str(tmp_path / "fsdp" / "final_model" / "model.safetensors"))
    ddp = load_file(str(tmp_path / "ddp" / "final_model" / "model.safetensors"))
    assert set(fsdp) == set(ddp)
    assert max((fsdp[k] - ddp[k]).abs().max().item() for k in ddp) <= 1e-4
    initial = load_file(str(tmp_path / "fsdp" / "initial_model" / "model.safetensors"))
    assert max((fsdp[k] - initial[k]).abs().max().item() for k in initial) > 1e-3  # it trained
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "fsdp" / "final_model"))
    assert torch.equal(loaded.state_dict()["model.embed_tokens.weight"], fsdp["model.embed_tokens.weight"])
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "fsdp" / "checkpoints")] == ["step_000002"]
