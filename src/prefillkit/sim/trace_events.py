"""A run's timeline in the Chrome / Perfetto trace-event JSON format (``--trace-events``).

Open the file in ``chrome://tracing`` or https://ui.perfetto.dev (both read this JSON
format; nothing is uploaded by the latter, it runs in the browser). The object is::

    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}

Every event is a *complete* event ``{"name", "ph": "X", "ts", "dur", "pid", "tid",
"args"}`` with ``ts`` / ``dur`` in **microseconds** of simulated time, plus metadata
events (``"ph": "M"``, ``process_name`` / ``thread_name`` / ``thread_sort_index``) that
name the tracks. Tracks:

- process 1 ``executor``: thread 1 ``prefill forwards`` (one event per batch, ``args``:
  batch id, size, extend tokens, the cached-token split of :mod:`prefillkit.sim.cached`,
  why the batch closed, its requests) and, colocated, thread 2 ``decode steps``;
- process 2 ``requests``: one thread per request (named by its id, in arrival order),
  with ``queued`` (arrival to first scheduling; for a request still waiting when the
  run stopped, to the end of the run), ``prefill`` (first scheduling to first token)
  and, nested inside it, one ``chunk i/n`` event per forward that computed part of its
  prompt; a requeued request's re-prefill forwards after its first token are
  ``re-prefill`` events.

Events on one thread never overlap unless one contains the other, which is what both
viewers need to draw them as stacked slices (``tests/test_report_metrics.py`` checks it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from prefillkit.request import ReqStatus
from prefillkit.sim.engine import SimResult

__all__ = ["EXECUTOR_PID", "REQUESTS_PID", "trace_events", "write_trace_events"]

EXECUTOR_PID = 1
REQUESTS_PID = 2
_PREFILL_TID, _DECODE_TID = 1, 2


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


def _executor_events(result: SimResult) -> Iterator[dict[str, Any]]:
    yield _meta(EXECUTOR_PID, 0, "process_name", "executor")
    yield _meta(EXECUTOR_PID, 0, "process_sort_index", 0)
    yield _meta(EXECUTOR_PID, _PREFILL_TID, "thread_name", "prefill forwards")
    trace = result.trace
    for i, b in enumerate(result.batches):
        yield _x(
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
            rids=trace.batch_rids(i) if i < len(trace) else [],
        )
    decode = result.extra.get("decode_steps") or ()
    if decode:
        yield _meta(EXECUTOR_PID, _DECODE_TID, "thread_name", "decode steps")
        for start, dur in decode:
            yield _x("decode", start, dur, EXECUTOR_PID, _DECODE_TID)


def _request_events(result: SimResult, end_s: float) -> Iterator[dict[str, Any]]:
    yield _meta(REQUESTS_PID, 0, "process_name", "requests")
    yield _meta(REQUESTS_PID, 0, "process_sort_index", 1)
    ids = result.trace.batch_ids()
    batches = result.batches
    classes = result.cache_classes
    order = sorted(range(len(result.requests)), key=lambda k: result.requests[k].arrival_time)
    for tid, k in enumerate(order, start=1):
        req = result.requests[k]
        if req.status is ReqStatus.REJECTED and req.first_scheduled_time is None:
            continue  # rejected at arrival: no lifecycle to draw
        yield _meta(REQUESTS_PID, tid, "thread_name", req.rid)
        yield _meta(REQUESTS_PID, tid, "thread_sort_index", tid)
        arrival = req.arrival_time
        scheduled = req.first_scheduled_time
        common = {"rid": req.rid, "input_len": req.prompt_len}
        queued_end = scheduled if scheduled is not None else end_s
        yield _x("queued", arrival, queued_end - arrival, REQUESTS_PID, tid, **common)
        if scheduled is None:
            continue
        first = req.first_token_time
        prefill_end = first if first is not None else end_s
        yield _x(
            "prefill",
            scheduled,
            prefill_end - scheduled,
            REQUESTS_PID,
            tid,
            **common,
            ttft_s=None if first is None else first - arrival,
            device_hit_tokens=req.device_hit_tokens,
            host_hit_tokens=req.host_hit_tokens,
            num_chunks=req.num_chunks,
            cache_class=classes.get(req.rid),
        )
        mine = ids.get(req.rid, [])
        inside = [b for b in mine if batches[b].start_s + batches[b].duration_s <= prefill_end]
        for n, b in enumerate(inside, start=1):
            rec = batches[b]
            yield _x(
                f"chunk {n}/{len(inside)}",
                rec.start_s,
                rec.duration_s,
                REQUESTS_PID,
                tid,
                batch_id=b,
                batch_size=rec.size,
            )
        for b in mine[len(inside) :]:
            rec = batches[b]
            yield _x("re-prefill", rec.start_s, rec.duration_s, REQUESTS_PID, tid, batch_id=b)


def trace_events(result: SimResult) -> dict[str, Any]:
    """The trace-event JSON object of ``result`` (see the module docstring)."""
    start = min((r.arrival_time for r in result.requests), default=0.0)
    end = max(
        [b.start_s + b.duration_s for b in result.batches[-1:]]
        + [r.first_token_time or 0.0 for r in result.requests]
        + [start + float(result.summary.get("sim_duration_s") or 0.0)]
    )
    events = [*_executor_events(result), *_request_events(result, end)]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "prefillkit",
            "time": "simulated seconds from the trace start, as microseconds",
            "partial": bool(result.partial),
            "batches": len(result.batches),
            "requests": len(result.requests),
        },
    }


def write_trace_events(result: SimResult, path: str | os.PathLike[str]) -> None:
    """Write :func:`trace_events` of ``result`` to ``path`` (atomically)."""
    from prefillkit.sim.output import atomic_write_text, json_ready

    text = json.dumps(json_ready(trace_events(result)), separators=(",", ":"), allow_nan=False)
    atomic_write_text(path, text + "\n")
