# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The scheduler: waiting queue, admission pass, and KV lifecycle of requests.

This is the one narrow interface an engine (the simulator, or a real one) talks to:

- ``add_request(req)``: a request arrived; returns a rejection reason if it can never fit.
- ``get_new_batch_prefill(now)``: run one admission pass; returns a :class:`PrefillBatch`
  with its pages allocated, or None.
- ``prefill_done(batch)``: the forward finished: cache computed pages, move locks,
  keep the chunked request; returns requests whose whole prompt is now computed.
- ``release(req)``: a request no longer needs its KV (pd-prefill: transfer done;
  colocated: decoding finished).
- ``decode_step()`` (colocated): grow decoding requests by one token, retracting
  requests when memory runs out.

It imports nothing from the simulator: an engine can embed it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from prefillkit.cache.events import KVListener
from prefillkit.cache.host import HostTier
from prefillkit.cache.invariants import check_invariants
from prefillkit.cache.node import Node
from prefillkit.cache.pages import empty_table, global_ids, pending_table
from prefillkit.cache.pool import KVPool, lane_split
from prefillkit.cache.prefix import LoadBack, PrefixCache
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.adder import AddReqResult, AdmissionLimits, CloseReason, PrefillAdder
from prefillkit.sched.affinity import (
    AffinityBound,
    AffinityBounds,
    AffinityDecision,
    BatchLead,
    ReqClass,
    classify,
    decide,
    tripped_bound,
)
from prefillkit.sched.buffer import BufferEstimatorContext
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.interface import (
    AdmissionEvent,
    AdmissionObserver,
    ScheduledReq,
    StepOutput,
    limit_of,
)
from prefillkit.sched.lpm_order import LpmOrder
from prefillkit.sched.matching import refresh_match
from prefillkit.sched.policy import order_waiting
from prefillkit.sched.preempt import pick_victims


@dataclass(slots=True, init=False)
class PrefillBatch:
    """One admitted prefill batch. Per-request shapes are on the requests
    (``prefix_len``, ``extend_input_len``, ``loaded_tokens``) until ``prefill_done``."""

    reqs: list[Request]
    load_backs: list[LoadBack]
    extend_tokens: int
    cached_tokens: int
    load_back_tokens: int
    buffer_bytes: int
    lead_class: str  # warm | cold | none
    closed_by: str
    has_chunked: bool
    waiting_len: int
    policy_used: str
    # Affinity, this pass: cold requests skipped (W counts them); ``defers`` is the
    # requests deferred by this pass, equal to ``skips`` by construction (a request is
    # skipped at most once per pass); ``stops``: 0 or 1, ``stop_bound`` the bound that
    # tripped ("W", "K" or "T").
    skips: int = 0
    defers: int = 0
    stops: int = 0
    stop_bound: str | None = None
    preempted: list[Request] = field(default_factory=list)
    # Upstream's counters as upstream counts them (see PrefillAdder): raw extends, and
    # prefixes of newly admitted requests (0 for a chunked continuation). prefillkit's
    # own: ``extend_tokens`` (page-ceiled) and ``cached_tokens`` (true prefixes).
    log_input_tokens: int = 0
    log_hit_tokens: int = 0

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        reqs: list[Request],
        load_backs: list[LoadBack],
        extend_tokens: int,
        cached_tokens: int,
        load_back_tokens: int,
        buffer_bytes: int,
        lead_class: str,
        closed_by: str,
        has_chunked: bool,
        waiting_len: int,
        policy_used: str,
        skips: int = 0,
        defers: int = 0,
        stops: int = 0,
        stop_bound: str | None = None,
        preempted: list[Request] | None = None,
        log_input_tokens: int = 0,
        log_hit_tokens: int = 0,
    ) -> None:
        self.reqs = reqs
        self.load_backs = load_backs
        self.extend_tokens = extend_tokens
        self.cached_tokens = cached_tokens
        self.load_back_tokens = load_back_tokens
        self.buffer_bytes = buffer_bytes
        self.lead_class = lead_class
        self.closed_by = closed_by
        self.has_chunked = has_chunked
        self.waiting_len = waiting_len
        self.policy_used = policy_used
        self.skips = skips
        self.defers = defers
        self.stops = stops
        self.stop_bound = stop_bound
        self.preempted = [] if preempted is None else preempted
        self.log_input_tokens = log_input_tokens
        self.log_hit_tokens = log_hit_tokens


@dataclass(slots=True)
class SchedulerStats:
    """Run-long counters. Affinity counters name what they count:

    - ``affinity_skips``: skip decisions (a cold request left queued behind a warm lead);
      ``affinity_defers``: request-passes deferred, equal to ``affinity_skips`` by
      construction (kept for its readers); ``affinity_deferred_requests``: distinct
      requests deferred at least once;
    - W: ``affinity_skip_passes`` (passes with a skip), ``affinity_max_skips_in_pass``;
    - K: ``affinity_max_deferred_passes`` (most passes any one request was deferred);
    - ``affinity_stops`` and, by the bound that tripped, ``affinity_stops_w`` /
      ``_k`` / ``_t`` (W checked first, then K, then T).

    ``empty_passes``: passes that admitted nothing, by :class:`CloseReason` value (an
    empty queue, memory, the request-slot limit, or the limit that closed the pass).
    ``log_input_tokens`` / ``log_hit_tokens``: upstream's counters summed over batches.
    """

    passes: int = 0
    affinity_skips: int = 0
    affinity_defers: int = 0
    affinity_deferred_requests: int = 0
    affinity_skip_passes: int = 0
    affinity_max_skips_in_pass: int = 0
    affinity_max_deferred_passes: int = 0
    affinity_stops: int = 0
    affinity_stops_w: int = 0
    affinity_stops_k: int = 0
    affinity_stops_t: int = 0
    preemptions: int = 0
    retractions: int = 0
    rejected: int = 0
    empty_passes: dict[str, int] = field(default_factory=dict)
    log_input_tokens: int = 0
    log_hit_tokens: int = 0


def build_limits(
    cfg: SchedulerConfig, buffer_ctx: BufferEstimatorContext | None
) -> AdmissionLimits:
    if cfg.cp_size > 1:
        cp_mode = "bs_gt1" if cfg.enable_cp_shared_kv_prefill_bs_gt1 else "bs1"
    else:
        cp_mode = "off"
    return AdmissionLimits(
        page_size=cfg.page_size,
        max_prefill_tokens=cfg.max_prefill_tokens,
        chunked_prefill_size=cfg.chunked_prefill_size,
        clip_max_new_tokens=cfg.clip_max_new_tokens,
        cp_mode=cp_mode,
        cp_max_requests=cfg.cp_shared_kv_prefill_max_requests,
        cp_max_total_extend_tokens=cfg.cp_shared_kv_prefill_max_total_extend_tokens,
        cp_max_cached_tokens=cfg.cp_shared_kv_prefill_max_cached_tokens,
        cp_max_buffer_size=cfg.cp_shared_kv_prefill_max_buffer_size,
        cp_prefill_mix_chunked=cfg.cp_prefill_mix_chunked,
        ignore_eos_admission=cfg.enable_ignore_eos_admission,
        load_back_threshold=cfg.hicache_load_back_threshold,
        buffer_ctx=buffer_ctx,
        staging_identity=cfg.staging_identity() if cfg.cp_prefill_mix_chunked else None,
    )


def _owned_ids(req: Request) -> list[array[int]]:
    """Every page id ``req`` owns: its page table past the prefix, and the step in
    flight's pages."""
    if req.pending_pages is None:
        return req.owned_pages
    new = pending_table(req.pending_pages)
    if not req.owned_pages:
        return new
    return [a + b for a, b in zip(req.owned_pages, new, strict=True)]


class Scheduler:
    def __init__(
        self,
        cfg: SchedulerConfig,
        total_pages: int,
        key_tokens: int,
        *,
        host_pages: int = 0,
        buffer_ctx: BufferEstimatorContext | None = None,
        reserve_decode: bool = True,
    ) -> None:
        self.cfg = cfg
        page_size = cfg.page_size
        self.page_size = page_size
        lanes = cfg.cp_size if cfg.enable_cp_shared_kv else 1
        self.pool = KVPool(total_pages, page_size, lanes)
        host = (
            HostTier(host_pages, cfg.hicache_write_policy, cfg.hicache_write_through_threshold)
            if cfg.enable_hierarchical_cache
            else None
        )
        self.cache = PrefixCache(self.pool, key_tokens, host)
        self.limits = build_limits(cfg, buffer_ctx)
        self.reserve_decode = reserve_decode
        # NOTE: insertion-ordered = arrival order; O(1) removal of admitted requests.
        self._waiting: dict[Request, None] = {}
        self._last_arrival = float("-inf")
        self.chunked_req: Request | None = None
        self.running: dict[str, Request] = {}  # every request holding KV
        self.decoding: list[Request] = []
        self.max_running_requests = cfg.max_running_requests or max(
            1, min(4096, total_pages * page_size // 2)
        )
        self.init_new_token_ratio = min(
            cfg.init_new_token_ratio * cfg.schedule_conservativeness, 1.0
        )
        self.min_new_token_ratio = self.init_new_token_ratio * cfg.min_new_token_ratio_factor
        self.new_token_ratio_decay = (
            self.init_new_token_ratio - self.min_new_token_ratio
        ) / cfg.new_token_ratio_decay_steps
        self.new_token_ratio = self.init_new_token_ratio
        self.affinity_on = cfg.enable_affinity and not cfg.enable_priority_scheduling
        self.affinity_bounds = AffinityBounds(
            cfg.affinity_warm_floor_tokens,
            cfg.affinity_skip_window,
            cfg.affinity_max_head_defers,
            cfg.affinity_max_age_s,
        )
        # Requests that tripped an affinity bound lead the next pass.
        self.affinity_promoted: list[Request] = []
        # Passes that would admit nothing because every slot is taken are skipped (see
        # _slot_pass_is_idle) and counted. NOTE: False runs each of them in full, with
        # the same decisions and counters (tests compare the two in lockstep).
        self.skip_idle_passes = True
        self.idle_passes_skipped = 0
        # The wait bound (policy.order_waiting): requests this old go first, oldest first.
        # With affinity on, its age bound T is a wait bound too: a cold request T old is
        # at the front of any ordering, where no warm lead can skip it.
        max_wait = cfg.schedule_max_wait_s
        if self.affinity_on:
            t = self.affinity_bounds.max_age_s
            if max_wait is None or t < max_wait:
                max_wait = t
        self.max_wait_s = max_wait
        # LPM without priority keeps its order across passes (sched/lpm_order.py).
        self._lpm: LpmOrder | None = (
            LpmOrder(self.cache, aging=max_wait is not None)
            if cfg.schedule_policy == "lpm" and not cfg.enable_priority_scheduling
            else None
        )
        self.stats = SchedulerStats()
        # Empty StepOutputs by (stop reason, queue length), reused (see schedule()).
        self._empty_steps: dict[tuple[CloseReason, int], StepOutput] = {}
        # Why the last admission pass stopped (for an empty pass: why nothing was admitted).
        self.last_pass_reason: CloseReason | None = None
        # Called with every admission decision (set_admission_observer); NOTE: None costs
        # one test per candidate.
        self.admission_observer: AdmissionObserver | None = None

    # ------------------------------------------------------------------ arrival
    def never_fits_reason(self, req: Request) -> str | None:
        """Why ``req`` can never be admitted (None if it can); the reason says which test.

        Rejected on arrival is only what can never pass admission even on an empty pool:

        - the admission memory test ``prompt + min(max_new, clip) + one page <
          rem_total_tokens`` (a cached prefix does not help: under its lock it leaves
          the evictable pool by as much as it shortens the extend);
        - with CP, the prompt's pages must fit their owner lanes (page j in lane j mod R).

        A requeued request (retracted or preempted) is tested again, its prompt now with
        the output it keeps (:meth:`_retract`).

        Everything else waits, as upstream waits. Deviation (README): with decode
        reservation on (colocated), prompt + the whole output must also fit the pool (per
        owner lane): the decode could never finish it, and this engine has no
        out-of-memory abort; upstream admits it.
        """
        p = self.page_size
        pool = self.pool
        cp = pool.cp_size
        lanes_note = f" ({cp} owner lanes)" if cp > 1 else ""
        pages = -(-req.input_len // p)
        lanes = lane_split(0, pages, cp)
        if any(n > cap for n, cap in zip(lanes, pool.capacity, strict=True)):
            return f"needs {pages} KV pages but the pool holds {pool.total_pages}{lanes_note}"
        # NOTE: as the adder reserves: the output still to come (a requeued request keeps
        # its output), clipped.
        reserved = min(req.max_new_tokens - req.output_len, self.cfg.clip_max_new_tokens)
        need = req.input_len + reserved + p
        if need >= pool.total_pages * p:
            return (
                f"prompt + reserved output ({reserved}, clipped at "
                f"{self.cfg.clip_max_new_tokens}) + one page = {need} tokens is not below "
                f"the KV pool ({pool.total_pages * p} tokens): the admission memory test "
                "can never pass, even on an empty pool"
            )
        if self.reserve_decode:
            seq_pages = -(-(req.prompt_len + req.max_new_tokens) // p)
            lanes = lane_split(0, seq_pages, cp)
            if any(n > cap for n, cap in zip(lanes, pool.capacity, strict=True)):
                return (
                    f"prompt + whole output needs {seq_pages} KV pages but the pool holds "
                    f"{pool.total_pages}{lanes_note}: its decode could never finish"
                )
        return None

    def add_request(self, req: Request) -> str | None:
        """Queue an arrived request; returns a rejection reason if it can never fit."""
        reason = self.never_fits_reason(req)
        if reason is not None:
            req.status = ReqStatus.REJECTED
            req.reject_reason = reason
            self.stats.rejected += 1
            return reason
        req.status = ReqStatus.WAITING
        # Match once on arrival (like hashing): every later pass confirms or refreshes
        # this length from the hint instead of binary-searching from scratch.
        req.match_node = None  # NOTE: any node of another cache is void here
        refresh_match(self.cache, req)
        self._enqueue(req)
        return None

    def _enqueue(self, req: Request) -> None:
        if req.arrival_time >= self._last_arrival:
            self._waiting[req] = None
            self._last_arrival = req.arrival_time
            if self._lpm is not None:
                self._lpm.add(req)
        else:  # a preempted/retracted request goes back to its arrival position (rare)
            reqs = sorted([*self._waiting, req], key=lambda r: r.arrival_time)
            self._waiting = dict.fromkeys(reqs)
            if self._lpm is not None:
                self._lpm.requeue(req, reqs)

    @property
    def waiting(self) -> list[Request]:
        """The waiting queue in arrival order (a copy)."""
        return list(self._waiting)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting) or self.chunked_req is not None

    # ------------------------------------------------------------------ the pass
    def admission_pass(self, now: float) -> tuple[PrefillBatch | None, CloseReason]:
        """Run one admission pass; return the batch (None if empty) and why it stopped.

        An empty pass says why nothing was admitted: ``QUEUE_EMPTY``, ``MEMORY``
        (NO_TOKEN), ``MAX_RUNNING_REQUESTS`` (request-slot limit), or the limit that
        closed it (OTHER: e.g. ``CHUNK_BUDGET``)."""
        batch = self.get_new_batch_prefill(now)
        assert self.last_pass_reason is not None
        return batch, self.last_pass_reason

    def _empty_pass(self, reason: CloseReason) -> None:
        """Record a pass that admitted nothing (``last_pass_reason`` + the counter)."""
        self.last_pass_reason = reason
        counts = self.stats.empty_passes
        key: str = reason._value_  # NOTE: .value is a descriptor, a dict lookup hashes in Python
        counts[key] = counts.get(key, 0) + 1

    def get_new_batch_prefill(self, now: float) -> PrefillBatch | None:
        """Run one admission pass. The batch's pages are allocated on return.

        None when nothing was admitted; ``last_pass_reason`` then says why (see
        :meth:`admission_pass`)."""
        if not self._waiting and self.chunked_req is None:
            self._empty_pass(CloseReason.QUEUE_EMPTY)
            return None
        if self.skip_idle_passes and self._slot_pass_is_idle():
            self.idle_passes_skipped += 1
            # The pass this replaces would end in its first scan step with
            # MAX_RUNNING_REQUESTS and nothing admitted (see _slot_pass_is_idle); its
            # only effects are these counters and the promoted-list filter below.
            self.stats.passes += 1
            if self.affinity_promoted:
                self.affinity_promoted = [
                    r for r in self.affinity_promoted if r.status is ReqStatus.WAITING
                ]
            self._empty_pass(CloseReason.MAX_RUNNING_REQUESTS)
            return None
        cfg = self.cfg
        cache = self.cache
        self.stats.passes += 1
        adder = PrefillAdder(
            cache,
            self.limits,
            self.decoding if self.reserve_decode else [],
            self.new_token_ratio,
        )
        lead = BatchLead.EMPTY
        chunked = self.chunked_req
        if chunked is not None:
            adder.add_chunked_req(chunked)
            if not adder.can_run_list:
                # No page can be allocated until in-flight requests finish.
                self._empty_pass(CloseReason.MEMORY)
                return None
            lead = BatchLead.WARM  # NOTE: a continuation carries its true prefix
        max_wait = self.max_wait_s
        order: Iterable[Request]
        lpm = self._lpm
        if lpm is not None:
            # order_waiting's lpm order, kept across passes (the same order: check()).
            # NOTE: kept current even under the fallback (what the cache recorded is
            # drained), so it costs what changed, not what accumulated.
            order = lpm.order(None if max_wait is None else now - max_wait)
            policy_used = "lpm"
            fallback = cfg.lpm_fallback_queue_len
            if fallback is not None and len(self._waiting) > fallback:
                order = self._waiting  # NOTE: as above, the scan leaves the queue alone
                policy_used = "fcfs"
        elif cfg.schedule_policy == "fcfs" and not cfg.enable_priority_scheduling:
            # order_waiting's fcfs order is the queue itself (the wait bound is a no-op
            # under fcfs): scan the arrival-ordered dict, no O(N) copy. Safe: without
            # priority nothing in the scan adds to or removes from self._waiting
            # (_try_preempt returns None at once; admitted requests leave it in
            # _launch, after the scan), and a change would raise, not pass silently.
            order = self._waiting
            policy_used = "fcfs"
        else:
            order, policy_used = order_waiting(
                list(self._waiting),
                cfg.schedule_policy,
                cache,
                priority=cfg.enable_priority_scheduling,
                low_priority_values_first=cfg.schedule_low_priority_values_first,
                lpm_fallback_queue_len=cfg.lpm_fallback_queue_len,
                seed=cfg.seed,
                now=now,
                max_wait_s=max_wait,
                priority_aging=cfg.enable_priority_aging,
            )
        promoted: list[Request] = []
        if self.affinity_promoted:
            promoted = [r for r in self.affinity_promoted if r.status is ReqStatus.WAITING]
            ids = {id(r) for r in promoted}
            order = chain(promoted, (r for r in order if id(r) not in ids))
            self.affinity_promoted = []
        kt = cache.key_tokens
        floor = self.affinity_bounds.warm_floor_tokens
        affinity_on = self.affinity_on
        match_node = cache.match_node
        cls = ReqClass.COLD
        can_run = adder.can_run_list
        CONTINUE = AddReqResult.CONTINUE  # enum members hoisted out of the hot loop
        EMPTY = BatchLead.EMPTY
        skipped: list[Request] = []
        stops = 0
        stop_bound: AffinityBound | None = None
        preempted: list[Request] = []
        closed: CloseReason | None = None
        slots = self.max_running_requests - len(self.running)
        obs = self.admission_observer
        if chunked is not None:
            slots += 1  # the continuation already holds a slot in self.running
        # NOTE: after a CONTINUE verdict the budgets are known to be open; only the
        # chunked continuation (admitted before the scan) needs an explicit check.
        check_budget = chunked is not None
        for req in order:
            if check_budget:
                check_budget = False
                if adder.budget_state() is not AddReqResult.CONTINUE:
                    closed = adder.closed_by
                    break
            if len(can_run) >= slots:
                victims = self._try_preempt(
                    req, adder, slots_needed=1, tokens_needed=self._shortfall(req, adder)
                )
                if victims is None:
                    closed = CloseReason.MAX_RUNNING_REQUESTS
                    break
                preempted.extend(victims)
                slots += len(victims)
            h = refresh_match(cache, req)
            # NOTE: refresh_match always leaves match_node set.
            match = match_node(req.match_node, h)  # type: ignore[arg-type]
            if affinity_on or lead is EMPTY:
                cls = classify(match.device_units * kt, match.host_units * kt, floor)
            if affinity_on:
                decision = decide(
                    cls,
                    lead,
                    len(skipped),
                    req.head_defers,
                    now - req.arrival_time,
                    self.affinity_bounds,
                )
                if decision is AffinityDecision.SKIP:
                    skipped.append(req)
                    if obs is not None:
                        self._observe(obs, adder, "skip", now, req, None, False, None)
                    continue
                if decision is AffinityDecision.STOP:
                    stops += 1
                    stop_bound = tripped_bound(
                        len(skipped), req.head_defers, now - req.arrival_time, self.affinity_bounds
                    )
                    self.affinity_promoted.append(req)
                    closed = CloseReason.AFFINITY_STOP
                    break
            res = adder.add_one_req(req, match)
            # NOTE: CONTINUE means admitted with the budgets still open; any other
            # verdict may follow an admission that closed a budget.
            admitted = res is CONTINUE or (bool(can_run) and can_run[-1] is req)
            if res is AddReqResult.NO_TOKEN and not admitted:
                # Shortfall of the memory test (input - device prefix + max_new + page
                # must stay below rem_total_tokens); at least one token.
                need = (
                    req.input_len
                    - match.device_units * kt
                    + min(req.max_new_tokens, cfg.clip_max_new_tokens)
                    + self.page_size
                )
                shortfall = max(1, int(need - adder.rem_total_tokens) + 1)
                victims = self._try_preempt(
                    req, adder, slots_needed=0, tokens_needed=shortfall, on_no_token=True
                )
                if victims:
                    preempted.extend(victims)
                    slots += len(victims)
                    adder.closed_by = None  # the failed attempt no longer closes the batch
                    res = adder.add_one_req(req)
                    admitted = bool(can_run) and can_run[-1] is req
            if admitted and lead is EMPTY:
                lead = BatchLead.WARM if cls is ReqClass.WARM else BatchLead.COLD
            if obs is not None:
                self._observe(obs, adder, "candidate", now, req, res.name, admitted, None)
            if res is not CONTINUE:
                closed = adder.closed_by
                break
        else:
            closed = adder.closed_by or CloseReason.QUEUE_EMPTY
        if obs is not None:
            reason = (closed or CloseReason.QUEUE_EMPTY).value
            self._observe(obs, adder, "stop", now, None, None, False, reason)
        if promoted:
            # A promoted request keeps the lead until it is admitted (a lead that does not
            # fit yet, e.g. NO_TOKEN, must not be overtaken by the warm requests behind it).
            held = {id(r) for r in adder.can_run_list} | {id(r) for r in self.affinity_promoted}
            kept = [r for r in promoted if id(r) not in held]
            self.affinity_promoted[:0] = kept
        if skipped or stops:
            self._count_affinity(skipped, stop_bound)
        if not adder.can_run_list:
            self._empty_pass(closed or CloseReason.QUEUE_EMPTY)
            return None
        self.last_pass_reason = closed or CloseReason.QUEUE_EMPTY
        batch = self._launch(adder, lead, closed, policy_used, len(skipped), stops, preempted, now)
        batch.stop_bound = None if stop_bound is None else stop_bound._value_
        return batch

    def _slot_pass_is_idle(self) -> bool:
        """Whether a full pass would admit nothing because every request slot is taken.

        Called with a non-empty queue. Then the full pass, with no chunked continuation
        (which would add a slot back and run first), starts its scan at a request with
        ``len(can_run) = 0 >= slots = max_running_requests - len(running)``; without
        priority preemption ``_try_preempt`` returns None at once, so the scan breaks
        with MAX_RUNNING_REQUESTS before any match, affinity decision or admission. Its
        other work is free of effects only when the ordering is: fcfs keeps the queue
        order, lof and priority sort a copy, lpm's kept order drains the cache's changes
        and ages requests (the next pass does the same with the same result: its order
        is a function of the queue, the cache and the time), dfs-weight only refreshes
        match hints (a cache of a function of the cache); random draws from its
        generator, so it still runs the pass. What remains of the pass: ``passes`` and
        the empty-pass counter, ``last_pass_reason``, and ``affinity_promoted`` reduced
        to its WAITING requests (the pass takes them out and puts back those it did not
        admit)."""
        if self.chunked_req is not None or len(self.running) < self.max_running_requests:
            return False
        cfg = self.cfg
        if cfg.enable_priority_scheduling:
            return not cfg.enable_priority_preemption
        return cfg.schedule_policy in ("fcfs", "lof", "lpm", "dfs-weight")

    @staticmethod
    def _observe(
        obs: AdmissionObserver,
        adder: PrefillAdder,
        kind: str,
        now: float,
        req: Request | None,
        result: str | None,
        admitted: bool,
        reason: str | None,
    ) -> None:
        obs(
            AdmissionEvent(
                kind,
                now,
                None if req is None else req.rid,
                result,
                admitted,
                reason,
                adder.rem_total_tokens,
                adder.rem_input_tokens,
                adder.rem_chunk_tokens,
            )
        )

    def _count_affinity(self, skipped: list[Request], stop_bound: AffinityBound | None) -> None:
        """Affinity counters of one pass (see :class:`SchedulerStats`)."""
        st = self.stats
        n = len(skipped)
        for req in skipped:
            req.head_defers += 1
            if req.head_defers == 1:
                st.affinity_deferred_requests += 1
            if req.head_defers > st.affinity_max_deferred_passes:
                st.affinity_max_deferred_passes = req.head_defers
        st.affinity_skips += n
        st.affinity_defers += n  # one deferral per skipped request and pass
        if n:
            st.affinity_skip_passes += 1
            st.affinity_max_skips_in_pass = max(st.affinity_max_skips_in_pass, n)
        if stop_bound is not None:
            st.affinity_stops += 1
            if stop_bound is AffinityBound.WINDOW:
                st.affinity_stops_w += 1
            elif stop_bound is AffinityBound.DEFERS:
                st.affinity_stops_k += 1
            else:
                st.affinity_stops_t += 1

    def _launch(
        self,
        adder: PrefillAdder,
        lead: BatchLead,
        closed: CloseReason | None,
        policy_used: str,
        skips: int,
        stops: int,
        preempted: list[Request],
        now: float,
    ) -> PrefillBatch:
        """Allocate the admitted requests' pages (``prepare_for_extend``)."""
        p = self.page_size
        running = self.running
        waiting = self._waiting
        lpm = self._lpm
        prefilling = ReqStatus.PREFILLING
        waiting_status = ReqStatus.WAITING
        # One eviction for the whole batch: the adder planned exactly these pages per
        # owner lane (and checked they fit free + evictable), so LRU eviction takes the
        # same nodes as allocating request by request would.
        if not self.cache.make_room(adder.planned_lanes):  # pragma: no cover
            raise AssertionError(f"allocation of {adder.planned_lanes} failed after admission")
        can_run = adder.can_run_list
        cp = self.pool.cp_size
        # One block of page ids per owner lane for the whole batch: exactly the pages
        # the adder planned. Each request's new pages are a run of it (pending_pages)
        # until prefill_done moves them into its page table.
        blocks = self.pool.take_owned(adder.planned_lanes)
        if blocks is None:  # pragma: no cover - make_room covered the planned pages
            raise AssertionError(f"allocation of {adder.planned_lanes} failed after admission")
        offs = [0] * cp
        for req in can_run:
            if req.status is waiting_status:
                req.owned_start_page = req.owned_end_page = req.prefix_len // p
                if req.first_scheduled_time is None:
                    # Queueing and hits are those of the first scheduling: a requeued
                    # request's re-prefill does not move them.
                    req.first_scheduled_time = now
                    req.device_hit_tokens = req.device_prefix_len
                    req.host_hit_tokens = req.loaded_tokens
                req.status = prefilling
                running[req.rid] = req
                del waiting[req]
                if lpm is not None:
                    lpm.remove(req)
            # NOTE: prefix_len is page aligned for a new request (a key-unit multiple)
            # and a continuation's prefix ends where its owned pages end.
            start = req.owned_end_page
            end = -(-(req.prefix_len + req.extend_input_len) // p)
            if cp == 1:
                o = offs[0]
                offs[0] = o + end - start
                req.pending_pages = (blocks, [o], [end - start])
            else:
                counts = lane_split(start, end - start, cp)
                req.pending_pages = (blocks, offs[:], counts)
                for i, n in enumerate(counts):
                    offs[i] += n
            req.owned_end_page = end
            req.num_chunks += 1
            if req.requeued_time is not None:  # a re-prefill after a requeue
                req.requeue_recomputed_tokens += req.extend_input_len
        for v in preempted:  # requeued by this pass: their lost time starts now
            v.requeued_time = now
        # NOTE: a continuation is always admitted first, before the scan.
        self.chunked_req = adder.new_chunked_req or (
            self.chunked_req if can_run and can_run[0] is self.chunked_req else None
        )
        stats = self.stats
        stats.log_input_tokens += adder.log_input_tokens
        stats.log_hit_tokens += adder.log_hit_tokens
        return PrefillBatch(
            reqs=list(adder.can_run_list),
            load_backs=adder.load_backs,
            extend_tokens=adder.batch_extend_tokens,
            cached_tokens=adder.batch_cached_tokens,
            load_back_tokens=adder.batch_load_back_tokens,
            buffer_bytes=adder.batch_buffer_bytes(),
            # NOTE: no enum-keyed lookups here: an Enum hashes in Python (__hash__).
            lead_class=(
                "warm" if lead is BatchLead.WARM else "cold" if lead is BatchLead.COLD else "none"
            ),
            closed_by=(closed or CloseReason.QUEUE_EMPTY)._value_,
            has_chunked=adder.has_chunked_req_in_batch,
            waiting_len=len(self._waiting),
            policy_used=policy_used,
            skips=skips,
            defers=skips,
            stops=stops,
            preempted=preempted,
            log_input_tokens=adder.log_input_tokens,
            log_hit_tokens=adder.log_hit_tokens,
        )

    # ------------------------------------------------------------------ interface
    def set_admission_observer(self, obs: AdmissionObserver | None) -> None:
        """Call ``obs`` with every admission decision (see AdmissionEvent); None: off."""
        self.admission_observer = obs

    def set_kv_listener(self, listener: KVListener | None) -> None:
        """Call ``listener`` with every KV-cache event (see cache/events.py); None: off."""
        self.cache.kv_listener = listener

    def schedule(self, now: float) -> StepOutput:
        """One admission pass as an immutable :class:`StepOutput` (see interface.py)."""
        batch = self.get_new_batch_prefill(now)
        reason = self.last_pass_reason
        assert reason is not None
        if batch is None:
            # NOTE: immutable, so one object per (reason, queue length) serves every
            # empty pass (a decode-only stretch asks for one per decode step).
            key = (reason, len(self._waiting))
            empty = self._empty_steps.get(key)
            if empty is None:
                if len(self._empty_steps) >= 64:
                    self._empty_steps.clear()
                empty = self._empty_steps[key] = StepOutput(
                    (), reason, limit_of(reason), waiting_len=key[1]
                )
            return empty
        u = self.cache.unit_pages
        root = self.cache.root
        copies = {id(lb.deepest): lb for lb in batch.load_backs}
        out: list[ScheduledReq] = []
        for req in batch.reqs:
            pending = req.pending_pages
            assert pending is not None  # NOTE: set by _launch for every request
            start = req.owned_end_page - sum(pending[2])
            owned = tuple([t[:] for t in req.owned_pages]) if req.owned_pages else ()
            node = req.locked_node
            lb = copies.get(id(node)) if req.loaded_tokens else None
            end = req.prefix_len + req.extend_input_len
            out.append(
                ScheduledReq(
                    req,
                    req.rid,
                    req.prefix_len,
                    req.loaded_tokens,
                    req.prefix_len,
                    end,
                    None if node is root else node,
                    0 if node is None else node.end * u,
                    u,
                    owned,
                    start,
                    pending,
                    () if lb is None else tuple(lb.copy_pairs()),
                    end < req.input_len,
                )
            )
        return StepOutput(
            tuple(out),
            reason,
            limit_of(reason),
            extend_tokens=batch.extend_tokens,
            cached_tokens=batch.cached_tokens,
            load_back_tokens=batch.load_back_tokens,
            buffer_bytes=batch.buffer_bytes,
            lead_class=batch.lead_class,
            has_chunked=batch.has_chunked,
            waiting_len=batch.waiting_len,
            skips=batch.skips,
            defers=batch.defers,
            stops=batch.stops,
            stop_bound=batch.stop_bound,
            preempted=tuple(batch.preempted),
            handle=batch,
        )

    def forward_done(self, step: StepOutput, now: float) -> list[Request]:
        """The step's forward finished (see :meth:`prefill_done`)."""
        if step.handle is None:
            return []
        return self.prefill_done(step.handle, now)

    def page_table(self, req: Request) -> list[int]:
        """Engine-facing page ids of ``req``'s sequence pages (see interface.py)."""
        parts: list[Node] = []
        node = req.locked_node
        root = self.cache.root
        while node is not None and node is not root:
            parts.append(node)
            node = node.parent
        u = self.cache.unit_pages
        out: list[int] = []
        for n in reversed(parts):
            out += global_ids(n.pages, n.start * u)
        owned = _owned_ids(req)
        if owned:
            out += global_ids(owned, req.owned_start_page)
        return out

    def begin_transfer(self, req: Request) -> None:
        """pd-prefill: the request's KV is being sent out; it keeps its pages."""
        req.status = ReqStatus.TRANSFERRING

    def finish(self, req: Request, now: float) -> None:
        """The request no longer needs its KV (see :meth:`release`)."""
        self.release(req, now)

    def abort(self, req: Request, now: float) -> None:
        """Drop ``req`` wherever it is: queue, chunk, running, decode set."""
        self._waiting.pop(req, None)
        if self._lpm is not None:
            self._lpm.remove(req)
        if self.chunked_req is req:
            self.chunked_req = None
        if req in self.decoding:
            self.decoding.remove(req)
        self.affinity_promoted = [r for r in self.affinity_promoted if r is not req]
        self._free_kv(req)
        self.running.pop(req.rid, None)
        req.status = ReqStatus.ABORTED
        req.finish_time = now

    def decode_load(self) -> tuple[int, int]:
        """(decoding requests, their context tokens)."""
        dec = self.decoding
        return len(dec), sum(r.input_len + r.output_len for r in dec)

    def num_pending(self) -> int:
        """Requests waiting or mid-chunk."""
        return len(self._waiting) + (1 if self.chunked_req is not None else 0)

    def counters(self) -> dict[str, Any]:
        """Run-long counters, as the simulator's summary reports them."""
        st = self.stats
        return {
            "affinity_skips": st.affinity_skips,
            "affinity_defers": st.affinity_defers,  # request-passes deferred (= skips)
            "affinity_deferred_requests": st.affinity_deferred_requests,
            "affinity_skip_passes": st.affinity_skip_passes,
            "affinity_max_skips_in_pass": st.affinity_max_skips_in_pass,
            "affinity_max_deferred_passes": st.affinity_max_deferred_passes,
            "affinity_stops": st.affinity_stops,
            "affinity_stops_w": st.affinity_stops_w,
            "affinity_stops_k": st.affinity_stops_k,
            "affinity_stops_t": st.affinity_stops_t,
            "preemptions": st.preemptions,
            "retractions": st.retractions,
            "admission_passes": st.passes,
            # Passes that admitted nothing, in total and by why (CloseReason values).
            "empty_passes": sum(st.empty_passes.values()),
            **{f"empty_passes_{k}": st.empty_passes[k] for k in sorted(st.empty_passes)},
            # Upstream's log_input_tokens (raw extends) / log_hit_tokens (0 for a chunked
            # continuation), beside prefillkit's own page-ceiled/true-prefix batch tallies.
            "upstream_log_input_tokens": st.log_input_tokens,
            "upstream_log_hit_tokens": st.log_hit_tokens,
            "evicted_pages": self.cache.device_evicted_pages,
        }

    # ------------------------------------------------------------------ completion
    def prefill_done(self, batch: PrefillBatch, now: float) -> list[Request]:
        """Cache what the batch computed; return requests whose prompt is complete."""
        cache = self.cache
        kt = cache.key_tokens
        u = cache.unit_pages
        for lb in batch.load_backs:
            cache.finish_load_back(lb)
        done: list[Request] = []
        for req in batch.reqs:
            req.computed_tokens = req.prefix_len + req.extend_input_len
            units = min(req.computed_tokens // kt, len(req.keys))
            node = req.locked_node
            assert node is not None
            pending = req.pending_pages
            req.pending_pages = None
            if pending is not None and not req.owned_pages:
                # The common case: the request owns only this forward's pages, a run of
                # the batch's blocks: insert reads them there, the rest is sliced off.
                blocks, offs, counts = pending
                if units > node.end:
                    req.locked_node = cache.insert(node, req.keys, node.end, units, blocks, offs)
                    gone = lane_split(node.end * u, (units - node.end) * u, len(blocks))
                    req.owned_pages = [
                        b[o + g : o + c]
                        for b, o, g, c in zip(blocks, offs, gone, counts, strict=True)
                    ]
                    req.owned_start_page = units * u
                else:
                    req.owned_pages = pending_table(pending)
            else:
                owned = req.owned_pages
                if pending is not None:  # this forward's pages join the page table
                    new = pending_table(pending)
                    owned = [a + b for a, b in zip(owned, new, strict=True)]
                if units > node.end:
                    req.locked_node = cache.insert(node, req.keys, node.end, units, owned)
                    # The inserted head now belongs to the cache (or was freed).
                    gone = lane_split(node.end * u, (units - node.end) * u, len(owned))
                    req.owned_pages = [t[n:] for t, n in zip(owned, gone, strict=True)]
                    req.owned_start_page = units * u
                else:
                    # NOTE: new arrays, so that later chunks and decode (which grow
                    # owned_pages in place) never change a step's page snapshot.
                    req.owned_pages = [t[:] for t in owned]
            if req.computed_tokens >= req.input_len:
                if req.first_token_time is None:
                    # The first token's time is set once: a re-prefill never moves it.
                    req.first_token_time = now
                    req.output_len = 1 if req.max_new_tokens > 0 else 0
                else:
                    # Re-prefill of prompt + kept output after a requeue: it yields the
                    # next token, and the KV again holds prompt + output_len - 1 tokens.
                    # input_len and computed_tokens go back to the prompt, as after a
                    # first prefill (decode counts prompt + output_len).
                    req.output_len += 1
                    req.input_len = req.computed_tokens = req.prompt_len
                    if req.requeued_time is not None:
                        req.requeue_lost_s += now - req.requeued_time
                        req.requeued_time = None
                done.append(req)
                if self.chunked_req is req:
                    self.chunked_req = None
        return done

    def release(self, req: Request, now: float) -> None:
        """Free a request's pages and locks (its KV is no longer needed)."""
        self._free_kv(req)
        req.status = ReqStatus.FINISHED
        req.finish_time = now
        self.running.pop(req.rid, None)

    def _free_kv(self, req: Request) -> None:
        if req.owned_pages:
            self.pool.give_owned(req.owned_pages)
        if req.pending_pages is not None:
            self.pool.give_owned(pending_table(req.pending_pages))
            req.pending_pages = None
        req.owned_pages = []
        req.owned_start_page = req.owned_end_page = 0
        if req.locked_node is not None:
            self.cache.unlock(req.locked_node)
            req.locked_node = None

    # ------------------------------------------------------------------ decode
    def start_decode(self, req: Request) -> None:
        req.status = ReqStatus.DECODING
        self.decoding.append(req)

    def decode_step(self, now: float) -> tuple[list[Request], list[Request]]:
        """One decode step: every decoding request gains one output token.

        Oldest requests get memory first; when a page cannot be allocated the newest
        decoding request is retracted (KV freed, back to the queue), as upstream
        retracts from the tail: a newer one than the request short of memory, or that
        request itself when it is the newest. Under priority scheduling "oldest" and
        "newest" rank by priority first (see :meth:`_decode_rank`). Finished requests
        are released at once (their pages serve the rest of the step). Returns
        (finished, retracted).
        """
        p = self.page_size
        finished: list[Request] = []
        retracted: list[Request] = []
        for req in sorted(self.decoding, key=self._decode_rank):
            if req.status is not ReqStatus.DECODING:
                continue  # retracted earlier in this step
            if req.output_len >= req.max_new_tokens:  # nothing left to decode
                self.release(req, now)
                finished.append(req)
                continue
            # This step feeds output token ``output_len``: the KV then holds the prompt
            # and every output token so far.
            need = -(-(req.input_len + req.output_len) // p)
            while req.owned_end_page < need:
                if not req.owned_pages:
                    req.owned_pages = empty_table(self.pool.cp_size)
                if self.cache.alloc_page(req.owned_end_page, req.owned_pages):
                    req.owned_end_page += 1
                    continue
                victim = self._retract_victim(req, now)
                if victim is None:
                    break
                retracted.append(victim)
            if req.owned_end_page < need:
                self._retract(req, now)
                retracted.append(req)
                continue
            req.output_len += 1
            if req.output_len >= req.max_new_tokens:
                # Released at once: a finished request is never a retraction victim.
                self.release(req, now)
                finished.append(req)
        if finished or retracted:  # NOTE: else every request is still decoding
            self.decoding = [r for r in self.decoding if r.status is ReqStatus.DECODING]
        if retracted:
            self.stats.retractions += len(retracted)
            decoded = sum(r.output_len for r in self.decoding)
            total_new = sum(r.max_new_tokens for r in self.decoding)
            self.new_token_ratio = min(1.0, (decoded + 20 * len(self.decoding)) / (total_new + 1))
        else:
            self.new_token_ratio = max(
                self.new_token_ratio - self.new_token_ratio_decay, self.min_new_token_ratio
            )
        if not self.decoding:
            self.new_token_ratio = self.init_new_token_ratio
        return finished, retracted

    def _decode_rank(self, req: Request) -> tuple[float, float, str]:
        """Decode memory order: lower ranks get pages first and are retracted last.

        Arrival order; under priority scheduling the more important requests first.
        Without the priority term a retraction could evict the high-priority request
        that priority preemption had just admitted by preempting lower-priority ones,
        which then come back and are preempted again: a livelock in which neither side
        ever finishes.
        """
        if not self.cfg.enable_priority_scheduling:
            return (0.0, req.arrival_time, req.rid)
        sign = 1 if self.cfg.schedule_low_priority_values_first else -1
        return (float(sign * req.priority), req.arrival_time, req.rid)

    def _retract_victim(self, protect: Request, now: float) -> Request | None:
        """Retract the lowest-ranked (newest) decoding request ranked after ``protect``
        (None if none is: then ``protect`` itself is the last and is the one to go)."""
        key = self._decode_rank(protect)
        cands = [
            r
            for r in self.decoding
            if r.status is ReqStatus.DECODING and self._decode_rank(r) > key
        ]
        if not cands:
            return None
        victim = max(cands, key=self._decode_rank)
        self._retract(victim, now)
        return victim

    def _retract(self, req: Request, now: float | None = None, *, preempt: bool = False) -> None:
        """Requeue ``req`` (a retraction, or with ``preempt`` a priority preemption): its
        KV is freed, its output kept (see :meth:`Request.reset_for_requeue`)."""
        self._free_kv(req)
        self.running.pop(req.rid, None)
        req.reset_for_requeue(now)
        if preempt:
            req.preemptions += 1
        else:
            req.retractions += 1
        reason = self.never_fits_reason(req)
        if reason is not None:
            # Deviation (README): its re-prefill (prompt + kept output) can never pass
            # admission, so it is rejected here; upstream requeues it, and it waits at the
            # head of the queue for ever. The caller sees it among the requeued requests
            # (decode_step's retracted, StepOutput.preempted) with status REJECTED.
            req.status = ReqStatus.REJECTED
            req.reject_reason = f"requeued with {req.output_len} output tokens kept: {reason}"
            self.stats.rejected += 1
            return
        self._enqueue(req)

    # ------------------------------------------------------------------ preemption
    def _shortfall(self, req: Request, adder: PrefillAdder) -> int:
        """Tokens ``req`` lacks to pass the memory test now (0 if it passes).

        Its device prefix is taken as leaving the evictable pool under its lock (an upper
        bound: only its unlocked part does), so the prefix cancels out:
        ``input - prefix + reserved + page`` against ``rem_total_tokens - prefix``. No
        match needed; rare path (the request-slot limit)."""
        left = req.max_new_tokens - req.output_len  # output kept across a requeue
        need = req.input_len + min(left, self.cfg.clip_max_new_tokens)
        room = adder.rem_total_tokens - self.page_size
        return 0 if need < room else int(need - room) + 1

    def _held_tokens(self, v: Request) -> float:
        """Tokens that preempting ``v`` makes free or evictable: the pages it owns plus
        the pages of its locked prefix no other request locks."""
        pages = v.owned_end_page - v.owned_start_page
        node = v.locked_node
        root = self.cache.root
        while node is not None and node is not root:
            if node.lock_ref != 1:
                break  # NOTE: another lock ends in this subtree (cache/node.py), so above too
            pages += node.n_pages
            node = node.parent
        return float(pages * self.page_size)

    def _try_preempt(
        self,
        req: Request,
        adder: PrefillAdder,
        *,
        slots_needed: int,
        tokens_needed: int,
        on_no_token: bool = False,
    ) -> list[Request] | None:
        """Priority preemption of decoding requests to admit ``req``; None if not possible.

        ``on_no_token``: memory (NO_TOKEN), not the slot limit, blocks ``req``; upstream
        never preempts then, prefillkit does with ``enable_preempt_on_no_token``. The
        victims' decode reservations leave the pass's ``rem_total_tokens`` offset.
        """
        cfg = self.cfg
        if not (cfg.enable_priority_scheduling and cfg.enable_priority_preemption):
            return None
        if on_no_token and not cfg.enable_preempt_on_no_token:
            return None
        clip = cfg.clip_max_new_tokens

        def reserved(v: Request) -> float:
            """Decode room the adder reserved for ``v`` (its rem_total_tokens offset)."""
            if not self.reserve_decode:
                return 0.0
            ratio = 1.0 if v.ignore_eos else adder.new_token_ratio
            return min(v.max_new_tokens - v.output_len, clip) * ratio

        victims = pick_victims(
            req,
            [r for r in self.decoding if r.status is ReqStatus.DECODING],
            slots_needed=slots_needed,
            tokens_needed=tokens_needed,
            threshold=cfg.priority_scheduling_preemption_threshold,
            low_values_first=cfg.schedule_low_priority_values_first,
            reserved=reserved,
            held=self._held_tokens,
        )
        if not victims:
            return None
        for v in victims:
            adder.rem_total_token_offset -= reserved(v)
            self.decoding.remove(v)
            self._retract(v, preempt=True)  # its requeue time: the pass's (_launch)
        self.stats.preemptions += len(victims)
        return victims

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        """Invariant check over cache, pool and every live request's pages (and the
        kept LPM order against a full re-sort)."""
        if self._lpm is not None:
            self._lpm.check(list(self._waiting))
        check_invariants(
            self.cache,
            [(r.owned_start_page, r.owned_end_page) for r in self.running.values()],
            [
                (r.rid, r.owned_start_page, _owned_ids(r), r.locked_node)
                for r in self.running.values()
            ],
        )
