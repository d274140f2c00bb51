"""The LPM order kept across passes (sched/lpm_order.py, issue 16 item 4).

Every pass's kept order must equal a full ``order_waiting(..., "lpm")`` of the queue at
that moment (aged front included), under eviction, a host tier, requeues and
deprioritised heads; and a pass after which nothing changed must rescore nobody.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

import prefillkit.sched.lpm_order
from conftest import is_compiled, patches
from prefillkit.app.settings import Config
from prefillkit.cost.linear import LinearCostModel
from prefillkit.request import Request
from prefillkit.sched.lpm_order import LpmOrder
from prefillkit.sched.policy import order_waiting
from prefillkit.sched.scheduler import Scheduler
from prefillkit.sim.engine import Engine


def _workload(seed: int, n: int, page: int) -> list[Request]:
    """Sessions of growing turns over a few system prompts, cold prompts, and short
    prompts sharing their first 32 tokens (in-batch deprioritising)."""
    rng = random.Random(seed)

    def fresh(n: int) -> list[int]:
        return [rng.randrange(1, 10**6) for _ in range(n)]

    systems = [fresh(rng.choice([16, 40, 300])) for _ in range(4)]
    sessions: list[list[int]] = [list(rng.choice(systems)) for _ in range(12)]
    heads = [fresh(33) for _ in range(3)]
    out: list[Request] = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(40.0)
        kind = rng.random()
        if kind < 0.15:
            tokens = fresh(rng.randint(1, 200))
        elif kind < 0.3:
            tokens = rng.choice(heads) + fresh(rng.randint(0, 60))
        else:
            s = rng.randrange(len(sessions))
            sessions[s] += fresh(rng.randint(8, 120))
            tokens = list(sessions[s])
        out.append(
            Request.from_tokens(
                f"r{i}",
                tokens,
                page_size=page,
                arrival_time=round(t, 6),
                max_new_tokens=rng.choice([1, 4, 32]),
            )
        )
    return out


def _checked(sched: Scheduler, calls: list[int]) -> None:
    """Make every kept-order call compare itself with a full order_waiting."""
    st = sched.state
    lpm = st.lpm
    assert lpm is not None
    real = lpm.order

    def order(cutoff: float | None) -> Iterator[Request]:
        got = list(real(cutoff))
        queue = list(st.waiting)
        # order_waiting's cutoff is now - max_wait: pass the same cutoff back through it
        max_wait = None if cutoff is None else 0.0
        want, used = order_waiting(queue, "lpm", st.cache, now=cutoff or 0.0, max_wait_s=max_wait)
        assert used == "lpm"
        assert [r.rid for r in got] == [r.rid for r in want]
        calls[0] += 1
        return iter(got)

    lpm.order = order  # type: ignore[method-assign]


CASES: list[dict[str, Any]] = [
    {"page_size": 1, "max_total_tokens": 6000},
    {"page_size": 16, "max_total_tokens": 8192, "schedule_max_wait_s": 0.05},
    {"page_size": 64, "max_total_tokens": 16384, "schedule_max_wait_s": None},
    {
        "page_size": 16,
        "max_total_tokens": 4096,
        "enable_hierarchical_cache": True,
        "hicache_write_policy": "write_back",
        "hicache_size": 1,
        "kv_bytes_per_token": 10**9 // 8192,
        "schedule_max_wait_s": 0.3,
    },
    {
        "page_size": 1,
        "max_total_tokens": 5000,
        "mode": "colocated",
        "schedule_conservativeness": 0.05,
        "chunked_prefill_size": 256,
    },
    {"page_size": 16, "max_total_tokens": 8192, "enable_affinity": True, "affinity_max_age_s": 0.1},
    {  # requeued requests older than the aging cutoff: the kept order is rebuilt
        "page_size": 1,
        "max_total_tokens": 4000,
        "mode": "colocated",
        "schedule_conservativeness": 0.05,
        "chunked_prefill_size": 256,
        "schedule_max_wait_s": 0.3,
    },
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("seed", [1, 2])
def test_kept_order_equals_full_sort_every_pass(case: dict[str, Any], seed: int) -> None:
    page = case["page_size"]
    cfg = Config(schedule_policy="lpm", debug_check_invariants=True, **case)
    engine = Engine(
        cfg.sim_settings(), _workload(seed, 400, page), cost=LinearCostModel(0.01, 2e-5)
    )
    sched = engine.sched
    assert isinstance(sched, Scheduler)
    calls = [0]
    # NOTE: a compiled LpmOrder cannot be patched; its check() (debug_check_invariants)
    # still compares the kept order with a full re-sort at every step.
    patched = not is_compiled(prefillkit.sched.lpm_order)
    if patched:
        _checked(sched, calls)
    res = engine.run()
    assert res.summary["completed"] + res.summary.get("rejected", 0) == 400
    assert calls[0] > 50 or not patched  # the kept order was used, pass after pass


@patches(prefillkit.sched.lpm_order)
def test_quiet_pass_rescoring_nobody() -> None:
    """A pass after which the cache did not change rescores no request; one new node
    rescores only the requests waiting for its first key."""
    cfg = Config(schedule_policy="lpm", page_size=16, max_total_tokens=1_000_000)
    engine = Engine(cfg.sim_settings(), [], cost=LinearCostModel())
    sched = engine.sched
    assert isinstance(sched, Scheduler)
    lpm = sched.state.lpm
    assert isinstance(lpm, LpmOrder)
    reqs = _workload(3, 2000, 16)
    for r in reqs:
        r.arrival_time = 0.0
        sched.add_request(r)
    rescored = [0]
    real = lpm._rescore

    def counting(member: Any) -> None:
        rescored[0] += 1
        real(member)

    lpm._rescore = counting  # type: ignore[method-assign]
    list(lpm.order(None))
    assert rescored[0] == 0
    # Cache one cold prompt's first page: only requests wanting that key are rescored.
    firsts = [r.keys[:1] for r in reqs]
    cold = next(r for r in reqs if r.keys and firsts.count(r.keys[:1]) == 1)
    cache = sched.state.cache
    assert cache.pool.alloc_owned([1])
    cache.unlock(cache.insert(cache.root, cold.keys, 0, 1))
    before = cold.state.match_hint
    list(lpm.order(None))
    assert rescored[0] == 1
    assert (before, cold.state.match_hint) == (0, 1)
    sched.check()  # the kept order is a full re-sort's
