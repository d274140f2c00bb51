"""Warm/cold cache-affinity decision: table, bounds and classification."""

from __future__ import annotations

import pytest

from prefillkit.sched.affinity import (
    AffinityBound,
    AffinityBounds,
    AffinityDecision,
    BatchLead,
    ReqClass,
    classify,
    decide,
    tripped_bound,
)

BOUNDS = AffinityBounds()


def test_default_bounds() -> None:
    assert BOUNDS.warm_floor_tokens == 64
    assert BOUNDS.skip_window == 16
    assert BOUNDS.max_head_defers == 3
    assert BOUNDS.max_age_s == 5.0


@pytest.mark.parametrize(
    ("cls", "lead", "expected"),
    [
        (ReqClass.WARM, BatchLead.EMPTY, AffinityDecision.ADMIT),
        (ReqClass.WARM, BatchLead.WARM, AffinityDecision.ADMIT),
        (ReqClass.WARM, BatchLead.COLD, AffinityDecision.ADMIT),
        (ReqClass.COLD, BatchLead.EMPTY, AffinityDecision.ADMIT),
        (ReqClass.COLD, BatchLead.COLD, AffinityDecision.ADMIT),
        (ReqClass.COLD, BatchLead.WARM, AffinityDecision.SKIP),
    ],
)
def test_decision_table_below_bounds(
    cls: ReqClass, lead: BatchLead, expected: AffinityDecision
) -> None:
    got = decide(cls, lead, skips_this_pass=0, head_defers=0, age_s=0.0, bounds=BOUNDS)
    assert got is expected
    # Just below every bound at once: still the same row.
    got = decide(
        cls,
        lead,
        skips_this_pass=BOUNDS.skip_window - 1,
        head_defers=BOUNDS.max_head_defers - 1,
        age_s=BOUNDS.max_age_s - 0.001,
        bounds=BOUNDS,
    )
    assert got is expected


@pytest.mark.parametrize("lead", list(BatchLead))
def test_warm_admits_even_past_every_bound(lead: BatchLead) -> None:
    got = decide(ReqClass.WARM, lead, 10**6, 10**6, 1e9, BOUNDS)
    assert got is AffinityDecision.ADMIT


@pytest.mark.parametrize("lead", [BatchLead.EMPTY, BatchLead.COLD])
def test_cold_into_empty_or_cold_admits_past_every_bound(lead: BatchLead) -> None:
    got = decide(ReqClass.COLD, lead, 10**6, 10**6, 1e9, BOUNDS)
    assert got is AffinityDecision.ADMIT


def _cold_into_warm(skips: int, defers: int, age: float) -> AffinityDecision:
    return decide(ReqClass.COLD, BatchLead.WARM, skips, defers, age, BOUNDS)


def test_skip_window_bound() -> None:
    w = BOUNDS.skip_window
    assert _cold_into_warm(w - 1, 0, 0.0) is AffinityDecision.SKIP
    assert _cold_into_warm(w, 0, 0.0) is AffinityDecision.STOP
    assert _cold_into_warm(w + 1, 0, 0.0) is AffinityDecision.STOP


def test_head_defer_bound() -> None:
    k = BOUNDS.max_head_defers
    assert _cold_into_warm(0, k - 1, 0.0) is AffinityDecision.SKIP
    assert _cold_into_warm(0, k, 0.0) is AffinityDecision.STOP
    assert _cold_into_warm(0, k + 1, 0.0) is AffinityDecision.STOP


def test_age_bound() -> None:
    t = BOUNDS.max_age_s
    assert _cold_into_warm(0, 0, t - 1.0) is AffinityDecision.SKIP
    assert _cold_into_warm(0, 0, t - 1e-9) is AffinityDecision.SKIP
    assert _cold_into_warm(0, 0, t) is AffinityDecision.STOP
    assert _cold_into_warm(0, 0, t + 1.0) is AffinityDecision.STOP


def test_custom_bounds_are_honoured() -> None:
    b = AffinityBounds(warm_floor_tokens=128, skip_window=2, max_head_defers=1, max_age_s=0.5)
    assert decide(ReqClass.COLD, BatchLead.WARM, 1, 0, 0.4, b) is AffinityDecision.SKIP
    assert decide(ReqClass.COLD, BatchLead.WARM, 2, 0, 0.4, b) is AffinityDecision.STOP
    assert decide(ReqClass.COLD, BatchLead.WARM, 1, 1, 0.4, b) is AffinityDecision.STOP
    assert decide(ReqClass.COLD, BatchLead.WARM, 1, 0, 0.5, b) is AffinityDecision.STOP


def test_bounds_are_frozen() -> None:
    with pytest.raises(AttributeError):
        BOUNDS.skip_window = 1  # type: ignore[misc]


FLOOR = 64


@pytest.mark.parametrize(
    ("device", "host", "expected"),
    [
        # device-only hits
        (FLOOR - 1, 0, ReqClass.COLD),
        (FLOOR, 0, ReqClass.WARM),
        (FLOOR + 1, 0, ReqClass.WARM),
        # host-only hits
        (0, FLOOR - 1, ReqClass.COLD),
        (0, FLOOR, ReqClass.WARM),
        (0, FLOOR + 1, ReqClass.WARM),
        # mixed hits
        (32, FLOOR - 1 - 32, ReqClass.COLD),
        (32, FLOOR - 32, ReqClass.WARM),
        (32, FLOOR + 1 - 32, ReqClass.WARM),
        # no hit at all
        (0, 0, ReqClass.COLD),
    ],
)
def test_classify_around_floor(device: int, host: int, expected: ReqClass) -> None:
    assert classify(device, host, FLOOR) is expected


def test_classify_uses_given_floor() -> None:
    assert classify(100, 0, 128) is ReqClass.COLD
    assert classify(100, 28, 128) is ReqClass.WARM
    assert classify(0, 0, 0) is ReqClass.WARM


@pytest.mark.parametrize(
    ("skips", "defers", "age", "bound"),
    [
        (0, 0, 0.0, None),
        (15, 2, 4.99, None),
        (16, 0, 0.0, AffinityBound.WINDOW),
        (0, 3, 0.0, AffinityBound.DEFERS),
        (0, 0, 5.0, AffinityBound.AGE),
        (16, 3, 5.0, AffinityBound.WINDOW),  # W is reported first
        (0, 3, 9.0, AffinityBound.DEFERS),  # then K, then T
    ],
)
def test_stop_names_the_bound_that_tripped(
    skips: int, defers: int, age: float, bound: AffinityBound | None
) -> None:
    assert tripped_bound(skips, defers, age, BOUNDS) is bound
    # A bound trips exactly when a cold candidate behind a warm lead is stopped.
    got = decide(ReqClass.COLD, BatchLead.WARM, skips, defers, age, BOUNDS)
    assert (got is AffinityDecision.STOP) is (bound is not None)
