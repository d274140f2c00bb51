"""The workload options: ``--trace`` ... ``--skip-bad-rows`` (``replay``, ``compare``),
the generator's (``--block-size``, ``--generator``, ``--agentic-*``, ``--gsp-*``,
``--llmd-*``; also ``generate``) and ``--format`` (also ``trace-stats``). Read them back with
:mod:`prefillkit.cli.workload_spec`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import click

from prefillkit.app.replay import GENERATORS
from prefillkit.cli.common import Decorator, apply_options, positive_float
from prefillkit.workloads.agentic import multi_turn_agentic
from prefillkit.workloads.bundled import BUNDLED_TRACES
from prefillkit.workloads.generators import SEED_AGENTIC, generated_shared_prefix
from prefillkit.workloads.llmd import iter_llmd_prefix
from prefillkit.workloads.options import AGENTIC_PARAMS, GSP_PARAMS, LLMD_PARAMS
from prefillkit.workloads.param_values import GenParam, parse_text
from prefillkit.workloads.trace_reader import FORMATS

__all__ = [
    "FORMAT_CHOICES",
    "FORMAT_OPTION",
    "GENERATOR_OPTIONS",
    "WORKLOAD_OPTIONS",
    "generator_options",
    "once",
    "workload_options",
]

FORMAT_CHOICES: tuple[str, ...] = ("auto", *FORMATS)


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
    if p in LLMD_PARAMS:
        return f"{p.help} [default: {_gen_default(iter_llmd_prefix, p.name)}]"
    preset = f"; seed: {_show_default(SEED_AGENTIC[p.name])}" if p.name in SEED_AGENTIC else ""
    return f"{p.help} [default: {_gen_default(multi_turn_agentic, p.name)}{preset}]"


class _GenParamType(click.ParamType):
    """A generator parameter's value on the command line (see ``param_values.parse_text``)."""

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


def once(ctx: click.Context, param: click.Parameter, values: tuple[Any, ...]) -> Any:
    """Callback of a ``multiple`` option that may be given at most once: its one value."""
    if len(values) > 1:
        raise click.BadParameter("given more than once", ctx=ctx, param=param)
    return values[0] if values else None


_METAVARS: dict[str, str] = {
    "int": "INTEGER",
    "float": "FLOAT",
    "int_range": "LO,HI",
    "float_range": "LO,HI",
    "float_list": "N[,N...]",
}


def _param_option(p: GenParam) -> Decorator:
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
        callback=once,
        metavar=metavar,
        help=_param_help(p),
    )


#: ``--block-size``, ``--generator`` and every generator parameter (replay, compare and
#: generate).
GENERATOR_OPTIONS: tuple[Decorator, ...] = (
    click.option(
        "--block-size",
        type=click.IntRange(min=1),
        help="Tokens per hash block: overrides the Mooncake (512) / Bailian (16 or blksz_N) "
        "default, or the agentic / llmd generator's block size.",
    ),
    click.option(
        "--generator",
        type=click.Choice(GENERATORS),
        callback=once,
        multiple=True,
        help="Built-in workload when no --trace is given: agentic (multi-turn agent sessions), "
        "seed (agentic with the seed system's traffic mix; --agentic-* options override its "
        "values), gsp (SGLang generated-shared-prefix) or llmd (llm-d's shared-prefix fleet "
        "experiment, stepped QPS). [default: the --config file's [workload] generator, else "
        "agentic, or gsp / llmd when only --gsp-* / --llmd-* options are given]",
    ),
    *(_param_option(p) for p in AGENTIC_PARAMS if p.cli),
    *(_param_option(p) for p in GSP_PARAMS if p.cli),
    *(_param_option(p) for p in LLMD_PARAMS if p.cli),
)

#: ``--format`` of every command that reads a trace file.
FORMAT_OPTION: Decorator = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMAT_CHOICES),
    default="auto",
    show_default=True,
    help="Trace format.",
)

#: The workload options of ``replay`` and ``compare``, in order.
WORKLOAD_OPTIONS: tuple[Decorator, ...] = (
    click.option(
        "--trace",
        metavar="PATH",
        help="Trace file to replay, or a bundled trace by name: "
        + ", ".join(BUNDLED_TRACES)
        + " (600 requests of the Mooncake conversation trace) [default: a generator].",
    ),
    FORMAT_OPTION,
    *GENERATOR_OPTIONS,
    click.option(
        "--time-scale",
        type=positive_float(),
        default=1.0,
        show_default=True,
        help="Multiply arrival times (0.5 = twice as fast).",
    ),
    click.option(
        "--rate", type=positive_float(), help="Rescale arrivals to this mean request rate (req/s)."
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
        "--duration", type=positive_float(), help="Window length in seconds (default: to the end)."
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
    read them back with :func:`prefillkit.cli.workload_spec.workload_spec`."""
    return apply_options(fn, WORKLOAD_OPTIONS)


def generator_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--block-size``, ``--generator`` and the generator parameter options, in order."""
    return apply_options(fn, GENERATOR_OPTIONS)
