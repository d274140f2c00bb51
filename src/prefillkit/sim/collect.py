"""What a streaming run keeps: compact per-request columns, and rows sent out in order.

A streaming replay (:class:`prefillkit.sim.engine.Engine` given an iterator of requests)
drops each request once it is done (finished or rejected): :class:`RunCollector` keeps
only the columns the summary needs, in arrival order (``array`` of doubles and bytes:
arrival, first-token and first-scheduled times, rejected flag, cache class; 26 bytes
per request; the token and chunk totals are running sums), and hands each request's
``requests.csv`` row and each batch's ``batches.csv`` row to a :class:`RowSink` (e.g.
:class:`prefillkit.sim.output.StreamingRunWriter`). Rows go out in the order a
non-streaming run writes them: batches as they start, requests in arrival order (a
finished request's row waits until every earlier arrival's row is written, so the
reorder buffer holds the rows of requests that finished while an earlier one was still
live). A live request's batch ids and its first-admission hit (its cache class) are
kept only while it is live. A :class:`TimelineSink` (``timeline``; e.g.
:class:`prefillkit.sim.trace_events.StreamingTraceWriter`) gets each batch as it
starts, each request with its place in arrival order and its cache class once done
(still-live ones at :meth:`RunCollector.close`, then the run's end, then those that
never arrived).

:func:`summary_from_columns` gives exactly :func:`prefillkit.sim.metrics.summarize`'s
numbers (same reductions, same order of values); ``tests/test_streaming.py`` checks the
two against each other, so a key added to ``summarize`` must be added here too.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prefillkit.request import ReqStatus, Request
from prefillkit.sim.metrics import BatchRecord, cache_class, percentile, request_values
from prefillkit.sim.slo import DEFAULT_PERCENTILES, latency_metrics_columns
from prefillkit.sim.steady import CLASS_CODES, steady_metrics_columns

if TYPE_CHECKING:
    import numpy as np

__all__ = ["RowSink", "RunCollector", "TimelineSink", "summary_from_columns"]

NAN = math.nan

#: BatchRecord's fields in order (its ``row()`` without ``dataclasses.asdict``'s copies).
# NOTE: BATCH_COLUMNS is these fields and "rids" (test_streaming checks): a batch row is
# their values in that order, then the breakdown terms.
_BATCH_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(BatchRecord))
_batch_values = operator.attrgetter(*_BATCH_FIELDS)


class RowSink(Protocol):
    """Where a streaming run's rows go: each a list of values in its file's column order."""

    def request_row(self, values: list[Any]) -> None:
        """One request's values in ``REQUEST_COLUMNS`` order."""
        ...

    def batch_row(self, values: list[Any]) -> None:
        """One batch's values in ``batch_columns(breakdown_keys)`` order."""
        ...


class TimelineSink(Protocol):
    """Where a streaming run's timeline goes (``--trace-events``)."""

    def batch(self, reqs: Sequence[Request], record: BatchRecord) -> None:
        """A batch started, running ``reqs``."""

    def request(self, seq: int, req: Request, cache_class: str | None) -> None:
        """``req`` (``seq``: its place in arrival order, from 0) is done, or the run is."""

    def run_ended(self, sim_end_s: float) -> None:
        """Every arrived request was given; ``sim_end_s``: the engine's clock at the end."""


class RunCollector:
    """Per-request columns in arrival order, and the rows of a streaming run."""

    def __init__(
        self,
        breakdown_keys: Sequence[str],
        warm_floor_tokens: int,
        sink: RowSink | None = None,
    ) -> None:
        self.terms = tuple(k for k in breakdown_keys if k != "total")
        self.warm_floor = warm_floor_tokens
        self.sink = sink
        self.timeline: TimelineSink | None = None
        # ---- columns, index = arrival order
        self.arrival = array("d")
        self.first_token = array("d")  # NaN: none
        self.first_scheduled = array("d")  # NaN: none
        self.rejected = array("b")
        self.klass = array("b")  # CLASS_CODES, 0 = none
        # Sums over the requests with a first token (exact integers; no column needed):
        # prompt tokens, device hits, host hits, chunks.
        self.done_sums = [0, 0, 0, 0]
        # ---- batches
        self.batch_starts = array("d")
        self.batch_durations = array("d")
        self.batch_size_sum = 0
        self.num_batches = 0
        # batches.csv's cached_tokens and its split, summed (sim/cached.py cached_totals)
        self.batch_cached = [0, 0, 0, 0]  # total, device hit, host hit, carried prefix
        # ---- live requests (arrived, row not yet written)
        self._seq: dict[Request, int] = {}
        self._live: dict[int, Request] = {}
        self._batch_ids: dict[Request, list[int]] = {}
        self._first_hit: dict[Request, int] = {}
        self._pending: dict[int, list[Any] | None] = {}
        self._next_row = 0

    def __len__(self) -> int:
        return len(self.arrival)

    # ------------------------------------------------------------------ events
    def arrive(self, req: Request) -> None:
        seq = len(self.arrival)
        self._seq[req] = seq
        self._live[seq] = req
        self.arrival.append(req.arrival_time)
        self.first_token.append(NAN)
        self.first_scheduled.append(NAN)
        self.rejected.append(0)
        self.klass.append(0)

    def batch(
        self, reqs: Sequence[Request], breakdown: dict[str, float], record: BatchRecord
    ) -> None:
        """A batch started: its row goes out now; its requests remember it."""
        b = self.num_batches
        self.num_batches += 1
        self.batch_starts.append(record.start_s)
        self.batch_durations.append(record.duration_s)
        self.batch_size_sum += record.size
        bc = self.batch_cached
        bc[0] += record.cached_tokens
        bc[1] += record.device_hit_tokens
        bc[2] += record.host_hit_tokens
        bc[3] += record.carried_prefix_tokens
        ids, first_hit = self._batch_ids, self._first_hit
        for req in reqs:
            lst = ids.get(req)
            if lst is None:
                ids[req] = [b]
            else:
                lst.append(b)
            if req not in first_hit:
                first_hit[req] = req.device_hit_tokens + req.host_hit_tokens
        if self.timeline is not None:
            self.timeline.batch(reqs, record)
        if self.sink is not None:
            row = list(_batch_values(record))
            row.append(" ".join(r.rid for r in reqs))
            for k in self.terms:
                row.append(breakdown[k])
            self.sink.batch_row(row)

    def done(self, req: Request) -> None:
        """``req`` is finished or rejected: fill its columns, queue its row, drop it."""
        seq = self._seq.pop(req)
        del self._live[seq]
        self._pending[seq] = self._fill(seq, req, keep_row=True)
        self._flush()

    def close(self, partial: bool, sim_end_s: float) -> None:
        """End of the run (at ``sim_end_s``): the requests still live (unfinished; of a
        partial run, only those scheduled at least once) get their columns and rows, in
        arrival order."""
        for seq in sorted(self._live):
            req = self._live.pop(seq)
            del self._seq[req]
            keep = not partial or (
                req.first_token_time is not None
                or req.first_scheduled_time is not None
                or req.status is ReqStatus.REJECTED
            )
            self._pending[seq] = self._fill(seq, req, keep_row=keep)
        if self.timeline is not None:
            self.timeline.run_ended(sim_end_s)
        self._flush()

    def drain(self, arrivals: Any) -> None:
        """Requests that never arrived (a run stopped early): columns only, no rows."""
        for req in arrivals:
            self.arrive(req)
            seq = self._seq.pop(req)
            del self._live[seq]
            self._fill(seq, req, keep_row=False)
            self._pending[seq] = None
        self._flush()

    # ------------------------------------------------------------------ internals
    def _fill(self, seq: int, req: Request, *, keep_row: bool) -> list[Any] | None:
        if req.first_token_time is not None:
            self.first_token[seq] = req.first_token_time
            sums = self.done_sums
            sums[0] += req.prompt_len
            sums[1] += req.device_hit_tokens
            sums[2] += req.host_hit_tokens
            sums[3] += req.num_chunks
        if req.first_scheduled_time is not None:
            self.first_scheduled[seq] = req.first_scheduled_time
        if req.status is ReqStatus.REJECTED:
            self.rejected[seq] = 1
        hit = self._first_hit.pop(req, None)
        klass = None if hit is None else cache_class(hit, self.warm_floor)
        if klass is not None:
            self.klass[seq] = CLASS_CODES[klass]
        ids = self._batch_ids.pop(req, ())
        if self.timeline is not None:
            self.timeline.request(seq, req, klass)
        if not keep_row or self.sink is None:
            return None
        return request_values(req, ids, klass)

    def _flush(self) -> None:
        pending, sink = self._pending, self.sink
        n = self._next_row
        while n in pending:
            row = pending.pop(n)
            if row is not None and sink is not None:
                sink.request_row(row)
            n += 1
        self._next_row = n

    # ------------------------------------------------------------------ summary
    def columns(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays (views of the arrays, no copy)."""
        import numpy as np

        return {
            "arrival": np.frombuffer(self.arrival, dtype=float),
            "first_token": np.frombuffer(self.first_token, dtype=float),
            "first_scheduled": np.frombuffer(self.first_scheduled, dtype=float),
            "rejected": np.frombuffer(self.rejected, dtype=np.int8).astype(bool),
            "klass": np.frombuffer(self.klass, dtype=np.int8),
        }

    def summary(
        self,
        *,
        counters: dict[str, int],
        sim_end_s: float,
        busy: tuple[np.ndarray, np.ndarray],
        window_s: float,
        percentiles: Sequence[float] = DEFAULT_PERCENTILES,
        slo_ttft_s: float | None = None,
    ) -> dict[str, Any]:
        """The run summary: :func:`summary_from_columns`, the latency statistics and
        cached-token totals (the engine's ``report_metrics``) and the steady-state
        metrics, in that order."""
        cols = self.columns()
        out = summary_from_columns(
            cols,
            done_sums=self.done_sums,
            batch_durations=self.batch_durations,
            batch_size_sum=self.batch_size_sum,
            num_batches=self.num_batches,
            counters=counters,
            sim_end_s=sim_end_s,
        )
        out.update(
            latency_metrics_columns(
                cols["arrival"],
                cols["first_token"],
                cols["first_scheduled"],
                sim_end_s=sim_end_s,
                percentiles=percentiles,
                slo_ttft_s=slo_ttft_s,
            )
        )
        total, dev, host, carried = self.batch_cached
        out.update(
            prompt_tokens=self.done_sums[0],
            batch_cached_tokens=total,
            batch_device_hit_tokens=dev,
            batch_host_hit_tokens=host,
            batch_carried_prefix_tokens=carried,
        )
        out.update(
            steady_metrics_columns(
                cols["arrival"],
                cols["first_token"],
                ~cols["rejected"],
                cols["klass"],
                busy,
                window_s=window_s,
                sim_end_s=sim_end_s,
            )
        )
        return out


def summary_from_columns(
    cols: dict[str, np.ndarray],
    *,
    done_sums: Sequence[int],
    batch_durations: Sequence[float],
    batch_size_sum: int,
    num_batches: int,
    counters: dict[str, int],
    sim_end_s: float,
) -> dict[str, Any]:
    """:func:`prefillkit.sim.metrics.summarize` from columns (same keys, same numbers).

    ``done_sums``: prompt tokens, device hits, host hits and chunks summed over the
    requests with a first token."""
    import numpy as np

    arrival, first_token = cols["arrival"], cols["first_token"]
    done = np.isfinite(first_token)
    ttft = first_token[done] - arrival[done]
    queue = cols["first_scheduled"][done] - arrival[done]
    input_tokens, dev, host, chunks = done_sums
    n = len(arrival)
    n_done = int(done.sum())
    start = float(arrival.min()) if n else 0.0
    span = max(sim_end_s - start, 0.0)
    busy = sum(batch_durations)  # NOTE: Python's sum, in batch order, as summarize
    rejected = int(cols["rejected"].sum())
    unfinished = int((~done & ~cols["rejected"]).sum())  # see metrics.summarize

    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    return {
        "requests": n,
        "completed": n_done,
        "rejected": rejected,
        "unfinished": unfinished,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "ttft_max_s": float(ttft.max()) if n_done else None,
        "ttft_mean_s": float(np.mean(ttft)) if n_done else None,
        "queueing_mean_s": float(np.mean(queue)) if n_done else None,
        "device_hit_rate": ratio(dev, input_tokens),
        "host_hit_rate": ratio(host, input_tokens),
        "cache_hit_rate": ratio(dev + host, input_tokens),
        "input_throughput_tok_s": ratio(input_tokens, span),
        "executor_utilization": ratio(busy, span),
        "num_batches": num_batches,
        "mean_batch_size": ratio(batch_size_sum, num_batches),
        "mean_chunks_per_request": ratio(chunks, n_done),
        "sim_duration_s": span,
        **counters,
    }
