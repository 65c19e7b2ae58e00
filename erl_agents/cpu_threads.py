"""CPU threads that share cores with other work: OpenMP's idle workers spin briefly, then sleep.

torch's CPU kernels run on libgomp's thread pool, whose idle workers spin for about 300,000 iterations (milliseconds)
before they sleep. Alone, that saves a wake-up between two kernels; beside other runs (seeds side by side, a test
suite beside a training run) spinning workers hold the cores that the others need, and four 12-step cpu-tiny runs
started together took 16x one run instead of about 4x. A short spin keeps most of the lone speed and gives the
cores back within microseconds. It changes when a thread sleeps, never how work is split, so results do not depend
on it; the thread count does (one thread and two sum floats in another order), which is why presets fix it.

libgomp reads its settings once, when torch is first imported: ``share_cores`` must run before that, so
``erl_agents`` calls it on import, as do the test suite and the benchmarks. A setting of the user's own
(``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``) is left as it is.
"""

from __future__ import annotations

import os
import sys

__all__ = ["SPIN_COUNT", "share_cores"]

# Spin iterations before an idle OpenMP worker sleeps (libgomp's default is 300,000).
SPIN_COUNT = 10_000


def share_cores() -> bool:
    """Set libgomp's spin count for this process and its children; returns whether it was set (False: torch was
    already imported, or the user chose a wait policy or spin count)."""
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return False
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    return True
