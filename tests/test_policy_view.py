"""The policy views and the marginal-cost service (sched/policy_view.py)."""

from __future__ import annotations

from collections.abc import Sequence

from prefillkit.sched.affinity import BatchLead
from prefillkit.sched.buffer import ReqShape
from prefillkit.sched.policy_view import (
    FALLBACK_FORWARD_TOKENS,
    BatchView,
    CandidateView,
    ServiceCost,
)


def view(**kw: object) -> CandidateView:
    base: dict[str, object] = {
        "position": 0,
        "rid": "r",
        "arrival_time": 0.0,
        "age_s": 0.0,
        "input_tokens": 1000,
        "device_tokens": 600,
        "host_tokens": 300,
    }
    base.update(kw)
    return CandidateView(**base)  # type: ignore[arg-type]


def test_candidate_lengths_at_one_hand_computed_point() -> None:
    c = view()
    assert c.matched_tokens == 900
    assert c.uncached_tokens == 100
    assert c.device_miss_tokens == 400
    assert c.shape() == ReqShape(900, 100, 300)


def test_uncached_never_negative() -> None:
    assert view(device_tokens=1000, host_tokens=64).uncached_tokens == 0


def test_fallback_counts_tokens_plus_the_fixed_forward_cost() -> None:
    svc = ServiceCost(None)
    assert not svc.estimated
    assert svc.forward([]) == 0.0
    # 100 + 50 computed tokens + 2,048 for running a forward at all.
    assert svc.forward([ReqShape(900, 100, 300), ReqShape(0, 50)]) == 150 + FALLBACK_FORWARD_TOKENS
    c = view()
    assert svc.solo(c) == 100 + FALLBACK_FORWARD_TOKENS
    b = BatchView((ReqShape(0, 50),), BatchLead.WARM, 0, svc.forward([ReqShape(0, 50)]))
    assert svc.marginal(b, c) == 100  # the fixed part is paid once
    assert svc.marginal(BatchView(), c) == svc.solo(c)


def test_estimate_is_used_and_solo_memoised_by_shape() -> None:
    calls: list[int] = []

    def est(shapes: Sequence[ReqShape]) -> float:
        calls.append(len(shapes))
        return 0.5 + sum(s.extend_len for s in shapes) * 1e-4

    svc = ServiceCost(est, memo_limit=2)
    assert svc.estimated
    assert svc.solo(view()) == 0.5 + 0.01
    assert svc.solo(view(rid="other", position=3)) == 0.5 + 0.01  # same shape: memoised
    assert calls == [1]
    svc.solo(view(input_tokens=2000))
    svc.solo(view(input_tokens=3000))  # the memo is full: dropped, then refilled
    assert len(svc.memo) == 1
