"""Shared test fixtures: where the read-only shared data lives, and headless pygame."""

import os
from pathlib import Path

import pytest

import erl_agents  # noqa: F401  (first: its OpenMP settings must precede torch's import; erl_agents/cpu_threads.py)
from paths import HOTPOTQA_SAMPLE, PAPER_TASKS

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")


@pytest.fixture
def paper_tasks() -> Path:
    if not PAPER_TASKS.is_dir():
        pytest.skip(f"the paper's task sets are not at {PAPER_TASKS} (set ERL_SHARED to the shared/ folder)")
    return PAPER_TASKS


@pytest.fixture
def hotpotqa_sample() -> Path:
    if not HOTPOTQA_SAMPLE.is_dir():
        pytest.skip(f"the HotpotQA sample is not at {HOTPOTQA_SAMPLE} (set ERL_SHARED to the shared/ folder)")
    return HOTPOTQA_SAMPLE


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Index caches built by tests go to a temp folder, never the user's ~/.cache."""
    os.environ["ERL_GYM_CACHE"] = str(tmp_path_factory.mktemp("erl_gym_cache"))
    yield
