"""Table tests of the zoo's admission decisions (sched/policy_admit.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from prefillkit.sched.affinity import AffinityBounds, AffinityDecision, BatchLead, ReqClass, decide
from prefillkit.sched.buffer import ReqShape
from prefillkit.sched.policy_admit import (
    admit_cost_aware,
    admit_loadback_aware,
    affinity_decision,
    classify_by_cost,
    loadback_wake,
)
from prefillkit.sched.policy_view import BatchView, CandidateView, PassView, ServiceCost

A, S, T = AffinityDecision.ADMIT, AffinityDecision.SKIP, AffinityDecision.STOP


def view(inp: int, dev: int, host: int, age: float = 0.0) -> CandidateView:
    return CandidateView(0, "c", 0.0, age, inp, dev, host)


def linear(shapes: Sequence[ReqShape]) -> float:
    """1 s a forward plus 1 ms per computed token (a hand-checkable estimate)."""
    return 1.0 + 0.001 * sum(s.extend_len for s in shapes) if shapes else 0.0


SVC = ServiceCost(linear)


def batch(*extends: int) -> BatchView:
    shapes = tuple(ReqShape(0, e) for e in extends)
    return BatchView(shapes, BatchLead.WARM if shapes else BatchLead.EMPTY, 0, linear(shapes))


@pytest.mark.parametrize(
    ("c", "decoding", "idle", "want"),
    [
        (view(1000, 900, 0), 4, 0.0, A),  # no load-back at all
        (view(1000, 0, 400), 4, 0.0, A),  # a load-back under half its prompt
        (view(1000, 0, 600), 4, 0.0, S),  # mostly load-back, decode running
        (view(1000, 0, 600, age=5.0), 4, 0.0, A),  # the 5 s age limit
        (view(1000, 0, 600), 0, 0.01, S),  # decode idle for less than 30 ms
        (view(1000, 0, 600), 0, 0.04, A),  # idle past the delay
        (view(1000, 0, 600), 0, math.inf, A),  # decode never ran
    ],
)
def test_loadback_aware_table(c: CandidateView, decoding: int, idle: float, want: object) -> None:
    p = PassView(10.0, decoding, 10.0 - idle if decoding == 0 else 10.0)
    assert admit_loadback_aware(c, p, 0.03, 5.0) is want


def test_loadback_wake_is_the_end_of_the_idle_delay() -> None:
    assert loadback_wake(PassView(10.0, 0, 9.99), 0.03) == 9.99 + 0.03
    assert loadback_wake(PassView(10.0, 3, 10.0), 0.03) is None


@pytest.mark.parametrize(
    ("b", "c", "cap", "deadline", "want"),
    [
        (batch(), view(100_000, 0, 0), 1000, 50.0, A),  # an empty batch: it leads
        # n = 1, m = 0.1 s, solo - m = 1 s, room 0.9: 0.1 <= 1.09
        (batch(100), view(200, 100, 0), 1000, 50.0, A),
        # a heavy one behind one light: 0.9 <= 1 + 0.1 x 0.9 (deferring saves too little)
        (batch(100), view(1000, 100, 0), 1000, 50.0, A),
        # behind two: 1.8 > 1 + 2 x 0.1 x 0.9 = 1.18: it waits for a batch of its own
        (batch(100, 100), view(1000, 100, 0), 1000, 50.0, S),
        # the same past its deadline: it joins
        (batch(100, 100), view(1000, 100, 0), 1000, 10.0, A),
        # the same with no extend cap: its later batch has as many riders (k = n): joins
        (batch(100, 100), view(1000, 100, 0), None, 50.0, A),
        # behind four: a medium one at the balance joins (2.0 <= 1 + 4 x 0.5 x 0.5) ...
        (batch(100, 100, 100, 100), view(600, 100, 0), 1000, 50.0, A),
        # ... a slightly larger one waits (2.4 > 1 + 4 x 0.4 x 0.6 = 1.96)
        (batch(100, 100, 100, 100), view(700, 100, 0), 1000, 50.0, S),
    ],
)
def test_cost_aware_table(
    b: BatchView, c: CandidateView, cap: int | None, deadline: float, want: object
) -> None:
    assert admit_cost_aware(c, b, SVC, deadline, 10.0, cap) is want


def test_cost_aware_without_an_estimate_counts_tokens() -> None:
    svc = ServiceCost(None)
    b = BatchView((ReqShape(0, 100),), BatchLead.WARM, 0, svc.forward([ReqShape(0, 100)]))
    # m = 100 tokens <= 2,048 (the fixed part) + ...: joins
    assert admit_cost_aware(view(200, 100, 0), b, svc, 20.0, 0.0, 8192) is A
    # m = 5,000 > 2,048 + (1 - 5,000 / 8,192) x 5,000 = 3,996: waits
    assert admit_cost_aware(view(5000, 0, 0), b, svc, 20.0, 0.0, 8192) is S
    assert svc.solo_seconds(view(200, 100, 0)) == (100 + 2048) / 8192


@pytest.mark.parametrize(
    ("b", "c", "want"),
    [
        # the lead: solo 1.064 s against (1 + 1) x the 64-token reference (1.064 s)
        (batch(), view(100, 36, 0), ReqClass.WARM),
        (batch(), view(3000, 1000, 0), ReqClass.COLD),  # 3.0 s > 2.128 s
        # a joiner: m = 0.5 s against 1 x F = 1.5 s (warm); m = 2 s (cold)
        (batch(500), view(600, 100, 0), ReqClass.WARM),
        (batch(500), view(2100, 100, 0), ReqClass.COLD),
        # a small cache hit with a large extend: cold by cost, warm by the 64-token floor
        (batch(500), view(30_064, 64, 0), ReqClass.COLD),
    ],
)
def test_classify_by_cost_table(b: BatchView, c: CandidateView, want: ReqClass) -> None:
    assert classify_by_cost(c, b, SVC, 1.0) is want


@pytest.mark.parametrize("lead", list(BatchLead))
@pytest.mark.parametrize(("dev", "host"), [(0, 0), (32, 16), (64, 0), (0, 64)])
@pytest.mark.parametrize(
    ("skips", "defers", "age"), [(0, 0, 0.0), (16, 0, 0.0), (0, 3, 1.0), (2, 1, 5.0)]
)
def test_s4_on_the_views_is_decide(
    lead: BatchLead, dev: int, host: int, skips: int, defers: int, age: float
) -> None:
    bounds = AffinityBounds()
    c = CandidateView(0, "c", 0.0, age, 1000, dev, host)
    b = BatchView((), lead, skips, 0.0)
    cls = ReqClass.WARM if dev + host >= 64 else ReqClass.COLD
    assert affinity_decision(c, b, defers, bounds) is decide(cls, lead, skips, defers, age, bounds)
