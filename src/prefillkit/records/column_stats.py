"""A streaming run's spilled columns (:class:`~prefillkit.records.spill.SpillColumns`)
read a chunk at a time, for :mod:`prefillkit.records.stream_summary`: a view of one
column (or of a range of its rows), its TTFT and latency statistics
(:mod:`prefillkit.records.exact_stats`' floats), how many values lie before given
times, the executor's busy time before given times, and a column without its NaNs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.records.exact_stats import mean_std, percentiles
from prefillkit.records.slo import pct_key
from prefillkit.records.spill import SpillColumns
from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = [
    "BusyChunks",
    "Column",
    "busy_before",
    "column_max",
    "count_before",
    "finite_column",
    "latency_stats",
    "ttft_stats",
]

#: A fresh pass over the executor's busy intervals, sorted by start: (starts, durations)
#: arrays a chunk at a time.
BusyChunks = Callable[[], Iterable[tuple["np.ndarray", "np.ndarray"]]]


class Column:
    """One column of a :class:`SpillColumns` (or a filtered view of one) as the
    selection and the sums read it."""

    def __init__(self, cols: SpillColumns, name: str, lo: int = 0, hi: int | None = None) -> None:
        self.cols, self.name = cols, name
        self.lo = lo
        self.hi = len(cols) if hi is None else hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def chunks(self) -> Iterator[np.ndarray]:
        return self.cols.chunks(self.name, self.lo, self.hi)

    def read(self, a: int, b: int) -> np.ndarray:
        return self.cols.read(self.name, self.lo + a, self.lo + b)


def ttft_stats(
    chunks: Callable[[], Iterable[np.ndarray]], n: int, prefix: str, limit: int
) -> dict[str, float | None]:
    """:func:`prefillkit.records.steady.ttft_stats` over ``n`` values read by ``chunks``."""
    if n == 0:
        return dict.fromkeys((f"{prefix}{q}_s" for q in ("p50", "p90", "p99", "max")), None)
    p50, p90, p99 = percentiles(chunks, n, (50, 90, 99), limit)
    return {
        f"{prefix}p50_s": p50,
        f"{prefix}p90_s": p90,
        f"{prefix}p99_s": p99,
        f"{prefix}max_s": column_max(chunks()),
    }


def column_max(chunks: Iterable[np.ndarray]) -> float:
    return max(float(c.max()) for c in chunks if len(c))


def latency_stats(col: Column, metric: str, qs: Sequence[float], limit: int) -> dict[str, Any]:
    """:func:`prefillkit.records.slo._stats` of a column."""
    n = len(col)
    if n == 0:
        out: dict[str, Any] = {pct_key(metric, q): None for q in qs}
        out.update({f"{metric}_{s}_s": None for s in ("mean", "std", "max")})
        return out
    values = percentiles(col.chunks, n, qs, limit)
    out = {pct_key(metric, q): v for q, v in zip(qs, values, strict=True)}
    mean, std = mean_std(col.read, n, limit)
    out[f"{metric}_mean_s"] = mean
    out[f"{metric}_std_s"] = std
    out[f"{metric}_max_s"] = column_max(col.chunks())
    return out


def count_before(chunks: Iterable[np.ndarray], t: np.ndarray, side: str = "left") -> np.ndarray:
    """For each time in ``t``: how many values (sorted chunk by chunk) lie before it
    (``side="left"``: ``< t``; ``"right"``: ``<= t``)."""
    out = np.zeros(len(t), dtype=np.int64)
    for c in chunks:
        out += np.searchsorted(c, t, side=side)  # type: ignore[call-overload]
    return out


def busy_before(busy: BusyChunks, t: np.ndarray) -> tuple[np.ndarray, float]:
    """:func:`prefillkit.records.steady.busy_before` at each time in ``t`` (sorted), and the
    durations' sum in order (Python's ``sum``), from busy intervals read in chunks.

    NOTE: the busy time before interval ``k`` is the running sum of the durations in
    order (numpy's ``cumsum`` adds them one at a time), carried from chunk to chunk."""
    out = np.zeros(len(t))
    carry = 0.0  # durations before this chunk, summed in order
    for starts, durations in busy():
        if len(starts) == 0:
            continue
        # k: intervals starting at or before t, over the whole run so far
        k = np.searchsorted(starts, t, side="right")
        running = np.add.accumulate(np.concatenate(([carry], durations)))
        inside = k > 0
        prev = np.maximum(k - 1, 0)
        partial = np.minimum(t - starts[prev], durations[prev])
        value = running[prev] + np.maximum(partial, 0.0)
        # NOTE: an edge is settled by the last chunk with an interval starting at or
        # before it; later chunks overwrite earlier ones.
        out = np.where(inside, value, out)
        carry = float(running[-1])
    return out, carry


def finite_column(col: Column) -> Column:
    """The column without its NaNs (itself when it has none; else a filtered copy)."""
    if not any(bool(np.isnan(c).any()) for c in col.chunks()):
        return col
    copy = SpillColumns({col.name: "d"}, col.cols.chunk_rows)
    (tail,) = copy.tails
    for c in col.chunks():
        tail.extend(c[~np.isnan(c)].tolist())
        copy.spill()
    return Column(copy, col.name)
