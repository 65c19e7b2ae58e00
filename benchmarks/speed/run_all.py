"""Run every speed benchmark and write one table of ratios against named baselines: benchmarks/results/speed.md.

    python benchmarks/speed/run_all.py --size full --gym-sokoban DIR_OR_WHEEL    # the published numbers (tens of minutes)
    python benchmarks/speed/run_all.py --size quick                              # a smoke run of every script (minutes)
    python benchmarks/speed/run_all.py --only rollout update_vs_trl              # a subset

Each benchmark runs as its own process (so memory and threads are its own) and writes its detailed table beside
this one: envs.md (env step + render vs Gymnasium FrozenLake-v1 ansi), sokoban_gen.md (level generation vs
gym-sokoban), bm25.md (vs rank-bm25 at 10k / 100k passages), rollout.md (batched episodes vs one at a time),
update_vs_trl.md (GRPO step vs TRL's GRPOTrainer). speed.md gathers one row per measure: ours, the baseline
measured in the same run, and the ratio, always oriented so that > 1 means ours is better (faster or smaller). A
benchmark that fails leaves a row saying why. The RLVR-vs-ERL comparison is separate (benchmarks/learning/compare.py):
it is a learning result, not a speed one, and takes hours at full size on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
NAMES = ("envs", "sokoban_gen", "bm25", "rollout", "update_vs_trl")


def read_tables(text: str) -> list[list[dict[str, str]]]:
    """Every markdown table in ``text`` as a list of rows keyed by the header cells."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.match(r"^\|[\s|:-]+\|$", lines[i + 1].strip()):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                rows.append(dict(zip(header, cells)))
                i += 1
            tables.append(rows)
        else:
            i += 1
    return tables


def number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def envs_rows(path: Path) -> list[dict]:
    """Step + render throughput rows of envs.md (helper H's bench_envs.py), each against the Gymnasium row."""
    table = next(t for t in read_tables(path.read_text()) if t and "env" in t[0] and "steps/s" in t[0])
    baseline_row = next(r for r in table if r["env"].startswith("Gymnasium"))
    baseline = number(baseline_row["steps/s"])
    out = []
    for r in table:
        if r is baseline_row:
            continue
        rate = number(r["steps/s"])
        row = {"measure": f"env step + text render, {r['env']}, steps/s", "ours": rate, "baseline": baseline,
               "baseline_name": "Gymnasium FrozenLake-v1 (ansi)"}
        if rate and baseline:
            row["ratio"] = rate / baseline
        else:
            row["note"] = r["steps/s"]
        out.append(row)
    return out


def bm25_rows(path: Path) -> list[dict]:
    table = next(t for t in read_tables(path.read_text()) if t and "metric" in t[0])
    by_metric = {r["metric"]: r for r in table}
    sizes = [k for k in table[0] if k != "metric"]
    out = []
    for size in sizes:
        agreement = by_metric.get("identical top-10", {}).get(size, "?")
        for name, ours_key, ref_key, unit in (("query latency", "query ours (ms)", "query rank-bm25 (ms)", "ms"),
                                              ("index build", "build ours (s)", "build rank-bm25 (s)", "s")):
            ours, ref = number(by_metric[ours_key][size]), number(by_metric[ref_key][size])
            row = {"measure": f"BM25 {name}, {int(size):,} passages, {unit}", "ours": ours, "baseline": ref,
                   "baseline_name": "rank-bm25 BM25Okapi", "note": f"identical top-10: {agreement}"}
            if ours and ref:
                row["ratio"] = ref / ours
            out.append(row)
    return out


def json_rows(path: Path) -> list[dict]:
    return json.loads(path.with_suffix(".json").read_text())["rows"]


def commands(size: str, out: Path, gym_sokoban: str | None) -> dict[str, tuple[list[str], callable]]:
    """Each benchmark's command line, run from the project root with relative paths: the scripts print their
    command into their tables, and a path of the machine that ran them does not belong there."""
    quick = ["--quick"] if size == "quick" else []
    py = sys.executable
    out = Path(os.path.relpath(out.resolve(), ROOT)) if out.resolve().is_relative_to(ROOT) else out.resolve()
    sokoban = ["--gym-sokoban", gym_sokoban] if gym_sokoban else []
    return {
        "envs": ([py, "benchmarks/speed/bench_envs.py", *quick, "--output", str(out / "envs.md")], envs_rows),
        "sokoban_gen": ([py, "benchmarks/speed/bench_sokoban_gen.py", *quick, *sokoban, "--output",
                         str(out / "sokoban_gen.md")], json_rows),
        "bm25": ([py, "benchmarks/speed/bench_bm25.py", *quick, "--out", str(out / "bm25.md")], bm25_rows),
        "rollout": ([py, "benchmarks/speed/bench_rollout.py", *quick, "--output", str(out / "rollout.md")], json_rows),
        "update_vs_trl": ([py, "benchmarks/speed/bench_update_vs_trl.py", *quick, "--output", str(out / "update_vs_trl.md")],
                          json_rows),
    }


def fmt(value) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def machine() -> str:
    import numpy as np
    import torch

    try:
        load = f", load average at start {os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        load = ""
    cpu = platform.processor() or platform.machine()
    return (f"{platform.platform()}, {cpu}, {os.cpu_count()} CPUs{load}; Python {platform.python_version()}, "
            f"torch {torch.__version__}, numpy {np.__version__}")


def to_markdown(rows_by_name: dict[str, list[dict]], errors: dict[str, str], size: str, seconds: dict[str, float],
                machine_line: str, command: str) -> str:
    lines = [
        "# Speed: erl-gym against named baselines, measured in the same run",
        "",
        f"Generated by `{command}` (size {size}).",
        f"Machine: {machine_line}.",
        "Ratio > 1 means ours is better: for rates ours / baseline, for times and memory baseline / ours. Details "
        "and methods are in the linked per-benchmark tables.",
        "",
        "| benchmark | measure | ours | baseline | baseline value | ratio | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in rows_by_name:
        link = f"[{name}]({name}.md)"
        for r in rows_by_name[name]:
            ratio = f"**{r['ratio']:.2f}**" if r.get("ratio") is not None else "n/a"
            lines.append(f"| {link} | {r['measure']} | {fmt(r.get('ours'))} | {r['baseline_name']} | "
                         f"{fmt(r.get('baseline'))} | {ratio} | {r.get('note', '')} |")
    for name, error in errors.items():
        lines.append(f"| {name} | (did not run) | | | | n/a | {error} |")
    lines += ["", "Wall time per benchmark: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()) + ".", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("quick", "full"), default="full")
    parser.add_argument("--only", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--output", type=Path, default=BENCH / "results", help="folder for speed.md and the details")
    parser.add_argument("--gym-sokoban", default=os.environ.get("GYM_SOKOBAN"),
                        help="gym-sokoban wheel or directory for the generation baseline (see bench_sokoban_gen.py)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed per benchmark")
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    machine_line = machine()
    plan = commands(args.size, args.output, args.gym_sokoban)
    rows_by_name, errors, seconds = {}, {}, {}
    for name in args.only:
        command, reader = plan[name]
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        try:
            proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
            seconds[name] = time.perf_counter() - start
            if proc.returncode != 0:
                tail = [l for l in proc.stderr.strip().splitlines() if l.strip()]
                errors[name] = f"exit code {proc.returncode}: {tail[-1] if tail else ''}"
                continue
            rows_by_name[name] = reader(ROOT / command[command.index("--output" if "--output" in command else "--out") + 1])
        except subprocess.TimeoutExpired:
            seconds[name] = time.perf_counter() - start
            errors[name] = f"did not finish within {args.timeout:.0f} s"
        except (StopIteration, KeyError, ValueError, OSError) as err:
            errors[name] = f"could not read its results ({type(err).__name__}: {err})"
        print(f"   {seconds.get(name, 0.0):.0f} s" + (f", FAILED: {errors[name]}" if name in errors else ""), flush=True)
    shown = [a for a in argv if a != args.gym_sokoban and not a.startswith("--gym-sokoban")]
    report = to_markdown(rows_by_name, errors, args.size, seconds, machine_line,
                         " ".join(["python benchmarks/speed/run_all.py", *shown]))
    (args.output / "speed.md").write_text(report)
    print(report)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
