"""A short GPU smoke test: the tiny model trains a few steps on cuda (fp32 weights, bf16 autocast) and reports
tokens/s, the generation engine's log-prob agreement with the trainer, and peak memory.

    python examples/gpu_check.py                      # one GPU, about a minute
    python examples/gpu_check.py --engine vllm        # rollouts on a colocated vLLM (pip install -e ".[vllm]")
    python examples/gpu_check.py --lora               # the same with LoRA adapters (needs the lora extra)
    torchrun --nproc_per_node 2 examples/gpu_check.py # two GPUs, nccl data parallel

The agreement column is ``rollout/logprob_abs_diff``: mean |engine - trainer| log-prob of the sampled tokens. Under
bf16 it is a few hundredths at most; a weight sync that did not happen shows as a jump after the first step, and
the check then fails.

Exits with status 2 and a "no CUDA device" message on a machine without a GPU: the CPU path never needs one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# Above this mean |engine - trainer| log-prob the engine does not sample the policy being trained (bf16 numerics stay
# far below it; a skipped weight sync after a step at this learning rate is far above it).
AGREEMENT_LIMIT = 0.1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters (rank 8) instead of all weights")
    parser.add_argument("--output", default="", help="run directory (default: a temporary one)")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="generation engine (erl_agents.engines)")
    parser.add_argument("--model", default="tiny", help="tiny (built in code) or a local model folder / cached hub name")
    parser.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.3,
                        help="share of the GPU vLLM takes (the trainer needs the rest)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); nothing to check on this machine")
        return 2

    from transformers.utils import logging as hf_logging

    from erl_agents.accelerator import autocast_dtype
    from erl_agents.config import build_config
    from erl_agents.distributed import close_world, init_world
    from erl_agents.trainer import Trainer

    hf_logging.set_verbosity_error()
    world = init_world("cuda", "auto")
    output = args.output or tempfile.mkdtemp(prefix="erl-gpu-check-")
    output = world.broadcast(output)
    config = build_config({"preset": "cpu-tiny"}, flags=dict(
        env="ERL-FrozenLake-v0", env_kwargs={"size": [2, 4]}, algo="erl", device="cuda", dtype="bfloat16",
        gradient_checkpointing=True, max_tokens_per_micro_batch=16384, steps=args.steps,
        tasks_per_step=16 * world.size, kl_coef=0.001, eval_every=args.steps, eval_tasks=32, checkpoint_every=0,
        time_limit_min=0.0, progress=False, save_final_model=False, output=output,
        tiny_hidden=256, tiny_layers=4, tiny_heads=4, tiny_intermediate=1024,
        lora_r=8 if args.lora else 0, lora_alpha=16.0, engine=args.engine, model=args.model,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization))
    if world.is_main:
        props = torch.cuda.get_device_properties(world.local_rank)
        print(f"device: {props.name}, {props.total_memory / 2**30:.0f} GiB, ranks: {world.size}, "
              f"autocast: {autocast_dtype('bf16', 'cuda')}, lora: {bool(args.lora)}, engine: {args.engine}")
    clock = time.perf_counter()
    try:
        rows = Trainer(config, world=world).train()
    finally:
        close_world(world)
    if not world.is_main:
        return 0
    steps = [r for r in rows if r.get("step", 0) > 0]
    print("| step | gen tok/s | update tok/s | weight sync s | logprob |engine - trainer| (max) | peak GiB | loss | "
          "grad norm | success/attempt1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in steps:
        print(f"| {r['step']} | {r['time/generation_tokens_per_s']:.0f} | {r['time/update_tokens_per_s']:.0f} | "
              f"{r.get('time/weight_sync', 0.0):.2f} | {r.get('rollout/logprob_abs_diff', float('nan')):.4f} "
              f"({r.get('rollout/logprob_abs_diff_max', float('nan')):.3f}) | "
              f"{r['time/peak_memory_gb']:.2f} | {r['loss']:.4f} | {r['grad_norm']:.3f} | "
              f"{r.get('success/attempt1', float('nan')):.3f} |")
    bad = [r["step"] for r in steps if r["skipped_updates"] or r["loss"] != r["loss"]
           or not r.get("rollout/logprob_abs_diff", 0.0) < AGREEMENT_LIMIT]
    print(f"wall time {time.perf_counter() - clock:.1f} s; eval success {rows[-1].get('eval/success', float('nan')):.3f}; "
          f"non-finite steps: {bad or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
