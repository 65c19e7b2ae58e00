"""Mutation testing of one module with mutmut, against the test files that pin it (docs/testing.md).

    python tests/mutation.py erl_agents/grpo.py                      # every mutant of the module
    python tests/mutation.py erl_agents/update.py --only '*micro_batch_loss*'   # one function's mutants
    python tests/mutation.py erl_agents/rollout.py --only '*x__finish__*' --tests tests/agents/test_trainer_rows.py
    python tests/mutation.py --list                                   # the targeted modules and their tests

mutmut copies the source into ``mutants/`` and turns every function of the mutated module into a switch between
the original and its mutants; each mutant then runs only the tests that called the mutated function (recorded in a
first, clean run). This script gives each module its own scratch folder, ``.mutmut/<module>/``, holding a copy of
the packages and tests and a ``setup.cfg`` whose ``[mutmut]`` section names that module and its test files, so a
run costs one pass of a few test files plus the mutants, not the whole suite. The tests run as they do in the
repository (``--import-mode=importlib``, ``pythonpath = . tests`` from ``[tool:pytest]``), with the mutated copy
first on the path: mutmut checks that by running a forced failure first. Every run is niced, one torch thread per
test process, each mutant under a CPU-time limit of about 30x its tests' clean time (mutmut's timeout rule with
``timeout_multiplier`` 15). The summary (killed, survived, timed out, score) is printed and written to
``.mutmut/<module>/summary.json``; ``--survivors`` also prints each surviving mutant's diff.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Each targeted module and the fast test files that pin it (slow learning runs are never part of a mutation run).
TARGETS = {
    "erl_agents/grpo.py": ["tests/agents/test_grpo.py"],
    "erl_agents/batch.py": ["tests/agents/test_batch.py"],
    "erl_agents/update.py": ["tests/agents/test_update.py", "tests/agents/test_accelerator.py",
                             "tests/agents/test_lora.py"],
    "erl_agents/rollout.py": ["tests/agents/test_rollout.py", "tests/agents/test_rollout_kv_reuse.py",
                              "tests/agents/test_batch.py", "tests/agents/test_trainer_rows.py",
                              *(f"tests/agents/test_faults.py::{name}" for name in (  # the episode budgets
                                  "test_truncated_replies_are_counted_and_optionally_masked_from_the_loss",
                                  "test_token_budget_ends_an_episode_with_reward_zero_and_a_flag",
                                  "test_episodes_within_budget_are_untouched",
                                  "test_time_budget_ends_episodes_after_the_turn_that_overran",
                                  "test_budget_inside_a_reflection_episode_stores_nothing"))],
    # generate_replies and the KV caches moved here from rollout.py; test_vllm.py's tests skip without vLLM.
    "erl_agents/engines/hf.py": ["tests/agents/test_rollout.py", "tests/agents/test_rollout_kv_reuse.py",
                                 "tests/agents/engines/test_base.py"],
    "erl_agents/engines/weights.py": ["tests/agents/engines/test_weights.py", "tests/agents/engines/test_base.py"],
    "erl_envs/qa/scoring.py": ["tests/envs/qa/test_scoring.py", "tests/envs/qa/test_tools.py"],
    "erl_envs/qa/search.py": ["tests/envs/qa/test_search.py"],
    "erl_envs/qa/tools.py": ["tests/envs/qa/test_tools.py"],
    "erl_envs/qa/data.py": ["tests/envs/qa/test_data.py", "tests/envs/qa/test_hotpotqa.py"],
    "erl_envs/qa/hotpotqa.py": ["tests/envs/qa/test_hotpotqa.py"],
    "erl_envs/reflection/wrapper.py": ["tests/envs/reflection/test_wrapper.py",
                                       "tests/envs/reflection/test_wrapper_utf8.py",
                                       "tests/envs/reflection/test_memory.py", "tests/envs/test_prompt_sets.py",
                                       "tests/envs/test_protocol.py"],
    "erl_envs/reflection/vector.py": ["tests/envs/reflection/test_wrapper.py"],
    "erl_envs/reflection/memory.py": ["tests/envs/reflection/test_memory.py"],
    "erl_envs/reflection/trace.py": ["tests/envs/reflection/test_trace.py",
                                     "tests/envs/reflection/test_reflectors.py",
                                     "tests/envs/reflection/test_wrapper.py", "tests/envs/test_prompt_sets.py"],
    "erl_envs/reflection/rulebooks.py": ["tests/envs/reflection/test_reflectors.py"],
    "erl_envs/reflection/reflectors.py": ["tests/envs/reflection/test_reflectors.py"],
}
# What the scratch folder needs besides the mutated packages: the tests and their helpers.
COPIED = ("erl_envs", "erl_agents", "tests", "benchmarks", "examples", "setup.cfg")


def scratch_folder(module: str) -> Path:
    return ROOT / ".mutmut" / module.removesuffix(".py").replace("/", ".")


def prepare(module: str, folder: Path, fresh: bool, tests: list[str]) -> None:
    """Copy the packages and tests into ``folder`` and write its ``[mutmut]`` section: mutate ``module``, run
    ``tests``."""
    if fresh and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        source, target = ROOT / name, folder / name
        if target.exists() and name != "tests":
            continue
        if target.exists():  # a resumed run re-checks its mutants against the tests as they are now
            shutil.rmtree(target)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    config = configparser.ConfigParser(interpolation=None)
    config.read(folder / "setup.cfg")
    config["mutmut"] = {
        "source_paths": "\nerl_envs\nerl_agents",
        "only_mutate": f"\n{module}",
        "pytest_add_cli_args_test_selection": "\n" + "\n".join(tests),
        "pytest_add_cli_args": "\n-p\nno:cacheprovider",
        # Tests that run an example script or read a benchmark's helpers find them beside the mutated packages.
        "also_copy": "\nexamples\nbenchmarks",
        # torch is not fork-safe once its thread pool runs: mutants fork from a server that never ran a test.
        "process_isolation": "forkserver",
        "timeout_multiplier": "15",
        "use_git_change_detection": "false",
    }
    with open(folder / "setup.cfg", "w") as handle:
        config.write(handle)


def checked_and_caught(counts: Counter) -> tuple[int, int]:
    """Mutants a run checked (not "no tests", unchecked or skipped) and those it caught (killed, timed out,
    crashed): the score is their ratio."""
    checked = sum(n for status, n in counts.items() if status not in ("no tests", "not checked", "skipped"))
    return checked, counts["killed"] + counts["timeout"] + counts["segfault"]


def summarise(folder: Path, module: str, tests: list[str]) -> dict:
    """Mutant counts by status, read from the meta file mutmut writes beside the mutated module."""
    from mutmut.stats import status_by_exit_code

    meta = json.loads((folder / "mutants" / (module + ".meta")).read_text())
    statuses = {name: status_by_exit_code[code] for name, code in meta["exit_code_by_key"].items()}
    counts = Counter(statuses.values())
    checked, caught = checked_and_caught(counts)
    return {
        "module": module,
        "tests": tests,
        "mutants": len(statuses),
        "counts": dict(sorted(counts.items())),
        "score": caught / checked if checked else None,
        "survived": sorted(name for name, status in statuses.items() if status == "survived"),
        "no_tests": sorted(name for name, status in statuses.items() if status == "no tests"),
    }


RESULTS = ROOT / "docs" / "mutation"  # each module's last summary, committed: docs/testing.md's table is made from it


def export(folder: Path = RESULTS, scratch: Path = ROOT / ".mutmut") -> list[Path]:
    """Copy each scratch folder's summary (the module's state after its last run: every mutant's status is kept
    across ``--resume`` runs) into ``folder`` as ``<module>.json``, without the run's ``--only`` list."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for summary_path in sorted(scratch.glob("*/summary.json")):
        summary = json.loads(summary_path.read_text())
        summary.pop("only", None)
        target = folder / (summary["module"].removesuffix(".py").replace("/", ".") + ".json")
        target.write_text(json.dumps(summary, indent=1) + "\n")
        written.append(target)
    return written


def table(folder: Path = RESULTS) -> str:
    """The per-module table of docs/testing.md, computed from the exported summaries."""
    rows = ["| module | mutants | checked | killed + timeout | survived | no tests | score |",
            "|---|---|---|---|---|---|---|"]
    for path in sorted(folder.glob("*.json")):
        summary = json.loads(path.read_text())
        counts = Counter(summary["counts"])
        checked, caught = checked_and_caught(counts)
        score = "n/a" if not checked else f"{caught / checked:.3f}"
        rows.append(f"| `{summary['module']}` | {summary['mutants']} | {checked} | {counts['killed']} + "
                    f"{counts['timeout']} | {counts['survived']} | {counts['no tests']} | {score} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", nargs="?", choices=sorted(TARGETS), help="the module to mutate")
    parser.add_argument("--only", action="extend", nargs="+", default=[], metavar="NAME",
                        help="mutant name globs to run (e.g. '*group_advantages*'); the rest stay unchecked")
    parser.add_argument("--max-children", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the scratch folder and mutmut's results from an earlier run, with the tests copied "
                             "anew; only unchecked mutants and those named with --only are run")
    parser.add_argument("--tests", nargs="+", default=None, metavar="FILE",
                        help="run the mutants against these test files instead of the module's own list (e.g. the "
                             "one file that pins the functions named with --only)")
    parser.add_argument("--nice", type=int, default=10,
                        help="niceness of the run (default 10: other work on the machine goes first)")
    parser.add_argument("--survivors", action="store_true", help="print each surviving mutant's diff")
    parser.add_argument("--list", action="store_true", help="list the targeted modules and their test files")
    parser.add_argument("--export", action="store_true",
                        help=f"copy every module's last summary to {RESULTS.relative_to(ROOT)}/ and print the table")
    parser.add_argument("--table", action="store_true",
                        help=f"print docs/testing.md's score table from {RESULTS.relative_to(ROOT)}/")
    args = parser.parse_args(argv)
    if args.export or args.table:
        if args.export:
            for path in export():
                print("wrote", path.relative_to(ROOT))
        print(table())
        return 0
    if args.list or args.module is None:
        for module, tests in TARGETS.items():
            print(f"{module}: {' '.join(tests)}")
        return 0 if args.list else 2
    try:
        import mutmut  # noqa: F401
    except ImportError:
        parser.error("mutmut is not installed: pip install -e '.[dev]'")
    folder = scratch_folder(args.module)
    tests = args.tests or TARGETS[args.module]
    prepare(args.module, folder, fresh=not args.resume, tests=tests)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # Tests that read the shared data (paper test sets, the HotpotQA sample) find it from the scratch copy too.
    env.setdefault("ERL_SHARED", str(ROOT.parent / "shared"))
    # The scratch copy must be what the tests import: drop path entries pointing at the repository itself.
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and Path(p).resolve() != ROOT)
    command = ["nice", "-n", str(args.nice), sys.executable, "-m", "mutmut", "run",
               "--max-children", str(args.max_children), *args.only]
    print("running", " ".join(command), "in", folder, flush=True)
    code = subprocess.run(command, cwd=folder, env=env).returncode
    summary = summarise(folder, args.module, tests)
    summary["only"] = args.only
    (folder / "summary.json").write_text(json.dumps(summary, indent=1))
    score = "n/a" if summary["score"] is None else f"{summary['score']:.3f}"
    print(f"\n{args.module}: {summary['mutants']} mutants, {summary['counts']}, score {score}")
    for name in summary["survived"]:
        print("survived:", name)
        if args.survivors:
            subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=folder, env=env)
    return code


if __name__ == "__main__":
    sys.exit(main())
