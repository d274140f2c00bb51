"""The ``prefillkit`` command line: replay, compare, sweep, capacity, report, generate, trace-stats,
knobs.

Every :class:`~prefillkit.app.settings.Config` field is a flag of ``replay``, spelled as
SGLang spells it (``--chunked-prefill-size``); the flags left over after click's own options
are parsed by :func:`prefillkit.app.settings.parse_flags`, so spelling, aliases and validation are
exactly the config's. ``replay --help`` lists them all, grouped, from the config's
field metadata.

Exit codes: 0 success, 2 bad usage / config / input (one line
``prefillkit: error: <message>`` on stderr, never a traceback), 130 interrupted.
Set ``PREFILLKIT_DEBUG=1`` to get tracebacks instead.

This module holds the click commands and their console output only: settings, replay
and compare live in :mod:`prefillkit.app` (``settings``, ``replay``, ``compare``); the
helpers here (:func:`config_flags_epilog`, :func:`echo_err`, :class:`ConfigFlagsCommand`,
:func:`print_summary_table`) are meant for them too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import json
import math
import os
import re
import signal
import sys
import tempfile
import threading
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import click

# NOTE: before numpy loads (the commands import it). The simulator's numpy work is
# element-wise and single-threaded; OpenBLAS's idle worker threads still spun, 8 % of the
# Mooncake replay's CPU time (benchmarks/RESULTS.md). A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

from prefillkit import __version__, build
from prefillkit.app.launch import (
    PRESETS,
    base_text,
    build_config,
    header_lines,
    knob_defaults,
    setting_sources,
    weights_warning,
)
from prefillkit.app.lru_hit_rate import lru_hit_rate
from prefillkit.app.measured import (
    EXECUTORS,
    RunFlags,
    load_cost_preset,
    run_keys,
    write_forwards,
)
from prefillkit.app.replay import (
    GENERATORS,
    InputError,
    WorkloadSpec,
    generate_records,
    load_requests,
    make_replay_options,
    open_workload,
    run_replay,
    with_stated_decode_rate,
    write_trace_jsonl,
)
from prefillkit.app.settings import (
    GROUPS,
    Config,
    ConfigError,
    ConfigFile,
    describe,
    field_flag,
    knob_table,
    suggest_flag,
)
from prefillkit.helpers import HelperError
from prefillkit.records.output import (
    StreamingRunWriter,
    json_ready,
    summary_document,
    write_run,
)
from prefillkit.records.slo import parse_duration_s, parse_percentiles, pct_key, pct_label
from prefillkit.records.spill import SpillError
from prefillkit.records.steady import DEFAULT_WINDOW_S, check_window_s
from prefillkit.records.trace_events import StreamingTraceWriter, write_trace_events
from prefillkit.report.deployment import deployment_panel
from prefillkit.report.labels import metric_label
from prefillkit.sim.engine import Engine, SimConfigError
from prefillkit.text import one_line
from prefillkit.workloads.bundled import BUNDLED_TRACES, resolve_trace
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.generators import (
    SEED_AGENTIC,
    generated_shared_prefix,
    merge_agentic_args,
    multi_turn_agentic,
)
from prefillkit.workloads.options import (
    AGENTIC_PARAMS,
    GSP_PARAMS,
    GenParam,
    WorkloadTableError,
    parse_text,
    workload_table,
)
from prefillkit.workloads.record import to_request
from prefillkit.workloads.stats import TOKEN_BLOCK_SIZE, trace_stats
from prefillkit.workloads.trace_reader import FORMATS, ReplayOptions, detect_format, load_records

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "ConfigFlagsCommand",
    "cli",
    "config_flags_epilog",
    "echo_err",
    "main",
    "print_summary_table",
    "run",
]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

CONTEXT_SETTINGS: dict[str, Any] = {
    "help_option_names": ["-h", "--help"],
    "max_content_width": 100,
}

FORMAT_CHOICES: tuple[str, ...] = ("auto", *FORMATS)

GROUP_TITLES: dict[str, str] = {
    "memory": "KV memory",
    "scheduler": "Scheduler",
    "priority": "Priority scheduling",
    "hicache": "Hierarchical cache (HiCache)",
    "cp": "Tensor / context parallelism",
    "affinity": "Cache-affinity admission",
    "deployment": "Deployment and simulator",
}


def make_console() -> Console:
    """A stdout console; 120 columns wide when stdout is not a terminal (unless COLUMNS)."""
    from rich.console import Console

    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=120)


def echo_err(message: str) -> None:
    """One line on stderr."""
    click.echo(message, err=True)


# --------------------------------------------------------------------------- help text

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


def _show_default(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return "none" if value is None else str(value)


def _gen_default(fn: Callable[..., Any], name: str) -> str:
    return _show_default(inspect.signature(fn).parameters[name].default)


def _param_help(p: GenParam) -> str:
    """``p``'s help with its default (and, for agentic ones, the seed preset's value)."""
    if p in GSP_PARAMS:
        return f"{p.help} [default: {_gen_default(generated_shared_prefix, p.name)}]"
    preset = f"; seed: {_show_default(SEED_AGENTIC[p.name])}" if p.name in SEED_AGENTIC else ""
    return f"{p.help} [default: {_gen_default(multi_turn_agentic, p.name)}{preset}]"


# --------------------------------------------------------------------------- formatting


def _fmt_count(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def _fmt_seconds(value: Any) -> str:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    if abs(value) < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:,.3f} s"


def _fmt_pct(value: Any) -> str:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value * 100:.2f} %"


def _fmt_float(value: Any, digits: int = 2) -> str:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:,.{digits}f}"


def _fmt_tokens(value: Any) -> str:
    return "-" if value is None else f"{int(value):,} tok"


def _quantiles_shown(metrics: dict[str, Any]) -> list[float]:
    """The percentiles the run asked for (``--percentiles``), else 50 / 90 / 99."""
    chosen = metrics.get("percentiles")
    if isinstance(chosen, list) and chosen:
        return [float(q) for q in chosen]
    return [50.0, 90.0, 99.0]


def _latency_rows(metrics: dict[str, Any], metric: str, name: str) -> list[tuple[str, str]]:
    rows = []
    for q in _quantiles_shown(metrics):
        key = pct_key(metric, q)
        if key in metrics:
            rows.append((f"{name} {pct_label(q)}", _fmt_seconds(metrics[key])))
    for stat in ("max", "mean", "std"):
        key = f"{metric}_{stat}_s"
        if key in metrics:
            rows.append((f"{name} {stat}", _fmt_seconds(metrics[key])))
    return rows


def _summary_sections(metrics: dict[str, Any]) -> list[list[tuple[str, str]]]:
    """The console summary's rows, in sections; every label from report/labels.py or
    written here (never a raw key)."""

    def rows(*specs: tuple[str, Callable[[Any], str]]) -> list[tuple[str, str]]:
        return [(metric_label(k), fmt(metrics[k])) for k, fmt in specs if k in metrics]

    sections = [
        rows(
            ("requests", _fmt_count),
            ("arrived", _fmt_count),  # a stopped run's: those not arrived are not drawn
            ("completed", _fmt_count),
            ("rejected", _fmt_count),
            ("unfinished", _fmt_count),
        ),
        _latency_rows(metrics, "ttft", "TTFT") + _latency_rows(metrics, "queueing", "queueing"),
    ]
    if "slo_ttft_s" in metrics:
        sections.append(
            [
                ("SLO: TTFT <=", _fmt_seconds(metrics["slo_ttft_s"])),
                (metric_label("slo_attainment"), _fmt_pct(metrics.get("slo_attainment"))),
                ("goodput (req/s)", _fmt_float(metrics.get("goodput_req_s"), 3)),
            ]
        )
    sections.append(
        rows(
            ("device_hit_rate", _fmt_pct),
            ("host_hit_rate", _fmt_pct),
            ("cache_hit_rate", _fmt_pct),
            ("prompt_tokens", _fmt_tokens),
            ("batch_device_hit_tokens", _fmt_tokens),
            ("batch_host_hit_tokens", _fmt_tokens),
            ("batch_carried_prefix_tokens", _fmt_tokens),
        )
    )
    sections.append(
        [
            ("input throughput (tok/s)", _fmt_float(metrics.get("input_throughput_tok_s"), 0)),
            *rows(
                ("executor_utilization", _fmt_pct),
                ("num_batches", _fmt_count),
                ("mean_batch_size", _fmt_float),
                ("mean_chunks_per_request", _fmt_float),
            ),
        ]
    )
    sections.append(
        rows(
            ("admission_passes", _fmt_count),
            ("empty_passes", _fmt_count),
            ("preemptions", _fmt_count),
            ("retractions", _fmt_count),
            ("evicted_pages", _fmt_count),
            ("stuck", _fmt_count),
            ("sim_duration_s", _fmt_seconds),
        )
    )
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
        _fmt_seconds(metrics.get(f"{prefix}{q}_s")) for q in ("p50", "p90", "p99", "max")
    )


def _steady_rows(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """Console rows of the steady-state metrics (prefillkit.records.steady); none if absent."""
    from prefillkit.report.verdicts import overload_text

    if "window_s" not in metrics:
        return []
    start, end = metrics.get("steady_start_s"), metrics.get("steady_end_s")
    interval = (
        "empty (run too short)"
        if start is None or end is None
        else f"{start:,.1f}-{end:,.1f} s, {_fmt_count(metrics.get('steady_requests'))} req"
    )
    rows = [("steady interval", interval)]
    rows += [
        (f"steady TTFT {q}", _fmt_seconds(metrics.get(f"steady_ttft_{q}_s")))
        for q in ("p50", "p90", "p99", "max")
    ]
    for cls in ("warm", "cold"):
        n = _fmt_count(metrics.get(f"{cls}_requests"))
        rows.append((f"{cls} TTFT p50/p90/p99/max ({n})", _ttft_quad(metrics, f"{cls}_ttft_")))
    # yes with its reason (compute-bound, memory-bound, drain), windows and drain
    rows.append((f"overloaded ({metrics['window_s']:g} s windows)", overload_text(metrics)))
    return rows


def print_summary_table(doc: dict[str, Any], *, wall_time_s: float | None = None) -> None:
    """Print a run's summary document (``summary.json`` shape) as a rich table on stdout."""
    from rich.table import Table

    cfg = doc.get("config", {})
    wl = doc.get("workload", {})
    metrics = doc.get("metrics", {})
    title = f"prefillkit replay: {doc.get('name', '')}"
    if doc.get("partial"):
        title += " (partial)"
    deployment = (
        f"{cfg.get('model')} on {cfg.get('tp_size')}x{cfg.get('gpu')}, CP {cfg.get('cp_size')}"
        f"{' shared-KV' if cfg.get('enable_cp_shared_kv') else ''}"
        f"{', HiCache' if cfg.get('enable_hierarchical_cache') else ''}, {cfg.get('mode')}, "
        f"{cfg.get('schedule_policy')}"
    )
    table = Table(title=title, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right", no_wrap=True)
    for i, section in enumerate(_summary_sections(metrics)):
        if i:
            table.add_section()
        for label, text in section:
            table.add_row(label, text)
    steady = _steady_rows(metrics)
    if steady:
        table.add_section()
        for label, text in steady:
            table.add_row(label, text)
    if wall_time_s is not None:
        table.add_section()
        table.add_row("wall time", _fmt_seconds(wall_time_s))
    console = make_console()
    console.print(f"workload: {wl.get('source', '-')}", markup=False, highlight=False)
    console.print(f"deployment: {deployment}", markup=False, highlight=False)
    console.print(_deployment_table(doc))
    console.print(table)
    from prefillkit.report.verdicts import run_split_note

    if note := run_split_note(metrics, cfg):  # a degenerate warm/cold split, with its rule
        console.print(note, markup=False, highlight=False)


# --------------------------------------------------------------------------- commands

#: ``prefillkit --version``: the version and which build runs (setup.py compiles the core).
_VERSION_MESSAGE = f"%(prog)s %(version)s ({build()})"


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="prefillkit", message=_VERSION_MESSAGE)
def cli() -> None:
    """Cache-aware prefill admission scheduler and trace-replay simulator."""


def _unknown_flag_message(exc: ConfigError, command: click.Command) -> str:
    """Improve parse_flags' 'unknown flag' error with suggestions among the command's
    own options too."""
    text = str(exc)
    m = re.match(r"unknown flag '([^']+)'(?: \(did you mean '([^']+)'\?\))?$", text)
    if m is None:
        return text
    flag = m.group(1)
    own = [o for p in command.params for o in p.opts if o.startswith("--")]
    hint = suggest_flag(flag, own)
    return f"unknown flag '{flag}'{hint}; see 'prefillkit {command.name} --help'"


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


def _opt_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given_params(ctx: click.Context, params: Sequence[GenParam]) -> list[GenParam]:
    return [p for p in params if p.cli and _given(ctx, p.dest)]


def _generator_args(
    ctx: click.Context, params: dict[str, Any], config_file: ConfigFile | None
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """``(generator, keyword arguments, where each came from)`` of a generated workload.

    Layers, lowest first: the ``[workload]`` table of ``--config``, then the flags (the
    ``seed`` preset's values lie below both; see ``app.replay._generator_call``). The
    generator is ``--generator``, else the table's, else ``gsp`` when only ``--gsp-*``
    options are given, else ``agentic``.
    """
    gsp_given = _given_params(ctx, GSP_PARAMS)
    agentic_given = _given_params(ctx, AGENTIC_PARAMS)
    try:
        table = (
            workload_table(config_file.document, config_file.path)
            if config_file is not None
            else None
        )
    except WorkloadTableError as exc:
        raise InputError(str(exc)) from None
    generator: str | None = params["generator"] or (table.generator if table else None)
    if generator is None:
        generator = "gsp" if gsp_given and not agentic_given else "agentic"
    given, wrong = (gsp_given, agentic_given) if generator == "gsp" else (agentic_given, gsp_given)
    if wrong:
        raise InputError(f"{wrong[0].flag} does not apply to --generator {generator}")
    try:
        file_args = table.args_for(generator) if table is not None else {}
    except WorkloadTableError as exc:
        raise InputError(str(exc)) from None
    flag_args = {p.name: params[p.dest] for p in given}
    labels = {n: table.label(n) for n in file_args} if table is not None else {}
    labels.update((p.name, p.flag) for p in given)
    if generator == "gsp":
        return generator, {**file_args, **flag_args}, labels
    return generator, merge_agentic_args(file_args, flag_args), labels


def _workload_spec(
    ctx: click.Context, params: dict[str, Any], config_file: ConfigFile | None
) -> WorkloadSpec:
    """The workload options as a spec; ``config_file``'s ``[workload]`` table (if any)
    lies below the generator flags."""
    trace = params["trace"]
    generator = "agentic"
    generator_args: dict[str, Any] = {}
    labels: dict[str, str] = {}
    if trace is not None:
        given = _given_params(ctx, GSP_PARAMS) + _given_params(ctx, AGENTIC_PARAMS)
        extra = (["--generator"] if params["generator"] is not None else []) + [
            p.flag for p in given
        ]
        if extra:
            raise InputError(f"{extra[0]} does not apply with --trace (a trace file)")
    else:
        if _given(ctx, "fmt"):
            raise InputError("--format needs --trace")
        generator, generator_args, labels = _generator_args(ctx, params, config_file)
    if params["skip_bad_rows"] and trace is None:
        raise InputError("--skip-bad-rows needs --trace")
    replay = make_replay_options(
        time_scale=params["time_scale"],
        rate=params["rate"],
        max_requests=params["max_requests"],
        start_s=params["start"],
        duration_s=params["duration"],
        spread_buckets=params["spread_buckets"],
        skip_bad_rows=params["skip_bad_rows"],
    )
    return WorkloadSpec(
        trace=trace,
        fmt=params["fmt"],
        block_size=params["block_size"],
        generator=generator,
        generator_args=generator_args,
        replay=replay,
        arg_labels=labels,
    )


class _GenParamType(click.ParamType):
    """A generator parameter's value on the command line (see ``options.parse_text``)."""

    def __init__(self, param: GenParam) -> None:
        self.param = param
        self.name = param.kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse_text(self.param, value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _once(ctx: click.Context, param: click.Parameter, values: tuple[Any, ...]) -> Any:
    """Callback of a ``multiple`` option that may be given at most once: its one value."""
    if len(values) > 1:
        raise click.BadParameter("given more than once", ctx=ctx, param=param)
    return values[0] if values else None


_METAVARS: dict[str, str] = {
    "int": "INTEGER",
    "float": "FLOAT",
    "int_range": "LO,HI",
    "float_range": "LO,HI",
}


def _param_option(p: GenParam) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of generator parameter ``p`` (given at most once)."""
    if p.kind == "bool":
        return click.option(p.flag, p.dest, is_flag=True, default=False, help=p.help)
    kind: click.ParamType = click.Choice(p.choices) if p.kind == "choice" else _GenParamType(p)
    metavar = _METAVARS.get(p.kind)
    if metavar is not None and p.nullable:
        metavar += "|none"
    if p.name == "system_prompt_len" and p in AGENTIC_PARAMS:
        metavar = "N|LO,HI"
    return click.option(
        p.flag,
        p.dest,
        type=kind,
        multiple=True,
        callback=_once,
        metavar=metavar,
        help=_param_help(p),
    )


def _positive_float(min_open: bool = True) -> click.FloatRange:
    return click.FloatRange(min=0.0, min_open=min_open)


_Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

#: ``--block-size``, ``--generator`` and every generator parameter (replay, compare and
#: generate).
_GENERATOR_OPTIONS: tuple[_Decorator, ...] = (
    click.option(
        "--block-size",
        type=click.IntRange(min=1),
        help="Tokens per hash block: overrides the Mooncake (512) / Bailian (16 or blksz_N) "
        "default, or the agentic generator's block size.",
    ),
    click.option(
        "--generator",
        type=click.Choice(GENERATORS),
        callback=_once,
        multiple=True,
        help="Built-in workload when no --trace is given: agentic (multi-turn agent sessions), "
        "seed (agentic with the seed system's traffic mix; --agentic-* options override its "
        "values) or gsp (SGLang generated-shared-prefix). [default: the --config file's "
        "[workload] generator, else agentic, or gsp when a --gsp-* option is given]",
    ),
    *(_param_option(p) for p in AGENTIC_PARAMS if p.cli),
    *(_param_option(p) for p in GSP_PARAMS if p.cli),
)

#: ``--format`` of every command that reads a trace file.
_FORMAT_OPTION: _Decorator = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMAT_CHOICES),
    default="auto",
    show_default=True,
    help="Trace format.",
)

_WORKLOAD_OPTIONS: tuple[_Decorator, ...] = (
    click.option(
        "--trace",
        metavar="PATH",
        help="Trace file to replay, or a bundled trace by name: "
        + ", ".join(BUNDLED_TRACES)
        + " (600 requests of the Mooncake conversation trace) [default: a generator].",
    ),
    _FORMAT_OPTION,
    *_GENERATOR_OPTIONS,
    click.option(
        "--time-scale",
        type=_positive_float(),
        default=1.0,
        show_default=True,
        help="Multiply arrival times (0.5 = twice as fast).",
    ),
    click.option(
        "--rate", type=_positive_float(), help="Rescale arrivals to this mean request rate (req/s)."
    ),
    click.option(
        "--max-requests", type=click.IntRange(min=1), help="Replay at most this many requests."
    ),
    click.option(
        "--start",
        type=click.FloatRange(min=0.0),
        default=0.0,
        show_default=True,
        help="Window start (seconds, original timestamps).",
    ),
    click.option(
        "--duration", type=_positive_float(), help="Window length in seconds (default: to the end)."
    ),
    click.option(
        "--spread-buckets",
        is_flag=True,
        help="Spread requests sharing a quantised timestamp over their bucket.",
    ),
    click.option(
        "--skip-bad-rows",
        is_flag=True,
        help="Skip (and count) malformed trace rows instead of failing.",
    ),
)


def workload_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The workload options of ``replay`` (``--trace`` ... ``--skip-bad-rows``), in order;
    read them back with :func:`_workload_spec`."""
    for option in reversed(_WORKLOAD_OPTIONS):
        fn = option(fn)
    return fn


REPLAY_HELP = """Replay a trace (or a built-in workload) through the scheduler simulator.

With no arguments, replays the built-in agentic multi-turn workload (multi_turn_agentic,
seeded by --seed) on the demo deployment (--preset demo: GLM-5 on 8xH200, TP 8, CP 8
shared-KV, HiCache, pd-prefill), and says so.

As soon as a deployment flag (model, GPUs, TP/CP/EP, HiCache, memory; or a pasted SGLang
launch flag such as --trust-remote-code) is given, whatever the line does not say takes
SGLang 0.5.23's default (TP 1, CP 1, HiCache off, colocated unless
--disaggregation-mode prefill, ...); the model comes from --model-path (a preset's
Hugging Face id, or a local config.json) or --model-config. --preset NAME (demo, seed)
puts a named deployment under the line instead; its values the line contradicts are
dropped (--tp 4 drops the demo's CP 8). The header lists every deployment setting with
where it came from; `prefillkit knobs` lists the defaults of each base.

Every config flag listed below can be given, spelled as SGLang spells it, so an SGLang
launch command can be pasted. Ctrl-C stops the replay, writes the results so far marked
partial and exits with status 130.
"""


def _claim_out_folder(ctx: click.Context, out: str) -> None:
    """Create and lock ``--out`` for this command (app/out_folder.py); released when the
    command's context closes, whatever ends it."""
    from prefillkit.app.out_folder import OutFolder

    ctx.call_on_close(OutFolder.claim(out).release)


@cli.command(
    "replay",
    cls=ConfigFlagsCommand,
    help=REPLAY_HELP,
    context_settings=CONTEXT_SETTINGS,
)
@workload_options
@click.option(
    "--config",
    "config_path",
    metavar="FILE.toml",
    help="TOML settings (top level or [prefillkit]); flags override it.",
)
@click.option(
    "--preset",
    type=click.Choice(tuple(PRESETS)),
    help="A named deployment under the launch flags [default: demo without launch flags, "
    "else SGLang's defaults].",
)
@click.option(
    "--window-s",
    type=click.FloatRange(min=0.0, min_open=True),
    default=DEFAULT_WINDOW_S,
    show_default=True,
    help="Window length (seconds of arrival time) of the per-window TTFT, utilisation and "
    "overload metrics.",
)
@click.option(
    "--percentiles",
    metavar="LIST",
    help="TTFT / queueing percentiles the summary shows, comma separated, as vLLM's "
    "--metric-percentiles (e.g. 50,90,99.9); p50/p90/p95/p99 are always in summary.json. "
    "[default: 50,90,95,99]",
)
@click.option(
    "--slo-ttft",
    metavar="DURATION",
    help="TTFT SLO (2s, 2000ms; a bare number is seconds): adds SLO attainment (share of all "
    "requests with TTFT within it) and goodput (those per second), as vLLM's "
    "--goodput ttft:2000.",
)
@click.option(
    "--trace-events",
    metavar="FILE",
    help="Write the run's timeline (forwards and request lifecycles) to FILE in the "
    "Chrome / Perfetto trace-event JSON format (open in ui.perfetto.dev or chrome://tracing).",
)
@click.option(
    "--out",
    metavar="DIR",
    help="Write summary.json, requests.csv and batches.csv into DIR (created if needed).",
)
@click.option("--name", help="Run name in summary.json [default: the --out folder's name].")
@click.option(
    "--report",
    "write_html",
    is_flag=True,
    help="Also write OUT/report.html, a self-contained HTML report (needs --out).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the summary as JSON instead of a table."
)
@click.option(
    "--executor",
    type=click.Choice(EXECUTORS),
    default="sim",
    show_default=True,
    help="What times each prefill forward: sim (the cost model), torch (run it on the real "
    "executor, a small seeded CPU model, and time it on the wall clock) or torch-cpu (the same, "
    "timed by its CPU time: reproducible on a busy machine). The executor needs the torch "
    "extra, --disaggregation-mode prefill and a small pool (--max-total-tokens); it also "
    "writes OUT/forwards.csv for prefillkit calibrate.",
)
@click.option(
    "--cost-preset",
    metavar="FILE.toml",
    help="Time the simulated forwards with a cost-model preset fitted by prefillkit "
    "calibrate (not with --executor torch).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no notes on stderr.")
@click.pass_context
def replay_cmd(ctx: click.Context, /, **params: Any) -> None:
    try:
        resolved = build_config(params["config_path"], ctx.args, preset=params["preset"])
    except ConfigError as exc:
        raise ConfigError(_unknown_flag_message(exc, ctx.command)) from None
    if resolved.ignored:
        from prefillkit.app.launch_flags import ignored_line

        echo_err(ignored_line(resolved.ignored))
    spec = _workload_spec(ctx, params, resolved.file)
    cfg = with_stated_decode_rate(resolved.config, spec)
    quiet: bool = params["quiet"]

    out: str | None = params["out"]
    if params["write_html"] and out is None:
        raise InputError("--report needs --out DIR (the report is written to DIR/report.html)")
    if out is not None:
        _claim_out_folder(ctx, out)
    name: str = params["name"] or (Path(out).resolve().name if out else "replay")

    run_flags = RunFlags(params["executor"], params["cost_preset"])
    if run_flags.cost_preset is not None and run_flags.executor != "sim":
        raise InputError("--cost-preset times a simulated run: not with --executor torch")
    simulated = run_flags.executor == "sim" and run_flags.cost_preset is None
    warning = weights_warning(cfg) if simulated else None
    if warning is not None:  # the simulated deployment only: an executor or a fitted preset
        # times its own model
        echo_err(warning)

    percentiles, slo_ttft_s = _latency_options(params)
    trace_events: str | None = params["trace_events"]
    # Streaming: requests are read (or generated) as they arrive and dropped once done;
    # the CSVs and the --trace-events file are written as the run goes (see
    # prefillkit.records.collector). A measured executor needs the request list up front, so it
    # keeps the whole run in memory.
    streaming = run_flags.executor == "sim"
    window_s: float = params["window_s"]
    if streaming:
        stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
        requests: Any = stream.requests
        source = stream.info["source"]
        skipped = stream.skipped_rows
        try:
            check_window_s(window_s, ())
        except ValueError as exc:
            raise InputError(f"--window-s: {exc}") from None
    else:
        workload = load_requests(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
        requests = workload.requests
        source = workload.info["source"]
        skipped = workload.skipped_rows
        if skipped:
            _echo_skipped(spec.trace, skipped)
        try:
            check_window_s(window_s, ())
        except ValueError as exc:
            raise InputError(f"--window-s: {exc}") from None
        try:
            check_window_s(window_s, (r.arrival_time for r in workload.requests))
        except ValueError as exc:
            raise InputError(_span_error(f"--window-s: {exc}", spec.trace)) from None

    writer: StreamingRunWriter | None = None
    timeline: StreamingTraceWriter | None = None

    def announce(engine: Engine) -> None:
        nonlocal writer
        engine.window_s = window_s
        if percentiles is not None:
            engine.percentiles = percentiles
        engine.slo_ttft_s = slo_ttft_s
        if engine.collector is not None:
            engine.collector.timeline = timeline
        if out is not None and engine.collector is not None:
            writer = StreamingRunWriter(out, engine.trace.keys)
            engine.collector.sink = writer
        if not quiet:
            for text in header_lines(resolved):
                echo_err(text)
            what = (
                f"requests from {source} as they arrive"
                if streaming
                else f"{len(requests):,} requests from {source}"
            )
            echo_err(f"replaying {what} (Ctrl-C stops and keeps partial results)")
            if params["executor"] != "sim":
                clock = "CPU time" if params["executor"] == "torch-cpu" else "the wall clock"
                echo_err(
                    f"executor: {params['executor']} (each prefill forward runs on the small "
                    f"seeded CPU model and is timed by {clock})"
                )

    forwards = None
    try:
        if streaming and trace_events is not None:
            try:
                timeline = StreamingTraceWriter(trace_events)
            except OSError as exc:
                raise InputError(
                    f"--trace-events {trace_events}: {_os_reason(exc, trace_events)}"
                ) from None
        try:
            result = run_replay(
                cfg.sim_settings(),
                requests,
                progress=not quiet and sys.stderr.isatty(),
                on_start=announce,
                executor=params["executor"],
                cost=load_cost_preset(run_flags.cost_preset),
            )
        except (ConfigError, SimConfigError) as exc:
            # A deployment the simulator cannot build: name the --config file when the
            # setting at fault comes from it (the trace, for its arrivals' span).
            raise type(exc)(_span_error(resolved.blame(str(exc)), spec.trace)) from None
        except SpillError as exc:
            raise InputError(_os_reason(exc)) from None
        except OSError as exc:
            if timeline is not None and timeline.error is exc:
                raise InputError(
                    f"--trace-events {trace_events}: {_os_reason(exc, trace_events)}"
                ) from None
            if out is None or not streaming:
                raise
            raise InputError(f"--out {out}: cannot write results: {_os_reason(exc)}") from None
        total = result.summary["requests"]
        info = stream.finish_info(total) if streaming else workload.info
        doc = summary_document(result, name=name, config=describe(cfg), workload=info)
        doc["base"] = base_text(resolved)
        doc["sources"] = setting_sources(resolved)
        doc.update(run_keys(run_flags))  # measured forwards or a preset (else no key)
        if trace_events is not None:
            try:
                if timeline is not None:
                    steps = result.extra.get("decode_steps") or ()
                    timeline.commit(partial=result.partial, decode_steps=steps)
                else:
                    write_trace_events(result, trace_events)
            except OSError as exc:
                raise InputError(
                    f"--trace-events {trace_events}: {_os_reason(exc, trace_events)}"
                ) from None
            if not quiet:
                echo_err(f"wrote {trace_events} (open in ui.perfetto.dev or chrome://tracing)")
        if out is not None:
            try:
                if writer is not None:
                    writer.commit(doc)
                else:
                    write_run(result, out, doc)
                forwards = write_forwards(result, out)
            except OSError as exc:
                raise InputError(f"--out {out}: cannot write results: {_os_reason(exc)}") from None
    finally:
        if writer is not None:
            writer.discard()
        if timeline is not None:
            timeline.discard()
    if streaming and skipped:
        _echo_skipped(spec.trace, skipped)
    wall = result.summary.get("wall_time_s")
    if out is not None and not quiet:
        more = f", {forwards.name}" if forwards is not None else ""
        echo_err(f"wrote {out}/summary.json, requests.csv, batches.csv{more}")
    if params["as_json"]:
        click.echo(json.dumps({**doc, "timing": json_ready({"wall_time_s": wall})}, indent=2))
    else:
        print_summary_table(doc, wall_time_s=wall)
    if params["write_html"] and out is not None:
        from prefillkit.app.compare import write_dir_report  # NOTE: only with --report

        report = write_dir_report(out)
        if not quiet:
            echo_err(f"wrote {report}")
    if result.partial:
        done = result.summary.get("completed", 0)
        where = f"; partial results written to {out}" if out is not None else ""
        at = result.summary.get("sim_duration_s", 0.0)
        echo_err(
            f"prefillkit: interrupted at simulated {at:,.1f} s: "
            f"{done:,} of the {total:,} requests that had arrived finished (those not yet "
            f"arrived are not counted){where}"
        )
        ctx.exit(EXIT_INTERRUPTED)


def _echo_skipped(trace: str | None, skipped: list[tuple[int, str]]) -> None:
    line, reason = skipped[0]
    echo_err(f"skipped {len(skipped):,} bad rows of {trace} (first: line {line}: {reason})")


def _latency_options(params: dict[str, Any]) -> tuple[tuple[float, ...] | None, float | None]:
    """``--percentiles`` and ``--slo-ttft`` parsed (None when not given)."""
    percentiles: tuple[float, ...] | None = None
    if params.get("percentiles") is not None:
        try:
            percentiles = parse_percentiles(params["percentiles"])
        except ValueError as exc:
            raise InputError(f"--percentiles: {exc}") from None
    slo: float | None = None
    if params.get("slo_ttft") is not None:
        try:
            slo = parse_duration_s(params["slo_ttft"])
        except ValueError as exc:
            raise InputError(f"--slo-ttft: {exc}") from None
    return percentiles, slo


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


@cli.command(
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
    from prefillkit.app.compare import (
        VariantOutcome,
        VariantsInterrupted,
        check_shared_settings,
        collect_variants,
        compare_document,
        default_jobs,
        describe_variant,
        prepare_variants,
        run_variants,
        write_compare,
        write_dir_report,
    )
    from prefillkit.report.paired import comparison_table, headline_table

    config_path: str | None = params["config_path"]
    shared_flags = list(ctx.args)
    try:
        shared_file, ignored = check_shared_settings(config_path, shared_flags)
    except ConfigError as exc:
        raise ConfigError(_unknown_flag_message(exc, ctx.command)) from None
    if ignored:
        from prefillkit.app.launch_flags import ignored_line

        echo_err(ignored_line(ignored))
    spec = _workload_spec(ctx, params, shared_file)
    out: str | None = params["out"]
    if params["write_html"] and out is None:
        raise InputError("--report needs --out DIR (the report is written to DIR/report.html)")
    quiet: bool = params["quiet"]

    variants = collect_variants(params["variants_file"], params["variant_options"])
    own_options = {o for p in ctx.command.params for o in p.opts if o.startswith("--")}
    for v in variants:
        for token in v.flags:
            flag = token.partition("=")[0]
            if flag in own_options:
                raise InputError(
                    f"variant {v.name!r}: {flag} is an option of compare itself, shared by "
                    "every variant (a variant takes config flags only); give it outside "
                    "--variant"
                )
    prepared = [
        dataclasses.replace(pv, config=with_stated_decode_rate(pv.config, spec))
        for pv in prepare_variants(variants, shared_file, shared_flags, preset=params["preset"])
    ]
    for pv in prepared:
        if pv.ignored:
            from prefillkit.app.launch_flags import ignored_line

            echo_err(f"variant {pv.name!r}: {ignored_line(pv.ignored)}")
    jobs: int = params["jobs"] or default_jobs(len(prepared))
    percentiles, slo_ttft_s = _latency_options(params)
    latency: dict[str, Any] = {"slo_ttft_s": slo_ttft_s}
    if percentiles is not None:
        latency["percentiles"] = percentiles
    if not params["jobs"] and any(pv.run.executor != "sim" for pv in prepared):
        jobs = 1  # measured forwards: no variant runs beside a timed one

    if out is not None:
        _claim_out_folder(ctx, out)

    baseline = prepared[0].config
    workload = load_requests(spec, page_size=baseline.resolved_page_size, seed=baseline.seed)
    if workload.skipped_rows:
        line, reason = workload.skipped_rows[0]
        echo_err(
            f"skipped {len(workload.skipped_rows):,} bad rows of {spec.trace} "
            f"(first: line {line}: {reason})"
        )
    num_requests = len(workload.records)
    workload.requests.clear()  # the workers build their own

    def done(outcome: VariantOutcome) -> None:
        if not quiet:
            echo_err(f"variant {outcome.name!r}: done in {_fmt_seconds(outcome.wall_time_s)}")

    with contextlib.ExitStack() as stack:
        root = (
            out
            if out is not None
            else stack.enter_context(tempfile.TemporaryDirectory(prefix="prefillkit-compare-"))
        )
        if not quiet:
            workers = "1 worker process" if jobs == 1 else f"{jobs} worker processes"
            echo_err(
                f"comparing {len(prepared)} variants on {num_requests:,} requests from "
                f"{workload.info['source']} in {workers} (Ctrl-C stops)"
            )
        try:
            run_variants(prepared, workload, root, jobs=jobs, on_done=done, latency=latency)
        except VariantsInterrupted as exc:
            echo_err(
                f"prefillkit: interrupted: stopped the variant runs ({len(exc.finished)} of "
                f"{len(prepared)} had finished)"
            )
            ctx.exit(EXIT_INTERRUPTED)
        doc = compare_document(
            prepared, root, workload.info, shared_config=config_path, shared_flags=shared_flags
        )
    if out is not None:
        try:
            write_compare(doc, out)
        except OSError as exc:
            raise InputError(f"--out {out}: cannot write results: {_os_reason(exc)}") from None
        if not quiet:
            echo_err(f"wrote {out}/compare.json and a run folder per variant")

    if params["as_json"]:
        click.echo(json.dumps(doc, indent=2))
    else:
        console = make_console()
        console.print(f"workload: {workload.info['source']}", markup=False, highlight=False)
        if shared_flags or config_path:
            shared = " ".join(([f"--config {config_path}"] if config_path else []) + shared_flags)
            console.print(f"shared: {shared}", markup=False, highlight=False)
        for i, pv in enumerate(prepared):
            role = " (baseline)" if i == 0 else ""
            console.print(
                f"variant {pv.name}{role}: {describe_variant(pv.variant)}",
                markup=False,
                highlight=False,
            )
        console.print(comparison_table(doc))
        console.print(headline_table(doc))
    if params["write_html"] and out is not None:
        from prefillkit.app.compare import write_dir_report  # NOTE: only with --report

        report = write_dir_report(out)
        if not quiet:
            echo_err(f"wrote {report}")


@cli.command("report", context_settings=CONTEXT_SETTINGS)
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


def _span_error(message: str, trace: str | None) -> str:
    """``message``, led by the trace's path when it is the arrival-span error of
    --window-s (the trace's arrivals, rescaled by --rate / --time-scale, are at fault as
    much as the window)."""
    if trace is None or not message.startswith("--window-s: ") or " arriv" not in message:
        return message
    return f"{trace}: {message}"


GENERATE_HELP = """Write a built-in workload as a prefillkit JSONL trace.

Runs the generator chosen as for replay (--generator, the --agentic-* / --gsp-* options,
the [workload] table of --config) with the seed of --seed, else of the --config file,
else 0, and writes its requests to FILE.jsonl in prefillkit's own format (arrival_s,
output_len and hash_ids / block_size / input_len, or tokens for gsp), atomically. `replay
--trace FILE.jsonl` then replays exactly the requests `replay` generates with the same
options and seed; `trace-stats FILE.jsonl` reports their ideal hit rate.

\b
Example: the seed system's traffic mix at 0.3 sessions/s
  prefillkit generate --generator seed --agentic-session-rate 0.3 -o seed.jsonl
"""


def _generate_seed(config_path: str | None, seed: int | None) -> tuple[int, ConfigFile | None]:
    """``--seed``, else the seed of the ``--config`` file, else the Config default; and
    the config file as read."""
    try:
        resolved = build_config(config_path, [] if seed is None else ["--seed", str(seed)])
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    return resolved.config.seed, resolved.file


def generator_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--block-size``, ``--generator`` and the generator parameter options, in order."""
    for option in reversed(_GENERATOR_OPTIONS):
        fn = option(fn)
    return fn


@cli.command("generate", help=GENERATE_HELP, context_settings=CONTEXT_SETTINGS)
@generator_options
@click.option(
    "--config",
    "config_path",
    metavar="FILE.toml",
    help="Its [workload] table chooses the workload (flags override it) and its seed setting "
    "the seed.",
)
@click.option("--seed", type=int, help="Random seed [default: the config's, 0].")
@click.option(
    "-o", "--output", required=True, metavar="FILE.jsonl", help="Where to write the trace."
)
@click.option("-q", "--quiet", is_flag=True, help="No note on stderr.")
@click.pass_context
def generate_cmd(ctx: click.Context, /, **params: Any) -> None:
    seed, config_file = _generate_seed(params["config_path"], params["seed"])
    generator, args, labels = _generator_args(ctx, params, config_file)
    spec = WorkloadSpec(
        block_size=params["block_size"],
        generator=generator,
        generator_args=args,
        arg_labels=labels,
    )
    records, _ = generate_records(spec, seed)
    output: str = params["output"]
    try:
        write_trace_jsonl(records, output)
    except OSError as exc:
        raise InputError(f"--output {output}: cannot write: {_os_reason(exc, output)}") from None
    if not params["quiet"]:
        # The figure trace-stats reports for the file: same function, same token blocks.
        stats = trace_stats(records, token_block_size=TOKEN_BLOCK_SIZE)
        echo_err(
            f"wrote {len(records):,} requests to {output} (generator {generator}, seed {seed}; "
            f"span {stats.span_s:,.1f} s; ideal hit rate {_fmt_pct(stats.block_hit_rate)} "
            "by blocks, as trace-stats reports it)"
        )


@cli.command("trace-stats", context_settings=CONTEXT_SETTINGS)
@click.argument("path")
@_FORMAT_OPTION
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
    from rich.table import Table

    if block_size is not None and fmt in ("azure", "jsonl"):
        raise InputError(f"--block-size does not apply to the {fmt} format")
    path = resolve_trace(path)  # a bundled name (mooncake-slice) or a path
    real_fmt = detect_format(path) if fmt == "auto" else fmt
    if block_size is not None and real_fmt in ("azure", "jsonl"):
        raise InputError(f"--block-size does not apply to the {real_fmt} format")
    records, skipped = load_records(
        path, real_fmt, ReplayOptions(skip_bad_rows=skip_bad_rows), block_size=block_size
    )
    stats = trace_stats(records, token_block_size=page_size)
    lru = []
    if lru_cache_tokens:
        requests = [to_request(r, page_size) for r in records]
        # Blocks as trace_stats counts them: hash blocks, else page-size blocks.
        blocks = [r.block_size if r.block_size is not None else page_size for r in records]
        try:
            lru = [lru_hit_rate(requests, n, page_size, blocks) for n in lru_cache_tokens]
        except SimConfigError as exc:
            raise InputError(f"--lru-cache-tokens: {exc}") from None
        for req in requests:  # free the key chains early
            req.keys = []
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

    console = make_console()
    console.print(f"trace: {path} ({real_fmt})", markup=False, highlight=False)
    overview = Table(title="trace", header_style="bold")
    overview.add_column("statistic")
    overview.add_column("value", justify="right", no_wrap=True)
    overview.add_row("requests", f"{stats.num_requests:,}")
    if skipped:
        overview.add_row("skipped bad rows", f"{len(skipped):,}")
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
    console.print(overview)

    lengths = Table(title="lengths", header_style="bold")
    lengths.add_column("")
    for col in ("mean", "p50", "p90", "p99", "max"):
        lengths.add_column(col, justify="right", no_wrap=True)
    for label, ls in (
        ("input tokens", stats.input_len),
        ("output tokens", stats.output_len),
        ("blocks / request", stats.blocks_per_request),
    ):
        lengths.add_row(
            label,
            _fmt_float(ls.mean, 1),
            _fmt_float(ls.p50, 0),
            _fmt_float(ls.p90, 0),
            _fmt_float(ls.p99, 0),
            f"{ls.max:,}",
        )
    console.print(lengths)

    ideal = Table(title="ideal hit rate (infinite cache)", header_style="bold")
    ideal.add_column("weighting")
    ideal.add_column("partial last block")
    ideal.add_column("hit rate", justify="right", no_wrap=True)
    ideal.add_row("blocks", "counts (trace README)", _fmt_pct(stats.block_hit_rate))
    ideal.add_row("blocks", "never shared", _fmt_pct(stats.block_hit_rate_no_partial))
    ideal.add_row("tokens", "counts", _fmt_pct(stats.token_hit_rate))
    ideal.add_row("tokens", "never shared", _fmt_pct(stats.token_hit_rate_no_partial))
    console.print(ideal)

    if lru:
        # Weighted as the ideal table, blocks first; a paged cache never shares a partial
        # last block, so a cache larger than the trace gives the "never shared" rows.
        lru_table = Table(
            title=f"LRU prefix cache hit rate, by blocks and by tokens, partial last block "
            f"never shared (page {page_size}, key unit {lru[0].key_tokens} tokens)",
            header_style="bold",
        )
        lru_table.add_column("cache tokens", justify="right", no_wrap=True)
        lru_table.add_column("blocks", justify="right", no_wrap=True)
        lru_table.add_column("tokens", justify="right", no_wrap=True)
        lru_table.add_column("larger than cache", justify="right", no_wrap=True)
        for r in lru:
            lru_table.add_row(
                f"{r.cache_tokens:,}",
                _fmt_pct(r.block_hit_rate),
                _fmt_pct(r.hit_rate),
                f"{r.oversized_requests:,}",
            )
        console.print(lru_table)


@cli.command("calibrate", context_settings=CONTEXT_SETTINGS)
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
        from prefillkit.cost.fit import Deployment, fit, load_batches, write_preset

        measured = [b for path in batches for b in load_batches(path)]
        dep = Deployment(fit_model, fit_gpu, num_gpus, cp_size, ep_size, page_size)
        result = fit(measured, dep, folds=folds)
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
        return
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


@cli.command("knobs", context_settings=CONTEXT_SETTINGS)
@click.option("--markdown", is_flag=True, help="Print a Markdown table (for the README).")
def knobs_cmd(markdown: bool) -> None:
    """List every config knob: flag, the defaults replay uses, and meaning.

    One default column per base: "launch line" (what replay uses for a setting a launch
    line does not give: SGLang 0.5.23's default, or prefillkit's where it deviates) and
    one per --preset (demo: what replay runs with no launch flags).
    """
    from rich.table import Table

    groups = {f.name: str(f.metadata["group"]) for f in dataclasses.fields(Config)}
    flag_group = {field_flag(n): g for n, g in groups.items()}
    bases = knob_defaults()
    names = [f.name for f in dataclasses.fields(Config)]
    rows = [
        (flag, [_knob_text(bases[b][name]) for b in bases], meaning)
        for name, (flag, _, meaning) in zip(names, knob_table(), strict=True)
    ]
    if markdown:
        head = " | ".join(bases)
        lines = [f"| flag | {head} | meaning |", "| --- |" + " --- |" * len(bases) + " --- |"]
        for flag, defaults, meaning in rows:
            cells = (f"`{flag}`", *(f"`{d}`" for d in defaults), meaning.replace("|", "\\|"))
            lines.append("| " + " | ".join(cells) + " |")
        click.echo("\n".join(lines))
        return
    table = Table(title="prefillkit knobs (defaults replay uses, per base)", header_style="bold")
    table.add_column("flag", no_wrap=True)
    for base in bases:
        table.add_column(base, no_wrap=True)
    table.add_column("meaning")
    previous: str | None = None
    for flag, defaults, meaning in rows:
        group = flag_group[flag]
        if previous is not None and group != previous:
            table.add_section()
        previous = group
        table.add_row(flag, *defaults, meaning)
    make_console().print(table)


def _knob_text(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- sweep

_BACKEND_OPTIONS: tuple[_Decorator, ...] = (
    click.option(
        "--backend",
        type=click.Choice(("auto", "ray", "process")),
        default="auto",
        show_default=True,
        help="Where points run: Ray tasks, or local worker processes (auto: Ray when installed).",
    ),
    click.option(
        "--address",
        metavar="ADDR",
        help="Ray cluster to join (ray://HOST:PORT, HOST:PORT or auto) [default: $RAY_ADDRESS, "
        "else a local Ray started here].",
    ),
    click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        help="Points in flight at most [default: the cluster's (or this machine's) CPUs].",
    ),
    click.option("-q", "--quiet", is_flag=True, help="No progress bar and no notes on stderr."),
)


def backend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_BACKEND_OPTIONS):
        fn = option(fn)
    return fn


SWEEP_HELP = """Replay every point of a grid file (knobs x workloads x seeds) and store the results.

Each point is one replay, run as a Ray task (a local Ray by default; --address or
RAY_ADDRESS joins a cluster) or, without Ray, in local worker processes; the results are
the same either way. Every finished point is written to DIR/points/ (Parquet, one file per
point) as it ends: rerunning the same command after a crash or Ctrl-C recomputes nothing
that finished, and a changed grid reuses the points it shares. A failed point is retried
once, then stored with its error (exit status 1). Prints a table, writes DIR/report.html;
--show DIR re-renders both from the store. Grid format: see the README ("Sweeps and
capacity search") or examples/sweep_*.toml.
"""


@cli.command("sweep", help=SWEEP_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("grid", required=False, metavar="GRID.toml")
@click.option("-o", "--out", metavar="DIR", help="The results store (created or resumed).")
@click.option("--show", "show_dir", metavar="DIR", help="Re-render a store's table and page.")
@backend_options
@click.pass_context
def sweep_cmd(ctx: click.Context, /, **params: Any) -> None:
    from prefillkit.app.sweep.grid import load_grid
    from prefillkit.app.sweep.render import render_store
    from prefillkit.app.sweep.sweep import SweepInterrupted, run_sweep

    show_dir: str | None = params["show_dir"]
    quiet: bool = params["quiet"]
    if show_dir is not None:
        if params["grid"] is not None or params["out"] is not None:
            raise InputError("--show DIR re-renders a store: give no GRID.toml or --out")
        page = render_store(show_dir, make_console())
        if not quiet and page is not None:
            echo_err(f"wrote {page}")
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


CAPACITY_HELP = """Find, per configuration of a grid file, the highest request rate meeting an SLO.

Each configuration (a point of the grid; the grid must not vary rate or time_scale) is
replayed at mean request rates between --rate-min and --rate-max, bisected geometrically
until the bracket is within --tolerance: the answer is the highest rate probed that met
the SLO (the TTFT percentile bound and/or the goodput). Configurations search in parallel
(Ray or local processes, as sweep); probes are stored in DIR like sweep points, so a
rerun reuses them. Writes DIR/capacity.json and DIR/report.html.
"""


@cli.command("capacity", help=CAPACITY_HELP, context_settings=CONTEXT_SETTINGS)
@click.argument("grid", metavar="GRID.toml")
@click.option("-o", "--out", metavar="DIR", required=True, help="The store (created or resumed).")
@click.option(
    "--slo-ttft",
    type=_positive_float(),
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
    type=_positive_float(),
    metavar="SECONDS",
    help="The goodput's TTFT bound [default: --slo-ttft].",
)
@click.option("--rate-min", type=_positive_float(), required=True, help="Lowest rate (req/s).")
@click.option("--rate-max", type=_positive_float(), required=True, help="Highest rate (req/s).")
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
    from prefillkit.app.sweep.capacity import Slo, run_capacity
    from prefillkit.app.sweep.grid import load_grid
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


def _os_reason(exc: OSError, named: str | None = None) -> str:
    """``exc``'s reason, after its file name unless that is ``named`` (already said)."""
    reason = exc.strerror or str(exc)
    if exc.strerror and exc.filename and str(exc.filename) != named:
        reason = f"{exc.filename}: {reason}"
    return " ".join(reason.split())


def _error(message: str) -> None:
    echo_err(f"prefillkit: error: {one_line(message)}")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (``timeout``, a job scheduler) acts as Ctrl-C while a command runs: a
    replay stops and writes its partial results (app/replay.py stop_on_sigint), any
    other command stops as on ``KeyboardInterrupt``. Main thread only.

    NOTE: it is passed on as a SIGINT where Python's own handler has that: held back
    where a command blocks SIGINT (compare forks its workers so; an exception raised in
    a handler that runs within a fork is lost). A process forked meanwhile (compare's
    and sweep's workers) inherits the handler: there SIGTERM ends the process, as it did
    before (a worker that swallowed it outlived its parent's terminate(): 5 s each)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pid = os.getpid()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != pid:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.raise_signal(signal.SIGINT)
            return
        raise KeyboardInterrupt  # NOTE: SIGINT ignored (a background job's)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (errors mapped to one line and code 2)."""
    debug = os.environ.get("PREFILLKIT_DEBUG", "") not in ("", "0")
    try:
        with _sigterm_interrupts():
            rv = cli.main(
                args=list(argv) if argv is not None else None,
                prog_name="prefillkit",
                standalone_mode=False,
            )
    except (click.exceptions.Abort, KeyboardInterrupt):
        echo_err(
            "prefillkit: interrupted: nothing more written (every output is a whole file, "
            "the previous one or none; an --out folder a whole set)"
        )
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        _error(exc.format_message())
        return EXIT_USAGE
    except (ConfigError, WorkloadError, SimConfigError, InputError, HelperError) as exc:
        if debug:
            raise
        _error(str(exc))
        return EXIT_USAGE
    except OSError as exc:
        if debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        _error(f"{where}{_os_reason(exc)}")
        return EXIT_USAGE
    except ValueError as exc:
        if debug:
            raise
        _error(str(exc) or type(exc).__name__)
        return EXIT_USAGE
    return rv if isinstance(rv, int) else 0


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (``prefillkit``)."""
    code = run(argv)
    # NOTE: the process ends here. The interpreter's last collection would traverse every
    # object still tracked, the dropped engine's prefix cache among them (its nodes link
    # parent and children, so only the collector frees them), to free memory the process
    # is about to give back anyway: 0.3 s after an agentic 100 K replay. Frozen objects
    # are outside every generation it collects.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    main()
