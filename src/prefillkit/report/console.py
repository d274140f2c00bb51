"""The console tables of the command line (rich, on stdout): a run's summary, a trace's
statistics and the knob list, with the value formatters they share.

Every label is from :mod:`prefillkit.report.labels` or written here, never a raw key.
rich loads when a table is built, not on import (``prefillkit --help`` never needs it).
The console and the formatters are :mod:`prefillkit.report.console_base`'s, the
``trace-stats`` tables :mod:`prefillkit.report.trace_tables`'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.records.slo import pct_key, pct_label
from prefillkit.report.console_base import (
    fmt_count,
    fmt_float,
    fmt_pct,
    fmt_seconds,
    fmt_tokens,
    make_console,
    plain,
)
from prefillkit.report.deployment import deployment_panel
from prefillkit.report.labels import metric_label

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "knobs_table",
    "print_summary_table",
]

Rows = list[tuple[str, str]]


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
    plain(console, f"workload: {wl.get('source', '-')}")
    plain(console, f"deployment: {_deployment_line(cfg)}")
    console.print(_deployment_table(doc))
    console.print(table)
    if isinstance(fleet := doc.get("fleet"), dict):
        from prefillkit.report.fleet_panel import fleet_lines, fleet_table

        console.print(fleet_table(fleet))
        for line in fleet_lines(fleet):
            plain(console, line)
    if note := run_split_note(metrics, cfg):  # a degenerate warm/cold split, with its rule
        plain(console, note)


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
