"""ERL vs RLVR with a real model on CPU: SmolLM2-135M-Instruct on FrozenLake, four arms, seeds, one token budget.

The arms (all the cpu-smol preset: the small-model prompt set, held-out maps excluded from training draws, LoRA):

* ``rlvr``: first attempts only (``--algo rlvr``);
* ``erl_own``: ERL, the policy writes its own reflections (``--algo erl``);
* ``erl_warmup``: ERL after ``--reflection-warmup N`` steps of supervised rows from the brief RuleReflector;
* ``erl_teacher``: ERL with the brief RuleReflector writing every reflection (``--reflector brief``): privileged (it
  knows the symbols and computes a shortest route), an upper bound, not a method a model could run alone.

Each run stops at the same budget of sampled tokens (``--max-sampled-tokens``; attempts, reflections, retries and
the warm-up's first attempts all count). Settings: ``small`` (sizes 2-4, held-out: the paper's 37 test maps of those
sizes) and ``sparse`` (larger maps, where an untrained policy almost never reaches the goal).

    # the study: every arm x seed from one starting model (the warm start), one run after another, then the report
    python benchmarks/real_model/bench_smol_erl.py --run RUNS --model WARM/final_model --engine vllm --budget 20000
    python benchmarks/real_model/bench_smol_erl.py --run RUNS ... --resume       # continue after a stop
    python benchmarks/real_model/bench_smol_erl.py --run RUNS ... --dry-run      # print the erl-train commands
    # copy each run's config.json and metrics.jsonl (small) beside the report, then write the report from them
    python benchmarks/real_model/bench_smol_erl.py --collect RUNS      # RUNS/<setting>/<arm>/seed<k>/
    python benchmarks/real_model/bench_smol_erl.py                     # benchmarks/results/smol_erl.md and .png

Several runs can share the cores: start one driver per arm (``--arms rlvr``), each with ``--threads 1``. The report
gives per arm: first attempts, updates, sampled and trained tokens (the reflection warm-up's counted apart), retry
success split by whether the reflection was usable, each arm's held-out difference from RLVR with a 95% interval,
curves with seed bands, and the compute plan of the five-seed study at the per-token costs measured.

Every number in the report is computed here from the copied files (benchmarks/results/smol_erl/).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import difference, rate, write_keeping_analysis  # noqa: E402

ARMS = ("rlvr", "erl_own", "erl_warmup", "erl_teacher")
ARM_NAMES = {
    "rlvr": "RLVR",
    "erl_own": "ERL, own reflections",
    "erl_warmup": "ERL after reflection warm-up",
    "erl_teacher": "ERL, teacher's reflections (privileged)",
}
COLORS = {"rlvr": "tab:orange", "erl_own": "tab:blue", "erl_warmup": "tab:green", "erl_teacher": "tab:purple"}
SETTINGS = ("small", "sparse")
DATA = ROOT / "benchmarks" / "results" / "smol_erl"
# Fields of config.json that say where the run lived on the machine that made it: not copied.
LOCAL_FIELDS = ("output",)


def collect(runs: Path, data: Path = DATA) -> list[str]:
    """Copy ``runs/<setting>/<arm>/seed<k>/{config.json,metrics.jsonl}`` into ``data``; returns what was copied.

    The config's ``output`` (a path of the machine the run was on) becomes the run's place in the tree, and so do
    the outputs recorded in its resume history."""
    copied = []
    for config_path in sorted(runs.glob("*/*/seed*/config.json")):
        folder = config_path.parent
        relative = folder.relative_to(runs)
        if relative.parts[0] not in SETTINGS or relative.parts[1] not in ARMS:
            continue
        target = data / relative
        target.mkdir(parents=True, exist_ok=True)
        config = json.loads(config_path.read_text())
        for name in LOCAL_FIELDS:
            config[name] = f"runs/{relative.as_posix()}"
        if Path(config.get("model", "")).is_absolute():
            config["model"] = Path(config["model"]).name  # a folder of the machine that ran it: its name only
        for entry in config.get("history", []):
            for change in entry.get("changes", {}).values() if isinstance(entry.get("changes"), dict) else []:
                if isinstance(change, dict):
                    change.pop("output", None)
        (target / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
        shutil.copyfile(folder / "metrics.jsonl", target / "metrics.jsonl")
        copied.append(relative.as_posix())
    if (runs / "load.jsonl").exists():
        # The machine's 1-minute load average, sampled every minute while the runs went on.
        shutil.copyfile(runs / "load.jsonl", data / "load.jsonl")
        copied.append("load.jsonl")
    return copied


def read_run(folder: Path) -> tuple[dict, list[dict]]:
    config = json.loads((folder / "config.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return config, rows


def load(data: Path = DATA) -> dict[str, dict[str, dict[int, tuple[dict, list[dict]]]]]:
    """setting -> arm -> seed -> (config, rows)."""
    out: dict = {}
    for folder in sorted(data.glob("*/*/seed*")):
        if (folder / "metrics.jsonl").exists():
            setting, arm, seed = folder.parts[-3], folder.parts[-2], int(folder.name[len("seed"):])
            out.setdefault(setting, {}).setdefault(arm, {})[seed] = read_run(folder)
    return out


# ---------------------------------------------------------------------------------------------- running the study

# Each arm's erl-train flags over the common ones (see study_commands).
ARM_ARGS = {
    "rlvr": ["--algo", "rlvr"],
    "erl_own": ["--algo", "erl", "--no-eval-at-start"],
    "erl_warmup": ["--algo", "erl", "--no-eval-at-start", "--reflection-warmup", "16", "--warmup-reflector", "brief",
                   "--warmup-lr", "1e-3"],
    "erl_teacher": ["--algo", "erl", "--no-eval-at-start", "--reflector", "brief"],
}
SETTING_ARGS = {
    "small": [],
    "sparse": ["--env-kwargs", json.dumps({"size": [5, 6], "min_path": 4, "prompts": "small", "exclude": "paper-test"})],
}


def study_commands(runs: Path, model: str, seeds: list[int], budget: int, arms: list[str], setting: str = "small",
                   engine: str = "", threads: int = 1, eval_every: int = 8,
                   seed_major: bool = False) -> list[tuple[Path, list[str]]]:
    """The erl-train arguments of every (arm, seed) run, each into ``runs/<setting>/<arm>/seed<k>``: the cpu-smol
    preset from ``model`` (every arm from the same starting model), one task a step, the sampled-token budget (a
    ceiling of steps only so that the budget stops every run), ``--engine`` passed through when given.
    ``seed_major``: every arm's seed k before any arm's seed k+1, so a study stopped part-way (a study of many
    hours) has the same seeds in every arm; otherwise arm by arm."""
    pairs = [(arm, seed) for seed in seeds for arm in arms] if seed_major else \
        [(arm, seed) for arm in arms for seed in seeds]
    out = []
    for arm, seed in pairs:
        folder = runs / setting / arm / f"seed{seed}"
        argv = ["--env", "ERL-FrozenLake-v0", "--preset", "cpu-smol", "--model", model, "--seed", str(seed),
                "--steps", "100000", "--tasks-per-step", "1", "--max-sampled-tokens", str(budget),
                "--eval-every", str(eval_every), "--threads", str(threads), "--no-progress",
                *SETTING_ARGS[setting], *ARM_ARGS[arm], "--output", str(folder)]
        if engine:
            argv += ["--engine", engine]
        out.append((folder, argv))
    return out


def run_finished(folder: Path, budget: int) -> bool:
    """Whether the run in ``folder`` reached its sampled-token budget (its last training row says so)."""
    if not (folder / "metrics.jsonl").exists():
        return False
    rows = _training_rows(read_run(folder)[1]) if (folder / "config.json").exists() else []
    return bool(rows) and rows[-1].get("tokens/sampled_total", 0) >= budget


def run_study(commands: list[tuple[Path, list[str]]], budget: int, resume: bool, runs: Path) -> list[str]:
    """Run each command with ``python -m erl_agents.train``, one after another, skipping finished runs and
    continuing started ones with ``--resume`` (without ``resume`` a started run is an error); the machine's
    1-minute load average is appended to ``runs/load.jsonl`` every minute. Returns what was done per run."""
    import threading
    import time

    done = []
    runs.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(60):
            with open(runs / "load.jsonl", "a") as f:
                f.write(json.dumps({"time": time.time(), "load1": os.getloadavg()[0]}) + "\n")

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for folder, argv in commands:
            if run_finished(folder, budget):
                done.append(f"{folder}: finished before, skipped")
                continue
            started = (folder / "config.json").exists()
            if started and not resume:
                raise SystemExit(f"{folder} holds a started run: pass --resume to continue it")
            result = subprocess.run([sys.executable, "-m", "erl_agents.train", *argv] + (["--resume"] if started else []))
            if result.returncode != 0:
                raise SystemExit(f"{folder}: erl-train exited with {result.returncode}; rerun with --resume")
            done.append(f"{folder}: {'resumed' if started else 'ran'}")
    finally:
        stop.set()
    return done


# ---------------------------------------------------------------------------------------------- one run


def _training_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("step", 0) > 0 and "warmup_step" not in r and "tokens/generated" in r]


def _weighted(rows: list[dict], key: str, weight: str) -> tuple[float, float]:
    """(sum of key * weight, sum of weight) over the rows that have both."""
    pairs = [(r[key], r[weight]) for r in rows if key in r and weight in r and r[weight]]
    return sum(v * w for v, w in pairs), sum(w for _, w in pairs)


def run_summary(config: dict, rows: list[dict]) -> dict:
    """What one run did: steps, why it stopped, tokens, rates over all its steps (weighted by their counts), its
    held-out evaluations, and its reflections' usable-<prompt> rate, split into the first and the later steps."""
    steps = _training_rows(rows)
    warmup = [r for r in rows if "warmup_step" in r]
    last = steps[-1] if steps else {}
    budget = config.get("max_sampled_tokens", 0)
    sampled = last.get("tokens/sampled_total", sum(r.get("tokens/generated", 0) for r in warmup))
    if budget and sampled >= budget:
        stop = "token budget"
    elif steps and last.get("step") == config.get("steps"):
        stop = "step limit"
    elif config.get("time_limit_min") and last.get("time/training", 0) / 60 >= config["time_limit_min"]:
        stop = "time limit"
    else:
        stop = "not finished"
    r1 = _weighted(steps, "success/attempt1", "count/attempt1")
    lift_r1 = _weighted(steps, "lift/r1", "count/attempt2")
    lift_r2 = _weighted(steps, "lift/r2", "count/attempt2")
    usable = _weighted(steps, "reflection/prompt_rate", "reflection/count")
    early = _weighted(steps[:2], "reflection/prompt_rate", "reflection/count")
    evals = [(r["step"], r.get("tokens/sampled_total", 0), round(r["eval/success"] * r["eval/episodes"]),
              int(r["eval/episodes"])) for r in rows if "eval/success" in r]
    return {
        "steps": len(steps), "warmup_steps": len(warmup), "stop": stop, "budget": budget, "sampled": sampled,
        "sampled_warmup": sum(r.get("tokens/generated", 0) for r in warmup),
        "trained": sum(r.get("trained_tokens", 0) for r in steps),
        "trained_warmup": sum(r.get("warmup/trained_tokens", 0) for r in warmup),
        "minutes": (rows[-1].get("time/elapsed", 0.0) if rows else 0.0) / 60,
        "attempts": r1[1], "r1": r1[0] / r1[1] if r1[1] else None,
        "retried": lift_r1[1], "lift_r1": lift_r1[0] / lift_r1[1] if lift_r1[1] else None,
        "lift_r2": lift_r2[0] / lift_r2[1] if lift_r2[1] else None,
        "reflections": usable[1], "usable": usable[0] / usable[1] if usable[1] else None,
        "usable_first_steps": early[0] / early[1] if early[1] else None, "first_reflections": early[1],
        "distilled": sum(r.get("count/distilled", 0) for r in steps),
        "updates": sum(r.get("optimizer_steps", 0) for r in steps),
        "group": config.get("n_rlvr" if config.get("algo") == "rlvr" else "n_erl"),
        "tasks_per_step": config.get("tasks_per_step"),
        # Retries split by their reflection (logged by runs from the commit that added retry/usable; None before).
        "retry_split": ({kind: (sum(r.get(f"retry/{kind}_solved", 0) for r in steps),
                                sum(r.get(f"retry/{kind}", 0) for r in steps)) for kind in ("usable", "fallback")}
                        if any("retry/usable" in r for r in steps) else None),
        "seconds_per_sampled_token": [r["time/step"] / r["tokens/generated"] for r in steps
                                      if r.get("time/step") and r.get("tokens/generated")],
        "memory_set": any(r.get("memory/set") for r in steps),
        "warmup_nll": [r["warmup/nll_before"] for r in warmup if "warmup/nll_before" in r],
        "evals": evals,
        "final_eval": evals[-1] if evals and evals[-1][0] > 0 else None,
        "start_eval": evals[0] if evals and evals[0][0] == 0 else None,
        "step_seconds": [r["time/step"] for r in steps if "time/step" in r],
        "eval_seconds": [r["time/eval"] for r in rows if "time/eval" in r],
        "sizes": config.get("env_kwargs", {}).get("size"),
        "exclude": config.get("env_kwargs", {}).get("exclude"),
        "min_path": config.get("env_kwargs", {}).get("min_path", 0),
    }


# ---------------------------------------------------------------------------------------------- the report


def _median(runs: dict[int, dict], key: str) -> float:
    """The median over every value of ``key`` in ``runs`` (the mean of the two middle values for an even count)."""
    values = [v for s in runs.values() for v in s[key]]
    return statistics.median(values) if values else float("nan")


def _median_all(summaries: dict[str, dict[int, dict]], key: str) -> float:
    return _median({i: s for i, s in enumerate(s for runs in summaries.values() for s in runs.values())}, key)


def fmt(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def pooled(summaries: list[dict], key: str) -> tuple[int, int]:
    """Successes and episodes of an evaluation (``final_eval`` or ``start_eval``), summed over seeds."""
    found = [s[key] for s in summaries if s[key] is not None]
    return sum(e[2] for e in found), sum(e[3] for e in found)


def setting_section(setting: str, arms: dict[str, dict[int, tuple[dict, list[dict]]]]) -> list[str]:
    summaries = {arm: {seed: run_summary(*run) for seed, run in sorted(runs.items())} for arm, runs in arms.items()}
    ordered = [arm for arm in ARMS if arm in summaries]
    any_run = next(iter(next(iter(summaries.values())).values()))
    hygiene = (f"exclude the paper's test maps (exclude={any_run['exclude']!r})" if any_run["exclude"]
               else "may include the paper's test maps")
    lines = [f"## Setting `{setting}`: FrozenLake sizes {any_run['sizes']}"
             + (f", goals at least {any_run['min_path']} moves away" if any_run["min_path"] else ""), "",
             f"Training draws {hygiene}; held-out evaluation replays the paper's test maps of these sizes"
             + (" and goal distances" if any_run["min_path"] else "") + ", first attempt, initial prompt.", ""]
    # Held-out success: the untrained policy (step 0: the same for every arm of a seed, since LoRA starts as the
    # identity and evaluation sampling is seeded by the run seed alone) and each arm at the end of its budget.
    starts = {seed: s["start_eval"] for arm in ordered for seed, s in summaries[arm].items() if s["start_eval"]}
    lines += ["| arm | seeds | stopped by | steps (+ warm-up) | sampled tokens per seed (budget) | trained tokens per "
              "seed, RL (+ warm-up, counted apart) | held-out success at the end, pooled over seeds | per seed |",
              "|---|---|---|---|---|---|---|---|"]
    if starts:
        k, n = sum(e[2] for e in starts.values()), sum(e[3] for e in starts.values())
        per_seed = ", ".join(f"{e[2]}/{e[3]}" for _, e in sorted(starts.items()))
        model = next(iter(arms.values()))[next(iter(next(iter(arms.values()))))][0].get("model", "")
        start_name = "untrained policy" if model in ("", "smollm2-135m") else f"starting policy `{Path(model).name}`"
        lines.append(f"| {start_name} (step 0) | {len(starts)} | - | 0 | 0 | 0 | {rate(k, n)} | {per_seed} |")
    best = best_constant(next(iter(next(iter(arms.values())).values()))[0])
    if best is not None:
        name, k, n = best
        lines.append(f"| best constant policy (always {name}, no model) | - | - | - | - | - | {k}/{n} = {k / n:.2f} "
                     "(no sampling: the same on every seed) | - |")
    for arm in ordered:
        runs = summaries[arm]
        k, n = pooled(list(runs.values()), "final_eval")
        stops = ", ".join(sorted({s["stop"] for s in runs.values()}))
        steps = ", ".join(f"{s['steps']}" + (f" (+{s['warmup_steps']})" if s["warmup_steps"] else "")
                          for s in runs.values())
        sampled = ", ".join(f"{s['sampled']:,.0f}" for s in runs.values())
        trained = ", ".join(f"{s['trained']:,.0f}" + (f" (+{s['trained_warmup']:,.0f})" if s["warmup_steps"] else "")
                            for s in runs.values())
        budget = next(iter(runs.values()))["budget"]
        per_seed = ", ".join(f"{s['final_eval'][2]}/{s['final_eval'][3]}" if s["final_eval"] else "-"
                             for s in runs.values())
        lines.append(f"| {ARM_NAMES[arm]} | {len(runs)} | {stops} | {steps} | {sampled} ({budget:,}) | {trained} | "
                     f"{rate(k, n) if n else 'n/a'} | {per_seed} |")
    base = pooled(list(summaries["rlvr"].values()), "final_eval") if "rlvr" in summaries else (0, 0)
    if base[1]:
        parts = []
        for arm in ordered[1:] if ordered[0] == "rlvr" else ordered:
            k, n = pooled(list(summaries[arm].values()), "final_eval")
            if n:
                d, low, high = difference(k, n, *base)
                parts.append(f"{ARM_NAMES[arm]} {d:+.2f} [{low:+.2f}, {high:+.2f}]")
        if parts:
            lines += ["", "Held-out success at the end minus RLVR's, pooled over seeds (95% interval, Newcombe's "
                      "hybrid score method; an interval holding 0 shows no difference at this sample size): "
                      + "; ".join(parts) + "."]
    lines += ["", "Training rollouts, pooled over seeds and steps (weighted by what each step counted): first-attempt "
              "success r1; on the episodes that were retried, r1 and r2 of the same episodes and the lift r2 - r1; "
              "how many of the policy's reflections held a usable `<prompt>` block (over all steps, and over the "
              "first two ERL steps); retries distilled; whether the memory ever held a reflection.", "",
              "| arm | first attempts | r1 | retried episodes | r1 on them | r2 on them | lift r2 - r1 | reflections | "
              "usable `<prompt>` (all steps) | usable (first 2 steps) | distilled | memory set |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in ordered:
        runs = list(summaries[arm].values())
        attempts = sum(s["attempts"] for s in runs)
        r1 = sum((s["r1"] or 0) * s["attempts"] for s in runs) / attempts if attempts else None
        retried = sum(s["retried"] for s in runs)
        l1 = sum((s["lift_r1"] or 0) * s["retried"] for s in runs) / retried if retried else None
        l2 = sum((s["lift_r2"] or 0) * s["retried"] for s in runs) / retried if retried else None
        reflections = sum(s["reflections"] for s in runs)
        usable = sum((s["usable"] or 0) * s["reflections"] for s in runs) / reflections if reflections else None
        first = sum(s["first_reflections"] for s in runs)
        usable_first = (sum((s["usable_first_steps"] or 0) * s["first_reflections"] for s in runs) / first
                        if first else None)
        teacher = arm == "erl_teacher"
        lines.append(
            f"| {ARM_NAMES[arm]} | {attempts:.0f} | {fmt(r1)} | {retried:.0f} | {fmt(l1)} | {fmt(l2)} | "
            f"{fmt(None if l1 is None else l2 - l1)} | {'teacher' if teacher else f'{reflections:.0f}'} | "
            f"{'n/a' if teacher else fmt(usable)} | {'n/a' if teacher else fmt(usable_first)} | "
            f"{sum(s['distilled'] for s in runs):.0f} | "
            f"{sum(s['memory_set'] for s in runs)}/{len(runs)} |")
    lines += ["", "Updates and groups: " + "; ".join(
        f"{ARM_NAMES[arm]}: {next(iter(summaries[arm].values()))['tasks_per_step']} task(s) a step x "
        f"{next(iter(summaries[arm].values()))['group']} first attempts (the GRPO group), optimizer updates per seed "
        + ", ".join(str(s["updates"]) for s in summaries[arm].values()) for arm in ordered) + "."]
    split_rows = []
    for arm in ordered:
        found = [s["retry_split"] for s in summaries[arm].values() if s["retry_split"]]
        if arm == "rlvr":
            continue
        if not found:
            split_rows.append(f"| {ARM_NAMES[arm]} | not logged | not logged | - |")
            continue
        cells = {kind: (sum(f[kind][0] for f in found), sum(f[kind][1] for f in found)) for kind in ("usable", "fallback")}
        (ku, nu), (kf, nf) = cells["usable"], cells["fallback"]
        d = difference(ku, nu, kf, nf) if nu and nf else None
        split_rows.append(f"| {ARM_NAMES[arm]} ({len(found)} of {len(summaries[arm])} seeds) | {rate(ku, nu)} | "
                          f"{rate(kf, nf)} | " + (f"{d[0]:+.2f} [{d[1]:+.2f}, {d[2]:+.2f}]" if d else "n/a") + " |")
    if split_rows:
        lines += ["", "Retry success split by the reflection before it: a usable `<prompt>` block, or none (the retry "
                  "then runs on the initial prompt: in effect a plain second try). Runs made before this split was "
                  "logged (`retry/usable` in metrics.jsonl) say \"not logged\": for them it was never measured.", "",
                  "| arm | retries after a usable reflection: solved | after an unusable one (fallback): solved | "
                  "usable minus fallback (95%, Newcombe) |", "|---|---|---|---|", *split_rows]
    warm = summaries.get("erl_warmup", {})
    if any(s["warmup_nll"] for s in warm.values()):
        lines += ["", "Reflection warm-up: the policy's negative log-likelihood of the teacher's rulebooks (nats per "
                  "token) before each warm-up step's update, first and last step, per seed: "
                  + "; ".join(f"seed {seed}: {s['warmup_nll'][0]:.2f} -> {s['warmup_nll'][-1]:.2f} over "
                              f"{s['warmup_steps']} steps ({s['sampled_warmup']:,.0f} sampled tokens, "
                              f"{s['trained_warmup']:,.0f} trained)"
                              for seed, s in sorted(warm.items()) if s["warmup_nll"]) + "."]
    lines += ["", "Seconds per training step (median over the arm's steps and seeds; one torch thread, the load "
              "above): " + "; ".join(f"{ARM_NAMES[arm]} {_median(summaries[arm], 'step_seconds'):.0f}"
                                     for arm in ordered)
              + f". Seconds per held-out evaluation ({any_run['evals'][0][3] if any_run['evals'] else 0} episodes, "
              f"median over all runs): {_median_all(summaries, 'eval_seconds'):.0f}."]
    lines += ["", "Seconds per sampled token (each step's seconds over the tokens it sampled, median over the arm's "
              "steps and seeds; the step's update included): " + "; ".join(
                  f"{ARM_NAMES[arm]} {_median(summaries[arm], 'seconds_per_sampled_token'):.2f}" for arm in ordered)
              + "."]
    lines += ["", "Wall time per run (minutes, evaluations included): " + "; ".join(
        f"{ARM_NAMES[arm]} " + ", ".join(f"{s['minutes']:.0f}" for s in summaries[arm].values()) for arm in ordered)
        + "."]
    unfinished = [(arm, seed) for arm in ordered for seed, s in summaries[arm].items() if s["stop"] == "not finished"]
    if unfinished:
        lines += ["", "Not finished (stopped before the budget; continue with `--resume` in the run's folder): "
                  + ", ".join(f"{ARM_NAMES[arm]} seed {seed}" for arm, seed in unfinished) + "."]
    return lines


def best_constant(config: dict) -> tuple[str, int, int] | None:
    """The best constant policy (one move every turn) on the run's held-out tasks, played in the env: the number
    every held-out success of the run stands beside. None when the run's env has no four moves."""
    from benchmarks.real_model.board_dependence import constant_outcomes
    from erl_agents.envs import make_env
    from erl_agents.evaluate import eval_tasks

    env_kwargs = config.get("env_kwargs", {})
    tasks = eval_tasks(config["env"], env_kwargs, config.get("eval_set", "auto"), config.get("eval_tasks", 100))
    kwargs = {**env_kwargs, **config.get("eval_env_kwargs", {})}
    if not getattr(make_env(config["env"], kwargs).unwrapped, "valid_actions", None):
        return None
    outcomes = constant_outcomes(lambda: make_env(config["env"], kwargs), tasks)
    top = max(sum(results) for results in outcomes.values())
    return " or ".join(a for a, results in outcomes.items() if sum(results) == top), top, len(tasks)


def machine_lines(folder: Path) -> list[str]:
    """The load the runs shared the machine with, and the board dependence of each policy measured
    (board_dependence/*.json beside the report)."""
    lines = []
    if (folder / "load.jsonl").exists():
        loads = sorted(json.loads(line)["load1"] for line in (folder / "load.jsonl").read_text().splitlines()
                       if line.strip())
        lines.append(f"Machine load while the runs went on (1-minute load average, sampled every minute, "
                     f"{len(loads)} samples): median {statistics.median(loads):.1f}, "
                     f"range {loads[0]:.1f}-{loads[-1]:.1f}, "
                     "on 2 CPUs shared with other jobs; each run had one torch thread.")
    boards = folder.parent / "board_dependence"
    if boards.is_dir() and any(boards.glob("*.json")):
        from benchmarks.real_model.board_dependence import load_runs, summarise

        for label, run in load_runs(boards).items():
            x = summarise(run)
            lines.append(
                f"Board dependence of the `{label}` policy ([board_dependence.md](board_dependence.md), the "
                f"{x['maps']} small paper test maps): a shortest-path first move with probability {x['sp_exact']:.3f} "
                f"against a uniform policy's {x['uniform']:.3f}; mutual information between board and first move "
                f"{x['mutual_information_bits']:.3f} bits (of 2); {x['repeat']} of the {x['longer']} sampled episodes "
                f"longer than one move repeat one move to the step limit; the best constant policy (always "
                f"{x['best']}) reaches {x['constant'][x['best']]}/{x['maps']} maps, the policy's sampled episodes "
                f"{x['successes']}/{x['episodes']}.")
    return lines + ([""] if lines else [])


def compute_plan(arms: dict[str, dict[int, tuple[dict, list[dict]]]], seeds: int = 5, budget: int = 20_000,
                 eval_every: int = 8) -> list[str]:
    """The study's cost at the per-token costs these runs measured: per arm, ``seeds`` runs of ``budget`` sampled
    tokens (seconds per sampled token x budget), the warm-up's steps, and a held-out evaluation every
    ``eval_every`` steps (steps from the arm's median sampled tokens per step)."""
    summaries = {arm: {seed: run_summary(*run) for seed, run in runs.items()} for arm, runs in arms.items()}
    lines, total = [], 0.0
    for arm in [a for a in ARMS if a in summaries]:
        runs = summaries[arm]
        per_token = _median(runs, "seconds_per_sampled_token")
        per_step = statistics.median([r["tokens/generated"] for _, rows in arms[arm].values()
                                      for r in _training_rows(rows) if r.get("tokens/generated")])
        steps = math.ceil(budget / per_step)
        evals = steps // eval_every + 1
        eval_seconds = _median(runs, "eval_seconds") if any(s["eval_seconds"] for s in runs.values()) else \
            _median_all(summaries, "eval_seconds")
        eval_seconds = 0.0 if math.isnan(eval_seconds) else eval_seconds  # no evaluation was timed: not counted
        warmup = sum(r.get("time/warmup_step", 0.0) for _, rows in arms[arm].values() for r in rows
                     if "warmup_step" in r) / len(runs)
        seconds = seeds * (budget * per_token + evals * eval_seconds + warmup)
        total += seconds
        lines.append(f"| {ARM_NAMES[arm]} | {per_token:.3f} | {per_step:.0f} | {steps} | {evals} x {eval_seconds:.0f} s | "
                     f"{warmup / 60:.1f} | {seconds / 3600:.1f} |")
    return (["## Compute plan: the four arms from the warm start, "
             f"{seeds} seeds x {budget:,} sampled tokens", "",
             "What the study would cost on this machine's HF engine at the per-token costs measured above (setting "
             "`small`, one torch thread per run, the load above), per arm over its seeds: seconds per sampled token "
             f"(median), sampled tokens per step (median) and so steps to the budget, a held-out evaluation every "
             f"{eval_every} steps (median seconds), the warm-up's minutes per run. A warm-started policy plays other "
             "episodes than the untrained one (it ends more of them at the goal, fewer at the step limit), so its "
             "per-step numbers will differ; the vLLM engine's per-token "
             "cost is to be measured the same way before the study starts.", "",
             "| arm | s / sampled token | tokens / step | steps | evaluations | warm-up min / run | hours, all seeds |",
             "|---|---|---|---|---|---|---|", *lines, "",
             f"In all {total / 3600:.1f} hours of one core; with the machine's 2 cores shared by two runs at a time, "
             f"about {total / 3600 / 2:.1f} wall hours, if the load stays as it was."])


def to_markdown(data: dict, command: str, png: str = "smol_erl.png", folder: Path = DATA) -> str:
    lines = [
        "# ERL vs RLVR with a real model on CPU: SmolLM2-135M-Instruct on FrozenLake",
        "",
        f"Generated by `{command}` from the runs' config.json and metrics.jsonl in [smol_erl/](smol_erl/) "
        f"(one folder per setting, arm and seed). Curves: [{png}]({png}). 95% Wilson intervals in brackets.",
        "",
        *machine_lines(folder),
    ]
    for setting in SETTINGS:
        if setting in data:
            lines += setting_section(setting, data[setting]) + [""]
    if "small" in data:
        lines += compute_plan(data["small"]) + [""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the curves


def _band(curves: list[list[tuple[float, float]]], grid: list[float]) -> tuple[list[float], list[float], list[float]]:
    """Mean, min and max over runs of each run's step curve (the last value reached at or before x) on ``grid``."""
    values = []
    for curve in curves:
        row = []
        for x in grid:
            reached = [y for cx, y in curve if cx <= x]
            row.append(reached[-1] if reached else math.nan)
        values.append(row)
    columns = list(zip(*values))
    mean = [sum(c) / len(c) if not any(math.isnan(v) for v in c) else math.nan for c in columns]
    return mean, [min(c) for c in columns], [max(c) for c in columns]


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = [s for s in SETTINGS if s in data]
    panels = ("eval/success", "success/attempt1")
    fig, axes = plt.subplots(len(settings), len(panels), figsize=(6 * len(panels), 3.8 * len(settings)),
                             squeeze=False)
    for row_axes, setting in zip(axes, settings):
        for ax, key in zip(row_axes, panels):
            for arm in ARMS:
                runs = data[setting].get(arm, {})
                curves = []
                for seed, (_, rows) in runs.items():
                    source = [r for r in rows if key in r and "warmup_step" not in r]
                    if key == "eval/success":
                        # The untrained policy's evaluation is shared by the arms of a seed (see the report):
                        # this seed's step 0, from whichever arm ran it.
                        start = next((r for a in ARMS for r in data[setting].get(a, {}).get(seed, (None, []))[1]
                                      if r.get("step") == 0 and key in r), None)
                        if start is not None and not any(r.get("step") == 0 for r in source):
                            source = [start] + source
                    if key == "success/attempt1":
                        # One or two tasks a step: a 5-step running mean of r1.
                        ys = [r[key] for r in source]
                        smooth = [sum(ys[max(0, i - 4): i + 1]) / len(ys[max(0, i - 4): i + 1])
                                  for i in range(len(ys))]
                        source = [dict(r, **{key: y}) for r, y in zip(source, smooth)]
                    curves.append([(r.get("tokens/sampled_total", 0) if r.get("step") else 0, r[key])
                                   for r in source])
                if not any(curves):
                    continue
                grid = sorted({x for curve in curves for x, _ in curve})
                mean, low, high = _band([c for c in curves if c], grid)
                ax.plot(grid, mean, color=COLORS[arm], label=f"{ARM_NAMES[arm]} ({len(curves)} seeds)",
                        marker="o" if key == "eval/success" else None, markersize=3)
                ax.fill_between(grid, low, high, color=COLORS[arm], alpha=0.15, linewidth=0)
            what = "held-out success (paper test maps)" if key == "eval/success" else "r1 on training (5-step mean)"
            ax.set_title(f"{setting}: {what}", fontsize=9)
            ax.set_xlabel("sampled tokens")
            ax.set_ylim(0, 1)
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=7)
    fig.suptitle("SmolLM2-135M-Instruct on FrozenLake, matched sampled tokens: mean over seeds, band = min-max",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collect", type=Path, default=None,
                        help="copy RUNS/<setting>/<arm>/seed<k>/{config.json,metrics.jsonl} into --data first")
    parser.add_argument("--data", type=Path, default=DATA, help="the copied runs (default: beside the report)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "smol_erl.md")
    study = parser.add_argument_group("running the study (then --collect RUNS writes the report)")
    study.add_argument("--run", type=Path, default=None, help="run the arms x seeds into RUNS/<setting>/<arm>/seed<k>")
    study.add_argument("--model", default="smollm2-135m",
                       help="the starting model of every arm: a packaged name or a folder (the warm start's final_model)")
    study.add_argument("--engine", default="", help="passed to erl-train as --engine (e.g. vllm); empty: its default")
    study.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    study.add_argument("--budget", type=int, default=20_000, help="sampled tokens per run")
    study.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    study.add_argument("--setting", choices=SETTINGS, default="small")
    study.add_argument("--threads", type=int, default=1, help="torch threads per run")
    study.add_argument("--seed-major", action="store_true",
                       help="every arm's seed k before any arm's seed k+1 (a study stopped part-way stays balanced)")
    study.add_argument("--resume", action="store_true", help="continue started runs (finished ones are skipped)")
    study.add_argument("--dry-run", action="store_true", help="print the erl-train commands and stop")
    args = parser.parse_args(argv)
    if args.run is not None:
        if args.budget < 1:
            parser.error(f"--budget must be at least 1 sampled token, got {args.budget}")
        commands = study_commands(args.run, args.model, args.seeds, args.budget, args.arms, args.setting, args.engine,
                                  args.threads, seed_major=args.seed_major)
        if args.dry_run:
            for _, command in commands:
                print("erl-train " + " ".join(command))
            return 0
        for line in run_study(commands, args.budget, args.resume, args.run):
            print(line)
        args.collect = args.run
    if args.collect is not None:
        for name in collect(args.collect, args.data):
            print(f"copied {name}")
    data = load(args.data)
    if not data:
        parser.error(f"no runs in {args.data} (expected <setting>/<arm>/seed<k>/metrics.jsonl)")
    report = to_markdown(data, "python benchmarks/real_model/bench_smol_erl.py", args.output.with_suffix(".png").name,
                         args.data)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    plot(data, args.output.with_suffix(".png"))
    write_keeping_analysis(args.output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
