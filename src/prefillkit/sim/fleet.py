"""A fleet: M instances in one simulated event loop behind a router.

Each instance is today's :class:`~prefillkit.sim.engine.Engine` (its own scheduler, cache,
cost model and executor), driven by the fleet in time order: at each time ``t``, every
instance's events due at ``t`` (completions, in instance order), then the arrivals at
``t`` (closed-loop session turns first, then the workload's, in arrival order), each
routed and handed to its instance, then every instance touched at ``t`` starts its next
forward if idle -- the order of one engine's own loop. The router (``sim/routers``)
decides from a :class:`~prefillkit.sim.routers.view.FleetView`: the load the fleet
tracks as a router would (:class:`~prefillkit.sim.fleet_stats.FleetLoad`) and the prefix
matches of its prefix source: the instances' KV events (``"exact"``: an
:class:`~prefillkit.sim.routers.prefix_index.ExactPrefixIndex` listening to every
scheduler, zero delay) or its own routing history (``"approximate"``). A router never
reads a scheduler.

The fleet shares one session gate (a session's next turn is routed again, as a real
router receives it) and one :class:`~prefillkit.records.collector.RunCollector`: the
summary, ``requests.csv`` and ``batches.csv`` cover the whole fleet, in arrival and
start order (batch ids count the fleet's batches). Per instance:
:class:`~prefillkit.sim.fleet_stats.InstanceStats` and ``routing.csv`` (a
``routing_sink``: each request's instance and the prefix the router believed there).

Fleet-wide figures that sum over instances are stated per instance: the executor
utilization is the instances' mean (busy seconds over ``M × span``).
"""

from __future__ import annotations

import contextlib
import heapq
import math
import time as wallclock
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prefillkit.cost.deployment import SimSettings
from prefillkit.cost.forward_models import cost_model_for_config
from prefillkit.cost.roofline import CostModel
from prefillkit.records.collector import RowSink, RunCollector
from prefillkit.records.metrics import BatchTrace
from prefillkit.records.result import SimResult
from prefillkit.records.run_options import RunOptions
from prefillkit.records.stream_summary import batch_busy
from prefillkit.request import Request, session_of
from prefillkit.sched.config import ConfigError
from prefillkit.sim.closed_loop import SessionGate
from prefillkit.sim.counters import merge_counters
from prefillkit.sim.engine import Engine, SchedulerFactory, stream_head
from prefillkit.sim.fleet_settings import FleetSettings
from prefillkit.sim.fleet_stats import FleetLoad, InstanceStats, imbalance, instance_rows
from prefillkit.sim.gc_pause import collector_paused
from prefillkit.sim.routers.prefix_index import ExactPrefixIndex
from prefillkit.sim.routers.router import build_router
from prefillkit.sim.routers.view import FleetView, RouteRequest
from prefillkit.sim.sizing import Deployment, SimConfigError, resolve_deployment

__all__ = ["Fleet", "RoutingSink"]

#: Gets each routing decision: request id, instance, prefix tokens the router believed
#: cached there (``routing.csv``).
RoutingSink = Callable[[str, int, int], None]


class _Member:
    """Instance ``index``'s side of the fleet (``sim.engine.FleetMember``)."""

    __slots__ = ("collector", "fleet", "index", "sessions")

    def __init__(self, fleet: Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.sessions = fleet.sessions
        self.collector = fleet.collector

    def prefilled(self, reqs: Sequence[Request]) -> None:
        self.fleet.prefilled(reqs)

    def retired(self, req: Request) -> None:
        self.fleet.retired(req)

    def forward(self, duration: float) -> None:
        self.fleet.stats[self.index].busy_s += duration

    def next_turn(self, req: Request) -> None:
        self.fleet.next_turn(req)


class Fleet:
    """M engines and a router in one event loop (module docstring). ``requests``: the
    workload in arrival order (a list is sorted by arrival); the run always streams."""

    def __init__(
        self,
        settings: FleetSettings,
        requests: list[Request] | Iterator[Request],
        *,
        cost: CostModel | None = None,
        options: RunOptions | None = None,
        sink: RowSink | None = None,
        total: int | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        routing_sink: RoutingSink | None = None,
        scheduler_factory: SchedulerFactory | None = None,
    ) -> None:
        self.settings = settings
        self.options = options if options is not None else RunOptions()
        if isinstance(requests, list):
            total = len(requests) if total is None else total
            requests = iter(sorted(requests, key=lambda r: r.arrival_time))
        self.total = total
        head, source = stream_head(iter(requests))
        first = settings.instances[0]
        self.sessions = SessionGate(source, closed_loop=not first.open_loop)
        deps = [_deployment(i, s, head) for i, s in enumerate(settings.instances)]
        costs = [
            cost or cost_model_for_config(s, d.num_gpus)
            for s, d in zip(settings.instances, deps, strict=True)
        ]
        keys = tuple(costs[0].breakdown_keys)
        for i, c in enumerate(costs[1:], start=1):
            if tuple(c.breakdown_keys) != keys:
                raise SimConfigError(
                    f"instance[{i}]: its cost model reports other forward-time terms than "
                    "instance[0]'s; a fleet's instances share batches.csv's columns"
                )
        self.trace = BatchTrace(keys)
        floor = first.scheduler.affinity_warm_floor_tokens
        self.collector = RunCollector(keys, floor, sink)
        self.key_tokens = deps[0].key_tokens
        n = len(settings)
        blocks = [  # NOTE: a DP attention deployment's pages are per rank
            d.total_pages * _ranks(s) * s.page_size // self.key_tokens
            for s, d in zip(settings.instances, deps, strict=True)
        ]
        self.load = FleetLoad(blocks, self.key_tokens)
        self.stats = [InstanceStats() for _ in range(n)]
        self.engines = [
            Engine(
                s,
                iter(()),
                cost=c,
                deployment=d,
                options=self.options,
                fleet=_Member(self, i),
                scheduler_factory=scheduler_factory,
            )
            for i, (s, c, d) in enumerate(zip(settings.instances, costs, deps, strict=True))
        ]
        # The instances' device caches from their KV events: an exact router's view, and
        # an approximate router's yardstick (how often its view was wrong).
        self.exact = self._exact_index(settings) if settings.router.source != "none" else None
        self.router = build_router(settings.router, n, self.exact, self.key_tokens)
        self.routing_sink = routing_sink
        self.on_progress = on_progress
        self.stop_requested = False
        self.now = 0.0
        self.finished = 0
        self.arrived = 0
        self._turns: list[tuple[float, int, Request]] = []
        self._turn_seq = 0
        self._zeros = [0] * n
        self._touched: set[int] = set()

    def _exact_index(self, settings: FleetSettings) -> ExactPrefixIndex | None:
        """The index of the instances' device caches, listening to every scheduler; None
        when a scheduler reports no KV events (``--scheduler sglang``): an approximate
        router then runs without its yardstick, an exact one is refused."""
        exact = ExactPrefixIndex(len(self.engines))
        try:
            for i, (eng, inst) in enumerate(zip(self.engines, settings.instances, strict=True)):
                eng.sched.set_kv_listener(exact.listener(i, shared=_ranks(inst) > 1))
        except NotImplementedError as exc:
            for eng in self.engines:
                with contextlib.suppress(NotImplementedError):
                    eng.sched.set_kv_listener(None)
            if settings.router.source == "exact":
                raise SimConfigError(
                    f"--router-prefix-source exact: {exc}; an exact router reads them "
                    "(--router-prefix-source approximate or a load-only router runs)"
                ) from None
            return None
        return exact

    # ------------------------------------------------------------------ members' calls
    def prefilled(self, reqs: Sequence[Request]) -> None:
        for req in reqs:
            index = self.load.prefilled(req)
            if index >= 0:
                self.stats[index].first_token(req)

    def retired(self, req: Request) -> None:
        self.load.retired(req)
        self.finished += 1

    def next_turn(self, req: Request) -> None:
        self._turn_seq += 1
        heapq.heappush(self._turns, (req.arrival_time, self._turn_seq, req))

    # ------------------------------------------------------------------ loop
    def run(self) -> SimResult:
        """Run the fleet to the end (or a stop request); its result. The cyclic garbage
        collector is off during the loop, as in ``Engine.run``."""
        t0 = wallclock.perf_counter()
        with collector_paused(measured=False):
            nxt = self._loop()
        pending = any(e.next_event_time() < math.inf for e in self.engines) or bool(self._turns)
        partial = self.stop_requested and (pending or nxt is not None)
        return self._result(partial, t0)

    def _loop(self) -> Request | None:
        """The event loop (module docstring); the first request not yet arrived."""
        engines = self.engines
        due: list[tuple[float, int]] = []
        turns = self._turns
        arrivals = iter(self.sessions)
        nxt = next(arrivals, None)
        touched = self._touched
        while not self.stop_requested:
            t = due[0][0] if due else math.inf
            if turns and turns[0][0] < t:
                t = turns[0][0]
            if nxt is not None and nxt.arrival_time < t:
                t = nxt.arrival_time
            if t == math.inf:
                break
            if t < self.now:
                raise SimConfigError(
                    f"requests must arrive in order: one arrives at {t:g} s, after {self.now:g} s"
                )
            self.now = t
            while due and due[0][0] == t:
                i = heapq.heappop(due)[1]
                eng = engines[i]
                if eng.next_event_time() == t:
                    eng.advance(t)
                    touched.add(i)
            while turns and turns[0][0] == t:
                self._route(heapq.heappop(turns)[2], t)
            while nxt is not None and nxt.arrival_time == t:
                self._route(nxt, t)
                nxt = next(arrivals, None)
            for i in sorted(touched):
                eng = engines[i]
                eng.kick()
                te = eng.next_event_time()
                if te < math.inf:
                    heapq.heappush(due, (te, i))
            touched.clear()
            if self.on_progress is not None:
                self.on_progress(
                    self.finished, self.total if self.total is not None else self.arrived
                )
        return nxt

    def _route(self, req: Request, t: float) -> None:
        """Route ``req`` arriving at ``t`` and hand it to its instance."""
        self.arrived += 1
        kt = self.key_tokens
        prompt = req.prompt_len
        st = session_of(req)
        rr = RouteRequest(
            req.rid, prompt, tuple(req.keys), kt, None if st is None else st.session_id
        )
        exact = self.exact.matched_units(req.keys) if self.exact is not None else None
        source = self.router.prefix_source
        units = exact if source == "exact" else self.router.believed_units(rr, t)
        matched = [min(u * kt, prompt) for u in units] if units is not None else self._zeros
        load = self.load
        view = FleetView(
            load.running, load.waiting, load.queued_tokens, load.active_blocks,
            load.total_blocks, matched,
        )  # fmt: skip
        i = self.router.choose(rr, view, t)
        self.router.routed(rr, i, t)
        stats = self.stats[i]
        stats.routed += 1
        if load.waiting[i] > stats.max_waiting:
            stats.max_waiting = load.waiting[i]
        if source == "approximate" and exact is not None:
            stats.view(matched[i], min(exact[i] * kt, prompt))
        load.routed(req, i)
        if self.routing_sink is not None:
            self.routing_sink(req.rid, i, matched[i])
        self.engines[i].inject(req, t)
        self._touched.add(i)

    # ------------------------------------------------------------------ result
    def _result(self, partial: bool, t0: float) -> SimResult:
        engines = self.engines
        deps = [e.result(partial, t0).deployment for e in engines]
        counters = merge_counters(e.sched.counters() for e in engines)
        counters["stuck"] = 0 if partial else sum(e.sched.num_pending() for e in engines)
        self.collector.close(partial, self.now)
        n = len(engines)
        batches = self.collector.batches

        def busy() -> Iterator[Any]:  # NOTE: the instances' mean (module docstring)
            return ((s, d / n) for s, d in batch_busy(batches)())

        summary = self.collector.summary(
            counters=counters,
            percentiles=self.options.percentiles,
            slo_ttft_s=self.options.slo_ttft_s,
            sim_end_s=self.now,
            busy=busy,
            window_s=self.options.window_s,
        )
        first = engines[0]
        summary.update(self.sessions.metrics(first._answer_rate, first._answer_at_finish))
        if partial:
            summary["arrived"] = self.arrived
        fleet = self._fleet_block(summary)
        summary.update(fleet.pop("summary"))
        summary["wall_time_s"] = wallclock.perf_counter() - t0
        dep = dict(deps[0])
        dep["instances"] = n
        fleet["deployments"] = deps
        return SimResult(
            [], [], summary, dep, partial=partial, trace=self.trace, extra={"fleet": fleet}
        )

    def _fleet_block(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The fleet's own figures: per instance, imbalance, the router's view."""
        n = len(self.engines)
        span = max(self.now, 0.0)
        util = summary.get("executor_utilization")
        busy = sum(s.busy_s for s in self.stats)
        stats = self.stats
        checked = sum(s.view_checked for s in stats)
        wrong = sum(s.view_wrong for s in stats)
        requests = imbalance([float(s.routed) for s in stats])
        view = {
            "checked": checked,
            "wrong": wrong,
            "wrong_share": wrong / checked if checked else None,
            "over_tokens_mean": sum(s.view_over_tokens for s in stats) / checked
            if checked
            else None,
            "under_tokens_mean": sum(s.view_under_tokens for s in stats) / checked
            if checked
            else None,
        }
        return {
            "router": self.settings.router.describe(),
            "prefix_source": self.router.prefix_source,
            "instances": instance_rows(stats, span),
            "imbalance": {"requests": requests, "busy": imbalance([s.busy_s for s in stats])},
            "view": view,
            "summary": {
                "instances": n,
                "router": self.settings.router.name,
                "executor_utilization": None if util is None else util / n,
                "fleet_busy_s": busy,
                "routing_imbalance": requests["max_over_mean"],
                "router_view_wrong_share": view["wrong_share"],
            },
        }


def _ranks(settings: SimSettings) -> int:
    """The schedulers of one instance: its DP attention ranks, else 1."""
    return settings.dp_size if settings.enable_dp_attention else 1


def _deployment(index: int, settings: SimSettings, head: list[Request]) -> Deployment:
    """Instance ``index``'s deployment; its errors name it."""
    try:
        return resolve_deployment(settings, head)
    except (SimConfigError, ConfigError) as exc:
        raise SimConfigError(f"instance[{index}]: {exc}") from None
