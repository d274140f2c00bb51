"""One checker for every accounting invariant of the pool and the two-tier cache.

Tests call :func:`check_invariants` after every operation; the engine calls it every
step behind ``--debug-check-invariants``. It walks the whole tree: O(cache size).
"""

from __future__ import annotations

from collections.abc import Iterable

from prefillkit.cache.node import Node
from prefillkit.cache.pool import lane_split
from prefillkit.cache.prefix import PrefixCache


class InvariantError(AssertionError):
    pass


def _fail(msg: str) -> None:
    raise InvariantError(msg)


def check_invariants(
    cache: PrefixCache, owned_ranges: Iterable[tuple[int, int]] | None = None
) -> None:
    """Raise :class:`InvariantError` on the first broken invariant.

    ``owned_ranges``: every live request's owned page range ``(start, end)``; when given,
    their per-lane sum must equal the pool's request-owned counts.
    """
    pool = cache.pool
    r = pool.cp_size
    u = cache.unit_pages
    cached = [0] * r
    evictable = [0] * r
    evictable_pages = protected_pages = 0
    host_used = 0
    n_keys = 0
    expect_lru: set[Node] = set()
    expect_host_lru: set[Node] = set()
    root = cache.root
    if root.lock_ref != 1 or root.keys or not root.on_device:
        _fail("root must hold no keys, be device resident and keep lock_ref 1")
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        for first, child in node.children.items():
            if child.parent is not node:
                _fail(f"{child} parent pointer is wrong")
            if not child.keys or child.keys[0] != first:
                _fail(f"{child} is filed under the wrong first key")
            if child.end != child.start + len(child.keys):
                _fail(f"{child} end is stale ({len(child.keys)} keys)")
            if child.start != node.end:
                _fail(f"{child} starts at {child.start}, parent ends at {node.end}")
            if node is not root and child.lock_ref > node.lock_ref:
                _fail(f"{child} lock_ref exceeds its parent's {node}")
            if child.on_device and not node.on_device:
                _fail(f"device node {child} under a host-only parent {node}")
            stack.append(child)
        if node is root:
            continue
        if node.lock_ref < 0 or node.host_lock_ref < 0:
            _fail(f"{node} has a negative lock count")
        if not node.on_device and not node.on_host:
            _fail(f"{node} is resident nowhere")
        if node.n_pages != len(node.keys) * u:
            _fail(f"{node} n_pages {node.n_pages} != {len(node.keys)} units x {u}")
        if node.lane_pages != lane_split(node.start * u, node.n_pages, r):
            _fail(f"{node} lane pages {node.lane_pages} do not match its page range")
        for key in node.keys:
            if cache.index.get(key) is not node:
                _fail(f"index does not map key {key} to {node}")
        n_keys += len(node.keys)
        if node.on_device:
            for i, c in enumerate(node.lane_pages):
                cached[i] += c
            if node.lock_ref == 0:
                evictable_pages += node.n_pages
                for i, c in enumerate(node.lane_pages):
                    evictable[i] += c
                expect_lru.add(node)
            else:
                protected_pages += node.n_pages
        elif node.lock_ref:
            _fail(f"host-only {node} is device locked")
        if node.host_lock_ref and not node.on_host:
            _fail(f"{node} is host locked but not on host")
        if node.on_host:
            host_used += node.n_pages
            if not node.on_device and node.host_lock_ref == 0:
                expect_host_lru.add(node)
    if len(cache.index) != n_keys:
        _fail(f"index holds {len(cache.index)} keys, tree holds {n_keys}")
    if cached != pool.cached:
        _fail(f"pool cached lanes {pool.cached} != tree device pages {cached}")
    if evictable_pages != cache.evictable_pages or protected_pages != cache.protected_pages:
        _fail(
            f"evictable/protected {cache.evictable_pages}/{cache.protected_pages} != "
            f"tree {evictable_pages}/{protected_pages}"
        )
    if evictable_pages + protected_pages != sum(cached):
        _fail("evictable + protected != cached")
    if evictable != cache.evictable_lanes:
        _fail(f"evictable lanes {cache.evictable_lanes} != tree {evictable}")
    lru = cache.lru_order()
    if set(lru) != expect_lru or len(lru) != len(expect_lru):
        _fail("device LRU is not exactly the unlocked device nodes")
    for n in cache.lru:
        if n.lock_ref and n not in cache._tentative_fresh:
            _fail(f"locked node {n} in the device LRU outside a tentative lock")
    pos = {n: i for i, n in enumerate(lru)}
    for n, i in pos.items():
        p = n.parent
        if p in pos and pos[p] < i:
            _fail(f"device LRU has parent {p} before child {n}")
    for i in range(r):
        if min(pool.free[i], pool.cached[i], pool.owned[i]) < 0:
            _fail(f"lane {i} has a negative count")
        if pool.free[i] + pool.cached[i] + pool.owned[i] != pool.capacity[i]:
            _fail(
                f"lane {i}: free {pool.free[i]} + cached {pool.cached[i]} + owned "
                f"{pool.owned[i]} != capacity {pool.capacity[i]}"
            )
    if pool.free_total != sum(pool.free):
        _fail(f"pool free_total {pool.free_total} != sum of lanes {sum(pool.free)}")
    if owned_ranges is not None:
        owned = [0] * r
        for start, end in owned_ranges:
            for i, c in enumerate(lane_split(start, end - start, r)):
                owned[i] += c
        if owned != pool.owned:
            _fail(f"requests own {owned} pages per lane, pool says {pool.owned}")
    host = cache.host
    if host is None:
        if host_used:
            _fail("nodes on host without a host tier")
        return
    if host_used != host.used_pages:
        _fail(f"host used {host.used_pages} != tree host pages {host_used}")
    if host.used_pages > host.capacity_pages:
        _fail(f"host used {host.used_pages} exceeds capacity {host.capacity_pages}")
    if set(host.lru) != expect_host_lru:
        _fail("host LRU is not exactly the unlocked host-only nodes")
