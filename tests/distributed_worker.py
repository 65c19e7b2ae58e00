"""One rank of the data-parallel tests, launched by tests/agents/test_distributed.py with ``torchrun --nproc_per_node 2``.

``update FOLDER``: one ``policy_update`` per case in FOLDER/cases.pt on this rank's block of tasks, through DDP;
rank 0 saves the resulting weights to FOLDER/ddp_CASE.pt. ``update FOLDER fsdp``: the same with the model (and the
KL reference) sharded by FSDP2, and the paper_loss case again with CPU offload (``offload``), saved to
FOLDER/fsdp_CASE.pt with the weights ``gathered_weights`` yields and what
each rank holds; then bf16 and fp16 mixed-precision AdamW steps at lr 1e-6 (FOLDER/fsdp_mixed.pt).
``first FOLDER``: the FSDP run of FOLDER/train.json in FOLDER/run. ``continue FOLDER``: build the FSDP run in FOLDER/run from its latest checkpoint (with as many ranks as this launch
has) and make one more update on a fixed batch; rank 0 saves the weights to FOLDER/continued_W.pt.
``train FOLDER``: tiny Trainer runs: 4 steps straight, and 2 steps then a resume to 4; each rank saves its metrics.
``pool FOLDER``: an ERL run with a pool memory; each rank saves its pool and, per step, the slots its episodes took
and which of them stored a reflection.
"""

from __future__ import annotations

import json
import sys
from unittest import mock
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import text_bandit  # noqa: E402,F401  (registers TextBandit-v0)
from erl_agents.accelerator import resolve_precision  # noqa: E402
from erl_agents.batch import assign_advantages  # noqa: E402
from erl_agents.config import build_config  # noqa: E402
from erl_agents.distributed import close_world, init_world, shard_bounds, sync_memory  # noqa: E402
from erl_agents.lora import apply_lora  # noqa: E402
from erl_agents.models import load_policy  # noqa: E402
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes  # noqa: E402
from erl_agents.sharding import (full_state_dict, gathered, gathered_weights, local_numel, shard_model,  # noqa: E402
                                 sharded_grad_scaler)
from erl_agents.trainer import Trainer  # noqa: E402
from erl_agents.update import TokenScorer, policy_update  # noqa: E402

CPU = torch.device("cpu")


def run_updates(folder: Path, world, sharding: str = "ddp") -> None:
    cases = torch.load(folder / "cases.pt", weights_only=False)
    runs = [(name, case, False) for name, case in cases.items()]
    if sharding == "fsdp":
        runs.append(("offload", cases["paper_loss"], True))  # the first case again, its shards in CPU memory
    fp32 = resolve_precision("float32", "auto", "cpu")
    for name, case, offload in runs:
        policy = load_policy(str(folder / "model"), dtype="float32")
        model = policy.model
        if case["lora_r"]:
            torch.manual_seed(0)
            model = apply_lora(model, case["lora_r"], 16.0)
            model.load_state_dict(case["initial_state"])
        ref = model if case["lora_r"] else (load_policy(str(folder / "model"), dtype="float32").model
                                            if case["config"].kl_coef > 0 else None)
        lo, hi = shard_bounds(case["tasks"], world.rank, world.size)
        mine = [t for t in case["trajectories"] if lo <= t.task < hi]
        if sharding == "fsdp":
            shard_model(model, fp32, CPU, offload)
            if ref is not None and ref is not model:
                shard_model(ref, fp32, CPU, offload, frozen=True)
            trained = model
        else:
            trained = DistributedDataParallel(TokenScorer(model))
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=case["lr"])
        stats = policy_update(trained, optimizer, None, mine, case["table"], case["config"],
                              policy.tokenizer.pad_token_id, ref, world=world)
        if sharding == "fsdp":
            state = full_state_dict(model)
            weights = dict(gathered_weights(model))
            # AdamW's moments on the shards, after one step on the gradients left by the update.
            adam = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
            adam.step()
            moments = [v for entry in adam.state.values() for k, v in entry.items() if k != "step"]
            held = {"params": local_numel(model.parameters()), "moments": local_numel(moments),
                    "whole_params": sum(p.numel() for p in model.parameters()), "whole_moments": sum(
                        m.numel() for m in moments)}
            result = {"state": state, "stats": stats, "weights": weights, "held": world.gather(held)}
        else:
            result = {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "stats": stats}
        if world.is_main:
            torch.save(result, folder / f"{sharding}_{name}.pt")
    if sharding == "fsdp":
        run_bf16_step(folder, world, next(iter(cases.values())))


def run_bf16_step(folder: Path, world, case: dict) -> None:
    """One AdamW step at lr 1e-6 with bf16 compute (the fp32 master shards keep the update, bf16 storage would
    not), and one with fp16 compute through the sharded loss scaler."""
    results = {}
    for dtype in ("bfloat16", "float16"):
        policy = load_policy(str(folder / "model"), dtype="float32")
        config = build_config(flags={**case["config"].__dict__, "dtype": dtype})
        shard_model(policy.model, resolve_precision(dtype, "auto", "cpu"), CPU)
        before = full_state_dict(policy.model)
        optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-6, weight_decay=0.0)
        scaler = sharded_grad_scaler(CPU) if dtype == "float16" else None
        lo, hi = shard_bounds(case["tasks"], world.rank, world.size)
        mine = [t for t in case["trajectories"] if lo <= t.task < hi]
        for _ in range(8):  # fp16: a first scale that overflows skips the step and is halved (routine)
            stats = policy_update(policy.model, optimizer, None, mine, case["table"], config,
                                  policy.tokenizer.pad_token_id, world=world, scaler=scaler)
            if stats["optimizer_steps"]:
                break
        results[dtype] = {"before": before, "after": full_state_dict(policy.model), "stats": stats,
                          "dtypes": sorted({str(p.dtype) for p in policy.model.parameters()})}
    if world.is_main:
        torch.save(results, folder / "fsdp_mixed.pt")


def run_first(folder: Path, world) -> None:
    spec = json.loads((folder / "train.json").read_text())
    Trainer(build_config(flags={**spec, "output": str(folder / "run")}), world=world).train()


def run_continue(folder: Path, world) -> None:
    """Resume the run in FOLDER/run (written by 2 FSDP ranks) with this launch's ranks, then one update on a batch
    every rank samples alike (same seed, same weights), each rank training on its block of tasks."""
    spec = json.loads((folder / "train.json").read_text())
    trainer = Trainer(build_config(flags={**spec, "output": str(folder / "run"), "resume": True}), world=world)
    policy, tasks = trainer.policy, 4
    task_of = [i // 4 for i in range(tasks * 4)]
    envs = [trainer._make_env(trainer.config.env_kwargs) for _ in task_of]
    table = ConstraintTable()
    with torch.random.fork_rng(devices=[]), gathered(policy.model):
        torch.manual_seed(0)
        episodes = run_episodes(policy, envs, [(t, None) for t in task_of], task_of, SamplingParams(1.0, 1.0, 0, 4),
                                constrained=True, table=table)
    trajectories = [t for e in episodes for t in e.trajectories]
    for i, t in enumerate(trajectories):
        t.reward = float(i % 3)
    assign_advantages(trajectories, trainer.config)
    lo, hi = shard_bounds(tasks, world.rank, world.size)
    policy_update(trainer.train_model, trainer.optimizer, None, [t for t in trajectories if lo <= t.task < hi], table,
                  trainer.config, policy.tokenizer.pad_token_id, trainer.ref_model, world=world)
    state = full_state_dict(policy.model) if trainer.sharded else {k: v.detach().clone()
                                                                   for k, v in policy.model.state_dict().items()}
    if world.is_main:
        torch.save(state, folder / f"continued_{world.size}.pt")
    trainer.close()


def run_training(folder: Path, world) -> None:
    spec = json.loads((folder / "train.json").read_text())

    def config(name, **overrides):
        return build_config(flags={**spec, "output": str(folder / name), **overrides})

    straight = Trainer(config("straight"), world=world).train()
    Trainer(config("resumed", steps=2), world=world).train()
    resumed = Trainer(config("resumed", resume=True), world=world).train()
    (folder / f"metrics_rank{world.rank}.json").write_text(json.dumps({"straight": straight, "resumed": resumed}))


def run_pool(folder: Path, world) -> None:
    spec = json.loads((folder / "pool.json").read_text())
    trainer = Trainer(build_config(flags={**spec, "output": str(folder / "pool")}), world=world)
    taken = []

    def record_then_sync(memory, world, updates_before, envs, episodes, *rest):
        taken.append([[env.memory.slot, bool(episode.record and episode.record["memory_updated"])]
                      for env, episode in zip(envs, episodes)])
        return sync_memory(memory, world, updates_before, envs, episodes, *rest)

    with mock.patch("erl_agents.trainer.sync_memory", record_then_sync):
        trainer.train()
    (folder / f"pool_rank{world.rank}.json").write_text(json.dumps({"pool": trainer.memory.to_dict(), "taken": taken}))


def main() -> None:
    mode, folder, extra = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    torch.set_num_threads(1)
    world = init_world("cpu", "gloo")
    try:
        {"update": run_updates, "train": run_training, "pool": run_pool, "first": run_first,
         "continue": run_continue}[mode](
            folder, world, *extra)
    finally:
        close_world(world)


if __name__ == "__main__":
    main()
