"""How many requests a compared metric rests on, when that is too few for a verdict, and
the one-line texts of a run's flags (overload and its reason, a degenerate warm/cold
split) shared by the console summary, the comparison and the HTML report.

n of a metric (:func:`sample_count`): the requests it is computed over: the class for
``warm_*`` / ``cold_*`` (``warm_requests`` / ``cold_requests``), the finished steady
requests for ``steady_*``, the requests with a first token for the other TTFT,
queueing, cache-hit and throughput metrics (``completed``), every request otherwise.

Minimum n (:func:`min_samples`), for a statistic that estimates a distribution from its
requests (TTFT, queueing, SLO attainment, goodput); a run total (hit rates, throughput,
utilisation, batches, overload) is an exact property of the simulated run and has none:

- a ``p``-quantile needs ``n >= (2 - q) / (1 - q)`` with ``q = p / 100``: numpy's
  linear-interpolation position ``(n - 1) q`` must stay at or below ``n - 2``, so that
  the estimate is an interpolation of observed order statistics and not pulled towards
  the sample maximum (101 for p99, 11 for p90, 3 for p50);
- never fewer than :data:`MIN_SAMPLES` (30) in all: the usual rule-of-thumb smallest
  sample for a normal approximation of a mean (central limit theorem); below it a
  statistic of the class says more about the particular requests than about the policy.

Below it, the verdict is "n too small" instead of better / worse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from prefillkit.records.run_flags import split_note

__all__ = [
    "MIN_SAMPLES",
    "N_RULE",
    "comparison_notes",
    "min_samples",
    "n_text",
    "overload_text",
    "run_split_note",
    "sample_count",
    "sample_key",
    "too_few",
    "window_ranges",
]

#: Fewest requests behind any verdict on a request statistic (module docstring).
MIN_SAMPLES: int = 30
#: The rule in one line (captions).
N_RULE = (
    f"n: requests behind the metric (baseline/variants when they differ); no verdict on a "
    f"request statistic from fewer than {MIN_SAMPLES}, or than (2 - q) / (1 - q) for a "
    "quantile q (101 for p99): n too small"
)

_QUANTILE = re.compile(r"_p(\d+(?:\.\d+)?)_s$")
# (key prefix, summary key counting its requests), first match wins.
_SAMPLES: tuple[tuple[str, str], ...] = (
    ("warm_ttft_", "warm_requests"),
    ("cold_ttft_", "cold_requests"),
    ("steady_ttft_", "steady_completed"),
    ("ttft_", "completed"),
    ("queueing_", "completed"),
    ("slo_", "requests"),
    ("goodput_", "requests"),
)
# Run totals over the requests with a first token (their tokens).
_DONE_TOTALS = frozenset(
    {"device_hit_rate", "host_hit_rate", "cache_hit_rate", "input_throughput_tok_s"}
)


def sample_key(key: str) -> str | None:
    """The summary key counting the requests of request statistic ``key`` (``None``: not
    a request statistic)."""
    return next((n for prefix, n in _SAMPLES if key.startswith(prefix)), None)


def min_samples(key: str) -> int | None:
    """Fewest requests for a verdict on ``key`` (module docstring); ``None``: no minimum
    (a run total)."""
    if sample_key(key) is None:
        return None
    m = _QUANTILE.search(key)
    q = float(m.group(1)) / 100.0 if m else None
    if q is None or q >= 1.0:
        return MIN_SAMPLES
    # NOTE: rounded first: (2 - 0.99) / (1 - 0.99) is 100.99999999999991 in floats
    return max(MIN_SAMPLES, math.ceil(round((2.0 - q) / (1.0 - q), 6)))


def sample_count(metrics: Mapping[str, Any], key: str) -> int | None:
    """n of metric ``key`` in a run's summary metrics (module docstring; ``None``:
    unknown, an older summary)."""
    count = sample_key(key) or ("completed" if key in _DONE_TOTALS else "requests")
    value = metrics.get(count)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def too_few(key: str, counts: Sequence[int | None]) -> str | None:
    """``"n too small (n=k < m)"`` when the fewest of ``counts`` (the compared runs' n) is
    under :func:`min_samples`; ``None`` when a verdict may be drawn (or n is unknown)."""
    need = min_samples(key)
    known = [c for c in counts if c is not None]
    if need is None or not known or min(known) >= need:
        return None
    return f"n too small (n={min(known):,} < {need:,})"


def n_text(counts: Sequence[int | None]) -> str:
    """The n cell of a row: one number when every run agrees, else ``a/b/c``."""
    texts = ["-" if c is None else f"{c:,}" for c in counts]
    return texts[0] if len(set(texts)) == 1 else "/".join(texts)


def window_ranges(indices: Sequence[int]) -> str:
    """``[3, 4, 5, 9, 10]`` -> ``3-5, 9-10``."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def overload_text(metrics: Mapping[str, Any]) -> str:
    """``no``, or ``yes`` with the reason, the overloaded windows and the drain."""
    if not metrics.get("overloaded"):
        return "no"
    reason = metrics.get("overload_reason")
    parts = []
    windows = metrics.get("overloaded_windows") or []
    if windows:
        parts.append(f"windows {window_ranges(windows)}")
    drain = metrics.get("drain_s")
    if isinstance(reason, str) and "drain" in reason and isinstance(drain, (int, float)):
        parts.append(f"{drain:,.0f} s past the last arrival")
    if not isinstance(reason, str):  # NOTE: a summary written before the reason existed
        return f"yes: {'; '.join(parts)}" if parts else "yes"
    return f"yes: {reason} ({'; '.join(parts)})" if parts else f"yes: {reason}"


def run_split_note(metrics: Mapping[str, Any], config: Mapping[str, Any]) -> str | None:
    """:func:`prefillkit.records.run_flags.split_note` of a run's summary metrics and config."""
    warm, cold = metrics.get("warm_requests"), metrics.get("cold_requests")
    if not isinstance(warm, int) or not isinstance(cold, int):
        return None
    floor = config.get("affinity_warm_floor_tokens")
    return split_note(warm, cold, floor if isinstance(floor, int) else None)


def comparison_notes(cmp: Mapping[str, Any]) -> list[str]:
    """The variants' degenerate-split notes of a comparison, one line per distinct note
    (``"a, b: note"``)."""
    names: dict[str, list[str]] = {}
    for v in cmp.get("variants", []):
        note = v.get("split_note")
        if isinstance(note, str):
            names.setdefault(note, []).append(str(v.get("name", "")))
    return [f"{', '.join(who)}: {note}" for note, who in names.items()]
