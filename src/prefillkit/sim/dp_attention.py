"""DP attention inside one instance (SGLang ``--enable-dp-attention --dp-size N``): N DP
ranks, each its own scheduler, run in lockstep forwards (``docs/dp_attention.md``).

:class:`DpAttentionScheduler` is one :class:`~prefillkit.sched.interface.SchedulerInterface`
over N of prefillkit's own schedulers (the core, unchanged: each built with
:func:`~prefillkit.sched.interface.build_scheduler` over its own pools, its own prefix
cache and waiting queue). A request goes to the rank the DP controller picks
(:class:`DpController`, :func:`assign_rank`) and stays there; every call about it goes
to its rank. :meth:`DpAttentionScheduler.schedule` runs every rank's admission pass at
the same time and returns one :class:`~prefillkit.sched.interface.StepOutput`: the ranks'
batches one after another, ``dp_rank_sizes`` saying how many requests each gave; the
engine prices it with the cost model's ``breakdown_dp`` (the forward lasts as long as the
slowest rank: an idle rank still joins the MoE step, SGLang's idle batch in
``scheduler_components/dp_attn.py`` ``prepare_mlp_sync_batch_raw``).

Colocated mode: a lockstep step is a prefill step when any rank admits a batch (a rank
that has only decoding requests waits through it), else a decode step of every rank's
decoding requests, timed by ``decode_step_time`` on the combined batch (a deviation:
SGLang lets such a rank run its decode batch inside the prefill step,
``docs/deviations.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import xxhash

from prefillkit.cost.deployment import SimSettings
from prefillkit.cost.protocol import CostModel, LockstepCostModel
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.buffer import BufferEstimatorContext, ReqShape
from prefillkit.sched.interface import (
    AdmissionObserver,
    CloseReason,
    SchedulerInterface,
    StepOutput,
    build_scheduler,
)
from prefillkit.sim.counters import merge_counters
from prefillkit.sim.sizing import Deployment, SimConfigError

if TYPE_CHECKING:
    from prefillkit.cache.events import KVListener

__all__ = [
    "LOAD_AWARE",
    "REFRESH_S",
    "DpAttentionScheduler",
    "DpController",
    "assign_rank",
    "bootstrap_room",
    "build_dp_scheduler",
    "lockstep_breakdown",
    "split_by_rank",
]

T = TypeVar("T")

#: The methods that read the ranks' loads (SGLang's ``DPBudget``).
LOAD_AWARE = frozenset({"total_requests", "total_tokens"})
#: SGLang's ``DataParallelController.refresh_load_budget`` reads the ranks' load
#: snapshots at most once per 20 ms; between reads it adds its own +1 request (+ the
#: prompt's tokens) to the rank it picked (``DPBudget.dispatch``).
REFRESH_S = 0.02

_NO_WORK = StepOutput(0, (), CloseReason.QUEUE_EMPTY)


def bootstrap_room(rid: str) -> int:
    """The simulator's stand-in for a request's PD bootstrap room (SGLang's router draws a
    random 63-bit room per request; a trace has none): the xxh3 64-bit hash of its id,
    so a replay routes the same way every time."""
    return int(xxhash.xxh3_64_intdigest(rid.encode("utf-8")))


def assign_rank(
    method: str,
    requests: Sequence[int],
    tokens: Sequence[int],
    counter: int,
    room: int,
) -> int:
    """The DP rank SGLang 0.5.23's ``DataParallelController`` sends a request to
    (``managers/data_parallel_controller.py``); ``auto`` must be resolved first
    (``SimSettings.resolved_load_balance_method``). Pure.

    ``round_robin``: ``counter mod N`` (the controller's ``round_robin_counter``);
    ``follow_bootstrap_room``: ``room mod N``; ``total_requests``: the first rank with the
    fewest requests (``DPBudget.dispatch``: ``index(min(total_requests))``);
    ``total_tokens``: the fewest tokens, ties by fewer requests, then the lower rank.
    ``requests`` / ``tokens``: the controller's budget per rank.
    """
    n = len(requests)
    if method == "round_robin":
        return counter % n
    if method == "follow_bootstrap_room":
        return room % n
    if method == "total_requests":
        return list(requests).index(min(requests))
    if method == "total_tokens":
        return min(range(n), key=lambda i: (tokens[i], requests[i]))
    raise ValueError(f"unknown load balance method {method!r}")


class DpController:
    """The DP controller's state: the round-robin counter and, for the load-aware
    methods, the budget it routes by (refreshed from the ranks' loads at most every
    :data:`REFRESH_S` simulated seconds, its own increments in between)."""

    def __init__(self, method: str, dp_size: int) -> None:
        self.method = method
        self.counter = 0
        self.requests = [0] * dp_size
        self.tokens = [0] * dp_size
        self._refreshed_at = -1.0

    def route(self, req: Request, now: float, requests: list[int], tokens: list[int]) -> int:
        """The rank for ``req`` arriving at ``now``; ``requests`` / ``tokens``: each
        rank's load now (copied only when the budget is due a refresh)."""
        aware = self.method in LOAD_AWARE
        if aware and (self._refreshed_at < 0.0 or now - self._refreshed_at >= REFRESH_S):
            self.requests = list(requests)
            self.tokens = list(tokens)
            self._refreshed_at = now
        rank = assign_rank(
            self.method, self.requests, self.tokens, self.counter, bootstrap_room(req.rid)
        )
        self.counter = (self.counter + 1) % len(self.requests)
        if aware:
            self.requests[rank] += 1
            self.tokens[rank] += req.prompt_len
        return rank


def split_by_rank(items: Sequence[T], sizes: Sequence[int]) -> list[list[T]]:
    """``items`` cut into consecutive groups of ``sizes`` (a step's requests by DP rank)."""
    out: list[list[T]] = []
    start = 0
    for size in sizes:
        out.append(list(items[start : start + size]))
        start += size
    if start != len(items):
        raise ValueError(f"{len(items)} items for DP rank sizes {tuple(sizes)}")
    return out


def lockstep_breakdown(
    cost: CostModel, shapes: Sequence[ReqShape], sizes: Sequence[int]
) -> dict[str, float]:
    """One DP attention step's breakdown: its request ``shapes`` cut by rank (``sizes``:
    ``StepOutput.dp_rank_sizes``), priced by ``cost.breakdown_dp`` (a
    :class:`~prefillkit.cost.protocol.LockstepCostModel`: :func:`build_dp_scheduler`
    checked that it is one)."""
    return cast(LockstepCostModel, cost).breakdown_dp(split_by_rank(shapes, sizes))


def build_dp_scheduler(
    cfg: SimSettings,
    dep: Deployment,
    cost: object,
    *,
    buffer_ctx: BufferEstimatorContext | None,
    reserve_decode: bool,
) -> DpAttentionScheduler:
    """``cfg.attn_dp_size`` schedulers, each over one rank's pools (``dep``'s pools are
    per rank: sim/sizing.py) with the per-rank config (``SimSettings.dp_rank_scheduler``),
    behind the controller ``cfg`` names. ``cost`` must price lockstep forwards
    (``breakdown_dp``), else a one-line :class:`SimConfigError`."""
    if not callable(getattr(cost, "breakdown_dp", None)):
        name = getattr(cost, "name", type(cost).__name__)
        raise SimConfigError(
            f"--enable-dp-attention: the {name} cost model cannot price a lockstep DP "
            "forward; use --cost-model roofline"
        )
    rank_cfg = cfg.dp_rank_scheduler()
    ranks = [
        build_scheduler(
            rank_cfg,
            dep.total_pages,
            dep.key_tokens,
            host_pages=dep.host_pages,
            buffer_ctx=buffer_ctx,
            reserve_decode=reserve_decode,
        )
        for _ in range(cfg.attn_dp_size)
    ]
    return DpAttentionScheduler(ranks, cfg.resolved_load_balance_method)


class DpAttentionScheduler:
    """N DP ranks' schedulers as one :class:`SchedulerInterface` (module docstring)."""

    def __init__(self, ranks: Sequence[SchedulerInterface], method: str) -> None:
        if not ranks:
            raise ValueError("DP attention needs at least one rank")
        self.ranks = list(ranks)
        self.controller = DpController(method, len(self.ranks))
        self._rank_of: dict[str, int] = {}  # every request a rank holds, until done
        self._reqs: dict[str, Request] = {}
        # The load SGLang's snapshot reports: requests waiting or running (not a PD
        # prefill's requests in KV transfer), with their prompt tokens (and their sum).
        self._load: list[dict[str, int]] = [{} for _ in self.ranks]
        self._load_tokens = [0] * len(self.ranks)
        self._in_flight: dict[int, list[tuple[int, StepOutput]]] = {}
        self._next_step = 0
        self._routed = [0] * len(self.ranks)
        self._batches = [0] * len(self.ranks)
        self._idle_rank_forwards = 0

    # ------------------------------------------------------------------ routing
    def rank_of(self, rid: str) -> int | None:
        """The rank holding request ``rid`` (None: none holds it). Pure."""
        return self._rank_of.get(rid)

    def _rank(self, req: Request) -> SchedulerInterface:
        return self.ranks[self._rank_of[req.rid]]

    def _drop(self, req: Request) -> None:
        """``req`` is done (finished, aborted or rejected): no rank holds it."""
        rank = self._rank_of.pop(req.rid, None)
        self._reqs.pop(req.rid, None)
        if rank is not None:
            self._unload(rank, req.rid)

    def _unload(self, rank: int, rid: str) -> None:
        """``rid`` no longer counts in ``rank``'s load."""
        self._load_tokens[rank] -= self._load[rank].pop(rid, 0)

    def add_request(self, req: Request) -> str | None:
        """Route ``req`` to a rank (the DP controller), then queue it there."""
        requests = [len(load) for load in self._load]
        rank = self.controller.route(req, req.arrival_time, requests, self._load_tokens)
        self._routed[rank] += 1
        reason = self.ranks[rank].add_request(req)
        if reason is None:
            self._rank_of[req.rid] = rank
            self._reqs[req.rid] = req
            self._load[rank][req.rid] = req.prompt_len
            self._load_tokens[rank] += req.prompt_len
        return reason

    @property
    def has_work(self) -> bool:
        return any(rank.has_work for rank in self.ranks)

    # ------------------------------------------------------------------ prefill
    def schedule(self, now: float) -> StepOutput:
        """Every rank with work runs its admission pass at ``now``; the non-empty
        batches run as one lockstep forward (module docstring)."""
        parts = [rank.schedule(now) if rank.has_work else _NO_WORK for rank in self.ranks]
        preempted = tuple(rid for part in parts for rid in part.preempted)
        for rid in preempted:
            req = self._reqs.get(rid)
            if req is not None and req.state.status is ReqStatus.REJECTED:
                self._drop(req)
        busy = [(i, part) for i, part in enumerate(parts) if part.reqs]
        if not busy:
            reason = next((p.stop_reason for p in parts if p is not _NO_WORK), _NO_WORK.stop_reason)
            wakes = [p.wake_at for p in parts if p.wake_at is not None]
            return StepOutput(0, (), reason, preempted=preempted, wake_at=min(wakes, default=None))
        self._next_step += 1
        self._in_flight[self._next_step] = busy
        for i, _ in busy:
            self._batches[i] += 1
        self._idle_rank_forwards += len(parts) - len(busy)
        return _combined(self._next_step, parts, busy[0][1], preempted)

    def forward_done(self, step: StepOutput, now: float) -> list[Request]:
        """Each rank's part of the step is done, in rank order."""
        if step.step_id == 0:
            return []
        busy = self._in_flight.pop(step.step_id, None)
        if busy is None:
            raise ValueError(f"step {step.step_id} is not in flight")
        done: list[Request] = []
        for i, part in busy:
            done += self.ranks[i].forward_done(part, now)
        return done

    def page_table(self, req: Request) -> list[int]:
        """Page ids in ``req``'s rank's pool (each rank numbers its own pages)."""
        return self._rank(req).page_table(req)

    def begin_transfer(self, req: Request) -> None:
        self._rank(req).begin_transfer(req)
        self._unload(self._rank_of[req.rid], req.rid)

    # ------------------------------------------------------------------ decode
    def start_decode(self, req: Request) -> None:
        self._rank(req).start_decode(req)

    def decode_load(self) -> tuple[int, int]:
        """Every rank's decoding requests and their context, summed."""
        n = ctx = 0
        for rank in self.ranks:
            r_n, r_ctx = rank.decode_load()
            n += r_n
            ctx += r_ctx
        return n, ctx

    def decode_step(self, now: float) -> tuple[list[Request], list[Request]]:
        """One decode step on every rank that has decoding requests."""
        finished: list[Request] = []
        retracted: list[Request] = []
        for rank in self.ranks:
            if rank.decode_load()[0] == 0:
                continue
            r_finished, r_retracted = rank.decode_step(now)
            finished += r_finished
            retracted += r_retracted
        for req in finished:
            self._drop(req)
        for req in retracted:
            if req.state.status is ReqStatus.REJECTED:
                self._drop(req)
        return finished, retracted

    # ------------------------------------------------------------------ the end
    def finish(self, req: Request, now: float) -> None:
        self._rank(req).finish(req, now)
        self._drop(req)

    def abort(self, req: Request, now: float) -> None:
        rank = self._rank_of.get(req.rid)
        if rank is not None:
            self.ranks[rank].abort(req, now)
        self._drop(req)

    # ------------------------------------------------------------------ hooks
    def set_admission_observer(self, obs: AdmissionObserver | None) -> None:
        for rank in self.ranks:
            rank.set_admission_observer(obs)

    def set_kv_listener(self, listener: KVListener | None) -> None:
        for rank in self.ranks:
            rank.set_kv_listener(listener)

    def counters(self) -> dict[str, Any]:
        """The ranks' counters summed (``affinity_max_*``: the largest), plus per rank
        the requests routed to it and its batches, and the ranks idle in a forward."""
        out = merge_counters(rank.counters() for rank in self.ranks)
        for i, (routed, batches) in enumerate(zip(self._routed, self._batches, strict=True)):
            out[f"dp_rank{i}_requests"] = routed
            out[f"dp_rank{i}_batches"] = batches
        out["dp_idle_rank_forwards"] = self._idle_rank_forwards
        return out

    def num_pending(self) -> int:
        return sum(rank.num_pending() for rank in self.ranks)

    def check(self) -> None:
        for rank in self.ranks:
            rank.check()


def _combined(
    step_id: int,
    parts: list[StepOutput],
    lead: StepOutput,
    preempted: tuple[str, ...],
) -> StepOutput:
    """One step of every rank's part (``lead``: the first non-empty one): their requests
    in rank order, tallies summed, the temporary buffer the largest (each rank's is on
    its own GPUs), the stop reason and lead class the lead's."""
    return StepOutput(
        step_id,
        tuple(r for part in parts for r in part.reqs),
        lead.stop_reason,
        extend_tokens=sum(p.extend_tokens for p in parts),
        cached_tokens=sum(p.cached_tokens for p in parts),
        load_back_tokens=sum(p.load_back_tokens for p in parts),
        buffer_bytes=max(p.buffer_bytes for p in parts),
        lead_class=lead.lead_class,
        has_chunked=any(p.has_chunked for p in parts),
        waiting_len=sum(p.waiting_len for p in parts),
        skips=sum(p.skips for p in parts),
        stops=sum(p.stops for p in parts),
        stop_bound=next((p.stop_bound for p in parts if p.stop_bound is not None), None),
        preempted=preempted,
        dp_rank_sizes=tuple(len(p.reqs) for p in parts),
    )
