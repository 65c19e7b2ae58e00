"""A warm start that reads the board: supervised fine-tuning on solver demonstrations of training tasks.

Why: the untrained SmolLM2 policy plays much the same first move on every map (benchmarks/results/board_dependence.md),
so RL from it mostly reinforces a constant move, and a comparison of ERL with RLVR from there measures little.
Imitating shortest solutions of *training* tasks gives a policy whose moves depend on the board, which RL can then
improve. Demonstrations are rendered through the env, its prompts and the policy's ``ChatFormat`` exactly as the
rollout renders an episode (system prompt and first observation, then each reply and the env's next message), so
the warm start learns the very conversations the trainer will play; the loss covers the assistant's tokens only.

    erl-sft --preset cpu-smol --demos 96 --steps 16 --output runs/warm_start --threads 1   # or python -m erl_agents.sft
    erl-train --preset cpu-smol --model runs/warm_start/final_model ...

The output folder holds ``metrics.jsonl`` (loss per step, validation success on unseen training seeds),
``loss.png``, ``config.json``, checkpoints for ``--resume`` and ``final_model`` (an ordinary Hugging Face folder,
safetensors, LoRA merged in), plus ``step_<N>`` model folders for the steps given by ``--save-at``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import gymnasium as gym
import numpy as np
import torch

from erl_agents.evaluate import EVAL_SEED_BASE, Task

__all__ = ["SFTConfig", "goal_distances", "shortest_first_moves", "solver_moves", "Demonstration",
           "demonstrations", "render_demonstration", "sft_loss", "train_sft", "main"]


# ---------------------------------------------------------------------------------------------- solvers


def goal_distances(rows: Sequence[str]) -> dict[tuple[int, int], int]:
    """Fewest moves from every cell that can reach the goal ``G`` without entering a hole ``H`` (breadth-first
    from the goal; a move off the board does nothing, so it never shortens a path)."""
    height, width = len(rows), len(rows[0])
    goal = next((r, c) for r in range(height) for c in range(width) if rows[r][c] == "G")
    distance = {goal: 0}
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            nr, nc = r + dr, c + dc
            if 0 <= nr < height and 0 <= nc < width and rows[nr][nc] != "H" and (nr, nc) not in distance:
                distance[(nr, nc)] = distance[(r, c)] + 1
                queue.append((nr, nc))
    return distance


def _game(env: gym.Env) -> str:
    name = getattr(env.unwrapped, "game_name", None)
    if name not in ("FrozenLake", "Sokoban"):
        raise ValueError(f"solver demonstrations exist for the FrozenLake and Sokoban text envs, not {env.spec.id if env.spec else type(env.unwrapped).__name__}")
    return name


def shortest_first_moves(env: gym.Env) -> list[int]:
    """The moves (``GridAction`` values) that start a shortest path to the goal from the FrozenLake env's current
    position; empty when the goal cannot be reached."""
    from erl_envs.grid.actions import MOVES

    if _game(env) != "FrozenLake":
        raise ValueError("shortest_first_moves reads FrozenLake boards; for Sokoban use solver_moves")
    rows, (r, c) = env.unwrapped.map_rows, env.unwrapped.position
    distance = goal_distances(rows)
    here = distance.get((r, c))
    if here is None or here == 0:
        return []
    return [move for move, (dr, dc) in enumerate(MOVES) if distance.get((r + dr, c + dc)) == here - 1]


def solver_moves(env: gym.Env, rng: random.Random) -> list[int] | None:
    """A shortest solution from the env's current state: breadth-first for FrozenLake (ties between equally short
    first moves broken by ``rng``, so demonstrations do not favour one direction), the optimal Sokoban solver for
    Sokoban; ``None`` when there is none."""
    if _game(env) == "Sokoban":
        from erl_envs.grid.sokoban_solver import solve_sokoban

        solution = solve_sokoban(env.unwrapped.state)
        return None if solution is None else [int(m) for m in solution]
    from erl_envs.grid.actions import MOVES

    rows, position = env.unwrapped.map_rows, env.unwrapped.position
    distance = goal_distances(rows)
    if position not in distance:
        return None
    moves = []
    while distance[position] > 0:
        r, c = position
        options = [m for m, (dr, dc) in enumerate(MOVES) if distance.get((r + dr, c + dc)) == distance[position] - 1]
        move = rng.choice(options)
        moves.append(move)
        position = (r + MOVES[move][0], c + MOVES[move][1])
    return moves


# ---------------------------------------------------------------------------------------------- demonstrations


@dataclass
class Demonstration:
    """One solved training task rendered as the policy's conversation: ``mask`` is 1 on the assistant's tokens."""

    seed: int
    options: dict | None
    moves: list[int]
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)


def demonstrations(env: gym.Env, tasks: Sequence[Task], seed: int = 0) -> list[Demonstration]:
    """A shortest solution of each training task that has one within the env's step budget.

    Held-out seeds (``EVAL_SEED_BASE`` and above) are refused: a warm start must never see the held-out tasks.
    """
    rng = random.Random(seed)
    out = []
    for task_seed, options in tasks:
        if not 0 <= task_seed < EVAL_SEED_BASE:
            raise ValueError(f"task seed {task_seed} is not a training seed (training seeds are below "
                             f"{EVAL_SEED_BASE}; held-out ones start there)")
        _, info = env.reset(seed=task_seed, options=options)
        moves = solver_moves(env, rng)
        if moves is None or not moves or len(moves) > info.get("steps_left", len(moves)):
            continue
        out.append(Demonstration(task_seed, options, moves))
    return out


def render_demonstration(policy, env: gym.Env, demo: Demonstration) -> Demonstration:
    """Fill ``demo.tokens``/``mask`` by playing its moves in ``env``, rendered as ``run_episodes`` renders an
    episode: ``chat.open(system prompt, first observation)``, then per turn the reply (the env's own action string,
    as constrained decoding emits it) and its end-of-turn token (trained), then ``chat.user_turn`` (not trained).
    Raises if the moves do not solve the task."""
    from erl_envs.protocol import instructions_of

    chat, tokenizer = policy.chat, policy.tokenizer
    actions = list(env.unwrapped.valid_actions)
    obs, info = env.reset(seed=demo.seed, options=demo.options)
    tokens = chat.open(info.get("system_prompt") or instructions_of(env), obs)
    mask = [0] * len(tokens)
    for turn, move in enumerate(demo.moves):
        reply = tokenizer(actions[move], add_special_tokens=False)["input_ids"] + [chat.end_of_turn_id]
        tokens += reply
        mask += [1] * len(reply)
        obs, _, terminated, truncated, info = env.step(actions[move])
        if terminated or truncated:
            if not info.get("success") or turn != len(demo.moves) - 1:
                raise RuntimeError(f"the solver's moves for task {demo.seed} ended the episode at move {turn + 1} of "
                                   f"{len(demo.moves)} without reaching the goal")
            break
        segment = chat.user_turn(obs)
        tokens += segment
        mask += [0] * len(segment)
    else:
        raise RuntimeError(f"the solver's moves for task {demo.seed} did not end the episode")
    demo.tokens, demo.mask = tokens, mask
    return demo


def sft_loss(model: torch.nn.Module, rows: Sequence[Demonstration], pad_id: int) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood (nats) of the rows' masked tokens, and how many tokens that is."""
    from erl_agents.update import selected_logits

    width = max(len(row.tokens) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    select = torch.zeros((len(rows), width - 1), dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, :len(row.tokens)] = torch.tensor(row.tokens)
        attention[i, :len(row.tokens)] = 1
        select[i, :len(row.tokens) - 1] = torch.tensor(row.mask[1:], dtype=torch.bool)
    device = next(model.parameters()).device
    logits = selected_logits(model, ids.to(device), attention.to(device), select.to(device)).float()
    targets = ids[:, 1:][select].to(device)
    return -torch.log_softmax(logits, -1).gather(-1, targets[:, None]).sum(), len(targets)


# ---------------------------------------------------------------------------------------------- training


@dataclass
class SFTConfig:
    preset: str = "cpu-smol"  # the trainer preset whose model, env, prompts and sampling the warm start serves
    env: str = "ERL-FrozenLake-v0"
    model: str = ""  # "" = the preset's model
    demos: int = 96  # training tasks demonstrated (seeds 0..demos-1 of the preset's training env)
    validation: int = 32  # further training seeds (never demonstrated) played after each save, as a stopping signal
    steps: int = 60  # optimizer steps
    batch: int = 8  # demonstrations per step
    micro_batch: int = 4  # demonstrations per forward/backward
    lr: float = 5e-4
    lora_r: int = 16  # 0 = train every weight
    lora_alpha: float = 32.0
    seed: int = 0
    save_at: list[int] = field(default_factory=list)  # also save the model at these steps (step_<N>)
    checkpoint_every: int = 10
    threads: int = 0
    output: str = "runs/warm_start"
    resume: bool = False


def _preset(config: SFTConfig):
    from erl_agents.config import build_config

    flags = {"preset": config.preset, "env": config.env}
    if config.model:
        flags["model"] = config.model
    return build_config(flags=flags)


def _set_order(config: SFTConfig, count: int, step: int) -> list[int]:
    """Demonstration indices of step ``step`` (1-based): epoch after epoch in seeded orders, a function of the step."""
    per_epoch = max(count // config.batch, 1)
    epoch, position = divmod(step - 1, per_epoch)
    order = np.random.default_rng([config.seed, epoch]).permutation(count)
    return [int(i) for i in order[position * config.batch:(position + 1) * config.batch]]


def _validate(policy, trainer_config, env_factory, tasks: list[Task]) -> dict:
    """First-attempt success on training seeds no demonstration used, at the trainer's evaluation sampling."""
    from erl_agents.evaluate import evaluate
    from erl_agents.rollout import SamplingParams

    c = trainer_config
    envs = [env_factory() for _ in range(min(len(tasks), 16))]
    sampling = SamplingParams(c.eval_temperature, c.eval_top_p, c.eval_top_k, c.max_new_tokens)
    result = evaluate(policy, envs, tasks, 1, sampling, constrained=c.constrained_actions, max_seq_len=c.max_seq_len)
    return {"validation/success": result["success"], "validation/episodes": result["episodes"]}


def _save_model(policy, folder: Path) -> None:
    """An ordinary HF folder (safetensors; LoRA merged into a copy of the weights, the training model untouched)."""
    import copy

    from erl_agents.lora import is_lora
    from erl_agents.models import Policy, drop_gguf_quantizer
    from erl_agents.run_folder import save_folder

    model = policy.model
    if is_lora(model):
        model = copy.deepcopy(model).merge_and_unload()
    drop_gguf_quantizer(model)
    save_folder(folder, Policy(model, policy.tokenizer).save)


def train_sft(config: SFTConfig) -> Path:
    """Run the warm start; returns the final model's folder."""
    from erl_agents.checkpoint import load_latest_checkpoint, save_checkpoint
    from erl_agents.envs import make_env
    from erl_agents.lora import adapter_state_dict, apply_lora, load_adapter_state_dict
    from erl_agents.models import load_policy
    from erl_agents.plots import plot_learning_curves

    if config.threads:
        torch.set_num_threads(config.threads)
    trainer_config = _preset(config)
    out = Path(config.output)
    config_path = out / "config.json"
    if config.resume:
        if not config_path.exists():
            raise FileNotFoundError(f"--resume: {out} holds no warm-start run (no config.json)")
        saved = json.loads(config_path.read_text())
        # A resume may go further (steps, saves, checkpoints) or use other threads; anything else is another run.
        free = ("resume", "threads", "steps", "save_at", "checkpoint_every")
        changed = sorted(k for k, v in asdict(config).items() if k not in free and saved.get(k) != v)
        if changed:
            raise ValueError(f"--resume with other settings than the run's config.json: {', '.join(changed)}")
    elif (out / "metrics.jsonl").exists():
        raise FileExistsError(f"{out} already holds a warm-start run: pass --resume, or another --output")
    out.mkdir(parents=True, exist_ok=True)
    config_path.write_text(json.dumps(asdict(config), indent=1) + "\n")

    torch.manual_seed(config.seed)
    policy = load_policy(config.model or trainer_config.model, dtype="float32")
    if config.lora_r:
        policy.model = apply_lora(policy.model, config.lora_r, config.lora_alpha)
    env_factory = lambda: make_env(trainer_config.env, trainer_config.env_kwargs)  # noqa: E731
    env = env_factory()
    demos = [render_demonstration(policy, env, d)
             for d in demonstrations(env, [(i, None) for i in range(config.demos)], config.seed)]
    demos = [d for d in demos if len(d.tokens) <= trainer_config.max_seq_len]
    if len(demos) < config.batch:
        raise ValueError(f"only {len(demos)} demonstrations (of {config.demos} training tasks), fewer than --batch "
                         f"{config.batch}")
    validation = [(config.demos + i, None) for i in range(config.validation)]
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=0.0)
    start = 0
    if config.resume:
        _, state = load_latest_checkpoint(out / "checkpoints")
        if config.lora_r:
            load_adapter_state_dict(policy.model, state["weights"])
        else:
            policy.model.load_state_dict(state["weights"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        kept = [line for line in (out / "metrics.jsonl").read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= start]
        (out / "metrics.jsonl").write_text("".join(line + "\n" for line in kept))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()] \
        if (out / "metrics.jsonl").exists() else []
    if start == 0:
        header = {"step": 0, "demonstrations": len(demos), "trained_tokens_per_epoch": sum(map(sum, (d.mask for d in demos))),
                  "demo_moves": sum(len(d.moves) for d in demos)}
        if config.validation:
            policy.model.eval()
            header.update(_validate(policy, trainer_config, env_factory, validation))
        rows = [header]
        (out / "metrics.jsonl").write_text(json.dumps(header) + "\n")
    pad = policy.tokenizer.pad_token_id
    for step in range(start + 1, config.steps + 1):
        clock = time.perf_counter()
        policy.model.train()
        batch = [demos[i] for i in _set_order(config, len(demos), step)]
        total_tokens = sum(sum(d.mask) for d in batch)
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for begin in range(0, len(batch), config.micro_batch):
            loss, _ = sft_loss(policy.model, batch[begin:begin + config.micro_batch], pad)
            (loss / total_tokens).backward()
            loss_sum += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        row = {"step": step, "loss": loss_sum / total_tokens, "trained_tokens": total_tokens,
               "time/step": time.perf_counter() - clock}
        saving = step in config.save_at or step == config.steps
        if saving and config.validation:
            policy.model.eval()
            row.update(_validate(policy, trainer_config, env_factory, validation))
        if step in config.save_at:
            _save_model(policy, out / f"step_{step}")
        if step % config.checkpoint_every == 0 or step == config.steps:
            weights = adapter_state_dict(policy.model) if config.lora_r else policy.model.state_dict()
            save_checkpoint(out / "checkpoints", step, {"weights": weights, "optimizer": optimizer.state_dict()})
        rows.append(row)
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    plot_learning_curves(rows, out / "loss.png", title=f"warm start on {len(demos)} solver demonstrations")
    _save_model(policy, out / "final_model")
    return out / "final_model"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = SFTConfig()
    for name, value in asdict(defaults).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true")
        elif isinstance(value, list):
            parser.add_argument(flag, type=int, nargs="*", default=value)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    args = parser.parse_args(argv)
    config = SFTConfig(**vars(args))
    for name in ("demos", "steps", "batch", "micro_batch"):
        if getattr(config, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(config, name)}")
    try:
        folder = train_sft(config)
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"erl_agents.sft: {exc}", file=sys.stderr)
        return 2
    print(f"warm start saved to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
