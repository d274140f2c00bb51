"""The cyclic garbage collector around a simulated event loop (``Engine.run``, ``Fleet.run``).

NOTE: Python's cyclic garbage collector is off for a simulated loop: the loop makes no
reference cycles (removed cache nodes drop their links;
test_a_run_leaves_no_reference_cycles checks), so reference counting frees all it drops
(the live cache tree links parents and children: the collector frees it once the engine
is dropped), and the collector's passes over the live cache and requests cost 14 % of the
agentic 100 K replay (benchmarks/RESULTS.md). A measured run (a runner: torch) keeps it
on, with the trace's objects frozen out of its generations (as SGLang's scheduler freezes
its startup objects). Both are undone after the loop.

NOTE: with the collector off, its allocation count grew with every object the loop made;
re-enabled as it is, the next allocation would start a collection that traverses every
survivor (the live cache), then again in the next two generations: 0.4 s after an
agentic 100 K loop. freeze() + unfreeze() moves the survivors straight to the oldest
generation and zeroes the count, which is where those collections would have left them,
without traversing them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused(measured: bool) -> Iterator[None]:
    """The collector off for the block (``measured``: on, with what exists frozen), then
    restored as the module docstring says."""
    was_enabled = gc.isenabled()
    if measured:
        gc.freeze()
    else:
        gc.disable()
    try:
        yield
    finally:
        if measured:
            gc.unfreeze()
        elif was_enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
