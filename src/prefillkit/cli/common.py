"""What the commands share: exit codes, the context settings, one-line errors and notes
on stderr, the option groups of ``sweep`` / ``capacity`` and the checks of options that
several commands take (``--out``, ``--percentiles``, ``--slo-ttft``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import click

from prefillkit.app.replay import InputError
from prefillkit.app.settings import ConfigError, suggest_flag
from prefillkit.records.run_options import RunOptions
from prefillkit.records.slo import parse_duration_s, parse_percentiles

__all__ = [
    "BACKEND_OPTIONS",
    "CONTEXT_SETTINGS",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "Decorator",
    "apply_options",
    "backend_options",
    "claim_out_folder",
    "echo_err",
    "echo_skipped",
    "os_reason",
    "positive_float",
    "run_options",
    "span_error",
    "unknown_flag_message",
]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

CONTEXT_SETTINGS: dict[str, Any] = {
    "help_option_names": ["-h", "--help"],
    "max_content_width": 100,
}

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def echo_err(message: str) -> None:
    """One line on stderr."""
    click.echo(message, err=True)


def apply_options(fn: Callable[..., Any], options: Sequence[Decorator]) -> Callable[..., Any]:
    """``fn`` with ``options`` applied so that they list in the given order."""
    for option in reversed(options):
        fn = option(fn)
    return fn


def positive_float(min_open: bool = True) -> click.FloatRange:
    return click.FloatRange(min=0.0, min_open=min_open)


def os_reason(exc: OSError, named: str | None = None) -> str:
    """``exc``'s reason, after its file name unless that is ``named`` (already said)."""
    reason = exc.strerror or str(exc)
    if exc.strerror and exc.filename and str(exc.filename) != named:
        reason = f"{exc.filename}: {reason}"
    return " ".join(reason.split())


def unknown_flag_message(exc: ConfigError, command: click.Command) -> str:
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


def claim_out_folder(ctx: click.Context, out: str) -> None:
    """Create and lock ``--out`` for this command (app/out_folder.py); released when the
    command's context closes, whatever ends it."""
    from prefillkit.app.out_folder import OutFolder

    ctx.call_on_close(OutFolder.claim(out).release)


def echo_skipped(trace: str | None, skipped: list[tuple[int, str]]) -> None:
    line, reason = skipped[0]
    echo_err(f"skipped {len(skipped):,} bad rows of {trace} (first: line {line}: {reason})")


def run_options(params: dict[str, Any]) -> RunOptions:
    """``--percentiles``, ``--slo-ttft`` and ``--window-s`` (where the command has it) as
    the run's :class:`RunOptions` (a default for each one not given); one line for a bad
    value."""
    percentiles, slo = _latency_options(params)
    kw: dict[str, Any] = {"slo_ttft_s": slo}
    if percentiles is not None:
        kw["percentiles"] = percentiles
    if params.get("window_s") is not None:
        kw["window_s"] = params["window_s"]
    try:
        return RunOptions(**kw)
    except ValueError as exc:
        raise InputError(str(exc)) from None


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


def span_error(message: str, trace: str | None) -> str:
    """``message``, led by the trace's path when it is the arrival-span error of
    --window-s (the trace's arrivals, rescaled by --rate / --time-scale, are at fault as
    much as the window)."""
    if trace is None or not message.startswith("--window-s: ") or " arriv" not in message:
        return message
    return f"{trace}: {message}"


#: ``--backend``, ``--address``, ``--jobs`` and ``--quiet`` of ``sweep`` and ``capacity``.
BACKEND_OPTIONS: tuple[Decorator, ...] = (
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
    """The options of :data:`BACKEND_OPTIONS`, in order."""
    return apply_options(fn, BACKEND_OPTIONS)
