"""Paired comparison of scheduler variants replayed on the same requests.

Every variant of a comparison replays the same trace, so the same ``rid`` is the same
request in every run. That makes paired statistics possible: the per-request TTFT ratio
``other / base`` and a paired bootstrap of the p99 TTFT difference (request indices are
resampled jointly for both variants, which removes the between-request variance that an
unpaired bootstrap would leave in the interval).

:func:`compare_runs` returns a plain, JSON-serialisable dict (``NaN`` becomes ``None``);
:func:`comparison_table` renders it with rich and :mod:`prefillkit.report.html` renders it
as HTML. :func:`format_metric` is the one formatter both use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rich.markup import escape
from rich.table import Table

from prefillkit.report.bootstrap import bootstrap_diffs, bootstrap_p99_diff
from prefillkit.report.labels import metric_kind
from prefillkit.report.labels import metric_label as _label_of
from prefillkit.report.rundir import RunData
from prefillkit.report.verdicts import (
    N_RULE,
    comparison_notes,
    min_samples,
    n_text,
    run_split_note,
    sample_count,
    sample_key,
    too_few,
)

__all__ = [
    "HEADLINE_METRICS",
    "IMPROVED_BELOW",
    "KEY_METRICS",
    "WORSE_ABOVE",
    "bootstrap_diffs",
    "bootstrap_p99_diff",
    "compare_runs",
    "comparison_rows",
    "comparison_table",
    "format_delta",
    "format_metric",
    "format_ratio",
    "headline_rows",
    "headline_table",
    "metric_label",
    "paired_ttft",
    "paired_ttft_values",
    "ratio_summary",
    "run_metric",
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
#: (:data:`_PAIRED_STATS`); the others a plain difference.
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

# Paired bootstrap statistics of TTFT: summary key -> quantile (None: the mean).
_PAIRED_STATS: dict[str, float | None] = {
    "ttft_p50_s": 0.50,
    "ttft_p90_s": 0.90,
    "ttft_p99_s": 0.99,
    "ttft_mean_s": None,
}
# A change without an interval counts when it moves the value by more than this fraction.
_PLAIN_CHANGE = 0.01
_KIND = {key: kind for key, _, kind in KEY_METRICS}
_LABEL = {key: label for key, label, _ in KEY_METRICS}

IMPROVED_BELOW = 0.99
WORSE_ABOVE = 1.01

# TTFT metrics that can be recomputed from requests.csv when the summary lacks them.
_TTFT_FALLBACK: dict[str, tuple[str, float]] = {
    "ttft_p50_s": ("q", 0.50),
    "ttft_p90_s": ("q", 0.90),
    "ttft_p99_s": ("q", 0.99),
    "ttft_max_s": ("q", 1.0),
    "ttft_mean_s": ("mean", 0.0),
}


# --------------------------------------------------------------------------- pairing


def paired_ttft_values(base: RunData, other: RunData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Join two runs on ``rid``: ``(rids, base_ttft, other_ttft)`` of requests finished in both.

    Order follows ``base``'s file order. A ``rid`` repeated within a run counts once (its
    first row). Requests whose base TTFT is not positive are dropped (no defined ratio).
    """
    b_rid, b_ttft = _finished_by_rid(base)
    o_rid, o_ttft = _finished_by_rid(other)
    if len(b_rid) == 0 or len(o_rid) == 0:
        empty = np.zeros(0, dtype=float)
        return np.array([], dtype=object), empty, empty.copy()
    other_index = {rid: i for i, rid in enumerate(o_rid)}
    pick_b: list[int] = []
    pick_o: list[int] = []
    for i, rid in enumerate(b_rid):
        j = other_index.get(rid)
        if j is not None and b_ttft[i] > 0:
            pick_b.append(i)
            pick_o.append(j)
    ib = np.asarray(pick_b, dtype=np.intp)
    io = np.asarray(pick_o, dtype=np.intp)
    return b_rid[ib], b_ttft[ib].astype(float), o_ttft[io].astype(float)


def paired_ttft(base: RunData, other: RunData) -> np.ndarray:
    """Per-request TTFT ratio ``other / base`` over requests finished in both runs."""
    _, b, o = paired_ttft_values(base, other)
    return o / b if len(b) else np.zeros(0, dtype=float)


def _classes_by_rid(run: RunData) -> dict[str, str]:
    """Request id -> its ``cache_class`` (first row; empty when the file has none)."""
    if run.num_requests == 0:
        return {}
    out: dict[str, str] = {}
    for rid, cls in zip(run.requests["rid"], run.requests["cache_class"], strict=True):
        out.setdefault(str(rid), str(cls))
    return out


def class_ratios(
    base: RunData, rids: np.ndarray, base_ttft: np.ndarray, other_ttft: np.ndarray
) -> dict[str, dict[str, float | int | None]]:
    """:func:`ratio_summary` of the paired TTFT ratios of the base's warm and cold requests."""
    classes = _classes_by_rid(base)
    cls = np.array([classes.get(str(r), "") for r in rids], dtype=object)
    out: dict[str, dict[str, float | int | None]] = {}
    for name in ("warm", "cold"):
        mask = cls == name
        out[name] = ratio_summary(other_ttft[mask] / base_ttft[mask])
    return out


def _finished_by_rid(run: RunData) -> tuple[np.ndarray, np.ndarray]:
    if run.num_requests == 0:
        return np.array([], dtype=object), np.zeros(0, dtype=float)
    mask = run.finished_mask()
    rid = np.asarray([str(r) for r in run.requests["rid"][mask]], dtype=object)
    ttft = np.asarray(run.requests["ttft_s"][mask], dtype=float)
    _, first = np.unique(rid.astype(str), return_index=True)
    first.sort()
    return rid[first], ttft[first]


def ratio_summary(ratios: Sequence[float] | np.ndarray) -> dict[str, float | int | None]:
    """Summary of per-request ratios: n, p10/p50/p90, geometric mean, fractions better/worse.

    ``frac_improved`` is the share with ratio < 0.99, ``frac_worse`` the share > 1.01.
    Non-finite ratios are ignored; with no ratio left every statistic is ``None``.
    """
    r = np.asarray(ratios, dtype=float)
    r = r[np.isfinite(r)]
    n = len(r)
    if n == 0:
        return {
            "n": 0,
            "p10": None,
            "p50": None,
            "p90": None,
            "geomean": None,
            "frac_improved": None,
            "frac_worse": None,
        }
    p10, p50, p90 = np.quantile(r, [0.10, 0.50, 0.90])
    pos = r[r > 0]
    geomean = float(np.exp(np.mean(np.log(pos)))) if len(pos) == n else None
    return {
        "n": n,
        "p10": float(p10),
        "p50": float(p50),
        "p90": float(p90),
        "geomean": geomean,
        "frac_improved": float(np.mean(r < IMPROVED_BELOW)),
        "frac_worse": float(np.mean(r > WORSE_ABOVE)),
    }


# --------------------------------------------------------------------------- compare


def run_metric(run: RunData, key: str) -> float | None:
    """A summary metric, recomputed from requests.csv for TTFT metrics the summary lacks."""
    value = run.metric(key)
    if value is not None or key not in _TTFT_FALLBACK:
        return value
    ttft = run.finished_ttft()
    if len(ttft) == 0:
        return None
    how, q = _TTFT_FALLBACK[key]
    return float(np.mean(ttft)) if how == "mean" else float(np.quantile(ttft, q))


def compare_runs(
    runs: Sequence[RunData], *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95
) -> dict[str, Any]:
    """Compare every run with the first (the baseline); JSON-serialisable result.

    Layout::

        {"baseline": name, "ci": 0.95, "n_boot": 2000,
         "metrics": [{"key", "label", "kind"}, ...],
         "min_n": {key: fewest requests for a verdict},  # prefillkit.report.verdicts
         "variants": [{"name", "is_baseline", "partial",
                       "metrics": {key: value}, "delta": {key: v - base},
                       "ratio": {key: v / base}, "n": {key: requests behind it},
                       "overload_reason", "split_note": None | one line,
                       "paired": None | {"n_paired", "ratio": ratio_summary(...),
                                         "by_class": {"warm"|"cold": ratio_summary(...)},
                                         "p99_diff_s", "p99_diff_lo_s", "p99_diff_hi_s",
                                         "base_p99_s", "other_p99_s"}}, ...]}

    The baseline's ``delta``/``ratio`` are against itself (0 and 1) and its ``paired`` is
    ``None``. Missing metrics, and ratios with a zero base, are ``None``.
    """
    if not runs:
        raise ValueError("compare_runs needs at least one run")
    base = runs[0]
    keys = [key for key, _, _ in KEY_METRICS]
    base_vals = {k: run_metric(base, k) for k in keys}
    variants: list[dict[str, Any]] = []
    for i, run in enumerate(runs):
        vals = base_vals if i == 0 else {k: run_metric(run, k) for k in keys}
        delta: dict[str, float | None] = {}
        ratio: dict[str, float | None] = {}
        for k in keys:
            v, bv = vals[k], base_vals[k]
            delta[k] = None if v is None or bv is None else v - bv
            ratio[k] = None if v is None or bv is None or bv == 0 else v / bv
        paired: dict[str, Any] | None = None
        if i > 0:
            rids, bt, ot = paired_ttft_values(base, run)
            boot = bootstrap_diffs(
                bt, ot, list(_PAIRED_STATS.values()), n_boot=n_boot, seed=seed, ci=ci
            )
            d, lo, hi = boot[list(_PAIRED_STATS).index("ttft_p99_s")]
            paired = {
                "n_paired": len(bt),
                "ratio": ratio_summary(ot / bt if len(bt) else []),
                "by_class": class_ratios(base, rids, bt, ot),
                "p99_diff_s": d,
                "p99_diff_lo_s": lo,
                "p99_diff_hi_s": hi,
                "base_p99_s": float(np.quantile(bt, 0.99)) if len(bt) else None,
                "other_p99_s": float(np.quantile(ot, 0.99)) if len(ot) else None,
                # Paired difference with its interval for each TTFT statistic.
                "diff_ci": {
                    key: {"diff": dd, "lo": ll, "hi": hh}
                    for key, (dd, ll, hh) in zip(_PAIRED_STATS, boot, strict=True)
                },
            }
        variants.append(
            {
                "name": run.name,
                "is_baseline": i == 0,
                "partial": run.partial,
                "metrics": vals,
                "delta": delta,
                "ratio": ratio,
                "n": {k: sample_count(run.metrics, k) for k in keys},
                "overload_reason": run.metrics.get("overload_reason"),
                "split_note": run_split_note(run.metrics, run.config),
                "paired": paired,
            }
        )
    out = {
        "baseline": base.name,
        "ci": ci,
        "n_boot": n_boot,
        "seed": seed,
        "metrics": [{"key": k, "label": label, "kind": kind} for k, label, kind in KEY_METRICS],
        "headline": [{"key": k, "better": d} for k, d in HEADLINE_METRICS],
        "min_n": {k: n for k in keys if (n := min_samples(k)) is not None},
        "variants": variants,
    }
    return _jsonable(out)


def _jsonable(obj: Any) -> Any:
    """Plain Python types only; NaN/inf become ``None``."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj


# --------------------------------------------------------------------------- formatting


def format_metric(key: str, value: float | None, *, kind: str | None = None) -> str:
    """Human-readable value of metric ``key`` (``-`` when missing)."""
    if value is None or not math.isfinite(value):
        return "-"
    kind = kind or _KIND.get(key) or metric_kind(key)
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
    kind = _KIND.get(key) or metric_kind(key)
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


def comparison_rows(
    cmp: dict[str, Any],
) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """``(header, metric_rows, paired_rows)`` of the comparison table, as plain text.

    Shared by the rich table and the HTML page. One row per metric, one column per variant;
    a non-baseline cell reads ``value (delta, ×ratio)``. ``paired_rows`` (empty with a
    single run) hold the paired statistics of each variant against the baseline.
    """
    variants: list[dict[str, Any]] = cmp.get("variants", [])
    ci = float(cmp.get("ci", 0.95))
    header = ["metric"] + [
        f"{v['name']} (baseline)" if v.get("is_baseline") else str(v["name"]) for v in variants
    ]
    rows: list[list[str]] = []
    for m in cmp.get("metrics", []):
        key = m["key"]
        if all(v["metrics"].get(key) is None for v in variants):
            continue
        row = [str(m.get("label", key))]
        for v in variants:
            text = format_metric(key, v["metrics"].get(key), kind=m.get("kind"))
            changes = m.get("kind") != "flag" and not v.get("is_baseline")
            notes = []
            if changes and v["metrics"].get(key) is not None:
                notes += [format_delta(key, v["delta"].get(key)), format_ratio(v["ratio"].get(key))]
            n = (v.get("n") or {}).get(key)
            if sample_key(key) is not None and n is not None and v["metrics"].get(key) is not None:
                notes.append(f"n={n:,}")
            row.append(f"{text} ({', '.join(notes)})" if notes else text)
        rows.append(row)
    paired = _paired_rows(variants, ci) if len(variants) > 1 else []
    return header, rows, paired


def _paired_rows(variants: list[dict[str, Any]], ci: float) -> list[list[str]]:
    def cell(v: dict[str, Any], fn: Callable[[dict[str, Any]], str]) -> str:
        p = v.get("paired")
        return "-" if v.get("is_baseline") or not p else fn(p)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x * 100:.1f}%"

    def rq(p: dict[str, Any], k: str) -> str:
        return format_ratio(p["ratio"].get(k))

    def by_class(p: dict[str, Any], name: str) -> str:
        r = (p.get("by_class") or {}).get(name) or {}
        if not r.get("n"):
            return "-"
        return f"{format_ratio(r.get('p50'))} / {format_ratio(r.get('p90'))} (n={r['n']:,})"

    specs: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("paired requests", lambda p: f"{p['n_paired']:,}"),
        (
            "TTFT ratio p10 / p50 / p90",
            lambda p: " / ".join(rq(p, k) for k in ("p10", "p50", "p90")),
        ),
        ("TTFT ratio geomean", lambda p: rq(p, "geomean")),
        ("warm TTFT ratio p50 / p90", lambda p: by_class(p, "warm")),
        ("cold TTFT ratio p50 / p90", lambda p: by_class(p, "cold")),
        (
            "requests faster / slower",
            lambda p: (
                f"{pct(p['ratio'].get('frac_improved'))} / {pct(p['ratio'].get('frac_worse'))}"
            ),
        ),
        ("Δ TTFT p99 (paired bootstrap)", lambda p: format_p99_ci(p, ci)),
    ]
    return [[label] + [cell(v, fn) for v in variants] for label, fn in specs]


def headline_table(cmp: dict[str, Any]) -> Table:
    """Rich table of :func:`headline_rows`: the comparison's lead table with verdicts."""
    header, rows = headline_rows(cmp)
    ci = float(cmp.get("ci", 0.95))
    table = Table(
        title=f"Verdict vs baseline {cmp.get('baseline', '')}",
        caption=escape(
            "\n".join(
                [
                    f"Δ [lo, hi]: paired {ci * 100:.0f}% bootstrap interval over requests for "
                    "TTFT statistics; better/worse: the interval excludes 0 (others: moved by "
                    "more than 1%)",
                    N_RULE,
                    *comparison_notes(cmp),
                ]
            )
        ),
    )
    table.add_column(header[0], style="bold", no_wrap=True)
    for h in header[1:-1]:
        table.add_column(h, justify="right")
    table.add_column(header[-1])
    for row in rows:
        table.add_row(*row)
    return table


def comparison_table(cmp: dict[str, Any]) -> Table:
    """Rich table of :func:`compare_runs` output: metrics by variant, then paired stats."""
    header, rows, paired = comparison_rows(cmp)
    ci = float(cmp.get("ci", 0.95))
    table = Table(
        title=f"Comparison vs baseline {cmp.get('baseline', '')}",
        caption=(
            f"cells: value (delta, ×ratio) vs baseline; faster/slower = per-request TTFT ratio "
            f"< {IMPROVED_BELOW} / > {WORSE_ABOVE}; Δp99 with {ci * 100:.0f}% paired "
            f"bootstrap CI ({cmp.get('n_boot', '?')} resamples)"
        ),
        show_lines=False,
    )
    table.add_column(header[0], style="bold", no_wrap=True)
    for h in header[1:]:
        table.add_column(h, justify="right")
    for i, row in enumerate(rows):
        table.add_row(*row, end_section=bool(paired) and i == len(rows) - 1)
    for row in paired:
        table.add_row(*row)
    return table


def metric_label(key: str) -> str:
    """The label of ``key`` (:mod:`prefillkit.report.labels`; never the raw key)."""
    return _LABEL.get(key) or _label_of(key)


def _verdict_word(
    delta: float, lo: float | None, hi: float | None, base: float, better: int
) -> str:
    """``better`` / ``worse`` / ``no clear change`` / ``higher`` / ``lower`` / ``same``."""
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        if lo == hi == delta == 0.0:
            return "same"
        if lo <= 0.0 <= hi:
            return "no clear change"
        up = lo > 0.0
    else:
        scale = abs(base) if base else 1.0
        if abs(delta) <= _PLAIN_CHANGE * scale:
            return "same"
        up = delta > 0.0
    if better == 0:
        return "higher" if up else "lower"
    return "better" if (up and better > 0) or (not up and better < 0) else "worse"


def headline_rows(cmp: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of the comparison's lead table, as plain text.

    One row per :data:`HEADLINE_METRICS` metric present in any variant: its label, its n
    (the requests it rests on, :mod:`prefillkit.report.verdicts`), the baseline's value,
    each other variant's value with the difference (and, for the TTFT statistics, the
    paired bootstrap interval: ``Δ [lo, hi]``), and a one-line verdict naming each
    variant: *better* / *worse* (the interval excludes 0, or without an interval the
    value moved by more than 1 %), *no clear change* (the interval holds 0), *same*,
    *higher* / *lower* for a metric that is neither better up nor down, or *n too small*
    when the baseline or the variant rests on fewer requests than the metric needs.
    """
    variants: list[dict[str, Any]] = cmp.get("variants", [])
    header = ["metric", "n"] + [
        f"{v['name']} (baseline)" if v.get("is_baseline") else str(v["name"]) for v in variants
    ]
    header.append("verdict")
    spec = cmp.get("headline") or [{"key": k, "better": d} for k, d in HEADLINE_METRICS]
    rows: list[list[str]] = []
    for item in spec:
        key, better = item["key"], int(item.get("better", 0))
        if all(v["metrics"].get(key) is None for v in variants):
            continue
        counts = [(v.get("n") or {}).get(key) for v in variants]
        row = [metric_label(key), n_text(counts)]
        verdicts: list[str] = []
        base_value = variants[0]["metrics"].get(key) if variants else None
        for v, n in zip(variants, counts, strict=True):
            value = v["metrics"].get(key)
            text = format_metric(key, value)
            if _KIND.get(key) == "flag" and value and v.get("overload_reason"):
                text += f": {v['overload_reason']}"
            if v.get("is_baseline") or value is None or base_value is None:
                row.append(text)
                continue
            delta = v["delta"].get(key)
            if delta is None:
                row.append(text)
                continue
            band = ((v.get("paired") or {}).get("diff_ci") or {}).get(key)
            lo = hi = None
            if band and band.get("lo") is not None and band.get("hi") is not None:
                lo, hi = float(band["lo"]), float(band["hi"])
                text += f" ({format_delta(key, delta)} [{format_delta(key, lo)}, "
                text += f"{format_delta(key, hi)}])"
            elif _KIND.get(key) != "flag":
                text += f" ({format_delta(key, delta)})"
            row.append(text)
            few = too_few(key, [counts[0], n])
            if few is not None:
                word = few
            elif _KIND.get(key) == "flag":
                word = (
                    "same" if bool(value) == bool(base_value) else ("worse" if value else "better")
                )
            else:
                word = _verdict_word(float(delta), lo, hi, float(base_value), better)
            verdicts.append(f"{v['name']}: {word}")
        row.append("; ".join(verdicts) if verdicts else "-")
        rows.append(row)
    return header, rows
