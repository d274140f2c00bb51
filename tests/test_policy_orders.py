"""Table tests of the zoo's queue orders (sched/policy_orders.py), and the re-expressed
policies against the scheduler's own forms (sched/policy.py, the pass's LPM)."""

from __future__ import annotations

import random

import pytest

from prefillkit.request import Request
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.policy import order_lof as lof_of_requests
from prefillkit.sched.policy import order_waiting
from prefillkit.sched.policy_orders import (
    cost_aware_deadline,
    order_affinity_hold,
    order_cost_aware,
    order_fcfs,
    order_loadback_aware,
    order_lof,
    order_lpm,
    order_lpm_aging,
    order_residual_sjf,
    order_session_affinity,
    order_waiting_qos,
)
from prefillkit.sched.policy_pass import PolicyRuntime
from prefillkit.sched.policy_view import CandidateView
from prefillkit.sched.scheduler import Scheduler
from test_scheduler import PAGE, make_sched, mk, seq, warm_cache


def v(
    i: int,
    *,
    inp: int = 1000,
    dev: int = 0,
    host: int = 0,
    age: float = 0.0,
    out: int = 8,
    passes: int = 0,
    session: str | None = None,
    head: object = None,
    rec: bool = False,
) -> CandidateView:
    return CandidateView(
        i, f"r{i}", float(i), age, inp, dev, host, out, passes, 0, session, head, rec
    )


def test_fcfs_and_lof() -> None:
    q = [v(0, out=4), v(1, out=9), v(2, out=9), v(3, out=1)]
    assert order_fcfs(q) == [0, 1, 2, 3]
    assert order_lof(q) == [1, 2, 0, 3]


def test_lpm_aging_table() -> None:
    q = [v(0, dev=100), v(1, dev=400), v(2, dev=0, passes=5), v(3, dev=400)]
    assert order_lpm(q) == [1, 3, 0, 2]
    # N = 100: keys -(100), -(400), -(0 + 500), -(400): the aged cold request first
    assert order_lpm_aging(q, 100) == [2, 1, 3, 0]


def test_lpm_aging_keeps_in_batch_deprioritised_last() -> None:
    q = [v(0, passes=9, head="h"), v(1, dev=10), v(2, passes=9, head="h")]
    assert order_lpm_aging(q, 1000) == [0, 1, 2]


def test_residual_sjf_tiers() -> None:
    q = [
        v(0, inp=9000, dev=0),
        v(1, inp=9000, dev=8000),  # 1,000 left: 16 blocks of 64
        v(2, inp=5000, age=11.0),  # aged: second tier
        v(3, inp=700, rec=True),  # recovering: first
        v(4, inp=9000, dev=8032, host=968),  # a host hit is still remaining work: 16 blocks
        v(5, inp=64),
    ]
    assert order_residual_sjf(q, 10.0, 64) == [3, 2, 5, 1, 4, 0]


def test_waiting_qos_reorders_only_the_window() -> None:
    q = [v(i, inp=1000 - 100 * i) for i in range(6)]
    cost = lambda c: float(c.uncached_tokens)  # noqa: E731
    assert order_waiting_qos(q, 3, cost) == [2, 1, 0, 3, 4, 5]
    assert order_waiting_qos(q, 1, cost) == [0, 1, 2, 3, 4, 5]


def test_session_affinity_promotes_one_recent_warm_continuation() -> None:
    q = [
        v(0),
        v(1, session="a", dev=512),
        v(2, session="b", dev=1024),  # the most cached: promoted
        v(3, session="c", dev=4096),  # c was scheduled too long ago
        v(4, session="b", dev=100),  # under min_cached_tokens
    ]
    last = {"a": 99.0, "b": 90.0, "c": 10.0}
    kw = {"window": 16, "min_cached_tokens": 256, "max_head_wait_s": 5.0, "session_ttl_s": 60.0}
    assert order_session_affinity(q, 100.0, last, **kw) == [2, 0, 1, 3, 4]
    assert order_session_affinity(q, 100.0, last, **{**kw, "window": 2}) == [1, 0, 2, 3, 4]
    aged = [v(0, age=5.0), *q[1:]]
    assert order_session_affinity(aged, 100.0, last, **kw) == [0, 1, 2, 3, 4]
    rec = [v(0, rec=True), *q[1:]]
    assert order_session_affinity(rec, 100.0, last, **kw) == [0, 1, 2, 3, 4]


def test_loadback_aware_defers_large_loadbacks_until_the_age_limit() -> None:
    q = [v(0, host=600), v(1, host=100), v(2, host=900, age=6.0), v(3)]
    assert order_loadback_aware(q, 5.0) == [2, 1, 3, 0]


def test_cost_aware_deadline_at_one_hand_computed_point() -> None:
    c = v(3)  # arrived at 3 s
    assert cost_aware_deadline(c, 4.0, 2.0, 20.0) == 11.0  # 3 + 2 x 4 s
    assert cost_aware_deadline(c, 40.0, 2.0, 20.0) == 23.0  # capped: 3 + 20
    assert cost_aware_deadline(c, 4.0, 0.0, 20.0) == 3.0  # slack 0: FCFS


def test_cost_aware_earliest_deadline_first() -> None:
    # arrivals 0, 1, 2, 3 s; forwards 8, 0.5, 0.5, 6 s alone; slack 2, cap 20 s:
    # deadlines 16, 2, 3, 15
    q = [v(0, inp=8), v(1, inp=1), v(2, inp=1), v(3, inp=6)]
    secs = {0: 8.0, 1: 0.5, 2: 0.5, 3: 6.0}
    got = order_cost_aware(q, lambda c: cost_aware_deadline(c, secs[c.position], 2.0, 20.0))
    assert got == [1, 2, 3, 0]
    fcfs = order_cost_aware(q, lambda c: cost_aware_deadline(c, secs[c.position], 0.0, 20.0))
    assert fcfs == [0, 1, 2, 3]


def test_affinity_hold_table() -> None:
    q = [v(0), v(1, dev=64), v(2, age=9.0), v(3, dev=128), v(4)]
    warm = lambda c: c.device_tokens >= 64  # noqa: E731
    released = lambda c: c.age_s >= 5.0  # noqa: E731
    assert order_affinity_hold(q, warm, released) == [2, 1, 3, 0, 4]


# ---------------------------------------------------------------- the re-expressions
def random_queue(rng: random.Random, s: Scheduler) -> list[Request]:
    prefixes = [seq(50 + k, 4 * PAGE * rng.randint(1, 12)) for k in range(4)]
    for p in prefixes[:3]:
        warm_cache(s.state.cache, p)
    out = []
    for i in range(rng.randint(1, 40)):
        p = rng.choice(prefixes) if rng.random() < 0.7 else []
        tail = seq(5000 + i, rng.randint(1, 80))
        out.append(
            mk(f"q{i}", p[: rng.randint(0, len(p))] + tail, 0.01 * i, out=rng.randint(1, 64))
        )
    return out


@pytest.mark.parametrize("seed", range(20))
def test_lpm_on_views_is_the_schedulers_lpm(seed: int) -> None:
    rng = random.Random(seed)
    s = make_sched(4096, schedule_policy="lpm", schedule_max_wait_s=-1)
    for r in random_queue(rng, s):
        assert s.add_request(r) is None
    st = s.state
    want = order_waiting(list(st.waiting), "lpm", st.cache)[0]
    rt = PolicyRuntime(st.cfg, st.cache)
    got, used = rt.order(list(st.waiting), [], "lpm", 1.0, None, st.affinity_bounds)
    assert used == "lpm"
    assert [r.rid for r in got] == [r.rid for r in want]
    # and the pass's own kept order agrees too
    assert st.lpm is not None
    assert [r.rid for r in st.lpm.order(None)] == [r.rid for r in want]


@pytest.mark.parametrize("seed", range(5))
def test_fcfs_and_lof_on_views_are_the_schedulers(seed: int) -> None:
    rng = random.Random(seed)
    s = make_sched(4096)
    queue = random_queue(rng, s)
    rt = PolicyRuntime(s.state.cfg, s.state.cache)
    views = [rt.view(r, i, 1.0) for i, r in enumerate(queue)]
    assert [queue[i].rid for i in order_fcfs(views)] == [r.rid for r in queue]
    assert [queue[i].rid for i in order_lof(views)] == [r.rid for r in lof_of_requests(queue)]


def test_lpm_aging_counts_passes_and_not_on_fcfs_fallback() -> None:
    cfg = SchedulerConfig(
        page_size=PAGE, schedule_policy="lpm", lpm_aging_tokens_per_pass=64,
        schedule_max_wait_s=None, lpm_fallback_queue_len=2,
    )  # fmt: skip
    s = Scheduler(cfg, 1024, PAGE)
    reqs = [mk(f"r{i}", seq(70 + i, 20)) for i in range(3)]
    rt = s.state.policy
    assert rt is not None and s.state.lpm is None
    for r in reqs[:2]:
        s.add_request(r)
    st = s.state
    rt.order(list(st.waiting), [], "lpm", 0.0, None, st.affinity_bounds)
    assert [r.state.waiting_passes for r in reqs[:2]] == [1, 1]
    s.add_request(reqs[2])
    _, used = rt.order(
        list(st.waiting), [], "lpm", 0.0, None, st.affinity_bounds
    )  # 3 waiting > 2: FCFS, no count
    assert used == "fcfs"
    assert [r.state.waiting_passes for r in reqs] == [1, 1, 0]
