"""The KV page pool: real page ids, split into CP owner lanes.

``total_pages`` pages of ``page_size`` tokens; page id ``p`` belongs to owner lane
``p mod cp_size`` (so lane ``i`` holds ``lane_split(0, total_pages, cp_size)[i]`` ids).
Page ``j`` of a sequence is owned by lane ``j mod cp_size`` and must be allocated from
that lane: :meth:`KVPool.alloc_range` returns ids whose lane matches their position.

Each lane keeps a free list (a Python list used as a stack: alloc and free are
O(pages moved), slices, never a scan) in front of a bump pointer over the ids it never
handed out (``fresh[i]`` of them left: ids ``i + R * (capacity[i] - fresh[i])`` on), so
a pool of 10^12 tokens costs nothing to create. A page is, at any time, exactly one of:

- free: in its lane's free list or not yet handed out (beyond the bump pointer);
- cached: held by a device-resident prefix-cache node (``Node.pages``);
- owned by one request: in that request's page table (``Request.page_table``);
- held *loose*: handed out by the count-level calls (:meth:`alloc_owned`) that take no
  page table (unit tests of the cache drive it that way); ``insert`` without page ids
  takes them from here.

Counts are derived: ``free[i]`` is the length of the lane's free list plus its fresh
ids, and ``owned`` is
``capacity - free - cached``; ``cached`` is a per-lane tally moved on the cache's
transitions, which :func:`prefillkit.cache.invariants.check_invariants` compares with the
pages the tree's nodes hold (and every page id is checked to be in exactly one place).
"""

from __future__ import annotations


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
    """Per-lane free lists of page ids; request-owned and cached pages live in the page
    tables and the cache's nodes."""

    __slots__ = (
        "cached",
        "capacity",
        "cp_size",
        "free_lists",
        "fresh",
        "loose",
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
        self.free_lists: list[list[int]] = [[] for _ in range(cp_size)]
        self.fresh = list(self.capacity)  # ids never handed out, per lane
        self.cached = [0] * cp_size  # pages held by device-resident cache nodes
        self.loose: list[list[int]] = [[] for _ in range(cp_size)]

    # ---- derived counts ----
    @property
    def free(self) -> list[int]:
        """Free pages per lane (free lists + ids never handed out)."""
        return [len(fl) + f for fl, f in zip(self.free_lists, self.fresh, strict=True)]

    def free_in(self, lane: int) -> int:
        return len(self.free_lists[lane]) + self.fresh[lane]

    @property
    def free_total(self) -> int:
        fls = self.free_lists
        if len(fls) == 1:
            return len(fls[0]) + self.fresh[0]
        return sum(len(fl) for fl in fls) + sum(self.fresh)

    @property
    def free_pages(self) -> int:
        return self.free_total

    @property
    def owned(self) -> list[int]:
        """Request-owned (or loose) pages per lane: neither free nor cached."""
        return [c - f - k for c, f, k in zip(self.capacity, self.free, self.cached, strict=True)]

    @property
    def available_size(self) -> int:
        """Free tokens (upstream ``allocator.available_size()``)."""
        return self.free_total * self.page_size

    def lane_of(self, page_id: int) -> int:
        return page_id % self.cp_size

    # ---- page ids ----
    def has_free(self, lanes: list[int]) -> bool:
        fls = self.free_lists
        fresh = self.fresh
        if len(lanes) == 1:
            return len(fls[0]) + fresh[0] >= lanes[0]
        return all(len(fls[i]) + fresh[i] >= n for i, n in enumerate(lanes))

    def _take(self, lane: int, n: int) -> list[int]:
        """``n`` free ids of ``lane`` (the caller checked they exist): the free list's
        top first, then fresh ids."""
        fl = self.free_lists[lane]
        k = len(fl) - n
        if k >= 0:
            ids = fl[k:]
            del fl[k:]
            return ids
        ids = fl[:]
        fl.clear()
        r = self.cp_size
        left = self.fresh[lane]
        first = lane + r * (self.capacity[lane] - left)
        more = -k
        self.fresh[lane] = left - more
        ids.extend(range(first, first + r * more, r))
        return ids

    def alloc_range(self, start_page: int, n_pages: int) -> list[int] | None:
        """Page ids for sequence pages ``[start_page, +n_pages)``, page ``j`` from lane
        ``j mod cp_size``, in order. All or nothing (None: a lane is short)."""
        r = self.cp_size
        if r == 1:
            if len(self.free_lists[0]) + self.fresh[0] < n_pages:
                return None
            return self._take(0, n_pages)
        lanes = lane_split(start_page, n_pages, r)
        if not self.has_free(lanes):
            return None
        out = [0] * n_pages
        for off in range(min(r, n_pages)):
            lane = (start_page + off) % r
            out[off::r] = self._take(lane, lanes[lane])
        return out

    def free_ids(self, ids: list[int]) -> None:
        """Return page ids to their lanes' free lists."""
        fls = self.free_lists
        r = self.cp_size
        if r == 1:
            fls[0].extend(ids)
            return
        if len(ids) <= r:
            for pid in ids:
                fls[pid % r].append(pid)
            return
        # NOTE: a sequence range: every r-th id is on the same lane.
        for off in range(r):
            sub = ids[off::r]
            if sub:
                fls[sub[0] % r].extend(sub)

    # ---- count-level transitions (no page table; see the module docstring) ----
    def alloc_owned(self, lanes: list[int]) -> bool:
        """free -> loose (request-owned without a page table). All or nothing."""
        if not self.has_free(lanes):
            return False
        for i, n in enumerate(lanes):
            if n:
                self.loose[i].extend(self._take(i, n))
        return True

    def release_owned(self, lanes: list[int]) -> None:
        """loose -> free."""
        fls = self.free_lists
        for i, n in enumerate(lanes):
            if n:
                lo = self.loose[i]
                if len(lo) < n:
                    raise ValueError(f"lane {i}: releasing {n} loose pages, {len(lo)} held")
                fls[i].extend(lo[len(lo) - n :])
                del lo[len(lo) - n :]

    def take_loose(self, start_page: int, n_pages: int) -> list[int]:
        """Loose page ids for sequence pages ``[start_page, +n_pages)`` (lane-correct)."""
        r = self.cp_size
        lanes = lane_split(start_page, n_pages, r)
        out = [0] * n_pages
        for off in range(min(r, n_pages)):
            lane = (start_page + off) % r
            lo = self.loose[lane]
            n = lanes[lane]
            if len(lo) < n:
                raise ValueError(f"lane {lane}: {n} loose pages needed, {len(lo)} held")
            out[off::r] = lo[len(lo) - n :]
            del lo[len(lo) - n :]
        return out
