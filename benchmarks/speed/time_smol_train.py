"""How long a real-model run takes on this machine: ``erl-train --model smollm2-135m --preset cpu-smol``, timed.

    python benchmarks/speed/time_smol_train.py --steps 2                      # run, then write the report
    python benchmarks/speed/time_smol_train.py --from-run benchmarks/results/smol_timing   # report from saved data

The run's own ``metrics.jsonl`` holds the timings (``time/eval`` of each held-out evaluation, ``time/step`` and its
split into generation / env / update per training step); this script adds the machine's load average, read before
and after the run, and writes ``benchmarks/results/smol_timing.md`` from those files only, which it keeps in
``benchmarks/results/smol_timing/`` (``metrics.jsonl``, ``config.json``, ``machine.json``) so the report can be
regenerated. The timings are the README's "how long it takes" numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
sys.path.insert(0, str(HERE.parent.parent))

from benchmarks.reporting import write_keeping_analysis  # noqa: E402


def run(steps: int, seed: int, raw: Path) -> None:
    from erl_agents.train import main as erl_train

    before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "run"
        status = erl_train(["--model", "smollm2-135m", "--preset", "cpu-smol", "--steps", str(steps), "--seed",
                            str(seed), "--output", str(output), "--no-progress", "--checkpoint-every", "0"])
        if status != 0:
            raise SystemExit(f"erl-train exited with {status}")
        raw.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "config.json"):
            shutil.copy(output / name, raw / name)
    machine = {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
               "load_average_before": [round(x, 2) for x in before],
               "load_average_after": [round(x, 2) for x in os.getloadavg()],
               "wall_seconds": round(time.perf_counter() - started, 1),
               "paper_tasks": bool(os.environ.get("ERL_PAPER_TASKS")),
               "command": f"erl-train --model smollm2-135m --preset cpu-smol --steps {steps} --seed {seed}"}
    (raw / "machine.json").write_text(json.dumps(machine, indent=2) + "\n")


def report(raw: Path) -> str:
    rows = [json.loads(line) for line in (raw / "metrics.jsonl").read_text().splitlines() if line.strip()]
    config = json.loads((raw / "config.json").read_text())
    machine = json.loads((raw / "machine.json").read_text())
    evals = [r for r in rows if "time/eval" in r]
    steps = [r for r in rows if r.get("step", 0) > 0]
    lines = [
        "# SmolLM2-135M-Instruct with `--preset cpu-smol`: how long it takes on this machine",
        "",
        f"Command: `{machine['command']}` (written by `benchmarks/speed/time_smol_train.py`; raw data in "
        "`smol_timing/`).",
        f"Machine: {machine['cpus']} CPU cores ({machine['machine']}), Python {machine['python']}, torch on CPU; "
        f"load average (1, 5, 15 min) {machine['load_average_before']} before and {machine['load_average_after']} "
        "after the run: the machine was shared with other jobs, so these are the times under that load.",
        f"Settings that set the cost: {config['eval_tasks']} held-out tasks x {config['eval_samples']} sample(s) "
        f"asked per evaluation, {config['tasks_per_step']} tasks x {config['n_erl']} ERL episodes per step, "
        f"max {config['max_new_tokens']} new tokens per move and {config['reflect_max_new_tokens']} per reflection; "
        f"held-out tasks from {'the paper test set (ERL_PAPER_TASKS)' if machine.get('paper_tasks') else 'a seeded split'}.",
        "",
        "| phase | episodes | seconds | seconds per episode |",
        "|---|---|---|---|",
    ]
    for r in evals:
        episodes = int(r["eval/episodes"])
        lines.append(f"| held-out evaluation at step {r['step']} | {episodes} | {r['time/eval']:.0f} | "
                     f"{r['time/eval'] / max(episodes, 1):.1f} |")
    for r in steps:
        episodes = int(r.get("count/attempt1", 0))
        split = ", ".join(f"{k} {r.get(f'time/{k}', 0.0):.0f} s" for k in ("generation", "env", "update"))
        lines.append(f"| training step {r['step']} ({split}) | {episodes} | {r['time/step']:.0f} | "
                     f"{r['time/step'] / max(episodes, 1):.1f} |")
    lines += ["", f"Whole run: {machine['wall_seconds']:.0f} s wall, model loading included."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--from-run", type=Path, default=None, help="write the report from saved raw data only")
    parser.add_argument("--output", type=Path, default=RESULTS / "smol_timing.md")
    args = parser.parse_args(argv)
    raw = args.from_run or RESULTS / "smol_timing"
    if args.from_run is None:
        run(args.steps, args.seed, raw)
    text = report(raw)
    write_keeping_analysis(args.output, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
