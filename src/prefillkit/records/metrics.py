# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Per-request rows, per-batch rows and the run summary.

Percentiles come from :func:`percentile` (numpy, linear interpolation) everywhere.

Traceability: a request row's ``batch_ids`` lists the batches it ran in, one per chunk,
in order (space-separated; as many as ``num_chunks``); a batch row's ``rids`` lists its
requests in batch order. A batch row also has one ``t_<term>_s`` column per term of the
cost model's forward-time breakdown (:func:`breakdown_columns`; ``duration_s`` is the
breakdown's ``total``). ``cache_class`` is ``warm`` or ``cold`` (see
:mod:`prefillkit.records.steady`). The engine keeps all of this in one :class:`BatchTrace`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from prefillkit.cost.cached import CachedSplit
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.affinity import BatchLead

if TYPE_CHECKING:
    from prefillkit.sched.interface import StepOutput

REQUEST_COLUMNS = (
    "rid",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "ttft_s",
    "queueing_s",
    "input_len",
    "max_new_tokens",
    "num_chunks",
    "device_hit_tokens",
    "host_hit_tokens",
    "recomputed_tokens",
    "priority",
    "status",
    "reject_reason",
    "preemptions",
    "retractions",
    "requeue_recomputed_tokens",
    "requeue_lost_s",
    "affinity_skips",
    "cache_class",
    "batch_ids",
)

BATCH_COLUMNS = (
    "batch_id",
    "start_s",
    "duration_s",
    "size",
    "raw_extend_tokens",
    "cached_tokens",
    "device_hit_tokens",
    "host_hit_tokens",
    "carried_prefix_tokens",
    "load_back_tokens",
    "buffer_bytes",
    "lead_class",
    "closed_by",
    "has_chunked",
    "waiting_len",
    "skips",
    "defers",
    "rids",
)

#: The breakdown key that is the whole forward time (written as ``duration_s``).
TOTAL_KEY = "total"


@dataclass(slots=True, init=False)
class BatchRecord:
    batch_id: int
    start_s: float
    duration_s: float
    size: int
    raw_extend_tokens: int  # sum of extend lengths, not page-ceiled (PrefillBatch.extend_tokens is)
    cached_tokens: int  # true prefixes: device_hit + host_hit + carried_prefix (cost/cached.py)
    device_hit_tokens: int
    host_hit_tokens: int
    carried_prefix_tokens: int
    load_back_tokens: int
    buffer_bytes: int
    lead_class: str
    closed_by: str
    has_chunked: bool
    waiting_len: int
    skips: int
    defers: int

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        batch_id: int,
        start_s: float,
        duration_s: float,
        size: int,
        raw_extend_tokens: int,
        cached_tokens: int,
        device_hit_tokens: int,
        host_hit_tokens: int,
        carried_prefix_tokens: int,
        load_back_tokens: int,
        buffer_bytes: int,
        lead_class: str,
        closed_by: str,
        has_chunked: bool,
        waiting_len: int,
        skips: int,
        defers: int,
    ) -> None:
        self.batch_id = batch_id
        self.start_s = start_s
        self.duration_s = duration_s
        self.size = size
        self.raw_extend_tokens = raw_extend_tokens
        self.cached_tokens = cached_tokens
        self.device_hit_tokens = device_hit_tokens
        self.host_hit_tokens = host_hit_tokens
        self.carried_prefix_tokens = carried_prefix_tokens
        self.load_back_tokens = load_back_tokens
        self.buffer_bytes = buffer_bytes
        self.lead_class = lead_class
        self.closed_by = closed_by
        self.has_chunked = has_chunked
        self.waiting_len = waiting_len
        self.skips = skips
        self.defers = defers

    @property
    def extend_tokens(self) -> int:
        """The same raw sum under the engine-level name its readers (the fuzz) use."""
        return self.raw_extend_tokens

    def row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_step(
        cls,
        step: StepOutput,
        batch_id: int,
        start_s: float,
        duration_s: float,
        split: CachedSplit | None = None,
    ) -> BatchRecord:
        """The record of one scheduler step that ran from ``start_s`` for ``duration_s``.

        ``split``: its cached tokens by source (:func:`prefillkit.cost.cached.split_cached`);
        None counts every prefix as a cache hit (right when no request is a continuation).
        """
        lead = step.lead_class
        if split is None:
            loaded = sum(s.loaded_tokens for s in step.reqs)
            split = CachedSplit(step.cached_tokens - loaded, loaded, 0)
        return cls(
            batch_id=batch_id,
            start_s=start_s,
            duration_s=duration_s,
            size=len(step.reqs),
            raw_extend_tokens=sum(s.extend_len for s in step.reqs),
            cached_tokens=step.cached_tokens,
            device_hit_tokens=split.device_hit_tokens,
            host_hit_tokens=split.host_hit_tokens,
            carried_prefix_tokens=split.carried_prefix_tokens,
            load_back_tokens=step.load_back_tokens,
            buffer_bytes=step.buffer_bytes,
            # NOTE: the CSV's names: "none" for a batch without a lead (BatchLead.EMPTY).
            lead_class="none" if lead is BatchLead.EMPTY else lead._value_,
            closed_by=step.stop_reason._value_,
            has_chunked=step.has_chunked,
            waiting_len=step.waiting_len,
            skips=step.skips,
            defers=step.skips,  # NOTE: equal by construction; the CSV keeps its column
        )


@dataclass(slots=True)
class BatchTrace:
    """Which requests ran in which batch, and each forward's breakdown terms.

    Stored flat, a few arrays for the whole run, so that recording a batch in the event
    loop allocates no container the garbage collector tracks (a tuple per batch and a
    list per request made the Mooncake replay ~15 % slower, mostly in collections).
    Entry ``j`` is one request in one batch; batch ``b`` holds entries ``ends[b - 1] ..
    ends[b]`` in batch order, and ``seconds[b·T .. (b+1)·T]`` its ``T`` breakdown terms
    (keeping the cost model's dicts instead costs ~10 MB on the Mooncake replay).
    """

    keys: tuple[str, ...]  # the cost model's breakdown keys
    rids: list[str] = field(default_factory=list)  # request id of each entry
    hits: array[int] = field(default_factory=lambda: array("q"))  # device + host hit
    ends: array[int] = field(default_factory=lambda: array("q"))  # entry end per batch
    seconds: array[float] = field(default_factory=lambda: array("d"))  # terms per batch
    # The breakdown keys written as t_<term>_s columns: all but the total.
    terms: tuple[str, ...] = field(init=False, default=())
    _pick: Callable[[dict[str, float]], Iterable[float]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.terms = terms = tuple(k for k in self.keys if k != TOTAL_KEY)
        if len(terms) > 1:
            self._pick = itemgetter(*terms)  # one C call per batch, returns a tuple
        else:
            self._pick = lambda bd: [bd[k] for k in terms]

    def record(self, reqs: Sequence[Request], breakdown: dict[str, float]) -> None:
        """Append one batch: its requests (in batch order) and its breakdown."""
        rids = self.rids
        hits = self.hits
        for req in reqs:
            rids.append(req.rid)
            hits.append(req.metrics.device_hit_tokens + req.metrics.host_hit_tokens)
        self.ends.append(len(rids))
        self.seconds.extend(self._pick(breakdown))

    def __len__(self) -> int:
        return len(self.ends)

    def batch_rids(self, batch_id: int) -> list[str]:
        start = self.ends[batch_id - 1] if batch_id else 0
        return self.rids[start : self.ends[batch_id]]

    def batch_terms(self, batch_id: int) -> dict[str, float]:
        """``t_<term>_s`` column -> seconds of one batch."""
        n = len(self.terms)
        values = self.seconds[batch_id * n : (batch_id + 1) * n]
        return {f"t_{k}_s": v for k, v in zip(self.terms, values, strict=True)}

    def batch_ids(self) -> dict[str, list[int]]:
        """Request id -> the batches it ran in, in order (one per chunk)."""
        out: dict[str, list[int]] = {}
        start = 0
        rids = self.rids
        for b, end in enumerate(self.ends):
            for j in range(start, end):
                out.setdefault(rids[j], []).append(b)
            start = end
        return out

    def cache_classes(self, warm_floor_tokens: int) -> dict[str, str]:
        """Request id -> ``warm`` / ``cold`` by its hit at first admission (first entry)."""
        first = dict(zip(reversed(self.rids), reversed(self.hits), strict=True))
        return {rid: cache_class(hit, warm_floor_tokens) for rid, hit in first.items()}


def breakdown_columns(keys: Sequence[str]) -> tuple[str, ...]:
    """``t_<term>_s`` per breakdown key, in order; the total is ``duration_s`` already."""
    return tuple(f"t_{k}_s" for k in keys if k != TOTAL_KEY)


def batch_columns(keys: Sequence[str]) -> tuple[str, ...]:
    """Header of ``batches.csv`` for a cost model with breakdown ``keys``."""
    return BATCH_COLUMNS + breakdown_columns(keys)


def cache_class(hit_tokens: int, warm_floor_tokens: int) -> str:
    """``warm`` when the device + host hit reaches the floor, else ``cold``."""
    return "warm" if hit_tokens >= warm_floor_tokens else "cold"


def percentile(values: Any, q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation; None for no data."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q))


def request_status(req: Request) -> str:
    if req.state.status is ReqStatus.REJECTED:
        return "rejected"
    if req.metrics.first_token_time is not None:
        return "finished"
    return "unfinished"


def request_row(
    req: Request, batch_ids: Sequence[int] = (), cache_class: str | None = None
) -> dict[str, Any]:
    """CSV row of ``req``; ``batch_ids`` are the batches it ran in (one per chunk)."""
    return dict(zip(REQUEST_COLUMNS, request_values(req, batch_ids, cache_class), strict=True))


def request_values(
    req: Request, batch_ids: Sequence[int] = (), cache_class: str | None = None
) -> list[Any]:
    """:func:`request_row`'s values, in ``REQUEST_COLUMNS`` order."""
    ttft = (
        None
        if req.metrics.first_token_time is None
        else req.metrics.first_token_time - req.arrival_time
    )
    queueing = (
        None
        if req.metrics.first_scheduled_time is None
        else req.metrics.first_scheduled_time - req.arrival_time
    )
    computed = req.metrics.first_token_time is not None
    return [
        req.rid,
        req.arrival_time,
        req.metrics.first_scheduled_time,
        req.metrics.first_token_time,
        ttft,
        queueing,
        req.prompt_len,
        req.max_new_tokens,
        req.metrics.num_chunks,
        req.metrics.device_hit_tokens,
        req.metrics.host_hit_tokens,
        req.prompt_len - req.metrics.device_hit_tokens - req.metrics.host_hit_tokens
        if computed
        else None,
        req.priority,
        request_status(req),
        req.metrics.reject_reason,
        req.metrics.preemptions,
        req.metrics.retractions,
        req.metrics.requeue_recomputed_tokens,
        req.metrics.requeue_lost_s,
        req.state.affinity_skips,
        cache_class,
        " ".join(map(str, batch_ids)),
    ]


def summarize(
    requests: list[Request],
    batches: list[BatchRecord],
    *,
    counters: dict[str, int],
    sim_end_s: float,
) -> dict[str, Any]:
    """The run summary users judge by."""
    import numpy as np

    done = [r for r in requests if r.metrics.first_token_time is not None]
    ttft = [r.metrics.first_token_time - r.arrival_time for r in done]  # type: ignore[operator]
    queue = [r.metrics.first_scheduled_time - r.arrival_time for r in done]  # type: ignore[operator]
    input_tokens = sum(r.prompt_len for r in done)
    dev = sum(r.metrics.device_hit_tokens for r in done)
    host = sum(r.metrics.host_hit_tokens for r in done)
    start = min((r.arrival_time for r in requests), default=0.0)
    span = max(sim_end_s - start, 0.0)
    # NOTE: summed one at a time, in batch order (Python >= 3.12's sum() of floats is
    # compensated): the streaming summary's running sum (records/stream_summary.py).
    busy = 0.0
    for b in batches:
        busy += b.duration_s
    rejected = sum(1 for r in requests if r.state.status is ReqStatus.REJECTED)
    # NOTE: a request rejected on a requeue (Scheduler._retract) may have its first token:
    # it counts as completed and as rejected; unfinished is neither.
    unfinished = sum(
        1
        for r in requests
        if r.metrics.first_token_time is None and r.state.status is not ReqStatus.REJECTED
    )

    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    return {
        "requests": len(requests),
        "completed": len(done),
        "rejected": rejected,
        "unfinished": unfinished,
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
        "mean_chunks_per_request": ratio(sum(r.metrics.num_chunks for r in done), len(done)),
        "sim_duration_s": span,
        **counters,
    }
