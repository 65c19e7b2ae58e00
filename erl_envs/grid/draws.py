"""Exact, cheaper stand-ins for the few ``numpy.random.Generator`` calls that level generation makes per try.

``Generator.integers`` and ``Generator.choice`` spend ten times longer on argument handling than on the draw, and
the grid games' generators call them on every try of every reset. These functions compute the very numbers those
calls would, from the same 32-bit outputs of the bit generator (read through its ``ctypes`` interface, buffered
half-words included), and leave the generator in the same state, so a seed keeps giving the same level. The tests
check them against ``numpy`` over thousands of seeds (``tests/envs/grid/test_draws.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["integers", "choice_without_replacement"]

_WORD = 1 << 32


def _lemire(next_uint32, state, n: int) -> int:
    """One draw in [0, n), 1 < n <= 2**32: numpy's bounded 32-bit draw (Lemire's method, redrawing biased words)."""
    m = next_uint32(state) * n
    low = m & 0xFFFFFFFF
    if low < n:
        threshold = (_WORD - n) % n
        while low < threshold:
            m = next_uint32(state) * n
            low = m & 0xFFFFFFFF
    return m >> 32


def integers(rng: np.random.Generator, n: int, count: int) -> list[int]:
    """``rng.integers(0, n, size=count).tolist()``, the same numbers and the same generator state afterwards."""
    if n == 1:
        return [0] * count  # integers(0, 1) draws nothing
    if not 1 < n <= _WORD:
        return [int(v) for v in rng.integers(0, n, size=count)]
    bits = rng.bit_generator.ctypes
    next_uint32, state = bits.next_uint32, bits.state
    values = []
    for _ in range(count):  # _lemire, inlined: this is the generators' innermost loop
        m = next_uint32(state) * n
        if m & 0xFFFFFFFF < n:
            threshold = (_WORD - n) % n
            while m & 0xFFFFFFFF < threshold:
                m = next_uint32(state) * n
        values.append(m >> 32)
    return values


def choice_without_replacement(rng: np.random.Generator, n: int, k: int) -> list[int]:
    """``rng.choice(n, size=k, replace=False).tolist()`` for small samples (numpy's Floyd branch), exactly.

    Floyd's algorithm draws one number per slot (the slot's own index when the number was already taken), then the
    sample is shuffled by Fisher-Yates with bounded draws: the steps numpy takes when ``n`` is at most 10,000 or
    ``k`` is small next to it. Other cases go to ``rng.choice`` itself.
    """
    if not 0 < k <= n or (n > 10_000 and k > n // 50) or n > _WORD:
        return [int(v) for v in rng.choice(n, size=k, replace=False)]
    bits = rng.bit_generator.ctypes
    next_uint32, state = bits.next_uint32, bits.state
    sample: list[int] = []
    taken: set[int] = set()
    for j in range(n - k, n):
        value = 0 if j == 0 else _lemire(next_uint32, state, j + 1)  # a draw in [0, j]
        if value in taken:
            value = j
        taken.add(value)
        sample.append(value)
    for i in range(k - 1, 0, -1):  # Fisher-Yates from the end, each swap partner a bounded draw in [0, i]
        j = _lemire(next_uint32, state, i + 1)
        sample[i], sample[j] = sample[j], sample[i]
    return sample
