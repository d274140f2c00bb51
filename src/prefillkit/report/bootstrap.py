"""Paired bootstrap of TTFT statistics (:mod:`prefillkit.report.paired`'s intervals).

Every variant of a comparison replays the same requests, so request indices are
resampled jointly for both runs: the between-request variance an unpaired bootstrap
would leave in the interval drops out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bootstrap_diffs", "bootstrap_p99_diff"]

# Bootstrap resamples are drawn in blocks of about this many indices to bound memory.
_BOOT_BLOCK_ELEMS = 4_000_000


def bootstrap_diffs(
    base_ttft: Sequence[float] | np.ndarray,
    other_ttft: Sequence[float] | np.ndarray,
    stats: Sequence[float | None],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> list[tuple[float, float, float]]:
    """Paired bootstrap of several statistics at once: ``(diff, lo, hi)`` per stat.

    A stat is a quantile in (0, 1] or ``None`` for the mean. The resamples are the same
    for every stat (and, for 0.99, the same as :func:`bootstrap_p99_diff` with the same
    seed, which is this with ``stats=[0.99]``). No pairs: NaN triples.
    """
    b = np.asarray(base_ttft, dtype=float)
    o = np.asarray(other_ttft, dtype=float)
    if b.ndim != 1 or o.ndim != 1 or b.shape != o.shape:
        raise ValueError(
            f"bootstrap needs two 1-D arrays of equal length, got {b.shape} and {o.shape}"
        )
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    n = len(b)
    if n == 0:
        return [(math.nan, math.nan, math.nan) for _ in stats]

    def stat(x: np.ndarray, q: float | None, axis: int | None = None) -> Any:
        return np.mean(x, axis=axis) if q is None else np.quantile(x, q, axis=axis)

    point = [float(stat(o, q) - stat(b, q)) for q in stats]
    rng = np.random.default_rng(seed)
    block = max(1, _BOOT_BLOCK_ELEMS // n)
    diffs = np.empty((len(stats), n_boot), dtype=float)
    for start in range(0, n_boot, block):
        stop = min(n_boot, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        ob, bb = o[idx], b[idx]
        for k, q in enumerate(stats):
            diffs[k, start:stop] = stat(ob, q, axis=1) - stat(bb, q, axis=1)
    alpha = (1.0 - ci) / 2.0
    out = []
    for k in range(len(stats)):
        lo, hi = np.quantile(diffs[k], [alpha, 1.0 - alpha])
        out.append((point[k], float(lo), float(hi)))
    return out


def bootstrap_p99_diff(
    base_ttft: Sequence[float] | np.ndarray,
    other_ttft: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[float, float, float]:
    """Paired bootstrap of ``p99(other) - p99(base)``: returns ``(diff, lo, hi)``.

    ``base_ttft[i]`` and ``other_ttft[i]`` must be the same request. Each resample draws
    request indices with replacement and applies them to both arrays jointly; ``lo``/``hi``
    are the percentile interval at level ``ci``. Deterministic for a given ``seed``. With no
    pairs the result is ``(nan, nan, nan)``.
    """
    b = np.asarray(base_ttft, dtype=float)
    o = np.asarray(other_ttft, dtype=float)
    if b.ndim != 1 or o.ndim != 1 or b.shape != o.shape:
        raise ValueError(
            f"bootstrap_p99_diff needs two 1-D arrays of equal length, got {b.shape} and {o.shape}"
        )
    ((diff, lo, hi),) = bootstrap_diffs(b, o, [0.99], n_boot=n_boot, seed=seed, ci=ci)
    return diff, lo, hi
