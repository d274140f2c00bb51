"""The summary of a streaming run from its spilled columns, in bounded memory.

:class:`prefillkit.records.collector.RunCollector` keeps a streaming run's columns in
:class:`~prefillkit.records.spill.SpillColumns` (on disk past a chunk); this module reads
them a chunk at a time and gives exactly the keys, the order and the floats of the list
run's summary: :func:`prefillkit.records.metrics.summarize`, then
:func:`prefillkit.records.slo.latency_metrics`, the cached-token totals and
:func:`prefillkit.records.steady.steady_metrics` (``tests/test_streaming.py`` and
``tests/test_stream_summary.py`` compare them, the latter with chunks of a few rows).

Counts are sums of per-chunk counts; percentiles, means and standard deviations are
:mod:`prefillkit.records.exact_stats`'s (numpy's floats). The columns are in arrival order
and arrivals are non-decreasing (the engine and ``RunCollector.drain`` refuse others),
so a window's or the steady interval's requests are a contiguous range of rows, found
by counting the arrivals before its bounds.

Memory: a chunk of each column read at a time, the windows' edges and counts (at most
:data:`~prefillkit.records.steady.MAX_WINDOWS`), and the histograms of the selection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.records.exact_stats import LIMIT, mean_std, percentiles
from prefillkit.records.run_flags import drain_limit_s, drain_seconds, flag_metrics
from prefillkit.records.slo import DEFAULT_PERCENTILES, pct_key
from prefillkit.records.spill import SpillColumns
from prefillkit.records.steady import CLASS_CODES, num_windows, steady_interval, window_record
from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = ["BusyChunks", "streaming_summary"]

#: A fresh pass over the executor's busy intervals, sorted by start: (starts, durations)
#: arrays a chunk at a time.
BusyChunks = Callable[[], Iterable[tuple["np.ndarray", "np.ndarray"]]]


class _Column:
    """One column of a :class:`SpillColumns` (or a filtered view of one) as the
    selection and the sums read it."""

    def __init__(self, cols: SpillColumns, name: str, lo: int = 0, hi: int | None = None):
        self.cols, self.name = cols, name
        self.lo = lo
        self.hi = len(cols) if hi is None else hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def chunks(self) -> Iterator[np.ndarray]:
        return self.cols.chunks(self.name, self.lo, self.hi)

    def read(self, a: int, b: int) -> np.ndarray:
        return self.cols.read(self.name, self.lo + a, self.lo + b)


def _ttft_stats(
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
        f"{prefix}max_s": _max(chunks()),
    }


def _max(chunks: Iterable[np.ndarray]) -> float:
    return max(float(c.max()) for c in chunks if len(c))


def _latency_stats(col: _Column, metric: str, qs: Sequence[float], limit: int) -> dict[str, Any]:
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
    out[f"{metric}_max_s"] = _max(col.chunks())
    return out


def _count_before(chunks: Iterable[np.ndarray], t: np.ndarray, side: str = "left") -> np.ndarray:
    """For each time in ``t``: how many values (sorted chunk by chunk) lie before it
    (``side="left"``: ``< t``; ``"right"``: ``<= t``)."""
    out = np.zeros(len(t), dtype=np.int64)
    for c in chunks:
        out += np.searchsorted(c, t, side=side)  # type: ignore[call-overload]
    return out


def _busy_before(busy: BusyChunks, t: np.ndarray) -> tuple[np.ndarray, float]:
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


def _windows(
    reqs: SpillColumns,
    done: SpillColumns,
    busy: BusyChunks,
    edges: np.ndarray,
    sim_end_s: float,
    limit: int,
) -> list[dict[str, Any]]:
    """:func:`prefillkit.records.steady._windows` from the columns."""
    n = len(edges) - 1
    clipped = np.minimum(edges, max(sim_end_s, float(edges[0])))
    inner = edges[1:n]
    # rows before each window: arrivals < edges[i] (window i = arrivals in
    # [edges[i], edges[i+1]); the first and last windows take what rounding left out)
    arrived = np.concatenate(([0], _count_before(reqs.chunks("arrival"), inner), [len(reqs)]))
    bounds = np.concatenate(([0], _count_before(done.chunks("arrival"), inner), [len(done)]))
    tokens = _count_before(
        (np.sort(c) for c in done.chunks("first_token")), clipped
    )  # first tokens < each clipped edge
    kept = _count_before(
        (
            a[k.astype(bool)]
            for a, k in zip(reqs.chunks("arrival"), reqs.chunks("kept"), strict=True)
        ),
        clipped,
    )
    backlog = kept - tokens
    firsts = np.diff(tokens)
    busy_at, _ = _busy_before(busy, clipped)
    out: list[dict[str, Any]] = []
    for i in range(n):
        length = float(clipped[i + 1] - clipped[i])
        util = float(busy_at[i + 1] - busy_at[i]) / length if length > 0 else None
        sample = _Column(done, "ttft", int(bounds[i]), int(bounds[i + 1]))
        out.append(
            window_record(
                i,
                (float(edges[i]), float(clipped[i + 1])),
                (int(arrived[i + 1] - arrived[i]), len(sample), int(firsts[i])),
                util,
                (int(backlog[i]), int(backlog[i + 1])),
                _ttft_stats(sample.chunks, len(sample), "ttft_", limit),
            )
        )
    return out


def _class_stats(done: SpillColumns, limit: int) -> dict[str, Any]:
    """:func:`prefillkit.records.steady._class_stats_codes` from the columns."""
    out: dict[str, Any] = {}
    for name, code in CLASS_CODES.items():

        def chunks(code: int = code) -> Iterator[np.ndarray]:
            for t, k in zip(done.chunks("ttft"), done.chunks("klass"), strict=True):
                yield t[k == code]

        n = sum(len(c) for c in chunks())
        out[f"{name}_requests"] = n
        out.update(_ttft_stats(chunks, n, f"{name}_ttft_", limit))
    return out


def _steady(
    reqs: SpillColumns, done: SpillColumns, t0: float, t_last: float, window_s: float, limit: int
) -> dict[str, Any]:
    """:func:`prefillkit.records.steady._steady_stats` from the columns."""
    span = steady_interval(t0, t_last, window_s) if len(reqs) else None
    if span is None:
        sample = _Column(done, "ttft", 0, 0)
        inside = 0
    else:
        t = np.array(span)
        a = _count_before(reqs.chunks("arrival"), t)
        d = _count_before(done.chunks("arrival"), t)
        inside = int(a[1] - a[0])
        sample = _Column(done, "ttft", int(d[0]), int(d[1]))
    return {
        "steady_start_s": None if span is None else span[0],
        "steady_end_s": None if span is None else span[1],
        "steady_requests": inside,
        "steady_completed": len(sample),
        **_ttft_stats(sample.chunks, len(sample), "steady_ttft_", limit),
    }


def _finite(col: _Column) -> _Column:
    """The column without its NaNs (itself when it has none; else a filtered copy)."""
    if not any(bool(np.isnan(c).any()) for c in col.chunks()):
        return col
    copy = SpillColumns({col.name: "d"}, col.cols.chunk_rows)
    (tail,) = copy.tails
    for c in col.chunks():
        tail.extend(c[~np.isnan(c)].tolist())
        copy.spill()
    return _Column(copy, col.name)


def batch_busy(batches: SpillColumns) -> BusyChunks:
    """The prefill batches' busy intervals (a streaming run's batch columns)."""

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return zip(batches.chunks("start"), batches.chunks("duration"), strict=True)

    return chunks


def streaming_summary(
    reqs: SpillColumns,
    done: SpillColumns,
    batches: SpillColumns,
    busy: BusyChunks,
    *,
    rejected: int,
    rejected_done: int,
    done_sums: Sequence[int],
    batch_size_sum: int,
    batch_cached: Sequence[int],
    counters: dict[str, int],
    sim_end_s: float,
    window_s: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo_ttft_s: float | None = None,
    limit: int = LIMIT,
) -> dict[str, Any]:
    """The run summary (module docstring).

    ``reqs``: every request's ``arrival`` and ``kept`` (not rejected); ``done``: the
    ``ttft``, ``queue`` (first scheduled - arrival, NaN: never), ``arrival``,
    ``first_token`` and ``klass`` (:data:`~prefillkit.records.steady.CLASS_CODES`, 0: none)
    of those with a first token; ``batches``: the prefill batches' ``start`` and
    ``duration``; ``busy``: the executor's busy intervals (the batches', with the decode
    steps merged in by start on a colocated run). ``rejected_done``: requests rejected
    after their first token (they count as completed and as rejected)."""
    n, n_done = len(reqs), len(done)
    input_tokens, dev, host, chunks = done_sums
    if n:
        t0 = min(float(c.min()) for c in reqs.chunks("arrival"))
        t_last = max(float(c.max()) for c in reqs.chunks("arrival"))
    else:
        t0 = t_last = 0.0
    span = max(sim_end_s - t0, 0.0)
    _, prefill_busy = _busy_before(batch_busy(batches), np.zeros(0))
    unfinished = n - n_done - (rejected - rejected_done)

    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    chosen = tuple(sorted(set(percentiles)))
    qs = tuple(sorted(set(DEFAULT_PERCENTILES) | set(chosen)))
    ttft = _Column(done, "ttft")
    latency: dict[str, Any] = {"percentiles": list(chosen)}
    latency.update(_latency_stats(ttft, "ttft", qs, limit))
    latency.update(_latency_stats(_finite(_Column(done, "queue")), "queueing", qs, limit))
    if slo_ttft_s is not None:
        met = sum(int((c <= slo_ttft_s).sum()) for c in ttft.chunks())
        latency["slo_ttft_s"] = slo_ttft_s
        latency["slo_met_requests"] = met
        latency["slo_attainment"] = met / n if n else None
        latency["goodput_req_s"] = met / span if span > 0 else None
    # NOTE: summarize's keys first, in its order (its TTFT and queueing values are the
    # latency statistics' own: the update below keeps the first place of a key).
    out: dict[str, Any] = {
        "requests": n,
        "completed": n_done,
        "rejected": rejected,
        "unfinished": unfinished,
        "ttft_p50_s": None,
        "ttft_p90_s": None,
        "ttft_p99_s": None,
        "ttft_max_s": None,
        "ttft_mean_s": None,
        "queueing_mean_s": None,
        "device_hit_rate": ratio(dev, input_tokens),
        "host_hit_rate": ratio(host, input_tokens),
        "cache_hit_rate": ratio(dev + host, input_tokens),
        "input_throughput_tok_s": ratio(input_tokens, span),
        "executor_utilization": ratio(prefill_busy, span),
        "num_batches": len(batches),
        "mean_batch_size": ratio(batch_size_sum, len(batches)),
        "mean_chunks_per_request": ratio(chunks, n_done),
        "sim_duration_s": span,
        **counters,
    }
    out.update(latency)
    total, dev_hit, host_hit, carried = batch_cached
    out.update(
        prompt_tokens=input_tokens,
        batch_cached_tokens=total,
        batch_device_hit_tokens=dev_hit,
        batch_host_hit_tokens=host_hit,
        batch_carried_prefix_tokens=carried,
    )
    out["window_s"] = float(window_s)
    out.update(_steady(reqs, done, t0, t_last, window_s, limit))
    out.update(_class_stats(done, limit))
    windows: list[dict[str, Any]] = []
    if n:
        edges = t0 + window_s * np.arange(num_windows(t0, t_last, window_s) + 1, dtype=float)
        windows = _windows(reqs, done, busy, edges, sim_end_s, limit)
    last = _max(done.chunks("first_token")) if n_done else None
    out.update(
        flag_metrics(
            windows,
            classes=(out["warm_requests"], out["cold_requests"]),
            drain_s=drain_seconds(t_last, last, unfinished, sim_end_s) if n else 0.0,
            limit_s=drain_limit_s(t0, t_last, window_s),
        ),
        num_windows=len(windows),
        windows=windows,
    )
    return out
