"""The README's tiny-model numbers, each from runs whose data sits beside the report:

* the main job, ``erl-train --env ERL-FrozenLake-v0 --algo erl --preset cpu-tiny``: ERL whose reflection is the
  RuleReflector's plan (the shortest solution of the failed board, read with the env's symbols: privileged), for
  the preset's step budget (earlier runs stopped after 8 minutes of training, so their step count depended on the
  machine's speed and load; a run's config.json says which);
* the CI learning check, ``tests/agents/test_trainer.py::test_tiny_model_improves_on_small_frozen_lake``, RLVR and
  ERL: 80 steps each (step-based, so the numbers are the same on any CPU; ``ci_check_config`` is the test's config).

    python benchmarks/learning/bench_main_job.py --run RUNS        # run the three (one after the other), then report
    python benchmarks/learning/bench_main_job.py --run RUNS --only main     # one of them (main, ci_rlvr, ci_erl)
    python benchmarks/learning/bench_main_job.py --run RUNS --only main --seeds 1 2 3 4   # seeds 0-4 (then --collect)
    python benchmarks/learning/bench_main_job.py --collect RUNS    # copy RUNS/{main,main_seed*,ci_rlvr,ci_erl}
    python benchmarks/learning/bench_main_job.py                   # the report from benchmarks/results/main_job/

Writes benchmarks/results/main_job.md from the copied config.json, metrics.jsonl and load.json of each run (of
the extra seeds only metrics.jsonl's evaluation rows and last row, as evals.jsonl), and constant.json: every
always-one-move policy's outcome on the main job's held-out instances, the floor its numbers stand beside.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import (best_constant, best_constant_policy_line, mean_interval, rate,  # noqa: E402
                                  write_keeping_analysis)

DATA = ROOT / "benchmarks" / "results" / "main_job"
MAIN_ARGS = ["--env", "ERL-FrozenLake-v0", "--algo", "erl", "--preset", "cpu-tiny"]
# The CI learning check's settings over the cpu-tiny preset (the test builds its config with ci_check_config). It
# keeps the settings its committed runs (benchmarks/results/main_job/ci_*) were made with, which the main job's preset
# has since changed: a constant learning rate of 1e-3, the entropy bonus, one pass per mini-batch, recomputed old
# log-probs, 100 x 2 held-out episodes (a test compares this config with the committed runs').
CI_CHECK = dict(env="ERL-FrozenLake-v0", steps=80, time_limit_min=0.0, eval_every=20, eval_tasks=100,
                eval_samples=2, progress=False, checkpoint_every=0, save_final_model=False, lr=1e-3,
                lr_schedule="constant", entropy_coef=0.01, max_tokens_per_micro_batch=0, old_logprobs="recompute")
RUNS = ("main", "ci_rlvr", "ci_erl")
SEED_RUN = "main_seed"  # + the seed: the main job with another seed (the main run itself is the preset's seed)
LAST_EVALS = 3  # the across-seeds table also averages this many final evaluations (less noisy than the last alone)
MAIN_BAR = 0.7  # the held-out success the main job is meant to reach at its end (its issue's bar)
# Where the final models fail: each plays this many held-out instances once (the evaluation's are the first).
OUTCOME_TASKS = 1000
END_KINDS = ("success", "hole", "step_limit")
REFLECTORS = {
    "plan": "the RuleReflector's plan: the shortest solution of the failed board, read with the env's symbols "
            "(privileged; the tiny model cannot write reflections)",
    "rule": "the RuleReflector's full rulebook (privileged)",
    "brief": "the RuleReflector's brief rulebook (privileged)",
    "policy": "the policy's own reflection",
}


def ci_check_config(algo: str, output: str):
    """The config of the CI learning check for ``algo`` writing into ``output``."""
    from erl_agents.config import build_config

    return build_config({"preset": "cpu-tiny"}, flags=dict(CI_CHECK, algo=algo, output=output))


# The CI check's bar, on the mean of the last two evaluations (not the best of the later ones, which a noisy run
# meets by chance): at least CI_FLOOR, and at least CI_LIFT above the untrained policy's (step 0).
CI_FLOOR, CI_LIFT, CI_LAST = 0.45, 0.1, 2


def ci_check_score(evals: list[float]) -> float:
    """The score the bar is put on: the mean of the last ``CI_LAST`` evaluations after step 0."""
    later = evals[1:][-CI_LAST:]
    return sum(later) / len(later) if later else float("nan")


def ci_check_passes(evals: list[float]) -> bool:
    """The CI check's bar: the mean of the last two evaluations at least CI_FLOOR and CI_LIFT above step 0's."""
    return len(evals) > CI_LAST and ci_check_score(evals) >= max(CI_FLOOR, evals[0] + CI_LIFT)


def _sample_load(path: Path, stop: threading.Event) -> None:
    samples = []
    while True:
        samples.append(os.getloadavg()[0])
        path.write_text(json.dumps({"load1": samples}))
        if stop.wait(30):
            return


def run_one(name: str, runs: Path) -> None:
    """One of the three runs into ``runs/name``, with the 1-minute load average sampled every 30 s beside it."""
    from erl_agents.trainer import Trainer
    from erl_agents.train import main as erl_train

    seed = name.removeprefix(SEED_RUN) if name.startswith(SEED_RUN) else None
    if name not in RUNS and not (seed or "").isdigit():
        raise ValueError(f"unknown run {name!r}; choose one of {list(RUNS)} or {SEED_RUN}K")
    folder = runs / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_load, args=(folder / "load.json", stop), daemon=True)
    sampler.start()
    try:
        if name == "main" or seed is not None:
            seed_args = ["--seed", seed] if seed is not None else []
            if erl_train(MAIN_ARGS + seed_args + ["--output", str(folder), "--no-progress"]) != 0:
                raise RuntimeError(f"the main job ({name}) failed")
        else:
            Trainer(ci_check_config(name.removeprefix("ci_"), str(folder))).train()
    finally:
        stop.set()
        sampler.join()


def seed_folders(root: Path) -> list[Path]:
    """The extra seeds' folders under ``root`` (``SEED_RUN`` and a number), in seed order."""
    found = [folder for folder in root.glob(f"{SEED_RUN}*") if folder.name.removeprefix(SEED_RUN).isdigit()]
    return sorted(found, key=lambda folder: int(folder.name.removeprefix(SEED_RUN)))


def collect(runs: Path, data: Path = DATA) -> None:
    """Copy each run's config.json (without the machine's output path), metrics.jsonl and load.json (of an extra
    seed: the evaluation rows and the last row, evals.jsonl); a run that ``runs`` does not hold keeps its committed
    copy. Then the constant policies' outcomes on the main job's held-out instances (constant.json)."""
    seeds = [folder.name for folder in seed_folders(runs)]
    for name in [*RUNS, *seeds]:
        source, target = runs / name, data / name
        if not (source / "config.json").exists():  # not rerun this time (--only): the committed copy stays
            print(f"{source} has no finished run; keeping {target}")
            continue
        target.mkdir(parents=True, exist_ok=True)
        config = json.loads((source / "config.json").read_text())
        config["output"] = f"runs/{name}"
        (target / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
        if name in RUNS:
            shutil.copyfile(source / "metrics.jsonl", target / "metrics.jsonl")
        else:
            lines = [line for line in (source / "metrics.jsonl").read_text().splitlines() if line.strip()]
            kept = [line for line in lines[:-1] if "eval/success" in json.loads(line)] + lines[-1:]
            (target / "evals.jsonl").write_text("".join(line + "\n" for line in kept))
        if (source / "load.json").exists():
            shutil.copyfile(source / "load.json", target / "load.json")
    if (data / "main" / "config.json").exists():
        write_constant_outcomes(data)
    finals = {name: runs / name for name in ["main", *seeds] if (runs / name / "final_model").exists()}
    if finals:
        write_final_outcomes(finals, data)


def write_constant_outcomes(data: Path = DATA) -> None:
    """Every always-one-move policy's outcome on each held-out instance of the main job (constant.json)."""
    from benchmarks.real_model.board_dependence import constant_outcomes
    from erl_agents.envs import make_env
    from erl_agents.evaluate import eval_tasks

    config = json.loads((data / "main" / "config.json").read_text())
    tasks = eval_tasks(config["env"], config["env_kwargs"], config["eval_set"], config["eval_tasks"])
    kwargs = {**config["env_kwargs"], **config["eval_env_kwargs"]}
    outcomes = constant_outcomes(lambda: make_env(config["env"], kwargs), tasks)
    record = {"tasks": [list(task) for task in tasks], "constant": outcomes}
    (data / "constant.json").write_text(json.dumps(record) + "\n")


def end_kind(game) -> str:
    """How a finished FrozenLake episode ended, read off the board: on the goal, in a hole, or on a frozen tile (the
    step budget ran out)."""
    row, col = game.position
    return {"G": "success", "H": "hole"}.get(game.map_rows[row][col], "step_limit")


def play_outcomes(run: Path, tasks: int = OUTCOME_TASKS) -> list[list]:
    """``[board size, shortest path, end kind]`` per held-out instance, in order, when a run's final model plays its
    first ``tasks`` held-out instances once each at the evaluation's sampling; one torch thread and the run's seed, so
    a rerun repeats it."""
    import torch

    from erl_agents.envs import make_env
    from erl_agents.evaluate import eval_tasks
    from erl_agents.models import load_policy
    from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
    from erl_envs.grid.frozen_lake_maps import shortest_path_length

    config = json.loads((run / "config.json").read_text())
    policy = load_policy(str(run / "final_model"), safetensors_only=True)
    kwargs = {**config["env_kwargs"], **config["eval_env_kwargs"]}
    envs = [make_env(config["env"], kwargs) for _ in range(64)]
    sampling = SamplingParams(config["eval_temperature"], config["eval_top_p"], config["eval_top_k"],
                              config["max_new_tokens"])
    todo = eval_tasks(config["env"], config["env_kwargs"], config["eval_set"], tasks)
    outcomes, threads, table = [], torch.get_num_threads(), ConstraintTable()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config["seed"])
            for start in range(0, len(todo), len(envs)):
                chunk = todo[start:start + len(envs)]
                playing = envs[:len(chunk)]
                run_episodes(policy, playing, chunk, list(range(len(chunk))), sampling,
                             constrained=config["constrained_actions"], max_seq_len=config["max_seq_len"], table=table)
                for env in playing:
                    game = env.unwrapped
                    outcomes.append([len(game.map_rows), shortest_path_length(game.map_rows), end_kind(game)])
    finally:
        torch.set_num_threads(threads)
    return outcomes


def write_final_outcomes(finals: dict[str, Path], data: Path = DATA) -> None:
    """Each final model's outcome per held-out instance (outcomes.json), beside the kept ones of runs not given."""
    path = data / "outcomes.json"
    record = json.loads(path.read_text()) if path.exists() else {"tasks": OUTCOME_TASKS, "runs": {}}
    if record["tasks"] != OUTCOME_TASKS:
        record = {"tasks": OUTCOME_TASKS, "runs": {}}  # kept ones of another size would not pool
    for name, folder in finals.items():
        print(f"playing {folder / 'final_model'} on {OUTCOME_TASKS} held-out instances")
        record["runs"][name] = play_outcomes(folder)
    path.write_text(json.dumps(record) + "\n")


def _success(outcomes: list[list]) -> tuple[int, int]:
    return sum(kind == "success" for _, _, kind in outcomes), len(outcomes)


def outcome_lines(data: Path) -> list[str]:
    """The final models on more held-out instances (outcomes.json): success on the evaluation's instances and on
    the rest, and end kinds by board size and shortest path, pooled over the models."""
    if not (data / "outcomes.json").exists():
        return []
    record = json.loads((data / "outcomes.json").read_text())
    runs, tasks = record["runs"], record["tasks"]
    evaluated = json.loads((data / "main" / "config.json").read_text())["eval_tasks"]
    # The first 100 were the evaluation's instances until the FrozenLake cpu-tiny preset's evaluation grew to 400.
    firsts = sorted({n for n in (100, evaluated) if n < tasks})
    lines = ["## The final models on more held-out instances", "",
             f"Each final model plays the first {tasks} held-out instances once at the evaluation's sampling (one "
             f"torch thread, the run's seed; [outcomes.json](main_job/outcomes.json)). The first {evaluated} are the "
             "instances every evaluation above plays; the first 100 were the evaluation's before the preset's "
             "evaluation grew to 400 instances x 1 sample (from 100 x 2).", "",
             "| run | " + " | ".join(f"the first {n}" + (" (the evaluation's)" if n == evaluated else "")
                                    for n in firsts) + f" | the other {tasks - evaluated} | all {tasks} |",
             "|---|" + "---|" * (len(firsts) + 2)]
    for name, outcomes in runs.items():
        lines.append(f"| {name} | " + " | ".join(rate(*_success(outcomes[:n])) for n in firsts)
                     + f" | {rate(*_success(outcomes[evaluated:]))} | {rate(*_success(outcomes))} |")
    boards = next(iter(runs.values()))  # every model plays the same instances
    largest = max(size for size, _, _ in boards)
    parts = [(f"the first {n}", boards[:n]) for n in firsts] + [(f"the other {tasks - evaluated}", boards[evaluated:])]
    lines += ["", f"The instances' mix: {largest}x{largest} boards are "
              + ", ".join(f"{sum(size == largest for size, _, _ in part) / len(part):.2f} of {name}"
                          for name, part in parts if part)
              + "; the mean shortest path "
              + ", ".join(f"{sum(shortest for _, shortest, _ in part) / len(part):.2f} ({name})"
                          for name, part in parts if part) + "."]
    pooled: dict[tuple[int, int], dict[str, int]] = {}
    for outcomes in runs.values():
        for size, shortest, kind in outcomes:
            pooled.setdefault((size, shortest), dict.fromkeys(END_KINDS, 0))[kind] += 1
    lines += ["", "Where they fail, pooled over the models: by board size and shortest path (moves), the share of "
              "episodes that end on the goal, in a hole, or at the step limit.", "",
              "| board | shortest path | episodes | success | hole | step limit |", "|---|---|---|---|---|---|"]
    for (size, shortest), kinds in sorted(pooled.items()):
        n = sum(kinds.values())
        lines.append(f"| {size}x{size} | {shortest} | {n} | "
                     + " | ".join(f"{kinds[kind] / n:.2f}" for kind in END_KINDS) + " |")
    return lines + [""]


def constant_line(data: Path) -> str:
    """The best constant policy's score on the main job's held-out instances (from constant.json), or the cpu-smol
    maps' figure when no constant.json is there."""
    if not (data / "constant.json").exists():
        return ("The floor a board-blind policy reaches (measured on the cpu-smol held-out maps, FrozenLake sizes "
                "2-4 like these runs' but the paper's test maps, not these seeded instances): "
                + best_constant_policy_line())
    best, k, n, others = best_constant(json.loads((data / "constant.json").read_text())["constant"])
    return (f"The floor a board-blind policy reaches on the same held-out instances: always {best}, "
            f"{rate(k, n)} (others: {others}; one episode each, the env is deterministic; constant.json).")


def _read(folder: Path) -> tuple[dict, list[dict], list[float]]:
    config = json.loads((folder / "config.json").read_text())
    metrics = folder / "metrics.jsonl" if (folder / "metrics.jsonl").exists() else folder / "evals.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    load = json.loads((folder / "load.json").read_text())["load1"] if (folder / "load.json").exists() else []
    return config, rows, load


def _evals(rows: list[dict]) -> list[tuple[int, int, int]]:
    """(step, successes, episodes) of every held-out evaluation."""
    return [(r["step"], round(r["eval/success"] * r["eval/episodes"]), int(r["eval/episodes"]))
            for r in rows if "eval/success" in r]


def _budget_words(config: dict) -> str:
    """How the run was bounded: the preset's steps, or (runs made before the step budget) minutes of training."""
    if config.get("time_limit_min"):
        return f"the preset stopped it after {config['time_limit_min']:g} minutes of training"
    return f"the preset runs {config['steps']} steps"


def _load_words(load: list[float]) -> str:
    return f"load average {min(load):.1f}-{max(load):.1f}" if load else "load not recorded"


def to_markdown(data: Path = DATA) -> str:
    lines = ["# The main job and the CI learning check: the tiny model on FrozenLake sizes 2-4", "",
             "Generated by `python benchmarks/learning/bench_main_job.py` from the runs' config.json, metrics.jsonl "
             "and load.json in [main_job/](main_job/). Held-out: first attempts on seeded instances that training "
             "never draws (`eval_set=seeded`), 95% Wilson intervals in brackets.", "", constant_line(data), ""]
    if (data / "main").exists():
        config, rows, load = _read(data / "main")
        evals = _evals(rows)
        steps = max((r["step"] for r in rows), default=0)
        last = rows[-1]
        lines += [
            "## The main job", "",
            f"`erl-train {' '.join(MAIN_ARGS)}` (seed {config['seed']}): {config['algo'].upper()}, the reflection "
            f"written by {REFLECTORS.get(config['reflector'], config['reflector'])}; {_budget_words(config)}. "
            f"This run: {steps} steps, "
            f"{last.get('time/training', 0) / 60:.1f} training minutes, {last.get('time/elapsed', 0) / 60:.1f} wall "
            f"minutes, torch threads {config['threads'] or 'all cores'}, {_load_words(load)} while it ran "
            f"({os.cpu_count()} CPUs here).", "",
            "| step | held-out success |", "|---|---|",
            *[f"| {step} | {rate(k, n)} |" for step, k, n in evals], ""]
        lines += _seed_lines(data)
        lines += outcome_lines(data)
    ci = [name for name in ("ci_rlvr", "ci_erl") if (data / name).exists()]
    if ci:
        lines += ["## The CI learning check (`test_tiny_model_improves_on_small_frozen_lake`)", "",
                  f"{CI_CHECK['steps']} cpu-tiny steps per algorithm, held-out evaluation every "
                  f"{CI_CHECK['eval_every']} steps on {CI_CHECK['eval_tasks']} instances x {CI_CHECK['eval_samples']} "
                  f"samples. Step-based: the same numbers on any CPU for the same seed. The bar: the mean of the last "
                  f"{CI_LAST} evaluations at least {CI_FLOOR} and at least {CI_LIFT} above step 0's.", "",
                  "| algo | " + " | ".join(f"step {step}" for step, _, _ in _evals(_read(data / ci[0])[1]))
                  + f" | mean of the last {CI_LAST} | bar | passes the bar |",
                  "|---|" + "---|" * (len(_evals(_read(data / ci[0])[1])) + 3)]
        for name in ci:
            config, rows, load = _read(data / name)
            evals = _evals(rows)
            done = max((r["step"] for r in rows), default=0)
            rates = [k / n for _, k, n in evals]
            verdict = ("yes" if ci_check_passes(rates) else "no") if done >= CI_CHECK["steps"] \
                else f"not finished (step {done} of {CI_CHECK['steps']})"
            score = f"{ci_check_score(rates):.3f}" if len(rates) > CI_LAST else "-"
            bar = f"{max(CI_FLOOR, rates[0] + CI_LIFT):.3f}" if rates else "-"
            lines.append(f"| {config['algo']} | " + " | ".join(rate(k, n) for _, k, n in evals)
                         + " | -" * (len(_evals(_read(data / ci[0])[1])) - len(evals))
                         + f" | {score} | {bar} | {verdict} |")
        loads = []
        for name in ci:
            config, rows, load = _read(data / name)
            if load:
                minutes = max((r.get("time/elapsed", 0) for r in rows), default=0) / 60
                loads.append(f"{config['algo']}: median {statistics.median(load):.1f}, {_load_words(load)}, over "
                             f"{minutes:.0f} wall minutes")
        if loads:
            lines += ["", "Load average (1 minute, sampled every 30 s) while the CI runs went on: " + "; ".join(loads)
                      + "."]
        lines += ["", *_step0_lines(data, ci)]
        lines.append("")
    return "\n".join(lines)


def _seed_lines(data: Path) -> list[str]:
    """The main job's end across seeds: each seed's last evaluation and the mean of its last few, and the mean over
    seeds with a t-interval (the spread between seeds, which one run cannot show)."""
    folders = [data / "main"] + [folder for folder in seed_folders(data) if (folder / "config.json").exists()]
    if len(folders) < 2:
        return []
    lines = ["## The main job across seeds", "",
             f"The same command with `--seed K` (the extra seeds' evaluation rows and last row in "
             f"[main_job/{SEED_RUN}K/](main_job/)). Step-based, so these numbers do not depend on the load the "
             f"runs shared the machine with; their wall time does, and only seed 0's above is a quiet one.", "",
             f"| seed | steps | held-out at the end | mean of the last {LAST_EVALS} evaluations |",
             "|---|---|---|---|"]
    ends, lasts = [], []
    for folder in folders:
        config, rows, _ = _read(folder)
        evals = _evals(rows)
        done = max((r["step"] for r in rows), default=0)
        if not evals or done < config["steps"]:
            lines.append(f"| {config['seed']} | {done} of {config['steps']} | not finished | - |")
            continue
        step, k, n = evals[-1]
        recent = [k_ / n_ for _, k_, n_ in evals[-LAST_EVALS:]]
        ends.append((config["seed"], k / n))
        lasts.append(sum(recent) / len(recent))
        lines.append(f"| {config['seed']} | {done} | {rate(k, n)} | {lasts[-1]:.3f} |")
    if len(ends) >= 2:
        mean, low, high = mean_interval([value for _, value in ends])
        last_mean, last_low, last_high = mean_interval(lasts)
        seed, lowest = min(ends, key=lambda e: e[1])
        lines += ["", f"Over {len(ends)} finished seeds: held-out at the end {mean:.3f} on average (95% t-interval "
                      f"over seeds [{low:.3f}, {high:.3f}]), lowest {lowest:.3f} (seed {seed}); the mean of the last "
                      f"{LAST_EVALS} evaluations {last_mean:.3f} [{last_low:.3f}, {last_high:.3f}]. Seeds ending at "
                      f"or above {MAIN_BAR}: {sum(value >= MAIN_BAR for _, value in ends)} of {len(ends)}."]
    return lines + [""]


def _step0_lines(data: Path, names: list[str]) -> list[str]:
    """Why the same untrained model scores differently at step 0 of the two CI runs: evaluation plays its episodes
    in batches of the run's env pool (tasks per step x group size), so one seeded RNG stream is spread over batches
    of another size and the samples differ."""
    found = []
    for name in names:
        config, rows, _ = _read(data / name)
        start = next(((k, n) for step, k, n in _evals(rows) if step == 0), None)
        group = config.get("n_rlvr" if config["algo"] == "rlvr" else "n_erl")
        if start is not None and group and config.get("tasks_per_step"):
            found.append((config["algo"], start, config["tasks_per_step"] * group))
    if len(found) < 2 or len({f[1] for f in found}) == 1:
        return []
    return ["Step 0 is the same untrained model (same seed, same tiny model) in both runs, yet it scores "
            + " and ".join(f"{k}/{n} in the {algo} run" for algo, (k, n), _ in found)
            + ": evaluation plays its episodes in batches of the run's env pool (tasks per step x group size: "
            + ", ".join(f"{pool} episodes for {algo}" for algo, _, pool in found)
            + "), and the seeded sampling stream is drawn batch by batch, so a batch of another size draws other "
              "samples. The difference is sampling noise of one evaluation, not a difference of models."]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=None, help="run the three jobs into this folder, then collect")
    parser.add_argument("--only", choices=RUNS, default=None, help="with --run: only this run, and no report")
    parser.add_argument("--seeds", type=int, nargs="+", default=[],
                        help=f"with --run: also the main job with these seeds (into RUNS/{SEED_RUN}K)")
    parser.add_argument("--collect", type=Path, default=None, help="copy finished runs from this folder")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "main_job.md")
    args = parser.parse_args(argv)
    if args.run is not None:
        started = time.perf_counter()
        for name in ([args.only] if args.only else list(RUNS)) + [f"{SEED_RUN}{seed}" for seed in args.seeds]:
            run_one(name, args.run)
        print(f"ran in {(time.perf_counter() - started) / 60:.1f} minutes")
        if args.only:
            return 0
    source = args.run or args.collect
    if source is not None:
        collect(source, args.data)
    report = to_markdown(args.data)
    print(report)
    write_keeping_analysis(args.output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
