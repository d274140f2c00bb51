"""The metrics a comparison reports, and their text.

:data:`KEY_METRICS` (every metric of the comparison table: key, label, unit kind) and
:data:`HEADLINE_METRICS` (the lead table's rows and which way is better) are the metrics
of :func:`~prefillkit.report.paired.compare_runs`; :func:`format_metric`,
:func:`format_delta` and :func:`format_ratio` are the one formatter of their values that
the console tables and :mod:`prefillkit.report.html` share.
"""

from __future__ import annotations

import math
from typing import Any

from prefillkit.report.labels import metric_kind
from prefillkit.report.labels import metric_label as _label_of

__all__ = [
    "HEADLINE_METRICS",
    "IMPROVED_BELOW",
    "KEY_METRICS",
    "METRIC_KINDS",
    "WORSE_ABOVE",
    "format_delta",
    "format_metric",
    "format_p99_ci",
    "format_ratio",
    "metric_label",
]

# (metric key, label, unit kind). Kinds: "s" seconds, "frac" fraction 0..1, "count",
# "tok_s" tokens per second, "float" plain number, "flag" yes/no (no delta or ratio).
KEY_METRICS: tuple[tuple[str, str, str], ...] = (
    ("requests", "requests", "count"),
    ("completed", "completed", "count"),
    ("rejected", "rejected", "count"),
    ("ttft_p50_s", "TTFT p50", "s"),
    ("ttft_p90_s", "TTFT p90", "s"),
    ("ttft_p95_s", "TTFT p95", "s"),
    ("ttft_p99_s", "TTFT p99", "s"),
    ("ttft_max_s", "TTFT max", "s"),
    ("ttft_mean_s", "TTFT mean", "s"),
    ("ttft_std_s", "TTFT std", "s"),
    ("steady_ttft_p90_s", "steady TTFT p90", "s"),
    ("steady_ttft_p99_s", "steady TTFT p99", "s"),
    ("warm_ttft_p99_s", "warm TTFT p99", "s"),
    ("cold_ttft_p99_s", "cold TTFT p99", "s"),
    ("overloaded", "overloaded", "flag"),
    ("queueing_mean_s", "queueing mean", "s"),
    ("queueing_p99_s", "queueing p99", "s"),
    ("slo_attainment", "SLO attainment", "frac"),
    ("goodput_req_s", "goodput", "req_s"),
    ("cache_hit_rate", "cache hit rate", "frac"),
    ("device_hit_rate", "device hit rate", "frac"),
    ("host_hit_rate", "host hit rate", "frac"),
    ("input_throughput_tok_s", "input throughput", "tok_s"),
    ("executor_utilization", "executor utilization", "frac"),
    ("num_batches", "batches", "count"),
    ("mean_batch_size", "mean batch size", "float"),
    ("affinity_skips", "affinity skips", "count"),
    ("affinity_defers", "affinity defers", "count"),
    ("affinity_stops", "affinity stops", "count"),
    ("empty_passes", "empty admission passes", "count"),
    ("preemptions", "preemptions", "count"),
    ("evicted_pages", "evicted pages", "count"),
    ("sim_duration_s", "simulated duration", "s"),
)

#: The rows of the comparison's lead table: (metric key, which way is better: -1 lower,
#: +1 higher, 0 neither). The TTFT statistics get a paired bootstrap interval
#: (:func:`~prefillkit.report.paired.compare_runs`); the others a plain difference.
HEADLINE_METRICS: tuple[tuple[str, int], ...] = (
    ("ttft_p50_s", -1),
    ("ttft_p90_s", -1),
    ("ttft_p99_s", -1),
    ("ttft_mean_s", -1),
    ("ttft_max_s", -1),
    ("warm_ttft_p99_s", -1),
    ("cold_ttft_p99_s", -1),
    ("queueing_mean_s", -1),
    ("slo_attainment", 1),
    ("goodput_req_s", 1),
    ("cache_hit_rate", 1),
    ("input_throughput_tok_s", 1),
    ("executor_utilization", 0),
    ("num_batches", 0),
    ("mean_batch_size", 0),
    ("overloaded", -1),
)


#: The unit kind of each of :data:`KEY_METRICS`.
METRIC_KINDS = {key: kind for key, _, kind in KEY_METRICS}
_LABEL = {key: label for key, label, _ in KEY_METRICS}

#: A per-request TTFT ratio below this is a faster request, above :data:`WORSE_ABOVE` a
#: slower one.
IMPROVED_BELOW = 0.99
WORSE_ABOVE = 1.01


def metric_label(key: str) -> str:
    """The label of ``key`` (:mod:`prefillkit.report.labels`; never the raw key)."""
    return _LABEL.get(key) or _label_of(key)


def format_metric(key: str, value: float | None, *, kind: str | None = None) -> str:
    """Human-readable value of metric ``key`` (``-`` when missing)."""
    if value is None or not math.isfinite(value):
        return "-"
    kind = kind or METRIC_KINDS.get(key) or metric_kind(key)
    if kind == "flag":
        return "yes" if value else "no"
    if kind == "s":
        return _format_seconds(value)
    if kind == "frac":
        return f"{value * 100:.1f}%"
    if kind == "count":
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    if kind == "tok_s":
        return f"{value:,.0f} tok/s"
    if kind == "req_s":
        return f"{value:,.3g} req/s"
    if kind == "tokens":
        return f"{value:,.0f}"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _format_seconds(value: float) -> str:
    a = abs(value)
    if a == 0:
        return "0 s"
    if a < 1.0:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s" if a < 100 else f"{value:,.1f} s"


def format_delta(key: str, delta: float | None) -> str:
    """Signed difference in the metric's unit (``-`` when missing)."""
    if delta is None or not math.isfinite(delta):
        return "-"
    if delta == 0:
        return "±0"
    kind = METRIC_KINDS.get(key) or metric_kind(key)
    sign = "+" if delta > 0 else "−"
    if kind == "frac":
        return f"{sign}{abs(delta) * 100:.1f} pp"
    return sign + format_metric(key, abs(delta))


def format_ratio(ratio: float | None) -> str:
    if ratio is None or not math.isfinite(ratio):
        return "-"
    return f"×{ratio:.3g}"


def format_p99_ci(paired: dict[str, Any] | None, ci: float) -> str:
    """``Δp99 [lo, hi]`` text of a variant's paired statistics."""
    if not paired or paired.get("p99_diff_s") is None:
        return "-"
    d = format_delta("ttft_p99_s", paired["p99_diff_s"])
    lo = format_delta("ttft_p99_s", paired.get("p99_diff_lo_s"))
    hi = format_delta("ttft_p99_s", paired.get("p99_diff_hi_s"))
    return f"{d}  [{lo}, {hi}] ({ci * 100:.0f}% CI)"
