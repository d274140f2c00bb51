"""The ``trace-stats`` console tables: a trace's overview, its lengths, the ideal hit
rate and the LRU prefix cache's hit rates (:func:`print_trace_stats`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from prefillkit.report.console_base import fmt_float, fmt_pct, make_console
from prefillkit.report.console_base import plain as _plain

if TYPE_CHECKING:
    from rich.table import Table

    from prefillkit.workloads.stats import TraceStats

__all__ = ["LruRow", "print_trace_stats"]


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
