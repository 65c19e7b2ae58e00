"""Held-out evaluation, the paper's protocol: first attempt only, initial prompt, no reflection, no memory.

The held-out tasks are the paper's test set for the grid games when its folder is given (``../shared/paper_tasks``
in this project) or asked for (``eval_set="paper"``: the copies shipped with erl_envs), else a seeded split whose
seeds training never draws (training seeds are below ``EVAL_SEED_BASE``). For HotpotQA, ``eval_set="paper"`` is the
reference's evaluation: every question of the paper's list (the first 1,024 validation questions), once each, in
order, played by index on the held-out env, whose questions are checked against that list.
Unseen seeds give unseen grid games, but an env that draws from a fixed pool (HotpotQA's questions) would replay
its training pool: the trainer then builds its evaluation envs from ``eval_env_kwargs`` (other data, another
synthetic world).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import gymnasium as gym
import numpy as np

from erl_agents.engines import Engine
from erl_agents.models import Policy
from erl_agents.rollout import ConstraintTable, SamplingParams, run_episodes

__all__ = ["EVAL_SEED_BASE", "Task", "seeded_tasks", "paper_tasks", "paper_tasks_folder", "task_fits", "eval_tasks",
           "eval_overlap_problem", "paper_questions", "paper_questions_problem", "evaluate", "merge_eval_results"]

# The paper's HotpotQA evaluation questions, in the paper_tasks folder.
HOTPOTQA_PAPER_FILE = "hotpotqa_val_first1024.parquet"

# Training task seeds are drawn from [0, EVAL_SEED_BASE); held-out seeds start here.
EVAL_SEED_BASE = 2**30

Task = tuple  # (seed, reset options or None)


def seeded_tasks(count: int, base: int = EVAL_SEED_BASE) -> list[Task]:
    return [(base + i, None) for i in range(count)]


def paper_tasks(env_id: str, folder: str | os.PathLike | None = None) -> list[Task] | None:
    """The paper's test instances as ``(seed, options)`` for our envs, or ``None`` when there is none for ``env_id``.

    Read from ``folder`` when it holds them (``../shared/paper_tasks``), else from the copies shipped with erl_envs
    (``erl_envs.paper_tasks``). FrozenLake rows are generator parameters (seed, size, p), which our default
    generator turns into the reference's maps; Sokoban layouts are exact.
    """
    from erl_envs import paper_tasks as packaged

    folder = Path(folder) if folder is not None else None
    if env_id.startswith("ERL-FrozenLake"):
        if folder is not None and (folder / "frozenlake_test.parquet").exists():
            import pandas as pd

            rows = [r._asdict() for r in pd.read_parquet(folder / "frozenlake_test.parquet").itertuples()]
        else:
            rows = packaged.frozenlake_test_rows()
        return [(int(r["seed"]), {"size": int(r["size"]), "p": float(r["p"])}) for r in rows]
    if env_id.startswith("ERL-Sokoban"):
        if folder is not None and (folder / "sokoban_test.parquet").exists():
            import pandas as pd

            rows = pd.read_parquet(folder / "sokoban_test.parquet")
            return [(int(r.index), {"level": [str(line) for line in r.layout]}) for r in rows.itertuples()]
        return [(int(r["index"]), {"level": list(r["layout"])}) for r in packaged._sokoban_records()]
    return None


def paper_tasks_folder() -> Path | None:
    """The paper's task sets: ``$ERL_PAPER_TASKS``, else ``$ERL_SHARED/paper_tasks``, else ``../shared/paper_tasks``
    beside this checkout; ``None`` when none of them is a folder."""
    candidates = [os.environ.get("ERL_PAPER_TASKS", "")]
    if os.environ.get("ERL_SHARED"):
        candidates.append(os.path.join(os.environ["ERL_SHARED"], "paper_tasks"))
    candidates.append(str(Path(__file__).resolve().parents[2] / "shared" / "paper_tasks"))
    return next((Path(c) for c in candidates if c and os.path.isdir(c)), None)


def task_fits(options: dict | None, env_kwargs: dict) -> bool:
    """Whether a paper instance lies inside the sizes ``env_kwargs`` trains on: FrozenLake's ``size`` is a range of
    board sides, Sokoban's the largest level shape (height, width)."""
    size, options = env_kwargs.get("size"), options or {}
    if size is None:
        return True
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if "size" in options and not min(pair) <= options["size"] <= max(pair):
        return False
    return not ("level" in options and (len(options["level"]) > pair[0] or max(map(len, options["level"])) > pair[1]))



def paper_questions(folder: str | os.PathLike | None) -> list[str] | None:
    """The paper's HotpotQA evaluation questions, in order, from ``folder``; None when it does not hold them."""
    path = Path(folder) / HOTPOTQA_PAPER_FILE if folder is not None else None
    if path is None or not path.exists():
        return None
    import pandas as pd

    return [str(q) for q in pd.read_parquet(path, columns=["question"])["question"]]


def paper_questions_problem(eval_env: gym.Env, questions: Sequence[str]) -> str | None:
    """Why ``eval_env`` cannot play the paper's HotpotQA questions by index (its first questions must be those, in
    order), or None when it can."""
    held_out = getattr(eval_env.unwrapped, "questions", None)
    if held_out is None:
        return "eval_set 'paper' plays a question list by index, and this env has none"
    squash = lambda text: " ".join(text.split())  # noqa: E731
    if len(held_out) < len(questions):
        return (f"eval_set 'paper' plays the paper's {len(questions)} HotpotQA questions, but the held-out env has "
                f"{len(held_out)}: give it the first {len(questions)} validation questions, e.g. --eval-env-kwargs "
                "'{\"data\": \"hf:hotpotqa/hotpot_qa:distractor:validation\", \"limit\": 1024}'")
    for i, (ours, paper) in enumerate(zip(held_out, questions)):
        if squash(ours.question) != squash(paper):
            return (f"the held-out env's question {i} is {ours.question[:80]!r} but the paper's is {paper[:80]!r}: "
                    "eval_set 'paper' needs the first validation questions in the paper's order")
    return None


def eval_tasks(env_id: str, env_kwargs: dict, eval_set: str, count: int) -> list[Task]:
    """The held-out tasks of a run: with ``eval_set`` ``"auto"`` or ``"paper"`` the paper's test instances of the
    trained sizes (from a paper_tasks folder when one is found, else the copies shipped with erl_envs), else (or when
    the env has none, under ``"auto"``) ``count`` seeded tasks. HotpotQA under ``"paper"``: the first ``count`` of
    the paper's questions (all 1,024 when ``count`` is at least that), each once, in order, by index."""
    if eval_set == "paper" and env_id.startswith("ERL-HotpotQA"):
        questions = paper_questions(paper_tasks_folder())
        if questions is None:
            raise ValueError(f"eval_set 'paper' for HotpotQA needs {HOTPOTQA_PAPER_FILE} in a paper_tasks folder "
                             "(set ERL_PAPER_TASKS); or use --eval-set seeded")
        return [(EVAL_SEED_BASE + i, {"index": i}) for i in range(min(count, len(questions)))]
    if eval_set in ("auto", "paper"):
        # A run on 2-4 boards is not evaluated on 9x9 ones, nor one on far goals (min_path) on near ones.
        tasks = paper_tasks(env_id, paper_tasks_folder())
        tasks = [t for t in tasks if task_fits(t[1], env_kwargs)] if tasks is not None else []
        if tasks and env_kwargs.get("min_path"):
            tasks = _far_enough(env_id, tasks, int(env_kwargs["min_path"]))
        if tasks:
            return tasks[:count]
        if eval_set == "paper":
            raise ValueError(f"no paper test instance for {env_id} of the trained sizes "
                             f"(env_kwargs size {env_kwargs.get('size')!r}); use --eval-set seeded")
    return seeded_tasks(count)


def _far_enough(env_id: str, tasks: list[Task], min_path: int) -> list[Task]:
    """The tasks whose shortest solution (the env's ``optimal_steps``) takes at least ``min_path`` moves."""
    import erl_envs  # noqa: F401  (registers the ERL envs)

    env = gym.make(env_id)
    return [task for task in tasks if (env.reset(seed=task[0], options=task[1])[1].get("optimal_steps") or 0)
            >= min_path]


def eval_overlap_problem(train_env: gym.Env, eval_env: gym.Env) -> str | None:
    """Why held-out evaluation on ``eval_env`` would not be held out, or None when it is (or cannot tell).

    Only envs with a fixed question list (``env.unwrapped.questions``, e.g. HotpotQA) can overlap: the grid envs'
    held-out instances come from their own seeds or the paper's test files.
    """
    from erl_envs.qa.data import shared_questions

    train = getattr(train_env.unwrapped, "questions", None)
    held_out = getattr(eval_env.unwrapped, "questions", None)
    if train is None or held_out is None:
        return None
    if train_env is eval_env:
        return (f"held-out evaluation would ask the {len(train)} training questions: give it other questions with "
                "--eval-env-kwargs '{\"data\": ...}' (e.g. ../shared/hotpotqa/dev_distractor_sample_dev.jsonl when "
                "training on ..._train.jsonl), or pass --allow-eval-overlap to evaluate on training questions")
    shared = shared_questions(train, held_out)
    if not shared:
        return None
    return (f"{len(shared)} of the {len(held_out)} held-out questions are also training questions (same id or "
            f"same normalised text, e.g. {shared[0].question[:80]!r}): evaluate on a disjoint split, or pass "
            "--allow-eval-overlap to accept the overlap")



def evaluate(
    policy: Engine | Policy,
    envs: Sequence[gym.Env],
    tasks: Sequence[Task],
    samples: int,
    sampling: SamplingParams,
    constrained: bool = False,
    max_seq_len: int = 8192,
    kv_reuse: bool = True,
    response_budget: int = 0,
    progress: bool = False,
) -> dict[str, float]:
    """Success rate and mean return of first attempts, ``samples`` per task, in chunks of ``len(envs)`` episodes
    (``response_budget``: as in training, see ``run_episodes``), sampled by ``policy``: a generation engine, or a
    bare ``Policy`` (the hf engine).

    ``progress`` shows a bar of episodes played (it moves once per chunk) with an ETA: a real model's evaluation
    can take many minutes.
    """
    resets = [task for task in tasks for _ in range(samples)]
    owners = [i for i in range(len(tasks)) for _ in range(samples)]
    returns, successes, tokens = [], [], 0
    table = ConstraintTable()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(resets), desc="held-out eval", unit="episode", leave=False, dynamic_ncols=True)
    for start in range(0, len(resets), len(envs)):
        chunk = resets[start:start + len(envs)]
        episodes = run_episodes(policy, envs[: len(chunk)], chunk, owners[start:start + len(chunk)], sampling,
                                constrained=constrained, max_seq_len=max_seq_len, table=table, kv_reuse=kv_reuse,
                                response_budget=response_budget)
        for episode in episodes:
            returns.append(episode.returns)
            successes.append(float(episode.success))
            tokens += sum(t.num_model_tokens for t in episode.trajectories)
        if bar is not None:
            bar.update(len(chunk))
            bar.set_postfix(success=round(float(np.mean(successes)), 3))
    if bar is not None:
        bar.close()
    per_task = np.asarray(successes).reshape(len(tasks), samples).mean(axis=1)
    return {
        "success": float(np.mean(successes)),
        "reward": float(np.mean(returns)),
        "solved_any": float(np.mean(per_task > 0)),
        "episodes": float(len(resets)),
        "tokens": float(tokens),
    }


def merge_eval_results(parts: Sequence[dict[str, float] | None], samples: int) -> dict[str, float]:
    """One result from several ranks' ``evaluate`` results on disjoint task blocks (None: a rank with no tasks).

    Rates over episodes are weighted by episodes, ``solved_any`` (a rate over tasks, ``samples`` episodes each) by
    tasks; counts add up.
    """
    parts = [p for p in parts if p is not None and p["episodes"] > 0]
    if not parts:
        raise ValueError("no rank evaluated any episode: give eval_tasks at least one task")
    episodes = sum(p["episodes"] for p in parts)
    tasks = [p["episodes"] / samples for p in parts]
    return {
        "success": sum(p["success"] * p["episodes"] for p in parts) / episodes,
        "reward": sum(p["reward"] * p["episodes"] for p in parts) / episodes,
        "solved_any": sum(p["solved_any"] * n for p, n in zip(parts, tasks)) / sum(tasks),
        "episodes": episodes,
        "tokens": sum(p["tokens"] for p in parts),
    }
