# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Arrivals and the waiting queue: who may wait, and in which order they wait.

Mutates: ``SchedulerState.waiting`` (arrival order), its kept LPM order, the last
arrival time, the rejection counter, and the requests it queues or rejects.
"""

from __future__ import annotations

from prefillkit.cache.pool import lane_split
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.matching import refresh_match
from prefillkit.sched.state import SchedulerState


def never_fits_reason(st: SchedulerState, req: Request) -> str | None:
    """Why ``req`` can never be admitted (None if it can); the reason says which test.

    Rejected on arrival is only what can never pass admission even on an empty pool:

    - the admission memory test ``prompt + min(max_new, clip) + one page <
      rem_total_tokens`` (a cached prefix does not help: under its lock it leaves
      the evictable pool by as much as it shortens the extend);
    - with CP, the prompt's pages must fit their owner lanes (page j in lane j mod R).

    A requeued request (retracted or preempted) is tested again, its prompt now with
    the output it keeps (``decode.retract``).

    Everything else waits, as upstream waits. Deviation (README): with decode
    reservation on (colocated), prompt + the whole output must also fit the pool (per
    owner lane): the decode could never finish it, and this engine has no
    out-of-memory abort; upstream admits it. Pure.
    """
    p = st.page_size
    pool = st.pool
    cp = pool.cp_size
    lanes_note = f" ({cp} owner lanes)" if cp > 1 else ""
    pages = -(-req.state.input_len // p)
    lanes = lane_split(0, pages, cp)
    if any(n > cap for n, cap in zip(lanes, pool.capacity, strict=True)):
        return f"needs {pages} KV pages but the pool holds {pool.total_pages}{lanes_note}"
    # NOTE: as the adder reserves: the output still to come (a requeued request keeps
    # its output), clipped.
    clip = st.cfg.clip_max_new_tokens
    reserved = min(req.max_new_tokens - req.state.output_len, clip)
    need = req.state.input_len + reserved + p
    if need >= pool.total_pages * p:
        return (
            f"prompt + reserved output ({reserved}, clipped at {clip}) + one page = {need} "
            f"tokens is not below the KV pool ({pool.total_pages * p} tokens): the "
            "admission memory test can never pass, even on an empty pool"
        )
    if st.reserve_decode:
        seq_pages = -(-(req.prompt_len + req.max_new_tokens) // p)
        lanes = lane_split(0, seq_pages, cp)
        if any(n > cap for n, cap in zip(lanes, pool.capacity, strict=True)):
            return (
                f"prompt + whole output needs {seq_pages} KV pages but the pool holds "
                f"{pool.total_pages}{lanes_note}: its decode could never finish"
            )
    return None


def add_request(st: SchedulerState, req: Request) -> str | None:
    """Queue an arrived request; returns a rejection reason if it can never fit.

    Mutates: the queue and ``req`` (status WAITING and its cached match), or marks
    ``req`` REJECTED and counts it."""
    reason = never_fits_reason(st, req)
    if reason is not None:
        req.state.status = ReqStatus.REJECTED
        req.metrics.reject_reason = reason
        st.stats.rejected += 1
        return reason
    req.state.status = ReqStatus.WAITING
    # Match once on arrival (like hashing): every later pass confirms or refreshes
    # this length from the hint instead of binary-searching from scratch.
    req.state.match_node = None  # NOTE: any node of another cache is void here
    refresh_match(st.cache, req)
    enqueue(st, req)
    return None


def enqueue(st: SchedulerState, req: Request) -> None:
    """Put ``req`` in the queue at its arrival position (and in the kept LPM order)."""
    lpm = st.lpm
    if req.arrival_time >= st.last_arrival:
        st.waiting[req] = None
        st.last_arrival = req.arrival_time
        if lpm is not None:
            lpm.add(req)
    else:  # a preempted/retracted request goes back to its arrival position (rare)
        reqs = sorted([*st.waiting, req], key=_arrival)
        st.waiting = dict.fromkeys(reqs)
        if lpm is not None:
            lpm.requeue(req, reqs)


def _arrival(req: Request) -> float:
    return req.arrival_time


def remove(st: SchedulerState, req: Request) -> None:
    """Take ``req`` out of the queue, the kept LPM order and the promoted leads (it may
    be in none of them)."""
    st.waiting.pop(req, None)
    if st.lpm is not None:
        st.lpm.remove(req)
    st.affinity_promoted = [r for r in st.affinity_promoted if r is not req]
