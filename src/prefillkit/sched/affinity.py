# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Warm/cold cache-affinity admission decision (docs/design.md §5; default off).

Under FCFS a cold request (little or no cached prefix) that joins a warm-led batch
(a cache-hit batch whose forward is short) turns a 1-2 s forward into a 5-10 s one and
splits the warm work into a warm-cold-warm pattern. This module decides, for one
candidate during the admission scan, whether to admit it, skip it (leave it in the
queue for a later pass) or stop the scan.

The decision is a pure function of already-known values. The caller evaluates it
strictly post-match / pre-admit (after the candidate's prefix match and load-back
planning, before ``add_one_req``), so a SKIP touches no lock, allocation or budget
and needs nothing to be unwound: re-matching the skipped candidate next pass is what
the scan already does after a cap rejection. Classification uses the in-scan match
result (device prefix + host hit), so it adds no matching work.

Standard library only; this runs on the admission hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "AffinityBound",
    "AffinityBounds",
    "AffinityDecision",
    "BatchLead",
    "ReqClass",
    "classify",
    "decide",
]


class ReqClass(Enum):
    """Cache class of one candidate, from its in-scan match."""

    WARM = "warm"
    COLD = "cold"


class BatchLead(Enum):
    """Class of the batch's first admitted request.

    ``EMPTY`` while nothing is admitted yet. A chunked continuation (admitted first via
    ``add_chunked_req``) leads as ``WARM``: it carries its true prefix (the tokens its
    earlier chunks computed), so classifying it this way needs no change to how chunked
    requests are batched (they stay solo in CP bs>1 batches; chunk mixing is not
    reopened by this policy).
    """

    EMPTY = "empty"
    WARM = "warm"
    COLD = "cold"


class AffinityDecision(Enum):
    """What the scan does with the candidate."""

    ADMIT = "admit"  # go on to add_one_req
    SKIP = "skip"  # leave it queued untouched, keep scanning
    STOP = "stop"  # end the scan; the candidate stays queued and leads a later batch


class AffinityBound(Enum):
    """The bound that turned a cold candidate's SKIP into a STOP."""

    WINDOW = "W"  # skips this pass reached the skip window
    DEFERS = "K"  # the candidate was already deferred in K passes
    AGE = "T"  # the candidate is T seconds old


@dataclass(frozen=True, slots=True)
class AffinityBounds:
    """Bounds on how long a cold candidate may be skipped.

    - ``warm_floor_tokens``: device prefix + host hit at or above this is warm.
    - ``skip_window`` (W): skips allowed per admission pass.
    - ``max_head_defers`` (K): passes in which a request may be deferred (skipped; a
      request is skipped at most once per pass). The name is the config knob's.
    - ``max_age_s`` (T): seconds a request may wait before it can no longer be skipped.
    """

    warm_floor_tokens: int = 64
    skip_window: int = 16
    max_head_defers: int = 3
    max_age_s: float = 5.0


def classify(device_prefix_len: int, host_hit_len: int, floor_tokens: int) -> ReqClass:
    """Warm iff ``device_prefix_len + host_hit_len >= floor_tokens``, else cold.

    The host hit counts as cached even before load-back: it will not be recomputed if
    the load succeeds, and the match is the only signal that exists under FCFS.
    """
    if device_prefix_len + host_hit_len >= floor_tokens:
        return ReqClass.WARM
    return ReqClass.COLD


def decide(
    candidate_class: ReqClass,
    batch_lead: BatchLead,
    skips_this_pass: int,
    head_defers: int,
    age_s: float,
    bounds: AffinityBounds,
) -> AffinityDecision:
    """Decide ADMIT / SKIP / STOP for one candidate.

    Decision table:

    ======== ======== ==========================================================
    class    lead     decision
    ======== ======== ==========================================================
    WARM     any      ADMIT
    COLD     EMPTY    ADMIT (the FCFS head always starts a batch)
    COLD     COLD     ADMIT
    COLD     WARM     SKIP; STOP once any bound trips:
                      ``skips_this_pass >= W`` (the pass's skip window is full),
                      ``head_defers >= K`` (the candidate was already
                      deferred in K passes), ``age_s >= T``
    ======== ======== ==========================================================

    A warm candidate joining a cold-led batch is free density: the cold extend
    dominates that forward anyway.

    Three amendments to the design draft:

    1. Cold into a cold-led batch ADMITS. Stopping there would regress today's
       co-batching of small cold requests.
    2. A starved cold candidate (a bound tripped) makes the scan STOP; it is never
       force-admitted into the warm-led batch. It waits for the same forward either
       way, but next pass it leads its own clean batch instead of slowing this one.
    3. Priority is handled by disabling: under priority scheduling the caller turns
       the policy off wholesale (a skip must not reorder requests across priority
       classes). There is no per-request priority comparison here.

    ``head_defers`` is the candidate's own defer count: the passes in which it was
    already skipped, wherever it stood in the queue (the name is historical; it is not
    limited to the queue head). The caller keeps that counter.
    """
    if candidate_class is ReqClass.WARM or batch_lead is not BatchLead.WARM:
        return AffinityDecision.ADMIT
    if (
        skips_this_pass >= bounds.skip_window
        or head_defers >= bounds.max_head_defers
        or age_s >= bounds.max_age_s
    ):
        return AffinityDecision.STOP
    return AffinityDecision.SKIP


def tripped_bound(
    skips_this_pass: int, head_defers: int, age_s: float, bounds: AffinityBounds
) -> AffinityBound | None:
    """Which bound stops a cold candidate behind a warm lead (None: none trips).

    Checked in the order W, K, T (the first that trips is reported), with the same
    comparisons as :func:`decide`; called only once ``decide`` said STOP, so it costs
    nothing per candidate.
    """
    if skips_this_pass >= bounds.skip_window:
        return AffinityBound.WINDOW
    if head_defers >= bounds.max_head_defers:
        return AffinityBound.DEFERS
    if age_s >= bounds.max_age_s:
        return AffinityBound.AGE
    return None
