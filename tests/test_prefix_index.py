"""The prefix indexes routers read (sim/routers/prefix_index.py, approx_index.py): the
exact one from KV events (hand-built, then a real PrefixCache's), the approximate one
from routing history (sglang-router's tree at key-unit granularity: matching, stamps,
LRU eviction at the interval), both deterministic and both walking a request once."""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence

import pytest

from prefillkit.cache import HostTier, KVPool, PrefixCache, check_invariants
from prefillkit.cache.events import BlockLoadedBack, BlockRemoved, BlockStored
from prefillkit.sched.config import ConfigError
from prefillkit.sim.routers.masks import walk_masks
from prefillkit.sim.routers.prefix_index import ApproximatePrefixIndex, ExactPrefixIndex

KT = 16


# ------------------------------------------------------------------ exact
def test_exact_tracks_device_events_and_ignores_host_ones() -> None:
    ex = ExactPrefixIndex(3)
    on1, on2 = ex.listener(1), ex.listener(2)
    on1(BlockStored((1, 2, 3), 0, "GPU"))
    on2(BlockStored((1,), 0, "GPU"))
    on2(BlockStored((2, 3), 1, "CPU"))  # host copy: not a device hit
    assert ex.matched_units([1, 2, 3, 4]) == [0, 3, 1]
    on1(BlockRemoved((3,), 2, "GPU"))  # evicted from device
    on2(BlockRemoved((2, 3), 1, "CPU"))
    assert ex.matched_units([1, 2, 3, 4]) == [0, 2, 1]
    on1(BlockLoadedBack((3,), 2, ((0, 7),)))  # host -> device
    assert ex.matched_units([1, 2, 3, 4]) == [0, 3, 1]
    assert ex.sizes() == [0, 3, 1]
    assert ex.holds(3, 1) and not ex.holds(3, 2)


def test_exact_events_are_idempotent_per_key() -> None:
    ex = ExactPrefixIndex(1)
    on = ex.listener(0)
    on(BlockStored((1, 2), 0, "GPU"))
    on(BlockStored((1, 2), 0, "GPU"))
    assert ex.sizes() == [2]
    on(BlockRemoved((2,), 1, "GPU"))
    on(BlockRemoved((2,), 1, "GPU"))
    assert ex.sizes() == [1] and ex.matched_units([1, 2]) == [1]


@pytest.mark.parametrize(
    ("held", "expected"),
    [
        ([(1, 2, 3, 4), (1, 2), (1, 2, 3, 4, 5)], [4, 2, 5]),
        ([(1, 2), (9,), ()], [2, 0, 0]),
        ([(2, 3), (1, 3), (1, 2, 3, 4, 5, 6)], [0, 1, 5]),  # a gap ends the match
    ],
)
def test_matched_units_are_each_instances_leading_run(
    held: list[tuple[int, ...]], expected: list[int]
) -> None:
    ex = ExactPrefixIndex(3)
    for i, keys in enumerate(held):
        if keys:
            ex.listener(i)(BlockStored(keys, 0, "GPU"))
    assert ex.matched_units([1, 2, 3, 4, 5]) == expected
    assert ex.matched_units([]) == [0, 0, 0]


class _CountingDict(dict[int, int]):
    """A mask dict that counts the lookups the walk makes."""

    gets = 0

    def get(self, key: int, default: int = 0) -> int:  # type: ignore[override]
        self.gets += 1
        return super().get(key, default)


def test_the_walk_stops_when_no_instance_is_left() -> None:
    masks = _CountingDict({1: 0b101, 2: 0b100})
    out = [0, 0, 0]
    assert walk_masks(masks, list(range(1, 1001)), out) == 2
    assert out == [1, 0, 2]
    assert masks.gets == 3  # keys 1, 2 and 3, not the other 997
    masks.gets = 0
    assert walk_masks(masks, [5, 1, 2], [0, 0, 0]) == 0 and masks.gets == 1


def test_exact_index_errors_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^router: needs at least one instance, got 0$"):
        ExactPrefixIndex(0)
    with pytest.raises(ConfigError, match=r"^router: instance index 2 out of range \[0, 2\)$"):
        ExactPrefixIndex(2).listener(2)


@pytest.mark.interpreted  # NOTE: the compiled build passes a bool as the int it is
def test_a_bool_instance_count_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^router: the instance count must be an integer"):
        ExactPrefixIndex(True)


def test_exact_follows_a_real_cache() -> None:
    """A PrefixCache with a host tier (one page a key unit): computed (GPU + CPU stored),
    evicted from device (GPU removed), loaded back: the index agrees with the cache."""
    cache = PrefixCache(KVPool(8, 1), 1, HostTier(16))
    ex = ExactPrefixIndex(2)
    cache.kv_listener = ex.listener(1)
    keys = [11, 12, 13, 14]
    table = cache.pool.take_owned([4])
    assert table is not None
    cache.unlock(cache.insert(cache.root, keys, 0, 4, table))
    assert ex.matched_units(keys) == [0, 4]
    assert cache.evict_tokens(4) == 4  # device copy gone, host copy stays
    check_invariants(cache, [], [])
    assert ex.matched_units(keys) == [0, cache.match(keys, 4).device_units] == [0, 0]
    m = cache.match(keys, 4)
    lb = cache.load_back(cache.lock(m.device_node, m.device_units), m.node, m.units)
    assert lb is not None
    cache.finish_load_back(lb)
    cache.unlock(lb.deepest)
    assert ex.matched_units(keys) == [0, cache.match(keys, 4).device_units] == [0, 4]


# ------------------------------------------------------------------ approximate
def approx(n: int = 2, tree_tokens: int = 2**26, interval: float = 120.0) -> ApproximatePrefixIndex:
    return ApproximatePrefixIndex(n, tree_tokens, interval, KT)


def test_approximate_matches_where_it_routed() -> None:
    a = approx(3)
    a.insert((1, 2, 3), 0, 0.0)
    a.insert((1, 2, 9), 2, 1.0)
    assert a.matched_units((1, 2, 3, 4), 2.0) == [3, 0, 2]
    assert a.tenant_sizes() == [3 * KT, 0, 3 * KT]
    assert a.tenant_units() == [3, 0, 3]
    a.insert((1, 2, 3, 4), 0, 3.0)  # extends its path: one new unit
    assert a.tenant_sizes() == [4 * KT, 0, 3 * KT]


def test_matching_stamps_the_longest_match_as_prefix_match_does() -> None:
    a = approx(3)
    a.insert((1, 2, 3), 1, 0.0)
    a.insert((1, 2, 3, 4), 2, 0.0)
    a.insert((1, 2, 7), 0, 0.0)
    assert a.matched_units((1, 2, 3, 5), 5.0) == [2, 3, 3]
    assert a.last_access(3, 1) == 5.0  # the lowest index of the longest match ...
    assert a.last_access(2, 1) == 5.0  # ... along its matched path
    assert a.last_access(3, 2) == 0.0  # not the other tenants
    assert a.last_access(7, 0) == 0.0
    assert a.matched_units((1, 2, 3), 6.0, touch=False) == [2, 3, 3]
    assert a.last_access(3, 1) == 5.0  # touch=False: read only
    assert a.last_access(5, 1) is None


def test_eviction_waits_for_the_interval_boundary() -> None:
    a = approx(1, tree_tokens=2 * KT)
    a.insert((1, 2, 3, 4), 0, 0.0)
    a.matched_units((1,), 119.9)
    assert (a.evictions, a.tenant_units()) == (0, [4])
    a.matched_units((1,), 120.0)  # the first call at or after 120 s
    assert (a.evictions, a.tenant_units()) == (1, [2])
    a.insert((1, 2, 3, 4), 0, 130.0)
    a.insert((5,), 0, 239.0)
    assert (a.evictions, a.tenant_units()) == (1, [5])  # once an interval
    a.insert((6,), 0, 500.0)  # boundaries 240, 360 and 480 passed: one run
    assert a.evictions == 2
    a.insert((7,), 0, 599.0)
    assert a.evictions == 2  # the next boundary is 600
    never = approx(1, tree_tokens=0, interval=0.0)
    never.insert((1, 2), 0, 0.0)
    never.matched_units((1,), 1e9)
    assert (never.evictions, never.tenant_units()) == (0, [2])


def test_eviction_pops_the_least_recent_leaves_first() -> None:
    a = approx(1, tree_tokens=2 * KT)
    a.insert((1, 2, 3), 0, 1.0)  # leaf 3 at 1
    a.insert((1, 2, 5), 0, 4.0)  # leaf 5 at 4 (1, 2 at 4 too)
    a.insert((1, 6), 0, 2.0)  # leaf 6 at 2
    a.evict()
    # 3 (1.0) goes, then 6 (2.0), then 5 (4.0): 2 becomes a leaf at 4.0; two units remain
    assert a.tenant_units() == [2]
    assert a.holds(1, 0) and a.holds(2, 0) and not a.holds(5, 0)
    assert a.last_access(2, 0) == 4.0 and a.last_access(1, 0) == 4.0


def test_equal_stamps_pop_the_smaller_key_first() -> None:
    a = approx(1, tree_tokens=2 * KT)
    a.insert((1, 9), 0, 0.0)
    a.insert((1, 5), 0, 0.0)
    a.evict()
    assert a.holds(9, 0) and not a.holds(5, 0)


def test_eviction_is_per_tenant_and_keeps_shared_keys() -> None:
    a = approx(2, tree_tokens=2 * KT)
    a.insert((1, 2, 3), 0, 0.0)
    a.insert((1, 2, 3), 1, 0.0)
    a.insert((8,), 1, 1.0)  # tenant 1 is the larger: 4 units
    a.evict()  # 0 drops 3; 1 drops 3 (0.0), then 2 (0.0) before 8 (1.0)
    assert a.tenant_units() == [2, 2]
    assert a.matched_units((1, 2, 3), 2.0, touch=False) == [2, 1]
    assert a.holds(1, 0) and a.holds(1, 1) and a.holds(2, 0) and not a.holds(2, 1)
    b = approx(2, tree_tokens=3 * KT)
    b.insert((1, 2, 3), 0, 0.0)
    b.insert((1, 2, 3, 4, 5), 1, 1.0)
    b.evict()  # only tenant 1 is above 3 units
    assert b.matched_units((1, 2, 3, 4, 5), 2.0, touch=False) == [3, 3]


def test_touch_stamps_the_held_part_of_a_path() -> None:
    a = approx(1)
    a.insert((1, 2, 3), 0, 0.0)
    a.touch((1, 2, 7, 8), 0, 3.0)
    assert (a.last_access(2, 0), a.last_access(3, 0)) == (3.0, 0.0)
    a.touch((9,), 0, 4.0)  # nothing held: nothing stamped
    assert a.last_access(1, 0) == 3.0


def test_insert_after_a_match_of_the_same_keys_reuses_it() -> None:
    a = approx(2)
    a.insert((1, 2), 1, 0.0)
    keys = (1, 2, 3)
    assert a.matched_units(keys, 1.0) == [0, 2]
    a.insert(keys, 1, 1.0)  # the match's run for tenant 1 (2 units): one new key
    a.insert(keys, 0, 1.0)  # the same match's run for tenant 0 (0 units): three
    assert a.tenant_units() == [3, 3]
    assert a.matched_units(keys, 2.0, touch=False) == [3, 3]
    chain = [5, 6]  # a list may change in between: never taken from the match
    a.matched_units(chain, 3.0)
    chain.append(7)
    a.insert(chain, 0, 3.0)
    assert a.matched_units((5, 6, 7), 4.0, touch=False) == [3, 0]


def test_approximate_errors_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^router.key_tokens: must be >= 1, got 0$"):
        ApproximatePrefixIndex(2, 10, 1.0, 0)
    with pytest.raises(ConfigError, match=r"^router.eviction_interval_s: must be >= 0"):
        ApproximatePrefixIndex(2, 10, -1.0, 16)
    with pytest.raises(ConfigError, match=r"^router.max_tree_size: must be >= 0"):
        ApproximatePrefixIndex(2, -1, 1.0, 16)


class EagerTree:
    """sglang-router's tree as written: every node on a path stamped at once, leaves
    popped oldest first (equal stamps: the smaller key), parents pushed when they become
    leaves. The reference the lazy stamps of ApproximatePrefixIndex must equal."""

    def __init__(self, n: int, limit_units: int) -> None:
        self.stamps: list[dict[int, float]] = [{} for _ in range(n)]
        self.parent: dict[int, int | None] = {}
        self.limit = limit_units

    def stamp(self, keys: Sequence[int], t: int, now: float) -> None:
        prev: int | None = None
        for key in keys:
            self.parent.setdefault(key, prev)
            self.stamps[t][key] = now
            prev = key

    def match(self, keys: Sequence[int], now: float) -> list[int]:
        out = []
        for acc in self.stamps:
            d = 0
            while d < len(keys) and keys[d] in acc:
                d += 1
            out.append(d)
        best = max(out)
        if best:
            self.stamp(keys[:best], out.index(best), now)
        return out

    def evict(self) -> None:
        for acc in self.stamps:
            kids: dict[int, int] = {}
            for key in acc:
                p = self.parent[key]
                if p is not None:
                    kids[p] = kids.get(p, 0) + 1
            heap = [(s, k) for k, s in acc.items() if k not in kids]
            heapq.heapify(heap)
            while len(acc) > self.limit and heap:
                _, key = heapq.heappop(heap)
                del acc[key]
                p = self.parent[key]
                if p is not None:
                    kids[p] -= 1
                    if not kids[p]:
                        heapq.heappush(heap, (acc[p], p))


def test_lazy_stamps_equal_sglangs_eager_ones() -> None:
    rng = random.Random(5)
    prefixes = [tuple(rng.randrange(1, 10**9) for _ in range(3)) for _ in range(4)]
    lazy = approx(3, tree_tokens=12 * KT, interval=10.0)
    eager = EagerTree(3, 12)
    chains: list[tuple[int, ...]] = []
    for step in range(3000):
        now = step * 0.1
        if not chains or rng.random() < 0.3:
            chains.append(rng.choice(prefixes) + tuple(rng.randrange(1, 10**9) for _ in range(2)))
        keys = rng.choice(chains[-20:])
        keys = keys + tuple(rng.randrange(1, 10**9) for _ in range(rng.randrange(2)))
        chains.append(keys)
        before = lazy.evictions
        got = lazy.matched_units(keys, now)
        if lazy.evictions != before:  # the lazy index evicted first: so does the reference
            eager.evict()
        assert got == eager.match(keys, now), step
        t = rng.randrange(3)
        lazy.insert(keys, t, now)  # same time: never a second eviction
        eager.stamp(keys, t, now)
    assert lazy.evictions > 20
    for t in range(3):
        assert set(eager.stamps[t]) == {k for k in eager.parent if lazy.holds(k, t)}
        for key, stamp in eager.stamps[t].items():
            assert lazy.last_access(key, t) == stamp


def _run(seed: int) -> tuple[list[int], list[list[int]]]:
    rng = random.Random(seed)
    a = approx(4, tree_tokens=20 * KT, interval=5.0)
    matches = []
    for step in range(500):
        tokens = tuple(rng.randrange(1, 6) for _ in range(rng.randrange(1, 8)))
        keys = tuple(hash(tokens[: i + 1]) for i in range(len(tokens)))  # a chain
        matches.append(a.matched_units(keys, step * 0.1))
        a.insert(keys, rng.randrange(4), step * 0.1)
    return a.tenant_sizes(), matches


def test_approximate_index_is_deterministic() -> None:
    assert _run(1) == _run(1)
    assert _run(1) != _run(2)


def test_a_shared_listener_keeps_a_key_while_any_rank_holds_it() -> None:
    """DP attention: two ranks of instance 0 report through one shared listener; one
    rank's removal leaves the key held by the other."""
    idx = ExactPrefixIndex(2)
    on = idx.listener(0, shared=True)
    on(BlockStored((11, 12), 0, "GPU"))  # rank A
    on(BlockStored((11,), 0, "GPU"))  # rank B holds the first key too
    on(BlockRemoved((11, 12), 0, "GPU"))  # rank A evicts its run
    assert idx.matched_units((11, 12)) == [1, 0]
    on(BlockRemoved((11,), 0, "GPU"))  # rank B too
    assert idx.matched_units((11, 12)) == [0, 0]
    assert idx.sizes() == [0, 0]
