"""Queue orders as pure functions over :class:`~prefillkit.sched.policy_view.CandidateView`.

Each takes the waiting requests' views in arrival order (``views[i].position == i``) and
returns the order to scan them in, as positions. Nothing is mutated; ties keep arrival
order. The first three re-express prefillkit's own policies on the view (the scheduler
keeps its faster forms; tests/test_policy_orders.py checks they agree); the rest are the
zoo, each cited to its proposal (docs/policies.md):

- :func:`order_lpm_aging`: SGLang #31954 (PRs #31723, #33210), LPM with an aging term;
- :func:`order_residual_sjf`: vLLM #51375, residual-aware shortest job first;
- :func:`order_waiting_qos`: vLLM #53277, cheapest estimated service first inside a
  bounded window (#54625's form: the window reorders, positions past it stay fixed);
- :func:`order_session_affinity`: vLLM #51384, bounded session affinity;
- :func:`order_loadback_aware`: SGLang #38358, requests without a large host load-back
  first;
- :func:`order_cost_aware` and :func:`order_affinity_hold`: prefillkit's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from prefillkit.sched.policy_view import CandidateView

__all__ = [
    "LOADBACK_LARGE_SHARE",
    "order_affinity_hold",
    "order_cost_aware",
    "order_fcfs",
    "order_loadback_aware",
    "order_lof",
    "order_lpm",
    "order_lpm_aging",
    "order_residual_sjf",
    "order_session_affinity",
    "order_waiting_qos",
]


def order_fcfs(views: Sequence[CandidateView]) -> list[int]:
    """Arrival order."""
    return [v.position for v in views]


def order_lof(views: Sequence[CandidateView]) -> list[int]:
    """Longest output first."""
    return [v.position for v in sorted(views, key=lambda v: -v.max_new_tokens)]


def order_lpm(views: Sequence[CandidateView]) -> list[int]:
    """Upstream LPM: longest matched prefix (device + host) first; a request whose
    in-batch head repeats an earlier one's goes last (policy.order_lpm)."""
    return order_lpm_aging(views, 0)


def order_lpm_aging(views: Sequence[CandidateView], tokens_per_pass: int) -> list[int]:
    """SGLang #31954: LPM's key ``-(matched + N · waiting_passes)`` with
    ``N = tokens_per_pass`` (0: upstream LPM). The in-batch-deprioritised requests stay
    last, as upstream keeps them; ties keep queue order. The caller counts the passes
    (upstream increments every waiting request's counter at the start of each LPM
    ordering, and not on passes that fall back to FCFS)."""
    seen: set[object] = set()
    scored: list[tuple[int, int]] = []
    for v in views:
        head = v.in_batch_head
        if head is not None:
            if head in seen:
                scored.append((1, v.position))
                continue
            seen.add(head)
        scored.append((-(v.matched_tokens + tokens_per_pass * v.waiting_passes), v.position))
    scored.sort()
    return [p for _, p in scored]


def split_by_age(
    views: Sequence[CandidateView], max_wait_s: float | None
) -> tuple[list[CandidateView], list[CandidateView]]:
    """(the views that waited ``>= max_wait_s``, in arrival order; the others)."""
    if max_wait_s is None:
        return [], list(views)
    aged = [v for v in views if v.age_s >= max_wait_s]
    rest = [v for v in views if v.age_s < max_wait_s]
    return aged, rest


def order_residual_sjf(
    views: Sequence[CandidateView], max_wait_s: float, page_size: int
) -> list[int]:
    """vLLM #51375's three tiers: recovering (retracted / preempted) requests first, then
    the ones older than ``max_wait_s`` (its ``residual_sjf_max_wait_ms`` = 10,000), both
    in arrival order; then the rest by remaining prefill *blocks*, counting device hits
    only (a host hit is remaining work there), ties by arrival."""
    recovering = [v.position for v in views if v.recovering]
    others = [v for v in views if not v.recovering]
    aged, rest = split_by_age(others, max_wait_s)
    rest.sort(key=lambda v: -(-v.device_miss_tokens // page_size))
    return recovering + [v.position for v in aged] + [v.position for v in rest]


def order_waiting_qos(
    views: Sequence[CandidateView], window: int, cost: Callable[[CandidateView], float]
) -> list[int]:
    """vLLM #53277 (an issue; no parameters published): prefer the lower estimated
    remaining service cost *within a bounded window*. The form is #54625's: the first
    ``window`` requests of the queue are reordered by ``cost`` (ties by arrival); every
    request past the window keeps its place, so none waits behind more than
    ``window - 1`` later arrivals."""
    head = sorted(views[:window], key=cost)
    return [v.position for v in head] + [v.position for v in views[window:]]


def order_session_affinity(
    views: Sequence[CandidateView],
    now: float,
    last_scheduled: Mapping[str, float],
    *,
    window: int,
    min_cached_tokens: int,
    max_head_wait_s: float,
    session_ttl_s: float,
) -> list[int]:
    """vLLM #51384: FCFS, except that at most one request is promoted to the head: a
    continuation of a session scheduled within ``session_ttl_s``, inside the first
    ``window`` requests, with at least ``min_cached_tokens`` cached *on the device* (an
    actual local hit). The best is the largest ``(cached, session last scheduled,
    -arrival)``. Nothing is promoted over a recovering head, nor once the head has
    waited ``max_head_wait_s`` (the head's deadline)."""
    order = [v.position for v in views]
    if len(views) < 2:
        return order
    head = views[0]
    if head.recovering or head.age_s >= max_head_wait_s:
        return order
    best: tuple[int, float, float] | None = None
    pick = -1
    for v in views[1:window]:
        if v.session is None or v.device_tokens < min_cached_tokens:
            continue
        last = last_scheduled.get(v.session)
        if last is None or now - last > session_ttl_s:
            continue
        score = (v.device_tokens, last, -v.arrival_time)
        if best is None or score > best:
            best, pick = score, v.position
    if pick < 0:
        return order
    order.remove(pick)
    return [pick, *order]


#: SGLang #38358 does not publish what a "large" load-back is. ASSUMPTION: a request
#: whose host load-back is at least half of its prompt.
LOADBACK_LARGE_SHARE = 0.5


def large_loadback(v: CandidateView) -> bool:
    """Whether ``v``'s host load-back is large (:data:`LOADBACK_LARGE_SHARE`)."""
    return v.host_tokens > 0 and v.host_tokens >= LOADBACK_LARGE_SHARE * v.input_tokens


def order_loadback_aware(views: Sequence[CandidateView], age_limit_s: float) -> list[int]:
    """SGLang #38358: requests without a large host load-back first, then those with one
    (both in arrival order); a request ``age_limit_s`` old (the PR's 5 s) is no longer
    deferred and goes first, in arrival order."""
    aged, rest = split_by_age(views, age_limit_s)
    light = [v.position for v in rest if not large_loadback(v)]
    heavy = [v.position for v in rest if large_loadback(v)]
    return [v.position for v in aged] + light + heavy


def cost_aware_deadline(v: CandidateView, seconds: float, slack: float, cap_s: float) -> float:
    """When ``v`` stops being overtaken: its arrival plus ``slack`` times the forward it
    would cost alone (``seconds``), at most ``cap_s`` after its arrival."""
    return v.arrival_time + min(slack * seconds, cap_s)


def order_cost_aware(
    views: Sequence[CandidateView], deadline: Callable[[CandidateView], float]
) -> list[int]:
    """prefillkit's cost-aware order: earliest deadline first, with a request's deadline
    its arrival plus a multiple of its own forward time (:func:`cost_aware_deadline`).

    A request that costs ``s`` seconds alone is overtaken only by requests that arrived
    less than ``slack · (s - s')`` after it and cost ``s' < s``: light requests pass a
    heavy one that arrived shortly before them, nothing passes a request long after its
    arrival. ``slack = 0`` is FCFS; a large slack is shortest-forward-first. The bound on
    what overtaking costs a request scales with its own forward (capped), so a workload
    whose requests all take 0.3 s is reordered within a second and one whose cold
    prompts take 8 s within tens of seconds; ties keep arrival order."""
    return [v.position for v in sorted(views, key=deadline)]


def order_affinity_hold(
    views: Sequence[CandidateView],
    warm: Callable[[CandidateView], bool],
    released: Callable[[CandidateView], bool],
) -> list[int]:
    """S4 with a hold: the requests no longer held (``released``: S4's bounds tripped,
    T seconds old or deferred in K passes) first, then the warm ones, then the cold ones,
    each group in the given order. So a deferred cold request does not lead the next
    batch while warm work waits, until its bounds release it."""
    first = [v.position for v in views if released(v)]
    held = [v for v in views if not released(v)]
    warm_ones = [v.position for v in held if warm(v)]
    cold = [v.position for v in held if not warm(v)]
    return first + warm_ones + cold
