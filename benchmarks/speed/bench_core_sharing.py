"""Runs that share cores: one short ``erl-train`` run alone, then several of the same run started at once.

Researchers run seeds side by side and tests beside a run. A fair share of the cores makes N runs at once take
about N times one run; OpenMP workers that spin while they wait make it far worse. For each setting (the default,
and the environment variables given with ``--setting``) this script times one run alone (``--repeats`` times, the
settings interleaved) and ``--runs`` runs at once, checks that every run's metrics equal the lone run's (``time/*``
aside: the thread count is fixed, so the load must not change a number), and samples the machine's load average
while they run.

    python benchmarks/speed/bench_core_sharing.py                     # default vs libgomp's spinning default
    python benchmarks/speed/bench_core_sharing.py --steps 12 --runs 4 --setting passive:OMP_WAIT_POLICY=PASSIVE

Writes benchmarks/results/core_sharing.json (the raw timings, loads and metric digests) and core_sharing.md (every
number computed from that file; ``--report`` rewrites the table from the file alone).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import write_keeping_analysis  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DATA = RESULTS / "core_sharing.json"
REPORT = RESULTS / "core_sharing.md"
# libgomp's own default when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: what erl-train did before it set one.
SETTINGS = {"default": {}, "spinning (libgomp's default)": {"GOMP_SPINCOUNT": "300000"}}


def metrics_digest(metrics_file: Path) -> str:
    """sha256 of the run's metrics without the wall-clock ``time/*`` fields: equal digests, equal learning."""
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    kept = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def _command(output: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "erl_agents.train", "--env", "ERL-FrozenLake-v0", "--algo", "erl",
            "--preset", "cpu-tiny", "--steps", str(steps), "--output", str(output), "--no-progress",
            "--no-save-final-model", "--overwrite"]


def _run_at_once(count: int, folder: Path, steps: int, env: dict) -> dict:
    """``count`` runs started together; each one's wall time and digest, and the load every 2 s meanwhile."""
    loads: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            loads.append(round(os.getloadavg()[0], 2))
            stop.wait(2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    processes = []
    for index in range(count):
        log = open(folder / f"run{index}.log", "w")
        processes.append((subprocess.Popen(_command(folder / f"run{index}", steps), cwd=ROOT, env=env,
                                           stdout=log, stderr=subprocess.STDOUT), log, index))
    runs = []
    for process, log, index in processes:
        process.wait()
        log.close()
        metrics = folder / f"run{index}" / "metrics.jsonl"
        runs.append({"seconds": round(time.perf_counter() - start, 2), "returncode": process.returncode,
                     "digest": metrics_digest(metrics) if process.returncode == 0 else None,
                     "last_step": max((json.loads(line)["step"] for line in metrics.read_text().splitlines()
                                       if line.strip()), default=0) if metrics.exists() else 0})
    stop.set()
    sampler.join()
    return {"wall_s": round(time.perf_counter() - start, 2), "runs": runs, "load1": loads}


def _env_of(variables: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **variables}
    for cleared in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the runs' own thread count, never the caller's
        env.pop(cleared, None)
    return env


def measure(settings: dict[str, dict[str, str]], steps: int, count: int, repeats: int) -> dict:
    """Lone runs first, ``repeats`` rounds with the settings interleaved (a drift of the machine's speed then
    touches every setting alike), then each setting's runs at once."""
    results = {"steps": steps, "runs_at_once": count, "repeats": repeats, "cpus": os.cpu_count(),
               "python": sys.version.split()[0], "settings": [{"name": n, "env": v, "alone": []}
                                                              for n, v in settings.items()]}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(repeats):
            for setting in results["settings"]:
                alone = _run_at_once(1, Path(scratch), steps, _env_of(setting["env"]))
                setting["alone"].append(alone)
                print(f"round {round_ + 1}, {setting['name']}: alone {alone['wall_s']} s", flush=True)
        for setting in results["settings"]:
            setting["together"] = _run_at_once(count, Path(scratch), steps, _env_of(setting["env"]))
            print(f"{setting['name']}: {count} at once {setting['together']['wall_s']} s", flush=True)
    return results


def _lone_seconds(setting: dict) -> float:
    """The median lone run (the upper middle of an even count)."""
    times = sorted(run["wall_s"] for run in setting["alone"])
    return times[len(times) // 2]


def to_markdown(data: dict) -> str:
    count, steps, repeats = data["runs_at_once"], data["steps"], data["repeats"]
    lines = [f"# Runs sharing {data['cpus']} cores: one {steps}-step cpu-tiny run alone, and {count} at once", "",
             "Generated by `python benchmarks/speed/bench_core_sharing.py` from [core_sharing.json](core_sharing.json)"
             f" (`erl-train --env ERL-FrozenLake-v0 --algo erl --preset cpu-tiny --steps {steps}`, Python "
             f"{data['python']}). Alone: the median of {repeats} lone runs per setting, run in {repeats} rounds with "
             f"the settings interleaved, the range in brackets. A fair share of the cores is about {count}x the lone "
             "run's time. Identical: every run's metrics (`time/*` aside) equal those of the first lone run of the "
             "first setting. The load average (1 minute) was sampled every 2 s; it includes other jobs on the "
             "machine, so the times are only as quiet as the machine was.", "",
             f"| setting | environment | alone | {count} at once | ratio | identical metrics | load alone | "
             f"load {count} at once |", "|---|---|---|---|---|---|---|---|"]
    reference = data["settings"][0]["alone"][0]["runs"][0]["digest"]
    for setting in data["settings"]:
        alone, together = setting["alone"], setting["together"]
        digests = [run["digest"] for part in alone + [together] for run in part["runs"]]
        identical = "yes" if all(d == reference for d in digests) else \
            f"no ({sum(d != reference for d in digests)} of {len(digests)} differ)"
        env = ", ".join(f"`{k}={v}`" for k, v in setting["env"].items()) or "erl-train's own"
        times = [part["wall_s"] for part in alone]
        lone = _lone_seconds(setting)
        lines.append(f"| {setting['name']} | {env} | {lone:.0f} s [{min(times):.0f}-{max(times):.0f}] | "
                     f"{together['wall_s']:.0f} s | {together['wall_s'] / lone:.1f}x | {identical} | "
                     f"{_load([x for part in alone for x in part['load1']])} | {_load(together['load1'])} |")
    first, others = data["settings"][0], data["settings"][1:]
    for other in others:
        change = _lone_seconds(first) / _lone_seconds(other) - 1
        lines += ["", f"Alone, {first['name']} against {other['name']}: {abs(change):.0%} "
                      f"{'slower' if change > 0 else 'faster'} (medians of {repeats})."]
    return "\n".join(lines) + "\n"


def _load(loads: list[float]) -> str:
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="training steps of each run")
    parser.add_argument("--runs", type=int, default=4, help="runs started at once")
    parser.add_argument("--repeats", type=int, default=3, help="lone runs per setting (the median is reported)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
                        help="another setting to measure besides the default and libgomp's spinning")
    parser.add_argument("--report", action="store_true", help="only rewrite core_sharing.md from core_sharing.json")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.runs < 1 or args.repeats < 1:
        parser.error("--steps, --runs and --repeats must be at least 1")
    if not args.report:
        settings = dict(SETTINGS)
        for text in args.setting:
            name, _, assignments = text.partition(":")
            pairs = [item.split("=", 1) for item in assignments.split(",") if item]
            if not name or not pairs or any(len(pair) != 2 or not pair[0] for pair in pairs):
                parser.error(f"--setting {text!r} is not NAME:VAR=VALUE[,VAR=VALUE]")
            settings[name] = dict(pairs)
        DATA.write_text(json.dumps(measure(settings, args.steps, args.runs, args.repeats), indent=1) + "\n")
    write_keeping_analysis(REPORT, to_markdown(json.loads(DATA.read_text())))
    print(REPORT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
