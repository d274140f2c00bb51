"""The ``prefillkit`` click group, its commands in order, and the entry points: errors
mapped to one line and an exit code (:func:`run`), SIGTERM taken as Ctrl-C, and the
console script (:func:`main`)."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import NoReturn

import click

from prefillkit import __version__, build
from prefillkit.app.replay import InputError
from prefillkit.app.settings import ConfigError
from prefillkit.cli.calibrate import calibrate_cmd
from prefillkit.cli.capacity import capacity_cmd
from prefillkit.cli.common import (
    CONTEXT_SETTINGS,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    echo_err,
    os_reason,
)
from prefillkit.cli.compare import compare_cmd
from prefillkit.cli.generate import generate_cmd
from prefillkit.cli.knobs import knobs_cmd
from prefillkit.cli.replay import replay_cmd
from prefillkit.cli.report import report_cmd
from prefillkit.cli.sweep import sweep_cmd
from prefillkit.cli.trace_stats import trace_stats_cmd
from prefillkit.helpers import HelperError
from prefillkit.sim.engine import SimConfigError
from prefillkit.text import one_line
from prefillkit.workloads.errors import WorkloadError

__all__ = ["COMMANDS", "cli", "main", "run"]

#: ``prefillkit --version``: the version and which build runs (setup.py compiles the core).
_VERSION_MESSAGE = f"%(prog)s %(version)s ({build()})"


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="prefillkit", message=_VERSION_MESSAGE)
def cli() -> None:
    """Cache-aware prefill admission scheduler and trace-replay simulator."""


#: The commands, in the order they are registered.
COMMANDS: tuple[click.Command, ...] = (
    replay_cmd,
    compare_cmd,
    report_cmd,
    generate_cmd,
    trace_stats_cmd,
    calibrate_cmd,
    knobs_cmd,
    sweep_cmd,
    capacity_cmd,
)
for _command in COMMANDS:
    cli.add_command(_command)


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


#: The errors of the user's (a bad flag, file or value): one line and exit code 2.
_USER_ERRORS = (ConfigError, WorkloadError, SimConfigError, InputError, HelperError)


def _error_text(exc: Exception) -> str:
    """The one line of a user's error, an ``OSError`` or a ``ValueError``."""
    if isinstance(exc, _USER_ERRORS):
        return str(exc)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{os_reason(exc)}"
    return str(exc) or type(exc).__name__


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
    except (*_USER_ERRORS, OSError, ValueError) as exc:
        if debug:
            raise
        _error(_error_text(exc))
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
