"""The trainer's weights as a generation engine takes them: full tensors under Hugging Face names, one at a time.

Whatever wraps the policy during training (DDP, the update's ``TokenScorer``, LoRA adapters, FSDP shards), an engine
serving it needs the plain model's weights: LoRA adapters merged into their base weights (W + scale * B A, computed
beside the training weights, which stay untouched), FSDP shards gathered one parameter at a time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator

import torch

__all__ = ["unwrap", "engine_weights", "architecture_of", "write_weights", "WEIGHTS_FILE"]

WEIGHTS_FILE = "model.safetensors"


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The policy inside DDP (``.module``) and the update's ``TokenScorer`` (``.model``)."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif type(model).__name__ == "TokenScorer":
            model = model.model
        else:
            return model


def _is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def engine_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for every parameter of the plain model ``model`` trains (names as its
    ``save_pretrained`` writes them), LoRA adapters merged in, FSDP shards gathered."""
    model = unwrap(model)
    if hasattr(model, "get_base_model"):
        yield from _merged_lora_weights(model)
        return
    if _is_sharded(model):
        from erl_agents.sharding import gathered_weights

        yield from gathered_weights(model)
        return
    for name, parameter in model.named_parameters():
        yield name, parameter.detach()


def _merged_lora_weights(peft_model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    base = peft_model.get_base_model()
    lora_layers = {name: module for name, module in base.named_modules()
                   if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")}
    inside = tuple(f"{name}." for name in lora_layers)
    with torch.no_grad():
        for name, parameter in base.named_parameters():
            if name.startswith(inside):
                continue
            yield name, parameter.detach()
        for name, layer in lora_layers.items():
            weight = layer.base_layer.weight.detach()
            delta = sum(layer.get_delta_weight(adapter) for adapter in layer.active_adapters
                        if adapter in getattr(layer, "lora_A", {}))
            yield f"{name}.weight", (weight.float() + delta.float()).to(weight.dtype) if torch.is_tensor(delta) \
                else weight
            if getattr(layer.base_layer, "bias", None) is not None:
                yield f"{name}.bias", layer.base_layer.bias.detach()


def architecture_of(model: torch.nn.Module) -> str:
    """The class name a Hugging Face config lists under ``architectures`` (what serving engines dispatch on)."""
    model = unwrap(model)
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    return type(model).__name__


def write_weights(folder: str | os.PathLike, weights: Iterable[tuple[str, torch.Tensor]], config,
                  dtype: torch.dtype, architecture: str = "") -> Path:
    """Write ``weights`` in ``dtype`` as ``folder/model.safetensors`` (through a temporary file, so a reader never
    sees half a file) with the model's ``config.json`` (naming ``architecture`` when the config names none, as a
    model built in code); a tied output head is left out, as ``save_pretrained`` leaves it."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    tensors = {name: tensor.detach().to("cpu", dtype).contiguous().clone() for name, tensor in weights
               if not (tied and name == "lm_head.weight")}
    if not tensors:
        raise ValueError("no weights to write for the engine")
    temporary = folder / f".{WEIGHTS_FILE}.partial"
    save_file(tensors, str(temporary), metadata={"format": "pt"})
    os.replace(temporary, folder / WEIGHTS_FILE)
    settings = config.to_dict()
    settings["torch_dtype"] = settings["dtype"] = str(dtype).removeprefix("torch.")
    settings.pop("quantization_config", None)  # a GGUF-loaded model's weights are written dequantised
    if not settings.get("architectures") and architecture:
        settings["architectures"] = [architecture]
    (folder / "config.json").write_text(json.dumps(settings, indent=1, default=str))
    return folder
