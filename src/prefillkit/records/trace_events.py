"""A run's timeline in the Chrome / Perfetto trace-event JSON format (``--trace-events``).

Open the file in ``chrome://tracing`` or https://ui.perfetto.dev (both read this JSON
format; nothing is uploaded by the latter, it runs in the browser). The object is::

    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}

Every event is a *complete* event ``{"name", "ph": "X", "ts", "dur", "pid", "tid",
"args"}`` with ``ts`` / ``dur`` in **microseconds** of simulated time, plus metadata
events (``"ph": "M"``, ``process_name`` / ``thread_name`` / ``thread_sort_index``) that
name the tracks. Tracks:

- process 1 ``executor``: thread 1 ``prefill forwards`` (one event per batch, ``args``:
  batch id, size, extend tokens, the cached-token split of :mod:`prefillkit.cost.cached`,
  why the batch closed, its requests) and, colocated, thread 2 ``decode steps``;
- process 2 ``requests``: one thread per request (named by its id, in arrival order),
  with ``queued`` (arrival to first scheduling; for a request still waiting when the
  run stopped, to the end of the run), ``prefill`` (first scheduling to first token)
  and, nested inside it, one ``chunk i/n`` event per forward that computed part of its
  prompt; a requeued request's re-prefill forwards after its first token are
  ``re-prefill`` events.

Events on one thread never overlap unless one contains the other, which is what both
viewers need to draw them as stacked slices (``tests/test_report_metrics.py`` checks it).

Two writers give the same events: :func:`write_trace_events` from a finished
:class:`~prefillkit.records.result.SimResult` (a run kept in memory), and
:class:`StreamingTraceWriter` while a streaming run goes (a
:class:`~prefillkit.records.collector.TimelineSink`): each batch's event when it starts, a
request's when it is done (those of a request still live at the end, which run to the
end of the run, once the run is over), into a temporary file beside the target
(``.NAME.<pid>.<hex>.part``) that :meth:`StreamingTraceWriter.commit` completes and
renames into place. It keeps, per live request, the start, duration and size of the
batches it ran in, so its memory follows the live load. Only the order of the events
in the array differs between the two (viewers sort them).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from prefillkit.outfile import OutputFile, resolve_output
from prefillkit.records.file_set import atomic_write_text, remove_stale_temporaries
from prefillkit.records.metrics import BatchRecord
from prefillkit.records.output import json_ready
from prefillkit.records.result import SimResult
from prefillkit.request import ReqStatus, Request

__all__ = [
    "EXECUTOR_PID",
    "REQUESTS_PID",
    "BatchSpan",
    "StreamingTraceWriter",
    "batch_event",
    "needs_run_end",
    "request_events",
    "trace_events",
    "write_trace_events",
]

EXECUTOR_PID = 1
REQUESTS_PID = 2
_PREFILL_TID, _DECODE_TID = 1, 2
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class BatchSpan(NamedTuple):
    """What a request's ``chunk`` / ``re-prefill`` events need of a batch it ran in."""

    batch_id: int
    start_s: float
    duration_s: float
    size: int


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _meta(pid: int, tid: int, name: str, value: Any) -> dict[str, Any]:
    key = "sort_index" if name.endswith("sort_index") else "name"
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def _x(name: str, start_s: float, dur_s: float, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "X",
        "ts": _us(start_s),
        # NOTE: the end rounded, not the duration: a chunk ends exactly where its
        # request's prefill does.
        "dur": max(round(_us(start_s + dur_s) - _us(start_s), 3), 0.0),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _executor_head() -> list[dict[str, Any]]:
    return [
        _meta(EXECUTOR_PID, 0, "process_name", "executor"),
        _meta(EXECUTOR_PID, 0, "process_sort_index", 0),
        _meta(EXECUTOR_PID, _PREFILL_TID, "thread_name", "prefill forwards"),
    ]


def _requests_head() -> list[dict[str, Any]]:
    return [
        _meta(REQUESTS_PID, 0, "process_name", "requests"),
        _meta(REQUESTS_PID, 0, "process_sort_index", 1),
    ]


def batch_event(b: BatchRecord, rids: list[str]) -> dict[str, Any]:
    """The ``prefill forwards`` event of batch ``b``, which ran the requests ``rids``."""
    return _x(
        f"prefill bs={b.size}",
        b.start_s,
        b.duration_s,
        EXECUTOR_PID,
        _PREFILL_TID,
        batch_id=b.batch_id,
        size=b.size,
        extend_tokens=b.raw_extend_tokens,
        cached_tokens=b.cached_tokens,
        device_hit_tokens=b.device_hit_tokens,
        host_hit_tokens=b.host_hit_tokens,
        carried_prefix_tokens=b.carried_prefix_tokens,
        load_back_tokens=b.load_back_tokens,
        closed_by=b.closed_by,
        lead_class=b.lead_class,
        waiting=b.waiting_len,
        rids=rids,
    )


def _decode_events(steps: Sequence[tuple[float, float]]) -> Iterator[dict[str, Any]]:
    if steps:
        yield _meta(EXECUTOR_PID, _DECODE_TID, "thread_name", "decode steps")
        for start, dur in steps:
            yield _x("decode", start, dur, EXECUTOR_PID, _DECODE_TID)


def _drawn(req: Request) -> bool:
    """False for a request rejected at arrival: no lifecycle to draw."""
    return (
        req.state.status is not ReqStatus.REJECTED or req.metrics.first_scheduled_time is not None
    )


def needs_run_end(req: Request) -> bool:
    """Whether :func:`request_events` of ``req`` reads ``end_s`` (an event of it runs to
    the end of the run: it was never scheduled, or has no first token)."""
    return _drawn(req) and (
        req.metrics.first_scheduled_time is None or req.metrics.first_token_time is None
    )


def request_events(
    tid: int,
    req: Request,
    batches: Sequence[BatchSpan],
    cache_class: str | None,
    end_s: float,
) -> Iterator[dict[str, Any]]:
    """The events of ``req`` on thread ``tid`` (its place in arrival order, from 1):
    ``batches`` are the batches it ran in, in order; ``end_s`` the end of the run (read
    only when :func:`needs_run_end`). No events for a request rejected at arrival."""
    if not _drawn(req):
        return
    yield _meta(REQUESTS_PID, tid, "thread_name", req.rid)
    yield _meta(REQUESTS_PID, tid, "thread_sort_index", tid)
    arrival = req.arrival_time
    scheduled = req.metrics.first_scheduled_time
    common = {"rid": req.rid, "input_len": req.prompt_len}
    queued_end = scheduled if scheduled is not None else end_s
    yield _x("queued", arrival, queued_end - arrival, REQUESTS_PID, tid, **common)
    if scheduled is None:
        return
    first = req.metrics.first_token_time
    prefill_end = first if first is not None else end_s
    yield _x(
        "prefill",
        scheduled,
        prefill_end - scheduled,
        REQUESTS_PID,
        tid,
        **common,
        ttft_s=None if first is None else first - arrival,
        device_hit_tokens=req.metrics.device_hit_tokens,
        host_hit_tokens=req.metrics.host_hit_tokens,
        num_chunks=req.metrics.num_chunks,
        cache_class=cache_class,
    )
    inside = [b for b in batches if b.start_s + b.duration_s <= prefill_end]
    for n, b in enumerate(inside, start=1):
        yield _x(
            f"chunk {n}/{len(inside)}",
            b.start_s,
            b.duration_s,
            REQUESTS_PID,
            tid,
            batch_id=b.batch_id,
            batch_size=b.size,
        )
    for b in batches[len(inside) :]:
        yield _x("re-prefill", b.start_s, b.duration_s, REQUESTS_PID, tid, batch_id=b.batch_id)


def _document(
    events: list[dict[str, Any]], *, partial: bool, batches: int, requests: int
) -> dict[str, Any]:
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "prefillkit",
            "time": "simulated seconds from the trace start, as microseconds",
            "partial": partial,
            "batches": batches,
            "requests": requests,
        },
    }


def _run_end_s(
    start_s: float,
    sim_duration_s: float,
    last_batch_end_s: float | None,
    first_tokens: float | None,
) -> float:
    """The end of the run: the last batch's end, the latest first token (``first_tokens``:
    the max of ``first_token_time or 0.0`` over the requests) and the summary's end."""
    ends = [x for x in (last_batch_end_s, first_tokens) if x is not None]
    return max([*ends, start_s + sim_duration_s])


def trace_events(result: SimResult) -> dict[str, Any]:
    """The trace-event JSON object of ``result`` (see the module docstring)."""
    reqs, batches = result.requests, result.batches
    start = min((r.arrival_time for r in reqs), default=0.0)
    end = _run_end_s(
        start,
        float(result.summary.get("sim_duration_s") or 0.0),
        batches[-1].start_s + batches[-1].duration_s if batches else None,
        max((r.metrics.first_token_time or 0.0 for r in reqs), default=None),
    )
    trace = result.trace
    events = _executor_head()
    events += (
        batch_event(b, trace.batch_rids(i) if i < len(trace) else []) for i, b in enumerate(batches)
    )
    events += _decode_events(result.extra.get("decode_steps") or ())
    events += _requests_head()
    ids = trace.batch_ids()
    classes = result.cache_classes
    order = sorted(range(len(reqs)), key=lambda k: reqs[k].arrival_time)
    for tid, k in enumerate(order, start=1):
        req = reqs[k]
        spans = [
            BatchSpan(b, batches[b].start_s, batches[b].duration_s, batches[b].size)
            for b in ids.get(req.rid, ())
        ]
        events += request_events(tid, req, spans, classes.get(req.rid), end)
    return _document(events, partial=bool(result.partial), batches=len(batches), requests=len(reqs))


def write_trace_events(result: SimResult, path: str | os.PathLike[str]) -> None:
    """Write :func:`trace_events` of ``result`` to ``path`` (atomically)."""
    text = _ENCODER.encode(json_ready(trace_events(result)))
    atomic_write_text(path, text + "\n")


class StreamingTraceWriter:
    """The trace-event file of a streaming run, written as it goes (a
    :class:`~prefillkit.records.collector.TimelineSink`: set it as the engine collector's
    ``timeline``), then completed and renamed into place by :meth:`commit`.

    Opens the temporary file at once (an ``OSError`` without a file name for a target
    that cannot be written, e.g. ``IsADirectoryError`` for a folder); :meth:`discard`
    (or an exception in :meth:`commit`) removes it and leaves the target as it was.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        #: The error a write of the file raised, if one did.
        self.error: OSError | None = None
        try:  # NOTE: prefillkit.outfile's rules (a device or FIFO is written in place)
            target, in_place = resolve_output(path)
            if not in_place:
                remove_stale_temporaries(target.parent, (target.name,))
            self._out = OutputFile(path, suffix="part", newline=None)
        except OSError as exc:  # NOTE: no file name: the caller names the target
            raise type(exc)(exc.errno, exc.strerror) from None
        self.target = self._out.target
        self._fh = self._out.fh
        self._sep = ""
        try:
            self._fh.write('{"traceEvents":[')
            self._write([*_executor_head(), *_requests_head()])
        except BaseException:
            self.discard()
            raise
        # Per live request, the batches it ran in (a span shared by a batch's requests).
        self._spans: dict[Request, list[BatchSpan]] = {}
        # Requests done before the run's end is known whose events run to it.
        self._waiting: list[tuple[int, Request, list[BatchSpan], str | None]] = []
        self._batches = 0
        self._requests = 0
        self._last_batch_end: float | None = None
        self._first_tokens: float | None = None  # max of first_token_time or 0.0
        self._start = math.inf  # the first arrival
        self._sim_end: float | None = None
        self._end: float | None = None

    def _write(self, events: Iterable[dict[str, Any]]) -> None:
        fh, encode = self._fh, _ENCODER.encode
        try:
            for ev in events:
                fh.write(self._sep)
                fh.write(encode(json_ready(ev)))
                self._sep = ","
        except OSError as exc:
            self.error = exc  # NOTE: tells the caller which file failed mid-run
            raise

    # ------------------------------------------------------------ TimelineSink
    def batch(self, reqs: Sequence[Request], record: BatchRecord) -> None:
        self._batches += 1
        self._last_batch_end = record.start_s + record.duration_s
        self._write((batch_event(record, [r.rid for r in reqs]),))
        span = BatchSpan(record.batch_id, record.start_s, record.duration_s, record.size)
        spans = self._spans
        for req in reqs:
            mine = spans.get(req)
            if mine is None:
                spans[req] = [span]
            else:
                mine.append(span)

    def request(self, seq: int, req: Request, cache_class: str | None) -> None:
        self._requests += 1
        self._start = min(self._start, req.arrival_time)
        first = req.metrics.first_token_time or 0.0
        if self._first_tokens is None or first > self._first_tokens:
            self._first_tokens = first
        spans = self._spans.pop(req, [])
        if not needs_run_end(req):
            self._write(request_events(seq + 1, req, spans, cache_class, math.nan))
            return
        self._waiting.append((seq + 1, req, spans, cache_class))
        if self._sim_end is not None:  # a request that never arrived (a stopped run)
            self._flush_waiting()

    def run_ended(self, sim_end_s: float) -> None:
        self._sim_end = sim_end_s

    # ------------------------------------------------------------ the end
    def _flush_waiting(self) -> None:
        """Write the waiting requests' events. Called once the run is over and every
        request that arrived (and the first that did not, in a stopped run) was seen."""
        if self._end is None:
            assert self._sim_end is not None, "the run's end is not known yet"
            start = self._start if self._requests else 0.0
            # NOTE: the summary's sim_duration_s (records/stream_summary.py streaming_summary)
            span = max(self._sim_end - start, 0.0)
            self._end = _run_end_s(start, span, self._last_batch_end, self._first_tokens)
        for tid, req, spans, klass in self._waiting:
            self._write(request_events(tid, req, spans, klass, self._end))
        self._waiting.clear()

    def commit(self, *, partial: bool, decode_steps: Sequence[tuple[float, float]]) -> None:
        """Complete the file (the waiting requests, the colocated decode steps, the
        ``otherData``) and rename it into place."""
        try:
            self._flush_waiting()
            self._write(_decode_events(decode_steps))
            rest = _document([], partial=partial, batches=self._batches, requests=self._requests)
            del rest["traceEvents"]  # the keys after it: close the array, then "{...}" less "{"
            self._fh.write("]," + _ENCODER.encode(rest)[1:] + "\n")
            self._out.commit()
        finally:
            self.discard()

    def discard(self) -> None:
        """Close and remove the temporary file (after :meth:`commit`: nothing left)."""
        self._out.discard()
