# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Host tier (L2, "HiCache"): capacity, host slot ids, write policy and the host LRU.

The tree operations live in :class:`prefillkit.cache.prefix.PrefixCache`; this object
only holds the host-side state it reads and updates.

NOTE: ``lru`` holds exactly the *host-only* nodes (on host, not on device) whose
``host_lock_ref`` is 0, least recently demoted first. Children are demoted (device
evicted) before their parents, so the front is always a leaf of the whole tree.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import TYPE_CHECKING

from prefillkit.cache.pages import IdStack

if TYPE_CHECKING:
    from prefillkit.cache.node import Node

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


class HostTier:
    __slots__ = (
        "backed_up_pages",
        "capacity_pages",
        "evicted_pages",
        "free_slots",
        "lru",
        "used_pages",
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
        self.used_pages = 0  # NOTE: capacity_pages - len(free_slots)
        # Host slot ids (cache/pages.py); a host-resident node holds its slots.
        self.free_slots = IdStack(capacity_pages)
        self.lru: OrderedDict[Node, None] = OrderedDict()
        self.backed_up_pages = 0  # cumulative pages written device -> host
        self.evicted_pages = 0  # cumulative pages dropped from host

    @property
    def free_pages(self) -> int:
        return self.capacity_pages - self.used_pages

    def take_slots(self, n: int) -> array[int]:
        """``n`` free host slots (the caller made room). Mutates the free slots."""
        self.used_pages += n
        return self.free_slots.take(n)

    def give_slots(self, slots: array[int]) -> None:
        """Return host slots to the free slots."""
        self.used_pages -= len(slots)
        self.free_slots.give(slots)
