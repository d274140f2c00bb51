"""Truthful per-request metrics under retraction and preemption (issue 16, item 2).

The example of item 6: colocated, page 1, a 1,900-page pool, schedule_conservativeness
0.01 and min_new_token_ratio_factor 0 admit 4 x (200 prompt, 800 out) at t=0 so
eagerly that decode memory runs out and requests are retracted. Every first token is out
within a fraction of a second; the retractions must not move it.
"""

from __future__ import annotations

import pytest

from prefillkit.app.settings import Config
from prefillkit.records.metrics import REQUEST_COLUMNS, request_row
from prefillkit.request import ReqStatus, Request
from prefillkit.sim.engine import SimResult, simulate


def _retraction_example() -> SimResult:
    cfg = Config(
        mode="colocated",
        page_size=1,
        max_total_tokens=1900,
        schedule_conservativeness=0.01,
        min_new_token_ratio_factor=0.0,
        tp_size=8,
    )
    reqs = [
        Request(
            rid=f"r{i}", arrival_time=0.0, input_len=200, max_new_tokens=800, keys=[], key_tokens=1
        )
        for i in range(4)
    ]
    return simulate(cfg.sim_settings(), reqs)


@pytest.fixture(scope="module")
def example() -> SimResult:
    return _retraction_example()


def _first_prefills(res: SimResult) -> dict[str, float]:
    """Request id -> end of the first batch it ran in (its first token)."""
    ends: dict[str, float] = {}
    for b in res.batches:
        for rid in res.trace.batch_rids(b.batch_id):
            ends.setdefault(rid, b.start_s + b.duration_s)
    return ends


def test_first_token_time_never_moves_under_retraction(example: SimResult) -> None:
    res = example
    assert res.summary["retractions"] > 0  # the example does retract
    assert all(r.state.status is ReqStatus.FINISHED for r in res.requests)
    assert any(r.metrics.retractions for r in res.requests)
    first = _first_prefills(res)
    for r in res.requests:
        assert r.metrics.first_token_time == pytest.approx(first[r.rid])
        assert r.metrics.first_token_time is not None and r.metrics.first_token_time < 0.5
    assert res.summary["ttft_max_s"] < 0.5  # today: several seconds


def test_queueing_is_measured_to_the_first_scheduling(example: SimResult) -> None:
    res = example
    starts: dict[str, float] = {}
    for b in res.batches:
        for rid in res.trace.batch_rids(b.batch_id):
            starts.setdefault(rid, b.start_s)
    for r in res.requests:
        assert r.metrics.first_scheduled_time == pytest.approx(starts[r.rid])
        row = request_row(r)
        assert row["queueing_s"] == pytest.approx(starts[r.rid] - r.arrival_time)
        assert row["queueing_s"] <= row["ttft_s"]


def test_retraction_keeps_the_generated_output(example: SimResult) -> None:
    res = example
    # Kept output: every requeued request's re-prefill covers its prompt plus the output
    # it had, so it recomputes more than its prompt.
    for r in res.requests:
        assert r.state.output_len == r.max_new_tokens
        assert r.state.input_len == r.prompt_len == 200
        if r.metrics.retractions:
            assert r.metrics.requeue_recomputed_tokens > r.metrics.retractions * r.prompt_len


def test_requeue_keeps_the_output_and_refills_prompt_plus_output() -> None:
    r = Request(rid="a", arrival_time=0.0, input_len=40, max_new_tokens=10, keys=[], key_tokens=1)
    r.state.status, r.state.computed_tokens, r.state.output_len = ReqStatus.DECODING, 40, 6
    r.reset_for_requeue(3.0)
    assert (r.state.status, r.state.output_len, r.state.computed_tokens) == (
        ReqStatus.WAITING,
        6,
        0,
    )
    assert (r.state.input_len, r.prompt_len, r.metrics.requeued_time) == (46, 40, 3.0)


def test_retractions_and_preemptions_are_counted_per_request(example: SimResult) -> None:
    res = example
    assert sum(r.metrics.retractions for r in res.requests) == res.summary["retractions"]
    assert sum(r.metrics.preemptions for r in res.requests) == res.summary["preemptions"] == 0
    for r in res.requests:
        row = request_row(r)
        assert (
            row["retractions"] == r.metrics.retractions
            and row["preemptions"] == r.metrics.preemptions
        )
        assert row["requeue_recomputed_tokens"] == r.metrics.requeue_recomputed_tokens
        assert (row["requeue_recomputed_tokens"] > 0) == (r.metrics.retractions > 0)
        assert row["input_len"] == 200 and row["recomputed_tokens"] == 200


def test_time_lost_to_requeues_is_a_separate_column(example: SimResult) -> None:
    res = example
    for col in ("retractions", "requeue_recomputed_tokens", "requeue_lost_s"):
        assert col in REQUEST_COLUMNS
    for r in res.requests:
        row = request_row(r)
        assert (row["requeue_lost_s"] > 0) == (r.metrics.retractions > 0)
        assert r.metrics.requeued_time is None  # every requeue's re-prefill completed
        assert r.metrics.finish_time is not None
        assert row["requeue_lost_s"] < r.metrics.finish_time - r.arrival_time
        assert row["ttft_s"] < 0.5  # the lost time is not in TTFT


def test_every_request_column_names_its_own_value() -> None:
    """request_row's values are positional (request_values): each column must carry the
    field it names (distinct values everywhere, so a swap shows)."""
    r = Request("r7", 1.0, 100, 9, [], 1, priority=3)
    r.metrics.first_scheduled_time, r.metrics.first_token_time = 1.5, 3.0
    r.metrics.num_chunks, r.metrics.device_hit_tokens, r.metrics.host_hit_tokens = 2, 40, 20
    r.state.status, r.metrics.reject_reason = ReqStatus.FINISHED, "why"
    r.metrics.preemptions, r.metrics.retractions, r.metrics.requeue_recomputed_tokens = 4, 5, 6
    r.metrics.requeue_lost_s, r.state.affinity_skips = 0.25, 8
    assert request_row(r, [10, 11], "warm") == {
        "rid": "r7",
        "arrival_s": 1.0,
        "first_scheduled_s": 1.5,
        "first_token_s": 3.0,
        "ttft_s": 2.0,
        "queueing_s": 0.5,
        "input_len": 100,
        "max_new_tokens": 9,
        "num_chunks": 2,
        "device_hit_tokens": 40,
        "host_hit_tokens": 20,
        "recomputed_tokens": 40,
        "priority": 3,
        "status": "finished",
        "reject_reason": "why",
        "preemptions": 4,
        "retractions": 5,
        "requeue_recomputed_tokens": 6,
        "requeue_lost_s": 0.25,
        "affinity_skips": 8,
        "cache_class": "warm",
        "batch_ids": "10 11",
    }
