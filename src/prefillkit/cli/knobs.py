"""``prefillkit knobs``: every config knob with the defaults replay uses, per base."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import click

from prefillkit.app.launch import knob_defaults
from prefillkit.app.settings import Config, knob_table
from prefillkit.cli.common import CONTEXT_SETTINGS
from prefillkit.report.console import knobs_table
from prefillkit.report.console_base import make_console

__all__ = ["knobs_cmd"]


def _knob_text(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _knobs_markdown(bases: Sequence[str], rows: Sequence[tuple[str, list[str], str, str]]) -> str:
    """The knob rows as a Markdown table (docs/knobs.md's)."""
    head = " | ".join(bases)
    lines = [f"| flag | {head} | meaning |", "| --- |" + " --- |" * len(bases) + " --- |"]
    for flag, defaults, meaning, _ in rows:
        cells = (f"`{flag}`", *(f"`{d}`" for d in defaults), meaning.replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@click.command("knobs", context_settings=CONTEXT_SETTINGS)
@click.option("--markdown", is_flag=True, help="Print a Markdown table (docs/knobs.md's).")
def knobs_cmd(markdown: bool) -> None:
    """List every config knob: flag, the defaults replay uses, and meaning.

    One default column per base: "launch line" (what replay uses for a setting a launch
    line does not give: SGLang 0.5.23's default, or prefillkit's where it deviates) and
    one per --preset (demo: what replay runs with no launch flags).
    """
    fields = dataclasses.fields(Config)
    bases = knob_defaults()
    rows = [
        (flag, [_knob_text(bases[b][f.name]) for b in bases], meaning, str(f.metadata["group"]))
        for f, (flag, _, meaning) in zip(fields, knob_table(), strict=True)
    ]
    if markdown:
        click.echo(_knobs_markdown(list(bases), rows))
        return
    make_console().print(knobs_table(list(bases), rows))
