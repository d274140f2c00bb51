# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The admission pass: order the queue, scan it through the adder, launch the batch.

:func:`run_pass` is what ``Scheduler.schedule`` runs; :func:`full_pass` is the pass
itself (the hot path: hoisted locals and enum members, no per-candidate indirection
beyond the adder and the affinity decision). Mutates: the queue (admitted requests
leave it, in ``launch.launch``), the adder's view of the cache (locks, load-backs), the
affinity state (promoted leads, the requests' skip counts), the counters, and through
priority preemption the decoding requests (``preempt.try_preempt``).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

from prefillkit.request import ReqStatus, Request
from prefillkit.sched.adder import PrefillAdder
from prefillkit.sched.affinity import (
    AffinityBound,
    AffinityDecision,
    BatchLead,
    ReqClass,
    classify,
    decide,
    tripped_bound,
)
from prefillkit.sched.batch import PrefillBatch
from prefillkit.sched.launch import launch
from prefillkit.sched.matching import refresh_match
from prefillkit.sched.policy import order_waiting
from prefillkit.sched.preempt import shortfall, try_preempt
from prefillkit.sched.state import SchedulerState
from prefillkit.sched.step import AdmissionEvent, AdmissionEventKind, AdmissionObserver
from prefillkit.sched.verdicts import AddReqResult, CloseReason


def run_pass(st: SchedulerState, now: float) -> PrefillBatch | None:
    """Run one admission pass at ``now``. The batch's pages are allocated on return.

    None when nothing was admitted; ``st.last_pass_reason`` then says why:
    ``QUEUE_EMPTY``, ``MEMORY`` (NO_TOKEN), ``MAX_RUNNING_REQUESTS`` (request-slot
    limit), or the limit that closed it (OTHER: e.g. ``CHUNK_BUDGET``). A pass that
    would admit nothing because every request slot is taken (:func:`slot_pass_is_idle`)
    is not run: its effects are recorded instead (:func:`skip_idle_pass`)."""
    if st.waiting and slot_pass_is_idle(st):
        skip_idle_pass(st)
        return None
    return full_pass(st, now)


def slot_pass_is_idle(st: SchedulerState) -> bool:
    """Whether a full pass would admit nothing because every request slot is taken.

    Called with a non-empty queue. Then the full pass, with no chunked continuation
    (which would add a slot back and run first), starts its scan at a request with
    ``len(can_run) = 0 >= slots = max_running_requests - len(running)``; without
    priority preemption ``try_preempt`` returns None at once, so the scan breaks
    with MAX_RUNNING_REQUESTS before any match, affinity decision or admission. Its
    other work is free of effects only when the ordering is: fcfs keeps the queue
    order, lof and priority sort a copy, lpm's kept order drains the cache's changes
    and ages requests (the next pass does the same with the same result: its order
    is a function of the queue, the cache and the time), dfs-weight only refreshes
    match hints (a cache of a function of the cache); random draws from its
    generator, so it still runs the pass. What remains of the pass: ``passes`` and
    the empty-pass counter, ``last_pass_reason``, and ``affinity_promoted`` reduced
    to its WAITING requests (the pass takes them out and puts back those it did not
    admit): :func:`skip_idle_pass`. Pure."""
    if st.chunked_req is not None or len(st.running) < st.max_running_requests:
        return False
    cfg = st.cfg
    if cfg.enable_priority_scheduling:
        return not cfg.enable_priority_preemption
    return cfg.schedule_policy in ("fcfs", "lof", "lpm", "dfs-weight")


def skip_idle_pass(st: SchedulerState) -> None:
    """What the full pass :func:`slot_pass_is_idle` replaces would leave behind: it
    would end in its first scan step with MAX_RUNNING_REQUESTS and nothing admitted."""
    st.idle_passes_skipped += 1
    st.stats.passes += 1
    if st.affinity_promoted:
        st.affinity_promoted = [
            r for r in st.affinity_promoted if r.state.status is ReqStatus.WAITING
        ]
    record_empty_pass(st, CloseReason.MAX_RUNNING_REQUESTS)


def record_empty_pass(st: SchedulerState, reason: CloseReason) -> None:
    """Record a pass that admitted nothing (``last_pass_reason`` + the counter)."""
    st.last_pass_reason = reason
    counts = st.stats.empty_passes
    key: str = reason._value_  # NOTE: .value is a descriptor, a dict lookup hashes in Python
    counts[key] = counts.get(key, 0) + 1


def pass_order(st: SchedulerState, now: float) -> tuple[Iterable[Request], str]:
    """The order the pass scans the queue in, and the policy it actually used: a zoo
    policy's (sched/policy_pass.py), or the base policy's, held by S4's hold variant."""
    rt = st.policy
    if rt is None or not rt.orders:
        return base_order(st, now)
    queue = list(st.waiting)
    if rt.hold:
        order, used = base_order(st, now)
        return rt.order(queue, list(order), used, now, st.max_wait_s, st.affinity_bounds)
    return rt.order(queue, [], st.cfg.schedule_policy, now, st.max_wait_s, st.affinity_bounds)


def base_order(st: SchedulerState, now: float) -> tuple[Iterable[Request], str]:
    """The order of fcfs, lof, lpm, dfs-weight, random and priority (see pass_order)."""
    cfg = st.cfg
    max_wait = st.max_wait_s
    lpm = st.lpm
    if lpm is not None:
        # order_waiting's lpm order, kept across passes (the same order: check()).
        # NOTE: kept current even under the fallback (what the cache recorded is
        # drained), so it costs what changed, not what accumulated.
        order: Iterable[Request] = lpm.order(None if max_wait is None else now - max_wait)
        fallback = cfg.lpm_fallback_queue_len
        if fallback is not None and len(st.waiting) > fallback:
            return st.waiting, "fcfs"  # NOTE: as above, the scan leaves the queue alone
        return order, "lpm"
    if cfg.schedule_policy == "fcfs" and not cfg.enable_priority_scheduling:
        # order_waiting's fcfs order is the queue itself (the wait bound is a no-op
        # under fcfs): scan the arrival-ordered dict, no O(N) copy. Safe: without
        # priority nothing in the scan adds to or removes from st.waiting (try_preempt
        # returns None at once; admitted requests leave it in launch, after the scan),
        # and a change would raise, not pass silently.
        return st.waiting, "fcfs"
    return order_waiting(
        list(st.waiting),
        cfg.schedule_policy,
        st.cache,
        priority=cfg.enable_priority_scheduling,
        low_priority_values_first=cfg.schedule_low_priority_values_first,
        lpm_fallback_queue_len=cfg.lpm_fallback_queue_len,
        rng=st.rng,
        now=now,
        max_wait_s=max_wait,
        priority_aging=cfg.enable_priority_aging,
    )


def full_pass(st: SchedulerState, now: float) -> PrefillBatch | None:
    """The admission pass (see :func:`run_pass`), run in full. The hot path."""
    if not st.waiting and st.chunked_req is None:
        record_empty_pass(st, CloseReason.QUEUE_EMPTY)
        return None
    cfg = st.cfg
    cache = st.cache
    st.stats.passes += 1
    adder = PrefillAdder(
        cache,
        st.limits,
        st.decoding if st.reserve_decode else [],
        st.new_token_ratio,
    )
    lead = BatchLead.EMPTY
    chunked = st.chunked_req
    if chunked is not None:
        adder.add_chunked_req(chunked)
        if not adder.can_run_list:
            # No page can be allocated until in-flight requests finish.
            record_empty_pass(st, CloseReason.MEMORY)
            return None
        lead = BatchLead.WARM  # NOTE: a continuation carries its true prefix
    order, policy_used = pass_order(st, now)
    rt = st.policy
    zoo = rt is not None and rt.admits
    zoo_skips = 0
    if zoo:
        assert rt is not None
        rt.begin_pass(len(st.decoding), len(st.waiting), list(adder.can_run_list), now)
    promoted: list[Request] = []
    if st.affinity_promoted:
        promoted = [r for r in st.affinity_promoted if r.state.status is ReqStatus.WAITING]
        ids = {id(r) for r in promoted}
        order = chain(promoted, (r for r in order if id(r) not in ids))
        st.affinity_promoted = []
    kt = cache.key_tokens
    bounds = st.affinity_bounds
    floor = bounds.warm_floor_tokens
    affinity_on = st.affinity_on
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
    slots = st.max_running_requests - len(st.running)
    obs = st.admission_observer
    if chunked is not None:
        slots += 1  # the continuation already holds a slot in st.running
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
            victims = try_preempt(
                st, req, adder, slots_needed=1, tokens_needed=shortfall(st, req, adder)
            )
            if victims is None:
                closed = CloseReason.MAX_RUNNING_REQUESTS
                break
            preempted.extend(victims)
            slots += len(victims)
        h = refresh_match(cache, req)
        # NOTE: refresh_match always leaves match_node set.
        match = match_node(req.state.match_node, h)  # type: ignore[arg-type]
        if affinity_on or lead is EMPTY:
            cls = classify(match.device_units * kt, match.host_units * kt, floor)
        if zoo:
            assert rt is not None
            zd, zcls = rt.decide(req, match, now)
            if zcls is not None:
                cls = zcls
            if zd is AffinityDecision.SKIP:
                zoo_skips += 1
                if obs is not None:
                    observe(obs, adder, AdmissionEventKind.SKIP, now, req, None, False, None)
                continue
            if zd is AffinityDecision.STOP:
                closed = CloseReason.POLICY_STOP
                break
        if affinity_on:
            decision = decide(
                cls, lead, len(skipped), req.state.affinity_skips, now - req.arrival_time, bounds
            )
            if decision is AffinityDecision.SKIP:
                skipped.append(req)
                if obs is not None:
                    observe(obs, adder, AdmissionEventKind.SKIP, now, req, None, False, None)
                continue
            if decision is AffinityDecision.STOP:
                stops += 1
                stop_bound = tripped_bound(
                    len(skipped), req.state.affinity_skips, now - req.arrival_time, bounds
                )
                st.affinity_promoted.append(req)
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
                req.state.input_len
                - match.device_units * kt
                + min(req.max_new_tokens, cfg.clip_max_new_tokens)
                + st.page_size
            )
            short = max(1, int(need - adder.rem_total_tokens) + 1)
            victims = try_preempt(
                st, req, adder, slots_needed=0, tokens_needed=short, on_no_token=True
            )
            if victims:
                preempted.extend(victims)
                slots += len(victims)
                adder.closed_by = None  # the failed attempt no longer closes the batch
                res = adder.add_one_req(req)
                admitted = bool(can_run) and can_run[-1] is req
        if admitted and lead is EMPTY:
            lead = BatchLead.WARM if cls is ReqClass.WARM else BatchLead.COLD
        if admitted and zoo:
            assert rt is not None
            rt.admitted(req, lead)
        if obs is not None:
            observe(obs, adder, AdmissionEventKind.CANDIDATE, now, req, res.name, admitted, None)
        if res is not CONTINUE:
            closed = adder.closed_by
            break
    else:
        closed = adder.closed_by or CloseReason.QUEUE_EMPTY
    reason = closed or CloseReason.QUEUE_EMPTY
    if obs is not None:
        observe(obs, adder, AdmissionEventKind.STOP, now, None, None, False, reason._value_)
    if promoted:
        # A promoted request keeps the lead until it is admitted (a lead that does not
        # fit yet, e.g. NO_TOKEN, must not be overtaken by the warm requests behind it).
        held = {id(r) for r in adder.can_run_list} | {id(r) for r in st.affinity_promoted}
        kept = [r for r in promoted if id(r) not in held]
        st.affinity_promoted[:0] = kept
    if skipped or stops:
        count_affinity(st, skipped, stop_bound)
    if zoo:
        st.stats.policy_skips += zoo_skips
        st.stats.policy_stops += closed is CloseReason.POLICY_STOP
    if not adder.can_run_list:
        record_empty_pass(st, reason)
        return None
    st.last_pass_reason = reason
    batch = launch(st, adder, lead, policy_used, len(skipped), stops, preempted, now)
    batch.stop_bound = stop_bound
    if rt is not None:
        rt.launched(batch.reqs, now)
    return batch


def observe(
    obs: AdmissionObserver,
    adder: PrefillAdder,
    kind: AdmissionEventKind,
    now: float,
    req: Request | None,
    result: str | None,
    admitted: bool,
    reason: str | None,
) -> None:
    """Tell the admission observer one decision, with the budgets after it."""
    obs(
        AdmissionEvent(
            kind=kind,
            now=now,
            rid=None if req is None else req.rid,
            result=result,
            admitted=admitted,
            reason=reason,
            rem_total_tokens=adder.rem_total_tokens,
            rem_input_tokens=adder.rem_input_tokens,
            rem_chunk_tokens=adder.rem_chunk_tokens,
        )
    )


def count_affinity(
    st: SchedulerState, skipped: list[Request], stop_bound: AffinityBound | None
) -> None:
    """Affinity counters of one pass (see ``SchedulerStats``); mutates the skipped
    requests' ``affinity_skips`` too."""
    s = st.stats
    n = len(skipped)
    for req in skipped:
        req.state.affinity_skips += 1
        if req.state.affinity_skips == 1:
            s.affinity_deferred_requests += 1
        if req.state.affinity_skips > s.affinity_max_deferred_passes:
            s.affinity_max_deferred_passes = req.state.affinity_skips
    s.affinity_skips += n
    if n:
        s.affinity_skip_passes += 1
        s.affinity_max_skips_in_pass = max(s.affinity_max_skips_in_pass, n)
    if stop_bound is not None:
        s.affinity_stops += 1
        if stop_bound is AffinityBound.WINDOW:
            s.affinity_stops_w += 1
        elif stop_bound is AffinityBound.DEFERS:
            s.affinity_stops_k += 1
        else:
            s.affinity_stops_t += 1
