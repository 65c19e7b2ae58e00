"""LoRA training (erl_agents.lora): only adapters train, the reference is the base, checkpoints hold adapters only."""

import json

import pytest
import torch

from erl_agents import checkpoint as ckpt
from erl_agents.config import build_config
from erl_agents.lora import parse_targets, reference_weights
from erl_agents.models import load_policy
from erl_agents.trainer import Trainer
from erl_agents.update import selected_logits
from text_bandit import TextBanditEnv  # noqa: F401  (registers TextBandit-v0)

pytest.importorskip("peft")

TIME_KEYS = ("time/", "lr")


def _config(tmp_path, name, **overrides):
    flags = dict(env="TextBandit-v0", env_kwargs={"turns": 1}, algo="rlvr", model="tiny", output=str(tmp_path / name),
                 steps=4, tasks_per_step=2, n_rlvr=4, temperature=1.0, max_new_tokens=4, constrained_actions=True,
                 lr=3e-2, kl_coef=0.05, eval_every=2, eval_tasks=3, eval_samples=2, checkpoint_every=2,
                 tiny_hidden=32, tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=300, progress=False,
                 save_final_model=True, threads=0, lora_r=4, lora_alpha=8.0)
    flags.update(overrides)
    return build_config(flags=flags)


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith(TIME_KEYS)} for r in rows]


def test_parse_targets():
    assert parse_targets("all-linear") == "all-linear"
    assert parse_targets(" q_proj, v_proj ") == ["q_proj", "v_proj"]
    with pytest.raises(ValueError, match="at least one module"):
        parse_targets(" , ")


def test_lora_trains_adapters_only_against_the_base_as_reference(tmp_path):
    trainer = Trainer(_config(tmp_path, "run"))
    model = trainer.policy.model
    assert trainer.ref_model is model  # no second copy of the weights
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    adapters_before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer.train()

    base = load_policy(str(tmp_path / "run" / "initial_model"), dtype="float32").model
    base_state = base.state_dict()
    merged_names = 0
    for name, value in model.get_base_model().state_dict().items():
        if "lora_" in name:
            continue
        # peft renames a wrapped layer's weight to ...base_layer.weight
        key = name.replace(".base_layer", "")
        assert torch.equal(value, base_state[key]), f"base weight {key} changed"
        merged_names += 1
    assert merged_names == len(base_state)
    assert any(not torch.equal(adapters_before[n], p) for n, p in model.named_parameters() if p.requires_grad)

    # The reference (adapters off) scores exactly like the untouched base model; the policy no longer does.
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    attention = torch.ones_like(ids)
    select = torch.ones((1, 5), dtype=torch.bool)
    with torch.no_grad():
        with reference_weights(model):
            ref = selected_logits(model, ids, attention, select)
        policy = selected_logits(model, ids, attention, select)
        expected = selected_logits(base, ids, attention, select)
    assert torch.allclose(ref, expected, atol=1e-6)
    assert not torch.allclose(policy, expected, atol=1e-4)

    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints"))
    assert state["model"] and all("lora_" in key for key in state["model"])
    adapter_numel = sum(v.numel() for v in state["model"].values())
    assert adapter_numel < sum(v.numel() for v in base_state.values()) / 5
    final = tmp_path / "run" / "final_model"
    assert (final / "adapter_config.json").exists() and not (final / "model.safetensors").exists()


def test_lora_resume_continues_exactly(tmp_path):
    straight = _strip(Trainer(_config(tmp_path, "a", save_final_model=False)).train())
    Trainer(_config(tmp_path, "b", steps=2, save_final_model=False)).train()
    resumed = Trainer(_config(tmp_path, "b", resume=True, save_final_model=False)).train()
    assert _strip(resumed) == straight
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 3, 4]
