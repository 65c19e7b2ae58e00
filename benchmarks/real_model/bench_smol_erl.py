"""ERL vs RLVR with a real model on CPU: SmolLM2-135M-Instruct on FrozenLake, matched on sampled tokens.

Start the two runs (each on one thread, so both fit on 2 cores at once), then tabulate and plot them:

    ERL_PAPER_TASKS=../shared/paper_tasks python -m erl_agents.train --preset cpu-smol --algo erl \\
        --max-sampled-tokens B --steps 1000 --threads 1 --output runs/smol-erl
    ERL_PAPER_TASKS=../shared/paper_tasks python -m erl_agents.train --preset cpu-smol --algo rlvr \\
        --max-sampled-tokens B --steps 1000 --threads 1 --output runs/smol-rlvr
    python benchmarks/real_model/bench_smol_erl.py --erl runs/smol-erl --rlvr runs/smol-rlvr

Both runs stop at the same budget B of sampled tokens (``max_sampled_tokens``: attempts, reflections and retries
all count), or at ``--time-limit-min``, whichever comes first; the report says which. Curves per step: first-attempt
success (r1), the retry's success on reflected episodes (r2) and the lift r2 - r1, how often the policy's reflection
held a usable ``<prompt>`` block, and held-out first-attempt success on the paper's test maps of the trained sizes.
Writes benchmarks/results/smol_erl.md and smol_erl.png.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import rate, write_keeping_analysis  # noqa: E402

PANELS = (
    ("success/attempt1", "first-attempt success on training tasks (r1)"),
    ("lift", "lift r2 - r1 on reflected episodes (ERL)"),
    ("reflection/prompt_rate", "usable <prompt> block in the reflection (ERL)"),
    ("eval/success", "held-out first-attempt success (paper test maps)"),
)


def read_run(folder: Path) -> tuple[dict, list[dict]]:
    config = json.loads((folder / "config.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return config, rows


def mean_of(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return sum(values) / len(values) if values else None


def summary(name: str, config: dict, rows: list[dict]) -> dict:
    steps = [r for r in rows if r.get("step", 0) > 0 and "tokens/generated" in r]
    evals = [(r["step"], r.get("tokens/sampled_total", 0), r["eval/success"], int(r["eval/episodes"]))
             for r in rows if "eval/success" in r]
    last = steps[-1] if steps else {}
    budget = config.get("max_sampled_tokens", 0)
    if budget and last.get("tokens/sampled_total", 0) >= budget:
        stop = "token budget"
    elif len(steps) and last.get("step") == config.get("steps"):
        stop = "step limit"
    else:
        stop = "time limit"
    return {
        "name": name, "steps": len(steps), "stop": stop,
        "sampled": last.get("tokens/sampled_total", 0), "budget": budget,
        "minutes": last.get("time/elapsed", 0.0) / 60, "step_seconds": mean_of(steps, "time/step") or 0.0,
        "r1": mean_of(steps, "success/attempt1"), "r2": mean_of(steps, "success/attempt2"),
        "lift": mean_of(steps, "lift"), "prompt_rate": mean_of(steps, "reflection/prompt_rate"),
        "memory": max((r.get("memory/set", 0.0) for r in steps), default=0.0),
        "evals": evals,
    }


def fmt(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def to_markdown(runs: list[dict], command: str) -> str:
    lines = [
        "# ERL vs RLVR with a real model on CPU: SmolLM2-135M-Instruct on FrozenLake",
        "",
        f"Tables and curves by `{command}` from the two runs' metrics.jsonl ([smol_erl.png](smol_erl.png)).",
        "",
        "| run | steps | stopped by | sampled tokens (budget) | wall minutes | mean min/step | r1 (train) | "
        "r2 on retries | lift r2 - r1 | usable `<prompt>` | memory ever set | held-out evaluations |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['name']} | {r['steps']} | {r['stop']} | {r['sampled']:,.0f} ({r['budget']:,}) | {r['minutes']:.0f} | "
            f"{r['step_seconds'] / 60:.1f} | {fmt(r['r1'])} | {fmt(r['r2'])} | {fmt(r['lift'])} | "
            f"{fmt(r['prompt_rate'])} | {'yes' if r['memory'] else 'no'} | {len(r['evals']) or 'not run'} |")
    evaluated = [r for r in runs if r["evals"]]
    if evaluated:
        lines += ["", "Held-out first-attempt success on the paper's test maps of the trained sizes, one sample per map "
                  "(95% Wilson intervals):", "", "| run | step | sampled tokens so far | held-out success |",
                  "|---|---|---|---|"]
        for r in evaluated:
            for step, tokens, value, episodes in r["evals"]:
                lines.append(f"| {r['name']} | {step} | {tokens:,.0f} | {rate(round(value * episodes), episodes)} |")
    lines.append("")
    return "\n".join(lines)


def plot(runs: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.3 * len(PANELS), 3.5))
    colors = {"ERL": "tab:blue", "RLVR": "tab:orange"}
    for ax, (key, title) in zip(axes, PANELS):
        for name, rows in runs.items():
            # x is the sampled-token budget spent so far (what the runs are matched on), not the step: an ERL step
            # samples attempts, a reflection and a retry, so it costs more tokens than an RLVR step.
            curves = [(key, "-", name if key != "success/attempt1" else f"{name} r1")]
            if key == "success/attempt1":
                curves.append(("success/attempt2", "--", f"{name} r2 (retry)"))
            for metric, style, label in curves:
                points = [(r.get("tokens/sampled_total", 0), r[metric]) for r in rows if metric in r]
                if not points:
                    continue
                x, y = zip(*points)
                if metric.startswith("success/"):
                    # One task a step: per-step rates are 0/4 or 3/10 noise; show them faint, a 5-step mean bold.
                    ax.plot(x, y, style, color=colors.get(name), alpha=0.25, linewidth=0.8)
                    y = [sum(y[max(0, i - 4): i + 1]) / len(y[max(0, i - 4): i + 1]) for i in range(len(y))]
                    label += " (5-step mean)"
                ax.plot(x, y, style, color=colors.get(name), marker="o" if style == "-" else "x", markersize=3,
                        label=label)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("sampled tokens")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not measured in these runs", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle("SmolLM2-135M-Instruct, FrozenLake sizes 2-4, one seed, matched sampled-token budget", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--erl", type=Path, required=True, help="the ERL run's output folder")
    parser.add_argument("--rlvr", type=Path, required=True, help="the RLVR run's output folder")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "smol_erl.md")
    args = parser.parse_args(argv)
    loaded = {name: read_run(folder) for name, folder in (("ERL", args.erl), ("RLVR", args.rlvr))}
    runs = [summary(name, config, rows) for name, (config, rows) in loaded.items()]
    report = to_markdown(runs, "python benchmarks/real_model/bench_smol_erl.py --erl ERL_RUN --rlvr RLVR_RUN")
    print(report)
    plot({name: rows for name, (_, rows) in loaded.items()}, args.output.with_suffix(".png"))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_keeping_analysis(args.output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
