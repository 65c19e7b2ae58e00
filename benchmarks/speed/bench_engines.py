"""Generation engines side by side: the trainer's cpu-smol ERL rollouts on the hf engine and on the vLLM engine, and
vLLM alone replaying the same requests.

    python benchmarks/speed/bench_engines.py                 # 3 interleaved rounds, then one training step each
    python benchmarks/speed/bench_engines.py --report-only   # rewrite engines.md from engines.json
    python benchmarks/speed/bench_engines.py --quick         # a smoke run (1 round, 1 task, no training step)

What is measured (SmolLM2-135M-Instruct, the cpu-smol preset's envs, prompts, sampling and constrained actions; ERL
episodes through ReflectionWrapper with the policy's own reflections, memory off so that every round starts alike):
* Per round, the same tasks (seeds) and sampling settings are played by both engines, in alternating order (hf
  first in even rounds, vllm first in odd ones), so load drifts hit both alike. A row's "sampled tokens/s" is the
  tokens the model sampled over the seconds spent in the engine's sample calls; "rollout wall" is the whole
  ``run_episodes`` call (envs, turns and trajectories included). The engines sample with different random streams,
  so their episodes (and token counts) differ; tokens/s is what compares.
* "vLLM alone" replays, right after each round's vLLM rollout, the exact requests that rollout sent (the same token
  prompts, sampling settings and per-request seeds), straight to vLLM's engine: each conversation's requests in
  order, the next sent as soon as the previous one finishes, as the rollout's continuous batching sends them, but
  with no envs, no trainer, no conversion. The vLLM rollout's share of that ceiling is the integration's cost.
* With ``--train-steps N``: N whole training steps (rollout, update, weight sync) per engine, and their wall time.

Results: benchmarks/results/engines.md, computed from benchmarks/results/engines.json (the raw rounds) by this
script; the load average of the machine is recorded beside every round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"

from benchmarks.reporting import best_constant_policy_line, write_keeping_analysis  # noqa: E402


def _load() -> float:
    return round(os.getloadavg()[0], 2)


class RecordingEngine:
    """Keeps every request a vLLM engine's rollout sends (token prompt, and sampling params with its seed and valid
    replies), per conversation in order, for the replay; and the seconds the rollout spent in the engine."""

    def __init__(self, engine):
        self.engine = engine
        self.requests: dict[int, list[tuple]] = {}
        self.seconds = 0.0
        self.llm_engine = engine.llm.llm_engine
        self.real_add, self.real_collect = self.llm_engine.add_request, engine.collect
        keys: list[int] = []
        real_submit = engine.submit

        def submit(request):
            keys.append(request.key)
            real_submit(request)

        def add_request(request_id, prompt, params, **kwargs):
            self.requests.setdefault(keys.pop(), []).append((prompt, params))
            return self.real_add(request_id, prompt, params, **kwargs)

        def collect(table=None):
            clock = time.perf_counter()
            try:
                return self.real_collect(table)
            finally:
                self.seconds += time.perf_counter() - clock

        engine.submit, engine.collect, self.llm_engine.add_request = submit, collect, add_request

    def replay(self) -> tuple[int, float]:
        """Send the recorded requests again, straight to vLLM's engine, each conversation's next request as soon as
        its previous one finishes (as the rollout does, without envs); returns (sampled tokens, seconds)."""
        queues = {key: list(requests) for key, requests in self.requests.items()}
        owner: dict[str, int] = {}
        tokens, number = 0, 0
        clock = time.perf_counter()

        def send(key: int) -> None:
            nonlocal number
            prompt, params = queues[key].pop(0)
            number += 1
            owner[f"replay-{number}"] = key
            self.real_add(f"replay-{number}", prompt, params)

        for key in queues:
            send(key)
        while owner:
            for output in self.llm_engine.step():
                if output.finished and output.request_id in owner:
                    key = owner.pop(output.request_id)
                    tokens += len(output.outputs[0].token_ids)
                    if queues[key]:
                        send(key)
        return tokens, time.perf_counter() - clock

    def reset(self) -> None:
        self.requests, self.seconds = {}, 0.0


def _config(output: str, tasks: int, engine: str, steps: int = 1):
    from erl_agents.config import build_config

    return build_config(flags=dict(preset="cpu-smol", output=output, engine=engine, steps=steps, tasks_per_step=tasks,
                                   no_memory=True, eval_every=0, checkpoint_every=0, save_final_model=False,
                                   progress=False))


def _rounds(rounds: int, tasks: int, vllm_dtype: str, seed: int) -> list[dict]:
    import torch

    from erl_agents.decoding import reflection_prefill
    from erl_agents.engines.hf import HFEngine
    from erl_agents.engines.vllm import VLLMEngine
    from erl_agents.rollout import ConstraintTable, run_episodes
    from erl_agents.trainer import Trainer

    scratch = tempfile.mkdtemp(prefix="erl-bench-engines-")
    trainer = Trainer(_config(os.path.join(scratch, "run"), tasks, "hf"))
    cfg = trainer.config
    sampling, reflect_sampling, _ = trainer._sampling()
    prefix, stop = reflection_prefill(cfg.reflect_prefill)
    engines = {"hf": HFEngine(trainer.policy, kv_reuse=cfg.kv_reuse),
               "vllm": VLLMEngine(trainer.policy, os.path.join(scratch, "engine"), dtype=vllm_dtype,
                                  max_model_len=cfg.max_seq_len, seed=seed)}
    recorder = RecordingEngine(engines["vllm"])
    rows = []
    try:
        for number in range(rounds):
            seeds = [seed * 1000 + number * tasks + k for k in range(tasks)]
            resets = [(s, None) for s in seeds for _ in range(trainer.group_size)]
            task_ids = [k for k in range(tasks) for _ in range(trainer.group_size)]
            order = ("hf", "vllm") if number % 2 == 0 else ("vllm", "hf")
            for name in order:
                torch.manual_seed(seed + number)
                recorder.reset()
                timing: dict[str, float] = {}
                load = _load()
                clock = time.perf_counter()
                episodes = run_episodes(engines[name], trainer.train_envs, resets, task_ids, sampling,
                                        reflect_sampling, constrained=cfg.constrained_actions,
                                        max_seq_len=cfg.max_seq_len, table=ConstraintTable(), timing=timing,
                                        kv_reuse=cfg.kv_reuse, reflect_prefix=prefix, reflect_stop=stop)
                wall = time.perf_counter() - clock
                tokens = sum(e.generated_tokens for e in episodes)
                row = {"round": number, "engine": name, "tokens": tokens, "generation_s": timing["generation"],
                       "wall_s": wall, "episodes": len(episodes), "load": load,
                       "reflections": sum(1 for e in episodes for t in e.trajectories if t.role == "reflection")}
                if name == "vllm":
                    row["engine_calls_s"] = recorder.seconds
                    load = _load()
                    replay_tokens, replay_s = recorder.replay()
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    row = {"round": number, "engine": "vllm-alone", "tokens": replay_tokens, "generation_s": replay_s,
                           "wall_s": replay_s, "episodes": len(episodes), "load": load, "reflections": 0,
                           "same_tokens": replay_tokens == tokens}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        engines["vllm"].close()
        trainer.close()
    return rows


def _train_steps(steps: int, tasks: int) -> list[dict]:
    from erl_agents.trainer import Trainer

    rows = []
    for name in ("hf", "vllm"):
        scratch = tempfile.mkdtemp(prefix=f"erl-bench-engines-train-{name}-")
        metrics = Trainer(_config(scratch, tasks, name, steps=steps)).train()
        for m in metrics:
            if m.get("step", 0) > 0:
                rows.append({"engine": name, "step": m["step"], "step_s": m["time/step"],
                             "generation_s": m["time/generation"], "update_s": m["time/update"],
                             "weight_sync_s": m.get("time/weight_sync", 0.0), "tokens": m["tokens/generated"],
                             "logprob_abs_diff": m.get("rollout/logprob_abs_diff")})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def summary(data: dict) -> dict:
    """Per engine: sampled tokens/s (all rounds' tokens over all rounds' seconds) and each round's figure."""
    out = {}
    for name in ("hf", "vllm", "vllm-alone"):
        rows = [r for r in data["rounds"] if r["engine"] == name]
        if not rows:
            continue
        tokens = sum(r["tokens"] for r in rows)
        out[name] = {"tokens": tokens, "generation_s": sum(r["generation_s"] for r in rows),
                     "wall_s": sum(r["wall_s"] for r in rows),
                     "tokens_per_s": tokens / sum(r["generation_s"] for r in rows),
                     "wall_tokens_per_s": tokens / sum(r["wall_s"] for r in rows),
                     "per_round": [r["tokens"] / r["generation_s"] for r in rows],
                     "loads": [r["load"] for r in rows]}
    return out


def to_markdown(data: dict, data_name: str = "engines.json") -> str:
    s = summary(data)
    lines = [
        "# Generation engines: hf vs vLLM on the trainer's rollouts",
        "",
        f"Command: `{data['command']}`  ",
        f"Machine: {data['machine']}; load average (1 min) per round: "
        f"{', '.join(str(r['load']) for r in data['rounds'])}.  ",
        f"Model: SmolLM2-135M-Instruct; hf engine in float32 (the cpu-smol preset's dtype), vLLM in "
        f"{data['vllm_dtype']}; cpu-smol ERL rollouts of {data['tasks']} task(s) x {data['group_size']} episodes per "
        f"round, {data['rounds_run']} interleaved round(s), memory off.",
        "",
        "These are speed figures (the engines' episodes are not scored); for scale: " + best_constant_policy_line(),
        "",
        "| engine | sampled tokens | seconds sampling | sampled tokens/s | per round | rollout wall s | "
        "tokens/s over the rollout wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in s.items():
        rounds = ", ".join(f"{v:.1f}" for v in row["per_round"])
        lines.append(f"| {name} | {row['tokens']} | {row['generation_s']:.1f} | {row['tokens_per_s']:.1f} | {rounds} | "
                     f"{row['wall_s']:.1f} | {row['wall_tokens_per_s']:.1f} |")
    lines.append("")
    if "hf" in s and "vllm" in s:
        lines.append(f"- vLLM / hf sampled tokens/s: **{s['vllm']['tokens_per_s'] / s['hf']['tokens_per_s']:.1f}x** "
                     f"(per round: {', '.join(f'{v / h:.1f}x' for v, h in zip(s['vllm']['per_round'], s['hf']['per_round']))}).")
    if "vllm" in s and "vllm-alone" in s:
        alone = s["vllm-alone"]["tokens_per_s"]
        same = all(r.get("same_tokens") for r in data["rounds"] if r["engine"] == "vllm-alone")
        lines.append(f"- The trainer's vLLM rollout against vLLM alone on the same requests: "
                     f"{s['vllm']['tokens_per_s'] / alone:.0%} counting the seconds in sample calls, "
                     f"{s['vllm']['wall_tokens_per_s'] / alone:.0%} counting the whole rollout wall (envs and "
                     f"turns included). The replay sampled {'the same' if same else 'a different'} number of tokens "
                     "(same prompts, settings and seeds" + ("" if same else "; in bf16 a batch's numerics depend on "
                     "what else is in it, so a seeded sample can differ") + ").")
    if data.get("train"):
        lines += ["", "Whole training steps (rollout, LoRA update, weight sync), cpu-smol:", "",
                  "| engine | step | step s | generation s | update s | weight sync s | sampled tokens | "
                  "logprob abs diff |", "|---|---|---|---|---|---|---|---|"]
        for r in data["train"]:
            lines.append(f"| {r['engine']} | {r['step']} | {r['step_s']:.1f} | {r['generation_s']:.1f} | "
                         f"{r['update_s']:.1f} | {r['weight_sync_s']:.2f} | {r['tokens']} | "
                         f"{r['logprob_abs_diff']:.1e} |" if r["logprob_abs_diff"] is not None else "n/a |")
        for name in ("hf", "vllm"):
            steps = [r["step_s"] for r in data["train"] if r["engine"] == name]
            if steps:
                lines.append(f"\nMedian step wall time, {name}: {statistics.median(steps):.1f} s over {len(steps)} "
                             "step(s).")
    lines += ["", f"Raw rounds: `{data_name}` beside this file (every figure above is computed from it by "
              f"`benchmarks/speed/bench_engines.py --report-only --output benchmarks/results/{data_name.replace('.json', '.md')}`)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2, help="tasks per round (cpu-smol: 4 episodes each)")
    parser.add_argument("--vllm-dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--train-steps", type=int, default=1, help="whole training steps per engine (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="1 round of 1 task, no training step, no files written")
    parser.add_argument("--report-only", action="store_true", help="rewrite engines.md from engines.json")
    parser.add_argument("--output", default=str(RESULTS / "engines.md"))
    args = parser.parse_args(argv)
    output = Path(args.output)
    data_path = output.with_suffix(".json")
    if args.report_only:
        data = json.loads(data_path.read_text())
        write_keeping_analysis(output, to_markdown(data, data_path.name))
        print(output.read_text())
        return 0
    if args.quick:
        args.rounds, args.tasks, args.train_steps = 1, 1, 0
    from erl_agents.config import build_config

    group = build_config(flags=dict(preset="cpu-smol")).n_erl
    data = {"command": "python benchmarks/speed/bench_engines.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
            "vllm_dtype": args.vllm_dtype, "tasks": args.tasks, "group_size": group, "rounds_run": args.rounds,
            "seed": args.seed}
    data["rounds"] = _rounds(args.rounds, args.tasks, args.vllm_dtype, args.seed)
    data["train"] = _train_steps(args.train_steps, args.tasks) if args.train_steps else []
    text = to_markdown(data, data_path.name)
    print(text)
    if not args.quick:
        data_path.write_text(json.dumps(data, indent=1))
        write_keeping_analysis(output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
