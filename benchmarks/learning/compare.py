"""RLVR vs ERL and its ablations, on each env, over several seeds, at matched compute (PAPER.md Table 1).

    python benchmarks/learning/compare.py --output runs/compare                 # cpu-tiny: 3 envs x 5 methods x 3 seeds
    python benchmarks/learning/compare.py --quick --output /tmp/compare         # CI smoke run: FrozenLake, 1 seed, minutes
    python benchmarks/learning/compare.py --config benchmarks/configs/paper-qwen3-4b.yaml --output runs/paper-compare

HotpotQA runs must evaluate on questions they do not train on: a comparison whose held-out questions overlap the
training ones (same id or same normalised text) is refused before anything runs, unless its trainer settings
allow it (``--set allow_eval_overlap=True``).

Methods: ``rlvr``; ``erl`` (the policy writes its own reflections); ``erl_no_memory``; ``erl_no_reflection``;
``erl_rule`` (ERL with ``RuleReflector``, a scripted reflector: what ERL gives when reflections are good).

Matched compute (``--match tokens``, the default): every method gets the same budget of *sampled tokens*, the tokens
the policy generated in training rollouts (attempts and reflections; not evaluation, not the re-scored consolidation
copies). The budget of an (env, seed) is what the first listed method (RLVR by default) sampled in ``--steps``
training steps, unless ``--budget-tokens`` fixes it; each other method trains until its running total reaches the
budget (at most ``--max-steps-factor`` x ``--steps`` steps) and then takes its final evaluation. A run stops at the
end of the step that reaches the budget, so it can overshoot by up to one step's tokens; the table reports what
each method used. Env steps are not matched: ERL's retries and reflections make them differ by design. ``--match steps`` instead gives
every method the same number of training steps with the paper's group sizes (RLVR n=10, ERL n=4: the paper's
parity). Runs are driven through ``TrainConfig`` + ``Trainer`` in this process, one after another; a finished run
(its ``compare_run.json``) is reused when the command is repeated, so an interrupted comparison resumes.

Writes into ``--output``: ``evals.csv`` (every held-out evaluation of every run), ``table.md`` (final held-out
first-attempt success and reward, mean +- std over seeds, laid out like the paper's Table 1, with the paper's
Qwen3-4B numbers beside runs that follow its protocol and what differs for the others), ``curves_<env>.png`` (held-out reward against training step, sampled tokens and
training wall-clock), and ``runs/<env>/<method>/seed<k>/`` (each run's trainer directory).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from erl_agents.config import ENV_PRESETS, build_config  # noqa: E402
from erl_agents.trainer import Trainer  # noqa: E402
from erl_envs.safe_parse import load_data_file  # noqa: E402

ENVS = ("ERL-FrozenLake-v0", "ERL-Sokoban-v0", "ERL-HotpotQA-v0")
# Each method is a set of TrainConfig overrides; every field that differs between methods is set explicitly, so a
# preset (cpu-tiny uses the RuleReflector) cannot change what a method means.
METHODS: dict[str, dict[str, Any]] = {
    "rlvr": dict(algo="rlvr"),
    "erl": dict(algo="erl", reflector="policy", no_memory=False, no_reflection=False),
    "erl_no_memory": dict(algo="erl", reflector="policy", no_memory=True, no_reflection=False),
    "erl_no_reflection": dict(algo="erl", reflector="policy", no_memory=False, no_reflection=True),
    "erl_rule": dict(algo="erl", reflector="rule", no_memory=False, no_reflection=False),
}
LABELS = {"rlvr": "RLVR", "erl": "ERL", "erl_no_memory": "ERL w/o memory", "erl_no_reflection": "ERL w/o reflection",
          "erl_rule": "ERL + RuleReflector"}
# PAPER.md section 4, Qwen3-4B-Instruct-2507, final evaluation reward. The paper has no RuleReflector run.
PAPER_QWEN3_4B = {
    "ERL-FrozenLake-v0": {"rlvr": 0.86, "erl": 0.94, "erl_no_memory": 0.86, "erl_no_reflection": 0.60},
    "ERL-HotpotQA-v0": {"rlvr": 0.45, "erl": 0.56, "erl_no_memory": 0.56, "erl_no_reflection": 0.48},
    "ERL-Sokoban-v0": {"rlvr": 0.06, "erl": 0.87, "erl_no_memory": 0.87, "erl_no_reflection": 0.59},
}
# What the paper's Table 1 numbers assume (PAPER.md sections 2-4 and the reference code's scripts): the paper's
# number is printed beside a cell only when every run of it matches; otherwise the table says what differs.
PAPER_PROTOCOL: dict[str, Any] = dict(
    model="Qwen/Qwen3-4B-Instruct-2507", tasks_per_step=64, n_rlvr=10, n_erl=4, lr=1e-6, clip_low=0.2,
    clip_high=0.28, clip_ratio_c=3.0, kl_coef=0.001, loss_agg="seq-mean-token-sum", ppo_epochs=1, temperature=0.7,
    eval_temperature=0.7, eval_top_p=0.8, eval_top_k=20, eval_samples=4, ppo_mini_batch_size=64,
    # The reference's batch, budgets, log-prob temperature and mixed precision (docs/fidelity.md).
    rows="paper", logprob_temperature="rollout", dtype="bfloat16", max_new_tokens=10240, response_budget=10240,
    reflect_max_new_tokens=10240,
)
PAPER_ENV_PROTOCOL: dict[str, dict[str, Any]] = {
    # The reference's HotpotQA scripts: mini-batches of 32 tasks, one evaluation sample per question, fp16 mixed
    # precision, replies of up to 2,048 tokens in its solver's own loop, reflections of up to 8,192.
    "ERL-HotpotQA-v0": dict(ppo_mini_batch_size=32, eval_samples=1, dtype="float16", max_new_tokens=2048,
                            response_budget=0, reflect_max_new_tokens=8192),
    # The grid games' reflections see the reference's trace (an unreadable reply as its action 0, no final board).
    "ERL-FrozenLake-v0": dict(trace_rule="paper"),
    "ERL-Sokoban-v0": dict(trace_rule="paper"),
}
# HotpotQA env arguments the paper's numbers assume (the env's defaults where not listed).
PAPER_HOTPOTQA_ENV = dict(mode="open", protocol="paper", answer_extraction="paper", scoring="official", max_turns=5)
HOTPOTQA_ENV_DEFAULTS = dict(mode="open", protocol="extended", answer_extraction="boxed", scoring="official",
                             max_turns=5)
CSV_FIELDS = ("env", "method", "seed", "step", "sampled_tokens", "training_seconds", "elapsed_seconds",
              "eval_success", "eval_reward", "eval_solved_any", "budget_tokens")

GRID_ENVS = ("ERL-FrozenLake-v0", "ERL-Sokoban-v0")
PAPER_GRID_KWARGS = {"action_format": "paper", "prompts": "paper"}

# Settings of a comparison (CLI flags and the --config file both set these). `trainer` holds TrainConfig overrides
# for every run, `env_trainer` per-env ones on top of them.
DEFAULTS: dict[str, Any] = dict(
    preset="cpu-tiny", envs=list(ENVS), methods=list(METHODS), seeds=[0, 1, 2], match="tokens", steps=40,
    budget_tokens=0, max_steps_factor=4.0, trainer={}, env_trainer={},
)
# Settings the comparison needs from every run: no wall-clock stop (it would break the matched budget), no
# progress bars, no saved final models (the curves and tables are the result).
RUN_FIXED = dict(time_limit_min=0.0, progress=False, save_final_model=False)
# --quick: FrozenLake, one seed, a smaller model and batch, a handful of steps; a couple of minutes on 2 cores.
QUICK = dict(
    envs=["ERL-FrozenLake-v0"], seeds=[0], steps=2, max_steps_factor=3.0,
    trainer=dict(tasks_per_step=4, n_rlvr=4, n_erl=2, eval_every=2, eval_tasks=8, eval_samples=1, ppo_epochs=1,
                 minibatches=1, tiny_hidden=32, tiny_layers=2, tiny_intermediate=64, tiny_vocab=512),
)


# ----------------------------------------------------------------------------------------------------------------
# Running


def short_name(env: str) -> str:
    return env.removeprefix("ERL-").split("-v")[0]


def run_config(settings: dict, env: str, method: str, seed: int, output: Path, steps: int, budget: int = 0) -> dict:
    """The trainer config of one run; ``budget`` > 0 stops it after the step whose sampled tokens reach it (the
    trainer's ``max_sampled_tokens``: that step is treated as the last, with its final evaluation and checkpoint)."""
    overrides = {"preset": settings["preset"]} if settings["preset"] else {}
    flags = dict(settings["trainer"])
    flags.update(settings["env_trainer"].get(env, {}))

    flags.update(METHODS[method])
    flags.update(RUN_FIXED)
    flags.update(env=env, seed=seed, steps=steps, output=str(output), max_sampled_tokens=budget)
    config = build_config(overrides, flags=flags)
    if env in GRID_ENVS:
        # The paper's protocol for the grid games under any preset: its action format and its prompt set, merged
        # under the env_kwargs the preset or the config chose (which may still say otherwise).
        config.env_kwargs = {**PAPER_GRID_KWARGS, **config.env_kwargs}
    return config


def run_one(settings: dict, env: str, method: str, seed: int, folder: Path, budget: int, rerun: bool) -> dict:
    """Train one (env, method, seed), or reuse its finished run; returns its summary with the metrics rows."""
    done = folder / "compare_run.json"
    if done.exists() and not rerun:
        summary = json.loads(done.read_text())
        if summary.get("budget_tokens") == budget:
            summary["metrics"] = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
            print(f"  reusing {folder}", flush=True)
            return summary
    matched_by_tokens = settings["match"] == "tokens" and budget > 0
    steps = max(1, math.ceil(settings["steps"] * settings["max_steps_factor"])) if matched_by_tokens else settings["steps"]
    config = run_config(settings, env, method, seed, folder, steps, budget if matched_by_tokens else 0)
    started = time.perf_counter()
    trainer = Trainer(config)
    metrics = trainer.train()
    sampled = int(metrics[-1].get("tokens/sampled_total", 0)) if metrics else 0
    summary = {"env": env, "method": method, "seed": seed, "budget_tokens": budget, "steps": trainer.step,
               "sampled_tokens": sampled, "seconds": time.perf_counter() - started,
               "reached_budget": (not matched_by_tokens) or sampled >= budget}
    done.write_text(json.dumps(summary, indent=2))
    return {**summary, "metrics": metrics}


def run_comparison(settings: dict, output: Path, rerun: bool = False) -> list[dict]:
    from tqdm.auto import tqdm

    runs = []
    # One bar over all runs (each run's own bars are off): counts and an ETA for the whole comparison.
    bar = tqdm(total=len(settings["envs"]) * len(settings["seeds"]) * len(settings["methods"]), desc="runs",
               unit="run", dynamic_ncols=True)
    for env in settings["envs"]:
        for seed in settings["seeds"]:
            budget = int(settings["budget_tokens"]) if settings["match"] == "tokens" else 0
            for method in settings["methods"]:
                folder = output / "runs" / short_name(env) / method / f"seed{seed}"
                print(f"{short_name(env)} {LABELS[method]} seed {seed}"
                      + (f" (budget {budget:,} sampled tokens)" if budget else ""), flush=True)
                run = run_one(settings, env, method, seed, folder, budget, rerun)
                if settings["match"] == "tokens" and not budget:
                    budget = run["sampled_tokens"]  # the first method's use sets the budget of the others
                    run["budget_tokens"] = budget
                last = [m for m in run["metrics"] if "eval/success" in m][-1:]
                print(f"  {run['steps']} steps, {run['sampled_tokens']:,} sampled tokens, {run['seconds']:.0f} s"
                      + (f", final held-out success {last[0]['eval/success']:.3f}" if last else ""), flush=True)
                runs.append(run)
                bar.update(1)
    bar.close()
    return runs


def protocol_differences(config) -> list[str]:
    """How a run's configuration departs from what the paper's numbers assume; empty when it matches."""
    expected = {**PAPER_PROTOCOL, **PAPER_ENV_PROTOCOL.get(config.env, {})}
    differences = [f"{key} {getattr(config, key)!r} (paper {value!r})" for key, value in expected.items()
                   if getattr(config, key) != value]
    if config.env == "ERL-HotpotQA-v0":
        kwargs = {**HOTPOTQA_ENV_DEFAULTS, **config.env_kwargs}
        differences += [f"env {key}={kwargs[key]!r} (paper {value!r})" for key, value in PAPER_HOTPOTQA_ENV.items()
                        if kwargs[key] != value]
        if "data" not in config.eval_env_kwargs or config.allow_eval_overlap:
            differences.append("held-out questions not a separate split (paper: its validation questions)")
        if config.eval_set != "paper" or config.eval_tasks < 1024:
            differences.append("held-out questions not the paper's 1,024, once each, in order (eval_set 'paper')")
    elif config.eval_set == "seeded":
        differences.append("eval_set 'seeded' (paper: its 100-instance test set)")
    return differences


def check_held_out(settings: dict) -> list[str]:
    """Refuse (ValueError) a HotpotQA comparison whose held-out questions overlap its training questions; returns
    notes on checks left to the trainer (data that is not on this machine yet, such as ``hf:`` specs)."""
    from erl_agents.envs import make_env
    from erl_agents.evaluate import eval_overlap_problem

    notes = []
    for env in settings["envs"]:
        if env != "ERL-HotpotQA-v0":
            continue
        for method in settings["methods"]:
            config = run_config(settings, env, method, settings["seeds"][0], Path("unused"), settings["steps"])
            sources = [config.env_kwargs.get("data"), config.eval_env_kwargs.get("data")]
            if any(isinstance(d, str) and d.startswith("hf:") for d in sources):
                notes.append(f"{short_name(env)}: held-out overlap is checked when each run loads its data")
                break
            train = make_env(env, config.env_kwargs)
            held_out = make_env(env, {**config.env_kwargs, **config.eval_env_kwargs}) if config.eval_env_kwargs \
                else train
            problem = eval_overlap_problem(train, held_out)
            if problem and not config.allow_eval_overlap:
                raise ValueError(f"{short_name(env)} ({LABELS[method]}): {problem} (here: --set "
                                 "eval_env_kwargs=... or --set allow_eval_overlap=True, or the config's trainer keys)")
    return notes


# ----------------------------------------------------------------------------------------------------------------
# Results


def eval_rows(runs: Sequence[dict]) -> list[dict]:
    rows = []
    for run in runs:
        sampled = 0
        for m in run["metrics"]:
            sampled = m.get("tokens/sampled_total", sampled)
            if "eval/success" not in m:
                continue
            rows.append({"env": run["env"], "method": run["method"], "seed": run["seed"], "step": m["step"],
                         "sampled_tokens": sampled, "training_seconds": round(m.get("time/training", 0.0), 3),
                         "elapsed_seconds": round(m.get("time/elapsed", 0.0), 3),
                         "eval_success": m["eval/success"], "eval_reward": m["eval/reward"],
                         "eval_solved_any": m.get("eval/solved_any", ""), "budget_tokens": run["budget_tokens"]})
    return rows


def write_csv(rows: Sequence[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def _final(rows: Sequence[dict]) -> dict[tuple, dict]:
    """The last evaluation of each (env, method, seed)."""
    last: dict[tuple, dict] = {}
    for r in rows:
        last[(r["env"], r["method"], r["seed"])] = r
    return last


def mean_std(values: Sequence[float]) -> str:
    import numpy as np

    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


def markdown_table(rows: Sequence[dict], runs: Sequence[dict], settings: dict, command: str) -> str:
    import numpy as np
    import torch

    final = _final(rows)
    envs = [e for e in settings["envs"] if any(k[0] == e for k in final)]
    methods = [m for m in settings["methods"] if any(k[1] == m for k in final)]
    seeds = sorted({k[2] for k in final})
    header = "| task | " + " | ".join(LABELS[m] for m in methods) + " |"
    rule = "|---|" + "---|" * len(methods)

    differences = {(env, m): protocol_differences(run_config(settings, env, m, seeds[0] if seeds else 0,
                                                              Path("unused"), settings["steps"]))
                   for env in envs for m in methods}

    def table(key: str, with_paper: bool) -> list[str]:
        lines = [header, rule]
        for env in envs:
            cells = []
            for m in methods:
                values = [final[(env, m, s)][key] for s in seeds if (env, m, s) in final]
                cell = mean_std(values)
                paper = PAPER_QWEN3_4B.get(env, {}).get(m)
                if with_paper:
                    if paper is None:
                        cell += " (paper -)"
                    else:
                        cell += " (paper: other protocol)" if differences[(env, m)] else f" (paper {paper:.2f})"
                cells.append(cell)
            lines.append(f"| {short_name(env)} | " + " | ".join(cells) + " |")
        return lines

    compute = ["| task | method | training steps | sampled tokens | training minutes | budget reached |",
               "|---|---|---|---|---|---|"]
    for env in envs:
        for m in methods:
            group = [r for r in runs if r["env"] == env and r["method"] == m]
            if group:
                compute.append(
                    f"| {short_name(env)} | {LABELS[m]} | {np.mean([r['steps'] for r in group]):.1f} | "
                    f"{np.mean([r['sampled_tokens'] for r in group]):,.0f} | "
                    f"{np.mean([r['seconds'] for r in group]) / 60:.1f} | "
                    f"{sum(bool(r.get('reached_budget', True)) for r in group)}/{len(group)} |")
    match = ("the same number of sampled tokens per (env, seed): RLVR's use in "
             f"{settings['steps']} steps" if settings["match"] == "tokens" and not settings["budget_tokens"] else
             f"{settings['budget_tokens']:,} sampled tokens per run" if settings["match"] == "tokens" else
             f"the same number of training steps ({settings['steps']}) with the paper's group sizes")
    return "\n".join([
        "# RLVR vs ERL: final held-out first-attempt results",
        "",
        f"Generated by `{command}`.",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, torch "
        f"{torch.__version__}. Preset `{settings['preset'] or 'none'}`, overrides {json.dumps(settings['trainer'])}; "
        f"seeds {seeds}. Matched compute: {match}.",
        "Held-out evaluation is the paper's protocol: first attempt, initial prompt, no reflection or memory. "
        "Cells are mean ± std over seeds (sample std; one seed shows the value). The paper's numbers are "
        "Qwen3-4B-Instruct-2507 after 100-200 steps on 8 GPUs (its Table 1, final evaluation reward); they are shown "
        "only beside runs whose configuration matches the paper's protocol (the section after the table says what "
        "differs otherwise).",
        "",
        "## Final held-out reward",
        "",
        *table("eval_reward", True),
        "",
        "## Protocol versus the paper's",
        "",
        *protocol_lines(envs, methods, differences),
        "",
        "## Final held-out first-attempt success",
        "",
        *table("eval_success", False),
        "",
        "## Compute used (mean over seeds)",
        "",
        *compute,
        "",
    ])


def protocol_lines(envs: Sequence[str], methods: Sequence[str], differences: dict) -> list[str]:
    """One line per env: the paper's numbers apply, or what differs (docs/fidelity.md lists every departure)."""
    lines = []
    for env in envs:
        found = list(dict.fromkeys(d for m in methods for d in differences[(env, m)]))
        if found:
            lines.append(f"- {short_name(env)}: no paper number beside these runs; they differ in " + "; ".join(found))
        else:
            lines.append(f"- {short_name(env)}: the paper's protocol (the departures that remain are in "
                         "docs/fidelity.md, e.g. BM25 retrieval for HotpotQA)")
    return lines


def plot_curves(rows: Sequence[dict], env: str, methods: Sequence[str], path: Path) -> None:
    """Held-out reward vs step, sampled tokens and training minutes: thin line per seed, thick mean over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    axes_spec = (("step", "training step", 1.0), ("sampled_tokens", "sampled tokens", 1.0),
                 ("training_seconds", "training wall-clock (minutes, eval excluded)", 1 / 60))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, method in enumerate(methods):
        color = colors[index % len(colors)]
        by_seed: dict[int, list[dict]] = {}
        for r in rows:
            if r["env"] == env and r["method"] == method:
                by_seed.setdefault(r["seed"], []).append(r)
        if not by_seed:
            continue
        points = min(len(v) for v in by_seed.values())
        for ax, (key, label, scale) in zip(axes, axes_spec):
            for series in by_seed.values():
                ax.plot([r[key] * scale for r in series], [r["eval_reward"] for r in series], color=color, alpha=0.3,
                        linewidth=0.8)
            # The mean of the k-th evaluation over seeds (evaluations fall at the same steps in every seed).
            xs = [np.mean([v[k][key] * scale for v in by_seed.values()]) for k in range(points)]
            ys = [np.mean([v[k]["eval_reward"] for v in by_seed.values()]) for k in range(points)]
            ax.plot(xs, ys, color=color, marker="o", markersize=3, linewidth=2, label=LABELS[method])
            ax.set_xlabel(label)
    for ax in axes:
        ax.set_ylabel("held-out reward")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{env}: held-out first-attempt reward (mean over seeds; thin lines: single seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(runs: Sequence[dict], settings: dict, output: Path, command: str) -> dict[str, Path]:
    rows = eval_rows(runs)
    files = {"csv": output / "evals.csv", "table": output / "table.md"}
    write_csv(rows, files["csv"])
    files["table"].write_text(markdown_table(rows, runs, settings, command))
    for env in settings["envs"]:
        if any(r["env"] == env for r in rows):
            files[f"curves_{short_name(env)}"] = output / f"curves_{short_name(env)}.png"
            plot_curves(rows, env, settings["methods"], files[f"curves_{short_name(env)}"])
    return files


# ----------------------------------------------------------------------------------------------------------------
# Command line


def load_settings(file: str | None) -> dict:
    """Comparison settings from a YAML/JSON file (keys of DEFAULTS); unknown keys raise ``ValueError``."""
    settings = json.loads(json.dumps(DEFAULTS))
    if file is None:
        return settings
    path = Path(file)
    data = load_data_file(path, "comparison config", 1 << 20)
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"comparison config {path} must hold a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown keys {unknown} in {path}; allowed: {sorted(DEFAULTS)}")
    settings.update(data)
    return settings


def preset_overrides(settings: dict) -> list[str]:
    """Where the `trainer` block, which every run gets, replaces a value the preset chose for one env (HotpotQA's
    float16, say): one line each, naming the env_trainer entry that would set it for the other envs only."""
    env_presets = {env: ENV_PRESETS.get((settings["preset"], env), {}) for env in settings["envs"]}
    lines = []
    for key, value in settings["trainer"].items():
        for env, chosen in env_presets.items():
            if key in chosen and chosen[key] != value and key not in settings["env_trainer"].get(env, {}):
                lines.append(f"trainer.{key}={value!r} overrides the {settings['preset']} preset's {chosen[key]!r} "
                             f"for {env}; set it under env_trainer for the other envs to keep the preset's")
    return lines


def check_settings(settings: dict) -> list[str]:
    bad_envs = [e for e in settings["envs"] if e not in ENVS]
    bad_methods = [m for m in settings["methods"] if m not in METHODS]
    if bad_envs or bad_methods:
        raise ValueError(f"unknown envs {bad_envs} or methods {bad_methods}; envs: {list(ENVS)}, "
                         f"methods: {list(METHODS)}")
    if settings["match"] not in ("tokens", "steps"):
        raise ValueError(f"match must be 'tokens' or 'steps', got {settings['match']!r}")
    if not settings["seeds"] or settings["steps"] < 1:
        raise ValueError("need at least one seed and one step")
    for line in preset_overrides(settings):
        print(f"warning: {line}", file=sys.stderr)
    # Validate every run's configuration before hours of training start, held-out questions included.
    for env in settings["envs"]:
        for method in settings["methods"]:
            run_config(settings, env, method, settings["seeds"][0], Path("unused"), settings["steps"])
    return check_held_out(settings)


def _parse_set(items: Sequence[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set takes KEY=VALUE, got {item!r}")
        try:
            out[key.replace("-", "_")] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key.replace("-", "_")] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--output", type=Path, default=Path("runs/compare"), help="where results and runs go")
    parser.add_argument("--config", help="YAML/JSON comparison settings (e.g. benchmarks/configs/paper-qwen3-4b.yaml)")
    parser.add_argument("--quick", action="store_true", help="CI smoke run: FrozenLake, 1 seed, tiny model, 2 steps")
    parser.add_argument("--preset", help="trainer preset (default cpu-tiny)")
    parser.add_argument("--envs", nargs="+", help=f"env ids (default all: {' '.join(ENVS)})")
    parser.add_argument("--methods", nargs="+", help=f"methods (default all: {' '.join(METHODS)})")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (default 0 1 2)")
    parser.add_argument("--match", choices=("tokens", "steps"), help="what is matched across methods (default tokens)")
    parser.add_argument("--steps", type=int, help="RLVR's training steps, which set the token budget (default 40)")
    parser.add_argument("--budget-tokens", type=int, help="a fixed sampled-token budget per run instead")
    parser.add_argument("--max-steps-factor", type=float, help="cap on a budgeted run's steps, x --steps (default 4)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="TrainConfig overrides for every run (e.g. device=cuda eval_tasks=50)")
    parser.add_argument("--rerun", action="store_true", help="retrain runs that already finished in --output")
    args = parser.parse_args(argv)

    settings = load_settings(args.config)
    if args.quick:
        trainer = {**settings["trainer"], **QUICK["trainer"]}
        settings.update(QUICK)
        settings["trainer"] = trainer
    for key in ("preset", "envs", "methods", "seeds", "match", "steps", "budget_tokens", "max_steps_factor"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    settings["trainer"] = {**settings["trainer"], **_parse_set(args.set)}
    try:
        for note in check_settings(settings):
            print(note, flush=True)
    except (ValueError, TypeError, FileNotFoundError) as err:
        parser.error(" ".join(str(err).split()))

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "settings.json").write_text(json.dumps(settings, indent=2))
    runs = run_comparison(settings, args.output, args.rerun)
    files = write_results(runs, settings, args.output, "python benchmarks/learning/compare.py " + " ".join(argv))
    print((args.output / "table.md").read_text())
    print("written: " + ", ".join(str(p) for p in files.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
