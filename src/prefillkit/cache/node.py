# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""A radix-tree node: a maximal run of key units with one residency state."""

from __future__ import annotations

from array import array
from itertools import count

# Creation order of nodes (process wide). NOTE: a node's ``seq`` orders it among its
# siblings exactly as its parent's ``children`` dict does: a new child is appended with
# a fresh (larger) seq, and a split parent takes over its child's slot and seq.
_SEQ = count()


class Node:
    """A run of ``len(keys)`` key units starting at unit ``start`` of every path through it.

    NOTE: residency is per node: all of a node's pages are on device or none are; its
    page ids (``pages``, ``host_slots``) are held exactly while it is resident there.
    NOTE: ``lock_ref`` = own locks (locked prefixes ending here) + children with
    ``lock_ref > 0``; so ``lock_ref > 0`` exactly when some lock ends in the subtree.
    """

    __slots__ = (
        "children",
        "end",
        "hit_count",
        "host_lock_ref",
        "host_slots",
        "keys",
        "lane_pages",
        "lock_ref",
        "n_pages",
        "on_device",
        "on_host",
        "pages",
        "parent",
        "seq",
        "start",
    )

    def __init__(
        self,
        keys: list[int],
        start: int,
        parent: Node | None,
        n_pages: int,
        lane_pages: list[int],
        pages: list[array[int]],
    ) -> None:
        self.keys = keys
        self.start = start
        # NOTE: end == start + len(keys) always; a split moves start and trims keys
        # together, so a node's end never changes.
        self.end = start + len(keys)
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.n_pages = n_pages
        self.lane_pages = lane_pages
        # Device page ids, a lane table (cache/pages.py) of the node's page range:
        # NOTE: lane i holds exactly lane_pages[i] pages while on_device, none otherwise.
        self.pages = pages
        # Host slot ids of the node's pages in sequence order.
        # NOTE: exactly n_pages slots while on_host, none otherwise.
        self.host_slots = array("q")
        self.lock_ref = 0
        self.host_lock_ref = 0
        self.on_device = True
        self.on_host = False
        self.hit_count = 0
        self.seq = next(_SEQ)

    def __repr__(self) -> str:
        where = ("D" if self.on_device else "") + ("H" if self.on_host else "")
        return f"Node([{self.start},{self.end}) {where} lock={self.lock_ref})"
