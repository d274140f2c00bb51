"""``prefillkit capacity``: per configuration of a grid file, the highest request rate
meeting an SLO (a bisection of sweep points)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from prefillkit.cli.common import (
    CONTEXT_SETTINGS,
    EXIT_INTERRUPTED,
    backend_options,
    echo_err,
    positive_float,
)
from prefillkit.report.console_base import make_console

__all__ = ["CAPACITY_HELP", "capacity_cmd"]

CAPACITY_HELP = """Find, per configuration of a grid file, the highest request rate meeting an SLO.

Each configuration (a point of the grid; the grid must not vary rate or time_scale) is
replayed at mean request rates between --rate-min and --rate-max, bisected geometrically
until the bracket is within --tolerance: the answer is the highest rate probed that met
the SLO (the TTFT percentile bound and/or the goodput). Configurations search in parallel
(Ray or local processes, as sweep); probes are stored in DIR like sweep points, so a
rerun reuses them. Writes DIR/capacity.json and DIR/report.html.
"""


@click.command("capacity", help=CAPACITY_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("grid", metavar="GRID.toml")
@click.option("-o", "--out", metavar="DIR", required=True, help="The store (created or resumed).")
@click.option(
    "--slo-ttft",
    type=positive_float(),
    metavar="SECONDS",
    help="Bound on the TTFT percentile (--slo-percentile).",
)
@click.option(
    "--slo-percentile",
    type=click.FloatRange(min=0.0, max=100.0, min_open=True),
    default=99.0,
    show_default=True,
    help="Which TTFT percentile --slo-ttft bounds.",
)
@click.option(
    "--slo-goodput",
    type=click.FloatRange(min=0.0, max=1.0, min_open=True),
    metavar="FRACTION",
    help="Least fraction of requests with TTFT <= --slo-goodput-ttft.",
)
@click.option(
    "--slo-goodput-ttft",
    type=positive_float(),
    metavar="SECONDS",
    help="The goodput's TTFT bound [default: --slo-ttft].",
)
@click.option("--rate-min", type=positive_float(), required=True, help="Lowest rate (req/s).")
@click.option("--rate-max", type=positive_float(), required=True, help="Highest rate (req/s).")
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="Stop when the bracket's upper/lower rate ratio is at most 1 + this.",
)
@backend_options
@click.pass_context
def capacity_cmd(ctx: click.Context, /, **params: Any) -> None:
    from prefillkit.app.sweep.capacity import run_capacity
    from prefillkit.app.sweep.grid import load_grid
    from prefillkit.app.sweep.rate_search import Slo
    from prefillkit.app.sweep.render import render_store
    from prefillkit.app.sweep.sweep import SweepInterrupted

    quiet: bool = params["quiet"]
    slo = Slo(
        percentile=params["slo_percentile"],
        ttft_s=params["slo_ttft"],
        goodput=params["slo_goodput"],
        goodput_ttft_s=params["slo_goodput_ttft"],
    )
    grid = load_grid(params["grid"])
    address = params["address"] or os.environ.get("RAY_ADDRESS") or None
    try:
        result = run_capacity(
            grid,
            params["out"],
            slo,
            rate_min=params["rate_min"],
            rate_max=params["rate_max"],
            tolerance=params["tolerance"],
            backend=params["backend"],
            address=address,
            jobs=params["jobs"],
            progress=not quiet and sys.stderr.isatty(),
            note=(lambda _: None) if quiet else echo_err,
        )
    except SweepInterrupted as exc:
        echo_err(
            f"prefillkit: interrupted: {exc.stored} probes are stored in {params['out']}; "
            "rerun the same command to resume"
        )
        ctx.exit(EXIT_INTERRUPTED)
    page = render_store(params["out"], make_console())
    if not quiet:
        echo_err(f"wrote {params['out']}/capacity.json and {page}")
    if any(c["status"] == "failed" for c in result["configs"]):
        ctx.exit(1)


# --------------------------------------------------------------------------- entry point
