"""The model a run starts from: a real one loaded by name or folder, or the tiny model built in code.

The tiny model is built once, saved in the run folder (``initial_model/``) and from then on loaded like any Hugging
Face model (the KL reference and resumed runs read it back from there). It is a function of the seed and the config
alone (``initial_model_spec``), so a copy that does not match its manifest (a kill or a full disk during its first
save), that was built for another run (another seed or shape), or that does not load is rebuilt rather than trusted.
Its weights are read from safetensors only: a pickle planted in the folder is never opened.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym

from erl_agents.config import TrainConfig
from erl_agents.envs import tiny_corpus
from erl_agents.models import Policy, build_tiny_model, build_tiny_tokenizer, load_policy
from erl_agents.run_folder import folder_problem, save_folder
from erl_envs.safe_parse import loads_json, read_text_limited

__all__ = ["INITIAL_MODEL_SPEC", "as_json_value", "initial_model_spec", "initial_model_problem", "build_tiny_policy",
           "load_run_policy"]

# Inside initial_model/: what the tiny model was built from (seed, env, shape), so that it is never reused for
# another run.
INITIAL_MODEL_SPEC = "erl_initial_model.json"


def as_json_value(value):
    """``value`` as JSON reads it back (tuples become lists, other objects their ``str``), as config.json holds it."""
    return json.loads(json.dumps(value, default=str))


def initial_model_spec(config: TrainConfig) -> dict:
    """What the tiny initial model is a function of: the seed, the env its tokenizer read, and its shape."""
    names = ("seed", "env", "env_kwargs", "tiny_hidden", "tiny_layers", "tiny_heads", "tiny_intermediate",
             "tiny_vocab", "tiny_grid_tokens")
    return {**{name: getattr(config, name) for name in names}, "max_positions": max(config.max_seq_len, 512)}


def initial_model_problem(folder: Path, expected: dict) -> str | None:
    """Why ``folder`` is not the initial model ``expected`` describes (damaged, or built for another run), or None."""
    problem = folder_problem(folder)
    if problem is not None:
        return problem
    try:
        spec = loads_json(read_text_limited(folder / INITIAL_MODEL_SPEC, 1 << 16, "model spec"))
    except (OSError, ValueError) as exc:
        return f"{folder} has no readable {INITIAL_MODEL_SPEC} ({' '.join(str(exc).split())[:120]})"
    if spec != expected:
        differ = [k for k in expected if not isinstance(spec, dict) or spec.get(k) != expected[k]]
        shown = ", ".join(f"{k} {spec.get(k) if isinstance(spec, dict) else None!r} (this run: {expected[k]!r})"
                          for k in differ)
        return f"{folder} was built for another run ({shown})"
    return None


def build_tiny_policy(config: TrainConfig, env: gym.Env) -> Policy:
    """The tiny Llama and a tokenizer trained on ``env``'s text, from the seed."""
    # Row tokens need every row the env can show in the corpus twice; random play repeats rare rows (the agent
    # beside the goal) seldom: 20k episodes (~1 s) cover 338 of the 344 rows of a 2-4 board.
    episodes = 20_000 if config.tiny_grid_tokens == "row" else 200
    corpus = tiny_corpus(env, episodes, seed=config.seed)
    tokenizer = build_tiny_tokenizer(corpus, vocab_size=config.tiny_vocab, grid_tokens=config.tiny_grid_tokens)
    model = build_tiny_model(tokenizer, config.tiny_hidden, config.tiny_layers, config.tiny_heads,
                             config.tiny_intermediate, max_positions=max(config.max_seq_len, 512), seed=config.seed)
    return Policy(model, tokenizer)


def load_run_policy(config: TrainConfig, dtype: str, device: str, spec: dict, env: gym.Env, writes: bool,
                    reference: bool = False) -> Policy:
    """The run's policy in ``dtype`` (or, with ``reference``, the frozen KL reference). ``spec`` is the run's
    initial-model spec (a resumed run keeps its own); ``writes``: this process may (re)build and save the tiny model
    (rank 0), else it only reads it."""
    if config.model != "tiny":
        return load_policy(config.model, dtype=dtype, device=device)
    folder = Path(config.output) / "initial_model"
    problem = None if reference else initial_model_problem(folder, spec)
    if problem is None or not (writes or not folder.exists()):
        try:
            return load_policy(str(folder), dtype=dtype, device=device, safetensors_only=True)
        except (OSError, ValueError) as exc:
            if reference or not writes:
                raise
            problem = f"{folder} cannot be loaded ({' '.join(str(exc).split())[:200]})"
    if folder.exists():
        warnings.warn(f"{problem}; rebuilding the initial tiny model from the seed and the config",
                      RuntimeWarning, stacklevel=3)
    now = as_json_value(initial_model_spec(config))
    if spec != now:
        changed = sorted(k for k in spec if spec[k] != now.get(k))
        raise ValueError(f"{problem}, and it cannot be rebuilt: this resume changed {', '.join(changed)} since "
                         "the run started; resume once with the run's original values to rebuild it")
    policy = build_tiny_policy(config, env)
    if not writes:
        import torch

        policy.model.to(getattr(torch, dtype))
        return policy

    def save(path: str) -> None:
        policy.save(path)
        (Path(path) / INITIAL_MODEL_SPEC).write_text(json.dumps(spec, indent=1))

    save_folder(folder, save)
    return load_policy(str(folder), dtype=dtype, device=device, safetensors_only=True)
