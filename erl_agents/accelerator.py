"""Device, mixed precision and memory measurement: the parts of a run that differ between a CPU and a GPU.

Mixed precision keeps what is trained in fp32 and computes in bf16 or fp16 (``Precision``): the trainable weights
and AdamW's moments stay fp32, so an update of 1e-6 of a weight is kept (in bf16, with 8 bits of mantissa, any
update below about 1/256 of the weight rounds away), while forward and backward passes run under ``torch.autocast``.
Frozen copies (the KL reference, a LoRA base) are never updated, so they may be stored in the compute dtype. The one
exception is asked for by name: ``dtype="bfloat16-lossy-storage"`` stores the trained weights and the moments in bf16.

Everything here is a no-op on CPU with the default settings (fp32, no autocast), so the CPU path never depends on
a GPU; the choices themselves are pure functions, tested on CPU.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from dataclasses import dataclass

import torch

__all__ = ["PRECISIONS", "DTYPES", "LOSSY_STORAGE", "Precision", "resolve_device", "autocast_dtype",
           "resolve_precision", "precision_conflict", "autocast", "grad_scaler", "reset_peak_memory",
           "peak_memory_gb"]

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
# The name says what it costs: weights and AdamW moments stored in bf16, where small updates round away.
LOSSY_STORAGE = "bfloat16-lossy-storage"
DTYPES = ("auto", "float32", "bfloat16", "float16", LOSSY_STORAGE)


def resolve_device(device: str, local_rank: int = 0, cuda_available: bool | None = None) -> torch.device:
    """``auto`` means cuda when present; under data parallel each rank takes the GPU of its local rank."""
    cuda_available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if device == "auto":
        device = "cuda" if cuda_available else "cpu"
    if device == "cuda" and not cuda_available:
        raise ValueError("--device cuda was asked for, but torch sees no CUDA device; use --device cpu (or auto)")
    if device == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device(device)


def autocast_dtype(precision: str, device_type: str, bf16_supported: bool | None = None) -> torch.dtype | None:
    """The autocast dtype for forward passes, or None for plain fp32.

    ``auto`` uses bf16 on GPUs that compute in it natively (Ampere and newer) and fp32 elsewhere, CPUs included:
    CPU bf16 is slow on most hosts and would make CPU runs differ from the recorded ones. ``bf16`` on a GPU without
    bf16 support is an error rather than a silent slowdown; on CPU it is honoured (useful to test the path), and so
    is ``fp16`` everywhere (it needs loss scaling, see ``Precision``).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return None
    if precision == "fp16":
        return torch.float16
    if device_type == "cuda":
        if bf16_supported is None:
            bf16_supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        if not bf16_supported:
            if precision == "bf16":
                raise ValueError("--precision bf16: this GPU has no bf16 support; use --precision fp16 or fp32")
            return None
        return torch.bfloat16
    return torch.bfloat16 if precision == "bf16" else None


@dataclass(frozen=True)
class Precision:
    """How a run stores and computes: what ``resolve_precision`` makes of ``dtype`` and ``precision``."""

    storage: torch.dtype  # trainable weights, their gradients and the optimizer's moments
    compute: torch.dtype | None  # autocast dtype of every forward and backward pass; None: no autocast
    frozen: torch.dtype  # weights that never train (the KL reference, a LoRA base): the compute dtype is enough

    @property
    def loss_scaling(self) -> bool:
        """fp16 gradients underflow without a scaled loss (``torch.amp.GradScaler``, as verl does for fp16)."""
        return self.compute is torch.float16

    @property
    def lossy(self) -> bool:
        return self.storage is not torch.float32


def precision_conflict(dtype: str, precision: str) -> str | None:
    """Why ``dtype`` and ``precision`` contradict each other, or None: ``dtype`` bfloat16 or float16 fixes the
    compute dtype, which ``precision`` may repeat (or leave at auto) but not change."""
    wanted = {"bfloat16": "bf16", "float16": "fp16"}.get(dtype)
    if wanted and precision not in ("auto", wanted):
        return f"dtype {dtype} trains in {wanted} autocast, so precision must be auto or {wanted}, not {precision}"
    if dtype == LOSSY_STORAGE and precision not in ("auto", "bf16"):
        return f"dtype {dtype} computes in bf16 weights, so precision must be auto or bf16, not {precision}"
    return None


def resolve_precision(dtype: str, precision: str, device_type: str, bf16_supported: bool | None = None) -> Precision:
    """The storage and compute dtypes of a run.

    * ``dtype`` ``bfloat16`` / ``float16``: fp32 weights and optimizer state, forward and backward under bf16 / fp16
      autocast (verl's actor: fp32 parameters, bf16 compute); fp16 adds loss scaling.
    * ``dtype`` ``auto`` / ``float32``: fp32 weights; autocast as ``precision`` says (``autocast_dtype``).
    * ``dtype`` ``bfloat16-lossy-storage``: the weights, gradients and moments themselves in bf16 (half the memory;
      updates below about 1/256 of a weight are lost, at lr 1e-6 nearly all of them).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    problem = precision_conflict(dtype, precision)
    if problem:
        raise ValueError(problem)
    if dtype == LOSSY_STORAGE:
        return Precision(storage=torch.bfloat16, compute=None, frozen=torch.bfloat16)
    if dtype in ("bfloat16", "float16"):
        precision = "bf16" if dtype == "bfloat16" else "fp16"
    compute = autocast_dtype(precision, device_type, bf16_supported)
    return Precision(storage=torch.float32, compute=compute, frozen=compute or torch.float32)


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype``, or a do-nothing context for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: Precision, device: torch.device) -> torch.amp.GradScaler | None:
    """The loss scaler of an fp16 run (growth every 400 good steps, verl's setting), else None."""
    if not precision.loss_scaling:
        return None
    return torch.amp.GradScaler(device.type, growth_interval=400)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gb(device: torch.device) -> float:
    """Peak GPU memory allocated since the last reset; on CPU, the process's peak resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20
