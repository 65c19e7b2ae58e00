"""Where the tests find the project and the read-only shared data (``../shared`` beside the checkout, or
``$ERL_SHARED``): one place, whatever folder a test file sits in."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ERL_SHARED", ROOT.parent / "shared"))
PAPER_TASKS = SHARED / "paper_tasks"
HOTPOTQA_SAMPLE = SHARED / "hotpotqa"
