# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Priority preemption: which running requests to evict for a higher-priority one.

:func:`pick_victims` is pure; :func:`try_preempt` (called from the admission pass) applies
it. Mutates (``try_preempt``): the victims (requeued, KV freed), the decode and running
sets, the queue, the pass's reservation offset and the preemption counter.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from prefillkit.request import ReqStatus, Request
from prefillkit.sched.adder import PrefillAdder
from prefillkit.sched.decode import retract
from prefillkit.sched.state import SchedulerState


def outranks(a: int, b: int, threshold: int, low_values_first: bool) -> bool:
    """Whether priority ``a`` beats ``b`` by more than ``threshold``."""
    diff = (b - a) if low_values_first else (a - b)
    return diff > threshold


def pick_victims(
    req: Request,
    running: list[Request],
    *,
    slots_needed: int,
    tokens_needed: int,
    threshold: int,
    low_values_first: bool,
    reserved: Callable[[Request], float] | None = None,
    held: Callable[[Request], float] | None = None,
) -> list[Request]:
    """Victims for ``req``: lowest priority first, then newest, while the priority
    difference exceeds ``threshold``, until ``slots_needed`` slots and ``tokens_needed``
    tokens are freed. Returns [] if the need cannot be met (all or nothing).

    A victim frees the KV it holds (``held(victim)`` tokens: by default prompt + output
    tokens; the scheduler passes what actually becomes free or evictable) plus, when
    ``reserved`` is given, the decode room the admission budget reserves for it
    (``reserved(victim)`` tokens), since preempting it releases that reservation too.

    A pure function: the caller evicts the victims.
    """
    sign = -1 if low_values_first else 1
    cands = sorted(
        (r for r in running if outranks(req.priority, r.priority, threshold, low_values_first)),
        key=lambda r: (sign * r.priority, -r.arrival_time),
    )
    victims: list[Request] = []
    slots = 0
    tokens = 0.0
    for r in cands:
        if slots >= slots_needed and tokens >= tokens_needed:
            break
        victims.append(r)
        slots += 1
        tokens += (r.state.input_len + r.state.output_len if held is None else held(r)) + (
            reserved(r) if reserved is not None else 0
        )
    if slots < slots_needed or tokens < tokens_needed:
        return []
    return victims


def shortfall(st: SchedulerState, req: Request, adder: PrefillAdder) -> int:
    """Tokens ``req`` lacks to pass the memory test now (0 if it passes).

    Its device prefix is taken as leaving the evictable pool under its lock (an upper
    bound: only its unlocked part does), so the prefix cancels out:
    ``input - prefix + reserved + page`` against ``rem_total_tokens - prefix``. No
    match needed; rare path (the request-slot limit). Pure."""
    left = req.max_new_tokens - req.state.output_len  # output kept across a requeue
    need = req.state.input_len + min(left, st.cfg.clip_max_new_tokens)
    room = adder.rem_total_tokens - st.page_size
    return 0 if need < room else int(need - room) + 1


def held_tokens(st: SchedulerState, v: Request) -> float:
    """Tokens that preempting ``v`` makes free or evictable: the pages it owns plus the
    pages of its locked prefix no other request locks. Pure."""
    pages = v.state.owned_end_page - v.state.owned_start_page
    node = v.state.locked_node
    root = st.cache.root
    while node is not None and node is not root:
        if node.lock_ref != 1:
            break  # NOTE: another lock ends in this subtree (cache/node.py), so above too
        pages += node.n_pages
        node = node.parent
    return float(pages * st.page_size)


def try_preempt(
    st: SchedulerState,
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
    victims' decode reservations leave the pass's ``rem_total_tokens`` offset; their
    requeue time is the pass's (``launch.launch``).
    """
    cfg = st.cfg
    if not (cfg.enable_priority_scheduling and cfg.enable_priority_preemption):
        return None
    if on_no_token and not cfg.enable_preempt_on_no_token:
        return None
    clip = cfg.clip_max_new_tokens

    def reserved(v: Request) -> float:
        """Decode room the adder reserved for ``v`` (its rem_total_tokens offset)."""
        if not st.reserve_decode:
            return 0.0
        ratio = 1.0 if v.ignore_eos else adder.new_token_ratio
        return min(v.max_new_tokens - v.state.output_len, clip) * ratio

    victims = pick_victims(
        req,
        [r for r in st.decoding if r.state.status is ReqStatus.DECODING],
        slots_needed=slots_needed,
        tokens_needed=tokens_needed,
        threshold=cfg.priority_scheduling_preemption_threshold,
        low_values_first=cfg.schedule_low_priority_values_first,
        reserved=reserved,
        held=partial(held_tokens, st),
    )
    if not victims:
        return None
    for v in victims:
        adder.rem_total_token_offset -= reserved(v)
        st.decoding.remove(v)
        retract(st, v, preempt=True)
    st.stats.preemptions += len(victims)
    return victims
