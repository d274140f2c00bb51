# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""What a streaming run keeps: compact per-request columns, and rows sent out in order.

A streaming replay (:class:`prefillkit.sim.engine.Engine` given an iterator of requests)
drops each request once it is done (finished or rejected): :class:`RunCollector` keeps
only the columns the summary needs, in arrival order, in
:class:`~prefillkit.records.spill.SpillColumns` (memory buffers that go to temporary files
a chunk at a time, so memory does not grow with the run): per request its arrival and
whether it was rejected (:data:`SUMMARY_REQUEST_COLUMNS`), per request with a first
token its TTFT, queueing time, arrival, first token and cache class
(:data:`SUMMARY_DONE_COLUMNS`), per batch its start and duration
(:data:`SUMMARY_BATCH_COLUMNS`); the token and chunk totals and the counts are running
sums. It hands each request's ``requests.csv`` row and each batch's ``batches.csv`` row
to a :class:`RowSink` (e.g.
:class:`prefillkit.records.output.StreamingRunWriter`). Rows go out in the order a
non-streaming run writes them: batches as they start, requests in arrival order (a
finished request's row and column values wait until every earlier arrival's are
written, so the reorder buffer holds those of requests that finished while an earlier
one was still live). A live request's batch ids and its first-admission hit (its cache
class) are kept only while it is live. A :class:`TimelineSink` (``timeline``; e.g.
:class:`prefillkit.records.trace_events.StreamingTraceWriter`) gets each batch as it
starts, each request with its place in arrival order and its cache class once done
(still-live ones at :meth:`RunCollector.close`, then the run's end, then those that
never arrived).

The summary (:meth:`RunCollector.summary`) is
:func:`prefillkit.records.stream_summary.streaming_summary`: exactly the list run's numbers,
a chunk at a time; ``tests/test_streaming.py`` and ``tests/test_stream_summary.py``
check the two against each other, so a key added to ``summarize`` must be added there.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Sequence
from typing import Any, Protocol

from prefillkit.records.column_stats import BusyChunks
from prefillkit.records.exact_stats import LIMIT
from prefillkit.records.metrics import BatchRecord, cache_class, request_values
from prefillkit.records.slo import DEFAULT_PERCENTILES
from prefillkit.records.spill import CHUNK_ROWS, SpillColumns
from prefillkit.records.steady import CLASS_CODES
from prefillkit.records.stream_summary import batch_busy, streaming_summary
from prefillkit.request import ReqStatus, Request

__all__ = [
    "SUMMARY_BATCH_COLUMNS",
    "SUMMARY_DONE_COLUMNS",
    "SUMMARY_REQUEST_COLUMNS",
    "RowSink",
    "RunCollector",
    "TimelineSink",
]

NAN = math.nan

#: The columns kept per request (``array`` typecodes; 9 bytes a request).
SUMMARY_REQUEST_COLUMNS: dict[str, str] = {"arrival": "d", "kept": "b"}
#: ... per request with a first token (33 bytes).
SUMMARY_DONE_COLUMNS: dict[str, str] = {
    "ttft": "d",
    "queue": "d",
    "arrival": "d",
    "first_token": "d",
    "klass": "b",
}
#: ... per batch (16 bytes).
SUMMARY_BATCH_COLUMNS: dict[str, str] = {"start": "d", "duration": "d"}

#: A done request's column values: arrival, rejected, first token, first scheduled
#: (None: none) and cache class code.
_Columns = tuple[float, bool, "float | None", "float | None", int]

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
        *,
        chunk_rows: int = CHUNK_ROWS,
        limit: int = LIMIT,
    ) -> None:
        self.terms = tuple(k for k in breakdown_keys if k != "total")
        self.warm_floor = warm_floor_tokens
        self.sink = sink
        self.timeline: TimelineSink | None = None
        # ---- columns in arrival order, spilled to temporary files a chunk at a time
        # (records/spill.py): every request (arrival, not rejected); the requests with a
        # first token (TTFT, queueing = first scheduled - arrival or NaN, arrival,
        # first token, cache class code); the batches (start, duration).
        # ``chunk_rows``: rows a column buffers before it spills; ``limit``: values the
        # summary's statistics hold at once (records/exact_stats.py; tests make both small).
        self.requests = SpillColumns(SUMMARY_REQUEST_COLUMNS, chunk_rows)
        self.done_requests = SpillColumns(SUMMARY_DONE_COLUMNS, chunk_rows)
        self.batches = SpillColumns(SUMMARY_BATCH_COLUMNS, chunk_rows)
        self.limit = limit
        self.rejected = 0
        self.rejected_done = 0  # rejected after a first token (colocated, requeued)
        # Sums over the requests with a first token (exact integers; no column needed):
        # prompt tokens, device hits, host hits, chunks.
        self.done_sums = [0, 0, 0, 0]
        self.batch_size_sum = 0
        self.num_batches = 0
        # batches.csv's cached_tokens and its split, summed (cost/cached.py cached_totals)
        self.batch_cached = [0, 0, 0, 0]  # total, device hit, host hit, carried prefix
        # ---- live requests (arrived, row not yet written)
        self._seq: dict[Request, int] = {}
        self._live: dict[int, Request] = {}
        self._batch_ids: dict[Request, list[int]] = {}
        self._first_hit: dict[Request, int] = {}
        self._pending: dict[int, tuple[list[Any] | None, _Columns]] = {}
        self._next_row = 0
        self._arrived = 0
        self._last_arrival = -math.inf

    def __len__(self) -> int:
        return self._arrived

    # ------------------------------------------------------------------ events
    def arrive(self, req: Request) -> None:
        seq = self._arrived
        self._arrived = seq + 1
        self._seq[req] = seq
        self._live[seq] = req
        self._last_arrival = req.arrival_time

    def batch(
        self, reqs: Sequence[Request], breakdown: dict[str, float], record: BatchRecord
    ) -> None:
        """A batch started: its row goes out now; its requests remember it."""
        b = self.num_batches
        self.num_batches += 1
        starts, durations = self.batches.tails
        starts.append(record.start_s)
        durations.append(record.duration_s)
        self.batches.row_added()
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
                first_hit[req] = req.metrics.device_hit_tokens + req.metrics.host_hit_tokens
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
                req.metrics.first_token_time is not None
                or req.metrics.first_scheduled_time is not None
                or req.state.status is ReqStatus.REJECTED
            )
            self._pending[seq] = self._fill(seq, req, keep_row=keep)
        if self.timeline is not None:
            self.timeline.run_ended(sim_end_s)
        self._flush()

    # ------------------------------------------------------------------ internals
    def _fill(self, seq: int, req: Request, *, keep_row: bool) -> tuple[list[Any] | None, _Columns]:
        """``req``'s row (None: none) and its column values."""
        first_token = req.metrics.first_token_time
        if first_token is not None:
            sums = self.done_sums
            sums[0] += req.prompt_len
            sums[1] += req.metrics.device_hit_tokens
            sums[2] += req.metrics.host_hit_tokens
            sums[3] += req.metrics.num_chunks
        rejected = req.state.status is ReqStatus.REJECTED
        hit = self._first_hit.pop(req, None)
        klass = None if hit is None else cache_class(hit, self.warm_floor)
        ids = self._batch_ids.pop(req, ())
        if self.timeline is not None:
            self.timeline.request(seq, req, klass)
        cols = (
            req.arrival_time,
            rejected,
            first_token,
            req.metrics.first_scheduled_time,
            0 if klass is None else CLASS_CODES[klass],
        )
        if not keep_row or self.sink is None:
            return None, cols
        return request_values(req, ids, klass), cols

    def _flush(self) -> None:
        """Rows and column values out in arrival order, as far as every request is done."""
        pending, sink = self._pending, self.sink
        n = self._next_row
        if n not in pending:
            return
        reqs, done = self.requests, self.done_requests
        arrival_col, kept_col = reqs.tails
        ttft_col, queue_col, done_arrival_col, first_token_col, klass_col = done.tails
        while n in pending:
            row, (arrival, rejected, first_token, first_scheduled, klass) = pending.pop(n)
            if row is not None and sink is not None:
                sink.request_row(row)
            arrival_col.append(arrival)
            kept_col.append(not rejected)
            reqs.row_added()
            if rejected:
                self.rejected += 1
            if first_token is not None:
                if rejected:
                    self.rejected_done += 1
                ttft_col.append(first_token - arrival)
                queue_col.append(NAN if first_scheduled is None else first_scheduled - arrival)
                done_arrival_col.append(arrival)
                first_token_col.append(first_token)
                klass_col.append(klass)
                done.row_added()
            n += 1
        self._next_row = n

    # ------------------------------------------------------------------ summary
    def ttft_values(self) -> list[float]:
        """TTFT per request with a first token, in arrival order (the floats of
        ``first_token_time - arrival_time``)."""
        return [float(v) for c in self.done_requests.chunks("ttft") for v in c]

    def summary(
        self,
        *,
        counters: dict[str, int],
        sim_end_s: float,
        busy: BusyChunks | None,
        window_s: float,
        percentiles: Sequence[float] = DEFAULT_PERCENTILES,
        slo_ttft_s: float | None = None,
    ) -> dict[str, Any]:
        """The run summary (:func:`prefillkit.records.stream_summary.streaming_summary`):
        the list run's ``summarize``, latency statistics, cached-token totals and
        steady-state metrics, in that order. ``busy``: the executor's busy intervals
        when decode steps are merged in (None: the batches')."""
        return streaming_summary(
            self.requests,
            self.done_requests,
            self.batches,
            busy if busy is not None else batch_busy(self.batches),
            rejected=self.rejected,
            rejected_done=self.rejected_done,
            done_sums=self.done_sums,
            batch_size_sum=self.batch_size_sum,
            batch_cached=self.batch_cached,
            counters=counters,
            sim_end_s=sim_end_s,
            window_s=window_s,
            percentiles=percentiles,
            slo_ttft_s=slo_ttft_s,
            limit=self.limit,
        )

    def release(self) -> None:
        """Remove the spilled columns' files (the summary is no longer available)."""
        for cols in (self.requests, self.done_requests, self.batches):
            cols.close()
