"""Steady-state metrics of a run: TTFT per arrival window, the steady interval, overload.

Windows. Window ``i`` covers ``[t0 + i·w, t0 + (i+1)·w)``, where ``t0`` is the first
arrival and ``w`` the window length (``--window-s``, default :data:`DEFAULT_WINDOW_S`).
There are ``floor((t_last - t0) / w) + 1`` windows: the last one holds the last arrival
``t_last``; it ends at the end of the simulation when that comes first. Per window:

- ``arrivals``: requests arriving in it (rejected ones included);
- ``requests``: those of them that got a first token (the TTFT sample), and their TTFT
  ``ttft_p50_s`` / ``ttft_p90_s`` / ``ttft_p99_s`` / ``ttft_max_s`` (``None`` if none);
- ``first_tokens``: first tokens produced in the window (whatever the arrival time);
- ``utilization``: the fraction of the window the executor was busy (prefill forwards
  and, colocated, decode steps);
- ``backlog_start`` / ``backlog_end``: requests arrived and without a first token just
  before the window's start and end, ``#{arrival < t} - #{first token < t}`` (what
  happens at ``t`` belongs to the window starting there); rejected requests are left out
  of the backlog (their rejection time is not recorded);
- ``saturated``: ``utilization >= 0.98`` and ``backlog_end > backlog_start``.

Overload (:mod:`prefillkit.records.run_flags`). The run is ``overloaded`` when two or more
consecutive windows are saturated (``compute-bound``) or hold a growing backlog larger
than their arrivals while the executor is not saturated (``memory-bound``), or when its
prefill work ends far past the last arrival (``drain``, ``drain_s`` seconds after it);
``overload_reason`` names which. ``overloaded_windows`` lists the windows of those runs,
``saturated_windows`` every saturated window. ``cache_split_degenerate``: one cache class
under 1 % of the classified requests.

Steady interval (rule): warm-up is the first window or the first 10 % of the arrival
span ``t_last - t0``, whichever is longer; drain is the last window before the last
arrival and everything after it. Steady requests arrive in
``[t0 + max(w, 0.1·(t_last - t0)), t_last - w)``; the steady TTFT percentiles are over
those of them with a first token. When warm-up and drain overlap the interval is empty
(``steady_start_s`` / ``steady_end_s`` are ``None``).

Cache class: a request is ``warm`` when its device + host hit at first admission reaches
the config's ``affinity_warm_floor_tokens``, else ``cold`` (never admitted: no class);
``warm_ttft_*`` / ``cold_ttft_*`` are over the finished requests of each class.

Percentiles are :func:`prefillkit.records.metrics.percentile` (numpy, linear interpolation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.records.run_flags import drain_limit_s, drain_seconds, flag_metrics, overload_runs
from prefillkit.request import ReqStatus, Request
from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = [
    "DEFAULT_WINDOW_S",
    "MAX_WINDOWS",
    "SATURATED_UTILIZATION",
    "WARMUP_FRACTION",
    "busy_before",
    "check_window_s",
    "num_windows",
    "overload_runs",
    "steady_interval",
    "steady_metrics",
    "steady_metrics_columns",
    "ttft_stats",
    "window_record",
]

DEFAULT_WINDOW_S: float = 60.0
#: Most windows a run may have (``summary.json`` lists every window).
MAX_WINDOWS: int = 10_000
#: A window is saturated from this busy fraction on (with a growing backlog).
SATURATED_UTILIZATION: float = 0.98
#: Warm-up: at least this fraction of the arrival span (and at least one window).
WARMUP_FRACTION: float = 0.10


def num_windows(t0: float, t_last: float, window_s: float) -> int:
    """Windows of length ``window_s`` from ``t0`` through ``t_last`` (the last holds it)."""
    return int((t_last - t0) // window_s) + 1


def _short(x: float) -> str:
    """``x`` for a message: thousands separators, or 3 significant digits when that
    would be long (a span of 1e300 s) or print as 0.0."""
    return f"{x:,.1f}" if 0.1 <= abs(x) < 1e12 else f"{x:.3g}"


def check_window_s(window_s: float, arrivals: Iterable[float], *, so_far: bool = False) -> None:
    """Raise a one-line ``ValueError`` unless ``window_s`` is usable for these arrivals.

    ``so_far``: ``arrivals`` are a stream's first and latest arrivals, not all of them
    (a streamed run checks as requests arrive): the message quotes the time reached, not
    the whole arrival span, which is not known yet."""
    if not (isinstance(window_s, (int, float)) and math.isfinite(window_s) and window_s > 0):
        raise ValueError(f"must be a finite number of seconds > 0, got {window_s!r}")
    times = list(arrivals)
    if not times:
        return
    t0, t_last = min(times), max(times)
    whole = (t_last - t0) // window_s  # a float, inf for 1e300 s spans in 1e-9 s windows
    if whole + 1 <= MAX_WINDOWS:
        return
    if whole < 1e12:
        n = f"{int(whole) + 1:,}"
    else:
        n = _short(whole + 1) if math.isfinite(whole) else "over 1e+308"
    span = _short(t_last - t0)
    if so_far:
        raise ValueError(
            f"{window_s:g} s windows: a request arriving {span} s after the first makes "
            f"{n} windows already; the most is {MAX_WINDOWS:,} (use a longer window)"
        )
    raise ValueError(
        f"{window_s:g} s windows over the {span} s arrival span make {n} windows; the most "
        f"is {MAX_WINDOWS:,} (use a longer window)"
    )


def busy_before(starts: np.ndarray, durations: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Executor busy seconds before each time in ``t``.

    ``starts`` (sorted) and ``durations`` are the executor's busy intervals, which never
    overlap (one executor).
    """
    t = np.asarray(t, dtype=float)
    if len(starts) == 0:
        return np.zeros(t.shape)
    done_before = np.concatenate(([0.0], np.cumsum(durations)[:-1]))
    k = np.searchsorted(starts, t, side="right")
    prev = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.minimum(t - starts[prev], durations[prev]), 0.0)
    out: np.ndarray = done_before[prev] + np.maximum(partial, 0.0)
    return np.where(k > 0, out, 0.0)


def ttft_stats(values: Sequence[float] | np.ndarray, prefix: str) -> dict[str, float | None]:
    """``{prefix}p50_s``, ``p90``, ``p99`` and ``max`` of ``values`` (``None`` for none).

    The percentiles are :func:`~prefillkit.records.metrics.percentile`'s (one numpy call).
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return dict.fromkeys((f"{prefix}{q}_s" for q in ("p50", "p90", "p99", "max")), None)
    p50, p90, p99 = (float(v) for v in np.percentile(arr, (50, 90, 99)))
    return {
        f"{prefix}p50_s": p50,
        f"{prefix}p90_s": p90,
        f"{prefix}p99_s": p99,
        f"{prefix}max_s": float(arr.max()),
    }


def steady_interval(t0: float, t_last: float, window_s: float) -> tuple[float, float] | None:
    """``[start, end)`` of steady-state arrivals (module docstring), ``None`` if empty."""
    start = t0 + max(window_s, WARMUP_FRACTION * (t_last - t0))
    end = t_last - window_s
    return (start, end) if start < end else None


def _windows(
    arrival: np.ndarray,
    ttft: np.ndarray,
    first_token: np.ndarray,
    backlog_arrivals: np.ndarray,
    busy: tuple[np.ndarray, np.ndarray],
    edges: np.ndarray,
    sim_end_s: float,
) -> list[dict[str, Any]]:
    """One record per window (see the module docstring).

    ``edges`` (``n + 1`` times) place the arrivals; the executor and the backlog are
    measured up to the end of the simulation (``edges`` clipped to ``sim_end_s``).
    """
    n = len(edges) - 1
    clipped = np.minimum(edges, max(sim_end_s, float(edges[0])))
    idx = np.clip(np.searchsorted(edges, arrival, side="right") - 1, 0, n - 1)
    arrivals = np.bincount(idx, minlength=n)
    tokens = np.sort(first_token[np.isfinite(first_token)])
    firsts = np.diff(np.searchsorted(tokens, clipped, side="left"))
    backlog = np.searchsorted(backlog_arrivals, clipped) - np.searchsorted(tokens, clipped)
    busy_at = busy_before(busy[0], busy[1], clipped)
    done = np.isfinite(ttft)
    sample_idx, sample = idx[done], ttft[done]
    if not _sorted(sample_idx):  # NOTE: in arrival order (a streaming run) it is sorted
        order = np.argsort(sample_idx, kind="stable")
        sample_idx, sample = sample_idx[order], sample[order]
    bounds = np.searchsorted(sample_idx, np.arange(n + 1), side="left")
    out: list[dict[str, Any]] = []
    for i in range(n):
        length = float(clipped[i + 1] - clipped[i])
        util = float(busy_at[i + 1] - busy_at[i]) / length if length > 0 else None
        window_ttft = sample[bounds[i] : bounds[i + 1]]
        out.append(
            window_record(
                i,
                (float(edges[i]), float(clipped[i + 1])),
                (int(arrivals[i]), len(window_ttft), int(firsts[i])),
                util,
                (int(backlog[i]), int(backlog[i + 1])),
                ttft_stats(window_ttft, "ttft_"),
            )
        )
    return out


def window_record(
    index: int,
    span: tuple[float, float],
    counts: tuple[int, int, int],
    utilization: float | None,
    backlog: tuple[int, int],
    stats: Mapping[str, float | None],
) -> dict[str, Any]:
    """One window's record (module docstring): its ``(start_s, end_s)``, ``(arrivals,
    requests, first_tokens)``, utilization, ``(backlog_start, backlog_end)`` and TTFT
    statistics (:func:`ttft_stats`)."""
    grew = backlog[1] > backlog[0]
    return {
        "index": index,
        "start_s": span[0],
        "end_s": span[1],
        "arrivals": counts[0],
        "requests": counts[1],
        "first_tokens": counts[2],
        "utilization": utilization,
        "backlog_start": backlog[0],
        "backlog_end": backlog[1],
        "saturated": utilization is not None and utilization >= SATURATED_UTILIZATION and grew,
        **stats,
    }


#: Cache class -> its code in a class column (0: never admitted, no class).
CLASS_CODES: dict[str, int] = {"warm": 1, "cold": 2}


def _class_stats_codes(codes: np.ndarray, ttft: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    done = np.isfinite(ttft)
    for name, code in CLASS_CODES.items():
        sample = ttft[done & (codes == code)]
        out[f"{name}_requests"] = len(sample)
        out.update(ttft_stats(sample, f"{name}_ttft_"))
    return out


def _steady_stats(arrival: np.ndarray, ttft: np.ndarray, window_s: float) -> dict[str, Any]:
    span = (
        steady_interval(float(arrival.min()), float(arrival.max()), window_s)
        if len(arrival)
        else None
    )
    inside = np.zeros(len(arrival), dtype=bool)
    if span is not None:
        inside = (arrival >= span[0]) & (arrival < span[1])
    sample = ttft[inside & np.isfinite(ttft)]
    return {
        "steady_start_s": None if span is None else span[0],
        "steady_end_s": None if span is None else span[1],
        "steady_requests": int(inside.sum()),
        "steady_completed": len(sample),
        **ttft_stats(sample, "steady_ttft_"),
    }


def _sorted(a: np.ndarray) -> bool:
    """Whether ``a`` is non-decreasing (then a sort, stable or not, changes nothing)."""
    return len(a) < 2 or bool(np.all(a[1:] >= a[:-1]))


def _window_edges(arrival: np.ndarray, window_s: float) -> np.ndarray:
    """``t0 + i·w`` for ``i = 0 .. n`` (no windows without arrivals)."""
    if len(arrival) == 0:
        return np.zeros(0)
    t0, t_last = float(arrival.min()), float(arrival.max())
    n = num_windows(t0, t_last, window_s)
    edges: np.ndarray = t0 + window_s * np.arange(n + 1, dtype=float)
    return edges


def steady_metrics(
    requests: Sequence[Request],
    busy: tuple[np.ndarray, np.ndarray],
    cache_classes: Mapping[str, str],
    *,
    window_s: float,
    sim_end_s: float,
) -> dict[str, Any]:
    """Windowed, steady-state, overload and warm/cold metrics of a run (module docstring).

    ``busy`` holds the executor's busy intervals as ``(starts, durations)``, sorted by
    start; ``cache_classes`` maps a request id to ``"warm"`` or ``"cold"``.
    """
    arrival = np.array([r.arrival_time for r in requests], dtype=float)
    first_token = np.array(
        [
            math.nan if r.metrics.first_token_time is None else r.metrics.first_token_time
            for r in requests
        ],
        dtype=float,
    )
    kept = np.array([r.state.status is not ReqStatus.REJECTED for r in requests], dtype=bool)
    codes = np.array(
        [CLASS_CODES.get(cache_classes.get(r.rid, ""), 0) for r in requests], dtype=np.int8
    )
    return steady_metrics_columns(
        arrival, first_token, kept, codes, busy, window_s=window_s, sim_end_s=sim_end_s
    )


def steady_metrics_columns(
    arrival: np.ndarray,
    first_token: np.ndarray,
    kept: np.ndarray,
    class_codes: np.ndarray,
    busy: tuple[np.ndarray, np.ndarray],
    *,
    window_s: float,
    sim_end_s: float,
) -> dict[str, Any]:
    """:func:`steady_metrics` from per-request columns in request order: arrival and
    first-token times (NaN: none), not-rejected flags and cache-class codes
    (:data:`CLASS_CODES`, 0 for none); what a streaming run keeps instead of requests."""
    ttft = first_token - arrival
    edges = _window_edges(arrival, window_s)
    backlog = arrival[kept]
    if not _sorted(backlog):  # NOTE: in arrival order (a streaming run) it is sorted
        backlog = np.sort(backlog)
    windows = (
        _windows(arrival, ttft, first_token, backlog, busy, edges, sim_end_s) if len(edges) else []
    )
    classes = _class_stats_codes(class_codes, ttft)
    done = np.isfinite(first_token)
    t0, t_last = (float(arrival.min()), float(arrival.max())) if len(arrival) else (0.0, 0.0)
    drain = drain_seconds(
        t_last,
        float(first_token[done].max()) if done.any() else None,
        int((kept & ~done).sum()),
        sim_end_s,
    )
    return {
        "window_s": float(window_s),
        **_steady_stats(arrival, ttft, window_s),
        **classes,
        **flag_metrics(
            windows,
            classes=(classes["warm_requests"], classes["cold_requests"]),
            drain_s=drain if len(arrival) else 0.0,
            limit_s=drain_limit_s(t0, t_last, window_s),
        ),
        "num_windows": len(windows),
        "windows": windows,
    }
