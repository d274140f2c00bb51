"""What plugs into the engine loop (``prefillkit.sim.engine``): a step runner that times
forwards for real, a fleet the engine is one instance of, and a scheduler factory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

from prefillkit.cost.deployment import SimSettings
from prefillkit.records.collector import RunCollector
from prefillkit.request import Request
from prefillkit.sched.interface import SchedulerInterface, StepOutput
from prefillkit.sim.closed_loop import SessionGate
from prefillkit.sim.sizing import Deployment

__all__ = ["FleetMember", "SchedulerFactory", "StepRunner"]

#: Builds the run's scheduler from its settings and resolved deployment (an alternative
#: to prefillkit's own: the app layer's ``--scheduler``; this module imports none).
SchedulerFactory: TypeAlias = Callable[[SimSettings, Deployment], SchedulerInterface]


class StepRunner(Protocol):
    """Runs each prefill step for real instead of asking the cost model (the one seam between
    the loop and an executor: ``prefillkit.exec.drive.StepDriver``; this module stays torch-free).

    ``bind`` gets the scheduler's interface once, before the run (a runner may attach a KV
    listener there); ``forward`` gets every non-empty ``StepOutput`` as the scheduler returned
    it with the engine's requests in the step's order, executes it, and returns its
    breakdown (``"total"``: the measured forward seconds, the batch's duration; one
    ``t_<key>_s`` column per other key of ``breakdown_keys``). KV transfer and decode
    times still come from the cost model.
    """

    breakdown_keys: tuple[str, ...]

    def bind(self, sched: SchedulerInterface) -> None: ...

    def forward(self, step: StepOutput, reqs: Sequence[Request]) -> dict[str, float]: ...


class FleetMember(Protocol):
    """What an engine that is one instance of a fleet (``prefillkit.sim.fleet``) shares
    with the fleet and tells it. ``sessions`` and ``collector``: the fleet's session gate
    and run collector (one for every instance: the fleet's summary and rows). The engine
    calls ``prefilled`` with the requests whose prefill a forward completed (first token),
    ``retired`` with each request done (finished or rejected), ``forward`` with the
    duration of each forward it starts (prefill batch or decode step), and ``next_turn``
    with a closed-loop session's next turn (its ``arrival_time`` set): the fleet routes it.
    """

    sessions: SessionGate
    collector: RunCollector

    def prefilled(self, reqs: Sequence[Request]) -> None: ...

    def retired(self, req: Request) -> None: ...

    def forward(self, duration: float) -> None: ...

    def next_turn(self, req: Request) -> None: ...
