"""Per-GPU memory of the paper preset under ``--sharding fsdp``, measured from the shards of a sharded Qwen3-4B.

The model is built on the meta device from Qwen3-4B-Instruct-2507's configuration (the values below, copied from its
config.json; no weights are read) and sharded by ``erl_agents.sharding.shard_model`` exactly as the trainer shards it,
once per rank, over a fake process group of W ranks (one process plays each rank in turn; no GPU, no collective).
The state a rank holds is the sum of its shards: fp32 master weights, fp32 gradients (the same shards), AdamW's two
fp32 moments (the same shards again) and the bf16 KL reference's shards. What FSDP gathers on top (the root's
weights and two decoder layers, the one running and the one prefetched, in bf16) is measured from the model too.

Activations are not measured (nothing runs on the meta device): their per-token estimate is the arithmetic of
docs/scaling.md, written out in ``activation_bytes_per_token`` from the same configuration.

    python benchmarks/scaling/fsdp_memory.py            # the table docs/scaling.md shows
"""

from __future__ import annotations

import argparse
import contextlib

import torch

GB = 10**9
# Qwen3-4B-Instruct-2507's config.json: the facts the meta model is built from.
QWEN3_4B = dict(
    vocab_size=151936,
    hidden_size=2560,
    intermediate_size=9728,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=262144,
    rms_norm_eps=1e-6,
    rope_theta=5000000.0,
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_bias=False,
)
# The paper preset's update (erl_agents.config PRESETS["paper-qwen3-4b"]): padded tokens per micro-batch.
MICRO_BATCH_TOKENS = (16384, 24000)  # the preset's cap; the reference's dynamic micro-batches
CONVERSATIONS_PER_STEP = 64 * 4  # ERL's first attempts per step (64 tasks x 4), split over the ranks
GPUS = {"H100 80 GB": 80 * GB, "H200 141 GB": 141 * GB}
OVERHEAD = 3 * GB  # the CUDA context and allocator slack, outside any tensor


def meta_model(dtype: torch.dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        return Qwen3ForCausalLM(Qwen3Config(**QWEN3_4B)).to(dtype)


@contextlib.contextmanager
def fake_ranks(rank: int, world_size: int):
    """A process group in which this process is ``rank`` of ``world_size`` and collectives do nothing."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _local_bytes(model) -> int:
    from torch.distributed.tensor import DTensor

    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() * p.element_size() for p in model.parameters())


def rank_state(rank: int, world_size: int, offload: bool) -> dict[str, int]:
    """Bytes rank ``rank`` of ``world_size`` holds, measured from its shards after ``shard_model``."""
    from erl_agents.accelerator import resolve_precision
    from erl_agents.sharding import decoder_layers, shard_model

    precision = resolve_precision("bfloat16", "auto", "cuda", bf16_supported=True)  # the preset's dtype
    device = torch.device("cpu")  # where the meta model's shards would be placed; nothing is allocated
    with fake_ranks(rank, world_size):
        policy = meta_model(precision.storage)
        whole = sum(p.numel() for p in policy.parameters())
        layer_bytes = max(sum(p.numel() for p in layer.parameters()) for layer in decoder_layers(policy)) * 2
        root_bytes = (whole - sum(sum(p.numel() for p in layer.parameters())
                                  for layer in decoder_layers(policy))) * 2
        shard_model(policy, precision, device, offload)
        weights = _local_bytes(policy)
        reference = meta_model(precision.frozen)
        shard_model(reference, precision, device, offload, frozen=True)
        reference_bytes = _local_bytes(reference)
    return {"parameters": whole, "weights": weights, "gradients": weights, "moments": 2 * weights,
            "reference": reference_bytes, "gathered": root_bytes + 2 * layer_bytes, "model_bf16": whole * 2}


def activation_bytes_per_token() -> float:
    """docs/scaling.md's estimate per scored token of a micro-batch, gradient checkpointing on (bf16 compute)."""
    c = QWEN3_4B
    checkpointed = c["num_hidden_layers"] * c["hidden_size"] * 2
    heads = c["num_attention_heads"] * c["head_dim"]
    kv = 2 * c["num_key_value_heads"] * c["head_dim"]
    # One layer recomputed in the backward: norms, q/k/v, attention output, o_proj, gate/up/activation, down, bf16.
    layer = (2 * c["hidden_size"] + 2 * heads + kv + c["hidden_size"] + 3 * c["intermediate_size"]) * 2 * 1.4
    head = c["vocab_size"] * (18 + 4)  # logits and the loss's fp32 intermediates, then the head's fp32 gradient
    return checkpointed + layer + head


def kv_bytes_per_token() -> int:
    """The KV cache of one token in bf16: keys and values of every layer's key-value heads."""
    c = QWEN3_4B
    return c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * c["head_dim"] * 2


def state_rows(world_size: int) -> list[dict]:
    """Rank 0's and the largest rank's state, with and without offload (the shards differ by padding only)."""
    rows = []
    for offload in (False, True):
        states = [rank_state(rank, world_size, offload) for rank in range(world_size)]
        largest = max(states, key=lambda s: s["weights"] + s["reference"])
        on_gpu = 0 if offload else largest["weights"] * 4 + largest["reference"]
        rows.append({"offload": offload, **largest, "gpu_state": on_gpu,
                     "cpu_state": largest["weights"] * 4 + largest["reference"] if offload else 0,
                     "smallest_weights": min(s["weights"] for s in states)})
    return rows


def table(world_sizes=(2, 4, 8)) -> str:
    per_token = activation_bytes_per_token()
    whole = 0
    lines = ["| ranks | offload | weights (fp32) | gradients (fp32) | AdamW moments (fp32) | KL reference (bf16) | "
             "state on the GPU | state in CPU memory | gathered while running (bf16) |",
             "|---|---|---|---|---|---|---|---|---|"]
    fits = ["| ranks | offload | GPU | " + " | ".join(f"update, {t:,}-token micro-batch" for t in MICRO_BATCH_TOKENS)
            + " | rollout (hf engine): conversations per rank, longest average length |",
            "|---|---|---|" + "---|" * (len(MICRO_BATCH_TOKENS) + 1)]
    for world_size in world_sizes:
        for row in state_rows(world_size):
            whole = row["parameters"]
            flag = "yes" if row["offload"] else "no"
            lines.append(f"| {world_size} | {flag} | {row['weights'] / GB:.2f} | {row['gradients'] / GB:.2f} | "
                         f"{row['moments'] / GB:.2f} | {row['reference'] / GB:.2f} | {row['gpu_state'] / GB:.2f} | "
                         f"{row['cpu_state'] / GB:.2f} | {row['gathered'] / GB:.2f} |")
            for gpu, size in GPUS.items():
                cells = []
                for tokens in MICRO_BATCH_TOKENS:
                    need = row["gpu_state"] + row["gathered"] + tokens * per_token + OVERHEAD
                    cells.append(f"{'fits' if need <= size else 'does not fit'} ({need / GB:.1f} GB)")
                # Generation gathers the whole model in bf16 (sharding.gathered); the KV cache takes what is left.
                conversations = -(-CONVERSATIONS_PER_STEP // world_size)
                room = size - OVERHEAD - row["gpu_state"] - row["model_bf16"]
                cells.append(f"{conversations}, {max(room, 0) / (conversations * kv_bytes_per_token()):,.0f} tokens")
                fits.append(f"| {world_size} | {flag} | {gpu} | " + " | ".join(cells) + " |")
    head = (f"Qwen3-4B on the meta device: {whole:,} parameters ({whole * 2 / GB:.2f} GB in bf16). GB = 10^9 bytes; "
            "per rank, the largest rank's shards.")
    note = (f"Per GPU in the update: the state on the GPU, what FSDP gathers, activations at an estimated "
            f"{per_token / 1e6:.2f} MB per token of the micro-batch, and {OVERHEAD / GB:.0f} GB of CUDA context and "
            "allocator slack. In the rollout, the same state, the whole model gathered in bf16 and a KV cache of "
            f"{kv_bytes_per_token() / 1e3:.0f} KB per token.")
    return "\n".join([head, "", *lines, "", note, "", *fits])


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
