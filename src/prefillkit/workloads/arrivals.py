"""Poisson arrival times, drawn from a seeded ``numpy`` generator (the generators' clock)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = ["poisson_array", "poisson_arrivals"]


def poisson_arrivals(rng: np.random.Generator, n: int, rate: float) -> list[float]:
    """``n`` Poisson arrivals at ``rate`` per second, the first at 0 (inf: all at 0)."""
    return poisson_array(rng, n, rate).tolist()  # type: ignore[no-any-return]


def poisson_array(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """:func:`poisson_arrivals` as a float64 array (8 bytes per arrival)."""
    if math.isinf(rate):
        return np.zeros(n)
    gaps = rng.exponential(1.0 / rate, size=max(n - 1, 0))
    out = np.empty(n)
    if n:
        out[0] = 0.0
        np.cumsum(gaps, out=out[1:])
    return out
