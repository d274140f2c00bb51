"""End-to-end replays through the engine loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefillkit.app.replay import WorkloadSpec, load_requests
from prefillkit.app.settings import Config
from prefillkit.cost.forward_models import default_cost_model
from prefillkit.cost.linear import LinearCostModel
from prefillkit.cost.roofline import ReqShape
from prefillkit.request import Request
from prefillkit.sim.engine import Engine, simulate
from prefillkit.workloads.agentic import multi_turn_agentic
from prefillkit.workloads.record import to_request
from prefillkit.workloads.trace_reader import ReplayOptions

TRACE = (
    Path(__file__).resolve().parents[1].parent
    / "shared/traces/mooncake_fast25/conversation_trace.jsonl"
)


def LinearCost() -> LinearCostModel:
    """forward = 0.5 s + 1 ms per extend token; no transfer time."""
    return LinearCostModel(0.5, 1e-3, 0.0, 0.01, 0.0, 0.0)


def small_cfg(**kw: object) -> Config:
    base: dict[str, object] = {"max_total_tokens": 100_000, "tp_size": 8}
    base.update(kw)
    return Config(**base)  # type: ignore[arg-type]


def tok_req(rid: str, tokens: list[int], t: float, out: int = 16) -> Request:
    return Request.from_tokens(rid, tokens, page_size=1, arrival_time=t, max_new_tokens=out)


def test_hand_checked_ttfts_with_prefix_reuse() -> None:
    a = list(range(1000))
    b = list(range(500)) + list(range(5000, 5500))
    reqs = [tok_req("r1", a, 0.0), tok_req("r2", b, 0.1)]
    res = simulate(small_cfg().sim_settings(), reqs, cost=LinearCost())
    r1, r2 = res.requests
    # r1 alone: 0.5 + 1.0 s. r2 waits for the executor, then reuses 500 cached tokens.
    assert r1.metrics.first_token_time == pytest.approx(1.5)
    assert r2.metrics.first_scheduled_time == pytest.approx(1.5)
    assert r2.metrics.device_hit_tokens == 500
    assert r2.metrics.first_token_time == pytest.approx(2.5)
    assert res.summary["ttft_max_s"] == pytest.approx(2.4)
    assert res.summary["completed"] == 2 and res.summary["stuck"] == 0


def test_batched_requests_share_one_forward_and_chunking_splits() -> None:
    reqs = [tok_req(f"r{i}", list(range(i * 10_000, i * 10_000 + 3000)), 0.0) for i in range(3)]
    res = simulate(small_cfg(chunked_prefill_size=4096).sim_settings(), reqs, cost=LinearCost())
    # Pass 1: r0 (3000) + r1 chunk of 1096; pass 2: rest of r1 (1904) + r2 chunk 2192;
    # pass 3: rest of r2 (808).
    sizes = [(b.size, b.raw_extend_tokens) for b in res.batches]
    assert sizes == [(2, 4096), (2, 4096), (1, 808)]
    ttft = {r.rid: r.metrics.first_token_time for r in res.requests}
    assert ttft["r0"] == pytest.approx(0.5 + 4.096)
    assert ttft["r1"] == pytest.approx(2 * (0.5 + 4.096))
    assert ttft["r2"] == pytest.approx(2 * (0.5 + 4.096) + 0.5 + 0.808)


def test_cold_request_joining_warm_batch_lengthens_forward() -> None:
    cost = default_cost_model("glm-5", "h200", 8)
    warm = [ReqShape(16_384, 512)] * 8
    cold = ReqShape(0, 8192)
    t_warm = cost.forward_time(warm)
    t_mixed = cost.forward_time([*warm, cold])
    assert t_mixed > 2.0 * t_warm  # the effect the affinity policy exists to prevent


def agentic_requests(page_size: int, seed: int = 0) -> list[Request]:
    """Multi-turn sessions (warm) with one cold 6k-token request every ~4 arrivals."""
    recs = multi_turn_agentic(num_sessions=48, seed=seed, session_arrival_rate=3.0)
    reqs = [to_request(r, page_size) for r in recs]
    colds = [
        Request(f"cold{i}", r.arrival_time + 1e-3, 6144, 128, [], page_size)
        for i, r in enumerate(reqs[::4])
    ]
    return sorted(reqs + colds, key=lambda r: r.arrival_time)


def cp_cfg(**kw: object) -> Config:
    base: dict[str, object] = {
        "tp_size": 8,
        "cp_size": 8,
        "enable_cp_shared_kv": True,
        "enable_cp_shared_kv_prefill_bs_gt1": True,
        "chunked_prefill_size": 16_384,
    }
    base.update(kw)
    return Config(**base)  # type: ignore[arg-type]


def test_affinity_lowers_warm_p99_on_warm_heavy_workload() -> None:
    off = simulate(cp_cfg().sim_settings(), agentic_requests(64))
    on = simulate(cp_cfg(enable_affinity=True).sim_settings(), agentic_requests(64))
    assert on.summary["affinity_skips"] > 0
    assert on.summary["completed"] == off.summary["completed"] == len(off.requests)
    # What the name says: the warm requests' p99 (cold requests pay for it: skipped ones
    # wait a pass longer).
    assert on.summary["warm_ttft_p99_s"] < off.summary["warm_ttft_p99_s"]


def test_same_inputs_same_results() -> None:
    a = simulate(cp_cfg(enable_affinity=True).sim_settings(), agentic_requests(64, seed=3))
    b = simulate(cp_cfg(enable_affinity=True).sim_settings(), agentic_requests(64, seed=3))
    strip = ("wall_time_s",)
    sa = {k: v for k, v in a.summary.items() if k not in strip}
    sb = {k: v for k, v in b.summary.items() if k not in strip}
    assert sa == sb
    assert [r.metrics.first_token_time for r in a.requests] == [
        r.metrics.first_token_time for r in b.requests
    ]
    assert a.batches == b.batches


@pytest.mark.skipif(
    not TRACE.exists(),
    reason="full traces not present: run from a checkout beside ../shared/traces, see README",
)
@pytest.mark.parametrize(("mode", "n"), [("pd-prefill", 2000), ("colocated", 400)])
def test_invariants_hold_every_step_of_mooncake_replay(mode: str, n: int) -> None:
    """The first 2,000 requests (colocated: 400, its many decode steps are each checked)."""
    cfg = cp_cfg(
        enable_hierarchical_cache=True,
        debug_check_invariants=True,
        mode=mode,
        enable_affinity=True,
        max_total_tokens=400_000,  # a tight pool: evictions, host hits, load-backs
    )
    w = load_requests(
        WorkloadSpec(trace=str(TRACE), fmt="mooncake", replay=ReplayOptions(max_requests=n)),
        page_size=64,
    )
    engine = Engine(cfg.sim_settings(), w.requests)
    res = engine.run()  # check_invariants after every step (debug flag)
    assert res.summary["completed"] + res.summary["rejected"] == n
    assert res.summary["stuck"] == 0
    assert res.summary["host_hit_rate"] > 0
    assert res.summary["evicted_pages"] > 0
    engine.sched.check()
    pool = engine.sched.state.pool  # type: ignore[attr-defined]
    assert pool.owned == [0] * pool.cp_size
