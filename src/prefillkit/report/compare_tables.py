"""The tables of a comparison (:func:`~prefillkit.report.paired.compare_runs`'s result).

Two tables, each as plain-text rows (shared by the rich console tables here and the HTML
page of :mod:`prefillkit.report.html`):

- the comparison table (:func:`comparison_rows`): every metric by variant, each
  non-baseline cell with its delta and ratio, then the paired per-request statistics;
- the lead table (:func:`headline_rows`): the :data:`HEADLINE_METRICS` with the paired
  bootstrap interval of each TTFT statistic and a verdict per variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rich.markup import escape
from rich.table import Table

from prefillkit.report.compare_metrics import (
    HEADLINE_METRICS,
    IMPROVED_BELOW,
    METRIC_KINDS,
    WORSE_ABOVE,
    format_delta,
    format_metric,
    format_p99_ci,
    format_ratio,
    metric_label,
)
from prefillkit.report.verdicts import N_RULE, comparison_notes, n_text, sample_key, too_few

__all__ = [
    "comparison_rows",
    "comparison_table",
    "headline_rows",
    "headline_table",
]

# A change without an interval counts when it moves the value by more than this fraction.
_PLAIN_CHANGE = 0.01


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
        rows.append(_headline_row(variants, key, better))
    return header, rows


def _headline_row(variants: list[dict[str, Any]], key: str, better: int) -> list[str]:
    """The lead table's row of metric ``key`` (see :func:`headline_rows`)."""
    counts = [(v.get("n") or {}).get(key) for v in variants]
    row = [metric_label(key), n_text(counts)]
    verdicts: list[str] = []
    base_value = variants[0]["metrics"].get(key) if variants else None
    for v, n in zip(variants, counts, strict=True):
        value = v["metrics"].get(key)
        text = format_metric(key, value)
        if METRIC_KINDS.get(key) == "flag" and value and v.get("overload_reason"):
            text += f": {v['overload_reason']}"
        if v.get("is_baseline") or value is None or base_value is None:
            row.append(text)
            continue
        delta = v["delta"].get(key)
        if delta is None:
            row.append(text)
            continue
        text, word = _against_baseline(key, better, v, text, base_value, [counts[0], n])
        row.append(text)
        verdicts.append(f"{v['name']}: {word}")
    row.append("; ".join(verdicts) if verdicts else "-")
    return row


def _against_baseline(
    key: str,
    better: int,
    variant: dict[str, Any],
    text: str,
    base_value: float,
    counts: list[int | None],
) -> tuple[str, str]:
    """``(cell, verdict word)`` of a non-baseline ``variant`` with a value and a delta of
    metric ``key``: ``text`` (its value) with the difference (and, for the TTFT
    statistics, the paired interval); ``counts``: the baseline's and its n."""
    value, delta = variant["metrics"].get(key), variant["delta"].get(key)
    band = ((variant.get("paired") or {}).get("diff_ci") or {}).get(key)
    lo = hi = None
    if band and band.get("lo") is not None and band.get("hi") is not None:
        lo, hi = float(band["lo"]), float(band["hi"])
        text += f" ({format_delta(key, delta)} [{format_delta(key, lo)}, "
        text += f"{format_delta(key, hi)}])"
    elif METRIC_KINDS.get(key) != "flag":
        text += f" ({format_delta(key, delta)})"
    few = too_few(key, counts)
    if few is not None:
        word = few
    elif METRIC_KINDS.get(key) == "flag":
        word = "same" if bool(value) == bool(base_value) else ("worse" if value else "better")
    else:
        word = _verdict_word(float(delta), lo, hi, float(base_value), better)
    return text, word
