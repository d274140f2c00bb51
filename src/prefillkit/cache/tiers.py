# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Moving prefix-cache nodes between the tiers: a device eviction (to host under
write-back, else out of the tree), a node's removal with its host-only descendants, a
host backup (write-through or write-back), and the load of a host path back to device.

Functions of a :class:`~prefillkit.cache.prefix.PrefixCache` (they mutate it, its pool,
its host tier and the nodes they name); the cache calls them, and ``load_back`` /
``finish_load_back`` are its methods too.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from prefillkit.cache.events import BlockLoadedBack, BlockRemoved, BlockStored
from prefillkit.cache.lookup import LoadBack
from prefillkit.cache.node import Node
from prefillkit.cache.pages import global_ids

if TYPE_CHECKING:
    from prefillkit.cache.prefix import PrefixCache


def evict_device(cache: PrefixCache, node: Node) -> None:
    """``node`` was popped from the LRU: free its device pages."""
    cache.pool.give_cached(node.pages, node.lane_pages)
    node.pages = cache._no_pages
    if cache.changed_nodes is not None:
        cache.changed_nodes.append(node)
    if cache.kv_listener is not None:
        cache.kv_listener(BlockRemoved(tuple(node.keys), node.start, "GPU"))
    cache.evictable_pages -= node.n_pages
    ev = cache.evictable_lanes
    for i, n in enumerate(node.lane_pages):
        ev[i] -= n
    node.on_device = False
    cache.device_evicted_pages += node.n_pages
    host = cache.host
    if host is not None and (
        node.on_host or (host.write_policy == "write_back" and backup(cache, node))
    ):
        if node.host_lock_ref == 0:
            host.lru[node] = None
        return
    remove_subtree(cache, node)


def remove_subtree(cache: PrefixCache, node: Node) -> None:
    """Drop a node that is on no device (and its host-only descendants) from the tree."""
    stack = [node]
    host = cache.host
    index = cache.index
    changed = cache.changed_nodes
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        # NOTE: the removed nodes drop their links (parent <-> children cycles), so
        # reference counting frees them at once: nothing follows a removed node's
        # links (it is on neither tier, which refresh_match checks first).
        n.children.clear()
        if n is not node:
            n.parent = None
        if changed is not None:
            changed.append(n)
        for key in n.keys:
            del index[key]
        if n.on_host and host is not None:
            host.give_slots(n.host_slots)
            n.host_slots = array("q")
            host.evicted_pages += n.n_pages
            host.lru.pop(n, None)
            n.on_host = False
            if cache.kv_listener is not None:
                cache.kv_listener(BlockRemoved(tuple(n.keys), n.start, "CPU"))
    parent = node.parent
    assert parent is not None  # NOTE: an evicted node is never the root
    del parent.children[node.keys[0]]
    node.parent = None


def host_make_room(cache: PrefixCache, n_pages: int) -> bool:
    host = cache.host
    assert host is not None
    if n_pages > host.capacity_pages:
        return False
    while host.capacity_pages - host.used_pages < n_pages:
        if not host.lru:
            return False
        victim, _ = host.lru.popitem(last=False)
        remove_subtree(cache, victim)
    return True


def backup(cache: PrefixCache, node: Node) -> bool:
    """Write a device node to host (if there is or can be made room)."""
    host = cache.host
    if host is None:
        return False
    if node.on_host:
        return True
    if not host_make_room(cache, node.n_pages):
        return False
    node.on_host = True
    node.host_slots = host.take_slots(node.n_pages)
    host.backed_up_pages += node.n_pages
    if cache.kv_listener is not None:
        cache.kv_listener(
            BlockStored(tuple(node.keys), node.start, "CPU", slots=tuple(node.host_slots))
        )
    return True


def load_back(
    cache: PrefixCache, device_node: Node, host_node: Node, units: int
) -> LoadBack | None:
    """Load the host-only path below ``device_node`` through unit ``units`` to device.

    The caller holds a lock on ``device_node``. All or nothing: on success the
    loaded nodes are device resident, host-locked until :func:`finish_load_back`,
    and the caller's lock has moved to ``LoadBack.deepest``; on failure nothing
    changed (apart from a possible split) and None is returned.
    """
    if cache._tentative is not None:
        cache._commit()
    if units < host_node.end:
        host_node = cache._split(host_node, units)
    path: list[Node] = []
    lanes = [0] * cache.cp_size
    n = host_node
    while n is not device_node:
        path.append(n)
        for i, c in enumerate(n.lane_pages):
            lanes[i] += c
        parent = n.parent
        assert parent is not None  # NOTE: only the root has no parent
        n = parent
    if not cache.can_make_room(lanes):
        return None
    host = cache.host
    assert host is not None
    for n in path:  # NOTE: host-lock first so host eviction cannot take the path
        n.host_lock_ref += 1
        host.lru.pop(n, None)
    if not cache.evict_for(lanes):  # pragma: no cover - guarded by can_make_room
        raise AssertionError("eviction fell short of can_make_room")
    pages = 0
    copies: list[tuple[int, array[int], list[array[int]]]] = []
    u = cache.unit_pages
    listener = cache.kv_listener
    for n in path:  # NOTE: deepest first, keeping children before parents in the LRU
        table = cache.pool.take_cached(n.lane_pages)
        assert table is not None  # NOTE: evict_for made room for the whole path
        n.pages = table
        n.on_device = True
        if cache.changed_nodes is not None:
            cache.changed_nodes.append(n)
        cache._add_evictable(n)
        pages += n.n_pages
        copies.append((n.start * u, n.host_slots[:], [t[:] for t in table]))
    cache.lock(host_node, host_node.end)
    cache._commit()  # NOTE: the lock moves; it is not a candidate's tentative lock
    cache.unlock(device_node)
    copies.reverse()  # NOTE: root side first: sequence order
    if listener is not None:
        for n, (start, slots, table) in zip(reversed(path), copies, strict=True):
            pairs = zip(slots.tolist(), global_ids(table, start), strict=True)
            listener(BlockLoadedBack(tuple(n.keys), n.start, tuple(pairs)))
    return LoadBack(host_node, device_node, pages, pages * cache.page_size, tuple(copies))


def finish_load_back(cache: PrefixCache, lb: LoadBack) -> None:
    """The transfer completed: release the host locks taken by :meth:`load_back`."""
    if cache._tentative is not None:
        cache._commit()
    host = cache.host
    assert host is not None
    n: Node | None = lb.deepest
    while n is not lb.boundary and n is not None:
        n.host_lock_ref -= 1
        if n.host_lock_ref == 0 and n.on_host and not n.on_device:
            host.lru[n] = None
        n = n.parent
