"""LoRA adapters through ``peft`` (the optional ``lora`` extra: ``pip install -e ".[lora]"`` in a checkout).

Only the adapters train. The KL anchor is the same model with its adapters switched off, so a LoRA run keeps one
copy of the base weights instead of two, and checkpoints hold the adapters and their optimizer state only.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["apply_lora", "is_lora", "reference_weights", "adapter_state_dict", "load_adapter_state_dict",
           "parse_targets"]


def _peft():
    try:
        import peft
    except ImportError:
        raise ImportError("--lora-r needs the peft package: pip install peft") from None
    return peft


def parse_targets(targets: str) -> str | list[str]:
    """``all-linear`` (every linear layer but the output head) or a comma-separated list of module names."""
    names = [name.strip() for name in targets.split(",") if name.strip()]
    if not names:
        raise ValueError("lora_targets must name at least one module (or be 'all-linear')")
    return "all-linear" if names == ["all-linear"] else names


def apply_lora(model: torch.nn.Module, r: int, alpha: float, targets: str = "all-linear",
               dropout: float = 0.0) -> torch.nn.Module:
    """Wrap ``model`` in a ``PeftModel`` with fresh LoRA adapters; the base weights are frozen in place."""
    peft = _peft()
    if r < 1:
        raise ValueError(f"LoRA rank must be at least 1, got {r}")
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=parse_targets(targets),
                             bias="none", task_type="CAUSAL_LM")
    return peft.get_peft_model(model, config)


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def reference_weights(model: torch.nn.Module):
    """Context in which ``model`` computes with its base weights only (the frozen initial policy)."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return _peft().get_peft_model_state_dict(model)


def load_adapter_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    result = _peft().set_peft_model_state_dict(model, state)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"the checkpoint's adapter does not fit this model: unexpected keys {unexpected[:5]}")
