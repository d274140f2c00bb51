"""Host tier (L2, "HiCache"): host slots (free list), write policy and the host LRU.

The tree operations live in :class:`prefillkit.cache.prefix.PrefixCache`; this object
only holds the host-side state it reads and updates.

NOTE: ``lru`` holds exactly the *host-only* nodes (on host, not on device) whose
``host_lock_ref`` is 0, least recently demoted first. Children are demoted (device
evicted) before their parents, so the front is always a leaf of the whole tree.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefillkit.cache.node import Node

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


class HostTier:
    __slots__ = (
        "backed_up_pages",
        "capacity_pages",
        "evicted_pages",
        "free_slots",
        "fresh_slots",
        "lru",
        "write_policy",
        "write_through_threshold",
    )

    def __init__(
        self,
        capacity_pages: int,
        write_policy: str = "write_through",
        write_through_threshold: int = 2,
    ) -> None:
        if capacity_pages < 0:
            raise ValueError(f"host cache capacity must be >= 0 pages, got {capacity_pages}")
        if write_policy not in WRITE_POLICIES:
            raise ValueError(
                f"unknown hicache write policy {write_policy!r}; one of {', '.join(WRITE_POLICIES)}"
            )
        self.capacity_pages = capacity_pages
        self.write_policy = write_policy
        self.write_through_threshold = write_through_threshold
        # Host slot ids (one per page); a host-resident node holds its slots. Slots
        # ``[capacity_pages - fresh_slots, capacity_pages)`` were never handed out.
        self.free_slots: list[int] = []
        self.fresh_slots = capacity_pages
        self.lru: OrderedDict[Node, None] = OrderedDict()
        self.backed_up_pages = 0  # cumulative pages written device -> host
        self.evicted_pages = 0  # cumulative pages dropped from host

    @property
    def free_pages(self) -> int:
        return len(self.free_slots) + self.fresh_slots

    @property
    def used_pages(self) -> int:
        """Host slots held by nodes (derived from the free slot list)."""
        return self.capacity_pages - len(self.free_slots) - self.fresh_slots

    def alloc_slots(self, n: int) -> list[int]:
        fs = self.free_slots
        k = len(fs) - n
        if k >= 0:
            out = fs[k:]
            del fs[k:]
            return out
        if -k > self.fresh_slots:
            raise ValueError(f"{n} host slots needed, {self.free_pages} free")
        out = fs[:]
        fs.clear()
        first = self.capacity_pages - self.fresh_slots
        self.fresh_slots += k
        out.extend(range(first, first - k))
        return out
