"""Admission decisions as pure functions over the policy views: for one candidate, given
the batch so far, ADMIT, SKIP (leave it queued, keep scanning) or STOP (end the scan; it
leads a later batch). The affinity policy's own decision is ``affinity.decide``; these
are the zoo's (docs/policies.md):

- :func:`admit_loadback_aware`: SGLang #38358's deferral of load-back-only prefill while
  decode runs (30 ms idle admission delay, 5 s age limit);
- :func:`classify_by_cost`: the S4 variant that calls a candidate cold when its marginal
  forward time is large, not when its cached prefix is under 64 tokens;
- :func:`admit_cost_aware`: prefillkit's cost-aware admission.
"""

from __future__ import annotations

from prefillkit.sched.affinity import AffinityBounds, AffinityDecision, ReqClass, classify, decide
from prefillkit.sched.buffer import ReqShape
from prefillkit.sched.policy_orders import large_loadback
from prefillkit.sched.policy_view import BatchView, CandidateView, PassView, ServiceCost

__all__ = [
    "admit_cost_aware",
    "admit_loadback_aware",
    "affinity_decision",
    "classify_by_cost",
    "loadback_wake",
]

ADMIT = AffinityDecision.ADMIT
SKIP = AffinityDecision.SKIP
STOP = AffinityDecision.STOP


def affinity_decision(
    c: CandidateView, batch: BatchView, defers: int, bounds: AffinityBounds
) -> AffinityDecision:
    """S4 (``affinity.decide``) on the views: ``c`` classified by the warm floor against
    the batch's lead, with the pass's skips so far, ``c``'s own defers and its age. The
    pass calls ``decide`` with the same values directly (its hot path builds no view)."""
    cls = classify(c.device_tokens, c.host_tokens, bounds.warm_floor_tokens)
    return decide(cls, batch.lead, batch.skips, defers, c.age_s, bounds)


def admit_loadback_aware(
    c: CandidateView, p: PassView, idle_delay_s: float, age_limit_s: float
) -> AffinityDecision:
    """SGLang #38358: a request whose prefill is mostly a host load-back
    (``policy_orders.large_loadback``) is deferred while decode runs, and once decode
    stops, until it has been idle ``idle_delay_s`` (30 ms); from ``age_limit_s`` (5 s)
    of waiting it is no longer deferred. Everything else is admitted.

    ========================= ============ ================= ========
    large load-back           age          decode            decision
    ========================= ============ ================= ========
    no                        any          any               ADMIT
    yes                       >= limit     any               ADMIT
    yes                       < limit      running           SKIP
    yes                       < limit      idle < delay      SKIP
    yes                       < limit      idle >= delay     ADMIT
    ========================= ============ ================= ========
    """
    if not large_loadback(c) or c.age_s >= age_limit_s:
        return ADMIT
    if p.decoding > 0 or p.now < p.decode_seen_at + idle_delay_s:
        return SKIP
    return ADMIT


def loadback_wake(p: PassView, idle_delay_s: float) -> float | None:
    """When a pass that deferred a load-back only for the idle delay should run again
    (None: decode is running; its steps run the next passes)."""
    if p.decoding > 0:
        return None
    return p.decode_seen_at + idle_delay_s


def classify_by_cost(
    c: CandidateView, batch: BatchView, service: ServiceCost, heavy_ratio: float
) -> ReqClass:
    """S4 with "heavy" by marginal cost: cold iff adding ``c`` adds more than
    ``heavy_ratio`` times the forward it joins (a joiner that would more than double a
    warm batch's forward at ratio 1). The lead is compared with the smallest forward,
    one page of extend (:func:`reference_forward`): a lead that alone costs more than
    ``1 + heavy_ratio`` of it is cold. So a request with a small cache hit but a large
    extend is cold, which the 64-token floor calls warm."""
    if batch.shapes:
        heavy = service.marginal(batch, c) > heavy_ratio * batch.forward_s
    else:
        heavy = service.solo(c) > (1.0 + heavy_ratio) * reference_forward(service)
    return ReqClass.COLD if heavy else ReqClass.WARM


def reference_forward(service: ServiceCost) -> float:
    """The smallest forward: one request extending 64 tokens over no prefix (a page at
    the seed deployment's page size), the yardstick of a lead's class."""
    return service.forward((ReqShape(0, 64, 0),))


def admit_cost_aware(
    c: CandidateView,
    batch: BatchView,
    service: ServiceCost,
    deadline: float,
    now: float,
    extend_cap: int | None,
) -> AffinityDecision:
    """prefillkit's cost-aware admission: the summed TTFT of joining now against
    deferring, from the marginal-cost service.

    Joining a batch of ``n`` adds the candidate's marginal forward time ``m`` to each of
    them: ``n · m``. Deferring it does not save that work, it moves it: the candidate
    waits for a later forward (its own TTFT grows by what that forward costs beyond
    ``m``; at best, leading it, the fixed part ``solo - m``), and the ``k`` requests
    that ride with it there pay ``m`` each. So deferring pays only when its later batch
    has fewer riders than this one: join iff ``n · m <= (solo - m) + k · m``.

    ``k`` is what the batch limits leave: a candidate that extends ``x`` of the batch's
    ``extend_cap`` tokens leaves room for ``1 - x / cap`` of a batch of riders, so
    ``k = n · max(0, 1 - x / cap)``. A light candidate (``x`` small) always joins; a
    heavy one (``x`` near the cap, e.g. a 48 K cold prompt under a 64 K CP extend
    limit) behind light ones waits for a batch of its own, the cold-joiner case. With no
    extend cap ``k = n`` and nothing is deferred.

    ============================ ==================================== ========
    batch                        candidate                            decision
    ============================ ==================================== ========
    empty                        any                                  ADMIT
    n >= 1                       past its deadline                    ADMIT
    n >= 1                       n · m <= (solo - m) + k · m          ADMIT
    n >= 1                       otherwise                            SKIP
    ============================ ==================================== ========

    ``deadline``: ``policy_orders.cost_aware_deadline`` (a request past it is no longer
    deferred). Without a forward estimate ``m`` and ``solo`` are token counts.
    """
    n = batch.size
    if n == 0 or now >= deadline:
        return ADMIT
    m = service.marginal(batch, c)
    room = 1.0 if extend_cap is None else max(0.0, 1.0 - c.uncached_tokens / extend_cap)
    if n * m <= (service.solo(c) - m) + n * room * m:
        return ADMIT
    return SKIP
