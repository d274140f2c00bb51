"""Run flags that must not mislead: overload (with its reason) and a degenerate warm/cold
split. Each decision is a pure function of numbers the summary already holds (the
windows of :mod:`prefillkit.records.steady`, the class counts), so the list run and the
streaming run (:mod:`prefillkit.records.stream_summary`) decide alike.

Overload. A window is

- ``compute-bound`` when it is *saturated*: the executor busy at least
  :data:`~prefillkit.records.steady.SATURATED_UTILIZATION` of it and the backlog grew;
- ``memory-bound`` when it is not saturated but the backlog grew *and* ends above the
  window's own arrivals (``backlog_end > backlog_start`` and ``backlog_end > arrivals``):
  the executor had idle time, yet requests piled up, so something other than compute
  (KV pool pages, request slots, transfers holding pages) kept them from being admitted.
  Assumption: served in arrival order, a backlog larger than the window's arrivals holds
  a request that has waited longer than the whole window; a run that keeps up queues for
  well under one window (by Little's law, ``backlog = rate × wait``, so
  ``backlog > rate × window`` means the mean wait exceeds the window).

The run is overloaded when two or more consecutive windows are compute- or memory-bound
(:func:`overload_runs`: the backlog kept growing for longer than one window, whatever the
busy fraction), or when it *drains*: the prefill work ends (the last first token, or the
end of the simulation when a request still has none) more than :func:`drain_limit_s`
after the last arrival, i.e. more than one window and more than :data:`DRAIN_FRACTION` of
the arrival span. Assumption: a run that keeps up serves what is queued at the last
arrival within about one TTFT, inside one window; a longer tail is a backlog built up
during the trace (the arrivals outpaced the service). ``overload_reason`` lists the
reasons that fired, in the order ``compute-bound``, ``memory-bound``, ``drain``.

Degenerate split: a run whose smaller cache class (warm or cold, among the requests
admitted at least once) is under :data:`DEGENERATE_SPLIT_FRACTION` of them. Its warm/cold
statistics rest on a handful of requests, and the affinity policy (which reorders cold
requests behind warm ones) has almost nothing to reorder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "COMPUTE_BOUND",
    "DEGENERATE_SPLIT_FRACTION",
    "DRAIN",
    "DRAIN_FRACTION",
    "MEMORY_BOUND",
    "drain_limit_s",
    "drain_seconds",
    "flag_metrics",
    "overload_runs",
    "overload_verdict",
    "split_degenerate",
    "split_note",
    "window_bound",
]

COMPUTE_BOUND = "compute-bound"
MEMORY_BOUND = "memory-bound"
DRAIN = "drain"
#: Drain: work past the last arrival beyond this fraction of the arrival span (and beyond
#: one window) is overload (module docstring); the steady interval's warm-up fraction.
DRAIN_FRACTION: float = 0.10
#: A warm/cold split is degenerate when its smaller class is under this fraction.
DEGENERATE_SPLIT_FRACTION: float = 0.01


def overload_runs(flags: Sequence[bool]) -> list[int]:
    """Windows inside runs of two or more consecutive flagged windows."""
    out: list[int] = []
    run: list[int] = []
    for i, flag in enumerate([*flags, False]):
        if flag:
            run.append(i)
            continue
        if len(run) > 1:
            out.extend(run)
        run = []
    return out


def window_bound(window: Mapping[str, Any]) -> str | None:
    """:data:`COMPUTE_BOUND`, :data:`MEMORY_BOUND` or ``None`` (module docstring) for a
    window record of :func:`prefillkit.records.steady.window_record`."""
    if window.get("saturated"):
        return COMPUTE_BOUND
    start, end, arrivals = window["backlog_start"], window["backlog_end"], window["arrivals"]
    return MEMORY_BOUND if end > start and end > arrivals else None


def drain_limit_s(t0: float, t_last: float, window_s: float) -> float:
    """Longest tail after the last arrival that is not overload: one window or
    :data:`DRAIN_FRACTION` of the arrival span, whichever is longer."""
    return max(window_s, DRAIN_FRACTION * (t_last - t0))


def drain_seconds(
    t_last: float, last_first_token: float | None, waiting: int, sim_end_s: float
) -> float:
    """Seconds from the last arrival to the end of the prefill work: the last first token
    (``None``: none), or ``sim_end_s`` when ``waiting`` requests (not rejected) never got
    one; never negative."""
    end = sim_end_s if waiting or last_first_token is None else last_first_token
    return max(0.0, float(end) - t_last)


def overload_verdict(
    windows: Sequence[Mapping[str, Any]], drain_s: float, limit_s: float
) -> dict[str, Any]:
    """``overloaded``, ``overload_reason`` (``None`` when not), ``drain_s``,
    ``saturated_windows`` and ``overloaded_windows`` (module docstring)."""
    bounds = [window_bound(w) for w in windows]
    over = overload_runs([b is not None for b in bounds])
    reasons = [tag for tag in (COMPUTE_BOUND, MEMORY_BOUND) if any(bounds[i] == tag for i in over)]
    if drain_s > limit_s:
        reasons.append(DRAIN)
    return {
        "overloaded": bool(reasons),
        "overload_reason": ", ".join(reasons) or None,
        "drain_s": float(drain_s),
        "saturated_windows": [i for i, w in enumerate(windows) if w.get("saturated")],
        "overloaded_windows": over,
    }


def split_degenerate(warm: int, cold: int) -> bool:
    """Whether the smaller class is under :data:`DEGENERATE_SPLIT_FRACTION` of
    ``warm + cold`` (no request at all: not degenerate, there is no split)."""
    n = warm + cold
    return n > 0 and min(warm, cold) < DEGENERATE_SPLIT_FRACTION * n


def split_note(warm: int, cold: int, floor_tokens: int | None) -> str | None:
    """One line saying the split is degenerate, with the classification rule; ``None``
    when it is not."""
    if not split_degenerate(warm, cold):
        return None
    big, name = (warm, "warm") if warm >= cold else (cold, "cold")
    floor = "--affinity-warm-floor-tokens" if floor_tokens is None else f"{floor_tokens:,}"
    return (
        f"warm/cold split degenerate: {big:,} of {warm + cold:,} requests {name} (warm: "
        f"device + host hit ≥ {floor} tokens at first admission); the affinity policy "
        "has almost nothing to reorder"
    )


def flag_metrics(
    windows: Sequence[Mapping[str, Any]],
    *,
    classes: tuple[int, int],
    drain_s: float,
    limit_s: float,
) -> dict[str, Any]:
    """The summary's flag keys, in summary order: ``cache_split_degenerate`` (from the
    ``(warm, cold)`` counts), then :func:`overload_verdict`'s."""
    return {
        "cache_split_degenerate": split_degenerate(*classes),
        **overload_verdict(windows, drain_s, limit_s),
    }
