"""Per-request rows, per-batch rows and the run summary.

Percentiles come from :func:`percentile` (numpy, linear interpolation) everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from prefillkit.request import ReqStatus, Request

REQUEST_COLUMNS = (
    "rid",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "ttft_s",
    "queueing_s",
    "input_len",
    "output_len",
    "num_chunks",
    "device_hit_tokens",
    "host_hit_tokens",
    "recomputed_tokens",
    "priority",
    "status",
    "reject_reason",
    "preemptions",
    "affinity_skips",
)

BATCH_COLUMNS = (
    "batch_id",
    "start_s",
    "duration_s",
    "size",
    "extend_tokens",
    "cached_tokens",
    "load_back_tokens",
    "buffer_bytes",
    "lead_class",
    "closed_by",
    "has_chunked",
    "waiting_len",
    "skips",
    "defers",
)


@dataclass(slots=True)
class BatchRecord:
    batch_id: int
    start_s: float
    duration_s: float
    size: int
    extend_tokens: int
    cached_tokens: int
    load_back_tokens: int
    buffer_bytes: int
    lead_class: str
    closed_by: str
    has_chunked: bool
    waiting_len: int
    skips: int
    defers: int

    def row(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Any, q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation; None for no data."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q))


def request_status(req: Request) -> str:
    if req.status is ReqStatus.REJECTED:
        return "rejected"
    if req.first_token_time is not None:
        return "finished"
    return "unfinished"


def request_row(req: Request) -> dict[str, Any]:
    ttft = None if req.first_token_time is None else req.first_token_time - req.arrival_time
    queueing = (
        None if req.first_scheduled_time is None else req.first_scheduled_time - req.arrival_time
    )
    computed = req.first_token_time is not None
    return {
        "rid": req.rid,
        "arrival_s": req.arrival_time,
        "first_scheduled_s": req.first_scheduled_time,
        "first_token_s": req.first_token_time,
        "ttft_s": ttft,
        "queueing_s": queueing,
        "input_len": req.input_len,
        "output_len": req.max_new_tokens,
        "num_chunks": req.num_chunks,
        "device_hit_tokens": req.device_hit_tokens,
        "host_hit_tokens": req.host_hit_tokens,
        "recomputed_tokens": (
            req.input_len - req.device_hit_tokens - req.host_hit_tokens if computed else None
        ),
        "priority": req.priority,
        "status": request_status(req),
        "reject_reason": req.reject_reason,
        "preemptions": req.preemptions,
        "affinity_skips": req.head_defers,
    }


def summarize(
    requests: list[Request],
    batches: list[BatchRecord],
    *,
    counters: dict[str, int],
    sim_end_s: float,
) -> dict[str, Any]:
    """The run summary users judge by."""
    done = [r for r in requests if r.first_token_time is not None]
    ttft = [r.first_token_time - r.arrival_time for r in done]  # type: ignore[operator]
    queue = [r.first_scheduled_time - r.arrival_time for r in done]  # type: ignore[operator]
    input_tokens = sum(r.input_len for r in done)
    dev = sum(r.device_hit_tokens for r in done)
    host = sum(r.host_hit_tokens for r in done)
    start = min((r.arrival_time for r in requests), default=0.0)
    span = max(sim_end_s - start, 0.0)
    busy = sum(b.duration_s for b in batches)
    rejected = sum(1 for r in requests if r.status is ReqStatus.REJECTED)

    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    return {
        "requests": len(requests),
        "completed": len(done),
        "rejected": rejected,
        "unfinished": len(requests) - len(done) - rejected,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "ttft_max_s": max(ttft) if ttft else None,
        "ttft_mean_s": float(np.mean(ttft)) if ttft else None,
        "queueing_mean_s": float(np.mean(queue)) if queue else None,
        "device_hit_rate": ratio(dev, input_tokens),
        "host_hit_rate": ratio(host, input_tokens),
        "cache_hit_rate": ratio(dev + host, input_tokens),
        "input_throughput_tok_s": ratio(input_tokens, span),
        "executor_utilization": ratio(busy, span),
        "num_batches": len(batches),
        "mean_batch_size": ratio(sum(b.size for b in batches), len(batches)),
        "mean_chunks_per_request": ratio(sum(r.num_chunks for r in done), len(done)),
        "sim_duration_s": span,
        **counters,
    }
