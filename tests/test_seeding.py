"""State seeding (sched/seeding.py): a seeded scheduler equals one that reached the same
state by replaying requests through the scheduler, and its next admission pass is the
same (batch, budgets, close reason)."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefillkit.cache.node import Node
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.interface import StepOutput
from prefillkit.sched.scheduler import Scheduler
from prefillkit.sched.seeding import (
    seed_cached_prefix,
    seed_new_token_ratio,
    seed_running_request,
)

PAGE = 4


def make_sched(pages: int, *, colocated: bool = True, **kw: object) -> Scheduler:
    base: dict[str, object] = {
        "page_size": PAGE,
        "chunked_prefill_size": None,
        "max_prefill_tokens": 100_000,
    }
    base.update(kw)
    return Scheduler(SchedulerConfig(**base), pages, PAGE, reserve_decode=colocated)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Spec:
    rid: str
    group: int
    shared: int
    own: int
    out: int
    t: float

    def make(self) -> Request:
        tokens = [self.group * 10_000 + i for i in range(self.shared)]
        tokens += [
            (500 + zlib.crc32(self.rid.encode()) % 10_000) * 10_000 + i for i in range(self.own)
        ]
        return Request.from_tokens(
            self.rid, tokens, page_size=PAGE, arrival_time=self.t, max_new_tokens=self.out
        )


def replay(
    sched: Scheduler, specs: list[Spec], rng: random.Random, *, colocated: bool
) -> dict[str, Request]:
    """Drive ``specs`` through the scheduler as an engine would (steps, forward_done,
    start_decode / begin_transfer, decode steps, finish) until nothing waits."""
    reqs = {s.rid: s.make() for s in specs}
    for r in reqs.values():
        assert sched.add_request(r) is None
    t = 1.0
    for _ in range(500):
        if not sched.has_work:
            break
        t += 0.01
        step = sched.schedule(t)
        for r in sched.forward_done(step, t):
            if colocated:
                if r.state.output_len >= r.max_new_tokens:
                    sched.finish(r, t)
                else:
                    sched.start_decode(r)
            else:
                sched.begin_transfer(r)
        if colocated and sched.decode_load()[0] and rng.random() < 0.7:
            sched.decode_step(t)
        if not colocated:
            for r in list(sched.state.running.values()):
                if r.state.status is ReqStatus.TRANSFERRING and rng.random() < 0.4:
                    sched.finish(r, t)
        sched.check()
    assert not sched.has_work
    return reqs


def leaf_chains(sched: Scheduler) -> list[list[int]]:
    """Key chains of every device leaf of the cache (its whole device content)."""
    out: list[list[int]] = []
    stack: list[tuple[Node, list[int]]] = [(sched.state.cache.root, [])]
    while stack:
        node, keys = stack.pop()
        kids = [c for c in node.children.values() if c.on_device]
        if not kids and keys:
            out.append(keys)
        for c in kids:
            stack.append((c, keys + c.keys))
    return out


def seeded_copy(
    a: Scheduler, specs: list[Spec], pages: int, *, colocated: bool, **kw: object
) -> Scheduler:
    """A fresh scheduler seeded with ``a``'s cached prefixes and running requests."""
    b = make_sched(pages, colocated=colocated, **kw)
    for chain in leaf_chains(a):
        seed_cached_prefix(b, chain)
    by_rid = {s.rid: s for s in specs}
    running = a.state.decoding if colocated else list(a.state.running.values())
    assert len(running) == len(a.state.running)
    for r in running:
        seed_running_request(
            b, by_rid[r.rid].make(), output_len=r.state.output_len, status=r.state.status, now=0.5
        )
    seed_new_token_ratio(b, a.state.new_token_ratio)
    return b


def state(s: Scheduler) -> tuple[object, ...]:
    st = s.state
    pool, cache = st.pool, st.cache
    return (
        pool.free,
        pool.cached,
        pool.owned,
        cache.evictable_pages,
        cache.protected_pages,
        cache.evictable_lanes,
        set(cache.index),
        {
            rid: (
                r.state.status,
                r.state.owned_start_page,
                r.state.owned_end_page,
                r.state.output_len,
                r.state.computed_tokens,
            )
            for rid, r in st.running.items()
        },
        [r.rid for r in st.decoding],
        st.new_token_ratio,
    )


def batch_view(s: Scheduler, b: StepOutput) -> object:
    handle = s.state.in_flight.get(b.step_id)
    return (
        [(r.rid, r.prefix_len, r.extend_len, r.loaded_tokens) for r in b.reqs],
        b.extend_tokens,
        b.cached_tokens,
        b.load_back_tokens,
        b.stop_reason,
        b.has_chunked,
        b.waiting_len,
        b.lead_class,
        None if handle is None else (handle.log_input_tokens, handle.log_hit_tokens),
    )


def compare_next_pass(a: Scheduler, b: Scheduler, probes: list[Spec]) -> None:
    assert state(a) == state(b)
    for s in (a, b):
        for p in probes:
            s.add_request(p.make())
    now = 10.0
    ra = a.schedule(now)
    ea = a.state.cache.device_evicted_pages
    rb = b.schedule(now)
    assert batch_view(a, ra) == batch_view(b, rb)
    if ea == 0 and b.state.cache.device_evicted_pages == 0:
        assert state(a) == state(b)
    a.check()
    b.check()


def specs_from(rng: random.Random, n: int, prefix: str, t0: float) -> list[Spec]:
    return [
        Spec(
            f"{prefix}{i}",
            rng.randrange(3),
            rng.choice([0, 8, 16, 17, 32]),
            rng.randrange(1, 30),
            rng.randrange(1, 12),
            t0 + i * 0.001,
        )
        for i in range(n)
    ]


def run_case(seed: int, *, colocated: bool, pages: int = 400, n: int = 12, **kw: object) -> None:
    rng = random.Random(seed)
    specs = specs_from(rng, n, "r", 0.0)
    a = make_sched(pages, colocated=colocated, **kw)
    replay(a, specs, rng, colocated=colocated)
    b = seeded_copy(a, specs, pages, colocated=colocated, **kw)
    b.check()  # (b) the invariant checker passes after seeding
    compare_next_pass(a, b, specs_from(rng, 6, "p", 5.0))


# ---------------------------------------------------------------- (a) + (b)
@pytest.mark.parametrize("seed", range(6))
def test_seeded_equals_replayed_colocated(seed: int) -> None:
    run_case(seed, colocated=True)


@pytest.mark.parametrize("seed", range(4))
def test_seeded_equals_replayed_pd_prefill(seed: int) -> None:
    run_case(seed, colocated=False)


def test_seeded_equals_replayed_under_memory_pressure() -> None:
    # A small pool: the probe pass closes on memory or evicts; still the same batch.
    for seed in range(6):
        run_case(seed, colocated=True, pages=90, n=8)


@pytest.mark.parametrize("seed", range(4))
def test_seeded_equals_replayed_with_chunked_prefill(seed: int) -> None:
    # The replay prefills in chunks; the probe pass chunks too.
    run_case(seed, colocated=True, pages=200, chunked_prefill_size=16)


def test_seeding_mutations_and_invariants() -> None:
    s = make_sched(64)
    req = Spec("x", 1, 16, 5, 6, 0.0).make()  # 21 tokens: 5 full pages cached
    assert seed_cached_prefix(s, req.keys[:3]) == 3
    assert seed_cached_prefix(s, req.keys[:3]) == 0  # already cached: nothing new
    s.check()
    assert s.state.cache.evictable_pages == 3
    seed_running_request(s, req, output_len=4, now=2.0)
    s.check()
    assert req.state.status is ReqStatus.DECODING and s.state.decoding == [req]
    assert s.state.running == {"x": req}
    # prompt 21 + 3 decoded tokens in the KV: 6 pages, 5 cached (locked), 1 owned
    assert (req.state.owned_start_page, req.state.owned_end_page) == (5, 6)
    assert s.state.cache.protected_pages == 5 and s.state.cache.evictable_pages == 0
    assert req.metrics.first_token_time == 2.0 and req.state.computed_tokens == 21
    # the seeded request decodes and finishes like any other
    for _ in range(3):
        s.decode_step(3.0)
        s.check()
    assert req.state.status is ReqStatus.FINISHED and not s.state.running
    assert s.state.cache.evictable_pages == 5 and s.state.pool.owned == [0]


# ---------------------------------------------------------------- (c) errors
def test_seeding_past_the_pool_raises_one_line_and_changes_nothing() -> None:
    s = make_sched(8)
    big = Spec("big", 1, 0, 40, 4, 0.0).make()  # 10 pages
    before = state(s)
    with pytest.raises(ValueError, match="free KV pages") as exc:
        seed_cached_prefix(s, big)
    assert "\n" not in str(exc.value)
    assert state(s) == before
    s.check()
    seed_cached_prefix(s, Spec("c", 2, 0, 24, 4, 0.0).make())  # 6 of 8 pages
    run = Spec("r", 3, 0, 10, 8, 0.0).make()  # 3 pages + decode
    before = state(s)
    with pytest.raises(ValueError, match="free KV pages") as exc:
        seed_running_request(s, run, output_len=3)
    assert "\n" not in str(exc.value)
    assert state(s) == before and run.state.status is ReqStatus.WAITING
    s.check()


def test_seeding_rejects_impossible_requests() -> None:
    s = make_sched(64)
    r = Spec("a", 1, 0, 9, 4, 0.0).make()
    with pytest.raises(ValueError, match="output_len"):
        seed_running_request(s, r, output_len=4)
    with pytest.raises(ValueError, match="output_len"):
        seed_running_request(s, r, output_len=0)
    seed_running_request(s, r, output_len=2)
    with pytest.raises(ValueError, match="not a fresh request"):
        seed_running_request(s, r)
    pd = make_sched(64, colocated=False)
    with pytest.raises(ValueError, match="reserves no decode room"):
        seed_running_request(pd, Spec("b", 1, 0, 9, 4, 0.0).make())
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        seed_new_token_ratio(s, 1.5)
    with pytest.raises(TypeError, match="not prefillkit's Scheduler"):
        seed_new_token_ratio(object(), 0.5)  # type: ignore[arg-type]
    s.check()


# ---------------------------------------------------------------- (d) random states
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    colocated=st.booleans(),
    pages=st.sampled_from([120, 400]),
    n=st.integers(1, 14),
    chunk=st.sampled_from([None, 16, 64]),
)
def test_random_seeded_states_match_replay(
    seed: int, colocated: bool, pages: int, n: int, chunk: int | None
) -> None:
    run_case(seed, colocated=colocated, pages=pages, n=n, chunked_prefill_size=chunk)
