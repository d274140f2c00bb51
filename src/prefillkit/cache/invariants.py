"""One checker for every accounting invariant of the pool and the two-tier cache.

Tests call :func:`check_invariants` after every operation; the engine calls it every
step behind ``--debug-check-invariants``. It walks the whole tree: O(cache size).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from functools import lru_cache

from prefillkit.cache.node import Node
from prefillkit.cache.pages import IdStack
from prefillkit.cache.pool import lane_split
from prefillkit.cache.prefix import PrefixCache

#: A live request's pages as the checker sees them: ``(rid, owned_start_page,
#: owned_pages, locked_node)`` (see ``Request.owned_pages``).
PageHolder = tuple[str, int, list["array[int]"], Node | None]


class InvariantError(AssertionError):
    pass


def _fail(msg: str) -> None:
    raise InvariantError(msg)


@lru_cache(maxsize=8)
def _id_space(n: int) -> frozenset[int]:
    """``{0, ..., n - 1}``, kept for the next check (``IdStack.fresh`` grows in chunks)."""
    return frozenset(range(n))


def _check_partition(what: str, stack: IdStack, held: list[tuple[object, array[int]]]) -> None:
    """The free ids of ``stack`` and the ``held`` arrays (holder, ids) must cover the id
    space ``[0, stack.size)`` exactly once. A holder is named by ``str()`` (a node's repr
    is built only when the check fails)."""
    # NOTE: fast path in C (array concatenation and a set): the ids cover the space
    # exactly once iff there are ``fresh`` of them, all distinct and all in range. Only
    # a failing partition pays for the per-holder walk that names the culprit.
    every = stack.ids[: stack.top]
    for _holder, ids in held:
        every.extend(ids)
    n = stack.fresh
    if len(every) == n and set(every) == _id_space(n):
        return
    owner: dict[int, str] = {}
    for pid in stack.ids[: stack.top]:
        if pid in owner:
            _fail(f"{what}: page {pid} is twice in the free list")
        owner[pid] = "the free list"
    for held_by, ids in held:
        holder = str(held_by)
        for pid in ids:
            prev = owner.get(pid)
            if prev is not None:
                _fail(f"{what}: page {pid} is held by both {prev} and {holder}")
            if not 0 <= pid < stack.fresh:
                _fail(f"{what}: {holder} holds page {pid}, never handed out")
            owner[pid] = holder
    if len(owner) != stack.fresh:
        missing = next(p for p in range(stack.fresh) if p not in owner)
        _fail(f"{what}: page {missing} is held by nobody (not even free)")


class _Tally:
    """What the tree walk counts, checked afterwards against the cache's own counts."""

    def __init__(self, r: int) -> None:
        self.cached = [0] * r  # device pages per lane
        self.evictable = [0] * r  # unlocked device pages per lane
        self.evictable_pages = 0
        self.protected_pages = 0
        self.host_used = 0
        self.n_keys = 0
        self.expect_lru: set[Node] = set()
        self.expect_host_lru: set[Node] = set()
        self.own_locks: dict[Node, int] = {}  # node -> locks ending at it


def check_invariants(
    cache: PrefixCache,
    owned_ranges: Iterable[tuple[int, int]] | None = None,
    page_holders: Iterable[PageHolder] | None = None,
) -> None:
    """Raise :class:`InvariantError` on the first broken invariant.

    ``owned_ranges``: every live request's owned page range ``(start, end)``; when given,
    their per-lane sum must equal the pool's request-owned counts. ``page_holders``: every
    live request's page ids; when given, every page of every lane must be free, cached by
    exactly one device node, or owned by exactly one request (or loose), and every host
    slot free or held by exactly one host node.
    """
    # NOTE: the checks run in a fixed order; the first broken one raises.
    if page_holders is not None:
        page_holders = list(page_holders)  # NOTE: read twice (locks, then pages)
    tally = _walk_tree(cache)
    _check_lock_counts(cache, tally.own_locks, page_holders)
    _check_tree_totals(cache, tally)
    _check_lru(cache, tally.expect_lru)
    _check_lane_counts(cache)
    if owned_ranges is not None:
        _check_owned_ranges(cache, owned_ranges)
    _check_free_lists(cache)
    if page_holders is not None:
        _check_pages(cache, list(page_holders))
    _check_host(cache, tally)


def _walk_tree(cache: PrefixCache) -> _Tally:
    """Walk the tree once: each node's child links, then the node itself, counted."""
    root = cache.root
    tally = _Tally(cache.pool.cp_size)
    if root.lock_ref != 1 or root.keys or not root.on_device:
        _fail("root must hold no keys, be device resident and keep lock_ref 1")
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        _check_children(node, stack)
        if node is root:
            continue
        _check_node_locks(node, tally)
        _check_node_shape(cache, node)
        _count_node(node, tally)
    return tally


def _check_children(node: Node, stack: list[Node]) -> None:
    """``node``'s children: linked back, filed under their first key, contiguous with
    ``node``, never device resident under a host-only parent; pushed onto ``stack``."""
    for first, child in node.children.items():
        if child.parent is not node:
            _fail(f"{child} parent pointer is wrong")
        if not child.keys or child.keys[0] != first:
            _fail(f"{child} is filed under the wrong first key")
        if child.end != child.start + len(child.keys):
            _fail(f"{child} end is stale ({len(child.keys)} keys)")
        if child.start != node.end:
            _fail(f"{child} starts at {child.start}, parent ends at {node.end}")
        if child.on_device and not node.on_device:
            _fail(f"device node {child} under a host-only parent {node}")
        stack.append(child)


def _check_node_locks(node: Node, tally: _Tally) -> None:
    """``node``'s lock counts are not negative and cover its locked children; its own
    locks (the rest) are recorded for :func:`_check_lock_counts`."""
    if node.lock_ref < 0 or node.host_lock_ref < 0:
        _fail(f"{node} has a negative lock count")
    own = node.lock_ref - sum(1 for c in node.children.values() if c.lock_ref)
    if own < 0:
        _fail(f"{node} lock_ref {node.lock_ref} is below its locked children's count")
    if own:
        tally.own_locks[node] = own


def _check_node_shape(cache: PrefixCache, node: Node) -> None:
    """``node`` is resident somewhere, its page counts match its keys on each lane and
    tier, and the index maps each of its keys to it."""
    r = cache.pool.cp_size
    u = cache.unit_pages
    if not node.on_device and not node.on_host:
        _fail(f"{node} is resident nowhere")
    if node.n_pages != len(node.keys) * u:
        _fail(f"{node} n_pages {node.n_pages} != {len(node.keys)} units x {u}")
    if node.lane_pages != lane_split(node.start * u, node.n_pages, r):
        _fail(f"{node} lane pages {node.lane_pages} do not match its page range")
    held = [len(t) for t in node.pages]
    if held != (node.lane_pages if node.on_device else [0] * r):
        _fail(f"{node} holds {held} device pages per lane, expected {node.lane_pages}")
    if len(node.host_slots) != (node.n_pages if node.on_host else 0):
        _fail(f"{node} holds {len(node.host_slots)} host slots")
    for key in node.keys:
        if cache.index.get(key) is not node:
            _fail(f"index does not map key {key} to {node}")


def _count_node(node: Node, tally: _Tally) -> None:
    """Add ``node`` to the walk's counts and expected LRU sets; a device lock needs
    device residence, a host lock host residence."""
    tally.n_keys += len(node.keys)
    if node.on_device:
        for i, c in enumerate(node.lane_pages):
            tally.cached[i] += c
        if node.lock_ref == 0:
            tally.evictable_pages += node.n_pages
            for i, c in enumerate(node.lane_pages):
                tally.evictable[i] += c
            tally.expect_lru.add(node)
        else:
            tally.protected_pages += node.n_pages
    elif node.lock_ref:
        _fail(f"host-only {node} is device locked")
    if node.host_lock_ref and not node.on_host:
        _fail(f"{node} is host locked but not on host")
    if node.on_host:
        tally.host_used += node.n_pages
        if not node.on_device and node.host_lock_ref == 0:
            tally.expect_host_lru.add(node)


def _check_tree_totals(cache: PrefixCache, tally: _Tally) -> None:
    """The index size, the pool's cached lanes and the cache's evictable / protected
    counts equal what the walk counted."""
    pool = cache.pool
    if len(cache.index) != tally.n_keys:
        _fail(f"index holds {len(cache.index)} keys, tree holds {tally.n_keys}")
    if tally.cached != pool.cached:
        _fail(f"pool cached lanes {pool.cached} != tree device pages {tally.cached}")
    evictable_pages = tally.evictable_pages
    protected_pages = tally.protected_pages
    if evictable_pages != cache.evictable_pages or protected_pages != cache.protected_pages:
        _fail(
            f"evictable/protected {cache.evictable_pages}/{cache.protected_pages} != "
            f"tree {evictable_pages}/{protected_pages}"
        )
    if evictable_pages + protected_pages != sum(tally.cached):
        _fail("evictable + protected != cached")
    if tally.evictable != cache.evictable_lanes:
        _fail(f"evictable lanes {cache.evictable_lanes} != tree {tally.evictable}")


def _check_lru(cache: PrefixCache, expect_lru: set[Node]) -> None:
    """The device LRU holds exactly the unlocked device nodes (locked ones only inside
    a tentative lock), every child before its parent."""
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


def _check_lane_counts(cache: PrefixCache) -> None:
    """Per lane, free + cached + owned pages make up the capacity, none negative."""
    pool = cache.pool
    for i in range(pool.cp_size):
        if min(pool.free[i], pool.cached[i], pool.owned[i]) < 0:
            _fail(f"lane {i} has a negative count")
        if pool.free[i] + pool.cached[i] + pool.owned[i] != pool.capacity[i]:
            _fail(
                f"lane {i}: free {pool.free[i]} + cached {pool.cached[i]} + owned "
                f"{pool.owned[i]} != capacity {pool.capacity[i]}"
            )
    if pool.free_total != sum(pool.free):
        _fail(f"pool free_total {pool.free_total} != sum of lanes {sum(pool.free)}")


def _check_owned_ranges(cache: PrefixCache, owned_ranges: Iterable[tuple[int, int]]) -> None:
    """The live requests' owned page ranges add up to the pool's owned count per lane."""
    pool = cache.pool
    r = pool.cp_size
    owned = [0] * r
    for start, end in owned_ranges:
        for i, c in enumerate(lane_split(start, end - start, r)):
            owned[i] += c
    if owned != pool.owned:
        _fail(f"requests own {owned} pages per lane, pool says {pool.owned}")


def _check_free_lists(cache: PrefixCache) -> None:
    """Each lane's free list holds as many ids as its free count."""
    pool = cache.pool
    for i in range(pool.cp_size):
        if len(pool.free_ids[i]) != pool.free[i]:
            _fail(f"lane {i}: free list holds {len(pool.free_ids[i])} pages, count {pool.free[i]}")


def _check_host(cache: PrefixCache, tally: _Tally) -> None:
    """The host tier's use and LRU match the walk (no host pages without a host tier)."""
    host = cache.host
    if host is None:
        if tally.host_used:
            _fail("nodes on host without a host tier")
        return
    if tally.host_used != host.used_pages:
        _fail(f"host used {host.used_pages} != tree host pages {tally.host_used}")
    if host.used_pages > host.capacity_pages:
        _fail(f"host used {host.used_pages} exceeds capacity {host.capacity_pages}")
    if set(host.lru) != tally.expect_host_lru:
        _fail("host LRU is not exactly the unlocked host-only nodes")


def _check_lock_counts(
    cache: PrefixCache,
    own_locks: dict[Node, int],
    page_holders: Iterable[PageHolder] | None,
) -> None:
    """The counted locks (cache/node.py: ``lock_ref`` = own locks + locked children) are
    exact: a node is locked exactly when a lock ends in its subtree, recomputed bottom-up
    here independently of the incremental counts; with ``page_holders``, every live
    request's locked node holds at least its own lock (other holders, such as a pass's
    tentative lock or a caller's own, may hold more; a lock left behind is caught by the
    callers' end-state checks: nothing protected once every request is gone)."""
    locked: set[Node] = set()
    for lock in own_locks:
        n: Node | None = lock
        while n is not None and n is not cache.root and n not in locked:
            locked.add(n)
            n = n.parent
    stack = list(cache.root.children.values())
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        if (n.lock_ref > 0) != (n in locked):
            _fail(f"{n} lock_ref {n.lock_ref} but a lock ends in its subtree: {n in locked}")
    if page_holders is None:
        return
    expect: dict[Node, int] = {}
    for _rid, _start, _table, node in page_holders:
        if node is not None and node is not cache.root:
            expect[node] = expect.get(node, 0) + 1
    for held, times in expect.items():
        if own_locks.get(held, 0) < times:
            have = own_locks.get(held, 0)
            _fail(f"{held} holds {have} own locks, live requests lock it {times} times")


def _check_pages(cache: PrefixCache, holders: list[PageHolder]) -> None:
    """Page-level ownership: each lane's ids and the host slots are partitioned."""
    pool = cache.pool
    r = pool.cp_size
    u = cache.unit_pages
    lanes: list[list[tuple[object, array[int]]]] = [[("the loose pages", lo)] for lo in pool.loose]
    host_held: list[tuple[object, array[int]]] = []
    stack = list(cache.root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        for i, t in enumerate(node.pages):
            lanes[i].append((node, t))
        host_held.append((node, node.host_slots))
    for rid, start, table, locked in holders:
        if table and len(table) != r:
            _fail(f"{rid}: page table has {len(table)} lanes, the pool {r}")
        for i, t in enumerate(table):
            lanes[i].append((f"request {rid}", t))
        if locked is not None and locked.end * u != start:
            _fail(
                f"{rid}: owned pages start at page {start}, its locked prefix ends at "
                f"page {locked.end * u}"
            )
    for i in range(r):
        _check_partition(f"lane {i}", pool.free_ids[i], lanes[i])
    host = cache.host
    if host is not None:
        _check_partition("host slots", host.free_slots, host_held)
