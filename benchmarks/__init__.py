"""Benchmarks: speed against named baselines, learning checks, real-model studies, soak tests.

Importing erl_agents here applies its OpenMP settings (erl_agents/cpu_threads.py) before a benchmark imports torch,
so that benchmarks running beside other work share the cores as erl-train does.
"""

import erl_agents  # noqa: F401
