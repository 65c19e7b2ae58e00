"""``erl-train``: train a policy with RLVR or ERL on a text env, from flags, a preset and/or a config file.

Examples::

    erl-train --env ERL-FrozenLake-v0 --algo erl --preset cpu-tiny
    erl-train --env ERL-Sokoban-v0 --algo rlvr --preset paper-qwen3-4b --output runs/sokoban-rlvr
    erl-train --config my_run.yaml --steps 50 --resume
    erl-train --config my_run.yaml --resume --lr 5e-7 --resume-changes lr   # resume refuses other changes of meaning
    # HotpotQA: train on one question set, evaluate on the paper's (its file has no passages: keep the corpus).
    # Held-out questions that overlap the training ones (same id or normalised text), or no held-out data at all,
    # stop the run with one error line unless --allow-eval-overlap is given. --env-kwargs replaces the preset's, so
    # it repeats the paper's tool protocol and answer reading.
    erl-train --env ERL-HotpotQA-v0 --preset paper-qwen3-4b --env-kwargs '{"data": "train.jsonl", "corpus": "wiki.jsonl",
        "protocol": "paper", "answer_extraction": "paper"}' --eval-env-kwargs '{"data": "../shared/paper_tasks/hotpotqa_val_first1024.parquet"}'
    torchrun --nproc_per_node 8 -m erl_agents.train --preset paper-qwen3-4b --device cuda   # data parallel

Every field of ``TrainConfig`` is a flag (``--tasks-per-step``; booleans also as ``--no-...``); precedence is
defaults < preset < config file < flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import typing
from typing import Any, Sequence

from erl_agents.config import PRESETS, TrainConfig, build_config

__all__ = ["build_parser", "parse_config", "summary_table", "main"]


def _field_help(source: str) -> dict[str, str]:
    """The one-line comment beside each field in config.py becomes its --help text."""
    helps = {}
    for line in source.splitlines():
        stripped = line.strip()
        if ":" in stripped and "#" in stripped and not stripped.startswith("#"):
            name = stripped.split(":", 1)[0].strip()
            if name.isidentifier():
                helps[name] = stripped.split("#", 1)[1].strip()
    return helps


def build_parser() -> argparse.ArgumentParser:
    import inspect

    from erl_agents import config as config_module

    helps = _field_help(inspect.getsource(config_module.TrainConfig))
    hints = typing.get_type_hints(TrainConfig)
    parser = argparse.ArgumentParser(
        prog="erl-train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--config", help="YAML or JSON file of field overrides (applied after --preset)")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error instead of one line")
    parser.add_argument("--env-kwarg", action="append", default=argparse.SUPPRESS, metavar="KEY=VALUE",
                        help="one keyword argument for gym.make (repeatable, e.g. size=3), over --env-kwargs or the "
                             "preset's and config file's; a value is read as JSON when it parses")
    for field in dataclasses.fields(TrainConfig):
        flag = "--" + field.name.replace("_", "-")
        kind = hints[field.name]
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        help_text = helps.get(field.name, "")
        if field.name == "preset":
            help_text += f" (one of {sorted(PRESETS)})"
        # default=SUPPRESS: only flags the user typed override the preset and the config file.
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                                help=f"{help_text} (default: {default})")
        elif kind is dict:  # read with limits in _config_from_args, so that a bad value is one error line
            parser.add_argument(flag, default=argparse.SUPPRESS, metavar="JSON",
                                help=f"{help_text} (default: {default})")
        else:
            parser.add_argument(flag, type=kind, default=argparse.SUPPRESS, metavar=kind.__name__.upper(),
                                help=f"{help_text} (default: {default!r})")
    return parser


def parse_config(argv: Sequence[str] | None = None) -> TrainConfig:
    args = vars(build_parser().parse_args(argv))
    args.pop("debug", None)
    return _config_from_args(args)


def _config_from_args(args: dict[str, Any]) -> TrainConfig:
    from erl_envs.safe_parse import loads_json

    for field in dataclasses.fields(TrainConfig):
        if field.name in args and typing.get_type_hints(TrainConfig)[field.name] is dict:
            flag = "--" + field.name.replace("_", "-")
            try:
                args[field.name] = loads_json(args[field.name], max_chars=1 << 20)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{flag} is not valid JSON: {exc.msg} (at character {exc.pos})") from None
    file = args.pop("config", None)
    preset = {"preset": args["preset"]} if "preset" in args else {}
    pairs = args.pop("env_kwarg", [])
    if pairs:  # over the env_kwargs in force: --env-kwargs, else the config file's or the preset's
        from erl_envs.safe_parse import key_values

        base = args["env_kwargs"] if "env_kwargs" in args else build_config(preset, file=file, flags=args).env_kwargs
        args["env_kwargs"] = {**base, **key_values(pairs)}
    return build_config(preset, file=file, flags=args)


def summary_table(metrics: Sequence[dict], run_dir: str | os.PathLike | None = None) -> str:
    """The end-of-run table: first and last held-out success, last training success per role, time split, and
    where the run's files are (``run_dir``)."""
    if not metrics:
        return "no steps were run"
    evals = [m for m in metrics if "eval/success" in m]
    trained = [m for m in metrics if m.get("step", 0) > 0]
    lines = ["| metric | value |", "|---|---|"]
    if evals:
        # First and last; one row when the run evaluated once (e.g. an ERL run started with --no-eval-at-start).
        for m in (evals[0], evals[-1]) if len(evals) > 1 else evals:
            lines.append(f"| held-out success, step {m['step']} | {m['eval/success']:.3f} |")
        best = max(evals, key=lambda m: m["eval/success"])
        lines.append(f"| best held-out success (step {best['step']}) | {best['eval/success']:.3f} |")
    if trained:
        last = trained[-1]
        # No "lift" row: lift is r2 - r1 over retried episodes, whose r1 is below the gate, so with 0/1 rewards it
        # repeats success/attempt2 (metrics.jsonl keeps lift, lift/r1 and lift/r2).
        for key in ("success/attempt1", "success/attempt2", "reward/reflection", "entropy"):
            if key in last:
                lines.append(f"| {key} (last step) | {last[key]:.3f} |")
        for part in ("generation", "env", "update", "eval"):
            total = sum(m.get(f"time/{part}", 0.0) for m in metrics)
            lines.append(f"| time in {part} | {total:.1f} s |")
        lines.append(f"| wall time | {last.get('time/elapsed', 0.0):.1f} s ({last['step']} steps) |")
    if run_dir is not None:
        lines.append(f"| learning curves | {os.path.join(run_dir, 'curves.png')} |")
        lines.append(f"| metrics per step | {os.path.join(run_dir, 'metrics.jsonl')} |")
    return "\n".join(lines)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "fix your command, file or disk", not "bug": they end the run with one line."""
    import gymnasium

    from erl_agents.checkpoint import CorruptCheckpointError
    from erl_agents.run_folder import RunFolderLockedError
    from erl_agents.tracking import TrackerNotInstalled
    from erl_envs.integrations.remote import RemoteEnvError

    return (ValueError, TypeError, OSError, gymnasium.error.Error, CorruptCheckpointError, RunFolderLockedError,
            RemoteEnvError, TrackerNotInstalled)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``erl-train``; returns the exit status.

    A run that cannot start (a bad value or config file, an unknown env, an unusable run folder or checkpoint, a
    refused ``--resume``) or that stops on purpose (``NonFiniteTrainingError``, a full or read-only disk) ends with
    one ``erl-train: error: ...`` line and status 2, as argparse does for a bad flag: the message says what to fix
    and a traceback would only hide it (``--debug`` shows it). Any other exception during training is a bug and
    keeps its traceback.
    """
    args = vars(build_parser().parse_args(argv))
    debug = args.pop("debug")
    try:
        config = _config_from_args(args)
    except _user_errors() as exc:
        return _fail(exc, debug)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    from erl_agents.distributed import close_world, init_world
    from erl_agents.run_folder import RunFolderError
    from erl_agents.trainer import Trainer
    from erl_agents.update import NonFiniteTrainingError
    from erl_envs.integrations.remote import RemoteEnvError

    # Under torchrun (WORLD_SIZE > 1) this process is one data-parallel rank; otherwise a world of one.
    device_type = "cuda" if config.device == "cuda" or (config.device == "auto" and _cuda_available()) else "cpu"
    try:
        world = init_world(device_type, config.backend)
    except _user_errors() as exc:
        return _fail(exc, debug)
    finished = False
    try:
        try:
            # Building the trainer applies the config: envs from env_kwargs, the model, the checkpoint to resume.
            trainer = Trainer(config, world=world)
        except _user_errors() as exc:
            return _fail(exc, debug)
        try:
            metrics = trainer.train()
        except (NonFiniteTrainingError, RunFolderError) as exc:
            return _fail(exc, debug)
        except RemoteEnvError as exc:  # the env server went away or refused: the checkpoints so far are intact
            stopped = RuntimeError(f"{exc}; once the server answers again, --resume continues from the checkpoints "
                                   f"in {config.output}")
            stopped.__cause__ = exc
            return _fail(stopped, debug)
        # The DDP wrapper and its pending gloo/nccl work go before the process group does, not during interpreter
        # shutdown, where freeing them can deadlock.
        del trainer
        gc.collect()
        finished = True
    finally:
        close_world(world, synchronize=finished)
    if world.is_main:
        print(summary_table(metrics, config.output))
        print(f"run directory: {config.output}")
    if world.enabled:
        # A rank is done once its output is flushed; skipping interpreter finalization means no library thread
        # (gloo's workers, tqdm's monitor) can keep a finished rank alive (pytorch/pytorch#75097).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _fail(exc: BaseException, debug: bool = False) -> int:
    if debug:
        raise exc
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"erl-train: error: {message}", file=sys.stderr)
    return 2


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
