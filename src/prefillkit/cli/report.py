"""``prefillkit report``: the HTML page of a replay or compare ``--out`` folder."""

from __future__ import annotations

import click

from prefillkit.cli.common import CONTEXT_SETTINGS

__all__ = ["report_cmd"]


@click.command("report", context_settings=CONTEXT_SETTINGS)
@click.argument("run_dir", metavar="DIR")
@click.option(
    "-o",
    "--output",
    metavar="PATH",
    help="Where to write the page [default: DIR/report.html].",
)
def report_cmd(run_dir: str, output: str | None) -> None:
    """Write one self-contained HTML report of a replay or compare --out folder.

    DIR is either a `compare --out` folder (compare.json plus a folder per variant: the
    page has the comparison and paired statistics) or a `replay --out` folder
    (summary.json, requests.csv, batches.csv). The page has the configuration, the
    summary tables and the plots, with every image embedded: it opens from disk in any
    browser, with no server and no network. Prints the page's path.
    """
    from prefillkit.app.compare import write_dir_report

    click.echo(str(write_dir_report(run_dir, output)))
