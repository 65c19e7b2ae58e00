"""The training loop, top to bottom: rollout -> advantages -> loss -> update -> log -> eval -> checkpoint.

``--algo rlvr`` samples n first attempts per task and forms one GRPO group per task. ``--algo erl`` runs each
episode through ``ReflectionWrapper`` (first attempt, reflection on failure, second attempt with the reflection as
system prompt, shared memory) and adds consolidation copies; groups are per (task, role) (PAPER.md sections 1-2).

Data parallel under ``torchrun`` (``erl_agents.distributed``): each rank plays its block of a step's tasks, the loss
uses normalisers of the whole batch (micro-batch and rank results sum to the full-batch loss), DDP all-reduces the
gradients, metrics are reduced over ranks, and every file write goes through ``RunWriter``, which only rank 0
enables. Without ``torchrun`` the same code runs as one process, every collective a no-op.
"""

from __future__ import annotations

import random
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from erl_agents import checkpoint as ckpt
from erl_agents.accelerator import (autocast, grad_scaler, peak_memory_gb, reset_peak_memory, resolve_device,
                                    resolve_precision)
from erl_agents.batch import assign_advantages, distillation_prompt, reflection_repeats, training_rows
from erl_agents.config import TrainConfig, config_to_dict
from erl_agents.distributed import World, place_pool_episodes, shard_bounds, sync_memory
from erl_agents.engines import Engine, resolve_engine
from erl_agents.envs import (epoch_batch, epoch_steps, make_env, reflection_wrappers, training_data_warnings,
                             training_tasks)
from erl_agents.evaluate import (EVAL_SEED_BASE, eval_overlap_problem, eval_tasks, evaluate, merge_eval_results,
                                 paper_questions, paper_questions_problem, paper_tasks_folder)
from erl_agents.lora import adapter_state_dict, apply_lora, is_lora, load_adapter_state_dict
from erl_agents.metrics import finite_row, merge_rollout_rows, rollout_metrics
from erl_agents.initial_model import INITIAL_MODEL_SPEC, as_json_value, initial_model_spec, load_run_policy
from erl_agents.models import Policy
from erl_agents.decoding import reflection_prefill
from erl_agents.rollout import ConstraintTable, ResponseBudget, SamplingParams, run_episodes
from erl_agents.run_folder import RunLock, RunWriter, check_resume, claim_folder, save_folder
from erl_agents.sharding import (full_state_dict, gathered, load_sharded_state, save_sharded_state, shard_model,
                                 sharded_grad_scaler)
from erl_agents.tracking import Trackers, open_trackers
from erl_agents.update import NonFiniteTrainingError, TokenScorer, check_numerics, lr_factor, policy_update
from erl_envs.reflection.prompt_templates import apply_templates, load_templates

__all__ = ["Trainer", "INITIAL_MODEL_SPEC"]


_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class Trainer:
    """Owns the policy, optimizer, envs, reflection memory and run directory; ``train()`` is the loop."""

    def __init__(self, config: TrainConfig, is_main_process: bool = True, world: World | None = None,
                 warmup_teacher=None):
        self.config = config
        # The reflection warm-up's teacher: any callable ReflectionRequest -> text; None: config.warmup_reflector.
        self.warmup_teacher = warmup_teacher
        # Data parallel (see erl_agents.distributed): this rank rolls out tasks [task_range) of each step.
        self.world = world or World()
        if config.tasks_per_step < self.world.size:
            raise ValueError(f"tasks_per_step ({config.tasks_per_step}) must be at least the number of ranks "
                             f"({self.world.size}): a task's group is never split across ranks")
        self.task_range = shard_bounds(config.tasks_per_step, self.world.rank, self.world.size)
        self.writer = RunWriter(config.output, enabled=is_main_process and self.world.is_main)
        # One run per folder: a second one would interleave metrics and race on checkpoint names.
        self._lock = RunLock(config.output) if self.writer.enabled else None
        self.engine: Engine | None = None  # samples the rollouts (erl_agents.engines); built last in _build
        self.trackers = Trackers()  # --report-to: copies of each metrics row (opened once the run is built)
        self._replaced_prompts: dict | None = None  # --prompts: the wording the file replaced, put back by close()
        try:
            self._build(config)
        except BaseException:
            self.close()  # a trainer that could not be built must not keep its folder locked
            raise

    def _build(self, config: TrainConfig) -> None:
        """Everything the run needs, in order: seeds, the checkpoint to resume, envs, model, optimizer, eval tasks."""
        if self.writer.enabled and not config.resume:
            claim_folder(config.output, config.overwrite)  # a folder holds one run: never mix a new one into it
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device, self.world.local_rank)
        # Trainable weights and AdamW's moments in fp32, compute under autocast (see erl_agents.accelerator).
        self.precision = resolve_precision(config.dtype, config.precision, self.device.type)
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        if config.prompts:  # the file's wording, before any env (or the tiny tokenizer) reads the prompt modules
            self._replaced_prompts = apply_templates(load_templates(config.prompts))
        for line in training_data_warnings(config.preset, config.env, config.env_kwargs):
            warnings.warn(line, RuntimeWarning, stacklevel=3)

        # A resume is checked before anything is built: a refused one costs nothing.
        resume_state = self._latest_state() if config.resume else None
        history = check_resume(config, resume_state) if resume_state is not None else []
        # The tiny model this run started from: a resumed run keeps its own, whatever changed since.
        self.initial_model_spec = as_json_value((resume_state or {}).get("initial_model")
                                                or initial_model_spec(config))
        # Envs: one per episode of a step, reused every step (HotpotQA's index is built once, not per episode).
        self.group_size = config.group_size
        pool = (self.task_range[1] - self.task_range[0]) * self.group_size
        self.envs = [self._make_env(config.env_kwargs) for _ in range(pool)]
        # Held-out envs: the training envs themselves unless eval_env_kwargs points evaluation at other data (an env
        # without a paper test set, such as HotpotQA, would otherwise evaluate on its training questions).
        self.eval_envs = self.envs
        if config.eval_env_kwargs:
            eval_kwargs = {**config.env_kwargs, **config.eval_env_kwargs}
            self.eval_envs = [self._make_env(eval_kwargs) for _ in range(pool)]
        overlap = eval_overlap_problem(self.envs[0], self.eval_envs[0])
        if overlap and not config.allow_eval_overlap:
            from erl_envs.qa.data import EvalOverlapError

            raise EvalOverlapError(overlap)
        if overlap:
            warnings.warn(f"evaluating on training questions (allow_eval_overlap is set): {overlap}", RuntimeWarning,
                          stacklevel=2)
        if config.eval_set == "paper" and config.env.startswith("ERL-HotpotQA"):
            # The paper's questions are played by index: the held-out env must hold them, in the paper's order.
            mismatch = paper_questions_problem(self.eval_envs[0], paper_questions(paper_tasks_folder()) or [])
            if mismatch:
                raise ValueError(mismatch)
        self.memory = None
        self.train_envs = self.envs
        if config.algo == "erl":
            saved = resume_state.get("memory") if resume_state is not None else None
            from erl_agents.warmup import teacher_reflector

            reflector = teacher_reflector(config.reflector) if config.reflector != "policy" else None
            self.memory, self.train_envs = reflection_wrappers(self.envs, config, reflector, saved, self.world.enabled)

        # Rank 0 writes the tiny model's files before the other ranks read them.
        if not self.world.is_main:
            self.world.barrier()
        self.policy = self._load_policy()
        if self.world.is_main:
            self.world.barrier()
        self.policy.model.to(self.device)
        if config.gradient_checkpointing:
            # Non-reentrant checkpointing needs no input that requires grad (frozen LoRA bases) and works under DDP.
            self.policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if config.lora_r:
            self.policy.model = apply_lora(self.policy.model, config.lora_r, config.lora_alpha, config.lora_targets)
            # The adapters train (storage dtype, fp32 unless lossy storage was asked for); the frozen base is only
            # ever read under autocast, so it may be kept in the compute dtype.
            for parameter in self.policy.model.parameters():
                parameter.data = parameter.data.to(self.precision.storage if parameter.requires_grad
                                                   else self.precision.frozen)
        # The KL anchor: the initial policy, kept only when the KL term is on. With LoRA it is the policy with its
        # adapters switched off (no second copy of the weights); otherwise a frozen copy.
        self.ref_model = None
        if config.kl_coef > 0 and config.lora_r:
            self.ref_model = self.policy.model
        elif config.kl_coef > 0:
            self.ref_model = self._load_policy(reference=True).model.to(self.device).eval()
            self.ref_model.requires_grad_(False)
        # --sharding fsdp under torchrun: the policy and the reference are sharded over the ranks (erl_agents.sharding),
        # before the optimizer is built on the shards. One process has nothing to shard.
        self.sharded = self.world.enabled and config.sharding == "fsdp"
        if self.sharded:
            shard_model(self.policy.model, self.precision, self.device, config.offload)
            if self.ref_model is not None and self.ref_model is not self.policy.model:
                shard_model(self.ref_model, self.precision, self.device, config.offload, frozen=True)
        if self.world.rank:
            # Same initial weights on every rank (above), different sampling streams from here on.
            torch.manual_seed(config.seed + 1_000_003 * self.world.rank)
        self.optimizer = torch.optim.AdamW([p for p in self.policy.model.parameters() if p.requires_grad], lr=config.lr,
                                           betas=(0.9, config.adam_beta2), weight_decay=config.weight_decay)
        self.scaler = grad_scaler(self.precision, self.device)  # fp16 only: loss scaling
        if self.scaler is not None and self.sharded:
            self.scaler = sharded_grad_scaler(self.device)
        self.eval_tasks = eval_tasks(config.env, config.env_kwargs, config.eval_set, config.eval_tasks)
        # The run's length: `steps`, or with epochs every pass over the training list (whichever ends first).
        self.total_steps = config.steps
        if config.epochs:
            self.train_tasks = training_tasks(self.envs[0], config.epoch_tasks)
            length = config.epochs * epoch_steps(len(self.train_tasks), config.tasks_per_step)
            self.total_steps = min(config.steps, length) if config.steps else length
        # The schedule counts every update, the reflection warm-up's included.
        self.scheduled_steps = self.total_steps + config.reflection_warmup
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, config.warmup_steps, config.lr_schedule, self.scheduled_steps))
        self.step = 0
        self.metrics: list[dict] = []
        self.time_before = {"training": 0.0, "elapsed": 0.0}  # seconds spent before this process (resumed runs)
        if resume_state is not None:
            self._resume(resume_state)
        else:
            self.writer.rewrite_metrics([])
        self.writer.write_json("config.json", {**config_to_dict(config), **({"history": history} if history else {})})
        if self.writer.enabled:
            self.trackers = open_trackers(config.report_to, config.output, config_to_dict(config))
        # What the update trains through: the policy itself, or under data parallel a DDP wrapper that all-reduces
        # its gradients (DDP also broadcasts rank 0's weights here, so every rank starts identical).
        self.train_model = self.policy.model
        if self.world.enabled and not self.sharded:
            self.train_model = DistributedDataParallel(
                TokenScorer(self.policy.model), device_ids=[self.device.index] if self.device.type == "cuda" else None)
        # The generation engine, last: it serves the weights the run starts from (a resumed run's included).
        self.engine = self._build_engine()

    # --- setup ---

    def _build_engine(self) -> Engine:
        """The engine ``--engine`` names (``auto``: vLLM where installed and serving the model, else hf). Under
        torchrun each rank drives its own engine on its block of tasks."""
        from erl_agents.engines.hf import HFEngine

        cfg = self.config
        name, why = resolve_engine(cfg.engine, cfg.model)
        self.engine_name = name
        self.writer.write_json("engine.json", {"engine": name, "asked": cfg.engine, "why_not_vllm": why})
        if name == "hf":
            return HFEngine(self.policy, kv_reuse=cfg.kv_reuse)
        from erl_agents.engines.vllm import VLLMEngine

        folder = Path(cfg.output) / "engine_model" / f"rank{self.world.rank}"
        dtype = cfg.vllm_dtype if cfg.vllm_dtype != "auto" else _DTYPE_NAMES[self.precision.compute or torch.float32]
        return VLLMEngine(self.policy, folder, dtype=dtype,
                          max_model_len=cfg.max_seq_len, gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                          tensor_parallel_size=cfg.vllm_tensor_parallel_size, kv_cache_gb=cfg.vllm_kv_cache_gb,
                          seed=cfg.seed + 1_000_003 * self.world.rank, sleep_mode=cfg.vllm_sleep_mode,
                          threads=cfg.threads)

    def _make_env(self, env_kwargs: dict) -> gym.Env:
        """One env of the run; with a response budget, wrapped so that the rollout can end an attempt."""
        env = make_env(self.config.env, env_kwargs)
        return ResponseBudget(env) if self.config.response_budget else env

    def _load_policy(self, reference: bool = False) -> Policy:
        """The policy in its storage dtype (fp32 unless lossy storage), or the frozen KL reference (the compute
        dtype is enough for weights that never train); the tiny model follows the same rules as a loaded one."""
        dtype = _DTYPE_NAMES[self.precision.frozen if reference else self.precision.storage]
        return load_run_policy(self.config, dtype, str(self.device), self.initial_model_spec, self.envs[0],
                               writes=self.writer.enabled, reference=reference)

    def _sampling(self) -> tuple[SamplingParams, SamplingParams, SamplingParams]:
        cfg = self.config
        return (SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens),
                SamplingParams(cfg.reflect_temperature, cfg.reflect_top_p, 0, cfg.reflect_max_new_tokens),
                SamplingParams(cfg.eval_temperature, cfg.eval_top_p, cfg.eval_top_k, cfg.max_new_tokens))

    # --- the loop ---

    def train(self) -> list[dict]:
        """Run the loop to ``steps`` (or the time limit); the run folder's lock is released however it ends."""
        try:
            return self._train()
        finally:
            self.close()

    def close(self) -> None:
        """Release the run folder for the next run (``train`` does this itself), and put back the prompt wording a
        ``prompts`` file replaced."""
        self.trackers.close()
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self._replaced_prompts is not None:
            apply_templates(self._replaced_prompts)
            self._replaced_prompts = None
        if self._lock is not None:
            self._lock.release()

    def _train(self) -> list[dict]:
        cfg = self.config
        sampling, reflect_sampling, eval_sampling = self._sampling()
        # Training time (the time limit's clock) and wall time continue from the checkpoint's on a resume.
        started = time.perf_counter()
        first_row = len(self.metrics)
        progress = None
        if cfg.progress and self.writer.enabled:
            from tqdm.auto import tqdm

            progress = tqdm(total=self.total_steps, initial=self.step, desc=f"{cfg.algo} {cfg.env}", dynamic_ncols=True)
        if self.step == 0 and cfg.eval_every and cfg.eval_at_start and not self.metrics:
            self._log(self._evaluate(eval_sampling, {"step": 0}))
        if self.step == 0 and cfg.algo == "erl" and cfg.reflection_warmup:
            self._warm_up(sampling)
        prefix, stop = reflection_prefill(self.config.reflect_prefill)
        while self.step < self.total_steps:
            self.step += 1
            step_start = time.perf_counter()
            timing: dict[str, float] = {}
            reset_peak_memory(self.device)

            # 1. Rollout: n episodes of each task, all episodes batched turn by turn. The step's tasks: the next
            # batch of the epoch order, or fresh seeds (rank 0's draw holds for every rank); each rank plays its own
            # block of tasks.
            tasks = [i for i in range(*self.task_range) for _ in range(self.group_size)]
            if cfg.epochs:
                batch = epoch_batch(len(self.train_tasks), cfg.tasks_per_step, self.step, cfg.seed)
                resets = [self.train_tasks[batch[i]] for i in tasks]
            else:
                seeds = self.world.broadcast(self.rng.integers(0, EVAL_SEED_BASE, size=cfg.tasks_per_step))
                resets = [(int(seeds[i]), None) for i in tasks]
            table = ConstraintTable()
            self.policy.model.eval()
            memory_updates = self.memory.updates if self.memory is not None else 0
            pool_start = place_pool_episodes(self.memory, self.world, self.task_range[0] * self.group_size)
            with autocast(self.device, self.precision.compute), gathered(self.policy.model):
                episodes = run_episodes(self.engine, self.train_envs, resets, tasks, sampling, reflect_sampling,
                                        constrained=cfg.constrained_actions, max_seq_len=cfg.max_seq_len, table=table,
                                        timing=timing, mask_truncated=cfg.mask_truncated,
                                        time_limit=cfg.episode_time_limit, token_limit=cfg.episode_token_limit,
                                        kv_reuse=cfg.kv_reuse, response_budget=cfg.response_budget,
                                        reflect_prefix=prefix, reflect_stop=stop)
            if self.memory is not None and self.world.enabled:
                self.memory = sync_memory(self.memory, self.world, memory_updates, self.train_envs, episodes,
                                          pool_start, cfg.tasks_per_step * self.group_size)
            trajectories = training_rows(self.policy, episodes, cfg, distillation_prompt(self.envs[0]),
                                         reflection_repeats(self.envs[0]))

            # 2. Advantages: GRPO per (task, role); distilled copies max(r2, 0).
            assign_advantages(trajectories, cfg)

            # 3-4. Loss and update; then the engine serves the new weights.
            clock = time.perf_counter()
            self.engine.sleep()
            try:
                update = policy_update(self.train_model, self.optimizer, self.scheduler, trajectories, table, cfg,
                                       self.policy.tokenizer.pad_token_id, self.ref_model, self.rng, world=self.world,
                                       scaler=self.scaler)
            except NonFiniteTrainingError as exc:
                raise NonFiniteTrainingError(
                    f"stopping at step {self.step}: {exc}; the step was not saved, so resume from the checkpoints in "
                    f"{Path(cfg.output) / 'checkpoints'} with a lower --lr (--resume --resume-changes lr)") from None
            timing["update"] = time.perf_counter() - clock
            clock = time.perf_counter()
            self.engine.sync(self.policy.model)
            timing["weight_sync"] = time.perf_counter() - clock

            # 5. Log (rollout metrics over all ranks; time/ keys are this machine's measurements).
            rollout = rollout_metrics(episodes, trajectories, self.memory)
            if self.world.enabled:
                rollout = merge_rollout_rows(self.world.gather(rollout))
            row = {"step": self.step, **rollout, **update, "lr": self.scheduler.get_last_lr()[0]}
            row.update({f"time/{k}": v for k, v in timing.items()})
            row["time/step"] = time.perf_counter() - step_start
            row["time/generation_tokens_per_s"] = row["tokens/generated"] / max(timing["generation"], 1e-9)
            row["time/update_tokens_per_s"] = update["trained_tokens"] / max(timing["update"], 1e-9)
            row["time/peak_memory_gb"] = self.world.max(peak_memory_gb(self.device))

            # 6. Evaluate.
            # The time limit counts training only: held-out evaluation is measurement, not training.
            training_seconds = (self.time_before["training"] + time.perf_counter() - started
                                - sum(m.get("time/eval", 0.0) for m in self.metrics[first_row:]))
            out_of_time = self.world.any(cfg.time_limit_min > 0 and training_seconds / 60 >= cfg.time_limit_min)
            # The sampled-token budget (what RLVR and ERL runs are matched on); metrics survive a resume, so it
            # counts the whole run. Rollout metrics are already merged over ranks: every rank sees the same sum.
            row["tokens/sampled_total"] = row["tokens/generated"] + sum(m.get("tokens/generated", 0)
                                                                        for m in self.metrics)
            out_of_tokens = bool(cfg.max_sampled_tokens and row["tokens/sampled_total"] >= cfg.max_sampled_tokens)
            out_of_time = out_of_time or out_of_tokens
            last = self.step == self.total_steps or out_of_time
            if cfg.eval_every and (self.step % cfg.eval_every == 0 or last):
                row = self._evaluate(eval_sampling, row)
            row["time/elapsed"] = self.time_before["elapsed"] + time.perf_counter() - started
            row["time/training"] = training_seconds
            self._log(row)
            if progress is not None:
                progress.update(1)
                progress.set_postfix({k: round(row[k], 3) for k in ("success/attempt1", "eval/success") if k in row})
            check_numerics(self.metrics, row, self.step, cfg.max_bad_steps, Path(cfg.output) / "checkpoints")

            # 7. Checkpoint.
            if (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0) or last:
                self.save()
            if out_of_time:
                break
        if progress is not None:
            progress.close()
        if cfg.save_final_model:
            self._save_final_model(Path(cfg.output) / "final_model")
        if self.writer.enabled:
            from erl_agents.plots import plot_learning_curves

            plot_learning_curves(self.metrics, Path(cfg.output) / "curves.png", title=f"{cfg.algo} on {cfg.env}")
            self.trackers.log_image(Path(cfg.output) / "curves.png")
        self.world.barrier()  # every rank returns once rank 0's files are complete
        return self.metrics

    # --- pieces of the loop ---

    def _warm_up(self, sampling: SamplingParams) -> None:
        """``reflection_warmup`` steps of supervised reflection rows from the teacher (``erl_agents.warmup``), each
        logged as a metrics row with ``warmup_step``; a resumed run continues the warm-up where its rows end."""
        from erl_agents.warmup import play_randomly, teacher_envs, teacher_nll, teacher_reflector, teacher_rows

        cfg = self.config
        done = sum(1 for m in self.metrics if "warmup_step" in m)
        if done >= cfg.reflection_warmup:
            return
        teacher = self.warmup_teacher if self.warmup_teacher is not None else teacher_reflector(cfg.warmup_reflector)
        envs, captures = teacher_envs(self.envs, teacher, cfg.gate_threshold, cfg.reflection_instructions or None)
        random_play = all(getattr(env.unwrapped, "valid_actions", None) for env in self.envs)
        prefix, stop = reflection_prefill(self.config.reflect_prefill)
        for number in range(done + 1, cfg.reflection_warmup + 1):
            clock = time.perf_counter()
            # One task per episode: the rows are supervised, so they need no groups, and distinct boards teach more.
            low, high = (bound * self.group_size for bound in self.task_range)
            count = cfg.tasks_per_step * self.group_size
            seeds = self.world.broadcast(self.rng.integers(0, EVAL_SEED_BASE, size=count))
            tasks = list(range(low, high))
            resets = [(int(seeds[k]), None) for k in tasks]
            table = ConstraintTable()
            self.policy.model.eval()
            generated = 0
            if random_play:
                solved = play_randomly(envs, resets, self.rng)
            else:
                with autocast(self.device, self.precision.compute), gathered(self.policy.model):
                    episodes = run_episodes(self.engine, envs, resets, tasks, sampling,
                                            constrained=cfg.constrained_actions, max_seq_len=cfg.max_seq_len,
                                            table=table, kv_reuse=cfg.kv_reuse)
                solved = [e.success for e in episodes]
                generated = sum(e.generated_tokens for e in episodes)
            rows = teacher_rows(self.policy, captures, prefix, stop, cfg.max_seq_len)
            with autocast(self.device, self.precision.compute), gathered(self.policy.model):
                nll = teacher_nll(self.policy, rows, cfg.micro_batch_size)
            if cfg.warmup_lr:
                for group in self.optimizer.param_groups:
                    group["lr"] = cfg.warmup_lr
            update = policy_update(self.train_model, self.optimizer, self.scheduler, rows, table, cfg,
                                   self.policy.tokenizer.pad_token_id, self.ref_model, self.rng, world=self.world,
                                   scaler=self.scaler)
            self.engine.sync(self.policy.model)
            for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
                group["lr"] = lr  # the schedule's rate again (an update without rows does not step the schedule)
            # Sums over ranks (no-ops without data parallel); the NLL is weighted by each rank's teacher tokens.
            scored_here = sum(t.num_model_tokens for t in rows)
            generated, successes, played, count, scored, nll_sum = self.world.sum([
                float(generated), float(sum(solved)), float(len(solved)), float(len(rows)), float(scored_here),
                nll * scored_here if rows else 0.0])
            self._log({"step": 0, "warmup_step": number, "tokens/generated": int(generated),
                       "warmup/random_player": float(random_play),
                       "warmup/attempt1_success": successes / max(played, 1), "warmup/rows": int(count),
                       "warmup/nll_before": nll_sum / scored if scored else float("nan"),
                       "warmup/trained_tokens": update["trained_tokens"],
                       "time/warmup_step": time.perf_counter() - clock})
        self.save()

    def _evaluate(self, sampling: SamplingParams, row: dict) -> dict:
        cfg = self.config
        clock = time.perf_counter()
        self.policy.model.eval()
        # Evaluation draws from its own RNG stream, so evaluating (or not) never changes the training run.
        # Under data parallel each rank evaluates its block of the held-out tasks and the results are merged.
        tasks = self.world.shard(self.eval_tasks)
        with torch.random.fork_rng(devices=[]), autocast(self.device, self.precision.compute), \
                gathered(self.policy.model):
            torch.manual_seed(cfg.seed * 1_000_003 + self.step + 7_919 * self.world.rank)
            result = evaluate(self.engine, self.eval_envs, tasks, cfg.eval_samples, sampling,
                              constrained=cfg.constrained_actions, max_seq_len=cfg.max_seq_len,
                              kv_reuse=cfg.kv_reuse, response_budget=cfg.response_budget,
                              progress=cfg.progress and self.writer.enabled) if tasks else None
        if self.world.enabled:
            result = merge_eval_results(self.world.gather(result), cfg.eval_samples)
        row = dict(row)
        row.update({f"eval/{k}": v for k, v in result.items()})
        row["time/eval"] = time.perf_counter() - clock
        return row

    def _log(self, row: dict) -> None:
        row = finite_row(row)  # strict JSON: the loss of a step with no update is null, not NaN
        self.metrics.append(row)
        self.writer.append_metrics(row)
        self.trackers.log(row)

    # --- checkpoints ---

    def save(self) -> None:
        # Every rank's RNG streams go into rank 0's checkpoint, so a resumed run continues each rank exactly.
        rank_rng = self.world.gather(ckpt.rng_state(self.rng)) if self.world.enabled else None
        folder = Path(self.config.output) / "checkpoints"
        if self.sharded:
            # Every rank writes its shards of the weights (with LoRA the adapters only) and of AdamW's state.
            lora = is_lora(self.policy.model)

            def write_shards(shards: Path) -> dict:
                return {"optimizer_groups": save_sharded_state(shards, self.policy.model, self.optimizer, lora)}

            payload = self._run_state(rank_rng) if self.writer.enabled else None
            ckpt.save_sharded_checkpoint(folder, self.step, write_shards, payload, self.world,
                                         self.config.keep_checkpoints)
            return
        if not self.writer.enabled:
            return
        payload = {
            # With LoRA only the adapters are saved: the base weights never change.
            "model": adapter_state_dict(self.policy.model) if is_lora(self.policy.model)
            else self.policy.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            **self._run_state(rank_rng),
        }
        ckpt.save_checkpoint(folder, self.step, payload, self.config.keep_checkpoints)

    def _run_state(self, rank_rng: list | None) -> dict:
        """Everything a checkpoint holds besides the weights and the optimizer's state."""
        payload = {
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": ckpt.rng_state(self.rng),
            "memory": self.memory.to_dict() if self.memory is not None else None,
            "metrics": self.metrics,
            "config": as_json_value(config_to_dict(self.config)),
            "training_seconds": self.metrics[-1].get("time/training", 0.0) if self.metrics else 0.0,
            "elapsed_seconds": self.metrics[-1].get("time/elapsed", 0.0) if self.metrics else 0.0,
            "initial_model": self.initial_model_spec if self.config.model == "tiny" else None,
        }
        if rank_rng is not None:
            payload["rank_rng"] = rank_rng
        return payload

    def _save_final_model(self, path: Path) -> None:
        """``final_model/``, a Hugging Face folder (with LoRA, the adapter) that ``from_pretrained`` loads; a sharded
        model is gathered first, on every rank, and rank 0 writes it."""
        state = full_state_dict(self.policy.model, trainable_only=is_lora(self.policy.model)) if self.sharded else None
        if not self.writer.enabled:
            return
        if state is None:
            save_folder(path, self.policy.save)
            return

        def save(folder: str) -> None:
            self.policy.model.save_pretrained(folder, state_dict=state)
            self.policy.tokenizer.save_pretrained(folder)

        save_folder(path, save)

    def _latest_state(self) -> dict:
        """The newest checkpoint that verifies; a corrupt or unfinished newer one is skipped with a warning."""
        folder = Path(self.config.output) / "checkpoints"
        if ckpt.latest_checkpoint(folder) is None:
            raise FileNotFoundError(f"--resume: no checkpoint in {folder}")
        _, state = ckpt.load_latest_checkpoint(folder)
        return state

    def _resume(self, state: dict) -> None:
        """Weights, optimizer, schedule, RNGs, metrics (the memory was restored before the wrappers were built)."""
        lora = is_lora(self.policy.model)
        if "shards" in state:
            # A sharded run's checkpoint, read by any number of ranks, sharded or not.
            load_sharded_state(state["shards"], self.policy.model, self.optimizer, state["optimizer_groups"], lora)
        elif self.sharded:
            raise ValueError("the checkpoint holds the whole state of an unsharded run: resume it with --sharding ddp "
                             "(its next checkpoint can then be resumed with --sharding fsdp)")
        else:
            try:
                if lora:
                    load_adapter_state_dict(self.policy.model, state["model"])
                else:
                    self.policy.model.load_state_dict(state["model"])
            except (RuntimeError, KeyError, TypeError) as exc:  # torch names every mismatched tensor, many lines
                raise ValueError(f"the checkpoint's weights do not fit this run's model "
                                 f"({' '.join(str(exc).split())[:300]})") from exc
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        cfg = self.config
        # Update settings a resume was allowed to change (--resume-changes) apply from here on: the optimizer's and
        # the schedule's saved copies would otherwise silently keep the old ones.
        factor = lr_factor(self.scheduler.last_epoch, cfg.warmup_steps, cfg.lr_schedule, self.scheduled_steps)
        self.scheduler.base_lrs = [cfg.lr for _ in self.optimizer.param_groups]
        for group in self.optimizer.param_groups:
            group.update(lr=cfg.lr * factor, weight_decay=cfg.weight_decay, betas=(0.9, cfg.adam_beta2))
        rng = state["rng"]
        saved = state.get("rank_rng") or [rng]
        if len(saved) == self.world.size:
            rng = saved[self.world.rank]
        else:
            warnings.warn(f"the checkpoint was written by {len(saved)} rank(s) and this run has {self.world.size}: "
                          "weights, optimizer and schedule resume exactly, sampling does not", RuntimeWarning)
        ckpt.set_rng_state(rng, self.rng)
        if len(saved) != self.world.size and self.world.rank:
            torch.manual_seed(self.config.seed + 1_000_003 * self.world.rank)
        self.metrics = [finite_row(row) for row in state["metrics"]]
        self.step = int(state["step"])
        last = self.metrics[-1] if self.metrics else {}
        # Older checkpoints have no time fields: their last metrics row holds the same numbers.
        self.time_before = {"training": float(state.get("training_seconds", last.get("time/training", 0.0))),
                            "elapsed": float(state.get("elapsed_seconds", last.get("time/elapsed", 0.0)))}
        self.writer.rewrite_metrics(self.metrics)
