"""Shared test fixtures: where the read-only shared data lives, and headless pygame."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

# ../shared beside the project root (CI lays a copy there); ERL_SHARED overrides it.
SHARED = Path(os.environ.get("ERL_SHARED", Path(__file__).resolve().parents[1].parent / "shared"))
PAPER_TASKS = SHARED / "paper_tasks"
HOTPOTQA_SAMPLE = SHARED / "hotpotqa"


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
