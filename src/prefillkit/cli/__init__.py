"""The ``prefillkit`` command line: replay, compare, report, generate, trace-stats,
calibrate, knobs, sweep, capacity.

Every :class:`~prefillkit.app.settings.Config` field is a flag of ``replay``, spelled as
SGLang spells it (``--chunked-prefill-size``); the flags left over after click's own options
are parsed by :func:`prefillkit.app.settings.parse_flags`, so spelling, aliases and validation are
exactly the config's. ``replay --help`` lists them all, grouped, from the config's
field metadata.

Exit codes: 0 success, 2 bad usage / config / input (one line
``prefillkit: error: <message>`` on stderr, never a traceback), 130 interrupted.
Set ``PREFILLKIT_DEBUG=1`` to get tracebacks instead.

This package holds the click commands only, one module per command (``replay``,
``compare``, ``report``, ``generate``, ``trace_stats``, ``calibrate``, ``knobs``,
``sweep``, ``capacity``), with :mod:`~prefillkit.cli.main` (the group, error mapping and
entry points), :mod:`~prefillkit.cli.flag_help` (the config flags in the help),
:mod:`~prefillkit.cli.workload_options` / :mod:`~prefillkit.cli.workload_spec` (the
workload options and reading them back) and :mod:`~prefillkit.cli.common`. Settings,
replay and compare live in :mod:`prefillkit.app`; the console tables in
:mod:`prefillkit.report.console`.
"""

import os

# NOTE: before numpy loads (the commands import it). The simulator's numpy work is
# element-wise and single-threaded; OpenBLAS's idle worker threads still spun, 8 % of the
# Mooncake replay's CPU time (benchmarks/RESULTS.md). A value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from prefillkit.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, echo_err
from prefillkit.cli.flag_help import ConfigFlagsCommand, config_flags_epilog
from prefillkit.cli.main import cli, main, run
from prefillkit.report.console import print_summary_table
from prefillkit.report.console_base import make_console

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "ConfigFlagsCommand",
    "cli",
    "config_flags_epilog",
    "echo_err",
    "main",
    "make_console",
    "print_summary_table",
    "run",
]
