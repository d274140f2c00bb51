"""The KV page pool, split into CP owner lanes.

``total_pages`` pages of ``page_size`` tokens are split into ``cp_size`` owner lanes.
Page ``j`` of a sequence is owned by lane ``j mod cp_size`` and must be allocated from
that lane. The simulator only needs counts, so the pool tracks, per lane, how many
pages are free, cached (owned by the prefix cache) and owned by requests.

NOTE: per lane, ``free + cached + owned == capacity`` at all times.
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
    """Per-lane page accounting: free, cached (prefix cache) and request-owned pages."""

    __slots__ = (
        "cached",
        "capacity",
        "cp_size",
        "free",
        "free_total",
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
        self.free = list(self.capacity)
        self.free_total = total_pages  # NOTE: always sum(self.free)
        self.cached = [0] * cp_size
        self.owned = [0] * cp_size

    # ---- totals ----
    @property
    def free_pages(self) -> int:
        return self.free_total

    @property
    def available_size(self) -> int:
        """Free tokens (upstream ``allocator.available_size()``)."""
        return self.free_total * self.page_size

    @property
    def max_lane_pages(self) -> int:
        """Pages the smallest lane can hold: bounds the longest sequence."""
        return min(self.capacity)

    def max_sequence_pages(self) -> int:
        """Longest sequence (in pages) the pool could ever hold."""
        return min(self.capacity) * self.cp_size

    # ---- transitions (each keeps the per-lane identity) ----
    def has_free(self, lanes: list[int]) -> bool:
        free = self.free
        if len(lanes) == 1:
            return free[0] >= lanes[0]
        return all(free[i] >= n for i, n in enumerate(lanes))

    def alloc_owned(self, lanes: list[int]) -> bool:
        """free -> request-owned. All or nothing."""
        if not self.has_free(lanes):
            return False
        for i, n in enumerate(lanes):
            self.free[i] -= n
            self.owned[i] += n
        self.free_total -= sum(lanes)
        return True

    def release_owned(self, lanes: list[int]) -> None:
        """request-owned -> free."""
        for i, n in enumerate(lanes):
            self.owned[i] -= n
            self.free[i] += n
        self.free_total += sum(lanes)

    def owned_to_cached(self, lanes: list[int]) -> None:
        for i, n in enumerate(lanes):
            self.owned[i] -= n
            self.cached[i] += n

    def alloc_cached(self, lanes: list[int]) -> bool:
        """free -> cached (load-back from host). All or nothing."""
        if not self.has_free(lanes):
            return False
        for i, n in enumerate(lanes):
            self.free[i] -= n
            self.cached[i] += n
        self.free_total -= sum(lanes)
        return True

    def release_cached(self, lanes: list[int]) -> None:
        """cached -> free (device eviction)."""
        for i, n in enumerate(lanes):
            self.cached[i] -= n
            self.free[i] += n
        self.free_total += sum(lanes)
