"""Does a policy read the board? Its moves on the cpu-smol setting's held-out FrozenLake maps, against constant play.

    python benchmarks/real_model/board_dependence.py --label untrained                         # SmolLM2-135M as shipped
    python benchmarks/real_model/board_dependence.py --label warm_start --model runs/warm_start/final_model
    python benchmarks/real_model/board_dependence.py --report                                   # rewrite the .md only

For each policy, on each held-out map of the cpu-smol preset (the paper's FrozenLake test maps of sizes 2-4, the maps
``erl-train --preset cpu-smol`` evaluates on, with its prompts and chat template):

* the first-move distribution: each move's probability at turn 1 under the initial prompt, exactly (the model's
  distribution over the four allowed replies, as constrained decoding samples them at temperature 1; the computation
  of bench_reflection_lift.py);
* ``--samples`` episodes per map at the evaluation sampling (temperature, top-p, top-k of the preset): every move
  played, and whether the goal was reached (first attempt, initial prompt: the held-out protocol);
* the moves that start a shortest path (breadth-first), and each constant policy's outcome (always Up, always Down,
  ...), played in the env.

Each run writes ``board_dependence/<label>.json`` (the raw per-map data); the report, board_dependence.md, is computed
from every JSON file in that folder, policies side by side: the rate of a shortest-path first move against a
uniform policy's, held-out success against the best constant policy's (a paired bootstrap over maps for the
difference), the mutual information between board and first move, how often an episode repeats one move to the step
limit, and the per-map table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import rate, write_keeping_analysis  # noqa: E402

DATA = ROOT / "benchmarks" / "results" / "board_dependence"
REPORT = ROOT / "benchmarks" / "results" / "board_dependence.md"
BOOTSTRAP = 10_000


class RecordMoves(gym.Wrapper):
    """Keeps the moves of the current episode as the env read them (index into ``valid_actions``; -1 unreadable)."""

    def reset(self, **kwargs):
        self.moves: list[int] = []
        self.success = False
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        actions = list(self.env.unwrapped.valid_actions)
        self.moves.append(actions.index(action) if action in actions else -1)
        self.success = bool(info.get("success"))
        return obs, reward, terminated, truncated, info


def setting(preset: str = "cpu-smol"):
    """The trainer config of the preset, its held-out tasks (as the trainer picks them) and an env factory."""
    from erl_agents.config import build_config
    from erl_agents.envs import make_env
    from erl_agents.evaluate import eval_tasks

    config = build_config(flags={"preset": preset, "env": "ERL-FrozenLake-v0"})
    tasks = eval_tasks(config.env, config.env_kwargs, config.eval_set, config.eval_tasks)
    kwargs = {**config.env_kwargs, **config.eval_env_kwargs}
    return config, tasks, lambda: make_env(config.env, kwargs)


def constant_outcomes(make_env, tasks) -> dict[str, list[bool]]:
    """Per constant policy (one valid reply every turn), whether it reaches the goal on each map."""
    env = make_env()
    out = {}
    for action in env.unwrapped.valid_actions:
        results = []
        for seed, options in tasks:
            env.reset(seed=seed, options=options)
            while True:
                _, _, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    results.append(bool(info.get("success")))
                    break
        out[action.strip("`")] = results
    return out


def measure(policy, config, tasks, make_env, samples: int, seed: int) -> dict:
    """The raw per-map data of one policy (see the module docstring)."""
    import torch

    from benchmarks.real_model.bench_reflection_lift import first_move_distribution
    from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes
    from erl_agents.sft import shortest_first_moves

    env = make_env()
    probabilities = first_move_distribution(policy, env, tasks)
    shortest = []
    for seed_, options in tasks:
        _, info = env.reset(seed=seed_, options=options)
        shortest.append({"moves": shortest_first_moves(env), "size": info.get("size"),
                         "optimal_steps": info.get("optimal_steps")})
    sampling = SamplingParams(config.eval_temperature, config.eval_top_p, config.eval_top_k, config.max_new_tokens)
    resets = [task for task in tasks for _ in range(samples)]
    envs = [RecordMoves(make_env()) for _ in range(len(tasks))]
    played = []
    torch.manual_seed(seed)
    table = ConstraintTable()
    for start in range(0, len(resets), len(envs)):
        chunk = resets[start:start + len(envs)]
        run_episodes(policy, envs[:len(chunk)], chunk, list(range(len(chunk))), sampling,
                     constrained=config.constrained_actions, max_seq_len=config.max_seq_len, table=table)
        played += [{"moves": e.moves, "success": e.success} for e in envs[:len(chunk)]]
    maps = []
    for i, (task, p, sp) in enumerate(zip(tasks, probabilities, shortest)):
        maps.append({"index": i, "seed": task[0], "options": task[1], **sp, "probability": p,
                     "episodes": played[i * samples:(i + 1) * samples]})
    return {"maps": maps, "actions": [a.strip("`") for a in env.unwrapped.valid_actions],
            "max_steps": int(env.unwrapped.max_steps), "samples": samples,
            "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k},
            "constant": constant_outcomes(make_env, tasks)}


# ---------------------------------------------------------------------------------------------- statistics


def entropy_bits(p) -> float:
    return -sum(x * math.log2(x) for x in p if x > 0)


def summarise(data: dict) -> dict:
    """Every figure of the report, from one policy's raw data."""
    maps, actions = data["maps"], data["actions"]
    n = len(maps)
    p = np.array([m["probability"] for m in maps])
    mean_p = p.mean(axis=0)
    top = Counter(actions[int(np.argmax(row))] for row in p)
    sp_exact = float(np.mean([sum(row[j] for j in m["moves"]) for row, m in zip(p, maps)]))
    uniform = float(np.mean([len(m["moves"]) / len(actions) for m in maps]))
    firsts = [(e["moves"][0], m) for m in maps for e in m["episodes"] if e["moves"]]
    sampled_first = Counter(actions[j] if j >= 0 else "unreadable" for j, _ in firsts)
    sp_sampled = sum(j in m["moves"] for j, m in firsts)
    successes = [sum(e["success"] for e in m["episodes"]) for m in maps]
    episodes = sum(len(m["episodes"]) for m in maps)
    constant = {name: sum(results) for name, results in data["constant"].items()}
    best = max(constant, key=lambda name: constant[name])  # the first of any tie: the same score
    # Paired bootstrap over maps of (policy's success rate on the map) - (best constant's outcome on it).
    per_map = np.array([k / len(m["episodes"]) for k, m in zip(successes, maps)])
    best_per_map = np.array(data["constant"][best], dtype=float)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, n, size=(BOOTSTRAP, n))
    diffs = (per_map[draws] - best_per_map[draws]).mean(axis=1)
    longer = [e for m in maps for e in m["episodes"] if len(e["moves"]) > 1]
    repeat = [e for e in longer if len(set(e["moves"])) == 1 and len(e["moves"]) == data["max_steps"]]
    ranges = {a: (float(p[:, j].min()), float(p[:, j].max())) for j, a in enumerate(actions)}
    only = Counter(actions[m["moves"][0]] for m in maps if len(m["moves"]) == 1)
    return {
        "maps": n, "episodes": episodes, "mean_probability": dict(zip(actions, mean_p.tolist())), "ranges": ranges,
        "most_likely": dict(top), "entropy_bits": float(np.mean([entropy_bits(row) for row in p])),
        "mutual_information_bits": entropy_bits(mean_p) - float(np.mean([entropy_bits(row) for row in p])),
        "sp_exact": sp_exact, "uniform": uniform, "sp_sampled": sp_sampled, "firsts": len(firsts),
        "sampled_first": dict(sampled_first), "successes": sum(successes), "per_map_success": successes,
        "constant": constant, "best": best, "difference": float(per_map.mean() - best_per_map.mean()),
        "difference_interval": (float(np.quantile(diffs, 0.025)), float(np.quantile(diffs, 0.975))),
        "longer": len(longer), "repeat": len(repeat), "only_move": dict(only),
    }


# ---------------------------------------------------------------------------------------------- the report


def load_runs(folder: Path = DATA) -> dict[str, dict]:
    runs = {}
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text())
        runs[run["label"]] = run
    order = ["untrained"] + [k for k in runs if k != "untrained"]
    return {k: runs[k] for k in order if k in runs}


def to_markdown(runs: dict[str, dict]) -> str:
    labels = list(runs)
    s = {label: summarise(run) for label, run in runs.items()}
    first = runs[labels[0]]
    actions = first["actions"]
    n = s[labels[0]]["maps"]
    sizes = sorted({m["size"] for m in first["maps"]})
    lines = [
        "# Board dependence: do the cpu-smol policies read the board?",
        "",
        f"Generated by `python benchmarks/real_model/board_dependence.py --report` from the per-policy data in "
        f"[board_dependence/](board_dependence/) (one JSON file per policy, each written by the run named in it). "
        f"Held-out maps: the {n} paper FrozenLake test maps of sizes {sizes[0]}-{sizes[-1]} that `--preset cpu-smol` "
        f"evaluates on, its small-model prompts and chat template, moves constrained to the {len(actions)} replies, "
        f"step limit {first['max_steps']}.",
        "",
    ]
    for label, run in runs.items():
        lines.append(f"- **{label}**: model `{run['model']}`; {run['samples']} episodes per map at temperature "
                     f"{run['sampling']['temperature']}, top-p {run['sampling']['top_p']}, top-k "
                     f"{run['sampling']['top_k']} (the preset's evaluation sampling); measured by `{run['command']}` "
                     f"on {run['machine']}, load average {run['load'][0]:.1f}-{run['load'][1]:.1f} while it ran, "
                     f"{run['seconds'] / 60:.0f} minutes.")
    lines += ["", "| | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]

    def row(name, cell):
        lines.append(f"| {name} | " + " | ".join(cell(s[label], runs[label]) for label in labels) + " |")

    row("held-out first-attempt success (all sampled episodes)", lambda x, r: rate(x["successes"], x["episodes"]))
    row("best constant policy's success on the same maps",
        lambda x, r: "always " + " or ".join(a for a in actions if x["constant"][a] == x["constant"][x["best"]])
        + f": {rate(x['constant'][x['best']], x['maps'])}")
    row("policy minus best constant (paired bootstrap over maps, 95%)",
        lambda x, r: f"{x['difference']:+.3f} [{x['difference_interval'][0]:+.3f}, {x['difference_interval'][1]:+.3f}]")
    row("every constant policy (maps reached)",
        lambda x, r: ", ".join(f"{a} {x['constant'][a]}/{x['maps']}" for a in actions))
    row("P(shortest-path first move), exact, mean over maps", lambda x, r: f"{x['sp_exact']:.3f}")
    row("the same for a uniform policy", lambda x, r: f"{x['uniform']:.3f}")
    row("sampled first moves that start a shortest path",
        lambda x, r: rate(x["sp_sampled"], x["firsts"]))
    row("mean P(first move), " + " / ".join(actions),
        lambda x, r: " / ".join(f"{x['mean_probability'][a]:.3f}" for a in actions))
    row("range of P(move) across maps",
        lambda x, r: "; ".join(f"{a} {x['ranges'][a][0]:.2f}-{x['ranges'][a][1]:.2f}" for a in actions))
    row("maps on which each move is the most likely",
        lambda x, r: ", ".join(f"{a} {x['most_likely'].get(a, 0)}" for a in actions))
    row("first moves sampled", lambda x, r: ", ".join(f"{a} {x['sampled_first'].get(a, 0)}"
                                                       for a in actions + ["unreadable"]
                                                       if a in actions or x['sampled_first'].get(a)))
    row("mean entropy of the first move (bits; 2 = uniform)", lambda x, r: f"{x['entropy_bits']:.3f}")
    row("mutual information board ; first move (bits; at most 2)", lambda x, r: f"{x['mutual_information_bits']:.3f}")
    row("episodes longer than one move that repeat one move to the step limit",
        lambda x, r: f"{x['repeat']} of {x['longer']}")
    only = s[labels[0]]["only_move"]
    lines += ["", f"Maps with a single shortest-path first move, by that move: "
              + ", ".join(f"{a} {only.get(a, 0)}" for a in actions) + f" (of {n}).",
              "", "Mutual information is between the map (uniform over the held-out maps) and the first move drawn from "
              "the exact distribution: H(mean over maps of P) minus the mean over maps of H(P); 0 means the first "
              "move does not depend on the board. The interval for the difference resamples maps (10,000 draws, "
              "seed 0), pairing each map's sampled success rate with the constant policy's outcome on it.", "",
              "## Per map", "",
              "Shortest-path first moves (breadth-first); per policy, P(" + "/".join(actions) + ") at turn 1 and the "
              "goal reached in the sampled episodes.", "",
              "| map | size | shortest path | shortest first moves | " + " | ".join(labels) + " |",
              "|---|---|---|---|" + "---|" * len(labels)]
    for i, m in enumerate(first["maps"]):
        cells = []
        for label in labels:
            mm = runs[label]["maps"][i]
            cells.append(" / ".join(f"{x:.2f}" for x in mm["probability"])
                         + f"; {sum(e['success'] for e in mm['episodes'])}/{len(mm['episodes'])}")
        lines.append(f"| {m['index']} (seed {m['seed']}) | {m['size']} | {m['optimal_steps']} | "
                     + ", ".join(actions[j] for j in m["moves"]) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def warm_start_lines(folder: Path) -> list[str]:
    """The warm start's run, from the config.json and metrics.jsonl copied beside the report (``folder``)."""
    if not (folder / "metrics.jsonl").exists():
        return []
    config = json.loads((folder / "config.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    head, steps = rows[0], [r for r in rows if "loss" in r]
    checks = [r for r in rows if "validation/success" in r]
    seconds = sorted(r["time/step"] for r in steps)
    lines = ["", "## The warm start", "",
             f"`erl-sft` (erl_agents/sft.py) on {head['demonstrations']} solver demonstrations (breadth-first "
             f"shortest paths, {head['demo_moves']} moves, {head['trained_tokens_per_epoch']} trained tokens a pass) "
             f"of training seeds 0-{config['demos'] - 1} of the `{config['preset']}` env, rendered in its prompts and "
             f"chat template; LoRA rank {config['lora_r']} (0: every weight), learning rate {config['lr']:g}, "
             f"{config['batch']} demonstrations a step; {len(steps)} of {config['steps']} steps done. Loss (nats per "
             f"trained token): {steps[0]['loss']:.3f} at step 1, {steps[-1]['loss']:.3f} at step {steps[-1]['step']}; "
             f"seconds per step: median {statistics.median(seconds):.0f} (one thread, niced, on the loaded machine). "
             "First-attempt success on training seeds no demonstration used (validation, "
             f"{int(checks[0]['validation/episodes']) if checks else 0} episodes at the evaluation sampling): "
             + ", ".join(f"step {r['step']} {r['validation/success']:.3f}" for r in checks) + ". Data: "
             "[warm_start/](warm_start/) (config.json, metrics.jsonl, loss.png)."]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="packaged model name or a saved model folder")
    parser.add_argument("--label", default="untrained", help="the policy's name in the report (its JSON file name)")
    parser.add_argument("--samples", type=int, default=5, help="sampled episodes per held-out map")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = all cores)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--output", type=Path, default=REPORT)
    parser.add_argument("--report", action="store_true", help="only rewrite the report from the JSON files")
    args = parser.parse_args(argv)
    if not args.report:
        if args.samples < 1:
            parser.error(f"--samples must be at least 1, got {args.samples}")
        if not args.label.replace("_", "").replace("-", "").isalnum():
            parser.error(f"--label must be letters, digits, - and _ (it names a file), got {args.label!r}")
        from erl_agents.models import load_model  # first: erl_agents prepares the torch extensions transformers reads

        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        if args.threads:
            torch.set_num_threads(args.threads)
        config, tasks, make_env = setting()
        policy = load_model(args.model, dtype="float32")
        policy.model.eval()
        load = [os.getloadavg()[0]]
        started = time.perf_counter()
        data = measure(policy, config, tasks, make_env, args.samples, args.seed)
        load.append(os.getloadavg()[0])
        model = args.model if not Path(args.model).is_dir() else Path(args.model).name
        data.update(label=args.label, model=model, seed=args.seed, seconds=time.perf_counter() - started,
                    load=[min(load), max(load)], threads=torch.get_num_threads(),
                    machine=f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                            f"{torch.get_num_threads()} thread(s)",
                    command="python benchmarks/real_model/board_dependence.py "
                            + " ".join(a if not Path(a).is_dir() else f"<{Path(a).name}>" for a in argv))
        args.data.mkdir(parents=True, exist_ok=True)
        (args.data / f"{args.label}.json").write_text(json.dumps(data, indent=1) + "\n")
    runs = load_runs(args.data)
    if not runs:
        parser.error(f"no policy data in {args.data}: run without --report first")
    report = to_markdown(runs) + "\n".join(warm_start_lines(args.output.parent / "warm_start"))
    print(report)
    write_keeping_analysis(args.output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
