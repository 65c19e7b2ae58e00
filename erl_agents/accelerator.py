"""Device, mixed precision and memory measurement: the parts of a run that differ between a CPU and a GPU.

Everything here is a no-op on CPU with the default settings (fp32, no autocast), so the CPU path never depends on
a GPU; the choices themselves are pure functions, tested on CPU.
"""

from __future__ import annotations

import contextlib
import resource
import sys

import torch

__all__ = ["PRECISIONS", "resolve_device", "autocast_dtype", "autocast", "reset_peak_memory", "peak_memory_gb"]

PRECISIONS = ("auto", "bf16", "fp32")


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
    bf16 support is an error rather than a silent slowdown; on CPU it is honoured (useful to test the path).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return None
    if device_type == "cuda":
        if bf16_supported is None:
            bf16_supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        if not bf16_supported:
            if precision == "bf16":
                raise ValueError("--precision bf16: this GPU has no bf16 support; use --precision fp32")
            return None
        return torch.bfloat16
    return torch.bfloat16 if precision == "bf16" else None


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype``, or a do-nothing context for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


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
