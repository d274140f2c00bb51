"""Each router's decision as a pure function of the request, the fleet view and numbers.

Nothing here keeps state or draws randomness: a router class (router.py) passes its
round-robin counter, its random draws (uniform floats in [0, 1) or distinct indices) and
its tree sizes in. Every function returns the chosen instance's index. Sources, by file
and commit, are in docs/routers.md; each formula is pinned at one hand-computed point in
tests/test_routers.py.

Ties: where the real router breaks a tie by iteration order over a hash map (sglang-router,
Dynamo) the rule here is the lowest index; where it breaks it at random (llm-d's
max-score-picker, Dynamo's equal-tree-size case) a uniform draw picks among the tied
indices in index order (:func:`pick_tied`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from prefillkit.sim.routers.view import FleetView, RouteRequest

__all__ = [
    "cache_aware",
    "is_imbalanced",
    "kv_cost",
    "kv_costs",
    "kv_usage_scores",
    "least_load",
    "longest_match",
    "pick_tied",
    "power_of_two",
    "prefix_scores",
    "queue_scores",
    "round_robin",
    "softmax_pick",
    "softmax_probabilities",
    "weighted",
    "weighted_scores",
]


def argmin(values: Sequence[float]) -> int:
    """The lowest index of the smallest value (Rust's ``min_by_key`` keeps the first)."""
    return list(values).index(min(values))


def pick_tied(tied: Sequence[int], draw: float) -> int:
    """One of ``tied`` (indices in increasing order) by a uniform ``draw`` in [0, 1):
    the ``floor(draw * len)``-th. A uniform choice, as llm-d's max-score-picker shuffle
    and Dynamo's random tie-break make it."""
    return tied[min(int(draw * len(tied)), len(tied) - 1)]


# ------------------------------------------------------------------ load only
def round_robin(counter: int, num_instances: int) -> int:
    """sglang-router round_robin.rs: ``counter % len`` with the counter advanced once per
    decision (the caller owns the counter)."""
    return counter % num_instances


def least_load(view: FleetView) -> int:
    """Fewest ``queued_tokens`` (prefill work owed), ties: fewest ``running_reqs``, then
    the lowest index. Assumption: a join-the-shortest-queue rule measured in owed prefill
    tokens; no one of the three routers ships exactly this policy (docs/routers.md)."""
    q, r = view.queued_tokens, view.running_reqs
    best = 0
    for i in range(1, len(view)):
        if (q[i], r[i]) < (q[best], r[best]):
            best = i
    return best


def power_of_two(view: FleetView, first: int, second: int) -> int:
    """sglang-router power_of_two.rs: of two distinct instances drawn by the caller, the
    one with fewer ``running_reqs`` (its ``worker.load()``); equal loads keep ``first``
    (``if load1 <= load2 { worker1 }``)."""
    r = view.running_reqs
    return first if r[first] <= r[second] else second


# ------------------------------------------------------------------ sglang-router cache_aware
def is_imbalanced(loads: Sequence[int], abs_threshold: int, rel_threshold: float) -> bool:
    """sglang-router cache_aware.rs: ``max - min > abs_threshold`` AND
    ``max > min * rel_threshold`` over the instances' loads (running requests)."""
    hi, lo = max(loads), min(loads)
    return hi - lo > abs_threshold and hi > lo * rel_threshold


def cache_aware(
    req: RouteRequest,
    view: FleetView,
    tree_sizes: Sequence[int],
    cache_threshold: float,
    abs_threshold: int,
    rel_threshold: float,
) -> int:
    """sglang-router cache_aware.rs ``select_worker``.

    Imbalanced (:func:`is_imbalanced` over ``running_reqs``): the least loaded instance.
    Balanced: match rate = the longest match (``max matched_tokens``) over
    ``prompt_tokens`` (0 for an empty prompt); above ``cache_threshold`` (strictly) the
    instance with that longest match, else the one with the smallest tree
    (``tree_sizes``, the caller's per-instance sizes). Ties: the lowest index (sglang-router
    takes the first tenant of the deepest node's map and the first smallest tenant, both
    in hash-map order).
    """
    if is_imbalanced(view.running_reqs, abs_threshold, rel_threshold):
        return argmin(view.running_reqs)
    best = longest_match(view.matched_tokens)
    rate = view.matched_tokens[best] / req.prompt_tokens if req.prompt_tokens > 0 else 0.0
    if rate > cache_threshold:
        return best
    return argmin(tree_sizes)


def longest_match(matched: Sequence[int]) -> int:
    """The lowest index of the longest match."""
    return list(matched).index(max(matched))


# ------------------------------------------------------------------ Dynamo KV router
def kv_costs(req: RouteRequest, view: FleetView, overlap_score_weight: float) -> list[float]:
    """Dynamo's cost per instance (scheduler.rs ``DefaultWorkerSelector``, lower is better):
    ``overlap_score_weight * prefill_blocks + decode_blocks`` with

    - ``prefill_blocks = (queued_tokens + prompt_tokens - matched_tokens) / key_tokens``:
      the prompt tokens the instance would still owe (Dynamo's "potential prefill tokens":
      its active prefill tokens plus this request's uncached ones) in blocks, a float;
    - ``decode_blocks = active_blocks``: the blocks its running requests hold. Dynamo
      also adds this request's blocks not already active there; that term is the same
      for every instance up to the active-sequence overlap, which the view does not
      carry, and a constant shift changes neither the argmin nor the softmax below.
    """
    kt = req.key_tokens
    prompt = req.prompt_tokens
    w = overlap_score_weight
    return [
        w * ((q + (prompt - m if prompt > m else 0)) / kt) + a
        for q, m, a in zip(view.queued_tokens, view.matched_tokens, view.active_blocks, strict=True)
    ]


def softmax_probabilities(costs: Sequence[float], temperature: float) -> list[float]:
    """Dynamo ``softmax_sample``: costs min-max normalised, negated, over ``temperature``:
    ``p_i ∝ exp(-(c_i - c_min) / ((c_max - c_min) * temperature))``; all equal: uniform.
    ``temperature`` > 0."""
    lo, hi = min(costs), max(costs)
    if lo == hi:
        return [1.0 / len(costs)] * len(costs)
    scale = (hi - lo) * temperature
    weights = [math.exp(-(c - lo) / scale) for c in costs]
    total = sum(weights)
    return [w / total for w in weights]


def softmax_pick(probabilities: Sequence[float], draw: float) -> int:
    """Dynamo's sampling: the first index whose running sum reaches ``draw``
    (``if sample <= cumsum``); the last one if rounding leaves the sum short."""
    cumsum = 0.0
    for i, p in enumerate(probabilities):
        cumsum += p
        if draw <= cumsum:
            return i
    return len(probabilities) - 1


def kv_cost(
    req: RouteRequest,
    view: FleetView,
    overlap_score_weight: float,
    temperature: float,
    draw: float,
    tree_sizes: Sequence[int] | None = None,
) -> int:
    """Dynamo's KV router: temperature 0 the lowest cost; ties go to the smallest tree
    (``tree_sizes``: the blocks its index holds per instance), and when those are equal
    (or unknown) to a uniform pick by ``draw`` (Dynamo draws at random). Temperature > 0:
    :func:`softmax_probabilities` sampled with ``draw``."""
    costs = kv_costs(req, view, overlap_score_weight)
    if temperature > 0:
        return softmax_pick(softmax_probabilities(costs, temperature), draw)
    low = min(costs)
    tied = [i for i, c in enumerate(costs) if c == low]
    if len(tied) == 1:
        return tied[0]
    if tree_sizes is not None:
        sizes = [tree_sizes[i] for i in tied]
        if min(sizes) != max(sizes):
            return tied[argmin(sizes)]
    return pick_tied(tied, draw)


# ------------------------------------------------------------------ llm-d weighted scorers
def queue_scores(waiting: Sequence[int]) -> list[float]:
    """llm-d / GIE queue-scorer: ``(max - q) / (max - min)`` over the waiting queues;
    all equal: 1.0 each."""
    hi, lo = max(waiting), min(waiting)
    if hi == lo:
        return [1.0] * len(waiting)
    span = hi - lo
    return [(hi - q) / span for q in waiting]


def kv_usage_scores(active: Sequence[int], total: Sequence[int]) -> list[float]:
    """llm-d / GIE kv-cache-utilization-scorer: ``1 - usage``, usage = active blocks over
    the pool's blocks (vLLM's ``kv_cache_usage_perc`` counts blocks held by running
    requests). A pool of 0 blocks scores 0."""
    return [1.0 - a / t if t > 0 else 0.0 for a, t in zip(active, total, strict=True)]


def prefix_scores(req: RouteRequest, view: FleetView) -> list[float]:
    """llm-d precise-prefix-cache-scorer (and GIE's approximate prefix-cache-scorer):
    matched blocks over the request's blocks, in [0, 1]; a request with no whole block
    scores 0 everywhere."""
    blocks = len(req.keys)
    if blocks == 0:
        return [0.0] * len(view)
    kt = req.key_tokens
    return [1.0 if m // kt >= blocks else m // kt / blocks for m in view.matched_tokens]


def weighted_scores(
    req: RouteRequest,
    view: FleetView,
    prefix_weight: float,
    queue_weight: float,
    kv_usage_weight: float,
) -> list[float]:
    """llm-d's scheduling profile: the weighted sum of the three scorers per instance."""
    p = prefix_scores(req, view)
    q = queue_scores(view.waiting_reqs)
    k = kv_usage_scores(view.active_blocks, view.total_blocks)
    pw, qw, kw = prefix_weight, queue_weight, kv_usage_weight
    return [pw * a + qw * b + kw * c for a, b, c in zip(p, q, k, strict=True)]


def weighted(
    req: RouteRequest,
    view: FleetView,
    prefix_weight: float,
    queue_weight: float,
    kv_usage_weight: float,
    draw: float,
) -> int:
    """llm-d max-score-picker over :func:`weighted_scores`: the highest score; ties are
    broken uniformly at random there (a shuffle before a stable sort), here by ``draw``."""
    scores = weighted_scores(req, view, prefix_weight, queue_weight, kv_usage_weight)
    top = max(scores)
    return pick_tied([i for i, s in enumerate(scores) if s == top], draw)
