"""Data parallel (erl_agents.distributed + the trainer under torchrun), precision and micro-batching choices.

The two-rank tests launch ``torchrun --nproc_per_node 2`` with the gloo backend on CPU (tests/distributed_worker.py).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from erl_agents import checkpoint as ckpt
from erl_agents.accelerator import autocast_dtype, peak_memory_gb, resolve_device
from erl_agents.config import build_config
from erl_agents.distributed import World, resolve_backend, shard_bounds
from erl_agents.evaluate import merge_eval_results
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer
from erl_agents.rollout import ConstraintTable, SamplingParams, Trajectory, run_episodes
from erl_agents.batch import assign_advantages
from erl_agents.metrics import merge_rollout_rows
from erl_agents.update import micro_batches, policy_update
from text_bandit import TextBanditEnv
from paths import ROOT

WORKER = ROOT / "tests" / "distributed_worker.py"
TIME_KEYS = ("time/", "lr")


# ----------------------------------------------------------------------------------------------------------------
# Pure pieces


def test_shard_bounds_cover_every_item_once_in_order():
    for count in range(0, 11):
        for world in range(1, 5):
            blocks = [shard_bounds(count, r, world) for r in range(world)]
            assert blocks[0][0] == 0 and blocks[-1][1] == count
            assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
            sizes = [hi - lo for lo, hi in blocks]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="rank must be in"):
        shard_bounds(4, 2, 2)


def test_backend_choice_and_errors():
    assert resolve_backend("auto", "cpu") == "gloo"
    assert resolve_backend("auto", "cuda") == "nccl"
    assert resolve_backend("gloo", "cuda") == "gloo"
    with pytest.raises(ValueError, match="nccl backend needs --device cuda"):
        resolve_backend("nccl", "cpu")
    with pytest.raises(ValueError, match="backend must be one of"):
        resolve_backend("mpi", "cpu")


def test_a_world_of_one_passes_everything_through():
    world = World()
    assert not world.enabled and world.is_main
    assert world.sum([1.5, 2]) == [1.5, 2] and world.max(3) == 3 and world.any(True)
    assert world.gather({"a": 1}) == [{"a": 1}] and world.broadcast([4]) == [4]
    assert world.shard([1, 2, 3]) == [1, 2, 3]
    assert World(rank=1, size=2).shard([1, 2, 3]) == [3]


def test_autocast_dtype_selection():
    assert autocast_dtype("auto", "cpu") is None  # CPU runs stay fp32
    assert autocast_dtype("fp32", "cuda", bf16_supported=True) is None
    assert autocast_dtype("auto", "cuda", bf16_supported=True) is torch.bfloat16
    assert autocast_dtype("auto", "cuda", bf16_supported=False) is None
    assert autocast_dtype("bf16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match="no bf16 support"):
        autocast_dtype("bf16", "cuda", bf16_supported=False)
    assert autocast_dtype("fp16", "cpu") is torch.float16
    with pytest.raises(ValueError, match="precision must be one of"):
        autocast_dtype("fp8", "cpu")


def test_device_resolution():
    assert resolve_device("auto", cuda_available=False) == torch.device("cpu")
    assert resolve_device("auto", local_rank=3, cuda_available=True) == torch.device("cuda", 3)
    with pytest.raises(ValueError, match="no CUDA device"):
        resolve_device("cuda", cuda_available=False)
    assert peak_memory_gb(torch.device("cpu")) > 0


def _traj(length, task=0):
    return Trajectory(role="attempt1", task=task, episode=0, tokens=[1] * length, mask=[0] * length,
                      logprobs=[0.0] * length, constraints=[-1] * length, prompt_len=1, system_prompt="",
                      first_observation="")


def test_micro_batches_respect_both_caps():
    batch = [_traj(n) for n in (2, 3, 3, 5, 8, 20)]
    assert [len(c) for c in micro_batches(batch, 4)] == [4, 2]  # no token cap: plain slices
    chunks = micro_batches(batch, 4, max_tokens=12)
    assert [t for c in chunks for t in c] == batch  # order kept, nothing lost
    for chunk in chunks:
        assert len(chunk) <= 4
        assert len(chunk) == 1 or len(chunk) * max(len(t.tokens) for t in chunk) <= 12
    assert [len(c) for c in chunks] == [3, 1, 1, 1]  # 20 tokens exceed the cap alone: a chunk of its own


def test_rollout_rows_merge_as_one_batch():
    a = {"count/attempt1": 4, "reward/attempt1": 0.5, "success/attempt1": 0.5, "count/attempt2": 1,
         "lift/r1": 0.0, "lift/r2": 1.0, "lift": 1.0, "tokens/total": 40, "memory/set": 1.0}
    b = {"count/attempt1": 2, "reward/attempt1": 1.0, "success/attempt1": 1.0, "count/attempt2": 3,
         "lift/r1": 0.0, "lift/r2": 0.0, "lift": 0.0, "tokens/total": 10, "memory/set": 1.0}
    merged = merge_rollout_rows([a, b])
    assert merged["count/attempt1"] == 6 and merged["tokens/total"] == 50 and merged["memory/set"] == 1.0
    assert merged["reward/attempt1"] == pytest.approx((4 * 0.5 + 2 * 1.0) / 6)
    assert merged["lift/r2"] == pytest.approx(0.25) and merged["lift"] == pytest.approx(0.25)
    assert merge_rollout_rows([{"count/attempt1": 2, "count/attempt2": 0}, b])["lift/r2"] == 0.0


def test_eval_results_merge_weighted_by_episodes_and_tasks():
    a = {"success": 0.5, "reward": 0.5, "solved_any": 1.0, "episodes": 4.0, "tokens": 10.0}
    b = {"success": 0.0, "reward": 0.0, "solved_any": 0.0, "episodes": 2.0, "tokens": 5.0}
    merged = merge_eval_results([a, b, None], samples=2)
    assert merged["success"] == pytest.approx(2 / 6) and merged["solved_any"] == pytest.approx(2 / 3)
    assert merged["episodes"] == 6.0 and merged["tokens"] == 15.0
    with pytest.raises(ValueError, match="no rank evaluated"):
        merge_eval_results([None], samples=2)


def test_scaling_config_fields_are_validated():
    with pytest.raises(ValueError, match="precision must be one of"):
        build_config(flags={"precision": "fp8"})
    with pytest.raises(ValueError, match="max_tokens_per_micro_batch must be non-negative"):
        build_config(flags={"max_tokens_per_micro_batch": -1})
    with pytest.raises(ValueError, match="backend must be one of"):
        build_config(flags={"backend": "mpi"})


def test_token_cap_does_not_change_the_gradient():
    policy, trajectories, table = _bandit_batch(tasks=2)
    config = _update_config(loss_agg="seq-mean-token-sum")
    assign_advantages(trajectories, config)
    grads = []
    for cap in (0, 40):
        policy.model.zero_grad()
        policy_update(policy.model, torch.optim.SGD(policy.model.parameters(), lr=0.0), None, trajectories, table,
                      build_config(flags={**config.__dict__, "max_tokens_per_micro_batch": cap}),
                      policy.tokenizer.pad_token_id)
        grads.append([p.grad.clone() for p in policy.model.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# Two ranks under torchrun


def _bandit_batch(tasks=4, samples=4, seed=0):
    env = TextBanditEnv(turns=2, contextual=True)
    corpus = [env.instructions] + env.valid_actions * 10 + [
        f"Turn {t} of 2. The prize is behind door {d}. Which door?" for t in range(1, 3) for d in "ABCD"] * 3
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=320)
    policy = Policy(build_tiny_model(tokenizer, 32, 2, 2, 64, seed=seed), tokenizer)
    torch.manual_seed(seed)
    task_of = [i // samples for i in range(tasks * samples)]
    table = ConstraintTable()
    episodes = run_episodes(policy, [TextBanditEnv(turns=2, contextual=True) for _ in task_of],
                            [(t, None) for t in task_of], task_of, SamplingParams(1.0, 1.0, 0, 5), table=table)
    trajectories = [t for e in episodes for t in e.trajectories]
    for i, t in enumerate(trajectories):
        # The last task's group has equal rewards (advantage 0): the second rank has fewer sequences to train on,
        # so it runs out of micro-batches first and must still join the gradient all-reduce.
        t.reward = 1.0 if t.task == tasks - 1 else float(i % 3)
    return policy, trajectories, table


def _update_config(**overrides):
    flags = dict(algo="rlvr", n_rlvr=4, temperature=1.0, kl_coef=0.0, max_grad_norm=1e9, micro_batch_size=2,
                 output="unused")
    flags.update(overrides)
    return build_config(flags=flags)


CASES = {
    # The paper's loss aggregation; the second rank runs out of micro-batches first (see _bandit_batch).
    "paper_loss": dict(lora_r=0, lr=0.5, config=dict(loss_agg="seq-mean-token-sum")),
    # LoRA with the adapters-off KL reference, gradient clipping active, and the token cap on micro-batches.
    "lora_kl_clip": dict(lora_r=4, lr=0.5, config=dict(loss_agg="token-mean", kl_coef=0.05, micro_batch_size=3,
                                                       max_grad_norm=0.05, max_tokens_per_micro_batch=60)),
    # verl's schedule with one mini-batch of all 4 tasks: each rank takes 4 x 4 / 2 rows, its whole share.
    "verl_schedule": dict(lora_r=0, lr=0.5, config=dict(loss_agg="seq-mean-token-sum", ppo_mini_batch_size=4,
                                                        clip_ratio_c=3.0)),
}


def _torchrun(mode, folder, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(WORKER), mode,
           str(folder)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


def update_cases(tmp_path):
    """CASES with their single-process results (weights, stats, initial weights, the merged Hugging Face weights a
    generation engine would be given), saved to tmp_path/cases.pt with the model for the worker."""
    pytest.importorskip("peft")
    from erl_agents.lora import apply_lora
    from erl_agents.sharding import gathered_weights

    policy, trajectories, table = _bandit_batch()
    policy.save(str(tmp_path / "model"))
    cases, expected = {}, {}
    for name, case in CASES.items():
        config = _update_config(**case["config"])
        assign_advantages(trajectories, config)
        base = Policy(build_tiny_model(policy.tokenizer, 32, 2, 2, 64, seed=0), policy.tokenizer).model
        model, ref = base, None
        if case["lora_r"]:
            torch.manual_seed(0)
            model = apply_lora(base, case["lora_r"], 16.0)
            ref = model if config.kl_coef > 0 else None
        elif config.kl_coef > 0:
            ref = build_tiny_model(policy.tokenizer, 32, 2, 2, 64, seed=0)
        initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=case["lr"])
        stats = policy_update(model, optimizer, None, trajectories, table, config, policy.tokenizer.pad_token_id, ref)
        expected[name] = ({k: v.detach().clone() for k, v in model.state_dict().items()}, stats, initial,
                          dict(gathered_weights(model)))
        cases[name] = dict(trajectories=trajectories, table=table, config=config, lr=case["lr"], tasks=4,
                           lora_r=case["lora_r"], initial_state=initial)
    torch.save(cases, tmp_path / "cases.pt")
    return expected


def test_two_ranks_give_the_single_process_update(tmp_path):
    """One update with 2 ranks x half the tasks == one process with all tasks and the same rollouts (to 1e-5)."""
    expected = update_cases(tmp_path)
    _torchrun("update", tmp_path)
    for name, (state, stats, initial, _) in expected.items():
        got = torch.load(tmp_path / f"ddp_{name}.pt", weights_only=False)
        moved = max((state[k] - initial[k]).abs().max().item() for k in state)
        assert moved > 1e-3, f"{name}: the update hardly moved the weights, so the comparison would be empty"
        for key, value in state.items():
            assert torch.allclose(got["state"][key], value, atol=1e-5, rtol=0), f"{name}: {key} differs"
        for key in ("loss", "grad_norm", "clip_frac", "kl", "entropy"):
            assert got["stats"][key] == pytest.approx(stats[key], rel=1e-4, abs=1e-6), f"{name}: {key}"
        assert got["stats"]["trained_tokens"] == stats["trained_tokens"]


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith(TIME_KEYS)} for r in rows]


def test_two_rank_training_writes_once_and_resumes_exactly(tmp_path):
    spec = dict(env="TextBandit-v0", env_kwargs={"turns": 1}, algo="erl", reflector="rule", model="tiny", steps=4,
                tasks_per_step=2, n_erl=2, temperature=1.0, max_new_tokens=4, constrained_actions=True, lr=3e-3,
                kl_coef=0.01, eval_every=2, eval_tasks=3, eval_samples=2, checkpoint_every=2, tiny_hidden=32,
                tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=300, progress=False,
                save_final_model=False, threads=1)
    (tmp_path / "train.json").write_text(json.dumps(spec))
    _torchrun("train", tmp_path)
    ranks = [json.loads((tmp_path / f"metrics_rank{r}.json").read_text()) for r in range(2)]
    # Every rank holds the same (reduced) metrics; the resumed run continues the straight one exactly.
    assert _strip(ranks[0]["straight"]) == _strip(ranks[1]["straight"])
    assert _strip(ranks[0]["resumed"]) == _strip(ranks[0]["straight"])
    straight = ranks[0]["straight"]
    assert [row["step"] for row in straight] == [0, 1, 2, 3, 4]
    assert all(row["count/attempt1"] == 4 for row in straight[1:])  # 2 tasks x 2 samples, one task per rank
    assert straight[-1]["eval/episodes"] == 6.0  # 3 held-out tasks x 2 samples, split 2 + 1 over the ranks
    lines = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 3, 4]  # written once, by rank 0
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path / "straight" / "checkpoints"))
    assert len(state["rank_rng"]) == 2
    assert not torch.equal(state["rank_rng"][0]["torch"], state["rank_rng"][1]["torch"])


def test_two_ranks_share_one_pool_memory(tmp_path):
    """Under torchrun the pool memory is one pool for the whole trainer (the reference keeps 1,024 slots in all),
    not one per rank: each step's episodes take consecutive slots in rank order, as one process would give them,
    every rank's stores reach every rank, and the next step starts after all of them."""
    spec = dict(env="TextBandit-v0", env_kwargs={"turns": 1}, algo="erl", reflector="rule", memory="pool",
                memory_slots=16, model="tiny", steps=6, tasks_per_step=2, n_erl=2, temperature=1.0, max_new_tokens=4,
                constrained_actions=True, lr=3e-3, kl_coef=0.0, eval_every=0, checkpoint_every=0, tiny_hidden=32,
                tiny_layers=1, tiny_heads=2, tiny_intermediate=64, tiny_vocab=300, progress=False,
                save_final_model=False, threads=1)
    (tmp_path / "pool.json").write_text(json.dumps(spec))
    _torchrun("pool", tmp_path, timeout=600)
    ranks = [json.loads((tmp_path / f"pool_rank{r}.json").read_text()) for r in range(2)]
    # One pool, the same on both ranks ("current", the slot of the rank's own latest episode, serves only the pool's
    # own get/update, which the trainer never calls).
    assert ({k: v for k, v in ranks[0]["pool"].items() if k != "current"}
            == {k: v for k, v in ranks[1]["pool"].items() if k != "current"})
    for step in range(6):
        slots = [slot for rank in ranks for slot, _ in rank["taken"][step]]
        assert slots == [(4 * step + k) % 16 for k in range(4)]  # rank 0's 2 episodes, then rank 1's
    stored = {r: {slot for step in rank["taken"] for slot, updated in step if updated} for r, rank in enumerate(ranks)}
    assert stored[0] and stored[1], "both ranks must store a reflection for this test to mean anything"
    pool = ranks[0]["pool"]
    assert {int(slot) for slot in pool["prompts"]} == stored[0] | stored[1]
    assert pool["next"] == 6 * 4 % 16
    assert pool["updates"] == sum(updated for rank in ranks for step in rank["taken"] for _, updated in step)


def test_gpu_code_paths_run_on_cpu_and_report_speed_and_memory(tmp_path):
    """bf16 autocast, non-reentrant gradient checkpointing and the token cap, on CPU; the perf metrics are logged."""
    from erl_agents.trainer import Trainer

    config = build_config(flags=dict(
        env="TextBandit-v0", env_kwargs={"turns": 1}, algo="rlvr", model="tiny", output=str(tmp_path / "run"),
        steps=2, tasks_per_step=2, n_rlvr=4, temperature=1.0, max_new_tokens=4, constrained_actions=True, lr=3e-3,
        kl_coef=0.01, eval_every=0, checkpoint_every=0, tiny_hidden=32, tiny_layers=1, tiny_heads=2,
        tiny_intermediate=64, tiny_vocab=300, progress=False, save_final_model=False, precision="bf16",
        gradient_checkpointing=True, max_tokens_per_micro_batch=64, micro_batch_size=8))
    trainer = Trainer(config)
    assert trainer.precision.compute is torch.bfloat16 and trainer.policy.model.model.gradient_checkpointing
    rows = trainer.train()
    last = rows[-1]
    for key in ("time/generation_tokens_per_s", "time/update_tokens_per_s", "time/peak_memory_gb"):
        assert last[key] > 0 and last[key] == last[key], key
    assert last["trained_tokens"] > 0 and last["skipped_updates"] == 0


@pytest.mark.slow
def test_twenty_two_rank_runs_in_a_row_each_exit_on_their_own(tmp_path):
    """erl-train under torchrun ends every rank by itself: no rank lingers after the summary (it once hung 1 in 10).

    Each rank drops the DDP wrapper, waits for the others and leaves the process group before exiting, and skips
    interpreter finalization, where freeing gloo work can deadlock."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    flags = ["--env", "ERL-FrozenLake-v0", "--env-kwargs", '{"size": [2, 3]}', "--algo", "erl", "--reflector", "rule",
             "--n-erl", "2", "--model", "tiny", "--steps", "2", "--tasks-per-step", "2", "--temperature", "1.0",
             "--max-new-tokens", "6", "--reflect-max-new-tokens", "6", "--constrained-actions", "--eval-every", "2",
             "--eval-tasks", "2", "--eval-samples", "1", "--checkpoint-every", "1", "--tiny-hidden", "32",
             "--tiny-layers", "1", "--tiny-heads", "2", "--tiny-intermediate", "64", "--tiny-vocab", "300",
             "--max-seq-len", "512", "--no-progress", "--no-save-final-model", "--threads", "1", "--device", "cpu"]
    for attempt in range(20):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "erl_agents.train", *flags, "--output", str(tmp_path / f"run{attempt}")]
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"run {attempt} did not exit within 180 s:\n{str(exc.stdout or '')[-2000:]}")
        assert done.returncode == 0, f"run {attempt}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        assert "run directory:" in done.stdout
