"""One rank of the data-parallel tests, launched by tests/agents/test_distributed.py with ``torchrun --nproc_per_node 2``.

``update FOLDER``: one ``policy_update`` per case in FOLDER/cases.pt on this rank's block of tasks, through DDP;
rank 0 saves the resulting weights to FOLDER/ddp_CASE.pt.
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
from erl_agents.config import build_config  # noqa: E402
from erl_agents.distributed import close_world, init_world, shard_bounds, sync_memory  # noqa: E402
from erl_agents.lora import apply_lora  # noqa: E402
from erl_agents.models import load_policy  # noqa: E402
from erl_agents.trainer import Trainer  # noqa: E402
from erl_agents.update import TokenScorer, policy_update  # noqa: E402


def run_updates(folder: Path, world) -> None:
    cases = torch.load(folder / "cases.pt", weights_only=False)
    for name, case in cases.items():
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
        ddp = DistributedDataParallel(TokenScorer(model))
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=case["lr"])
        stats = policy_update(ddp, optimizer, None, mine, case["table"], case["config"], policy.tokenizer.pad_token_id,
                              ref, world=world)
        if world.is_main:
            torch.save({"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "stats": stats},
                       folder / f"ddp_{name}.pt")


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
    mode, folder = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    world = init_world("cpu", "gloo")
    try:
        {"update": run_updates, "train": run_training, "pool": run_pool}[mode](folder, world)
    finally:
        close_world(world)


if __name__ == "__main__":
    main()
