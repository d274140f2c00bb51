"""Whether a replay may hand work to helper processes (``PREFILLKIT_HELPERS``).

A streaming replay on two or more cores runs two helpers beside its event loop: a child
that formats and writes the CSV rows (:mod:`prefillkit.sim.row_writer`) and one that
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

__all__ = ["ENV", "HelperError", "wants_helpers"]

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
