"""Waiting and rejection never change device LRU order (issue 14, item 6).

A candidate rejected after its prefix was locked (memory re-test under the lock, input,
chunk or CP limits) unlocks before any other cache operation: the lock is undone, the
prefix keeps its LRU position and a split made by the lock is merged back. Only an
admitted request's unlock, after its batch ran, refreshes its prefix (MRU end).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_adder, make_limits, make_req, warm
from prefillkit.cache import HostTier, KVPool, PrefixCache, check_invariants
from prefillkit.sched.verdicts import AddReqResult


def lru_view(cache: PrefixCache) -> tuple[object, ...]:
    """LRU order and node boundaries, by content (split/merge replace node objects)."""
    nodes: list[tuple[int, int, int]] = []
    stack = [cache.root]
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        if n is not cache.root:
            nodes.append((n.keys[0], n.start, n.end))
    return (
        [(n.keys[0], n.start, n.end) for n in cache.lru_order()],
        sorted(nodes),
    )


def test_rejected_candidate_keeps_lru_order_through_the_adder() -> None:
    """The chunk budget rejects the second candidate after its prefix (a split of a
    cached node) was locked: LRU order and node boundaries are unchanged."""
    page = 4
    cache = PrefixCache(KVPool(64, page), page)
    a = make_req("a", 6 * page, page, family="A", shared=6).keys
    b = make_req("b", 3 * page, page, family="B", shared=3).keys
    warm(cache, a)  # A: one 6-page node, least recent
    warm(cache, b)
    before = lru_view(cache)
    adder = make_adder(cache, make_limits(page, chunked_prefill_size=4 * page))
    first = make_req("x", 4 * page, page, family="X")  # 4 pages: fills the chunk budget
    assert adder.add_one_req(first) is not AddReqResult.CONTINUE
    second = make_req("y", 8 * page, page, family="A", shared=3)  # A's first 3 pages
    assert adder.add_one_req(second) is not AddReqResult.CONTINUE
    assert second.state.locked_node is None
    assert lru_view(cache)[0] == before[0] and lru_view(cache)[1] == before[1]
    check_invariants(cache, [])


@settings(max_examples=150, deadline=None)
@given(
    page=st.sampled_from([1, 4]),
    total=st.integers(8, 200),
    host=st.booleans(),
    warm_specs=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 12)), max_size=4),
    queue=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(1, 80), st.integers(0, 99)),
        min_size=1,
        max_size=10,
    ),
    chunk=st.one_of(st.none(), st.integers(1, 30)),
    max_prefill=st.one_of(st.integers(1, 200), st.just(16384)),
)
def test_rejections_never_change_lru_order_or_node_boundaries(
    page: int,
    total: int,
    host: bool,
    warm_specs: list[tuple[int, int]],
    queue: list[tuple[int, int, int, int]],
    chunk: int | None,
    max_prefill: int,
) -> None:
    cache = PrefixCache(KVPool(total, page), page, HostTier(500) if host else None)
    for fam, units in warm_specs:
        keys = make_req("w", units * page, page, family=fam, shared=units).keys
        m = cache.match(keys, len(keys))
        pin = cache.lock(m.device_node, m.device_units)
        fits = cache.can_make_room([len(keys) - m.device_units])
        cache.unlock(pin)
        if fits:
            warm(cache, keys)
    limits = make_limits(
        page,
        max_prefill_tokens=max_prefill,
        chunked_prefill_size=None if chunk is None else chunk * page,
    )
    adder = make_adder(cache, limits)
    for i, (fam, shared, length, max_new) in enumerate(queue):
        req = make_req(f"q{i}", length, page, family=fam, shared=shared, max_new=max_new)
        n = len(adder.can_run_list)
        # Admitted requests' locks are final: compare only what rejection could move.
        committed = lru_view(cache)
        adder.add_one_req(req)
        if len(adder.can_run_list) == n:
            assert lru_view(cache) == committed
        check_invariants(cache, [])
