# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The discrete-event engine loop: arrivals -> admission pass -> forward -> completion.

A heap of ``(time, priority, seq, kind, payload)`` events; no wall-clock sleeps. The
engine drives the scheduler (``prefillkit.sched.interface``) exactly as a serving engine
would and asks the cost model how long each forward takes: one ``breakdown`` call per
batch, whose ``"total"`` is the forward time and whose terms go to ``batches.csv``. Each
batch is recorded in a :class:`~prefillkit.records.metrics.BatchTrace` (which requests ran in
it, in order); the summary adds the steady-state metrics of
:mod:`prefillkit.records.steady` over windows of ``options.window_s`` seconds
(:class:`~prefillkit.records.run_options.RunOptions`: what the run reports, checked once).

Modes:
- ``pd-prefill``: a prefill server of a PD-disaggregated deployment. After the forward
  the request's KV is sent out (``kv_transfer_time``), then its pages stay cached and
  unlocked. TTFT is the time the prefill forward produced the first token.
- ``colocated``: finished prefills join the decode batch; one executor runs a prefill
  batch when one can be admitted, else a decode step (upstream's default order).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time as wallclock
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.cost.cached import cached_totals, split_cached
from prefillkit.cost.deployment import SimSettings
from prefillkit.cost.forward_models import cost_model_for_config, cost_model_record
from prefillkit.cost.roofline import CostModel, ReqShape
from prefillkit.records.collector import RowSink, RunCollector
from prefillkit.records.column_stats import BusyChunks
from prefillkit.records.metrics import BatchRecord, BatchTrace, summarize
from prefillkit.records.result import SimResult
from prefillkit.records.run_options import RunOptions
from prefillkit.records.slo import latency_metrics
from prefillkit.records.steady import (
    MAX_WINDOWS,
    check_window_s,
    steady_metrics,
)
from prefillkit.request import SESSION, KeyUnitCheck, KeyUnitError, ReqStatus, Request
from prefillkit.sched.buffer import BufferEstimatorContext, check_buffer_limit_fits
from prefillkit.sched.interface import SchedulerInterface, StepOutput, build_scheduler
from prefillkit.sim.closed_loop import SessionGate
from prefillkit.sim.decode_steps import DecodeSteps
from prefillkit.sim.dp_attention import build_dp_scheduler, lockstep_breakdown
from prefillkit.sim.gc_pause import collector_paused
from prefillkit.sim.seams import FleetMember, SchedulerFactory, StepRunner
from prefillkit.sim.sizing import Deployment, SimConfigError, resolve_deployment
from prefillkit.sim.vllm_style import decode_shapes

if TYPE_CHECKING:
    import numpy as np

#: Requests a streaming engine reads ahead for the key-unit size (the first request
#: with a key chain); without one among them the page size is used, and a later request
#: with another key unit is refused (SimConfigError) when it arrives.
KEY_UNIT_LOOKAHEAD = 4096

FORWARD_DONE, TRANSFER_DONE, ARRIVAL, WAKE = 0, 1, 2, 3


def stream_head(requests: Iterator[Request]) -> tuple[list[Request], Iterator[Request]]:
    """A stream's head (up to its first request with a key chain, usually the first, or
    :data:`KEY_UNIT_LOOKAHEAD` requests: it sizes the deployment) and the whole stream."""
    head: list[Request] = []
    for req in requests:
        head.append(req)
        if req.keys or len(head) >= KEY_UNIT_LOOKAHEAD:
            break
    return head, itertools.chain(head, requests)


class Engine:
    """The event loop over ``requests``.

    ``requests`` is a list (kept: ``SimResult.requests``, ``batches`` and ``trace`` hold
    the whole run) or an iterator in arrival order (a *streaming* run: each request is
    pulled when it arrives and dropped once done; :attr:`collector` keeps the summary's
    columns and sends the rows of ``requests.csv`` and ``batches.csv`` to ``sink``, and
    the result's ``requests``/``batches`` are empty). Both give the same summary and the
    same rows. ``total``: the number of requests, when known, for ``on_progress``.
    """

    def __init__(
        self,
        cfg: SimSettings,
        requests: list[Request] | Iterator[Request],
        *,
        cost: CostModel | None = None,
        deployment: Deployment | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        options: RunOptions | None = None,
        runner: StepRunner | None = None,
        sink: RowSink | None = None,
        total: int | None = None,
        scheduler_factory: SchedulerFactory | None = None,
        fleet: FleetMember | None = None,
    ) -> None:
        self.cfg = cfg
        # What the run reports: the steady window, percentiles, the TTFT SLO (checked).
        self.options = options if options is not None else RunOptions()
        self.streaming = not isinstance(requests, list)
        self.requests: list[Request] = requests if isinstance(requests, list) else []
        self.total = total if self.streaming else len(self.requests)
        head, source = self._open(requests)
        # Session turns arrive closed-loop unless cfg.open_loop (sim/closed_loop.py).
        # A fleet's instance shares the fleet's gate and collector (sim/fleet.py).
        self.fleet = fleet
        if fleet is None:
            self.sessions = SessionGate(source, closed_loop=not cfg.open_loop)
        else:
            self.sessions = fleet.sessions
        self._arrivals: Iterator[Request] = self.sessions
        self.dep = deployment or resolve_deployment(cfg, head)
        self.cost: CostModel = cost or cost_model_for_config(cfg, self.dep.num_gpus)
        self.colocated = cfg.mode == "colocated"
        # vLLM's engine style (sim/vllm_style.py): prefill forwards carry the decode
        # tokens; the ids of the steps that did (their decode advances when they finish).
        self._vllm_style = cfg.engine_style == "vllm"
        self._mixed_steps: set[int] = set()
        # NOTE: the loop drives the scheduler through its typed interface only
        # (tests/test_interface.py checks it); ``scheduler_factory`` builds another
        # implementation of it (replay --scheduler sglang), else prefillkit's own.
        self._scheduler_factory = scheduler_factory
        self.sched: SchedulerInterface = self._build_scheduler()
        # A real executor timing each forward instead of the cost model (see StepRunner).
        self.runner = runner
        if runner is not None:
            runner.bind(self.sched)
        self.on_progress = on_progress
        self.stop_requested = False
        self.batches: list[BatchRecord] = []
        self.trace = BatchTrace(tuple((runner or self.cost).breakdown_keys))
        # Colocated decode steps keep the executor busy too: (start, duration) each.
        # NOTE: arrays of doubles, one pair per decode step (sim/decode_steps.py).
        self._decode_starts = array("d")
        self._decode_durations = array("d")
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        self._mid_chunk: set[str] = set()  # last forward a chunk (cost/cached.py)
        # The requests the scheduler holds, by id (a step names its requests by id).
        self._live: dict[str, Request] = {}
        self.now = 0.0
        self.busy = False
        self.finished = 0
        self.arrived = 0
        floor = cfg.scheduler.affinity_warm_floor_tokens
        if fleet is not None:
            self.collector: RunCollector | None = fleet.collector
        else:
            self.collector = RunCollector(self.trace.keys, floor, sink) if self.streaming else None
        self._key_units = KeyUnitCheck(self.dep.key_tokens)  # a stream's, as they arrive
        self._first_arrival: float | None = None
        self._window_limit = math.inf
        # A list run's requests as they arrived (closed-loop turns leave the list's order).
        self._arrival_order: list[Request] = []
        # A session turn answers at its simulated finish, else first token + _decode_time.
        self._answer_rate = cfg.session_decode_tokens_per_s
        self._answer_at_finish = self.colocated and self._answer_rate is None

    def _open(
        self, requests: list[Request] | Iterator[Request]
    ) -> tuple[list[Request], Iterator[Request]]:
        """The requests that size the deployment (a stream's head: up to its first key
        chain) and the arrival source. A list run's window count is checked here, over
        its whole arrival span (a stream's as requests arrive: :meth:`_arrive`)."""
        if not isinstance(requests, list):
            return stream_head(iter(requests))
        try:
            check_window_s(self.options.window_s, (r.arrival_time for r in requests))
        except ValueError as e:
            raise SimConfigError(f"--window-s: {e}") from None
        return requests, iter(sorted(requests, key=lambda r: r.arrival_time))

    def _build_scheduler(self) -> SchedulerInterface:
        """The scheduler over this deployment's pools (and its CP buffer limit checked
        against the memory left beside the pool; one per DP rank), or the factory's."""
        cfg = self.cfg
        if self._scheduler_factory is not None:
            if cfg.attn_dp_size > 1:
                raise SimConfigError("--enable-dp-attention: not with another --scheduler")
            return self._scheduler_factory(cfg, self.dep)
        buffer_ctx = BufferEstimatorContext(
            model=cfg.model_spec,
            kv_cache_dtype=cfg.resolved_kv_cache_dtype,
            cp_size=cfg.cp_size,
            page_size=cfg.page_size,
        )
        limit = cfg.scheduler.cp_shared_kv_prefill_max_buffer_size
        if limit is not None:
            free = self.dep.device_memory_bytes * (1.0 - cfg.mem_fraction_static)
            try:
                check_buffer_limit_fits(limit, int(free))
            except ValueError as e:
                raise SimConfigError(f"--cp-shared-kv-prefill-max-buffer-size: {e}") from None
        if cfg.attn_dp_size > 1:
            return build_dp_scheduler(
                cfg, self.dep, self.cost, buffer_ctx=buffer_ctx, reserve_decode=self.colocated
            )
        return build_scheduler(
            cfg.scheduler,
            self.dep.total_pages,
            self.dep.key_tokens,
            host_pages=self.dep.host_pages,
            buffer_ctx=buffer_ctx,
            reserve_decode=self.colocated,
            forward_estimate=self.cost.forward_time,
        )

    def _push(self, t: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, kind, payload))

    # ------------------------------------------------------------------ loop
    def run(self) -> SimResult:
        t0 = wallclock.perf_counter()
        with collector_paused(self.runner is not None):  # sim/gc_pause.py
            nxt = self._loop()
        partial = self.stop_requested and (bool(self._heap) or nxt is not None)
        return self.result(partial, t0)

    def result(self, partial: bool, t0: float) -> SimResult:
        """The run's result once its loop has stopped (``partial``: stopped early;
        ``t0``: the wall clock at its start). A fleet's instance: its counters and
        deployment (the fleet's collector makes the summary: sim/fleet.py)."""
        if self.fleet is not None:
            dep = self.dep.as_dict(self.cfg.page_size)
            dep["cost_model"] = cost_model_record(self.cost)
            return SimResult([], [], {}, dep, partial=partial, trace=self.trace)
        summary, classes = self._summary(partial)
        summary.update(self.sessions.metrics(self._answer_rate, self._answer_at_finish))
        if partial:  # NOTE: it counts the requests that had arrived; the rest are not drawn
            summary["arrived"] = self.arrived
        summary["wall_time_s"] = wallclock.perf_counter() - t0
        dep = self.dep.as_dict(self.cfg.page_size)
        dep["cost_model"] = cost_model_record(self.cost)
        return SimResult(
            self.requests,
            self.batches,
            summary,
            dep,
            partial=partial,
            trace=self.trace,
            cache_classes=classes,
            extra={"decode_steps": DecodeSteps(self._decode_starts, self._decode_durations)},
        )

    def _summary(self, partial: bool) -> tuple[dict[str, Any], dict[str, str]]:
        """The run's summary and its requests' cache classes (a list run's; a streaming
        run's collector keeps its own): from the collector's columns, or from the kept
        requests and batches."""
        counters = self.sched.counters()
        counters["stuck"] = 0 if partial else self.sched.num_pending()
        collector = self.collector
        if collector is not None:
            collector.close(partial, self.now)
            summary = collector.summary(
                counters=counters,
                percentiles=self.options.percentiles,
                slo_ttft_s=self.options.slo_ttft_s,
                sim_end_s=self.now,
                busy=self._decode_busy(),
                window_s=self.options.window_s,
            )
            classes: dict[str, str] = {}
        else:
            if partial:
                self.requests = self._arrival_order
            elif self.sessions.sessions:
                self.requests = self._in_arrival_order()
            summary = summarize(self.requests, self.batches, counters=counters, sim_end_s=self.now)
            summary.update(report_metrics(self))
            classes = self.trace.cache_classes(self.cfg.scheduler.affinity_warm_floor_tokens)
            summary.update(
                steady_metrics(
                    self.requests,
                    self._busy_intervals(),
                    classes,
                    window_s=self.options.window_s,
                    sim_end_s=self.now,
                )
            )
        return summary, classes

    def _loop(self) -> Request | None:
        """The event loop, until nothing is left or a stop is requested; the first
        request not yet arrived (None: none left)."""
        heap = self._heap
        arrivals = self._arrivals
        pop = heapq.heappop
        nxt = next(arrivals, None)
        check = self.cfg.debug_check_invariants
        while (heap or nxt is not None) and not self.stop_requested:
            # NOTE: at one time, completions (kinds FORWARD_DONE, TRANSFER_DONE, then
            # push order) go before arrivals (arrival order), as the heap's
            # (time, kind, seq) order had it when arrivals were pushed up front.
            if nxt is None or (heap and heap[0][0] <= nxt.arrival_time):
                t = heap[0][0]
            else:
                t = nxt.arrival_time
                if t < self.now:
                    raise SimConfigError(
                        f"requests must arrive in order: {nxt.rid!r} at {t:g} s, after "
                        f"{self.now:g} s"
                    )
            self.now = t
            while heap and heap[0][0] == t:
                _, _, _, kind, payload = pop(heap)
                self._handle(kind, payload)
            while nxt is not None and nxt.arrival_time == t:
                self._arrive(nxt)
                nxt = next(arrivals, None)
            if not self.busy:
                self._start_work()
            if check:
                self.sched.check()
            if self.on_progress is not None:
                total = self.total if self.total is not None else self.arrived
                self.on_progress(self.finished, total)
        return nxt

    # ------------------------------------------------------------------ driven by a fleet
    # NOTE: a fleet (sim/fleet.py) runs its instances' engines in one event loop, in
    # time order: ``advance(t)`` (this engine's events due at t), ``inject`` (arrivals
    # routed here at t), then ``kick`` -- the order of one engine's own ``_loop`` step.
    def next_event_time(self) -> float:
        """When this engine's next event is due (inf: none)."""
        heap = self._heap
        return heap[0][0] if heap else math.inf

    def advance(self, t: float) -> None:
        """Handle this engine's events due at ``t`` (completions, in push order).
        Mutates: ``now`` (to ``t``; never backwards), the scheduler, the heap."""
        self.now = t
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] == t:
            _, _, _, kind, payload = pop(heap)
            self._handle(kind, payload)

    def inject(self, req: Request, t: float) -> None:
        """``req`` arrives here at ``t`` (routed by the fleet). Mutates: ``now``, the
        scheduler's queue."""
        self.now = t
        self._arrive(req)

    def kick(self) -> None:
        """Start the next forward if the executor is idle (and check the scheduler's
        invariants when asked to)."""
        if not self.busy:
            self._start_work()
        if self.cfg.debug_check_invariants:
            self.sched.check()

    def _arrive(self, req: Request) -> None:
        self.arrived += 1
        if not self.streaming:
            self._arrival_order.append(req)
        collector = self.collector
        if collector is not None:
            try:
                self._key_units.check(req)
            except KeyUnitError as err:  # NOTE: not "e": mypyc gives a name one type
                raise SimConfigError(str(err)) from None
            t = req.arrival_time
            if self._first_arrival is None:
                self._first_arrival = t
                self._window_limit = t + MAX_WINDOWS * self.options.window_s
            elif t >= self._window_limit:
                try:
                    check_window_s(self.options.window_s, (self._first_arrival, t), so_far=True)
                except ValueError as e:
                    raise SimConfigError(f"--window-s: {e}") from None
            collector.arrive(req)
        if req.rid in self._live:
            raise SimConfigError(f"request id {req.rid!r} arrives while a request with it is live")
        if self.sched.add_request(req) is not None:
            self._retire(req)
            self._answered(req, self.now)  # rejected: the agent gets an error now
        else:
            self._live[req.rid] = req
        self.sessions.arrived(req)

    def _busy_intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """Executor busy intervals ``(starts, durations)``, sorted by start."""
        import numpy as np

        if self.collector is not None:
            bstarts: Any = self.collector.batches.column("start")
            bdurations: Any = self.collector.batches.column("duration")
        else:
            bstarts = [b.start_s for b in self.batches]
            bdurations = [b.duration_s for b in self.batches]
        if not self._decode_starts:
            # NOTE: batches start in time order, so the (stable) sort below would be the
            # identity: no copies.
            return np.asarray(bstarts, dtype=float), np.asarray(bdurations, dtype=float)
        starts = np.concatenate(
            (np.asarray(bstarts, dtype=float), np.asarray(self._decode_starts, dtype=float))
        )
        durations = np.concatenate(
            (np.asarray(bdurations, dtype=float), np.asarray(self._decode_durations, dtype=float))
        )
        order = np.argsort(starts, kind="stable")
        return starts[order], durations[order]

    def _decode_busy(self) -> BusyChunks | None:
        """A streaming run's busy intervals with the decode steps merged in (in memory,
        as the decode steps are: a colocated run), or None: the batches' alone (read
        from the collector's columns a chunk at a time)."""
        if not self._decode_starts:
            return None
        merged = self._busy_intervals()
        return lambda: (merged,)

    def _handle(self, kind: int, payload: Any) -> None:
        if kind == FORWARD_DONE:
            self.busy = False
            if payload is None:
                self._decode_done()
            else:
                if self._mixed_steps and payload.step_id in self._mixed_steps:
                    self._mixed_steps.discard(payload.step_id)
                    self._decode_done()  # NOTE: before the prefill's requests start decode
                self._prefill_done(payload)
        elif kind == TRANSFER_DONE:
            self.sched.finish(payload, self.now)
            self._retire(payload)
        elif kind == ARRIVAL:
            self._arrive(payload)

    def _decode_done(self) -> None:
        """A decode step (or a vLLM-style forward's decode tokens) finished."""
        finished, retracted = self.sched.decode_step(self.now)
        for req in finished:
            self._retire(req)
            if self._answer_at_finish:
                self._answered(req, self.now)
        self._rejected_on_requeue(retracted)

    # ------------------------------------------------------------------ sessions
    def _in_arrival_order(self) -> list[Request]:
        """The list run's requests in arrival order, those that never arrived after."""
        arrived = {id(r) for r in self._arrival_order}
        return self._arrival_order + [r for r in self.requests if id(r) not in arrived]

    def _answered(self, req: Request, t: float) -> None:
        """``req``'s answer is complete at ``t``: a closed-loop session's next turn is
        scheduled to arrive (sim/closed_loop.py); a fleet routes it."""
        succ = self.sessions.answered(req, t)
        if succ is not None:
            if self.fleet is not None:
                self.fleet.next_turn(succ)
            else:
                self._push(succ.arrival_time, ARRIVAL, succ)

    def _decode_time(self, req: Request) -> float:
        """Seconds from ``req``'s first token to its last: its other output tokens at the
        stated rate, else at this deployment's decode step for one request (ASSUMPTION:
        a pd-prefill run does not simulate its decode; one stream here stands for it)."""
        tokens = max(req.max_new_tokens - 1, 0)
        if self._answer_rate is not None:
            return tokens / self._answer_rate
        if tokens == 0:
            return 0.0
        ctx = req.state.input_len + req.max_new_tokens // 2
        return tokens * self.cost.decode_step_time(1, ctx)

    def _retire(self, req: Request) -> None:
        """``req`` is done (finished or rejected): counted, recorded, no longer live."""
        self.finished += 1
        self._live.pop(req.rid, None)
        if self.collector is not None:
            self.collector.done(req)
        if self.fleet is not None:
            self.fleet.retired(req)

    def _rejected_on_requeue(self, requeued: Sequence[Request]) -> None:
        """Count the requeued requests the scheduler rejected (they can never fit again)."""
        for req in requeued:
            if req.state.status is ReqStatus.REJECTED:
                self._retire(req)
                self._answered(req, self.now)

    def _start_work(self) -> None:
        sched = self.sched
        if sched.has_work:
            step = sched.schedule(self.now)
            live = self._live
            if step.preempted:
                self._rejected_on_requeue([live[rid] for rid in step.preempted])
            if step.reqs:
                reqs = [live[s.rid] for s in step.reqs]
                if self.runner is not None:
                    if step.dp_rank_sizes:
                        raise SimConfigError("--executor: not with --enable-dp-attention")
                    breakdown = self.runner.forward(step, reqs)
                else:
                    shapes = [
                        ReqShape(s.prefix_len, s.extend_len, s.loaded_tokens) for s in step.reqs
                    ]
                    if self._vllm_style:  # NOTE: validated colocated
                        riders = decode_shapes(*sched.decode_load())
                        if riders:
                            shapes += riders
                            self._mixed_steps.add(step.step_id)
                    if step.dp_rank_sizes:  # DP attention: one lockstep forward of the ranks
                        breakdown = lockstep_breakdown(self.cost, shapes, step.dp_rank_sizes)
                    else:
                        breakdown = self.cost.breakdown(shapes)
                dur = breakdown["total"]
                split = split_cached(step, self._mid_chunk)
                if self.collector is not None:
                    b = self.collector.num_batches
                    self.collector.batch(
                        reqs, breakdown, BatchRecord.from_step(step, b, self.now, dur, split)
                    )
                else:
                    self.trace.record(reqs, breakdown)
                    self.batches.append(
                        BatchRecord.from_step(step, len(self.batches), self.now, dur, split)
                    )
                self.busy = True
                self._push(self.now + dur, FORWARD_DONE, step)
                if self.fleet is not None:
                    self.fleet.forward(dur)
                return
            wake = step.wake_at
            if wake is not None and wake > self.now:
                self._push(wake, WAKE, None)  # NOTE: runs the next pass then, if idle
        n_decoding, ctx = sched.decode_load() if self.colocated else (0, 0)
        if n_decoding:
            dur = self.cost.decode_step_time(n_decoding, ctx)
            self._decode_starts.append(self.now)
            self._decode_durations.append(dur)
            self.busy = True
            self._push(self.now + dur, FORWARD_DONE, None)
            if self.fleet is not None:
                self.fleet.forward(dur)

    def _prefill_done(self, step: StepOutput) -> None:
        done = self.sched.forward_done(step, self.now)
        if self.fleet is not None:
            self.fleet.prefilled(done)
        for req in done:
            if not self._answer_at_finish and SESSION in req.extra:
                self._answered(req, self.now + self._decode_time(req))
            if self.colocated:
                if req.state.output_len >= req.max_new_tokens:
                    self.sched.finish(req, self.now)
                    self._retire(req)
                    if self._answer_at_finish:
                        self._answered(req, self.now)
                else:
                    self.sched.start_decode(req)
            else:
                self.sched.begin_transfer(req)
                self._push(
                    self.now + self.cost.kv_transfer_time(req.state.input_len), TRANSFER_DONE, req
                )


def report_metrics(engine: Engine) -> dict[str, Any]:
    """The summary's latency statistics, goodput and cached-token totals (records/slo.py,
    cost/cached.py) of a finished ``engine`` run."""
    done = [r for r in engine.requests if r.metrics.first_token_time is not None]
    out = latency_metrics(
        engine.requests,
        sim_end_s=engine.now,
        percentiles=engine.options.percentiles,
        slo_ttft_s=engine.options.slo_ttft_s,
    )
    out.update(cached_totals(engine.batches, sum(r.prompt_len for r in done)))
    return out


def simulate(
    cfg: SimSettings,
    requests: list[Request] | Iterator[Request],
    *,
    cost: CostModel | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    options: RunOptions | None = None,
) -> SimResult:
    """Replay ``requests`` through the scheduler on the configured deployment."""
    return Engine(cfg, requests, cost=cost, on_progress=on_progress, options=options).run()
