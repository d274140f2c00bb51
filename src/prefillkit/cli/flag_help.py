"""The config flags in a command's help: one section per config group, written from the
:class:`~prefillkit.app.settings.Config` fields' metadata, then the SGLang spelling notes;
and :class:`ConfigFlagsCommand`, the click command that takes every config flag."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import click

from prefillkit.app.settings import GROUPS, Config, field_flag, knob_table

__all__ = [
    "GROUP_TITLES",
    "SGLANG_NOTES",
    "ConfigFlagsCommand",
    "config_flag_rows",
    "config_flags_epilog",
]

GROUP_TITLES: dict[str, str] = {
    "memory": "KV memory",
    "scheduler": "Scheduler",
    "priority": "Priority scheduling",
    "hicache": "Hierarchical cache (HiCache)",
    "cp": "Tensor / context parallelism",
    "affinity": "Cache-affinity admission",
    "deployment": "Deployment and simulator",
}

_TYPE_METAVARS: dict[type, str] = {int: "INTEGER", float: "FLOAT", str: "TEXT"}


def _field_metavar(f: dataclasses.Field[Any], hints: dict[str, Any]) -> str:
    hint = hints[f.name]
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    if base is bool:
        return "[true|false]"
    return _TYPE_METAVARS.get(base, "VALUE")


def config_flag_rows(
    defaults: dict[str, object] | None = None,
) -> dict[str, list[tuple[str, str]]]:
    """``group -> [(flag + metavar, help [default])]`` for every Config field.

    ``defaults`` are command defaults that replace the Config default in the text.
    """
    hints = typing.get_type_hints(Config)
    table = {flag: (default, meaning) for flag, default, meaning in knob_table()}
    rows: dict[str, list[tuple[str, str]]] = {g: [] for g in GROUPS}
    for f in dataclasses.fields(Config):
        flag = field_flag(f.name)
        default, meaning = table[flag]
        if defaults and f.name in defaults:
            value = defaults[f.name]
            shown = "true" if value is True else "false" if value is False else str(value)
            default_text = f"[default: {shown}; Config default: {default}]"
        else:
            default_text = f"[default: {default}]"
        rows[str(f.metadata["group"])].append(
            (f"{flag} {_field_metavar(f, hints)}", f"{meaning} {default_text}")
        )
    return rows


SGLANG_NOTES: list[tuple[str, str]] = [
    ("--flag VALUE, --flag=VALUE", "Every config flag; 'none' sets an optional value to unset."),
    ("--flag, --no-flag", "Booleans; also --flag=false or --flag true|false."),
    ("--tp, --tensor-parallel-size", "Aliases of --tp-size."),
    ("--attn-cp-size, --attention-context-parallel-size", "Aliases of --cp-size."),
    ("--enable-hicache", "Alias of --enable-hierarchical-cache."),
    ("--enable-ep-moe", "SGLang before 0.5: --ep-size equal to the line's --tp-size."),
    ("--disaggregation-mode prefill", "Same as --mode pd-prefill ('null' leaves --mode alone)."),
    ("--disable-priority-preemption", "Same as --enable-priority-preemption=false."),
    (
        "--host, --port, --trust-remote-code, ...",
        "Every SGLang 0.5.23 launch flag that does not affect admission is accepted and "
        "ignored (listed on stderr), so a pasted launch command works, with its "
        "'python3 -m sglang.launch_server' or 'sglang serve' prefix.",
    ),
    (
        "--enable-dp-attention, --dp N, ...",
        "Flags that change admission but are not modelled (DP attention, --disable-radix-"
        "cache, --enable-mixed-chunk, --hicache-storage-backend, --pp-size, "
        "--max-queued-requests, ...; docs/launch_lines.md lists them) are refused with one "
        "line saying why.",
    ),
]


def config_flags_epilog(
    formatter: click.HelpFormatter, defaults: dict[str, object] | None = None
) -> None:
    """Write one help section per config group, then the SGLang compatibility notes."""
    for group, rows in config_flag_rows(defaults).items():
        if rows:
            with formatter.section(f"{GROUP_TITLES.get(group, group)} (config flags)"):
                formatter.write_dl(rows)
    with formatter.section("SGLang spelling"):
        formatter.write_dl(SGLANG_NOTES)


class ConfigFlagsCommand(click.Command):
    """A command that takes every Config field as a flag (parsed by ``parse_flags``).

    Unknown options are left in ``ctx.args`` for :func:`prefillkit.app.launch.build_config`;
    the help lists every config flag, grouped, after the command's own options.
    ``config_defaults`` are shown as the defaults of the fields they set.
    """

    def __init__(
        self,
        name: str | None,
        *,
        config_defaults: dict[str, object] | None = None,
        context_settings: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        settings = dict(context_settings or {})
        settings.setdefault("ignore_unknown_options", True)
        settings.setdefault("allow_extra_args", True)
        super().__init__(name, context_settings=settings, **kwargs)
        self.config_defaults = config_defaults

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        config_flags_epilog(formatter, self.config_defaults)
        super().format_epilog(ctx, formatter)
