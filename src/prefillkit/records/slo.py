"""Latency metrics as serving benchmarks name them: percentiles, std, goodput, SLO attainment.

vLLM's ``benchmark_serving`` / SGLang's ``bench_serving`` report TTFT as mean, median,
std and chosen percentiles (``--percentile-metrics`` / ``--metric-percentiles 50,90,99``)
and a *goodput*: completed requests per second that met every SLO
(``--goodput ttft:2000``, milliseconds). prefillkit's summary carries the same for TTFT
and queueing (arrival to first scheduling):

- ``ttft_p{q}_s`` / ``queueing_p{q}_s`` for q in :data:`DEFAULT_PERCENTILES` and every
  percentile asked for (``--percentiles 50,90,99.9``; the key of 99.9 is
  ``ttft_p99.9_s``), ``*_mean_s``, ``*_std_s`` (population std, as numpy and vLLM),
  ``*_max_s``; ``percentiles``: the percentiles the user asked for (what the tables show);
- with an SLO (``--slo-ttft 2s``): ``slo_ttft_s``, ``slo_met_requests`` (finished with
  TTFT <= the bound), ``slo_attainment`` (that over **all** requests: rejected and
  unfinished requests miss it) and ``goodput_req_s`` (``slo_met_requests`` over the
  simulated time from the first arrival, as vLLM divides by the benchmark duration).

Percentiles are :func:`prefillkit.records.metrics.percentile` (numpy, linear interpolation).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.records.metrics import percentile
from prefillkit.request import Request
from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = [
    "DEFAULT_PERCENTILES",
    "latency_metrics",
    "parse_duration_s",
    "parse_percentiles",
    "pct_key",
    "pct_label",
]

#: Always in the summary (what vLLM / SGLang tables show, and p50 / p90 / p99 before them).
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)


def pct_key(metric: str, q: float) -> str:
    """``ttft``, 99.9 -> ``ttft_p99.9_s``."""
    return f"{metric}_p{q:g}_s"


def pct_label(q: float) -> str:
    """99.9 -> ``p99.9``."""
    return f"p{q:g}"


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``"50,90,99"`` -> ``(50.0, 90.0, 99.0)``: sorted, unique, each in (0, 100].

    Raises a one-line ``ValueError``.
    """
    out: list[float] = []
    for part in text.split(","):
        part = part.strip().removeprefix("p")
        if not part:
            continue
        try:
            q = float(part)
        except ValueError:
            raise ValueError(f"not a number: {part!r} (expected e.g. 50,90,99)") from None
        if not (0.0 < q <= 100.0) or not math.isfinite(q):
            raise ValueError(f"percentile {part} is not in (0, 100]")
        out.append(q)
    if not out:
        raise ValueError("no percentile given (expected e.g. 50,90,99)")
    return tuple(sorted(set(out)))


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|min)?\s*$")


def parse_duration_s(text: str) -> float:
    """``"2s"``, ``"2000ms"``, ``"1.5"`` (seconds), ``"1m"`` -> seconds (positive).

    Raises a one-line ``ValueError``.
    """
    m = _DURATION.match(str(text))
    if m is None:
        raise ValueError(f"not a duration: {text!r} (expected e.g. 2s or 2000ms)")
    value = float(m.group(1))
    unit = m.group(2) or "s"
    seconds = value / 1000.0 if unit == "ms" else value * 60.0 if unit in ("m", "min") else value
    if not seconds > 0.0 or not math.isfinite(seconds):
        raise ValueError(f"duration must be positive, got {text!r}")
    return seconds


def _stats(values: Sequence[float], metric: str, percentiles: Iterable[float]) -> dict[str, Any]:
    arr = np.asarray(values, dtype=float)
    out: dict[str, Any] = {pct_key(metric, q): percentile(arr, q) for q in percentiles}
    empty = arr.size == 0
    out[f"{metric}_mean_s"] = None if empty else float(arr.mean())
    out[f"{metric}_std_s"] = None if empty else float(arr.std())
    out[f"{metric}_max_s"] = None if empty else float(arr.max())
    return out


def latency_metrics(
    requests: Sequence[Request],
    *,
    sim_end_s: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo_ttft_s: float | None = None,
) -> dict[str, Any]:
    """TTFT and queueing statistics of the finished requests, and goodput under an SLO.

    See the module docstring for the keys.
    """
    chosen = tuple(sorted(set(percentiles)))
    qs = tuple(sorted(set(DEFAULT_PERCENTILES) | set(chosen)))
    done = [r for r in requests if r.metrics.first_token_time is not None]
    ttft = [r.metrics.first_token_time - r.arrival_time for r in done]  # type: ignore[operator]
    queue = [
        r.metrics.first_scheduled_time - r.arrival_time  # type: ignore[operator]
        for r in done
        if r.metrics.first_scheduled_time is not None
    ]
    out: dict[str, Any] = {"percentiles": list(chosen)}
    out.update(_stats(ttft, "ttft", qs))
    out.update(_stats(queue, "queueing", qs))
    if slo_ttft_s is not None:
        start = min((r.arrival_time for r in requests), default=0.0)
        span = max(sim_end_s - start, 0.0)
        met = sum(1 for t in ttft if t <= slo_ttft_s)
        out["slo_ttft_s"] = slo_ttft_s
        out["slo_met_requests"] = met
        out["slo_attainment"] = met / len(requests) if requests else None
        out["goodput_req_s"] = met / span if span > 0 else None
    return out
