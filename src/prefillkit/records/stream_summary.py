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

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.records.column_stats import (
    BusyChunks,
    Column,
    busy_before,
    column_max,
    count_before,
    finite_column,
    latency_stats,
    ttft_stats,
)
from prefillkit.records.exact_stats import LIMIT
from prefillkit.records.run_flags import drain_limit_s, drain_seconds, flag_metrics
from prefillkit.records.slo import DEFAULT_PERCENTILES
from prefillkit.records.spill import SpillColumns
from prefillkit.records.steady import CLASS_CODES, num_windows, steady_interval, window_record
from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = ["streaming_summary"]


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
    arrived, bounds, backlog, firsts = _window_counts(reqs, done, edges, clipped)
    busy_at, _ = busy_before(busy, clipped)
    out: list[dict[str, Any]] = []
    for i in range(n):
        length = float(clipped[i + 1] - clipped[i])
        util = float(busy_at[i + 1] - busy_at[i]) / length if length > 0 else None
        sample = Column(done, "ttft", int(bounds[i]), int(bounds[i + 1]))
        out.append(
            window_record(
                i,
                (float(edges[i]), float(clipped[i + 1])),
                (int(arrived[i + 1] - arrived[i]), len(sample), int(firsts[i])),
                util,
                (int(backlog[i]), int(backlog[i + 1])),
                ttft_stats(sample.chunks, len(sample), "ttft_", limit),
            )
        )
    return out


def _window_counts(
    reqs: SpillColumns, done: SpillColumns, edges: np.ndarray, clipped: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(arrived, bounds, backlog, firsts)`` of :func:`_windows`: the rows of ``reqs``
    and of ``done`` before each edge, the backlog at each clipped edge (kept requests
    arrived, less first tokens) and the first tokens in each window."""
    n = len(edges) - 1
    inner = edges[1:n]
    # rows before each window: arrivals < edges[i] (window i = arrivals in
    # [edges[i], edges[i+1]); the first and last windows take what rounding left out)
    arrived = np.concatenate(([0], count_before(reqs.chunks("arrival"), inner), [len(reqs)]))
    bounds = np.concatenate(([0], count_before(done.chunks("arrival"), inner), [len(done)]))
    tokens = count_before(
        (np.sort(c) for c in done.chunks("first_token")), clipped
    )  # first tokens < each clipped edge
    kept = count_before(
        (
            a[k.astype(bool)]
            for a, k in zip(reqs.chunks("arrival"), reqs.chunks("kept"), strict=True)
        ),
        clipped,
    )
    backlog = kept - tokens
    firsts = np.diff(tokens)
    return arrived, bounds, backlog, firsts


def _class_stats(done: SpillColumns, limit: int) -> dict[str, Any]:
    """:func:`prefillkit.records.steady._class_stats_codes` from the columns."""
    out: dict[str, Any] = {}
    for name, code in CLASS_CODES.items():

        def chunks(code: int = code) -> Iterator[np.ndarray]:
            for t, k in zip(done.chunks("ttft"), done.chunks("klass"), strict=True):
                yield t[k == code]

        n = sum(len(c) for c in chunks())
        out[f"{name}_requests"] = n
        out.update(ttft_stats(chunks, n, f"{name}_ttft_", limit))
    return out


def _steady(
    reqs: SpillColumns, done: SpillColumns, t0: float, t_last: float, window_s: float, limit: int
) -> dict[str, Any]:
    """:func:`prefillkit.records.steady._steady_stats` from the columns."""
    span = steady_interval(t0, t_last, window_s) if len(reqs) else None
    if span is None:
        sample = Column(done, "ttft", 0, 0)
        inside = 0
    else:
        t = np.array(span)
        a = count_before(reqs.chunks("arrival"), t)
        d = count_before(done.chunks("arrival"), t)
        inside = int(a[1] - a[0])
        sample = Column(done, "ttft", int(d[0]), int(d[1]))
    return {
        "steady_start_s": None if span is None else span[0],
        "steady_end_s": None if span is None else span[1],
        "steady_requests": inside,
        "steady_completed": len(sample),
        **ttft_stats(sample.chunks, len(sample), "steady_ttft_", limit),
    }


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
    t0, t_last = _arrival_span(reqs)
    span = max(sim_end_s - t0, 0.0)
    _, prefill_busy = busy_before(batch_busy(batches), np.zeros(0))
    unfinished = n - n_done - (rejected - rejected_done)
    latency = _latency(done, n, span, percentiles, slo_ttft_s, limit)
    # NOTE: summarize's keys first, in its order (its TTFT and queueing values are the
    # latency statistics' own: the update below keeps the first place of a key).
    out: dict[str, Any] = {
        "requests": n,
        "completed": n_done,
        "rejected": rejected,
        "unfinished": unfinished,
        **dict.fromkeys(_SUMMARIZE_LATENCY),
        **_rates(input_tokens, dev, host, span, prefill_busy),
        "num_batches": len(batches),
        "mean_batch_size": _ratio(batch_size_sum, len(batches)),
        "mean_chunks_per_request": _ratio(chunks, n_done),
        "sim_duration_s": span,
        **counters,
    }
    out.update(latency)
    out.update(_cached_totals(input_tokens, batch_cached))
    out["window_s"] = float(window_s)
    out.update(_steady(reqs, done, t0, t_last, window_s, limit))
    out.update(_class_stats(done, limit))
    classes = (out["warm_requests"], out["cold_requests"])
    span_s = (t0, t_last, sim_end_s, window_s)
    out.update(_window_metrics(reqs, done, busy, classes, span_s, unfinished, limit))
    return out


#: summarize's TTFT and queueing keys, in its order (None until the latency statistics).
_SUMMARIZE_LATENCY = (
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "ttft_max_s",
    "ttft_mean_s",
    "queueing_mean_s",
)


def _cached_totals(input_tokens: int, batch_cached: Sequence[int]) -> dict[str, int]:
    """The prompt tokens, then the batches' cached tokens: in all, device and host hits,
    carried prefix."""
    total, dev_hit, host_hit, carried = batch_cached
    return {
        "prompt_tokens": input_tokens,
        "batch_cached_tokens": total,
        "batch_device_hit_tokens": dev_hit,
        "batch_host_hit_tokens": host_hit,
        "batch_carried_prefix_tokens": carried,
    }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _arrival_span(reqs: SpillColumns) -> tuple[float, float]:
    """The first and the last arrival (both 0.0 without requests)."""
    if len(reqs):
        t0 = min(float(c.min()) for c in reqs.chunks("arrival"))
        t_last = max(float(c.max()) for c in reqs.chunks("arrival"))
        return t0, t_last
    return 0.0, 0.0


def _rates(
    input_tokens: int, dev: int, host: int, span: float, prefill_busy: float
) -> dict[str, float | None]:
    """The hit rates, the input throughput and the executor's utilization."""
    return {
        "device_hit_rate": _ratio(dev, input_tokens),
        "host_hit_rate": _ratio(host, input_tokens),
        "cache_hit_rate": _ratio(dev + host, input_tokens),
        "input_throughput_tok_s": _ratio(input_tokens, span),
        "executor_utilization": _ratio(prefill_busy, span),
    }


def _latency(
    done: SpillColumns,
    n: int,
    span: float,
    pcts: Sequence[float],
    slo_ttft_s: float | None,
    limit: int,
) -> dict[str, Any]:
    """The percentiles asked for, the TTFT and queueing statistics and, with an SLO, its
    attainment and goodput (:func:`prefillkit.records.slo.latency_metrics`' keys)."""
    chosen = tuple(sorted(set(pcts)))
    qs = tuple(sorted(set(DEFAULT_PERCENTILES) | set(chosen)))
    ttft = Column(done, "ttft")
    latency: dict[str, Any] = {"percentiles": list(chosen)}
    latency.update(latency_stats(ttft, "ttft", qs, limit))
    latency.update(latency_stats(finite_column(Column(done, "queue")), "queueing", qs, limit))
    if slo_ttft_s is not None:
        met = sum(int((c <= slo_ttft_s).sum()) for c in ttft.chunks())
        latency["slo_ttft_s"] = slo_ttft_s
        latency["slo_met_requests"] = met
        latency["slo_attainment"] = met / n if n else None
        latency["goodput_req_s"] = met / span if span > 0 else None
    return latency


def _window_metrics(
    reqs: SpillColumns,
    done: SpillColumns,
    busy: BusyChunks,
    classes: tuple[int, int],
    span_s: tuple[float, float, float, float],
    unfinished: int,
    limit: int,
) -> dict[str, Any]:
    """The windows and the overload / drain / split flags drawn from them
    (``span_s``: the first and last arrivals, the simulation's end and the window
    length; ``classes``: the warm and cold request counts)."""
    t0, t_last, sim_end_s, window_s = span_s
    windows: list[dict[str, Any]] = []
    if len(reqs):
        edges = t0 + window_s * np.arange(num_windows(t0, t_last, window_s) + 1, dtype=float)
        windows = _windows(reqs, done, busy, edges, sim_end_s, limit)
    last = column_max(done.chunks("first_token")) if len(done) else None
    return {
        **flag_metrics(
            windows,
            classes=classes,
            drain_s=drain_seconds(t_last, last, unfinished, sim_end_s) if len(reqs) else 0.0,
            limit_s=drain_limit_s(t0, t_last, window_s),
        ),
        "num_windows": len(windows),
        "windows": windows,
    }
