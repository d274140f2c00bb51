"""``prefillkit sweep``: every point of a grid file replayed (Ray or local processes) into
a resumable results store."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from prefillkit.app.replay import InputError
from prefillkit.cli.common import (
    CONTEXT_SETTINGS,
    EXIT_INTERRUPTED,
    backend_options,
    echo_err,
)
from prefillkit.report.console_base import make_console

__all__ = ["SWEEP_HELP", "sweep_cmd"]

SWEEP_HELP = """Replay every point of a grid file (knobs x workloads x seeds) and store the results.

Each point is one replay, run as a Ray task (a local Ray by default; --address or
RAY_ADDRESS joins a cluster) or, without Ray, in local worker processes; the results are
the same either way. Every finished point is written to DIR/points/ (Parquet, one file per
point) as it ends: rerunning the same command after a crash or Ctrl-C recomputes nothing
that finished, and a changed grid reuses the points it shares. A failed point is retried
once, then stored with its error (exit status 1). Prints a table, writes DIR/report.html;
--show DIR re-renders both from the store. Grid format: see docs/sweeps.md or
examples/sweep_*.toml.
"""


def _show(params: dict[str, Any]) -> None:
    """``--show DIR``: re-render a store's table and page."""
    from prefillkit.app.sweep.render import render_store

    if params["grid"] is not None or params["out"] is not None:
        raise InputError("--show DIR re-renders a store: give no GRID.toml or --out")
    page = render_store(params["show_dir"], make_console())
    if not params["quiet"] and page is not None:
        echo_err(f"wrote {page}")


@click.command("sweep", help=SWEEP_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("grid", required=False, metavar="GRID.toml")
@click.option("-o", "--out", metavar="DIR", help="The results store (created or resumed).")
@click.option("--show", "show_dir", metavar="DIR", help="Re-render a store's table and page.")
@backend_options
@click.pass_context
def sweep_cmd(ctx: click.Context, /, **params: Any) -> None:
    from prefillkit.app.sweep.grid import load_grid
    from prefillkit.app.sweep.render import render_store
    from prefillkit.app.sweep.sweep import SweepInterrupted, run_sweep

    quiet: bool = params["quiet"]
    if params["show_dir"] is not None:
        _show(params)
        return
    if params["grid"] is None:
        raise InputError("missing GRID.toml (or --show DIR)")
    if params["out"] is None:
        raise InputError("--out DIR is required (the results store; rerun with it to resume)")
    grid = load_grid(params["grid"])
    address = params["address"] or os.environ.get("RAY_ADDRESS") or None
    try:
        run = run_sweep(
            grid,
            params["out"],
            backend=params["backend"],
            address=address,
            jobs=params["jobs"],
            progress=not quiet and sys.stderr.isatty(),
            note=(lambda _: None) if quiet else echo_err,
        )
    except SweepInterrupted as exc:
        echo_err(
            f"prefillkit: interrupted: {exc.stored} of {exc.total} points are stored in "
            f"{params['out']}; rerun the same command to resume"
        )
        ctx.exit(EXIT_INTERRUPTED)
    page = render_store(params["out"], make_console())
    if not quiet:
        echo_err(
            f"{run.done} computed, {run.cached} cached, {run.failed} failed; "
            f"wrote {params['out']}/results.parquet and {page}"
        )
    if run.failed:
        for pid, error in list(run.errors.items())[:5]:
            echo_err(f"point {pid} failed: {error}")
        ctx.exit(1)
