"""``prefillkit trace-stats``: a trace's size, rate, lengths and prefix-cache hit rates
(the tables are :func:`prefillkit.report.trace_tables.print_trace_stats`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from prefillkit.app.replay import InputError
from prefillkit.cli.common import CONTEXT_SETTINGS, echo_err
from prefillkit.cli.workload_options import FORMAT_OPTION
from prefillkit.records.output import json_ready
from prefillkit.report.trace_tables import print_trace_stats
from prefillkit.sim.engine import SimConfigError
from prefillkit.workloads.block_size import block_size_refusal
from prefillkit.workloads.bundled import resolve_trace
from prefillkit.workloads.record import TraceRecord, to_request
from prefillkit.workloads.stats import TOKEN_BLOCK_SIZE, trace_stats
from prefillkit.workloads.trace_reader import ReplayOptions, detect_format, load_records

if TYPE_CHECKING:
    from prefillkit.app.lru_hit_rate import LruHitRate

__all__ = ["trace_stats_cmd"]


def _refuse_block_size(block_size: int | None, fmt: str) -> None:
    refusal = None if block_size is None else block_size_refusal(fmt=fmt)
    if refusal is not None:
        raise InputError(f"--block-size {refusal}")


def _load(
    path: str, fmt: str, block_size: int | None, skip_bad_rows: bool
) -> tuple[str, str, list[TraceRecord], list[tuple[int, str]]]:
    """``(path, format, records, skipped rows)`` of the trace (a bundled name or a path)."""
    _refuse_block_size(block_size, fmt)  # the format named, then the one detected
    path = resolve_trace(path)  # a bundled name (mooncake-slice) or a path
    real_fmt = detect_format(path) if fmt == "auto" else fmt
    _refuse_block_size(block_size, real_fmt)
    records, skipped = load_records(
        path, real_fmt, ReplayOptions(skip_bad_rows=skip_bad_rows), block_size=block_size
    )
    return path, real_fmt, records, skipped


def _lru_rates(
    records: list[TraceRecord], cache_sizes: tuple[int, ...], page_size: int
) -> list[LruHitRate]:
    """The hit rate of an LRU prefix cache of each size (none without a size)."""
    if not cache_sizes:
        return []
    from prefillkit.app.lru_hit_rate import lru_hit_rate

    requests = [to_request(r, page_size) for r in records]
    # Blocks as trace_stats counts them: hash blocks, else page-size blocks.
    blocks = [r.block_size if r.block_size is not None else page_size for r in records]
    try:
        lru = [lru_hit_rate(requests, n, page_size, blocks) for n in cache_sizes]
    except SimConfigError as exc:
        raise InputError(f"--lru-cache-tokens: {exc}") from None
    for req in requests:  # free the key chains early
        req.keys = []
    return lru


@click.command("trace-stats", context_settings=CONTEXT_SETTINGS)
@click.argument("path")
@FORMAT_OPTION
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    help="Tokens per hash block (Mooncake / Bailian override).",
)
@click.option(
    "--lru-cache-tokens",
    type=click.IntRange(min=1),
    multiple=True,
    metavar="N",
    help="Also report the hit rate of an LRU prefix cache of N tokens (repeatable).",
)
@click.option(
    "--page-size",
    type=click.IntRange(min=1),
    default=TOKEN_BLOCK_SIZE,
    show_default=True,
    help="KV page size of the LRU cache; token prompts are cut into blocks of this size.",
)
@click.option("--skip-bad-rows", is_flag=True, help="Skip (and count) malformed rows.")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def trace_stats_cmd(
    path: str,
    fmt: str,
    block_size: int | None,
    lru_cache_tokens: tuple[int, ...],
    page_size: int,
    skip_bad_rows: bool,
    as_json: bool,
) -> None:
    """Statistics of a trace: size, rate, lengths and prefix-cache hit rates.

    The ideal hit rate assumes an infinite cache: a block hits iff the same prefix
    appeared in an earlier request. It is reported block level and token weighted,
    each with a repeated partial last block counted as a hit (the trace README
    convention: 36.64 % for the Mooncake conversation trace) and with a partial last
    block never shared (what a paged prefix cache can reach: 36.60 %).

    --lru-cache-tokens N replays the requests in order through an LRU prefix cache of
    N tokens (pages of --page-size, key units of lcm(page, block) tokens) and reports
    its hit rate weighted as the ideal one, by blocks and by tokens (a paged cache never
    shares a partial last block: a cache larger than the trace gives the "never shared"
    rows).
    """
    path, real_fmt, records, skipped = _load(path, fmt, block_size, skip_bad_rows)
    stats = trace_stats(records, token_block_size=page_size)
    lru = _lru_rates(records, lru_cache_tokens, page_size)
    if skipped:
        line, reason = skipped[0]
        echo_err(f"skipped {len(skipped):,} bad rows (first: line {line}: {reason})")
    if as_json:
        doc = {
            "path": path,
            "format": real_fmt,
            "skipped_rows": len(skipped),
            **stats.to_dict(),
            "lru": [r.to_dict() for r in lru],
        }
        click.echo(json.dumps(json_ready(doc), indent=2))
        return
    print_trace_stats(
        f"trace: {path} ({real_fmt})", stats, skipped=len(skipped), lru=lru, page_size=page_size
    )
