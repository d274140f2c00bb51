# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The KV page pool: real page ids, split into CP owner lanes.

``total_pages`` pages of ``page_size`` tokens are split into ``cp_size`` owner lanes.
Page ``j`` of a sequence is owned by lane ``j mod cp_size`` and must be allocated from
that lane. Each lane numbers its pages ``0 .. capacity[i] - 1`` (lane-local ids; the
engine-facing id is ``k * cp_size + i``, :func:`prefillkit.cache.pages.global_ids`) and
keeps its free pages as a stack of ids (:class:`~prefillkit.cache.pages.IdStack`): alloc
and free are slice copies, never a scan. A page is, at any time, exactly one of

- free: in its lane's ``free_ids``;
- cached: in a device-resident prefix-cache node's ``pages``;
- owned by one request: in that request's ``owned_pages`` (its page table past the
  prefix it shares through the cache);
- *loose*: handed out by the count-level calls (:meth:`KVPool.alloc_owned`) that take no
  page table (unit tests drive the cache that way); ``PrefixCache.insert`` without pages
  takes them from here.

NOTE: per lane, ``free + cached + owned == capacity`` at all times, and ``free[i]`` is
``len(free_ids[i])``, ``owned`` counts request-owned and loose pages:
the counts are the hot path's view of the runs, moved in the same calls, and
:func:`prefillkit.cache.invariants.check_invariants` verifies them page by page.
"""

from __future__ import annotations

from array import array

from prefillkit.cache.pages import IdStack, empty_table, take


def lane_split(start_page: int, n_pages: int, cp_size: int) -> list[int]:
    """Pages per owner lane for the page range ``[start_page, start_page + n_pages)``."""
    if cp_size == 1:
        return [n_pages]
    base, rem = divmod(n_pages, cp_size)
    counts = [base] * cp_size
    first = start_page % cp_size
    for k in range(rem):
        counts[(first + k) % cp_size] += 1
    return counts


class KVPool:
    """Per-lane free page ids with the counts the admission test reads."""

    __slots__ = (
        "cached",
        "capacity",
        "cp_size",
        "free",
        "free_ids",
        "free_total",
        "loose",
        "owned",
        "page_size",
        "total_pages",
    )

    def __init__(self, total_pages: int, page_size: int, cp_size: int = 1) -> None:
        if total_pages < cp_size or page_size <= 0 or cp_size <= 0:
            raise ValueError(
                f"KV pool needs at least one page per owner lane "
                f"(total_pages={total_pages}, cp_size={cp_size}, page_size={page_size})"
            )
        self.total_pages = total_pages
        self.page_size = page_size
        self.cp_size = cp_size
        self.capacity = lane_split(0, total_pages, cp_size)
        self.free_ids = [IdStack(cap) for cap in self.capacity]
        self.free = list(self.capacity)
        self.free_total = total_pages  # NOTE: always sum(self.free)
        self.cached = [0] * cp_size
        self.owned = [0] * cp_size
        self.loose = empty_table(cp_size)

    # ---- totals ----
    @property
    def free_pages(self) -> int:
        return self.free_total

    @property
    def available_size(self) -> int:
        """Free tokens (upstream ``allocator.available_size()``)."""
        return self.free_total * self.page_size

    def has_free(self, lanes: list[int]) -> bool:
        free = self.free
        if len(lanes) == 1:
            return free[0] >= lanes[0]
        return all(free[i] >= n for i, n in enumerate(lanes))

    # ---- page-level transitions (each keeps the per-lane identity) ----
    def _take(self, lanes: list[int]) -> list[array[int]]:
        """``lanes[i]`` free pages of each lane as a lane table (the caller checked)."""
        free = self.free
        stacks = self.free_ids
        out: list[array[int]] = []
        for i, n in enumerate(lanes):
            out.append(stacks[i].take(n))
            free[i] -= n
        self.free_total -= sum(lanes)
        return out

    def _give(self, table: list[array[int]]) -> None:
        """Return a lane table's pages to the free ids."""
        free = self.free
        stacks = self.free_ids
        total = 0
        for i, t in enumerate(table):
            n = len(t)
            if n:
                st = stacks[i]  # NOTE: IdStack.give, inlined (the eviction hot path)
                top = st.top
                end = top + n
                ids = st.ids
                if end <= len(ids):
                    ids[top:end] = t
                else:
                    del ids[top:]
                    ids.extend(t)
                st.top = end
                free[i] += n
                total += n
        self.free_total += total

    def take_owned(self, lanes: list[int]) -> list[array[int]] | None:
        """free -> request-owned: ``lanes[i]`` pages per lane. All or nothing (None)."""
        if not self.has_free(lanes):
            return None
        owned = self.owned
        for i, n in enumerate(lanes):
            owned[i] += n
        return self._take(lanes)

    def take_owned_page(self, lane: int, ids: array[int]) -> bool:
        """free -> request-owned: one page of ``lane`` appended to ``ids`` (that lane's
        part of the request's page table, mutated). False when the lane is full."""
        if self.free[lane] <= 0:
            return False
        ids.append(self.free_ids[lane].pop())
        self.free[lane] -= 1
        self.free_total -= 1
        self.owned[lane] += 1
        return True

    def give_owned(self, table: list[array[int]]) -> None:
        """request-owned -> free."""
        owned = self.owned
        for i, t in enumerate(table):
            owned[i] -= len(t)
        self._give(table)

    def owned_to_cached(self, counts: list[int]) -> None:
        """request-owned -> cached: the pages moved into a cache node (counts only)."""
        for i, n in enumerate(counts):
            self.owned[i] -= n
            self.cached[i] += n

    def take_cached(self, lanes: list[int]) -> list[array[int]] | None:
        """free -> cached (load-back from host). All or nothing (None)."""
        if not self.has_free(lanes):
            return None
        cached = self.cached
        for i, n in enumerate(lanes):
            cached[i] += n
        return self._take(lanes)

    def give_cached(self, table: list[array[int]], counts: list[int]) -> None:
        """cached -> free (device eviction); ``counts``: pages per lane of ``table``."""
        cached = self.cached
        for i, n in enumerate(counts):
            cached[i] -= n
        self._give(table)

    # ---- count-level transitions (no page table; see the module docstring) ----
    def alloc_owned(self, lanes: list[int]) -> bool:
        """free -> loose (request-owned without a page table). All or nothing."""
        table = self.take_owned(lanes)
        if table is None:
            return False
        for lo, t in zip(self.loose, table, strict=True):
            lo.extend(t)
        return True

    def take_loose(self, lanes: list[int]) -> list[array[int]]:
        """``lanes[i]`` loose pages of each lane as a lane table (they stay owned)."""
        out: list[array[int]] = []
        for i, n in enumerate(lanes):
            lo = self.loose[i]
            if len(lo) < n:
                raise ValueError(f"lane {i}: {n} loose pages needed, {len(lo)} held")
            out.append(take(lo, n))
        return out

    def release_owned(self, lanes: list[int]) -> None:
        """loose -> free."""
        self.give_owned(self.take_loose(lanes))
