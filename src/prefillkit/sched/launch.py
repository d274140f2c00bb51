# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""A batch's pages: allocated after the pass, handed to the engine as a step, moved into
the cache when its forward is done.

- :func:`launch` (upstream's ``prepare_for_extend``): one block of pages per owner lane
  for the whole batch; each admitted request leaves the queue for the running set.
- :func:`step_output`: the engine's immutable view of the batch (``StepOutput``).
- :func:`prefill_done`: cache the computed pages, move the locks, keep the chunk.

Mutates: the pool and the cache (evictions, then cached pages), the queue and the
running set, the chunked request, the batch's requests, the counters.
"""

from __future__ import annotations

from array import array

from prefillkit.cache.node import Node
from prefillkit.cache.pages import Pending, global_ids, pending_table
from prefillkit.cache.pool import lane_split
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.adder import PrefillAdder
from prefillkit.sched.affinity import BatchLead
from prefillkit.sched.batch import PrefillBatch
from prefillkit.sched.state import SchedulerState
from prefillkit.sched.step import PrefixSegment, ScheduledReq, StepOutput
from prefillkit.sched.verdicts import CloseReason


def launch(
    st: SchedulerState,
    adder: PrefillAdder,
    lead: BatchLead,
    policy_used: str,
    skips: int,
    stops: int,
    preempted: list[Request],
    now: float,
) -> PrefillBatch:
    """Allocate the admitted requests' pages (``prepare_for_extend``); the batch."""
    # One eviction for the whole batch: the adder planned exactly these pages per
    # owner lane (and checked they fit free + evictable), so LRU eviction takes the
    # same nodes as allocating request by request would.
    if not st.cache.make_room(adder.planned_lanes):  # pragma: no cover
        raise AssertionError(f"allocation of {adder.planned_lanes} failed after admission")
    # One block of page ids per owner lane for the whole batch: exactly the pages the
    # adder planned. Each request's new pages are a run of it (pending_pages) until
    # prefill_done moves them into its page table.
    blocks = st.pool.take_owned(adder.planned_lanes)
    if blocks is None:  # pragma: no cover - make_room covered the planned pages
        raise AssertionError(f"allocation of {adder.planned_lanes} failed after admission")
    can_run = adder.can_run_list
    _assign_pages(st, can_run, blocks, now)
    for v in preempted:  # requeued by this pass: their lost time starts now
        v.metrics.requeued_time = now
    # NOTE: a continuation is always admitted first, before the scan.
    st.chunked_req = adder.new_chunked_req or (
        st.chunked_req if can_run and can_run[0] is st.chunked_req else None
    )
    stats = st.stats
    stats.log_input_tokens += adder.log_input_tokens
    stats.log_hit_tokens += adder.log_hit_tokens
    return PrefillBatch(
        reqs=list(can_run),
        load_backs=adder.load_backs,
        extend_tokens=adder.batch_extend_tokens,
        cached_tokens=adder.batch_cached_tokens,
        load_back_tokens=adder.batch_load_back_tokens,
        buffer_bytes=adder.batch_buffer_bytes(),
        lead_class=lead,
        has_chunked=adder.has_chunked_req_in_batch,
        waiting_len=len(st.waiting),
        policy_used=policy_used,
        skips=skips,
        stops=stops,
        preempted=preempted,
        log_input_tokens=adder.log_input_tokens,
        log_hit_tokens=adder.log_hit_tokens,
    )


def _assign_pages(
    st: SchedulerState, can_run: list[Request], blocks: list[array[int]], now: float
) -> None:
    """Give each admitted request its run of the batch's page blocks; a new admission
    leaves the queue for the running set."""
    p = st.page_size
    cp = st.pool.cp_size
    running = st.running
    waiting = st.waiting
    lpm = st.lpm
    prefilling = ReqStatus.PREFILLING
    waiting_status = ReqStatus.WAITING
    offs = [0] * cp
    for req in can_run:
        rs = req.state
        rm = req.metrics
        if rs.status is waiting_status:
            rs.owned_start_page = rs.owned_end_page = rs.prefix_len // p
            if rm.first_scheduled_time is None:
                # Queueing and hits are those of the first scheduling: a requeued
                # request's re-prefill does not move them.
                rm.first_scheduled_time = now
                rm.device_hit_tokens = rs.device_prefix_len
                rm.host_hit_tokens = rs.loaded_tokens
            rs.status = prefilling
            running[req.rid] = req
            del waiting[req]
            if lpm is not None:
                lpm.remove(req)
        # NOTE: prefix_len is page aligned for a new request (a key-unit multiple)
        # and a continuation's prefix ends where its owned pages end.
        start = rs.owned_end_page
        end = -(-(rs.prefix_len + rs.extend_input_len) // p)
        if cp == 1:
            o = offs[0]
            offs[0] = o + end - start
            rs.pending_pages = (blocks, [o], [end - start])
        else:
            counts = lane_split(start, end - start, cp)
            rs.pending_pages = (blocks, offs[:], counts)
            for i, n in enumerate(counts):
                offs[i] += n
        rs.owned_end_page = end
        rm.num_chunks += 1
        if rm.requeued_time is not None:  # a re-prefill after a requeue
            rm.requeue_recomputed_tokens += rs.extend_input_len


def step_output(st: SchedulerState, batch: PrefillBatch | None) -> StepOutput:
    """The engine's view of the pass that returned ``batch`` (None: an empty pass),
    with ``st.last_pass_reason`` its stop reason; the batch is kept in flight under the
    step's id until its forward is done."""
    reason = st.last_pass_reason
    assert reason is not None
    if batch is None:
        return _empty_step(st, reason)
    u = st.cache.unit_pages
    root = st.cache.root
    copies = {id(lb.deepest): lb for lb in batch.load_backs}
    out: list[ScheduledReq] = []
    for req in batch.reqs:
        rs = req.state
        pending = rs.pending_pages
        assert pending is not None  # NOTE: set by launch for every request
        node = rs.locked_node
        lb = copies.get(id(node)) if rs.loaded_tokens else None
        end = rs.prefix_len + rs.extend_input_len
        out.append(
            ScheduledReq(
                rid=req.rid,
                prefix_len=rs.prefix_len,
                loaded_tokens=rs.loaded_tokens,
                extend_start=rs.prefix_len,
                extend_end=end,
                prefix_path=_prefix_path(node, root, u),
                prefix_node_pages=0 if node is None else node.end * u,
                prefix_owned=tuple([t[:] for t in rs.owned_pages]) if rs.owned_pages else (),
                new_start_page=rs.owned_end_page - sum(pending[2]),
                pending=pending,
                load_back=() if lb is None else tuple(lb.copy_pairs()),
                is_chunk=end < rs.input_len,
            )
        )
    st.step_seq += 1
    st.in_flight[st.step_seq] = batch
    return StepOutput(
        step_id=st.step_seq,
        reqs=tuple(out),
        stop_reason=reason,
        extend_tokens=batch.extend_tokens,
        cached_tokens=batch.cached_tokens,
        load_back_tokens=batch.load_back_tokens,
        buffer_bytes=batch.buffer_bytes,
        lead_class=batch.lead_class,
        has_chunked=batch.has_chunked,
        waiting_len=batch.waiting_len,
        skips=batch.skips,
        stops=batch.stops,
        stop_bound=batch.stop_bound,
        preempted=tuple([r.rid for r in batch.preempted]),
    )


def _prefix_path(node: Node | None, root: Node, unit_pages: int) -> tuple[PrefixSegment, ...]:
    """The page segments of the cached path ending at ``node``, root first (the root
    holds no pages)."""
    if node is None or node is root:
        return ()
    parts: list[PrefixSegment] = []
    while node is not None and node is not root:
        parts.append((node.start * unit_pages, node.pages))
        node = node.parent
    parts.reverse()
    return tuple(parts)


def _empty_step(st: SchedulerState, reason: CloseReason) -> StepOutput:
    """The step of a pass that admitted nothing. NOTE: immutable, so one object per
    (reason, queue length) serves every empty pass (a decode-only stretch asks for one
    per decode step)."""
    if st.policy is not None and st.policy.wake_at is not None:
        n, wake = len(st.waiting), st.policy.wake_at
        return StepOutput(step_id=0, reqs=(), stop_reason=reason, waiting_len=n, wake_at=wake)
    key = (reason, len(st.waiting))
    empty = st.empty_steps.get(key)
    if empty is None:
        if len(st.empty_steps) >= 64:
            st.empty_steps.clear()
        empty = st.empty_steps[key] = StepOutput(
            step_id=0, reqs=(), stop_reason=reason, waiting_len=key[1]
        )
    return empty


def prefill_done(st: SchedulerState, batch: PrefillBatch, now: float) -> list[Request]:
    """The batch's forward finished: finish its load-backs, cache what each request
    computed (moving its lock); return the requests whose prompt is now complete."""
    cache = st.cache
    kt = cache.key_tokens
    u = cache.unit_pages
    for lb in batch.load_backs:
        cache.finish_load_back(lb)
    done: list[Request] = []
    for req in batch.reqs:
        rs = req.state
        rm = req.metrics
        rs.computed_tokens = rs.prefix_len + rs.extend_input_len
        units = min(rs.computed_tokens // kt, len(req.keys))
        node = rs.locked_node
        assert node is not None
        pending = rs.pending_pages
        rs.pending_pages = None
        if pending is not None and not rs.owned_pages:
            # The common case: the request owns only this forward's pages, a run of the
            # batch's blocks: insert reads them there, the rest is sliced off.
            blocks, offs, counts = pending
            if units > node.end:
                rs.locked_node = cache.insert(node, req.keys, node.end, units, blocks, offs)
                gone = lane_split(node.end * u, (units - node.end) * u, len(blocks))
                rs.owned_pages = [
                    b[o + g : o + c] for b, o, g, c in zip(blocks, offs, gone, counts, strict=True)
                ]
                rs.owned_start_page = units * u
            else:
                rs.owned_pages = pending_table(pending)
        else:
            _cache_into_table(st, req, node, units, pending)
        if rs.computed_tokens >= rs.input_len:
            if rm.first_token_time is None:
                # The first token's time is set once: a re-prefill never moves it.
                rm.first_token_time = now
                rs.output_len = 1 if req.max_new_tokens > 0 else 0
            else:
                _reprefill_done(req, now)
            done.append(req)
            if st.chunked_req is req:
                st.chunked_req = None
    return done


def _cache_into_table(
    st: SchedulerState, req: Request, node: Node, units: int, pending: Pending | None
) -> None:
    """:func:`prefill_done` for a request that owns pages from earlier chunks (or no
    step pages): this forward's pages join its page table, whose computed key units past
    ``node`` go to the cache."""
    rs = req.state
    cache = st.cache
    u = cache.unit_pages
    owned = rs.owned_pages
    if pending is not None:  # this forward's pages join the page table
        new = pending_table(pending)
        owned = [a + b for a, b in zip(owned, new, strict=True)]
    if units > node.end:
        rs.locked_node = cache.insert(node, req.keys, node.end, units, owned)
        # The inserted head now belongs to the cache (or was freed).
        gone = lane_split(node.end * u, (units - node.end) * u, len(owned))
        rs.owned_pages = [t[n:] for t, n in zip(owned, gone, strict=True)]
        rs.owned_start_page = units * u
    else:
        # NOTE: new arrays, so that later chunks and decode (which grow owned_pages in
        # place) never change a step's page snapshot.
        rs.owned_pages = [t[:] for t in owned]


def _reprefill_done(req: Request, now: float) -> None:
    """Re-prefill of prompt + kept output after a requeue: it yields the next token, and
    the KV again holds prompt + output_len - 1 tokens. input_len and computed_tokens go
    back to the prompt, as after a first prefill (decode counts prompt + output_len)."""
    rs = req.state
    rm = req.metrics
    rs.output_len += 1
    rs.input_len = rs.computed_tokens = req.prompt_len
    if rm.requeued_time is not None:
        rm.requeue_lost_s += now - rm.requeued_time
        rm.requeued_time = None


def owned_ids(req: Request) -> list[array[int]]:
    """Every page id ``req`` owns: its page table past the prefix, and the step in
    flight's pages."""
    rs = req.state
    if rs.pending_pages is None:
        return rs.owned_pages
    new = pending_table(rs.pending_pages)
    if not rs.owned_pages:
        return new
    return [a + b for a, b in zip(rs.owned_pages, new, strict=True)]


def page_table(st: SchedulerState, req: Request) -> list[int]:
    """Engine-facing page ids of ``req``'s sequence pages: its cached prefix, the pages
    it owns and the step in flight's (O(pages)). Pure."""
    rs = req.state
    parts: list[Node] = []
    node = rs.locked_node
    root = st.cache.root
    while node is not None and node is not root:
        parts.append(node)
        node = node.parent
    u = st.cache.unit_pages
    out: list[int] = []
    for n in reversed(parts):
        out += global_ids(n.pages, n.start * u)
    owned = owned_ids(req)
    if owned:
        out += global_ids(owned, rs.owned_start_page)
    return out
