"""Exact statistics of values read a chunk at a time: numpy's floats in bounded memory.

A streaming replay's summary takes percentiles, means and standard deviations over
millions of values that live on disk (:mod:`prefillkit.records.spill`). These functions
give the very floats numpy gives for the whole array in memory, holding at most about
``limit`` values at once:

- **order statistics** (:func:`order_stats`): a radix selection on each double's
  order-preserving 64-bit key, 16 bits a pass (one histogram of 65,536 counts per
  sought rank), until the bucket holding a rank has at most ``limit`` values, which are
  then gathered and partitioned in memory (or all 64 bits are known: the value itself);
  a handful of passes over the values;
- **percentiles** (:func:`percentiles`): numpy's default ``linear`` method (Hyndman and
  Fan's 7th) from the two order statistics around the virtual index ``(n - 1) * q /
  100``, with numpy's own interpolation (``numpy.lib._function_base_impl._lerp``:
  ``a + (b - a) * g``, or ``b - (b - a) * (1 - g)`` from ``g >= 0.5``);
  ``tests/test_exact_stats.py`` checks them against ``np.percentile``;
- **sums** (:func:`pairwise_sum`): numpy sums a contiguous float64 array by pairwise
  summation (``pairwise_sum`` in numpy's loops: below 8 values in order, up to 128 in 8
  interleaved partial sums, above that the two halves, the first rounded down to a
  multiple of 8). A half's sum depends only on its own values and length, so a half of
  at most ``limit`` values read alone and reduced by numpy is the float it is inside
  the whole array; larger halves are split as numpy splits them. :func:`mean_std` is
  ``np.mean`` and ``np.std`` (population) from those sums.

Values are doubles without NaN (the callers filter them); ``-0.0`` and ``0.0`` are
distinct keys here, equal to numpy (a TTFT difference is never ``-0.0``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = ["LIMIT", "mean_std", "order_stats", "pairwise_sum", "percentiles"]

#: Values held in memory at once: 65,536 doubles (512 KiB).
LIMIT: int = 1 << 16

#: A fresh pass over the values, in order, each call (chunks of any length).
Chunks = Callable[[], Iterable["np.ndarray"]]
#: The values ``[lo, hi)`` of a column, as a float64 array.
Reader = Callable[[int, int], "np.ndarray"]

_DIGIT_BITS = 16
_PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE
_SIGN = 1 << 63


def _keys(values: np.ndarray) -> np.ndarray:
    """Order-preserving unsigned keys of doubles: negative ones bit-flipped, the sign
    bit set on the rest (so unsigned order is numeric order)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    neg = (bits >> np.uint64(63)).astype(bool)
    return np.where(neg, ~bits, bits | np.uint64(_SIGN))


def _value(key: int) -> float:
    """The double of a key (the inverse of :func:`_keys`)."""
    bits = key ^ _SIGN if key & _SIGN else ~key & 0xFFFF_FFFF_FFFF_FFFF
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def order_stats(
    chunks: Chunks, n: int, ranks: Iterable[int], limit: int = LIMIT
) -> dict[int, float]:
    """The ``k``-th smallest (from 0) of the ``n`` values for each ``k`` in ``ranks``."""
    wanted = sorted(set(ranks))
    if not wanted:
        return {}
    if wanted[0] < 0 or wanted[-1] >= n:
        raise ValueError(f"ranks {wanted} outside 0..{n - 1}")
    out: dict[int, float] = {}
    # Groups of ranks whose values share a key prefix: (prefix, bits known) -> the
    # group's value count and its ranks as (rank, rank within the group).
    groups: dict[tuple[int, int], tuple[int, list[tuple[int, int]]]] = {
        (0, 0): (n, [(k, k) for k in wanted])
    }
    while groups:
        gather = {g: m for g, m in groups.items() if m[0] <= limit}
        refine = {g: m for g, m in groups.items() if m[0] > limit}
        for (prefix, known), (_, members) in list(refine.items()):
            if known == 64:  # every value in the group is the same double
                v = _value(prefix)
                for rank, _ in members:
                    out[rank] = v
                del refine[(prefix, known)]
        hists = {g: np.zeros(1 << _DIGIT_BITS, dtype=np.int64) for g in refine}
        found: dict[tuple[int, int], list[np.ndarray]] = {g: [] for g in gather}
        if not hists and not found:
            break
        for chunk in chunks():
            if len(chunk) == 0:
                continue
            keys = _keys(chunk)
            for g, hist in hists.items():
                sel = _in_group(keys, *g)
                shift = np.uint64(64 - g[1] - _DIGIT_BITS)
                digits = (sel >> shift) & np.uint64((1 << _DIGIT_BITS) - 1)
                hist += np.bincount(digits.astype(np.intp), minlength=1 << _DIGIT_BITS)
            for g, parts in found.items():
                parts.append(_in_group(keys, *g))
        for g, parts in found.items():
            keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
            members = groups[g][1]
            inner = [r for _, r in members]
            keys.partition(inner)
            for rank, r in members:
                out[rank] = _value(int(keys[r]))
        nxt: dict[tuple[int, int], tuple[int, list[tuple[int, int]]]] = {}
        for (prefix, known), hist in hists.items():
            cum = np.cumsum(hist)
            for rank, r in groups[(prefix, known)][1]:
                b = int(np.searchsorted(cum, r, side="right"))
                below = int(cum[b - 1]) if b else 0
                key = ((prefix << _DIGIT_BITS) | b, known + _DIGIT_BITS)
                nxt.setdefault(key, (int(hist[b]), []))[1].append((rank, r - below))
        groups = nxt
    return out


def _in_group(keys: np.ndarray, prefix: int, known: int) -> np.ndarray:
    """The keys whose top ``known`` bits are ``prefix``."""
    if known == 0:
        return keys
    return keys[(keys >> np.uint64(64 - known)) == np.uint64(prefix)]


def percentiles(chunks: Chunks, n: int, qs: Sequence[float], limit: int = LIMIT) -> list[float]:
    """``np.percentile`` (linear) of the ``n`` values at each ``q`` in ``qs`` (0..100);
    ``n`` must be at least 1."""
    if n <= limit:
        parts = list(chunks())
        arr = np.concatenate(parts) if parts else np.zeros(0)
        return [float(v) for v in np.percentile(arr, qs)]
    plan = [_interpolation(n, q) for q in qs]
    stats = order_stats(chunks, n, [i for p in plan for i in p[:2]], limit)
    return [_lerp(stats[lo], stats[hi], g) for lo, hi, g in plan]


def _interpolation(n: int, q: float) -> tuple[int, int, float]:
    """numpy's linear method: the ranks either side of the virtual index and its
    fractional part (numpy: ``_quantile``, ``_get_indexes``, ``_get_gamma``)."""
    virtual = (n - 1) * (q / 100)
    if virtual >= n - 1:
        return n - 1, n - 1, virtual - math.floor(virtual)
    if virtual < 0:
        return 0, 0, virtual - math.floor(virtual)
    lo = math.floor(virtual)
    return lo, lo + 1, virtual - lo


def _lerp(a: float, b: float, g: float) -> float:
    """numpy's ``_lerp``: the interpolation between the order statistics."""
    diff = b - a
    return b - diff * (1 - g) if g >= 0.5 else a + diff * g


def pairwise_sum(read: Reader, lo: int, n: int, limit: int = LIMIT) -> float:
    """``np.add.reduce`` of the ``n`` values from ``lo`` (numpy's pairwise tree).

    NOTE: numpy splits only above 128 values (its block), so neither does this."""
    if n <= max(limit, _PAIRWISE_BLOCK):
        return float(np.add.reduce(read(lo, lo + n)))
    half = n // 2
    half -= half % 8
    return pairwise_sum(read, lo, half, limit) + pairwise_sum(read, lo + half, n - half, limit)


def mean_std(read: Reader, n: int, limit: int = LIMIT) -> tuple[float, float]:
    """``np.mean`` and ``np.std`` (population) of the ``n`` values (``n >= 1``).

    numpy's ``_var``: the deviations from the mean, squared, summed pairwise, over ``n``."""
    mean = pairwise_sum(read, 0, n, limit) / n

    def squared(a: int, b: int) -> np.ndarray:
        dev: np.ndarray = read(a, b) - mean
        return np.multiply(dev, dev, out=dev)

    var = pairwise_sum(squared, 0, n, limit) / n
    return mean, math.sqrt(var)
