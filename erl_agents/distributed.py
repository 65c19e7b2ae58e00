"""Process-group helpers for data-parallel training with ``torch.distributed`` (launched by ``torchrun``).

One process per device; each rank rolls out its own block of a step's tasks (a task's whole GRPO group stays on one
rank), gradients are all-reduced by ``DistributedDataParallel``, and metrics are reduced here. A run started without
``torchrun`` gets ``World()`` (rank 0 of 1), where every helper is a no-op that returns its input, so the
single-process trainer runs exactly the code it ran before data parallelism existed.

    torchrun --nproc_per_node 2 -m erl_agents.train --device cpu ...    # gloo on CPU
    torchrun --nproc_per_node 8 -m erl_agents.train --device cuda ...   # nccl, one GPU per rank
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.distributed as dist

__all__ = ["World", "BACKENDS", "resolve_backend", "shard_bounds", "init_world", "close_world", "place_pool_episodes",
           "sync_memory"]

BACKENDS = ("auto", "gloo", "nccl")


def resolve_backend(backend: str, device_type: str) -> str:
    """``auto`` picks nccl for GPUs and gloo for CPUs; nccl on a CPU run is a configuration error, named as such."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl" and device_type != "cuda":
        raise ValueError("the nccl backend needs --device cuda; use --backend gloo (or auto) for CPU ranks")
    return backend


def shard_bounds(count: int, rank: int, world_size: int) -> tuple[int, int]:
    """The contiguous block ``[start, stop)`` of ``count`` items that ``rank`` owns; sizes differ by at most one."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank {rank} of {world_size}")
    base, extra = divmod(count, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


@dataclass(frozen=True)
class World:
    """This process's place in the run: rank, number of ranks, and the collectives the trainer needs."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str = ""

    @property
    def enabled(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def _device(self) -> torch.device:
        # nccl reduces GPU tensors only; gloo reduces CPU tensors.
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    def shard(self, items: Sequence) -> list:
        start, stop = shard_bounds(len(items), self.rank, self.size)
        return list(items[start:stop])

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks, in float64 so counts and loss sums stay exact."""
        if not self.enabled:
            return list(values)
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self._device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def max(self, value: float) -> float:
        if not self.enabled:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self._device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return type(value)(tensor.item())

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one: decisions that end a loop must be the same everywhere."""
        return bool(self.max(float(flag))) if self.enabled else flag

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's (picklable, small) object, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's object on every rank."""
        if not self.enabled:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._device)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_world(device: str = "cpu", backend: str = "auto") -> World:
    """Join the process group that ``torchrun`` describes in the environment; without it, a world of one.

    ``device`` is the run's device type (``cpu`` or ``cuda``); under nccl each rank takes the GPU of its local rank.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = resolve_backend(backend, device)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=size)
    return World(rank=rank, size=size, local_rank=local_rank, backend=backend)


def close_world(world: World, synchronize: bool = False) -> None:
    """Leave the process group. ``synchronize=True`` (every rank finished) waits for all ranks first, so no rank
    tears its side down while another still talks to it; after a failure (``False``) a rank leaves at once, since
    the others may never arrive."""
    if world.enabled and dist.is_initialized():
        if synchronize:
            dist.barrier()
        dist.destroy_process_group()


# --- one reflection memory across ranks ---


def place_pool_episodes(memory: Any, world: World, episodes_before: int) -> int | None:
    """Under data parallel one pool memory serves every rank: this rank's episodes take the slots a single process
    would give them, after the ``episodes_before`` episodes of the lower ranks. Returns the step's first slot (None
    without a pool or ranks)."""
    from erl_envs.reflection.memory import PoolMemory

    if not (world.enabled and isinstance(memory, PoolMemory)):
        return None
    start = memory.next_slot
    memory.next_slot = (start + episodes_before) % memory.slots
    return start


def sync_memory(memory: Any, world: World, updates_before: int, envs: Sequence[Any], episodes: Sequence[Any],
                pool_start: int | None, step_episodes: int) -> Any:
    """One reflection memory for the whole run, the same on every rank after each rollout; returns it.

    A pool: every rank writes the other ranks' stores into their slots (no two ranks' episodes share a slot in a
    step while a step has no more episodes than the pool has slots), and the next step starts after all
    ``step_episodes`` of this step: the pool a single process would hold, not one pool per rank. A single slot: among
    the ranks that stored a reflection this step the highest rank's is kept, as if the ranks' episodes had run one
    after another; the update counts add up, and ``envs`` (the rank's ReflectionWrappers) are given the merged one."""
    from erl_envs.reflection.memory import PoolMemory, ReflectionMemory

    if isinstance(memory, PoolMemory):
        mine = {env.memory.slot: memory.slot_prompt(env.memory.slot)
                for env, episode in zip(envs, episodes) if episode.record and episode.record.get("memory_updated")}
        for rank, stores in enumerate(world.gather(mine)):
            if rank != world.rank:
                for slot, prompt in stores.items():
                    memory.store(slot, prompt)
        memory.next_slot = (pool_start + step_episodes) % memory.slots
        return memory
    if not isinstance(memory, ReflectionMemory):
        return memory
    states = world.gather((memory.updates - updates_before, memory.to_dict()))
    stored = [state for count, state in states if count > 0]
    if not stored:
        return memory
    merged = ReflectionMemory.from_dict({**stored[-1], "updates": updates_before + sum(c for c, _ in states)})
    for env in envs:
        env.memory = merged
    return merged
