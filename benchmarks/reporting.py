"""What the result-writing benchmarks share: binomial intervals, and reports whose written analysis survives a rerun.

A results file is a generated part (tables, the command that made them) and, below ``ANALYSIS_MARKER``, the prose
a person wrote about those numbers. Regenerating the tables must not erase the prose.
"""

from __future__ import annotations

import math
from pathlib import Path

ANALYSIS_MARKER = "<!-- analysis -->"


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial rate (sound at 0/n and n/n, unlike the normal approximation)."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(successes: int, n: int) -> str:
    """``k/n = p [low, high]`` with the 95% Wilson interval."""
    if n == 0:
        return "n/a (0 tasks)"
    low, high = wilson(successes, n)
    return f"{successes}/{n} = {successes / n:.2f} [{low:.2f}, {high:.2f}]"


def difference(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float, float]:
    """The difference of two rates, k1/n1 - k2/n2, with its 95% interval by Newcombe's hybrid score method (each
    rate's Wilson interval combined): sound for small counts and rates near 0 or 1, where a normal interval is not."""
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan"), float("nan")
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson(k1, n1), wilson(k2, n2)
    d = p1 - p2
    return d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


# Two-sided 95% quantiles of Student's t by degrees of freedom (no scipy in the core install).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       15: 2.131, 20: 2.086, 30: 2.042}


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """The mean of a few independent runs' values (seeds) with its 95% t-interval: the spread between seeds, which
    an interval on pooled episodes hides. A missing degree of freedom takes the next smaller one in the table (a
    slightly wider interval)."""
    n = len(values)
    if n < 2:
        return (values[0] if values else float("nan")), float("nan"), float("nan")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = T95[max(df for df in T95 if df <= n - 1)]
    half = t * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def write_keeping_analysis(path: Path, generated: str) -> None:
    """Write ``generated`` to ``path``, keeping whatever the old file had below ``ANALYSIS_MARKER``."""
    old = path.read_text() if path.exists() else ""
    kept = old.split(ANALYSIS_MARKER, 1)[1] if ANALYSIS_MARKER in old else "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(generated.rstrip("\n") + "\n\n" + ANALYSIS_MARKER + kept)


# The held-out FrozenLake maps of the cpu-smol setting, played by every constant policy (always Up / Down / Left /
# Right): benchmarks/real_model/board_dependence.py records which maps each one solves.
CONSTANT_POLICY_DATA = Path(__file__).resolve().parent / "results" / "board_dependence" / "untrained.json"


def best_constant(solved: dict[str, list[bool]]) -> tuple[str, int, int, str]:
    """From each constant policy's outcome per map: the best move (the first of a tie), its successes and maps, and
    the others' scores in words."""
    scores = {move: (sum(map(bool, maps)), len(maps)) for move, maps in solved.items()}
    best = max(scores, key=lambda move: scores[move][0])
    others = ", ".join(f"{move} {k}/{n}" for move, (k, n) in scores.items() if move != best)
    return best, *scores[best], others


def best_constant_policy_line(path: Path = CONSTANT_POLICY_DATA) -> str:
    """One sentence giving the best always-one-move policy's held-out FrozenLake score, computed from ``path``: the
    figure a real model's numbers must beat before they say anything about learning."""
    import json

    best, k, n, others = best_constant(json.loads(path.read_text())["constant"])
    return (f"Best constant policy on the cpu-smol held-out FrozenLake maps (always {best}): {rate(k, n)} "
            f"(others: {others}; from `{path.relative_to(path.parents[3])}`).")
