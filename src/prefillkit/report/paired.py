"""Paired comparison of scheduler variants replayed on the same requests.

Every variant of a comparison replays the same trace, so the same ``rid`` is the same
request in every run. That makes paired statistics possible: the per-request TTFT ratio
``other / base`` and a paired bootstrap of the p99 TTFT difference (request indices are
resampled jointly for both variants, which removes the between-request variance that an
unpaired bootstrap would leave in the interval).

:func:`compare_runs` returns a plain, JSON-serialisable dict (``NaN`` becomes ``None``);
:func:`~prefillkit.report.compare_tables.comparison_table` renders it with rich and
:mod:`prefillkit.report.html` renders it as HTML.
:func:`~prefillkit.report.compare_metrics.format_metric` is the one formatter both use.
The metrics (:mod:`prefillkit.report.compare_metrics`) and the tables
(:mod:`prefillkit.report.compare_tables`) live beside this module; every name they define
that was once defined here is still importable from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from prefillkit.report.bootstrap import bootstrap_diffs, bootstrap_p99_diff
from prefillkit.report.compare_metrics import HEADLINE_METRICS as HEADLINE_METRICS
from prefillkit.report.compare_metrics import IMPROVED_BELOW as IMPROVED_BELOW
from prefillkit.report.compare_metrics import KEY_METRICS as KEY_METRICS
from prefillkit.report.compare_metrics import WORSE_ABOVE as WORSE_ABOVE
from prefillkit.report.compare_metrics import format_delta as format_delta
from prefillkit.report.compare_metrics import format_metric as format_metric
from prefillkit.report.compare_metrics import format_p99_ci as format_p99_ci
from prefillkit.report.compare_metrics import format_ratio as format_ratio
from prefillkit.report.compare_metrics import metric_label as metric_label
from prefillkit.report.compare_tables import comparison_rows as comparison_rows
from prefillkit.report.compare_tables import comparison_table as comparison_table
from prefillkit.report.compare_tables import headline_rows as headline_rows
from prefillkit.report.compare_tables import headline_table as headline_table
from prefillkit.report.rundir import RunData
from prefillkit.report.verdicts import min_samples, run_split_note, sample_count

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


# Paired bootstrap statistics of TTFT: summary key -> quantile (None: the mean).
_PAIRED_STATS: dict[str, float | None] = {
    "ttft_p50_s": 0.50,
    "ttft_p90_s": 0.90,
    "ttft_p99_s": 0.99,
    "ttft_mean_s": None,
}

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
    if not runs:
        raise ValueError("compare_runs needs at least one run")
    base = runs[0]
    keys = [key for key, _, _ in KEY_METRICS]
    base_vals = {k: run_metric(base, k) for k in keys}
    variants: list[dict[str, Any]] = []
    for i, run in enumerate(runs):
        vals = base_vals if i == 0 else {k: run_metric(run, k) for k in keys}
        paired = None if i == 0 else _paired_stats(base, run, n_boot=n_boot, seed=seed, ci=ci)
        variants.append(_variant_entry(run, i == 0, keys, vals, base_vals, paired))
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


def _variant_entry(
    run: RunData,
    is_baseline: bool,
    keys: list[str],
    vals: dict[str, float | None],
    base_vals: dict[str, float | None],
    paired: dict[str, Any] | None,
) -> dict[str, Any]:
    """One variant of :func:`compare_runs`: its metrics ``vals``, their delta and ratio
    against the baseline's ``base_vals``, and its ``paired`` statistics."""
    delta: dict[str, float | None] = {}
    ratio: dict[str, float | None] = {}
    for k in keys:
        v, bv = vals[k], base_vals[k]
        delta[k] = None if v is None or bv is None else v - bv
        ratio[k] = None if v is None or bv is None or bv == 0 else v / bv
    return {
        "name": run.name,
        "is_baseline": is_baseline,
        "partial": run.partial,
        "metrics": vals,
        "delta": delta,
        "ratio": ratio,
        "n": {k: sample_count(run.metrics, k) for k in keys},
        "overload_reason": run.metrics.get("overload_reason"),
        "split_note": run_split_note(run.metrics, run.config),
        "paired": paired,
    }


def _paired_stats(
    base: RunData, run: RunData, *, n_boot: int, seed: int, ci: float
) -> dict[str, Any]:
    """The paired statistics of ``run`` against ``base`` (see :func:`compare_runs`)."""
    rids, bt, ot = paired_ttft_values(base, run)
    boot = bootstrap_diffs(bt, ot, list(_PAIRED_STATS.values()), n_boot=n_boot, seed=seed, ci=ci)
    d, lo, hi = boot[list(_PAIRED_STATS).index("ttft_p99_s")]
    return {
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
