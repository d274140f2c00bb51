"""Whether a replay may hand work to helper processes (``PREFILLKIT_HELPERS``).

A streaming replay on two or more cores runs two helpers beside its event loop: a child
that formats and writes the CSV rows (:mod:`prefillkit.records.row_writer`) and one that
reads or generates the workload and builds each request's key chain
(:mod:`prefillkit.app.prefetch`). Their results are the same, byte for byte, as the
loop doing that work itself.

``PREFILLKIT_HELPERS=inline`` keeps all the work in the one process,
``=process`` uses the helpers even on one core, ``=auto`` (the default) uses them when
this process may run on two or more cores.

NOTE: standard library only (the row writer's child imports it).
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["ENV", "HelperError", "die_with_parent", "wants_helpers"]

#: The environment variable: auto, inline or process.
ENV = "PREFILLKIT_HELPERS"
_CHOICES = ("auto", "inline", "process")


class HelperError(RuntimeError):
    """A helper process ended before its work did (killed, out of memory): one line."""


def wants_helpers() -> bool:
    """Whether to use helper processes: :data:`ENV` if set, else whether this process
    may run on two or more cores. An unknown value raises ``ValueError``."""
    choice = os.environ.get(ENV, "auto") or "auto"
    if choice not in _CHOICES:
        raise ValueError(f"{ENV}={choice!r}: expected one of {', '.join(_CHOICES)}")
    if choice != "auto":
        return choice == "process"
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores >= 2


#: Linux's prctl option: the signal a process gets when its parent (thread) ends.
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Make this (helper) process get ``sig`` (default SIGKILL) when its parent ends
    (Linux's ``PR_SET_PDEATHSIG``; elsewhere a no-op), and exit at once if the parent
    ``parent_pid`` has already gone (it may die between the fork and this call).

    NOTE: the signal follows the thread that forked; prefillkit starts helpers only from
    a single-threaded process (prefillkit.app.prefetch.can_fork) or from its main
    thread (the row writer). Elsewhere, a helper notices its parent's end through its
    pipes: a write to a pipe nobody reads fails (EPIPE), a read gets the end of input.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: the closed pipe ends still stop the helper
    if os.getppid() != parent_pid:
        os._exit(0)
