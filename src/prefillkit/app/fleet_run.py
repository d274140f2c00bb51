"""One fleet replay (``--instances N``/``--fleet FILE``): :func:`run_fleet`, the fleet's
counterpart of :func:`prefillkit.app.replay.run_replay` (which calls it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from prefillkit.app.scheduler_choice import scheduler_factory
from prefillkit.cost.roofline import CostModel
from prefillkit.records.collector import RowSink
from prefillkit.records.result import SimResult
from prefillkit.records.run_options import RunOptions
from prefillkit.request import Request
from prefillkit.sim.fleet import Fleet
from prefillkit.sim.fleet_settings import FleetSettings

__all__ = ["run_fleet"]


def run_fleet(
    fleet: FleetSettings,
    requests: list[Request] | Iterator[Request],
    *,
    progress_bar: Any | None,
    sigint: Callable[[Any], contextlib.AbstractContextManager[None]] | None,
    on_start: Callable[[Any], None] | None = None,
    executor: str = "sim",
    cost: CostModel | None = None,
    sink: RowSink | None = None,
    options: RunOptions | None = None,
    scheduler: str = "prefillkit",
) -> SimResult:
    """Simulate ``requests`` on ``fleet`` (every instance simulated: ``executor`` must be
    ``"sim"``). ``progress_bar``: a progress bar with ``update`` (or None); ``sigint``:
    the Ctrl-C handler's context for the fleet (None: none)."""
    if executor != "sim":
        raise ValueError(
            f"--executor {executor}: a fleet (--instances, --fleet) is simulated "
            "(--executor sim); a measured executor runs one instance"
        )
    factory = scheduler_factory(scheduler, fleet.instances[0], executor)
    engine = Fleet(
        fleet, requests, cost=cost, options=options, sink=sink, scheduler_factory=factory
    )
    if progress_bar is not None:
        engine.on_progress = progress_bar.update
    with sigint(engine) if sigint is not None else contextlib.nullcontext():
        if on_start is not None:
            on_start(engine)
        if progress_bar is None:
            return engine.run()
        with progress_bar:
            return engine.run()
