"""The console tables of the command line (rich, on stdout): a run's summary, a trace's
statistics and the knob list, with the value formatters they share.

Every label is from :mod:`prefillkit.report.labels` or written here, never a raw key.
rich loads when a table is built, not on import (``prefillkit --help`` never needs it).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prefillkit.records.slo import pct_key, pct_label
from prefillkit.report.deployment import deployment_panel
from prefillkit.report.labels import metric_label

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from prefillkit.workloads.stats import TraceStats

__all__ = [
    "LruRow",
    "fmt_count",
    "fmt_float",
    "fmt_pct",
    "fmt_seconds",
    "fmt_tokens",
    "knobs_table",
    "make_console",
    "print_summary_table",
    "print_trace_stats",
]

Rows = list[tuple[str, str]]


def make_console() -> Console:
    """A stdout console; 120 columns wide when stdout is not a terminal (unless COLUMNS)."""
    from rich.console import Console

    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=120)


def _plain(console: Console, text: str) -> None:
    """One line printed as is: no markup, no highlighting."""
    console.print(text, markup=False, highlight=False)


# --------------------------------------------------------------------------- formatting


def fmt_count(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def _finite(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def fmt_seconds(value: Any) -> str:
    if not _finite(value):
        return "-"
    if abs(value) < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:,.3f} s"


def fmt_pct(value: Any) -> str:
    if not _finite(value):
        return "-"
    return f"{value * 100:.2f} %"


def fmt_float(value: Any, digits: int = 2) -> str:
    if not _finite(value):
        return "-"
    return f"{value:,.{digits}f}"


def fmt_tokens(value: Any) -> str:
    return "-" if value is None else f"{int(value):,} tok"


# --------------------------------------------------------------------------- run summary


def _quantiles_shown(metrics: dict[str, Any]) -> list[float]:
    """The percentiles the run asked for (``--percentiles``), else 50 / 90 / 99."""
    chosen = metrics.get("percentiles")
    if isinstance(chosen, list) and chosen:
        return [float(q) for q in chosen]
    return [50.0, 90.0, 99.0]


def _latency_rows(metrics: dict[str, Any], metric: str, name: str) -> Rows:
    rows = []
    for q in _quantiles_shown(metrics):
        key = pct_key(metric, q)
        if key in metrics:
            rows.append((f"{name} {pct_label(q)}", fmt_seconds(metrics[key])))
    for stat in ("max", "mean", "std"):
        key = f"{metric}_{stat}_s"
        if key in metrics:
            rows.append((f"{name} {stat}", fmt_seconds(metrics[key])))
    return rows


def _rows_of(metrics: dict[str, Any], *specs: tuple[str, Callable[[Any], str]]) -> Rows:
    """``(label, formatted value)`` of each metric ``metrics`` has, in order."""
    return [(metric_label(k), fmt(metrics[k])) for k, fmt in specs if k in metrics]


def _slo_rows(metrics: dict[str, Any]) -> Rows:
    if "slo_ttft_s" not in metrics:
        return []
    return [
        ("SLO: TTFT <=", fmt_seconds(metrics["slo_ttft_s"])),
        (metric_label("slo_attainment"), fmt_pct(metrics.get("slo_attainment"))),
        ("goodput (req/s)", fmt_float(metrics.get("goodput_req_s"), 3)),
    ]


def _throughput_rows(metrics: dict[str, Any]) -> Rows:
    return [
        ("input throughput (tok/s)", fmt_float(metrics.get("input_throughput_tok_s"), 0)),
        *_rows_of(
            metrics,
            ("executor_utilization", fmt_pct),
            ("num_batches", fmt_count),
            ("mean_batch_size", fmt_float),
            ("mean_chunks_per_request", fmt_float),
        ),
    ]


def _summary_sections(metrics: dict[str, Any]) -> list[Rows]:
    """The console summary's rows, in sections; every label from report/labels.py or
    written here (never a raw key)."""
    sections = [
        _rows_of(
            metrics,
            ("requests", fmt_count),
            ("arrived", fmt_count),  # a stopped run's: those not arrived are not drawn
            ("completed", fmt_count),
            ("rejected", fmt_count),
            ("unfinished", fmt_count),
        ),
        _latency_rows(metrics, "ttft", "TTFT") + _latency_rows(metrics, "queueing", "queueing"),
        _slo_rows(metrics),
        _rows_of(
            metrics,
            ("device_hit_rate", fmt_pct),
            ("host_hit_rate", fmt_pct),
            ("cache_hit_rate", fmt_pct),
            ("prompt_tokens", fmt_tokens),
            ("batch_device_hit_tokens", fmt_tokens),
            ("batch_host_hit_tokens", fmt_tokens),
            ("batch_carried_prefix_tokens", fmt_tokens),
        ),
        _throughput_rows(metrics),
        _rows_of(
            metrics,
            ("admission_passes", fmt_count),
            ("empty_passes", fmt_count),
            ("preemptions", fmt_count),
            ("retractions", fmt_count),
            ("evicted_pages", fmt_count),
            ("stuck", fmt_count),
            ("sim_duration_s", fmt_seconds),
        ),
    ]
    return [sec for sec in sections if sec]


def _deployment_table(doc: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(title="deployment", header_style="bold")
    table.add_column("setting")
    table.add_column("value")
    table.add_column("from")
    for label, value, source in deployment_panel(doc):
        table.add_row(label, value, source)
    return table


def _ttft_quad(metrics: dict[str, Any], prefix: str) -> str:
    """``p50 / p90 / p99 / max`` of the ``{prefix}p50_s`` ... metrics."""
    return " / ".join(
        fmt_seconds(metrics.get(f"{prefix}{q}_s")) for q in ("p50", "p90", "p99", "max")
    )


def _steady_rows(metrics: dict[str, Any]) -> Rows:
    """Console rows of the steady-state metrics (prefillkit.records.steady); none if absent."""
    from prefillkit.report.verdicts import overload_text

    if "window_s" not in metrics:
        return []
    start, end = metrics.get("steady_start_s"), metrics.get("steady_end_s")
    interval = (
        "empty (run too short)"
        if start is None or end is None
        else f"{start:,.1f}-{end:,.1f} s, {fmt_count(metrics.get('steady_requests'))} req"
    )
    rows = [("steady interval", interval)]
    rows += [
        (f"steady TTFT {q}", fmt_seconds(metrics.get(f"steady_ttft_{q}_s")))
        for q in ("p50", "p90", "p99", "max")
    ]
    for cls in ("warm", "cold"):
        n = fmt_count(metrics.get(f"{cls}_requests"))
        rows.append((f"{cls} TTFT p50/p90/p99/max ({n})", _ttft_quad(metrics, f"{cls}_ttft_")))
    # yes with its reason (compute-bound, memory-bound, drain), windows and drain
    rows.append((f"overloaded ({metrics['window_s']:g} s windows)", overload_text(metrics)))
    return rows


def _deployment_line(cfg: dict[str, Any]) -> str:
    """The deployment in one line: model, GPUs, CP, HiCache, mode and policy."""
    return (
        f"{cfg.get('model')} on {cfg.get('tp_size')}x{cfg.get('gpu')}, CP {cfg.get('cp_size')}"
        f"{' shared-KV' if cfg.get('enable_cp_shared_kv') else ''}"
        f"{', HiCache' if cfg.get('enable_hierarchical_cache') else ''}, {cfg.get('mode')}, "
        f"{cfg.get('schedule_policy')}"
    )


def _metrics_table(title: str, sections: Sequence[Rows]) -> Table:
    """A ``metric | value`` table, one rich section per non-empty element of ``sections``."""
    from rich.table import Table

    table = Table(title=title, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right", no_wrap=True)
    for i, section in enumerate(sections):
        if i:
            table.add_section()
        for label, text in section:
            table.add_row(label, text)
    return table


def print_summary_table(doc: dict[str, Any], *, wall_time_s: float | None = None) -> None:
    """Print a run's summary document (``summary.json`` shape) as a rich table on stdout."""
    from prefillkit.report.verdicts import run_split_note

    cfg = doc.get("config", {})
    wl = doc.get("workload", {})
    metrics = doc.get("metrics", {})
    title = f"prefillkit replay: {doc.get('name', '')}"
    if doc.get("partial"):
        title += " (partial)"
    sections = _summary_sections(metrics)
    if steady := _steady_rows(metrics):
        sections.append(steady)
    if wall_time_s is not None:
        sections.append([("wall time", fmt_seconds(wall_time_s))])
    table = _metrics_table(title, sections)
    console = make_console()
    _plain(console, f"workload: {wl.get('source', '-')}")
    _plain(console, f"deployment: {_deployment_line(cfg)}")
    console.print(_deployment_table(doc))
    console.print(table)
    if note := run_split_note(metrics, cfg):  # a degenerate warm/cold split, with its rule
        _plain(console, note)


# --------------------------------------------------------------------------- trace-stats


class LruRow(Protocol):
    """One LRU prefix-cache size's hit rate (``app.lru_hit_rate.LruHitRate``)."""

    @property
    def cache_tokens(self) -> int: ...
    @property
    def key_tokens(self) -> int: ...
    @property
    def oversized_requests(self) -> int: ...
    @property
    def hit_rate(self) -> float: ...
    @property
    def block_hit_rate(self) -> float: ...


def _stats_table(title: str, first: str) -> Table:
    from rich.table import Table

    table = Table(title=title, header_style="bold")
    table.add_column(first)
    return table


def _overview_table(stats: TraceStats, skipped: int) -> Table:
    overview = _stats_table("trace", "statistic")
    overview.add_column("value", justify="right", no_wrap=True)
    overview.add_row("requests", f"{stats.num_requests:,}")
    if skipped:
        overview.add_row("skipped bad rows", f"{skipped:,}")
    overview.add_row("span", f"{stats.span_s:,.1f} s ({stats.span_s / 60:,.1f} min)")
    overview.add_row("mean rate", f"{stats.mean_rate:,.2f} req/s")
    overview.add_row("total input tokens", f"{stats.total_tokens:,}")
    overview.add_row("total blocks", f"{stats.total_blocks:,}")
    overview.add_row("distinct blocks", f"{stats.distinct_blocks:,}")
    overview.add_row(
        "requests with prefix info", f"{stats.num_with_prefix_info:,} of {stats.num_requests:,}"
    )
    overview.add_row("requests with a hit", f"{stats.requests_with_hit:,}")
    overview.add_row("requests hitting every block", f"{stats.requests_all_hit:,}")
    return overview


def _lengths_table(stats: TraceStats) -> Table:
    lengths = _stats_table("lengths", "")
    for col in ("mean", "p50", "p90", "p99", "max"):
        lengths.add_column(col, justify="right", no_wrap=True)
    for label, ls in (
        ("input tokens", stats.input_len),
        ("output tokens", stats.output_len),
        ("blocks / request", stats.blocks_per_request),
    ):
        lengths.add_row(
            label,
            fmt_float(ls.mean, 1),
            fmt_float(ls.p50, 0),
            fmt_float(ls.p90, 0),
            fmt_float(ls.p99, 0),
            f"{ls.max:,}",
        )
    return lengths


def _ideal_table(stats: TraceStats) -> Table:
    ideal = _stats_table("ideal hit rate (infinite cache)", "weighting")
    ideal.add_column("partial last block")
    ideal.add_column("hit rate", justify="right", no_wrap=True)
    ideal.add_row("blocks", "counts (trace README)", fmt_pct(stats.block_hit_rate))
    ideal.add_row("blocks", "never shared", fmt_pct(stats.block_hit_rate_no_partial))
    ideal.add_row("tokens", "counts", fmt_pct(stats.token_hit_rate))
    ideal.add_row("tokens", "never shared", fmt_pct(stats.token_hit_rate_no_partial))
    return ideal


def _lru_table(lru: Sequence[LruRow], page_size: int) -> Table:
    """Weighted as the ideal table, blocks first; a paged cache never shares a partial
    last block, so a cache larger than the trace gives the "never shared" rows."""
    from rich.table import Table

    lru_table = Table(
        title=f"LRU prefix cache hit rate, by blocks and by tokens, partial last block "
        f"never shared (page {page_size}, key unit {lru[0].key_tokens} tokens)",
        header_style="bold",
    )
    for col in ("cache tokens", "blocks", "tokens", "larger than cache"):
        lru_table.add_column(col, justify="right", no_wrap=True)
    for r in lru:
        lru_table.add_row(
            f"{r.cache_tokens:,}",
            fmt_pct(r.block_hit_rate),
            fmt_pct(r.hit_rate),
            f"{r.oversized_requests:,}",
        )
    return lru_table


def print_trace_stats(
    heading: str, stats: TraceStats, *, skipped: int, lru: Sequence[LruRow], page_size: int
) -> None:
    """Print ``trace-stats``' tables on stdout: ``heading``, the overview, the lengths,
    the ideal hit rate and (when ``lru`` has rows) the LRU cache's hit rates."""
    console = make_console()
    _plain(console, heading)
    console.print(_overview_table(stats, skipped))
    console.print(_lengths_table(stats))
    console.print(_ideal_table(stats))
    if lru:
        console.print(_lru_table(lru, page_size))


# --------------------------------------------------------------------------- knobs


def knobs_table(bases: Sequence[str], rows: Sequence[tuple[str, Sequence[str], str, str]]) -> Table:
    """The ``knobs`` table: one ``(flag, default per base, meaning, group)`` row per knob,
    a section per group."""
    from rich.table import Table

    table = Table(title="prefillkit knobs (defaults replay uses, per base)", header_style="bold")
    table.add_column("flag", no_wrap=True)
    for base in bases:
        table.add_column(base, no_wrap=True)
    table.add_column("meaning")
    previous: str | None = None
    for flag, defaults, meaning, group in rows:
        if previous is not None and group != previous:
            table.add_section()
        previous = group
        table.add_row(flag, *defaults, meaning)
    return table
