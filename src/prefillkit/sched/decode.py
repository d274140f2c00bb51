# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Decoding requests: one token a step, retraction when memory runs out, and the end of
a request's KV (finished, aborted or requeued).

Mutates: the decode set, the running set, page tables, the pool and the cache (pages
freed, locks released, evictions for decode pages), the decode reservation ratio, the
queue (a requeued request goes back to it) and the retraction counter.
"""

from __future__ import annotations

from functools import partial

from prefillkit.cache.pages import empty_table, pending_table
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.state import SchedulerState
from prefillkit.sched.waiting import enqueue, never_fits_reason


def start_decode(st: SchedulerState, req: Request) -> None:
    """``req`` joins the decode batch (colocated). Mutates: its status, the decode set."""
    req.state.status = ReqStatus.DECODING
    st.decoding.append(req)


def decode_step(st: SchedulerState, now: float) -> tuple[list[Request], list[Request]]:
    """One decode step: every decoding request gains one output token.

    Oldest requests get memory first; when a page cannot be allocated the newest
    decoding request is retracted (KV freed, back to the queue), as upstream retracts
    from the tail: a newer one than the request short of memory, or that request itself
    when it is the newest. Under priority scheduling "oldest" and "newest" rank by
    priority first (see :func:`decode_rank`). Finished requests are released at once
    (their pages serve the rest of the step). Returns (finished, retracted).
    """
    p = st.page_size
    cache = st.cache
    finished: list[Request] = []
    retracted: list[Request] = []
    for req in sorted(st.decoding, key=partial(decode_rank, st)):
        if req.state.status is not ReqStatus.DECODING:
            continue  # retracted earlier in this step
        if req.state.output_len >= req.max_new_tokens:  # nothing left to decode
            release(st, req, now)
            finished.append(req)
            continue
        # This step feeds output token ``output_len``: the KV then holds the prompt
        # and every output token so far.
        need = -(-(req.state.input_len + req.state.output_len) // p)
        while req.state.owned_end_page < need:
            if not req.state.owned_pages:
                req.state.owned_pages = empty_table(st.pool.cp_size)
            if cache.alloc_page(req.state.owned_end_page, req.state.owned_pages):
                req.state.owned_end_page += 1
                continue
            victim = _retract_victim(st, req, now)
            if victim is None:
                break
            retracted.append(victim)
        if req.state.owned_end_page < need:
            retract(st, req, now)
            retracted.append(req)
            continue
        req.state.output_len += 1
        if req.state.output_len >= req.max_new_tokens:
            # Released at once: a finished request is never a retraction victim.
            release(st, req, now)
            finished.append(req)
    if finished or retracted:  # NOTE: else every request is still decoding
        st.decoding = [r for r in st.decoding if r.state.status is ReqStatus.DECODING]
    _update_new_token_ratio(st, retracted)
    return finished, retracted


def _update_new_token_ratio(st: SchedulerState, retracted: list[Request]) -> None:
    """Upstream's new_token_ratio after a decode step: reset after a retraction (to the
    decoding requests' progress), else a linear decay; back to the start when idle."""
    if retracted:
        st.stats.retractions += len(retracted)
        decoded = sum(r.state.output_len for r in st.decoding)
        total_new = sum(r.max_new_tokens for r in st.decoding)
        st.new_token_ratio = min(1.0, (decoded + 20 * len(st.decoding)) / (total_new + 1))
    else:
        st.new_token_ratio = max(
            st.new_token_ratio - st.new_token_ratio_decay, st.min_new_token_ratio
        )
    if not st.decoding:
        st.new_token_ratio = st.init_new_token_ratio


def decode_rank(st: SchedulerState, req: Request) -> tuple[float, float, str]:
    """Decode memory order: lower ranks get pages first and are retracted last.

    Arrival order; under priority scheduling the more important requests first.
    Without the priority term a retraction could evict the high-priority request
    that priority preemption had just admitted by preempting lower-priority ones,
    which then come back and are preempted again: a livelock in which neither side
    ever finishes. Pure.
    """
    cfg = st.cfg
    if not cfg.enable_priority_scheduling:
        return (0.0, req.arrival_time, req.rid)
    sign = 1 if cfg.schedule_low_priority_values_first else -1
    return (float(sign * req.priority), req.arrival_time, req.rid)


def _retract_victim(st: SchedulerState, protect: Request, now: float) -> Request | None:
    """Retract the lowest-ranked (newest) decoding request ranked after ``protect``
    (None if none is: then ``protect`` itself is the last and is the one to go)."""
    key = decode_rank(st, protect)
    cands = [
        r for r in st.decoding if r.state.status is ReqStatus.DECODING and decode_rank(st, r) > key
    ]
    if not cands:
        return None
    victim = max(cands, key=partial(decode_rank, st))
    retract(st, victim, now)
    return victim


def retract(
    st: SchedulerState, req: Request, now: float | None = None, *, preempt: bool = False
) -> None:
    """Requeue ``req`` (a retraction, or with ``preempt`` a priority preemption): its KV
    is freed, its output kept (see :meth:`Request.reset_for_requeue`). The caller takes
    it out of the decode set."""
    free_kv(st, req)
    st.running.pop(req.rid, None)
    req.reset_for_requeue(now)
    if preempt:
        req.metrics.preemptions += 1
    else:
        req.metrics.retractions += 1
    reason = never_fits_reason(st, req)
    if reason is not None:
        # Deviation (README): its re-prefill (prompt + kept output) can never pass
        # admission, so it is rejected here; upstream requeues it, and it waits at the
        # head of the queue for ever. The caller sees it among the requeued requests
        # (decode_step's retracted, StepOutput.preempted) with status REJECTED.
        req.state.status = ReqStatus.REJECTED
        req.metrics.reject_reason = (
            f"requeued with {req.state.output_len} output tokens kept: {reason}"
        )
        st.stats.rejected += 1
        return
    enqueue(st, req)


def release(st: SchedulerState, req: Request, now: float) -> None:
    """``req`` no longer needs its KV (pd-prefill: transfer done; colocated: decoding
    finished): its pages and lock are freed, status FINISHED."""
    free_kv(st, req)
    req.state.status = ReqStatus.FINISHED
    req.metrics.finish_time = now
    st.running.pop(req.rid, None)


def free_kv(st: SchedulerState, req: Request) -> None:
    """Free ``req``'s owned pages (and the step in flight's) and unlock its prefix."""
    if req.state.owned_pages:
        st.pool.give_owned(req.state.owned_pages)
    if req.state.pending_pages is not None:
        st.pool.give_owned(pending_table(req.state.pending_pages))
        req.state.pending_pages = None
    req.state.owned_pages = []
    req.state.owned_start_page = req.state.owned_end_page = 0
    if req.state.locked_node is not None:
        st.cache.unlock(req.state.locked_node)
        req.state.locked_node = None


def abort(st: SchedulerState, req: Request, now: float) -> None:
    """Drop ``req`` wherever it is past the queue (the chunk, the running and decode
    sets): its KV is freed, status ABORTED. The caller takes it out of the queue."""
    if st.chunked_req is req:
        st.chunked_req = None
    if req in st.decoding:
        st.decoding.remove(req)
    free_kv(st, req)
    st.running.pop(req.rid, None)
    req.state.status = ReqStatus.ABORTED
    req.metrics.finish_time = now


def decode_load(st: SchedulerState) -> tuple[int, int]:
    """(decoding requests, their context tokens). Pure."""
    dec = st.decoding
    return len(dec), sum(r.state.input_len + r.state.output_len for r in dec)
