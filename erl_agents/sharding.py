"""FSDP2 sharding of the policy and the KL reference (``--sharding fsdp``), with PyTorch's own ``fully_shard``.

Each decoder layer is one FSDP group and the transformer itself the root (embeddings, final norm and output head,
so tied weights stay in one group). Every parameter becomes a ``DTensor`` sharded over the ranks: a rank holds 1/W
of the fp32 master weights, their gradients and AdamW's moments (the optimizer is built on the shards), and a
layer is gathered only while it runs. ``MixedPrecisionPolicy`` gathers the weights in the compute dtype (bf16 or
fp16) and reduce-scatters gradients in fp32; ``--offload`` keeps the shards, their gradients and the optimizer's
state in CPU memory (``CPUOffloadPolicy``) and copies a layer to the GPU when it runs.

FSDP gathers a layer with a collective, so every rank must run the same sequence of forward passes. The update
arranges that (``erl_agents.update``); generation, where each rank decodes its own number of tokens, runs inside
``gathered`` (every group gathered once, no collective until it ends). The loss reaches past the model's own
``forward`` (``update.selected_logits``), so the root gets a forward method of ours that runs any function of the
model between FSDP's gather and release hooks (``root_call``).
"""

from __future__ import annotations

import contextlib
import types
from typing import Callable, Iterator

import torch
from torch import nn

from erl_agents.accelerator import Precision
from erl_agents.distributed import World

__all__ = ["SHARDINGS", "decoder_layers", "shard_model", "is_sharded", "root_call", "compute_device", "gathered",
           "gathered_weights", "full_state_dict", "clip_gradients", "sharded_grad_scaler", "local_numel",
           "weights_finite", "save_sharded_state", "load_sharded_state"]

SHARDINGS = ("ddp", "fsdp")
# The root's forward method of ours (see root_call) and the device it computes on (its shards may be on the CPU).
_CALL = "erl_sharded_call"
_DEVICE = "erl_compute_device"


def _transformer(model: nn.Module) -> nn.Module:
    """The Hugging Face model inside a LoRA wrapper (the wrappers hold no parameters of their own)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a causal LM (``model.model.layers`` in every decoder transformers ships)."""
    base = _transformer(model)
    layers = getattr(getattr(base, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(f"--sharding fsdp: cannot find the decoder layers of {type(base).__name__} "
                         "(expected model.model.layers)")
    return list(layers)


def _call_through_root(self: nn.Module, function: Callable, *args):
    return function(self, *args)


def shard_model(model: nn.Module, precision: Precision, device: torch.device, offload: bool = False,
                frozen: bool = False) -> nn.Module:
    """Shard ``model`` in place over the default process group and return it.

    The trained policy keeps its parameters' dtype (fp32 master shards) and is gathered in ``precision.compute``;
    a ``frozen`` model (the KL reference) is stored and gathered in ``precision.frozen``. Gradients are
    reduce-scattered in fp32 either way.
    """
    from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard,
                                        register_fsdp_forward_method)

    gather_dtype = precision.frozen if frozen else precision.compute
    policy = MixedPrecisionPolicy(param_dtype=gather_dtype, reduce_dtype=torch.float32)
    offload_policy = CPUOffloadPolicy(pin_memory=device.type == "cuda") if offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy, offload_policy=offload_policy)
    root = _transformer(model)
    fully_shard(root, mp_policy=policy, offload_policy=offload_policy)
    setattr(root, _CALL, types.MethodType(_call_through_root, root))
    register_fsdp_forward_method(root, _CALL)
    setattr(root, _DEVICE, device)
    return model


def is_sharded(model: nn.Module) -> bool:
    return hasattr(_transformer(model), _CALL)


def root_call(model: nn.Module, function: Callable, *args):
    """``function(transformer, *args)``; under FSDP as one forward of the root, so that its weights are gathered
    for the call and its gradients reduce-scattered in the backward."""
    base = _transformer(model)
    call = getattr(base, _CALL, None)
    return call(function, *args) if call is not None else function(base, *args)


def compute_device(model: nn.Module) -> torch.device:
    """Where ``model`` computes: the GPU of an offloaded model, whose shards stay in CPU memory."""
    device = getattr(_transformer(model), _DEVICE, None)
    return device if device is not None else next(model.parameters()).device


def _fsdp_modules(model: nn.Module) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(model: nn.Module):
    """Every group of ``model`` gathered for the whole block and released after it: a rank may then run any number
    of forward passes (generation, evaluation) without a collective. Costs the full model in the gather dtype, the
    memory that generation with the trainer's own weights needs anyway. A no-op for an unsharded model."""
    modules = _fsdp_modules(model)
    if not modules:
        yield model
        return
    root = _transformer(model)
    for module in modules:
        module.unshard()
        module.set_reshard_after_forward(False, recurse=False)
    # transformers' generate keeps every rank decoding until all ranks are done when it sees an FSDP model (torch
    # marks the root for it): with every weight gathered there is nothing to wait for, and ranks call generate a
    # different number of times.
    managed = getattr(root, "_is_fsdp_managed_module", False)
    root._is_fsdp_managed_module = False
    try:
        yield model
    finally:
        root._is_fsdp_managed_module = managed
        for module in modules:
            module.reshard()
            # FSDP's defaults: the root stays gathered between its forward and backward, the layers do not.
            module.set_reshard_after_forward(module is not root, recurse=False)


def _full(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The whole of a sharded tensor (a collective: every rank calls it), or the tensor itself."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        return tensor
    local = tensor.to_local()
    if local.device != device:
        # Offloaded shards live in CPU memory while the process group may only talk between GPUs.
        tensor = DTensor.from_local(local.to(device), tensor.device_mesh, tensor.placements, shape=tensor.shape,
                                    stride=tensor.stride())
    return tensor.full_tensor()


def _lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    """LoRA-wrapped linear layers of a PEFT model by their name in the transformer, with their adapters."""
    base = _transformer(model)
    return {name: module for name, module in base.named_modules()
            if hasattr(module, "base_layer") and hasattr(module, "lora_A")}


def gathered_weights(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's weights under their Hugging Face state-dict names, one full tensor at a time.

    Under FSDP each tensor is gathered as it is yielded, so the peak is one weight, not the model; every rank must
    iterate to the end (each gather is a collective). Wrappers are seen through: DDP's, the scorer's and LoRA's
    (adapters are merged into their layer's weight, ``W + scale * B A``, which is what a generation engine serves).
    """
    from torch.nn.parallel import DistributedDataParallel

    while isinstance(model, DistributedDataParallel):
        model = model.module
    if not hasattr(model, "config") and isinstance(getattr(model, "model", None), nn.Module):
        model = model.model  # the trainer's scorer around the policy
    device = compute_device(model)
    base = _transformer(model)
    lora = _lora_layers(model)
    renamed = {f"{name}.base_layer.{kind}": f"{name}.{kind}" for name in lora for kind in ("weight", "bias")}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        layer = name.rsplit(".base_layer.", 1)[0] if ".base_layer." in name else None
        full = _full(tensor, device)
        if layer in lora and name.endswith(".weight"):
            full = full + _lora_delta(lora[layer], device).to(full.dtype)
        yield renamed.get(name, name), full


def _lora_delta(layer: nn.Module, device: torch.device) -> torch.Tensor:
    """``scale * B A`` summed over the layer's active adapters (full tensors)."""
    delta = None
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        a = _full(layer.lora_A[adapter].weight, device).float()
        b = _full(layer.lora_B[adapter].weight, device).float()
        part = (b @ a) * layer.scaling[adapter]
        delta = part if delta is None else delta + part
    if delta is None:
        raise ValueError("a LoRA layer without an active adapter")
    return delta


def _distinct(state: dict[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """``state``'s entries but the second name of a tied weight (the output head sharing the embeddings), which
    would be gathered into a copy of its own and saved twice."""
    seen = set()
    for name, tensor in state.items():
        local = _local(tensor)
        memory = (local.data_ptr(), tuple(tensor.shape), tensor.dtype)
        if local.numel() and memory in seen:
            continue
        seen.add(memory)
        yield name, tensor


def full_state_dict(model: nn.Module, trainable_only: bool = False) -> dict[str, torch.Tensor]:
    """The model's state dict with every sharded tensor gathered onto the CPU (a collective on every rank), under
    the names ``model.state_dict()`` gives, a tied weight once; ``trainable_only`` keeps the weights that train
    (a LoRA adapter)."""
    device = compute_device(model)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    return {name: _full(tensor, device).detach().cpu() for name, tensor in _distinct(model.state_dict())
            if not trainable_only or name in trainable}


def local_numel(tensors) -> int:
    """Elements this rank holds of ``tensors`` (its shard of each sharded one)."""
    from torch.distributed.tensor import DTensor

    return sum((t.to_local() if isinstance(t, DTensor) else t).numel() for t in tensors)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def clip_gradients(parameters, max_norm: float, world: World) -> torch.Tensor:
    """Clip the gradients to a global L2 norm of ``max_norm``; returns the norm before clipping (a CPU scalar).

    Sharded gradients: each rank sums the squares of its shards (which are disjoint), the sum is all-reduced, and
    every rank scales its shards by the same factor, so the result is the unsharded model's clipping, whether the
    shards live on the GPU or, offloaded, on the CPU.
    """
    from torch.distributed.tensor import DTensor

    parameters = list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    if not any(isinstance(g, DTensor) for g in grads):
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    local = [_local(g) for g in grads]
    square = torch.zeros((), dtype=torch.float64)
    for g in local:
        square += g.detach().double().pow(2).sum().cpu()
    total = torch.tensor(world.sum([float(square)])[0], dtype=torch.float64).sqrt()
    coefficient = min(1.0, max_norm / (float(total) + 1e-6))
    if coefficient < 1.0 and torch.isfinite(total):
        for g in local:
            g.mul_(coefficient)
    return total.float()


def weights_finite(parameters, world: World) -> bool:
    """Whether every trainable weight (this rank's shard of it) is finite on every rank."""
    checks = [torch.isfinite(_local(p)).all() for p in parameters if p.requires_grad]
    mine = bool(torch.stack(checks).all()) if checks else True
    return not world.any(not mine)


def sharded_grad_scaler(device: torch.device):
    """fp16's loss scaler for sharded gradients: an overflow on any rank's shard skips the step on every rank
    (growth every 400 good steps, as ``accelerator.grad_scaler``)."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device.type, growth_interval=400)


# --- sharded checkpoints (torch.distributed.checkpoint) ---

_MODEL = "model/"
_OPTIMIZER = "optimizer/"


def _state_tensors(model: nn.Module, optimizer: torch.optim.Optimizer, trainable_only: bool):
    """The model's and optimizer's state as one flat ``{name: tensor}`` (sharded tensors stay sharded), with the two
    nested state dicts those tensors belong to. Names are the models' own: the same for any number of ranks."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    # A tied weight is stored once, under its first name, and loads into both.
    tensors = {_MODEL + name: t for name, t in _distinct(model_state) if not trainable_only or name in trainable}
    for name, entries in optimizer_state["state"].items():
        for key, value in entries.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"the optimizer's state {key!r} of {name} is a {type(value).__name__}, not a tensor")
            tensors[f"{_OPTIMIZER}{name}/{key}"] = value
    return tensors, model_state, optimizer_state


@contextlib.contextmanager
def _checkpoint_io():
    """``no_dist``: a run without torchrun writes and reads the checkpoint alone (said once here, not warned)."""
    import warnings

    import torch.distributed as dist

    no_dist = not (dist.is_available() and dist.is_initialized())
    with warnings.catch_warnings():
        if no_dist:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield no_dist


def save_sharded_state(folder, model: nn.Module, optimizer: torch.optim.Optimizer,
                       trainable_only: bool = False) -> list[dict]:
    """Every rank writes its shards of the weights (the trained ones with ``trainable_only``) and of the
    optimizer's state into ``folder``, one safetensors file per rank whose header says where its pieces sit in the
    whole tensors; returns the optimizer's param groups (plain data, for the checkpoint's JSON part)."""
    import torch.distributed.checkpoint as dcp

    tensors, _, optimizer_state = _state_tensors(model, optimizer, trainable_only)
    with _checkpoint_io() as no_dist:
        dcp.save(tensors, storage_writer=dcp.HuggingFaceStorageWriter(str(folder), save_distributed=True),
                 no_dist=no_dist)
    return optimizer_state["param_groups"]


def load_sharded_state(folder, model: nn.Module, optimizer: torch.optim.Optimizer, param_groups: list[dict],
                       trainable_only: bool = False) -> None:
    """Load what ``save_sharded_state`` wrote, for any number of ranks and either sharding: each rank reads the
    parts of the files that its own shards (or whole tensors) cover. The files are read as safetensors and their
    JSON headers: nothing in them is executed."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    tensors, model_state, optimizer_state = _state_tensors(model, optimizer, trainable_only)
    try:
        with _checkpoint_io() as no_dist:
            dcp.load(tensors, storage_reader=dcp.HuggingFaceStorageReader(str(folder)), no_dist=no_dist)
    except (dcp.CheckpointException, RuntimeError, KeyError, ValueError, AssertionError) as exc:
        raise ValueError(f"the sharded checkpoint in {folder} does not fit this run's model and optimizer "
                         f"({' '.join(str(exc).split())[:300]})") from exc
    optimizer_state["param_groups"] = param_groups
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
