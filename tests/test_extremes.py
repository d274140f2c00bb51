"""Extreme workloads and deployments, each with its expected outcome.

A pool of exactly one request's size, a host cache smaller than one request, every
request identical, every request unique, 100k-token prompts, zero-length outputs, a
50,000-request queue, and requests that can never fit (larger than the whole pool, or
than the CP owner lanes can hold): those are rejected one by one with a reason, counted
in the summary, and never stall or crash the replay.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.settings import Config
from prefillkit.cost.linear import LinearCostModel
from prefillkit.request import ReqStatus, Request
from prefillkit.sim.engine import Engine, SimResult

ROOT = Path(__file__).resolve().parents[1]


def LinearCost() -> LinearCostModel:
    """forward = 10 ms + 10 us per extend token; decode 5 ms; transfer 1 us per token."""
    return LinearCostModel()


def cfg(**kw: Any) -> Config:
    base: dict[str, Any] = {"debug_check_invariants": True, "max_total_tokens": 100_000}
    base.update(kw)
    return Config(**base)


def unique(rid: str, input_len: int, kt: int, *, t: float = 0.0, out: int = 16) -> Request:
    """A prompt that shares nothing: keys private to ``rid``."""
    keys = [hash((rid, i)) for i in range(input_len // kt)]
    return Request(rid, t, input_len, out, keys, kt)


def same(rid: str, input_len: int, kt: int, *, t: float = 0.0, out: int = 16) -> Request:
    """Every ``same`` request of one length has the same prompt."""
    keys = [hash(("shared", i)) for i in range(input_len // kt)]
    return Request(rid, t, input_len, out, keys, kt)


def run(config: Config, reqs: list[Request], *, check: bool = True) -> tuple[Engine, SimResult]:
    engine = Engine(config.sim_settings(), reqs, cost=LinearCost())
    result = engine.run()
    if check:
        assert_clean(engine, result)
    return engine, result


def assert_clean(engine: Engine, result: SimResult) -> None:
    """Nothing stuck, nothing leaked; every request finished or was rejected."""
    engine.sched.check()
    st = engine.sched.state  # type: ignore[attr-defined]
    assert result.summary["stuck"] == 0
    assert result.summary["unfinished"] == 0
    assert st.pool.owned == [0] * st.pool.cp_size
    assert st.cache.protected_pages == 0
    assert st.running == {} and not st.waiting and st.chunked_req is None
    for req in result.requests:
        if req.state.status is ReqStatus.REJECTED:
            assert req.metrics.reject_reason
        else:
            assert req.state.status is ReqStatus.FINISHED, req.rid
            assert req.metrics.first_token_time is not None


# --------------------------------------------------------------------------- pool sizes


@pytest.mark.parametrize("mode", ["pd-prefill", "colocated"])
@pytest.mark.parametrize("page", [1, 16])
def test_pool_of_exactly_one_request(mode: str, page: int) -> None:
    """The smallest pool the memory test lets a 1,000-token request into: five such
    requests run one at a time (each evicting the last one's cached pages); one page
    less and every one of them is rejected on arrival."""
    inp, out = 1000, 16
    need = inp + out + page  # admission needs need < pool tokens
    pages = need // page + 1
    if mode == "colocated":
        pages = max(pages, -(-(inp + out) // page))
    c = cfg(page_size=page, mode=mode, max_total_tokens=pages * page)
    reqs = [unique(f"r{i}", inp, page, t=0.001 * i, out=out) for i in range(5)]
    _, res = run(c, reqs)
    assert res.summary["completed"] == 5 and res.summary["rejected"] == 0
    assert [b.size for b in res.batches] == [1] * 5

    small = cfg(page_size=page, mode=mode, max_total_tokens=(pages - 1) * page)
    _, res = run(small, [unique(f"r{i}", inp, page, t=0.001 * i, out=out) for i in range(5)])
    assert res.summary["completed"] == 0 and res.summary["rejected"] == 5
    assert res.batches == []
    assert all("KV pool" in (r.metrics.reject_reason or "") for r in res.requests)


def test_host_cache_smaller_than_one_request() -> None:
    """A host pool of 512 tokens (1 GB per GPU at 10 MB per token is 100 tokens: one
    64-token page per lane, 8 lanes) under 8k-token prompts: no prompt fits on the host,
    every request still completes and host accounting stays within capacity."""
    c = cfg(
        tp_size=8,
        cp_size=8,
        enable_cp_shared_kv=True,
        enable_hierarchical_cache=True,
        hicache_size=1,
        kv_bytes_per_token=10_000_000,
        max_total_tokens=64 * 8 * 40,
    )
    kt = c.resolved_page_size
    reqs: list[Request] = []
    for i in range(12):
        reqs.append(same(f"s{i}", 8192 + 64 * i, kt, t=0.05 * i))
        reqs.append(unique(f"u{i}", 8000, kt, t=0.05 * i + 0.01))
    engine, res = run(c, reqs)
    host = engine.sched.state.cache.host  # type: ignore[attr-defined]
    assert host is not None
    assert host.capacity_pages == 8  # (1e9 // 1e7 tokens // 64) pages x 8 lanes
    assert host.capacity_pages * 64 < min(r.state.input_len for r in reqs)
    assert host.used_pages <= host.capacity_pages
    assert res.summary["completed"] == len(reqs)


# --------------------------------------------------------------------------- sharing


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "dfs-weight", "lof"])
def test_every_request_identical(policy: str) -> None:
    """40 copies of one 3,000-token prompt arriving 0.1 s apart: the first computes it,
    every later one (admitted after the first's forward) reuses all complete pages."""
    c = cfg(page_size=16, schedule_policy=policy)
    reqs = [same(f"r{i}", 3000, 16, t=0.1 * i) for i in range(40)]
    _, res = run(c, reqs)
    assert res.summary["completed"] == 40
    first = res.requests[0]
    assert first.metrics.device_hit_tokens == 0
    reusable = (3000 - 1) // 16 * 16  # the last token is always computed
    for req in res.requests[1:]:
        assert req.metrics.device_hit_tokens == reusable, req.rid
    assert res.summary["device_hit_rate"] == pytest.approx(39 * reusable / (40 * 3000))


def test_every_request_identical_burst() -> None:
    """40 identical prompts at the same instant: the first batch computes the prompt
    (possibly several times over, as upstream does within one batch); every request
    completes and the ones admitted later hit the cache."""
    c = cfg(page_size=16, max_prefill_tokens=4096, chunked_prefill_size=4096)
    reqs = [same(f"r{i}", 3000, 16) for i in range(40)]
    _, res = run(c, reqs)
    assert res.summary["completed"] == 40
    assert res.summary["device_hit_rate"] > 0.9


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "dfs-weight"])
def test_every_request_unique(policy: str) -> None:
    """No two prompts share a page: zero hits, and the cache evicts as it must."""
    c = cfg(page_size=16, schedule_policy=policy, max_total_tokens=20_000)
    reqs = [unique(f"r{i}", 2000 + i, 16, t=0.01 * i) for i in range(60)]
    _, res = run(c, reqs)
    assert res.summary["completed"] == 60
    assert res.summary["cache_hit_rate"] == 0.0
    assert res.summary["evicted_pages"] > 0


# --------------------------------------------------------------------------- lengths


@pytest.mark.parametrize(
    ("chunk", "cp"), [(8192, 1), (4096, 8), (None, 1), (None, 8), (100_032, 1)]
)
def test_100k_token_prompts_chunk_correctly(chunk: int | None, cp: int) -> None:
    """Three 100,000-token prompts: ceil(100k / chunk) chunks each (one without chunking)."""
    kw: dict[str, Any] = {"chunked_prefill_size": chunk, "max_total_tokens": 400_000}
    if cp > 1:
        kw.update(tp_size=cp, cp_size=cp, enable_cp_shared_kv=True)
    c = cfg(**kw)
    kt = c.resolved_page_size
    n = 100_000
    reqs = [unique(f"r{i}", n, kt, t=float(i)) for i in range(3)]
    _, res = run(c, reqs)
    assert res.summary["completed"] == 3
    want = 1 if chunk is None else math.ceil(n / chunk)
    assert [r.metrics.num_chunks for r in res.requests] == [want] * 3
    assert sum(b.raw_extend_tokens for b in res.batches) == 3 * n


def test_100k_prompts_share_their_prefix() -> None:
    """A second 100k prompt extending the first reuses all of the first's pages."""
    c = cfg(page_size=64, chunked_prefill_size=16_384, max_total_tokens=400_000)
    base = [hash(("long", i)) for i in range(100_000 // 64)]
    a = Request("a", 0.0, 100_000, 8, base, 64)
    b = Request("b", 5.0, 100_064, 8, [*base, hash(("long", "b"))], 64)
    _, res = run(c, [a, b])
    assert res.summary["completed"] == 2
    assert b.metrics.device_hit_tokens == 100_000 // 64 * 64  # a's 1,562 complete pages
    assert b.metrics.num_chunks == 1


@pytest.mark.parametrize("mode", ["pd-prefill", "colocated"])
def test_zero_length_output(mode: str) -> None:
    """max_new_tokens 0: the prefill forward finishes the request; colocated mode
    releases it at once (it never joins the decode batch)."""
    c = cfg(page_size=16, mode=mode)
    reqs = [unique(f"r{i}", 500 + i, 16, t=0.01 * i, out=0) for i in range(20)]
    engine, res = run(c, reqs)
    assert res.summary["completed"] == 20
    for req in res.requests:
        assert req.state.output_len == 0
        assert req.metrics.finish_time is not None and req.metrics.first_token_time is not None
        if mode == "colocated":
            assert req.metrics.finish_time == req.metrics.first_token_time
    assert engine.sched.decode_load() == (0, 0)


@pytest.mark.parametrize("policy", ["fcfs", "lpm"])
def test_50000_request_queue(policy: str) -> None:
    """50,000 requests arriving at once all complete, under FCFS and under LPM (which
    matches the whole queue every pass). The wall time is printed, not asserted."""
    c = cfg(
        page_size=16,
        schedule_policy=policy,
        max_total_tokens=1_000_000,
        debug_check_invariants=False,
    )
    groups = 50
    reqs: list[Request] = []
    for i in range(50_000):
        g = i % groups
        keys = [hash(("sys", g, u)) for u in range(4)] + [hash(("q", i))]
        reqs.append(Request(f"r{i}", 0.0, 80 + i % 7, 4, keys, 16))
    t0 = time.perf_counter()
    engine, res = run(c, reqs, check=False)
    wall = time.perf_counter() - t0
    print(f"50,000-request queue ({policy}): {wall:.1f} s wall, {len(res.batches)} batches")
    assert_clean(engine, res)
    assert res.summary["completed"] == 50_000
    assert res.summary["rejected"] == 0
    assert res.batches[0].waiting_len > 40_000


# --------------------------------------------------------------------------- never fits


def test_prompt_larger_than_the_pool_is_rejected_alone() -> None:
    """Two requests larger than the whole pool are rejected on arrival with a reason;
    the ones around them complete and the summary counts both."""
    c = cfg(page_size=16, max_total_tokens=50_000)
    reqs = [
        unique("ok0", 1000, 16, t=0.0),
        unique("huge", 60_000, 16, t=0.1),
        unique("ok1", 2000, 16, t=0.2),
        unique("barely-too-big", 50_000 - 16 - 16 + 1, 16, t=0.3),
        unique("ok2", 3000, 16, t=0.4),
    ]
    _, res = run(c, reqs)
    status = {r.rid: r.state.status for r in res.requests}
    assert status == {
        "ok0": ReqStatus.FINISHED,
        "huge": ReqStatus.REJECTED,
        "ok1": ReqStatus.FINISHED,
        "barely-too-big": ReqStatus.REJECTED,
        "ok2": ReqStatus.FINISHED,
    }
    assert res.summary["rejected"] == 2 and res.summary["completed"] == 3
    huge = res.requests[1]
    assert huge.metrics.reject_reason == "needs 3750 KV pages but the pool holds 3125"
    edge = res.requests[3]
    assert (
        edge.metrics.reject_reason is not None
        and "memory test can never pass" in edge.metrics.reject_reason
    )
    assert huge.metrics.first_scheduled_time is None and huge.metrics.num_chunks == 0


def test_prompt_larger_than_the_cp_lanes_is_rejected() -> None:
    """CP shared KV over 8 owner lanes of 10 pages each: a prompt needing 81 pages
    cannot be laid out on the lanes and is rejected naming them; the rest complete."""
    c = cfg(
        tp_size=8,
        cp_size=8,
        enable_cp_shared_kv=True,
        enable_cp_shared_kv_prefill_bs_gt1=True,
        max_total_tokens=64 * 80,
    )
    reqs = [
        unique("ok0", 1000, 64),
        unique("lanes", 81 * 64, 64, t=0.1),
        unique("ok1", 2000, 64, t=0.2),
    ]
    engine, res = run(c, reqs)
    assert engine.sched.state.pool.capacity == [10] * 8  # type: ignore[attr-defined]
    rejected = [r for r in res.requests if r.state.status is ReqStatus.REJECTED]
    assert [r.rid for r in rejected] == ["lanes"]
    assert "8 owner lanes" in (rejected[0].metrics.reject_reason or "")
    assert res.summary["rejected"] == 1 and res.summary["completed"] == 2


def test_output_reservation_larger_than_the_pool_is_rejected_in_colocated_mode() -> None:
    """Colocated: prompt + output must fit the pool (the decode grows the KV)."""
    c = cfg(page_size=16, mode="colocated", max_total_tokens=10_000)
    reqs = [unique("ok", 1000, 16, out=100), unique("long-output", 1000, 16, t=0.1, out=9500)]
    _, res = run(c, reqs)
    assert [r.state.status for r in res.requests] == [ReqStatus.FINISHED, ReqStatus.REJECTED]
    assert res.summary["rejected"] == 1


def test_cli_replay_with_a_never_fitting_request(tmp_path: Path) -> None:
    """A JSONL trace with one request larger than the pool: exit 0, summary rejected 1,
    and the request row says why."""
    trace = tmp_path / "t.jsonl"
    rows = [
        {"rid": "a", "arrival_s": 0.0, "output_len": 8, "input_len": 1000},
        {"rid": "big", "arrival_s": 0.1, "output_len": 8, "input_len": 200_000},
        {"rid": "b", "arrival_s": 0.2, "output_len": 8, "input_len": 3000},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    env = dict(os.environ)
    env.pop("PREFILLKIT_DEBUG", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefillkit",
            "replay",
            "--trace",
            str(trace),
            "--max-total-tokens",
            "65536",
            "--json",
            "--quiet",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["metrics"]["rejected"] == 1
    assert doc["metrics"]["completed"] == 2
    assert doc["metrics"]["stuck"] == 0
    csv_text = (out / "requests.csv").read_text()
    big = next(line for line in csv_text.splitlines() if line.startswith("big,"))
    assert ",rejected," in big and "KV pages" in big


def test_a_request_that_can_never_fit_after_its_retraction_is_rejected() -> None:
    """A 384-token pool (6 pages): the 253-token prompt decodes 64 tokens, then the more
    important request's decode retracts it. Its re-prefill would be prompt + kept output
    (317 tokens) + 16 reserved + one page = 397 tokens, never below the pool: it is
    rejected at the requeue instead of waiting at the head of the queue for ever (the
    engine fuzz found it; test_fuzz_engine keeps its scenario too)."""
    reqs = [Request("r0", 3.0, 253, 100, [], 64), Request("r1", 3.001, 1, 100, [], 64, priority=3)]
    config = cfg(
        tp_size=2, cp_size=2, page_size=64, max_total_tokens=384, mode="colocated",
        max_prefill_tokens=1, clip_max_new_tokens=16, enable_priority_scheduling=True,
        priority_scheduling_preemption_threshold=0, enable_hierarchical_cache=True,
        hicache_ratio=1.01,
    )  # fmt: skip
    _, res = run(config, reqs)
    r0, r1 = res.requests
    assert r1.state.status is ReqStatus.FINISHED and r1.state.output_len == 100
    assert r0.state.status is ReqStatus.REJECTED and (
        r0.metrics.retractions,
        r0.state.output_len,
    ) == (1, 64)
    assert r0.metrics.reject_reason == (
        "requeued with 64 output tokens kept: prompt + reserved output (16, clipped at 16) "
        "+ one page = 397 tokens is not below the KV pool (384 tokens): the admission "
        "memory test can never pass, even on an empty pool"
    )
    summary = res.summary
    assert (summary["completed"], summary["rejected"], summary["unfinished"]) == (2, 1, 0)
    assert summary["stuck"] == 0
