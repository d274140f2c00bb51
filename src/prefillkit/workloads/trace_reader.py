# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Read a trace file as replayable records: window, cap, re-time.

Order of operations (:func:`load_records`; ``prefillkit.app.replay.load_requests`` then
builds the requests):

1. stream the file (``fmt``: ``"mooncake"``, ``"bailian"``, ``"azure"``, ``"jsonl"``, or
   ``"auto"``), validating every row read;
2. keep rows with ``start_s <= t < start_s + duration_s`` on the ORIGINAL timestamps and
   at most ``max_requests`` of them, and stop reading once past the window or the cap;
3. re-base the arrivals so the first kept request arrives at 0;
4. optionally spread requests that share one quantised timestamp over their bucket;
5. multiply arrivals by ``time_scale``, or rescale them to the target mean ``rate``.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prefillkit.workloads.azure import iter_azure
from prefillkit.workloads.bailian import iter_bailian
from prefillkit.workloads.block_size import block_size_refusal
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.jsonl import PathLike, SkipList, iter_jsonl, open_binary
from prefillkit.workloads.mooncake import MOONCAKE_BLOCK_SIZE, iter_mooncake
from prefillkit.workloads.record import TraceRecord

__all__ = [
    "FORMATS",
    "ReplayOptions",
    "detect_format",
    "iter_records",
    "iter_replay_records",
    "iter_trace",
    "load_records",
    "replay_records",
]

FORMATS: tuple[str, ...] = ("mooncake", "bailian", "azure", "jsonl")

#: Records :func:`iter_records` reads (and validates) before it returns: the bounded
#: look-ahead that lets a bad row near the start fail before the replay begins.
VALIDATE_AHEAD = 1024


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to turn a trace into a workload.

    - ``time_scale``: arrivals are multiplied by it (0.5 = twice as fast).
    - ``rate``: target mean request rate (req/s): arrivals are rescaled so that
      ``n / span`` of the selected requests equals it. Exclusive with ``time_scale != 1``.
    - ``max_requests``: keep at most this many requests (the first ones in the window).
    - ``start_s`` / ``duration_s``: window ``[start_s, start_s + duration_s)`` on the
      original timestamps; the kept requests are then re-based so the first arrives at 0.
    - ``spread_buckets``: requests sharing one quantised timestamp ``t`` are spread
      uniformly inside their bucket: the k-th of n lands at ``t + k * width / n``, where
      ``width`` is the gap to the next distinct timestamp (the median gap for the last).
    - ``skip_bad_rows``: count and skip bad rows instead of raising on the first one.
    """

    time_scale: float = 1.0
    rate: float | None = None
    max_requests: int | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    spread_buckets: bool = False
    skip_bad_rows: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError(f"time_scale must be finite and > 0, got {self.time_scale}")
        if self.rate is not None:
            if not (math.isfinite(self.rate) and self.rate > 0):
                raise ValueError(f"rate must be finite and > 0, got {self.rate}")
            if self.time_scale != 1.0:
                raise ValueError("give rate or time_scale, not both")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests must be >= 1, got {self.max_requests}")
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise ValueError(f"start_s must be finite and >= 0, got {self.start_s}")
        if self.duration_s is not None and not (self.duration_s > 0):
            raise ValueError(f"duration_s must be > 0, got {self.duration_s}")

    @property
    def end_s(self) -> float:
        """End of the window on the original timestamps (exclusive)."""
        return math.inf if self.duration_s is None else self.start_s + self.duration_s


def detect_format(path: PathLike) -> str:
    """Guess the format from the name and the first non-blank line."""
    p = os.fspath(path)
    if p.lower().endswith(".csv"):
        return "azure"
    if "blksz" in os.path.basename(p).lower():
        return "bailian"
    with open_binary(p) as f:
        for raw in f:
            if raw.strip():
                head = raw[:4096]
                if b'"arrival_s"' in head:
                    return "jsonl"
                if b'"chat_id"' in head or b'"arrival_time"' in head:
                    return "bailian"
                if b'"timestamp"' in head:
                    return "mooncake"
                break
    raise WorkloadError(p, None, f"cannot tell the trace format; give one of {FORMATS}")


def iter_trace(
    path: PathLike,
    fmt: str,
    *,
    block_size: int | None = None,
    skipped: SkipList | None = None,
) -> Iterator[TraceRecord]:
    """Stream the records of a trace file in format ``fmt`` (see ``FORMATS``).

    ``block_size`` overrides the per-format default (Mooncake 512, Bailian 16 or the
    ``blksz_N`` of the file name); the other formats take no block size.
    """
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "mooncake":
        return iter_mooncake(
            path,
            block_size=MOONCAKE_BLOCK_SIZE if block_size is None else block_size,
            skipped=skipped,
        )
    if fmt == "bailian":
        return iter_bailian(path, block_size=block_size, skipped=skipped)
    refusal = None if block_size is None else block_size_refusal(fmt=fmt)
    if refusal is not None:
        raise ValueError(f"block_size {refusal}")
    if fmt == "azure":
        return iter_azure(path, skipped=skipped)
    if fmt == "jsonl":
        return iter_jsonl(path, skipped=skipped)
    raise ValueError(f"unknown trace format {fmt!r}; expected one of {(*FORMATS, 'auto')}")


def _select(records: Iterable[TraceRecord], options: ReplayOptions) -> list[TraceRecord]:
    """Window and cap while streaming; stops pulling once past the window or the cap."""
    return list(_iter_select(records, options))


def _iter_select(records: Iterable[TraceRecord], options: ReplayOptions) -> Iterator[TraceRecord]:
    """:func:`_select`, lazily: yields the kept records in order; the source is closed
    (its file) once past the window or the cap, or when this generator is closed."""
    start, end, cap = options.start_s, options.end_s, options.max_requests
    kept = 0
    it = iter(records)
    try:
        prev = -math.inf
        for rec in it:
            if rec.arrival_s < prev:
                raise ValueError(f"records are not sorted by arrival at {rec.rid!r}")
            prev = rec.arrival_s
            if rec.arrival_s < start:
                continue
            if rec.arrival_s >= end:
                break
            yield rec
            kept += 1
            if cap is not None and kept >= cap:
                break
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()  # closes the file of a streaming loader


def _spread(times: list[float]) -> list[float]:
    distinct = sorted(set(times))
    if len(distinct) < 2:
        return times
    gaps = [b - a for a, b in itertools.pairwise(distinct)]
    last_width = statistics.median(gaps)
    nxt = dict(itertools.pairwise(distinct))
    out: list[float] = []
    i = 0
    n_all = len(times)
    while i < n_all:
        t = times[i]
        j = i
        while j < n_all and times[j] == t:
            j += 1
        n = j - i
        width = nxt[t] - t if t in nxt else last_width
        out.extend(t + k * width / n for k in range(n))
        i = j
    return out


def _scaled(t: float, scale: float, options: ReplayOptions, source: str) -> float:
    """``t * scale``, refused once it is no longer a finite number of seconds."""
    out = t * scale
    if not math.isfinite(out):
        how = f"--rate {options.rate:g}" if options.rate is not None else f"--time-scale {scale:g}"
        raise WorkloadError(
            source, None, f"an arrival at {t:.3g} s rescaled by {how} is beyond a float's range"
        )
    return out


def _retime(records: list[TraceRecord], options: ReplayOptions, source: str) -> list[TraceRecord]:
    if not records:
        return records
    t0 = records[0].arrival_s
    times = [r.arrival_s - t0 for r in records]
    if options.spread_buckets:
        times = _spread(times)
    scale = options.time_scale
    if options.rate is not None:
        span = times[-1] - times[0]
        if span <= 0:
            raise WorkloadError(
                source, None, "cannot rescale to a rate: all selected requests arrive at once"
            )
        scale = len(times) / (span * options.rate) if span * options.rate > 0 else math.inf
        if not math.isfinite(scale):
            raise WorkloadError(
                source,
                None,
                f"--rate {options.rate:g}: rescaling the {span:.3g} s arrival span to it is "
                "beyond a float's range",
            )
    if scale != 1.0:
        times = [_scaled(t, scale, options, source) for t in times]
    return [r if r.arrival_s == t else r.at(t) for r, t in zip(records, times, strict=True)]


def _iter_retime(
    records: Iterator[TraceRecord], options: ReplayOptions, source: str
) -> Iterator[TraceRecord]:
    """:func:`_retime`, lazily and with a bounded look-ahead: the records of one
    quantised timestamp with ``spread_buckets`` (the last bucket's width, the median gap,
    needs the distinct timestamps' gaps: one float per bucket). ``rate`` needs the
    selection's span and count, so that option reads the whole selection first (the
    records are then held in memory, as :func:`_retime` does)."""
    if options.rate is not None:
        yield from _retime(list(records), options, source)
        return
    scale = options.time_scale
    first = next(records, None)
    if first is None:
        return
    t0 = first.arrival_s

    def emit(rec: TraceRecord, t: float) -> TraceRecord:
        if scale != 1.0:
            t = _scaled(t, scale, options, source)
        return rec if rec.arrival_s == t else rec.at(t)

    if not options.spread_buckets:
        yield emit(first, first.arrival_s - t0)
        for rec in records:
            yield emit(rec, rec.arrival_s - t0)
        return
    # One bucket at a time: (records sharing rebased time ``bt``) waits for the next
    # distinct time, which gives its width (as _spread does).
    gaps: list[float] = []
    bucket = [first]
    bt = first.arrival_s - t0
    for rec in records:
        t = rec.arrival_s - t0
        if t == bt:
            bucket.append(rec)
            continue
        width = t - bt
        gaps.append(width)
        n = len(bucket)
        for k, r in enumerate(bucket):
            yield emit(r, bt + k * width / n)
        bucket = [rec]
        bt = t
    if not gaps:  # one distinct timestamp: nothing to spread
        for r in bucket:
            yield emit(r, bt)
        return
    width = statistics.median(gaps)
    n = len(bucket)
    for k, r in enumerate(bucket):
        yield emit(r, bt + k * width / n)


def iter_replay_records(
    records: Iterable[TraceRecord], options: ReplayOptions | None = None
) -> Iterator[TraceRecord]:
    """:func:`replay_records`, lazily (see :func:`_iter_retime` for the look-ahead)."""
    opts = ReplayOptions() if options is None else options
    return _iter_retime(_iter_select(records, opts), opts, "<records>")


def replay_records(
    records: Iterable[TraceRecord], options: ReplayOptions | None = None
) -> list[TraceRecord]:
    """Apply window, cap, re-basing, spreading and time scaling to in-memory records
    (for example a generator's output); they must be sorted by arrival."""
    opts = ReplayOptions() if options is None else options
    return _retime(_select(records, opts), opts, "<records>")


def load_records(
    path: PathLike,
    fmt: str,
    options: ReplayOptions | None = None,
    *,
    block_size: int | None = None,
) -> tuple[list[TraceRecord], list[tuple[int, str]]]:
    """Stream, select and re-time a trace's records; returns ``(records, skipped_rows)``.

    Raises ``WorkloadError`` on the first bad row (unless ``options.skip_bad_rows``), for a
    missing file, a file with no requests, or an empty window.
    """
    opts = ReplayOptions() if options is None else options
    skipped: SkipList | None = [] if opts.skip_bad_rows else None
    stream = iter_trace(path, fmt, block_size=block_size, skipped=skipped)
    selected = _select(stream, opts)
    if not selected:
        end = "" if opts.duration_s is None else f", {opts.end_s:g}"
        raise WorkloadError(
            path, None, f"no requests in the selected window [{opts.start_s:g}{end}) s"
        )
    return _retime(selected, opts, os.fspath(path)), skipped or []


def iter_records(
    path: PathLike,
    fmt: str,
    options: ReplayOptions | None = None,
    *,
    block_size: int | None = None,
) -> tuple[Iterator[TraceRecord], list[tuple[int, str]]]:
    """:func:`load_records`, streaming: ``(records, skipped_rows)``; the records are read,
    selected and re-timed as they are pulled, and ``skipped_rows`` fills as they are.

    The first :data:`VALIDATE_AHEAD` selected records are read here, so a missing file, a
    file with no requests, an empty window or a bad row among them raise
    ``WorkloadError`` at once (before a replay prints anything); a bad row later in the
    file raises when the iterator reaches it.
    """
    opts = ReplayOptions() if options is None else options
    skipped: SkipList = []
    stream = iter_trace(
        path, fmt, block_size=block_size, skipped=skipped if opts.skip_bad_rows else None
    )
    selected = _iter_select(stream, opts)
    head = list(itertools.islice(selected, VALIDATE_AHEAD))
    if not head:
        end = "" if opts.duration_s is None else f", {opts.end_s:g}"
        raise WorkloadError(
            path, None, f"no requests in the selected window [{opts.start_s:g}{end}) s"
        )
    return _iter_retime(itertools.chain(head, selected), opts, os.fspath(path)), skipped
