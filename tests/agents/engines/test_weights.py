"""The trainer's weights as an engine takes them (erl_agents/engines/weights.py)."""

import json

import pytest
import torch
from safetensors.torch import load_file

from erl_agents.engines.weights import WEIGHTS_FILE, architecture_of, engine_weights, unwrap, write_weights
from erl_agents.models import build_tiny_model, build_tiny_tokenizer
from erl_agents.update import TokenScorer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer(["Up Down Left Right ```Up``` a b c"] * 10, vocab_size=280)


def test_a_plain_model_gives_its_parameters_under_their_own_names(tokenizer):
    model = build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0)
    weights = dict(engine_weights(model))
    assert weights.keys() == dict(model.named_parameters()).keys()
    for name, parameter in model.named_parameters():
        assert torch.equal(weights[name], parameter)
    assert unwrap(TokenScorer(model)) is model
    assert dict(engine_weights(TokenScorer(model))).keys() == weights.keys()


def test_lora_adapters_are_merged_beside_the_training_weights(tokenizer):
    from erl_agents.lora import apply_lora

    model = apply_lora(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0), r=4, alpha=8.0)
    with torch.no_grad():  # adapters that change the output (B starts at zero)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = dict(engine_weights(model))
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]), f"{name} changed"  # the training weights stay as they were
    reference = build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0)
    assert merged.keys() == dict(reference.named_parameters()).keys()
    # The merged weights compute what the adapted model computes.
    reference.load_state_dict(merged, strict=False)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.allclose(reference(ids).logits, model(input_ids=ids).logits, atol=1e-5)
    changed = [n for n in merged if "q_proj" in n and not torch.equal(merged[n], before[n.replace(
        ".weight", ".base_layer.weight").replace("model.", "base_model.model.model.", 1)])]
    assert changed, "the adapters' deltas were not merged"


def test_written_weights_are_the_engines_dtype_without_a_tied_head(tmp_path, tokenizer):
    model = build_tiny_model(tokenizer, 32, 2, 2, 64, seed=0)
    names = [n for n, _ in engine_weights(model)] + ["lm_head.weight"]
    weights = [(n, model.get_output_embeddings().weight if n == "lm_head.weight" else p)
               for n, p in zip(names, [p for _, p in engine_weights(model)] + [None])]
    write_weights(tmp_path, weights, model.config, torch.bfloat16, architecture_of(TokenScorer(model)))
    saved = load_file(str(tmp_path / WEIGHTS_FILE))
    assert "lm_head.weight" not in saved  # tied: save_pretrained leaves it out too
    assert all(t.dtype == torch.bfloat16 for t in saved.values())
    assert torch.equal(saved["model.embed_tokens.weight"], model.model.embed_tokens.weight.to(torch.bfloat16))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16" and config["architectures"] == ["LlamaForCausalLM"]
    assert not list(tmp_path.glob(".*partial"))
    with pytest.raises(ValueError, match="no weights to write"):
        write_weights(tmp_path, [], model.config, torch.float32)
