"""A learning check that only ERL can pass: the trainer's real loop, a lock whose key no first attempt can guess.

The env (tests/lock_env.py): each task shows one of 32 locks; one of 64 keys opens it, by a fixed secret table. A
first attempt opens it by chance 1/64, so RLVR's groups almost never hold a success and carry no signal. The
reflector is privileged: it knows the table and writes the lock's key into the retry's system prompt. The policy
starts as an instruction follower that knows nothing of the table (``lock_env.instruction_follower``: a tiny Llama
built in code and trained, supervised, to play whatever key its system prompt names, on keys and locks drawn
independently; the stand-in for a pretrained model that can follow a reflection). So retries succeed from the start,
and the only way the *first* attempt, under the initial prompt, can learn the table is ERL's consolidation: the
successful retry re-scored under the initial prompt (distilled copies, advantage max(r2, 0)). Held-out: first
attempts only, initial prompt, no reflection, on seeds training never draws (the trainer's own evaluation).

``test_only_erl_learns_the_secret_table`` runs ``Trainer(config).train()`` three times from the same initial model
(80 steps of 32 tasks, lr 6e-4): ERL must reach held-out first-attempt success >= 0.6; ERL with the consolidation
copies removed (distillation off), and RLVR for the same steps, must stay below it.

Measured (held-out first-attempt success at steps 0 / 20 / 40 / 60 / 80, 64 tasks x 2 samples; one torch thread,
on the shared 2-core machine under load; each seed builds its own initial model, ~20 s, then ERL 17-29 s,
distillation off 17-21 s, RLVR 12-15 s; the whole test, seed 0, 54-76 s):

| seed | ERL | distillation off | RLVR (8 samples a task) |
|---|---|---|---|
| 0 (the test's) | 0.00 / 0.56 / 0.98 / 0.97 / 0.99 | 0.00 / 0.05 / 0.05 / 0.03 / 0.03 | 0.00 at every evaluation |
| 1 | 0.00 / 0.13 / 0.60 / 0.77 / 0.95 | 0.00 / 0.05 / 0.03 / 0.05 / 0.03 | 0.00 / 0.02 / 0.02 / 0.06 / 0.06 |
| 2 | 0.00 / 0.20 / 0.94 / 1.00 / 0.96 | 0.00 / 0.00 / 0.02 / 0.02 / 0.02 | 0.00 / 0.03 / 0.03 / 0.03 / 0.03 |
| 3 | 0.03 / 0.97 / 0.98 / 1.00 / 1.00 | 0.03 / 0.05 / 0.03 / 0.08 / 0.05 | 0.03 / 0.05 / 0.05 / 0.05 / 0.05 |

Retries succeed from the first step (95-100% of them), so without distillation the first attempt never sees the
answer under its own prompt and stays at chance; RLVR's groups of 8 first attempts hold a success about once in 8
tasks, too rarely to learn 32 table entries in 80 steps.

Planted faults, one at a time, each reverted (docs/testing.md, "Planted faults"): ERL fails the bar (held-out 0.05
or less at step 80) when the reflection-and-retry branch of ``rollout._finish`` rewards r1 (so no retry scores and
no copy is made), when ``consolidation_copies`` keeps the reflected prompt (the copies teach the retry to follow its
prompt, not the first attempt the table), and when ``assign_advantages`` gives distilled copies advantage 0.
Rewarding only the *reflection* rows with r1 goes unnoticed here, by design: the reflector is external, so a step
has no reflection rows to reward (``tests/agents/test_trainer_rows.py`` pins that reward).
"""

from __future__ import annotations

import pytest

import erl_agents.batch as batch_module
from erl_agents.config import build_config
from erl_agents.trainer import Trainer
from lock_env import LOCK_ID, instruction_follower, privileged_reflector

LOCKS, KEYS = 32, 64
BAR = 0.6
SEED = 0


def lock_run(tmp_path, model: str, algo: str = "erl", seed: int = SEED, distill: bool = True) -> list[float]:
    """Held-out first-attempt success at every evaluation of one run (steps 0, 20, 40, 60, 80)."""
    config = build_config(flags=dict(
        preset="cpu-tiny", env=LOCK_ID, env_kwargs={"locks": LOCKS, "keys": KEYS}, algo=algo, model=model,
        seed=seed, output=str(tmp_path / f"{algo}-{distill}-{seed}"), steps=80, tasks_per_step=32, n_erl=4,
        n_rlvr=8, lr=6e-4, reflector="rule", max_seq_len=256, eval_every=20, eval_tasks=64, eval_samples=2,
        checkpoint_every=0, save_final_model=False, progress=False, time_limit_min=0.0, threads=1,
        engine="hf"))  # the engine its table was measured on (auto would pick vLLM for a saved model)
    trainer = Trainer(config)
    if algo == "erl":
        # The privileged reflector (it knows the secret table) in place of the rule reflector the config names.
        for env in trainer.train_envs:
            env.reflector = privileged_reflector(KEYS)
    with pytest.MonkeyPatch.context() as patch:
        if not distill:
            patch.setattr(batch_module, "consolidation_copies", lambda *args, **kwargs: [])
        metrics = trainer.train()
    return [m["eval/success"] for m in metrics if "eval/success" in m]


@pytest.fixture(scope="module")
def follower(tmp_path_factory) -> str:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return instruction_follower(str(tmp_path_factory.mktemp("follower")), LOCKS, KEYS, seed=SEED, steps=400)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_only_erl_learns_the_secret_table(tmp_path, follower):
    erl = lock_run(tmp_path, follower)
    no_distillation = lock_run(tmp_path, follower, distill=False)
    rlvr = lock_run(tmp_path, follower, algo="rlvr")
    assert erl[0] < 0.1 and erl[-1] >= BAR, (erl, no_distillation, rlvr)
    assert no_distillation[-1] < BAR, (erl, no_distillation, rlvr)
    assert rlvr[-1] < BAR, (erl, no_distillation, rlvr)
