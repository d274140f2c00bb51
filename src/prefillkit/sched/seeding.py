# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""State seeding: build a scheduler that already holds cached prefixes and running
requests (warm starts, differential tests against other engines, embedding mid-flight).

Each call reaches, through the cache's own transitions (``match``, ``lock``,
``make_room``, ``take_owned``, ``insert``, ``unlock``), exactly the state the normal path reaches:

- :func:`seed_cached_prefix`: the state a request leaves behind that computed ``keys``
  and was released (an unlocked cached prefix at the MRU end of the device LRU);
- :func:`seed_running_request`: the state of a request that was admitted on an idle
  scheduler (its device prefix hit locked, no load-back: a host hit is recomputed), whose
  whole prompt was prefilled (``launch.prefill_done``) and which then either decoded
  ``output_len - 1`` tokens (``start_decode`` + decode steps, colocated) or waits for its
  KV transfer (pd-prefill);
- :func:`seed_new_token_ratio`: the decode reservation ratio decode steps have reached.

Each takes the scheduler ``build_scheduler`` returned (another ``SchedulerInterface``
implementation raises ``TypeError``) and changes its state (``Scheduler.state``) only
through these transitions. No admission pass runs. Seed between passes only
(no batch in flight, no chunked request). Seeding never evicts: a seed that does not fit
the free pages raises ``ValueError`` and changes nothing. Seeding runs no admission test:
a seeded set of running requests may hold more decode reservation than admission would
have let in; the next pass then simply admits less.
"""

from __future__ import annotations

from prefillkit.cache.pool import lane_split
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.decode import start_decode
from prefillkit.sched.interface import SchedulerInterface
from prefillkit.sched.scheduler import Scheduler
from prefillkit.sched.state import SchedulerState
from prefillkit.sched.waiting import never_fits_reason

_RUNNING_STATES = (ReqStatus.DECODING, ReqStatus.TRANSFERRING)


def _state_of(sched: SchedulerInterface) -> SchedulerState:
    """The state of ``sched``, a scheduler ``build_scheduler`` built."""
    if not isinstance(sched, Scheduler):
        raise TypeError(f"cannot seed a {type(sched).__name__}: not prefillkit's Scheduler")
    return sched.state


def _check_free(st: SchedulerState, what: str, lanes: list[int]) -> None:
    pool = st.pool
    if not pool.has_free(lanes):
        lane_note = f" per owner lane {lanes}" if pool.cp_size > 1 else ""
        raise ValueError(
            f"cannot seed {what}: it needs {sum(lanes)} free KV pages{lane_note} but the pool "
            f"has {pool.free_pages} free of {pool.total_pages}"
            + (f" (per lane {pool.free})" if pool.cp_size > 1 else "")
        )


def seed_cached_prefix(sched: SchedulerInterface, keys: list[int] | Request) -> int:
    """Cache the key chain ``keys`` (or the complete prompt units of a ``Request``) on
    device, unlocked, as a request that computed it and finished would leave it.

    Mutates: the pool (free -> cached pages for the units not yet device resident),
    the prefix cache (new nodes, a split where the chain leaves a node, host-only nodes
    on the path revived on device; with a host tier, write-through backups and hit
    counts as ``insert`` does) and the device LRU (the chain's nodes move to the MRU end:
    seed in least-recently-used-first order). The scheduler's queues are untouched.

    Returns the pages newly cached. Raises ``ValueError`` (nothing changed) when the free
    pages do not hold them; it never evicts.
    """
    st = _state_of(sched)
    cache = st.cache
    if isinstance(keys, Request):
        req = keys
        if req.key_tokens != cache.key_tokens:
            raise ValueError(
                f"cannot seed {req.rid}: key unit {req.key_tokens} tokens, the scheduler's "
                f"cache uses {cache.key_tokens}"
            )
        what = f"cached prefix of {req.rid}"
        chain = req.keys
        units = min(req.state.input_len // cache.key_tokens, len(chain))
    else:
        what = f"cached prefix of {len(keys)} units"
        chain = keys
        units = len(chain)
    if units == 0:
        return 0
    match = cache.match(chain, units)
    u = cache.unit_pages
    d = match.device_units
    lanes = lane_split(d * u, (units - d) * u, cache.cp_size)
    _check_free(st, what, lanes)
    node = cache.lock(match.device_node, d)
    cache.commit()
    table = cache.pool.take_owned(lanes) if cache.make_room(lanes) else None
    if table is None:  # pragma: no cover - guarded by _check_free
        raise AssertionError("allocation failed after the free-page check")
    node = cache.insert(node, chain, d, units, table)
    cache.unlock(node)
    return sum(lanes)


def seed_running_request(
    sched: SchedulerInterface,
    req: Request,
    *,
    output_len: int = 1,
    status: ReqStatus = ReqStatus.DECODING,
    now: float = 0.0,
) -> None:
    """Make ``req`` (a fresh request, in no scheduler) a running request of ``sched``
    whose prompt is prefilled and cached and which holds its KV, its request slot and
    (``DECODING``) its decode reservation.

    ``output_len``: output tokens produced so far (the prefill yields the first; each
    decode step one more), 1 <= output_len <= max_new_tokens (0 when max_new_tokens is
    0); the request then owns the pages of ``prompt + output_len - 1`` tokens past its
    cached prompt units, as after that many decode steps. ``status``: ``DECODING``
    (colocated: appended to the decode set, whose order is the decode and reservation
    order) or ``TRANSFERRING`` (pd-prefill: holds its KV until ``finish``; output_len 1).
    ``now``: its first scheduling and first token time.

    Mutates: the pool (free -> owned pages, then owned -> cached for the prompt units
    not yet cached, duplicates freed), the prefix cache (as :func:`seed_cached_prefix`;
    the request's path stays locked, so it is protected, not evictable),
    the running set (and the decode set), and ``req``'s admission state and first
    scheduling/token metrics as ``launch.launch`` and ``launch.prefill_done`` set them
    (``locked_node``, ``owned_start_page``/``owned_end_page``, ``computed_tokens``,
    ``prefix_len``, ``extend_input_len``, hit tokens, ``num_chunks``). Its match hint is
    cleared. Raises a one-line ``ValueError`` (nothing changed) for a request that is not
    fresh, does not fit (free pages, never-fits rules, the request-slot limit) or has an
    impossible ``output_len``; it never evicts.
    """
    st = _state_of(sched)
    _check_seedable(st, req, output_len, status)
    _admit(st, req, output_len, now)
    _prefill(st, req, output_len, now)
    if status is ReqStatus.DECODING:
        start_decode(st, req)
    else:
        req.state.status = ReqStatus.TRANSFERRING


def _check_seedable(st: SchedulerState, req: Request, output_len: int, status: ReqStatus) -> None:
    """Raise the one-line ``ValueError`` of :func:`seed_running_request` for a request it
    cannot seed. Pure."""
    rid = req.rid
    if status not in _RUNNING_STATES:
        raise ValueError(
            f"cannot seed {rid}: status must be DECODING or TRANSFERRING, not {status}"
        )
    if status is ReqStatus.DECODING and not st.reserve_decode:
        raise ValueError(f"cannot seed {rid} as DECODING: this scheduler reserves no decode room")
    if (
        req.state.status is not ReqStatus.WAITING
        or req.state.locked_node is not None
        or req.state.owned_end_page
    ):
        raise ValueError(
            f"cannot seed {rid}: not a fresh request (status {req.state.status.value})"
        )
    if req.state.input_len != req.prompt_len or req.state.output_len:
        raise ValueError(
            f"cannot seed {rid}: it has been requeued (kept output {req.state.output_len})"
        )
    if rid in st.running or req in st.waiting:
        raise ValueError(f"cannot seed {rid}: the scheduler already holds it")
    if req.key_tokens != st.cache.key_tokens:
        raise ValueError(
            f"cannot seed {rid}: key unit {req.key_tokens} tokens, the scheduler's cache "
            f"uses {st.cache.key_tokens}"
        )
    if req.max_new_tokens == 0:
        ok = output_len == 0
    elif status is ReqStatus.TRANSFERRING:
        ok = output_len == 1
    else:  # only a request just out of prefill may already be at max_new_tokens
        ok = output_len == 1 or 1 <= output_len < req.max_new_tokens
    if not ok:
        raise ValueError(
            f"cannot seed {rid}: output_len {output_len} is impossible for a {status.value} "
            f"request with max_new_tokens {req.max_new_tokens}"
        )
    reason = never_fits_reason(st, req)
    if reason is not None:
        raise ValueError(f"cannot seed {rid}: {reason}")
    if len(st.running) >= st.max_running_requests:
        raise ValueError(
            f"cannot seed {rid}: all {st.max_running_requests} request slots are taken"
        )


def _admit(st: SchedulerState, req: Request, output_len: int, now: float) -> None:
    """Admission (add_one_req + launch.launch): lock the device prefix, own the rest of
    ``prompt + output_len - 1`` tokens; ``req`` joins the running set."""
    cache = st.cache
    u = cache.unit_pages
    kt = cache.key_tokens
    match = cache.match(req.keys, req.state.max_match_units)
    d = match.device_units
    end_page = -(-(req.state.input_len + max(output_len - 1, 0)) // st.page_size)
    lanes = lane_split(d * u, end_page - d * u, cache.cp_size)
    _check_free(st, f"running request {req.rid}", lanes)
    node = cache.lock(match.device_node, d)
    cache.commit()
    table = cache.pool.take_owned(lanes) if cache.make_room(lanes) else None
    if table is None:  # pragma: no cover - guarded by _check_free
        raise AssertionError("allocation failed after the free-page check")
    req.state.owned_pages = table
    req.state.device_prefix_len = req.state.prefix_len = d * kt
    req.state.host_hit_len = match.host_units * kt
    req.state.loaded_tokens = 0
    req.state.extend_input_len = req.state.input_len - req.state.prefix_len
    req.state.locked_node = node
    req.state.owned_start_page = d * u
    req.state.owned_end_page = end_page
    req.metrics.first_scheduled_time = now
    req.metrics.device_hit_tokens = req.state.prefix_len
    req.metrics.host_hit_tokens = 0
    req.metrics.num_chunks = 1
    req.state.status = ReqStatus.PREFILLING
    req.state.match_hint = 0
    req.state.match_node = None
    st.running[req.rid] = req


def _prefill(st: SchedulerState, req: Request, output_len: int, now: float) -> None:
    """launch.prefill_done: cache the complete prompt units, move the lock; the first
    token at ``now`` and ``output_len`` tokens out."""
    cache = st.cache
    u = cache.unit_pages
    node = req.state.locked_node
    assert node is not None
    req.state.computed_tokens = req.state.input_len
    units = min(req.state.input_len // cache.key_tokens, len(req.keys))
    if units > node.end:
        req.state.locked_node = cache.insert(node, req.keys, node.end, units, req.state.owned_pages)
        gone = lane_split(node.end * u, (units - node.end) * u, cache.cp_size)
        req.state.owned_pages = [t[n:] for t, n in zip(req.state.owned_pages, gone, strict=True)]
        req.state.owned_start_page = units * u
    req.metrics.first_token_time = now
    req.state.output_len = output_len


def seed_new_token_ratio(sched: SchedulerInterface, ratio: float) -> None:
    """Set the decode reservation ratio (``SchedulerState.new_token_ratio``) that decode
    steps would have reached: between its floor (``min_new_token_ratio``) and 1 (a
    retraction may set any ratio up to 1). Mutates only that ratio."""
    st = _state_of(sched)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"new_token_ratio {ratio} is outside [0, 1]")
    st.new_token_ratio = ratio
