"""A label and a unit for every summary metric, shared by the console, HTML and compare.

:func:`metric_label` never returns a raw key: the known keys have a label written for
them (:data:`LABELS`), the families (``ttft_p99.9_s``, ``warm_ttft_p90_s``,
``empty_passes_memory``, ...) are labelled by pattern, and anything else is spelled out
from its key (``a_b_s`` -> "a b (s)"). :func:`metric_kind` gives the unit kind the
formatters use: ``s`` seconds, ``frac`` a fraction shown as a percentage, ``count``,
``tokens``, ``tok_s`` tokens per second, ``req_s`` requests per second, ``float``, ``flag``,
``text`` (a string, shown as it is).
"""

from __future__ import annotations

import re

__all__ = ["LABELS", "metric_kind", "metric_label"]

#: key -> (label, kind)
LABELS: dict[str, tuple[str, str]] = {
    "requests": ("requests", "count"),
    "completed": ("completed (first token)", "count"),
    "rejected": ("rejected (never fit)", "count"),
    "unfinished": ("unfinished", "count"),
    "device_hit_rate": ("device (L1) hit rate", "frac"),
    "host_hit_rate": ("host (L2) hit rate", "frac"),
    "cache_hit_rate": ("cache hit rate", "frac"),
    "input_throughput_tok_s": ("input throughput", "tok_s"),
    "executor_utilization": ("executor utilization", "frac"),
    "num_batches": ("prefill batches", "count"),
    "mean_batch_size": ("mean batch size (requests)", "float"),
    "mean_chunks_per_request": ("chunks per request", "float"),
    "sim_duration_s": ("simulated time", "s"),
    "affinity_skips": ("affinity: requests skipped", "count"),
    "affinity_defers": ("affinity: request-passes deferred", "count"),
    "affinity_deferred_requests": ("affinity: requests ever deferred", "count"),
    "affinity_skip_passes": ("affinity: passes with a skip", "count"),
    "affinity_max_skips_in_pass": ("affinity: most skips in one pass", "count"),
    "affinity_max_deferred_passes": ("affinity: most passes one request waited", "count"),
    "affinity_stops": ("affinity: scans stopped", "count"),
    "affinity_stops_w": ("affinity: scans stopped by the window W", "count"),
    "affinity_stops_k": ("affinity: scans stopped by the defer bound K", "count"),
    "affinity_stops_t": ("affinity: scans stopped by the age bound T", "count"),
    "preemptions": ("preemptions", "count"),
    "retractions": ("retractions (decode out of memory)", "count"),
    "admission_passes": ("admission passes", "count"),
    "empty_passes": ("admission passes that admitted nothing", "count"),
    "upstream_log_input_tokens": ("upstream log: input tokens (raw extends)", "tokens"),
    "upstream_log_hit_tokens": ("upstream log: hit tokens (0 for continuations)", "tokens"),
    "evicted_pages": ("evicted device pages", "count"),
    "stuck": ("requests left pending at the end", "count"),
    "prompt_tokens": ("prompt tokens (finished requests)", "tokens"),
    "batch_cached_tokens": ("cached tokens read by forwards (hits + carried)", "tokens"),
    "batch_device_hit_tokens": ("cache-hit tokens, device", "tokens"),
    "batch_host_hit_tokens": ("cache-hit tokens, host (loaded back)", "tokens"),
    "batch_carried_prefix_tokens": ("carried prefix of chunk continuations", "tokens"),
    "slo_ttft_s": ("SLO: TTFT bound", "s"),
    "slo_met_requests": ("SLO: requests within the bound", "count"),
    "slo_attainment": ("SLO attainment (of all requests)", "frac"),
    "goodput_req_s": ("goodput", "req_s"),
    "window_s": ("window length", "s"),
    "steady_start_s": ("steady interval start", "s"),
    "steady_end_s": ("steady interval end", "s"),
    "steady_requests": ("steady-interval requests", "count"),
    "steady_completed": ("steady-interval requests finished", "count"),
    "warm_requests": ("warm requests (hit at first admission)", "count"),
    "cold_requests": ("cold requests", "count"),
    "cache_split_degenerate": ("warm/cold split degenerate (a class under 1 %)", "flag"),
    "overloaded": ("overloaded (backlog growing windows in a row, or drain)", "flag"),
    "overload_reason": ("overload reason", "text"),
    "drain_s": ("drain: last first token after the last arrival", "s"),
    "num_windows": ("windows", "count"),
    "saturated_windows": ("saturated windows", "count"),
    "overloaded_windows": ("overloaded windows", "count"),
    "percentiles": ("percentiles shown", "float"),
    "wall_time_s": ("wall time", "s"),
}

_STAT = re.compile(
    r"^(?P<scope>steady_|warm_|cold_)?(?P<metric>ttft|queueing)_(?P<stat>p[0-9.]+|mean|std|max)_s$"
)
_SCOPES = {"steady_": "steady ", "warm_": "warm ", "cold_": "cold ", None: ""}
_METRICS = {"ttft": "TTFT", "queueing": "queueing"}


def metric_label(key: str) -> str:
    """The label of summary metric ``key`` (never the raw key)."""
    known = LABELS.get(key)
    if known is not None:
        return known[0]
    m = _STAT.match(key)
    if m is not None:
        scope = _SCOPES[m.group("scope")]
        return f"{scope}{_METRICS[m.group('metric')]} {m.group('stat')}"
    if key.startswith("empty_passes_"):
        return f"empty admission passes: {key.removeprefix('empty_passes_').replace('_', ' ')}"
    text = key.replace("_", " ")
    if text.endswith(" s"):
        text = text[:-2] + " (s)"
    return text


def metric_kind(key: str) -> str:
    """The unit kind of ``key`` (see the module docstring)."""
    known = LABELS.get(key)
    if known is not None:
        return known[1]
    if _STAT.match(key) or key.endswith("_s"):
        return "s"
    if key.endswith("_rate") or key.endswith("_fraction"):
        return "frac"
    if key.endswith("_tokens"):
        return "tokens"
    return "count"
