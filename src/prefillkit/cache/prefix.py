# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The prefix cache: a radix tree over key chains with a device tier (L1) and an
optional host tier (L2).

Design (see docs/cache.md):
- Nodes are maximal runs of key units (path-compressed). ``index`` maps every key to the
  node holding it, so a match is a binary search over the request's key chain with dict
  lookups: O(log n) lookups, no per-pass hashing, no tree walk. This works because the
  set of cached keys is prefix-closed (a node is never dropped before its children).
- Device LRU: ``lru`` is an OrderedDict of the unlocked device-resident nodes, ordered so
  that every node comes after its device-resident descendants (locks and touches walk
  leaf to root). The front is therefore always an evictable leaf: eviction is O(1)
  per node, with no scan or heap of all leaves.
- Locks count, not walk: ``lock_ref`` of a node is its own locks (requests whose locked
  prefix ends at it) plus the number of its children with ``lock_ref > 0``, so a node
  is locked (some lock ends in its subtree) exactly when ``lock_ref > 0``. A lock or
  unlock changes the node's count and goes up only while counts cross 0, i.e. through
  exactly the nodes that leave or re-enter ``lru``: O(1 + nodes whose state changes),
  not O(depth). ``evictable`` / ``protected`` page counts (and the per-lane evictable
  counts) change exactly at those crossings.
- A match never mutates anything (no LRU refresh, no split). Admission locks (and may
  split) the matched node; unlocking re-appends nodes at the MRU end, which is the LRU
  refresh. So a request that merely waits does not perturb LRU order.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict

from prefillkit.cache.events import BlockStored, KVListener
from prefillkit.cache.host import HostTier
from prefillkit.cache.lookup import LoadBack, MatchResult, tail_units_needed
from prefillkit.cache.node import Node
from prefillkit.cache.pages import empty_table, global_ids
from prefillkit.cache.pool import KVPool, lane_split
from prefillkit.cache.tiers import backup, evict_device, finish_load_back, load_back

__all__ = ["LoadBack", "MatchResult", "PrefixCache", "tail_units_needed"]


class PrefixCache:
    def __init__(self, pool: KVPool, key_tokens: int, host: HostTier | None = None) -> None:
        if key_tokens <= 0 or key_tokens % pool.page_size:
            raise ValueError(
                f"key unit ({key_tokens} tokens) must be a positive multiple of "
                f"page_size ({pool.page_size})"
            )
        self.pool = pool
        self.page_size = pool.page_size
        self.key_tokens = key_tokens
        self.unit_pages = key_tokens // pool.page_size
        self.cp_size = pool.cp_size
        self.host = host
        # Called with one KV event per change of what the cache holds (cache/events.py);
        # NOTE: None (the default) builds no event at all.
        self.kv_listener: KVListener | None = None
        # What may have changed a waiting request's match, for an order kept across
        # passes (sched/lpm_order.py), which drains them: nodes that were split, merged,
        # evicted from device, revived, loaded back or removed, and the first key of
        # every new node. NOTE: None (the default) records nothing.
        self.changed_nodes: list[Node] | None = None
        self.new_heads: list[int] | None = None
        # NOTE: shared by every node off the device; never mutated (no node's page table
        # is: splits, merges, evictions and load-backs bind new ones).
        self._no_pages = empty_table(pool.cp_size)
        self.root = Node([], 0, None, 0, [0] * pool.cp_size, self._no_pages)
        self.root.lock_ref = 1  # NOTE: the root is never evicted and holds no pages
        self.index: dict[int, Node] = {}
        self.lru: OrderedDict[Node, None] = OrderedDict()
        self.evictable_pages = 0
        self.protected_pages = 0
        self.evictable_lanes = [0] * pool.cp_size
        self.device_evicted_pages = 0  # cumulative
        # The last lock, while nothing else has touched the cache since (see lock()):
        # its node, the nodes it took from 0 to 1 lock (still in ``lru``), its split.
        self._tentative: Node | None = None
        self._tentative_fresh: list[Node] = []
        self._tentative_split: Node | None = None

    # ------------------------------------------------------------------ sizes
    @property
    def evictable_size(self) -> int:
        """Tokens in unlocked device pages (upstream ``evictable_size()``)."""
        return self.evictable_pages * self.page_size

    @property
    def cached_pages(self) -> int:
        return self.evictable_pages + self.protected_pages

    # ------------------------------------------------------------------ match
    def match_units(self, keys: list[int], max_units: int, hint: int = 0) -> int:
        """Units of the longest cached prefix (device + host) of ``keys[:max_units]``.

        A binary search with dict lookups: the cached key set is prefix-closed, so
        "``keys[i]`` is cached" is monotone in ``i``. ``hint`` is a previous match length
        of the same chain: when it is still exact (two lookups confirm it) the search
        is skipped. Any hint is safe. Never mutates.
        """
        index = self.index
        if max_units <= 0 or keys[0] not in index:
            return 0
        if keys[max_units - 1] in index:
            return max_units
        if 0 < hint < max_units and keys[hint - 1] in index and keys[hint] not in index:
            return hint
        lo, hi = 1, max_units - 1  # keys[lo-1] in index, keys[hi] not
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if keys[mid - 1] in index:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def match(self, keys: list[int], max_units: int, hint: int = 0) -> MatchResult:
        """Longest cached prefix of ``keys[:max_units]`` (device + host). Never mutates."""
        return self.match_at(keys, self.match_units(keys, max_units, hint))

    def match_at(self, keys: list[int], c: int) -> MatchResult:
        """The match of ``keys`` given its length ``c`` in units (from ``match_units``)."""
        return self.match_node(self.index[keys[c - 1]] if c else self.root, c)

    def match_node(self, node: Node, c: int) -> MatchResult:
        """The match of length ``c`` units whose last unit is held by ``node`` (the root,
        which is always on device, when nothing matched)."""
        if node.on_device:
            return MatchResult(node, c, node, c)
        dev = node.parent
        while dev is not None and not dev.on_device:
            dev = dev.parent
        assert dev is not None  # NOTE: the root is always on device
        return MatchResult(node, c, dev, dev.end)

    # ------------------------------------------------------------------ locks
    def lock(self, node: Node, units: int) -> Node:
        """Lock the device path ending at unit ``units`` inside ``node``; return its node.

        ``node`` must be device resident. Splits ``node`` when ``units`` ends inside it.

        The lock is *tentative* until the next other cache operation: an :meth:`unlock`
        of the returned node before that undoes it exactly (no LRU refresh, the split
        merged back), so a candidate rejected after its prefix was locked leaves the
        cache as it found it. Meanwhile the nodes it locked stay in ``lru`` (in place);
        the evictable/protected counts change at once, and any other operation first
        commits the lock (removes them from ``lru``).
        """
        if self._tentative is not None:
            self._commit()
        if units == 0:
            return self.root
        split: Node | None = None
        if units < node.end:
            node = split = self._split(node, units)
        locked = node
        root = self.root
        fresh: list[Node] = []
        # NOTE: up only while counts cross 0: an ancestor that was already locked just
        # counts one more locked child (the first iteration adds the lock itself).
        while node is not root:
            node.lock_ref += 1
            if node.lock_ref != 1:
                break
            fresh.append(node)  # NOTE: left in the LRU until committed
            self.evictable_pages -= node.n_pages
            self.protected_pages += node.n_pages
            ev = self.evictable_lanes
            for i, n in enumerate(node.lane_pages):
                ev[i] -= n
            parent = node.parent
            assert parent is not None  # NOTE: only the root has no parent
            node = parent
        self._tentative = locked
        self._tentative_fresh = fresh
        self._tentative_split = split
        return locked

    def commit(self) -> None:
        """Make the last lock final (a use, not a probe): its unlock refreshes LRU order
        even when no other cache operation ran in between."""
        if self._tentative is not None:
            self._commit()

    def _commit(self) -> None:
        """Make the tentative lock final: its newly locked nodes leave the LRU."""
        lru = self.lru
        for n in self._tentative_fresh:
            del lru[n]
        self._tentative = None
        self._tentative_fresh = []
        self._tentative_split = None

    def _undo_lock(self) -> None:
        """Undo the tentative lock: counts back, LRU untouched, its split merged back."""
        node = self._tentative
        root = self.root
        ev = self.evictable_lanes
        while node is not root:
            assert node is not None
            node.lock_ref -= 1
            if node.lock_ref:
                break
            self.evictable_pages += node.n_pages
            self.protected_pages -= node.n_pages
            for i, n in enumerate(node.lane_pages):
                ev[i] += n
            node = node.parent
        if self._tentative_split is not None:
            self._merge_into_child(self._tentative_split)
        self._tentative = None
        self._tentative_fresh = []
        self._tentative_split = None

    def _merge_into_child(self, p: Node) -> None:
        """Undo :meth:`_split`: ``p``'s only child takes back ``p``'s units and slot."""
        (child,) = p.children.values()
        if self.changed_nodes is not None:
            self.changed_nodes += (p, child)
        child.keys = p.keys + child.keys
        child.start = p.start
        child.n_pages += p.n_pages
        child.lane_pages = [a + b for a, b in zip(child.lane_pages, p.lane_pages, strict=True)]
        child.pages = [a + b for a, b in zip(p.pages, child.pages, strict=True)]
        child.host_slots = p.host_slots + child.host_slots
        parent = p.parent
        assert parent is not None
        parent.children[p.keys[0]] = child  # NOTE: same key, so the same slot
        child.parent = parent
        index = self.index
        for key in p.keys:
            index[key] = child
        self.lru.pop(p, None)
        if self.host is not None:
            self.host.lru.pop(p, None)
        # NOTE: p is out of the tree: on neither tier, so a match hint on it is stale.
        p.on_device = p.on_host = False
        p.parent = None
        p.children = {}

    def unlock(self, node: Node) -> None:
        if node is self.root:
            return
        if node is self._tentative:
            self._undo_lock()
            return
        if self._tentative is not None:
            self._commit()
        self._dec_lock(node)

    def lru_order(self) -> list[Node]:
        """The device LRU, least recent first: exactly the unlocked device nodes."""
        if self._tentative is not None:
            return [n for n in self.lru if n.lock_ref == 0]
        return list(self.lru)

    def _dec_lock(self, node: Node) -> None:
        root = self.root
        lru = self.lru
        ev = self.evictable_lanes
        while node is not root:
            node.lock_ref -= 1
            if node.lock_ref:
                break  # NOTE: still locked, so its ancestors' counts do not change
            lru[node] = None
            self.evictable_pages += node.n_pages
            self.protected_pages -= node.n_pages
            for i, n in enumerate(node.lane_pages):
                ev[i] += n
            parent = node.parent
            assert parent is not None  # NOTE: only the root has no parent
            node = parent

    def record_hit(self, node: Node) -> None:
        """Count one hit on every node of the path to ``node``: an admitted request
        reuses that cached prefix (selective write-through).

        A node's ``hit_count`` is the number of requests that cached its prefix, as
        upstream counts on insert: 1 for the request that creates the node (see
        :meth:`insert`), +1 for each later request that reuses the prefix (counted here,
        at admission) or computes it again (counted in :meth:`insert`). So with
        threshold 2 the second request caching a prefix triggers its host backup.
        """
        if self._tentative is not None:
            self._commit()
        host = self.host
        if host is None or host.write_policy != "write_through_selective":
            return  # NOTE: hit counts only drive selective write-through
        threshold = host.write_through_threshold
        while node is not self.root:
            node.hit_count += 1
            if not node.on_host and node.hit_count >= threshold:
                backup(self, node)
            parent = node.parent
            assert parent is not None  # NOTE: only the root has no parent
            node = parent

    def _insert_hit(self, node: Node) -> None:
        """The inserting request caches ``node``'s prefix: count its hit (selective)."""
        host = self.host
        if host is not None and host.write_policy == "write_through_selective":
            node.hit_count += 1
            if not node.on_host and node.hit_count >= host.write_through_threshold:
                backup(self, node)

    # ------------------------------------------------------------------ structure
    def _split(self, node: Node, units: int) -> Node:
        """Split ``node`` so that a new parent ends at unit ``units``; return the parent."""
        j = units - node.start
        u = self.unit_pages
        if self.changed_nodes is not None:
            self.changed_nodes.append(node)
        p_pages = j * u
        p_lanes = lane_split(node.start * u, p_pages, self.cp_size)
        p = Node(
            node.keys[:j],
            node.start,
            node.parent,
            p_pages,
            p_lanes,
            [t[:n] for t, n in zip(node.pages, p_lanes, strict=True)]
            if node.on_device
            else self._no_pages,
        )
        # NOTE: a node's page arrays are never mutated in place (a split, a merge, an
        # eviction or a load-back binds new ones), so a step's snapshot of a prefix
        # path stays exact while its request holds the lock.
        if node.on_device:
            node.pages = [t[n:] for t, n in zip(node.pages, p_lanes, strict=True)]
        if node.on_host:
            p.host_slots = node.host_slots[:p_pages]
            node.host_slots = node.host_slots[p_pages:]
        # NOTE: P's only child is NODE and no lock ends inside P (a lock ends at a node's
        # end), so P is locked exactly when NODE is; P's parent counts it in NODE's place.
        p.lock_ref = 1 if node.lock_ref else 0
        p.host_lock_ref = node.host_lock_ref
        p.on_device = node.on_device
        p.on_host = node.on_host
        p.hit_count = node.hit_count
        p.seq = node.seq  # NOTE: P takes NODE's slot among its siblings
        node.keys = node.keys[j:]
        node.start = units
        node.n_pages -= p_pages
        node.lane_pages = [a - b for a, b in zip(node.lane_pages, p.lane_pages, strict=True)]
        parent = node.parent
        assert parent is not None  # NOTE: a split node is never the root
        parent.children[p.keys[0]] = p
        p.children[node.keys[0]] = node
        node.parent = p
        index = self.index
        for key in p.keys:
            index[key] = p
        # NOTE: P goes after its child in any LRU, keeping children-before-parents.
        if node in self.lru:
            self.lru[p] = None
        if self.host is not None and node in self.host.lru:
            self.host.lru[p] = None
        return p

    def insert(
        self,
        locked: Node,
        keys: list[int],
        from_units: int,
        to_units: int,
        pages: list[array[int]] | None = None,
        base: list[int] | None = None,
    ) -> Node:
        """Cache units ``[from_units, to_units)`` of ``keys`` computed by a request.

        The request holds a lock on ``locked`` (ending at ``from_units``) and owns the
        pages of those units: ``pages`` is its owned lane table starting at that unit;
        this call hands the head covering the inserted units to the cache (or frees it)
        and never mutates ``pages``: the caller drops that head (``lane_split`` of the
        inserted pages per lane). ``base``: per lane, where in ``pages`` the unit's pages
        start (0 by default). None takes them from the pool's loose pages. Pages of
        units that are already device-resident are freed (duplicates); host-only nodes
        on the path are revived with the request's pages; the rest become new nodes. The
        lock moves to the new deepest node, which is returned.
        """
        if self._tentative is not None:
            self._commit()
        if locked.end != from_units:
            raise ValueError(f"insert from unit {from_units} but lock ends at {locked.end}")
        pool = self.pool
        u = self.unit_pages
        cp = self.cp_size
        if pages is None:
            pages = pool.take_loose(lane_split(from_units * u, (to_units - from_units) * u, cp))
        offs = [0] * cp if base is None else base[:]  # NOTE: next page of PAGES, per lane
        node = locked
        d = from_units
        while d < to_units:
            child = node.children.get(keys[d])
            if child is None:
                node = self._insert_new(node, keys, to_units, pages, offs)
                break
            limit = min(len(child.keys), to_units - d)
            j = 1
            ckeys = child.keys
            while j < limit and ckeys[j] == keys[d + j]:
                j += 1
            if j < len(ckeys):
                child = self._split(child, d + j)
            self._insert_existing(child, pages, offs)
            node = child
            d = child.end
        if node is not locked:
            self.lock(node, node.end)
            self._commit()  # NOTE: the lock moves; it is not a candidate's tentative lock
            self.unlock(locked)
        return node

    def _insert_new(
        self, parent: Node, keys: list[int], to_units: int, pages: list[array[int]], offs: list[int]
    ) -> Node:
        """:meth:`insert`'s new leaf under ``parent``: the rest of ``keys``, to ``to_units``."""
        d = parent.end  # NOTE: where insert's walk stands (its ``d``)
        u = self.unit_pages
        n_pages = (to_units - d) * u
        lanes = lane_split(d * u, n_pages, self.cp_size)
        new = Node(
            keys[d:to_units],
            d,
            parent,
            n_pages,
            lanes,
            [t[o : o + n] for t, o, n in zip(pages, offs, lanes, strict=True)],
        )
        self.pool.owned_to_cached(lanes)
        if self.kv_listener is not None:
            self._stored(new)
        parent.children[keys[d]] = new
        if self.new_heads is not None:
            self.new_heads.append(keys[d])
        index = self.index
        for key in new.keys:
            index[key] = new
        self._add_evictable(new)
        if self.host is not None:
            if self.host.write_policy == "write_through":
                backup(self, new)
            else:
                self._insert_hit(new)  # the creating request's hit
        return new

    def _insert_existing(self, child: Node, pages: list[array[int]], offs: list[int]) -> None:
        """:meth:`insert` computed ``child`` again: free its pages at ``offs``, or revive it."""
        lanes = child.lane_pages
        seg = [t[o : o + n] for t, o, n in zip(pages, offs, lanes, strict=True)]
        for i, n in enumerate(lanes):
            offs[i] += n
        if child.on_device:
            self.pool.give_owned(seg)  # computed twice: drop our copy
        else:
            self.pool.owned_to_cached(lanes)  # revive a host-only node
            child.pages = seg
            child.on_device = True
            if self.changed_nodes is not None:
                self.changed_nodes.append(child)
            if self.host is not None:
                self.host.lru.pop(child, None)
            self._add_evictable(child)
            if self.kv_listener is not None:
                self._stored(child)
        if self.host is not None:
            self._insert_hit(child)  # computed again: a re-insert counts a hit

    def _stored(self, node: Node) -> None:
        """Tell the listener that ``node``'s pages became device resident."""
        assert self.kv_listener is not None
        self.kv_listener(
            BlockStored(
                tuple(node.keys),
                node.start,
                "GPU",
                pages=tuple(global_ids(node.pages, node.start * self.unit_pages)),
            )
        )

    def _add_evictable(self, node: Node) -> None:
        """A node just became device resident and unlocked."""
        self.lru[node] = None
        self.evictable_pages += node.n_pages
        ev = self.evictable_lanes
        for i, n in enumerate(node.lane_pages):
            ev[i] += n

    # ------------------------------------------------------------------ eviction
    def can_make_room(self, lanes: list[int]) -> bool:
        """Whether free + evictable pages cover ``lanes`` in every owner lane."""
        free = self.pool.free
        ev = self.evictable_lanes
        return all(free[i] + ev[i] >= n for i, n in enumerate(lanes))

    def evict_for(self, lanes: list[int]) -> bool:
        """Evict LRU device nodes until every lane has ``lanes[i]`` free pages.

        With :attr:`split_evictions` the last victim is split so that only the tail
        units the shortfall needs are evicted: the head, a prefix other requests may
        share, stays cached at the victim's LRU position.
        """
        if self._tentative is not None:
            self._commit()
        free = self.pool.free
        lru = self.lru
        rng = range(len(lanes))
        while any(free[i] < lanes[i] for i in rng):
            if not lru:
                return False
            if self.split_evictions:
                node = next(iter(lru))
                k = self._tail_units_needed(node, lanes)
                if k < len(node.keys):
                    head = self._split(node, node.end - k)
                    lru.move_to_end(head, last=False)  # NOTE: after NODE is gone, a leaf
                    del lru[node]
                    evict_device(self, node)
                    continue
            node, _ = lru.popitem(last=False)
            evict_device(self, node)
        return True

    split_evictions: bool = True
    """Evict only the tail of the last victim node that the need covers (see evict_for)."""

    def _tail_units_needed(self, node: Node, lanes: list[int]) -> int:
        """Fewest tail units of ``node`` whose pages cover the free-page shortfall."""
        free = self.pool.free
        short = [max(0, n - f) for n, f in zip(lanes, free, strict=True)]
        return tail_units_needed(short, node.end * self.unit_pages, len(node.keys), self.unit_pages)

    def evict_tokens(self, num_tokens: int) -> int:
        """Evict at least ``num_tokens`` tokens of unlocked device pages; return pages freed."""
        if self._tentative is not None:
            self._commit()
        freed = 0
        need = -(-num_tokens // self.page_size)
        while freed < need and self.lru:
            node, _ = self.lru.popitem(last=False)
            freed += node.n_pages
            evict_device(self, node)
        return freed

    def make_room(self, lanes: list[int]) -> bool:
        """Evict LRU nodes until every lane has ``lanes[i]`` free pages. All or nothing:
        False (and no change) when free + evictable pages cannot cover them."""
        if self._tentative is not None:
            self._commit()
        if self.pool.has_free(lanes):
            return True
        if not self.can_make_room(lanes):
            return False
        return self.evict_for(lanes)

    def alloc_page(self, page: int, table: list[array[int]]) -> bool:
        """One request-owned page for sequence page ``page`` appended to the request's
        owned lane table ``table`` (mutated), evicting as needed; False (no change) if
        impossible."""
        lane = page % self.cp_size
        if self.pool.free[lane] <= 0:
            need = [0] * self.cp_size
            need[lane] = 1
            if not self.make_room(need):
                return False
        elif self._tentative is not None:
            self._commit()
        return self.pool.take_owned_page(lane, table[lane])

    def alloc_pages(self, start_page: int, n_pages: int) -> list[int] | None:
        """Allocate request-owned pages ``[start_page, +n_pages)`` without a page table
        (loose pages: count-level callers), evicting as needed.

        Returns the per-lane counts allocated, or None (and no change) if impossible.
        """
        lanes = lane_split(start_page, n_pages, self.cp_size)
        return lanes if self.alloc_lanes(lanes) else None

    def alloc_lanes(self, lanes: list[int]) -> bool:
        """Allocate ``lanes[i]`` request-owned pages in each owner lane, evicting LRU
        nodes as needed. All or nothing."""
        if self._tentative is not None:
            self._commit()
        if self.pool.alloc_owned(lanes):
            return True
        if not self.can_make_room(lanes):
            return False
        self.evict_for(lanes)
        self.pool.alloc_owned(lanes)
        return True

    def load_back(self, device_node: Node, host_node: Node, units: int) -> LoadBack | None:
        """Load the host-only path below ``device_node`` through unit ``units`` to device
        (cache/tiers.py :func:`~prefillkit.cache.tiers.load_back`)."""
        return load_back(self, device_node, host_node, units)

    def finish_load_back(self, lb: LoadBack) -> None:
        """The transfer completed: release the host locks taken by :meth:`load_back`."""
        finish_load_back(self, lb)
