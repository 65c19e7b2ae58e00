"""erl_envs.grid.draws gives exactly the numbers of the numpy calls it stands in for, and leaves the same state."""

import numpy as np
import pytest

from erl_envs.grid.draws import choice_without_replacement, integers


def _pair(seed, warm):
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    if warm:  # leaves half of a 64-bit output buffered for the next 32-bit draw
        a.integers(0, 5), b.integers(0, 5)
    return a, b


@pytest.mark.parametrize("n", [1, 2, 3, 7, 9, 16, 81, 1000, 2**31 + 11, 2**32, 2**40])
def test_integers_equal_generator_integers(n):
    for seed in range(300):
        a, b = _pair(seed, seed % 2)
        assert integers(a, n, 5) == b.integers(0, n, size=5).tolist()
        assert a.bit_generator.state == b.bit_generator.state


@pytest.mark.parametrize("n, k", [(3, 3), (4, 3), (16, 3), (36, 3), (49, 5), (64, 3), (200, 7), (10_000, 3),
                                  (20_000, 3), (20_000, 1000), (5, 1)])
def test_choice_equals_generator_choice(n, k):
    for seed in range(300):
        a, b = _pair(seed, seed % 2)
        assert choice_without_replacement(a, n, k) == b.choice(n, size=k, replace=False).tolist()
        assert a.bit_generator.state == b.bit_generator.state


def test_uniform_is_an_affine_random_draw():
    """What the env writes for rng.uniform(lo, hi): lo + (hi - lo) * rng.random(), to the bit."""
    for seed in range(300):
        assert np.random.default_rng(seed).uniform(0.6, 0.85) == 0.6 + 0.25 * np.random.default_rng(seed).random()
