"""Real page ids: the allocator, page tables, node pages, host slots, load-back copies,
KV events, and the page-level ownership check."""

from __future__ import annotations

from array import array

import pytest

import prefillkit.cache.pages
from conftest import patches
from prefillkit.cache import KVPool, PrefixCache
from prefillkit.cache.events import BlockLoadedBack, BlockRemoved, BlockStored, KVEvent
from prefillkit.cache.host import HostTier
from prefillkit.cache.invariants import InvariantError, check_invariants
from prefillkit.cache.pages import IdStack, global_ids
from prefillkit.cache.pool import lane_split


def test_id_stack_hands_out_each_id_once_and_takes_back() -> None:
    s = IdStack(10)
    a = s.take(4)
    b = s.take(3)
    assert sorted(a.tolist() + b.tolist()) == list(range(7))
    assert len(s) == 3
    s.give(a)
    assert len(s) == 7
    c = s.take(7)
    assert sorted(c.tolist()) == sorted([*a.tolist(), 7, 8, 9])


def test_id_stack_materialises_a_huge_space_lazily() -> None:
    s = IdStack(10**12)
    assert len(s) == 10**12
    assert len(s.ids) <= 1 << 20
    assert len(s.take(5)) == 5
    assert len(s) == 10**12 - 5


@patches(prefillkit.cache.pages)
def test_id_stack_grows_past_its_eager_part(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefillkit.cache.pages as pages

    monkeypatch.setattr(pages, "EAGER_IDS", 4)
    s = IdStack(10)
    got = s.take(3).tolist() + s.take(5).tolist() + [s.pop(), s.pop()]
    assert sorted(got) == list(range(10))
    assert len(s) == 0


def test_global_ids_interleave_lanes_in_sequence_order() -> None:
    # sequence pages 1..5 on 2 lanes: lane 1 holds pages 1, 3, 5; lane 0 pages 2, 4
    lanes = [array("q", [7, 8]), array("q", [0, 1, 2])]
    assert global_ids(lanes, 1) == [0 * 2 + 1, 7 * 2, 1 * 2 + 1, 8 * 2, 2 * 2 + 1]


def test_pool_lane_tables_have_the_right_lane_counts() -> None:
    pool = KVPool(40, 1, cp_size=4)
    table = pool.take_owned(lane_split(3, 9, 4))
    assert table is not None
    assert [len(t) for t in table] == lane_split(3, 9, 4)
    assert pool.free_total == 31 and pool.owned == lane_split(3, 9, 4)
    pool.give_owned(table)
    assert pool.free_total == 40 and pool.owned == [0, 0, 0, 0]
    assert pool.take_owned([11, 0, 0, 0]) is None  # a lane holds 10: all or nothing
    assert pool.free_total == 40


def _cache(pages: int = 32, host: int = 0, cp: int = 1) -> PrefixCache:
    pool = KVPool(pages, 1, cp_size=cp)
    return PrefixCache(pool, 1, HostTier(host) if host else None)


def test_insert_moves_the_request_pages_into_nodes_and_frees_duplicates() -> None:
    cache = _cache()
    keys = [1, 2, 3, 4]
    table = cache.pool.take_owned([4])
    assert table is not None
    ids = table[0].tolist()
    node = cache.insert(cache.root, keys, 0, 4, table)
    assert table[0].tolist() == ids  # read, never mutated (the caller drops it)
    assert node.pages[0].tolist() == ids
    check_invariants(cache, [], [])
    # A second request computes the same units: its pages come back to the free list.
    twin = cache.pool.take_owned([4])
    assert twin is not None
    twin_ids = twin[0].tolist()
    cache.insert(cache.root, keys, 0, 4, twin)
    assert cache.pool.free_total == 32 - 4
    assert set(twin_ids).isdisjoint(node.pages[0].tolist())
    check_invariants(cache, [], [])


def test_split_keeps_every_page_with_its_unit() -> None:
    cache = _cache()
    table = cache.pool.take_owned([6])
    assert table is not None
    ids = table[0].tolist()
    leaf = cache.insert(cache.root, list(range(10, 16)), 0, 6, table)
    cache.unlock(leaf)
    head = cache.lock(leaf, 2)
    cache.commit()
    assert head.pages[0].tolist() == ids[:2]
    assert leaf.pages[0].tolist() == ids[2:]
    cache.unlock(head)
    check_invariants(cache, [], [])


def test_checker_catches_a_page_held_twice() -> None:
    cache = _cache()
    table = cache.pool.take_owned([3])
    assert table is not None
    cache.insert(cache.root, [1, 2, 3], 0, 3, table)
    stolen = next(iter(cache.root.children.values())).pages[0][:1]
    with pytest.raises(InvariantError, match="held by both"):
        check_invariants(cache, [], [("r0", 0, [stolen], None)])


def test_checker_catches_a_lost_page() -> None:
    cache = _cache()
    lost = cache.pool.take_owned([2])  # taken, then held by nobody
    assert lost is not None
    with pytest.raises(InvariantError, match="held by nobody"):
        check_invariants(cache, None, [])  # the page check alone (counts not given)


def test_load_back_names_host_slot_to_device_page_copies_and_events() -> None:
    events: list[KVEvent] = []
    cache = _cache(pages=8, host=16)
    cache.kv_listener = events.append
    table = cache.pool.take_owned([4])
    assert table is not None
    node = cache.insert(cache.root, [1, 2, 3, 4], 0, 4, table)
    cache.unlock(node)
    stored = [e for e in events if isinstance(e, BlockStored)]
    assert [e.medium for e in stored] == ["GPU", "CPU"]  # computed, then written through
    slots = node.host_slots.tolist()
    assert stored[1].slots == tuple(slots)
    assert cache.evict_tokens(4) == 4  # device copy gone, host copy stays
    assert any(isinstance(e, BlockRemoved) and e.medium == "GPU" for e in events)
    assert not node.on_device and node.on_host
    check_invariants(cache, [], [])
    m = cache.match([1, 2, 3, 4], 4)
    lb = cache.load_back(cache.lock(m.device_node, m.device_units), m.node, m.units)
    assert lb is not None
    pairs = lb.copy_pairs()
    assert [s for s, _ in pairs] == slots
    assert [d for _, d in pairs] == node.pages[0].tolist()
    loaded = [e for e in events if isinstance(e, BlockLoadedBack)]
    assert loaded and loaded[-1].copies == tuple(pairs)
    cache.finish_load_back(lb)
    cache.unlock(lb.deepest)
    check_invariants(cache, [], [])


def test_no_listener_builds_no_event() -> None:
    cache = _cache()
    assert cache.kv_listener is None
    table = cache.pool.take_owned([2])
    assert table is not None
    cache.unlock(cache.insert(cache.root, [1, 2], 0, 2, table))
    check_invariants(cache, [], [])
