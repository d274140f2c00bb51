"""``prefillkit compare``: one workload under several named config variants (its steps
are in :mod:`prefillkit.cli.compare_run`, loaded when the command runs)."""

from __future__ import annotations

from typing import Any

import click

from prefillkit.app.launch import PRESETS
from prefillkit.cli.common import CONTEXT_SETTINGS
from prefillkit.cli.flag_help import ConfigFlagsCommand
from prefillkit.cli.workload_options import workload_options

__all__ = ["COMPARE_HELP", "compare_cmd"]

COMPARE_HELP = """Replay one workload under several named config variants and compare them.

Every variant replays the same requests (chosen with the workload options, as for
replay) in its own worker process; the first variant is the baseline. Prints one table:
each key metric per variant with its delta and ratio against the baseline, then paired
per-request statistics against the baseline (the distribution of the per-request TTFT
ratio, and the p99 TTFT difference with a 95% paired bootstrap interval), which tell a
real gain from noise.

\b
Variants (at least one; a name is also the variant's folder name):
  --variant NAME:"FLAGS"     config flags of this variant, e.g.
                             --variant fcfs:"--schedule-policy fcfs"
  --variant NAME:@FILE.toml  a TOML config file for this variant
  --variants-file FILE.toml  [[variant]] tables: name = "...", flags = "...",
                             config = "FILE.toml" and/or settings by field name
                             (enable_affinity = true, ...)

The config flags given to compare itself and its --config file are shared by every
variant; a variant's own file, settings and flags override them (in that order).
Variants of --variants-file come first, then the --variant options in order. The base
deployment is chosen as for replay, from the shared flags and file only (none: the demo
preset; --preset NAME names one); a generated workload uses the baseline's --seed.

\b
Example (the shared --chunked-prefill-size applies to both variants):
  prefillkit compare --trace conversation_trace.jsonl --max-requests 400 \\
    --chunked-prefill-size 8192 --variant fcfs:"--schedule-policy fcfs" \\
    --variant lpm:"--schedule-policy lpm" --out cmp --report

Every variant is checked before any run starts. With --out DIR, writes DIR/NAME/
(summary.json, requests.csv, batches.csv) for each variant and DIR/compare.json (the
table's data); without --out the runs go to a temporary folder. Ctrl-C stops the
workers and exits with status 130.
"""


@click.command(
    "compare",
    cls=ConfigFlagsCommand,
    help=COMPARE_HELP,
    context_settings=CONTEXT_SETTINGS,
)
@workload_options
@click.option(
    "--preset",
    type=click.Choice(tuple(PRESETS)),
    help="A named deployment under the shared flags [default: demo without shared launch "
    "flags, else SGLang's defaults].",
)
@click.option(
    "--config",
    "config_path",
    metavar="FILE.toml",
    help="TOML settings shared by every variant (top level or [prefillkit]); shared flags "
    "and each variant's settings override it.",
)
@click.option(
    "--variant",
    "variant_options",
    multiple=True,
    metavar='NAME:"FLAGS"|NAME:@FILE.toml',
    help="A named variant (repeatable): config flags, or a TOML config file, applied on top "
    "of the shared settings. The first variant is the baseline.",
)
@click.option(
    "--variants-file",
    metavar="FILE.toml",
    help="Variants as [[variant]] tables (name, flags and/or settings); they come before "
    "the --variant options.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    help="Worker processes running variants in parallel [default: min(variants, CPUs)].",
)
@click.option(
    "--out",
    metavar="DIR",
    help="Write DIR/NAME/ (summary.json, requests.csv, batches.csv) per variant and "
    "DIR/compare.json (created if needed).",
)
@click.option(
    "--report",
    "write_html",
    is_flag=True,
    help="Also write DIR/report.html, a self-contained HTML report (needs --out).",
)
@click.option(
    "--percentiles",
    metavar="LIST",
    help="TTFT / queueing percentiles of each variant's summary.json beyond p50/p90/p95/p99 "
    "(e.g. 99.9), as for replay.",
)
@click.option(
    "--slo-ttft",
    metavar="DURATION",
    help="TTFT SLO (2s, 2000ms): adds SLO attainment and goodput to every variant and to "
    "the comparison, as for replay.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the comparison (compare.json) as JSON instead of a table.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress notes on stderr.")
@click.pass_context
def compare_cmd(ctx: click.Context, /, **params: Any) -> None:
    from prefillkit.cli.compare_run import run_compare

    run_compare(ctx, params)
