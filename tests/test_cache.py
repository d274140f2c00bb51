"""Unit and property tests for the pool, the two-tier prefix cache and its invariants."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefillkit.cache import (
    HostTier,
    KVPool,
    PrefixCache,
    check_invariants,
    lane_split,
)
from prefillkit.cache.prefix import tail_units_needed
from prefillkit.request import Request, block_key_chain, token_key_chain
from prefillkit.sched.matching import refresh_match


def make_cache(
    total_pages: int = 64,
    page_size: int = 4,
    cp: int = 1,
    host_pages: int | None = None,
    policy: str = "write_through",
    unit_pages: int = 1,
) -> PrefixCache:
    host = HostTier(host_pages, policy) if host_pages is not None else None
    return PrefixCache(KVPool(total_pages, page_size, cp), page_size * unit_pages, host)


def compute_and_insert(cache: PrefixCache, keys: list[int]) -> None:
    """Run one request's prefill through the cache: match, lock, alloc, insert, unlock."""
    m = cache.match(keys, len(keys))
    node = cache.lock(m.device_node, m.device_units)
    start = m.device_units * cache.unit_pages
    n_pages = (len(keys) - m.device_units) * cache.unit_pages
    assert cache.alloc_pages(start, n_pages) is not None
    node = cache.insert(node, keys, m.device_units, len(keys))
    cache.unlock(node)
    check_invariants(cache, [])


def chain(*parts: int) -> list[int]:
    return [hash(("k", *parts[: i + 1])) for i in range(len(parts))]


# ---------------------------------------------------------------- pool
def test_lane_split_round_robin() -> None:
    assert lane_split(0, 10, 4) == [3, 3, 2, 2]
    assert lane_split(3, 5, 4) == [1, 1, 1, 2]
    assert lane_split(5, 0, 4) == [0, 0, 0, 0]
    assert sum(lane_split(7, 123, 8)) == 123


def test_pool_alloc_fails_cleanly_when_a_lane_is_short() -> None:
    pool = KVPool(8, 64, 4)
    assert pool.alloc_owned([2, 0, 0, 0])
    assert not pool.alloc_owned([1, 0, 0, 0])
    assert pool.free == [0, 2, 2, 2]
    pool.release_owned([2, 0, 0, 0])
    assert pool.free == pool.capacity


def test_pool_refuses_fewer_pages_than_lanes() -> None:
    import pytest

    with pytest.raises(ValueError, match="one page per owner lane"):
        KVPool(3, 64, 4)


# ---------------------------------------------------------------- match / insert
def test_token_chain_equal_prefix_equal_keys() -> None:
    a = token_key_chain(list(range(20)), 4)
    b = token_key_chain([*range(12), 99, 98, 97, 96, 1, 2, 3, 4], 4)
    assert len(a) == 5
    assert a[:3] == b[:3] and a[3] != b[3] and a[4] != b[4]
    assert token_key_chain([1, 2, 3], 4) == []  # a partial page is never keyed


def test_block_chain_drops_partial_last_block() -> None:
    assert len(block_key_chain([7, 8, 9], 1100, 512, 512)) == 2
    assert len(block_key_chain([1, 2, 3, 4, 5, 6, 7, 8], 128, 16, 64)) == 2
    assert block_key_chain([7], 500, 512, 512) == []


def test_block_chain_keys_name_whole_prefixes() -> None:
    """Keys are chained: equal key at unit i iff equal ids through unit i, whether the
    trace's ids are chain-consistent or name only their own block's content."""
    a = block_key_chain([1, 2, 3], 3 * 512, 512, 512)
    assert block_key_chain([1, 2, 4], 3 * 512, 512, 512)[:2] == a[:2]
    assert block_key_chain([1, 2, 4], 3 * 512, 512, 512)[2] != a[2]
    # Same block content (id 2, 3) after a different first block: a different prefix.
    b = block_key_chain([9, 2, 3], 3 * 512, 512, 512)
    assert all(x != y for x, y in zip(a, b, strict=True))
    # Every block of a unit counts, not only the last one.
    c = block_key_chain([1, 2, 3, 4], 64, 16, 64)
    assert block_key_chain([1, 9, 3, 4], 64, 16, 64) != c
    assert block_key_chain([1, 2, 3, 4], 64, 16, 64) == c  # deterministic
    # Ids outside the unsigned 64-bit range are accepted (folded).
    assert len(block_key_chain([-1, 2**70], 1024, 512, 512)) == 2


def test_match_empty_and_full() -> None:
    cache = make_cache()
    keys = chain(1, 2, 3, 4)
    assert cache.match(keys, 4).units == 0
    compute_and_insert(cache, keys)
    m = cache.match(keys, 4)
    assert (m.units, m.device_units) == (4, 4)
    assert cache.match(chain(1, 2, 9), 3).units == 2
    assert cache.match(chain(5), 1).units == 0


def test_match_respects_max_units_and_does_not_mutate() -> None:
    cache = make_cache()
    keys = chain(1, 2, 3, 4)
    compute_and_insert(cache, keys)
    order = list(cache.lru)
    m = cache.match(keys, 2)
    assert m.units == 2
    assert list(cache.lru) == order and len(cache.index) == 4  # no split, no LRU refresh


def test_request_max_match_leaves_one_token() -> None:
    req = Request.from_tokens("r", list(range(16)), page_size=4)
    assert len(req.keys) == 4 and req.state.max_match_units == 3
    req2 = Request.from_tokens("r", list(range(17)), page_size=4)
    assert req2.state.max_match_units == 4


def test_lock_moves_pages_from_evictable_to_protected() -> None:
    cache = make_cache()
    compute_and_insert(cache, chain(1, 2, 3, 4))
    assert (cache.evictable_pages, cache.protected_pages) == (4, 0)
    m = cache.match(chain(1, 2, 3, 7), 4)
    node = cache.lock(m.device_node, m.device_units)
    check_invariants(cache, [])
    assert (cache.evictable_pages, cache.protected_pages) == (1, 3)
    assert cache.evictable_size == 1 * 4
    cache.unlock(node)
    check_invariants(cache, [])
    assert (cache.evictable_pages, cache.protected_pages) == (4, 0)


def test_eviction_is_lru_and_children_first() -> None:
    cache = make_cache(total_pages=6)
    compute_and_insert(cache, chain(1, 2, 3))  # A path
    compute_and_insert(cache, chain(1, 2, 5))  # shares 2 units, adds 1
    assert cache.pool.free_pages == 2
    # Need 3 pages: evicts the least recently used leaf (unit 3 of the first path) first.
    assert cache.alloc_pages(0, 3) is not None
    check_invariants(cache, [(0, 3)])
    assert cache.match(chain(1, 2, 3), 3).units == 2
    assert cache.match(chain(1, 2, 5), 3).units == 3


def test_locked_nodes_are_never_evicted() -> None:
    cache = make_cache(total_pages=4)
    compute_and_insert(cache, chain(1, 2, 3, 4))
    m = cache.match(chain(1, 2, 3, 4), 4)
    node = cache.lock(m.device_node, 4)
    assert cache.alloc_pages(0, 1) is None  # everything is pinned
    check_invariants(cache, [])
    cache.unlock(node)
    assert cache.alloc_pages(0, 1) is not None


def test_insert_duplicate_frees_request_pages() -> None:
    cache = make_cache()
    keys = chain(1, 2, 3)
    compute_and_insert(cache, keys)
    # A second request computed the same units without using the cache.
    lanes = cache.alloc_pages(0, 3)
    assert lanes is not None
    node = cache.insert(cache.root, keys, 0, 3)
    check_invariants(cache, [])
    assert cache.pool.owned == [0] and cache.cached_pages == 3
    cache.unlock(node)


def test_owner_lanes_with_cp() -> None:
    cache = make_cache(total_pages=16, cp=4, unit_pages=2)
    keys = chain(1, 2, 3)  # 3 units x 2 pages = pages 0..5
    compute_and_insert(cache, keys)
    assert cache.pool.cached == [2, 2, 1, 1]
    check_invariants(cache, [])


# ---------------------------------------------------------------- host tier
def test_write_through_backs_up_and_device_eviction_keeps_host_copy() -> None:
    cache = make_cache(total_pages=4, host_pages=16)
    compute_and_insert(cache, chain(1, 2, 3, 4))
    assert cache.host is not None and cache.host.used_pages == 4
    assert cache.evict_tokens(16) == 4
    check_invariants(cache, [])
    m = cache.match(chain(1, 2, 3, 4), 4)
    assert (m.device_units, m.host_units) == (0, 4)


def test_load_back_moves_host_hit_to_device_and_locks() -> None:
    cache = make_cache(total_pages=8, host_pages=16)
    keys = chain(1, 2, 3, 4)
    compute_and_insert(cache, keys)
    cache.evict_tokens(100)
    m = cache.match(keys, 3)
    locked = cache.lock(m.device_node, m.device_units)
    lb = cache.load_back(locked, m.node, m.units)
    assert lb is not None and lb.tokens == 3 * 4
    check_invariants(cache, [])
    assert cache.protected_pages == 3
    m2 = cache.match(keys, 4)
    assert (m2.device_units, m2.host_units) == (3, 1)
    cache.finish_load_back(lb)
    cache.unlock(lb.deepest)
    check_invariants(cache, [])


def test_load_back_fails_without_room_and_changes_nothing() -> None:
    cache = make_cache(total_pages=4, host_pages=16)
    keys = chain(1, 2, 3, 4)
    compute_and_insert(cache, keys)
    cache.evict_tokens(100)
    other = chain(9, 9, 9, 9)
    m0 = cache.match(other, 4)
    pin = cache.lock(m0.device_node, 0)
    assert cache.alloc_pages(0, 3) is not None  # a request owns 3 of 4 pages
    m = cache.match(keys, 4)
    assert cache.load_back(m.device_node, m.node, m.units) is None
    check_invariants(cache, [(0, 3)])
    cache.unlock(pin)


def test_write_back_backs_up_on_eviction_only() -> None:
    cache = make_cache(total_pages=4, host_pages=16, policy="write_back")
    compute_and_insert(cache, chain(1, 2))
    assert cache.host is not None and cache.host.used_pages == 0
    cache.evict_tokens(100)
    assert cache.host.used_pages == 2
    check_invariants(cache, [])


def test_selective_write_through_after_hits() -> None:
    cache = make_cache(host_pages=16, policy="write_through_selective")
    keys = chain(1, 2)
    compute_and_insert(cache, keys)
    assert cache.host is not None and cache.host.used_pages == 0
    m = cache.match(keys, 2)
    node = cache.lock(m.device_node, m.device_units)
    cache.record_hit(node)
    cache.unlock(node)
    assert cache.host.used_pages == 2
    check_invariants(cache, [])


def test_selective_write_through_counts_a_hit_on_create_and_each_reinsert() -> None:
    """Upstream counts a hit when a node is created and again each time a request
    caches it: with threshold 2 the second request caching a prefix backs it up
    (issue 14, item 4), whether it reused the prefix or computed it again."""
    cache = make_cache(host_pages=16, policy="write_through_selective")
    assert cache.host is not None and cache.host.write_through_threshold == 2
    keys = chain(1, 2)
    compute_and_insert(cache, keys)  # creates the node: 1 hit
    (node,) = cache.root.children.values()
    assert node.hit_count == 1 and not node.on_host
    m = cache.match(keys, 2)  # the second request reuses it (admission counts it)
    pin = cache.lock(m.device_node, m.device_units)
    cache.record_hit(pin)
    cache.unlock(pin)
    assert node.hit_count == 2 and node.on_host and cache.host.used_pages == 2
    check_invariants(cache, [])
    # Two requests computing the same new prefix (both missed it): the second insert
    # walks the first one's node, a re-insert, and counts the second hit.
    k2 = chain(5, 6, 7)
    pins = []
    for _ in range(2):
        m = cache.match(k2, 3)
        assert m.units == 0
        assert cache.alloc_pages(0, 3) is not None
        pins.append(cache.root)
    n1 = cache.insert(pins[0], k2, 0, 3)
    assert n1.hit_count == 1 and not n1.on_host
    n2 = cache.insert(pins[1], k2, 0, 3)
    assert n2 is n1 and n1.hit_count == 2 and n1.on_host
    cache.unlock(n1)
    cache.unlock(n2)
    check_invariants(cache, [])
    # Threshold 1: backed up by the request that creates it.
    one = PrefixCache(KVPool(64, 4), 4, HostTier(16, "write_through_selective", 1))
    compute_and_insert(one, chain(9))
    assert one.host is not None and one.host.used_pages == 1


def test_selective_write_through_chunks_count_once_per_request() -> None:
    """A chunked request's later inserts count only the nodes past its earlier ones
    (upstream ``inserted_len``)."""
    cache = make_cache(host_pages=16, policy="write_through_selective")
    keys = chain(1, 2, 3, 4)
    assert cache.alloc_pages(0, 2) is not None
    a = cache.insert(cache.root, keys, 0, 2)  # first chunk
    assert cache.alloc_pages(2, 2) is not None
    b = cache.insert(a, keys, 2, 4)  # second chunk: a is not counted again
    assert a.hit_count == 1 and b.hit_count == 1 and cache.host is not None
    assert cache.host.used_pages == 0
    cache.unlock(b)
    check_invariants(cache, [])


def test_rejected_candidate_unlock_keeps_lru_order() -> None:
    """A lock undone before any other cache operation (a candidate rejected after its
    prefix was locked) leaves LRU order, tree and counts as they were (issue 14,
    item 6); an unlock after other operations refreshes the prefix (MRU end)."""
    cache = make_cache()
    compute_and_insert(cache, chain(1, 2, 3, 4))
    compute_and_insert(cache, chain(5, 6))
    compute_and_insert(cache, chain(7))

    def snap() -> tuple[object, ...]:
        return (
            [(n.start, n.end, n.keys[0]) for n in cache.lru_order()],
            dict(cache.index),
            cache.evictable_pages,
            cache.protected_pages,
            list(cache.evictable_lanes),
        )

    before = snap()
    keys = chain(1, 2, 3, 4)
    for units in (4, 2):  # 2: the lock splits the node; the undo merges it back
        m = cache.match(keys, units)
        node = cache.lock(m.device_node, units)
        assert cache.evictable_pages == before[2] - units  # type: ignore[operator]
        check_invariants(cache, [])
        cache.unlock(node)
        check_invariants(cache, [])
        assert snap() == before
    assert len(cache.root.children) == 3
    (head,) = [n for n in cache.root.children.values() if n.keys[0] == keys[0]]
    assert (head.start, head.end) == (0, 4)
    # A committed lock (another operation ran) refreshes on unlock: MRU end.
    m = cache.match(keys, 4)
    node = cache.lock(m.device_node, 4)
    other = cache.lock(cache.match(chain(7), 1).device_node, 1)
    cache.unlock(other)
    cache.unlock(node)
    assert [n.keys[0] for n in cache.lru_order()][-1] == keys[0]
    check_invariants(cache, [])


def test_host_lru_evicts_host_only_leaves() -> None:
    cache = make_cache(total_pages=4, host_pages=4)
    compute_and_insert(cache, chain(1, 2))
    compute_and_insert(cache, chain(1, 2, 3, 4))  # two nodes: [0, 2) and [2, 4)
    cache.evict_tokens(100)  # all four units now host-only
    compute_and_insert(cache, chain(7, 8))  # write-through needs 2 host pages
    check_invariants(cache, [])
    assert cache.match(chain(1, 2, 3, 4), 4).units == 2  # deepest host units went first


# ---------------------------------------------------------------- property test
OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "finish", "evict", "load", "alloc", "free"]),
        st.integers(0, 5),  # which prefix family
        st.integers(1, 6),  # length in units
        st.integers(0, 3),  # divergence point
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    cp=st.sampled_from([1, 2, 4]),
    unit_pages=st.sampled_from([1, 2]),
    total=st.integers(8, 40),
    host=st.sampled_from([None, 0, 6, 64]),
    policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
)
def test_random_operations_keep_invariants(
    ops: list[tuple[str, int, int, int]],
    cp: int,
    unit_pages: int,
    total: int,
    host: int | None,
    policy: str,
) -> None:
    total = max(total, cp)
    cache = make_cache(total, 4, cp, host, policy, unit_pages)
    live: list[tuple[object, list[int], int, int]] = []  # (node, keys, start_page, end_page)
    lbs = []
    # One waiting request per chain seen, never re-created: its match hint (length and
    # node) goes stale in every way the operations allow, and must still be confirmed
    # or refreshed exactly (sched/matching.py).
    watchers: dict[tuple[int, ...], Request] = {}
    kt = cache.key_tokens
    for op, fam, length, div in ops:
        keys = chain(*([fam] * min(div, length) + [fam * 10 + 7] * (length - min(div, length))))
        if tuple(keys) not in watchers:
            w = Request(f"w{len(watchers)}", 0.0, (len(keys) + 1) * kt, 1, keys, kt)
            refresh_match(cache, w)
            watchers[tuple(keys)] = w
        if op == "admit":
            m = cache.match(keys, len(keys))
            node = cache.lock(m.device_node, m.device_units)
            cache.record_hit(node)
            if m.host_units and host:
                lb = cache.load_back(node, m.node, m.units)
                if lb is not None:
                    node = lb.deepest
                    lbs.append(lb)
                    units = m.units
                else:
                    units = m.device_units
            else:
                units = m.device_units
            start = units * unit_pages
            n = (len(keys) - units) * unit_pages
            if cache.alloc_pages(start, n) is None:
                cache.unlock(node)
            else:
                live.append((node, keys, start, start + n))
        elif op == "finish" and live:
            for lb in lbs:
                cache.finish_load_back(lb)
            lbs.clear()
            node, keys, start, end = live.pop(fam % len(live))
            node = cache.insert(node, keys, start // unit_pages, end // unit_pages)
            cache.unlock(node)
        elif op == "evict":
            cache.evict_tokens(length * 4)
        elif op == "alloc" and live:
            pass
        elif op == "free" and live:
            node, keys, start, end = live.pop(fam % len(live))
            for lb in lbs:
                cache.finish_load_back(lb)
            lbs.clear()
            cache.pool.release_owned(lane_split(start, end - start, cp))
            cache.unlock(node)
        check_invariants(cache, [(s, e) for _, _, s, e in live])
        for w in watchers.values():
            c = refresh_match(cache, w)
            assert c == cache.match_units(w.keys, w.state.max_match_units)
            assert w.state.match_node is (cache.index[w.keys[c - 1]] if c else cache.root)
    for lb in lbs:
        cache.finish_load_back(lb)
    for node, keys, start, end in live:
        node = cache.insert(node, keys, start // unit_pages, end // unit_pages)
        cache.unlock(node)
    check_invariants(cache, [])
    assert cache.protected_pages == 0
    cache.evict_tokens(10**9)
    check_invariants(cache, [])
    assert cache.pool.free == cache.pool.capacity


def test_eviction_splits_the_victim_and_keeps_its_shared_head() -> None:
    """prefillkit evicts exactly the pages it needs: the LRU victim is split and only
    its tail goes, so the head (a prefix waiting requests may match) stays cached at the
    victim's LRU position (issue 14, item 8)."""
    for cp in (1, 2):
        cache = make_cache(total_pages=8, cp=cp)
        keys = chain(1, 2, 3, 4, 5, 6)
        compute_and_insert(cache, keys)
        assert cache.pool.free_total == 2
        lanes = [2] * cp if cp == 2 else [3]  # one more page than free in each lane
        assert cache.alloc_lanes(lanes)
        m = cache.match(keys, 6)
        assert m.units == (5 if cp == 1 else 4)  # only the tail units the need covers
        assert [n.end for n in cache.lru_order()] == [m.units]
        cache.pool.release_owned(lanes)
        check_invariants(cache, [])
    # Off: the whole node goes, as upstream evicts whole leaves.
    cache = make_cache(total_pages=8)
    cache.split_evictions = False
    compute_and_insert(cache, chain(1, 2, 3, 4, 5, 6))
    assert cache.alloc_lanes([3])
    assert cache.match(chain(1, 2, 3, 4, 5, 6), 6).units == 0


def _tail_units_by_loop(short: list[int], end_page: int, n_units: int, unit_pages: int) -> int:
    """The reference: grow the tail one unit at a time until every lane is covered."""
    cp = len(short)
    k = min(n_units, max(1, -(-sum(short) // unit_pages)))
    if cp == 1:
        return k
    while k < n_units:
        tail = lane_split(end_page - k * unit_pages, k * unit_pages, cp)
        if all(t >= s for t, s in zip(tail, short, strict=True)):
            return k
        k += 1
    return n_units


@pytest.mark.parametrize(
    ("short", "end_page", "n_units", "unit_pages", "expect"),
    [
        ([3], 10, 8, 1, 3),  # one lane: the shortfall's units
        ([0, 0, 1, 0], 8, 8, 1, 2),  # lane 2's last page is 2 pages from the end (page 6)
        ([1, 0, 0, 0], 8, 8, 1, 4),  # lane 0: page 4, the 4th from the end
        ([1, 1, 1, 1], 8, 8, 1, 4),
        ([2, 0, 0, 0], 8, 8, 1, 8),  # pages 4 and 0: the whole node
        ([2, 0, 0, 0], 8, 5, 1, 5),  # not even the whole node covers it
        ([0, 1, 0, 0], 8, 4, 2, 2),  # 2-page units: page 5 is in the 2nd unit
    ],
)
def test_tail_units_needed_table(
    short: list[int], end_page: int, n_units: int, unit_pages: int, expect: int
) -> None:
    assert tail_units_needed(short, end_page, n_units, unit_pages) == expect
    assert _tail_units_by_loop(short, end_page, n_units, unit_pages) == expect


def test_tail_units_needed_equals_the_loop() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        cp = rng.choice([1, 2, 3, 4, 8])
        u = rng.choice([1, 2, 4])
        n_units = rng.randint(1, 40)
        end_page = (n_units + rng.randint(0, 30)) * u
        short = [rng.choice([0, 0, 1, 2, rng.randint(0, 20)]) for _ in range(cp)]
        if not any(short):
            short[rng.randrange(cp)] = 1
        args = (short, end_page, n_units, u)
        assert tail_units_needed(*args) == _tail_units_by_loop(*args), args
