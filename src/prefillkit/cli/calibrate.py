"""``prefillkit calibrate``: the cost model against published prefill throughputs, or
fitted to measured forwards."""

from __future__ import annotations

import json
from pathlib import Path

import click

from prefillkit.cli.common import CONTEXT_SETTINGS
from prefillkit.records.output import json_ready
from prefillkit.report.console_base import make_console

__all__ = ["calibrate_cmd"]


def _fit_preset(
    batches: tuple[Path, ...],
    deployment: tuple[str, str, int, int, int, int],
    folds: int,
    output: Path,
    *,
    as_json: bool,
) -> None:
    """Fit the cost model's coefficients to the measured ``batches``; write the preset to
    ``output`` and print the coefficients with their cross-validated error."""
    from prefillkit.cost.fit import Deployment, fit, write_preset
    from prefillkit.cost.fit_inputs import load_batches

    measured = [b for path in batches for b in load_batches(path)]
    result = fit(measured, Deployment(*deployment), folds=folds)
    write_preset(result, output)
    if as_json:
        click.echo(json.dumps(json_ready(result.document()), indent=2))
        return
    for name, value in result.coefficients.items():
        note = "" if result.fitted[name] else "  (not fitted: zero in every batch)"
        click.echo(f"{name:>14} = {value:.6g}{note}")
    click.echo(
        f"{result.n_batches} batches, {result.folds}-fold CV: MAPE "
        f"{result.cv_mape:.2%}, max error {result.cv_max_error:.2%} "
        f"(in-sample MAPE {result.train_mape:.2%}); preset written to {output}"
    )


def _print_validation(*, as_json: bool, markdown: bool) -> None:
    """The validation table and the seed scenario (as JSON, Markdown or rich tables)."""
    from prefillkit.report.calibration import (
        calibration_document,
        calibration_markdown,
        calibration_tables,
    )

    doc = calibration_document()
    if as_json:
        click.echo(json.dumps(json_ready(doc), indent=2))
        return
    if markdown:
        click.echo(calibration_markdown(doc))
        return
    console = make_console()
    for table in calibration_tables(doc):
        console.print(table)
    console.print(f"seed deployment: {doc['seed']['deployment']}", markup=False, highlight=False)
    aic = doc["seed"]["models"].get("aic", {})
    for term, where in (aic.get("terms") or {}).items():
        console.print(f"  aic {term}: {where}", markup=False, highlight=False)
    if "unavailable" in aic:
        console.print(f"  aic: {aic['unavailable']}", markup=False, highlight=False)


@click.command("calibrate", context_settings=CONTEXT_SETTINGS)
@click.option("--json", "as_json", is_flag=True, help="Print the tables' data as JSON.")
@click.option(
    "--markdown", is_flag=True, help="Print the validation table as Markdown (RESULTS.md)."
)
@click.argument("batches", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--model", "fit_model", default="glm-5", show_default=True, help="Fit: model preset.")
@click.option("--gpu", "fit_gpu", default="h200", show_default=True, help="Fit: GPU preset.")
@click.option("--num-gpus", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cp-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--page-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("cost-preset.toml"),
    show_default=True,
    help="Fit: where to write the TOML preset.",
)
def calibrate_cmd(
    as_json: bool,
    markdown: bool,
    batches: tuple[Path, ...],
    fit_model: str,
    fit_gpu: str,
    num_gpus: int,
    cp_size: int,
    ep_size: int,
    page_size: int,
    folds: int,
    output: Path,
) -> None:
    """The cost model against published prefill throughputs, and the seed scenario.

    Prints the validation table (one parameter set per GPU family, never fitted: the
    error against each published figure, including the misses) and the source notes'
    observation on the seed deployment: a warm cache-hit batch, the same batch with one
    cold joiner, and the cold request alone, each with its forward-time breakdown.

    With BATCHES (batch CSVs or SGLang server logs, see prefillkit.cost.fit), fits the
    cost model's coefficients to the measured forwards instead, prints them with the
    k-fold cross-validated error and writes a TOML preset to --output.
    """
    if batches:
        deployment = (fit_model, fit_gpu, num_gpus, cp_size, ep_size, page_size)
        _fit_preset(batches, deployment, folds, output, as_json=as_json)
        return
    _print_validation(as_json=as_json, markdown=markdown)
