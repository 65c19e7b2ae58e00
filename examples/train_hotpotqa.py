"""Train RLVR and ERL on ERL-HotpotQA-v0 on CPU with the tiny in-code model (no downloads).

The cpu-tiny preset plays the offline synthetic corpus (data="synthetic"); the tiny model cannot learn QA, this shows the pipeline end to end.

    python examples/train_hotpotqa.py                 # ERL, then RLVR
    python examples/train_hotpotqa.py --algo rlvr --steps 20
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from erl_agents.config import build_config  # noqa: E402
from erl_agents.train import summary_table  # noqa: E402
from erl_agents.trainer import Trainer  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=["erl", "rlvr", "both"], default="both")
    parser.add_argument("--steps", type=int, default=None, help="override the preset's step count")
    parser.add_argument("--output", default="runs/hotpotqa")
    args = parser.parse_args()
    for algo in (["erl", "rlvr"] if args.algo == "both" else [args.algo]):
        flags = {"env": "ERL-HotpotQA-v0", "algo": algo, "output": f"{args.output}-{algo}"}
        if args.steps is not None:
            flags["steps"] = args.steps
        config = build_config({"preset": "cpu-tiny", "env": "ERL-HotpotQA-v0"}, flags=flags)
        print(f"== {algo} on {config.env} -> {config.output}")
        print(summary_table(Trainer(config).train()))
