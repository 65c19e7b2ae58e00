"""The two generation engines on one batch of free-text replies, at several batch sizes: where vLLM's lead comes from.

    python benchmarks/speed/bench_engine_batches.py                # batches of 1, 8 and 32; 2 interleaved rounds
    python benchmarks/speed/bench_engine_batches.py --report-only  # rewrite engine_batches.md from its JSON

The regime of the issue's measurement (a batch of chat prompts, 64 sampled tokens each, temperature 1), not the
trainer's: SmolLM2-135M-Instruct's replies to cpu-smol's FrozenLake first observations (one per seed), sampled with
the hf engine (float32, the cpu-smol preset's dtype) and the vLLM engine (``--vllm-dtype``), each reply ending at
end-of-turn or 64 tokens. One untimed call per engine first (first calls build kernels). Each round runs every
batch size on both engines, the engine order alternating per round, so load drift hits both alike. The figure is sampled tokens over the seconds in the engine's ``sample`` call.
``engines.md`` measures the trainer's own rollouts; this file says how the ratio between the engines depends on the
batch, which is what separates the two.

Results: benchmarks/results/engine_batches.md, computed from engine_batches.json beside it by this script.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"

from benchmarks.reporting import best_constant_policy_line, write_keeping_analysis  # noqa: E402


def _contexts(policy, count: int) -> list[list[int]]:
    """The cpu-smol env's first conversation openings (system prompt and first board) for seeds 0..count-1."""
    from erl_agents.config import build_config
    from erl_agents.envs import make_env
    from erl_envs.protocol import instructions_of

    config = build_config(flags=dict(preset="cpu-smol", progress=False))
    env = make_env(config.env, config.env_kwargs)
    openings = []
    for seed in range(count):
        obs, _ = env.reset(seed=seed)
        openings.append(policy.chat.open(instructions_of(env), obs))
    return openings


def _rounds(rounds: int, batches: list[int], tokens: int, vllm_dtype: str) -> list[dict]:
    import torch

    from erl_agents.engines.base import SamplingParams
    from erl_agents.engines.hf import HFEngine
    from erl_agents.engines.vllm import VLLMEngine
    from erl_agents.models import load_policy

    policy = load_policy("smollm2-135m", dtype="float32")
    engines = {"hf": HFEngine(policy, kv_reuse=False),
               "vllm": VLLMEngine(policy, tempfile.mkdtemp(prefix="erl-bench-batches-"), dtype=vllm_dtype,
                                  max_model_len=2048)}
    contexts = _contexts(policy, max(batches))
    sampling = SamplingParams(1.0, 1.0, 0, tokens)
    rows = []
    try:
        for engine in engines.values():
            engine.sample(contexts[:2], sampling)  # untimed: first calls build kernels and caches
        for number in range(rounds):
            order = ("hf", "vllm") if number % 2 == 0 else ("vllm", "hf")
            for batch in batches:
                for name in order:
                    torch.manual_seed(number)
                    load = round(os.getloadavg()[0], 2)
                    clock = time.perf_counter()
                    replies = engines[name].sample(contexts[:batch], sampling)
                    seconds = time.perf_counter() - clock
                    row = {"round": number, "engine": name, "batch": batch, "seconds": seconds, "load": load,
                           "tokens": sum(len(r.ids) for r in replies)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        engines["vllm"].close()
    return rows


def summary(data: dict) -> dict:
    """Per batch size and engine: all rounds' sampled tokens over all rounds' seconds."""
    out: dict = {}
    for row in data["rounds"]:
        cell = out.setdefault(row["batch"], {}).setdefault(row["engine"], {"tokens": 0, "seconds": 0.0})
        cell["tokens"] += row["tokens"]
        cell["seconds"] += row["seconds"]
    return out


def to_markdown(data: dict, data_name: str) -> str:
    s = summary(data)
    lines = [
        "# hf vs vLLM by batch size: one batch of free-text replies",
        "",
        f"Command: `{data['command']}`  ",
        f"Machine: {data['machine']}; load average (1 min) per measurement: "
        f"{', '.join(str(r['load']) for r in data['rounds'])}.  ",
        f"Model: SmolLM2-135M-Instruct; hf engine in float32, vLLM in {data['vllm_dtype']}; replies to cpu-smol's "
        f"FrozenLake first observations (seeds 0..batch-1), temperature 1, up to {data['tokens']} tokens each; "
        f"{data['rounds_run']} interleaved round(s).",
        "",
        "These are speed figures (the replies are not scored); for scale: " + best_constant_policy_line(),
        "",
        "| batch | hf tokens | hf s | hf tokens/s | vLLM tokens | vLLM s | vLLM tokens/s | vLLM / hf |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for batch in sorted(s):
        hf, vllm = s[batch].get("hf"), s[batch].get("vllm")
        if not (hf and vllm):
            continue
        hf_rate, vllm_rate = hf["tokens"] / hf["seconds"], vllm["tokens"] / vllm["seconds"]
        lines.append(f"| {batch} | {hf['tokens']} | {hf['seconds']:.1f} | {hf_rate:.1f} | {vllm['tokens']} | "
                     f"{vllm['seconds']:.1f} | {vllm_rate:.1f} | {vllm_rate / hf_rate:.1f}x |")
    lines += ["", f"Raw measurements: `{data_name}` beside this file (every figure above is computed from it by "
              f"`benchmarks/speed/bench_engine_batches.py --report-only`)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes")
    parser.add_argument("--tokens", type=int, default=64, help="most tokens a reply may sample")
    parser.add_argument("--vllm-dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from its JSON")
    parser.add_argument("--output", default=str(RESULTS / "engine_batches.md"))
    args = parser.parse_args(argv)
    output = Path(args.output)
    data_path = output.with_suffix(".json")
    if args.report_only:
        write_keeping_analysis(output, to_markdown(json.loads(data_path.read_text()), data_path.name))
        print(output.read_text())
        return 0
    batches = [int(b) for b in args.batches.split(",")]
    data = {"command": "python benchmarks/speed/bench_engine_batches.py " + " ".join(
                argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
            "vllm_dtype": args.vllm_dtype, "tokens": args.tokens, "rounds_run": args.rounds}
    data["rounds"] = _rounds(args.rounds, batches, args.tokens, args.vllm_dtype)
    data_path.write_text(json.dumps(data, indent=1))
    text = to_markdown(data, data_path.name)
    write_keeping_analysis(output, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
