# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""What the prefix cache's lookups return: a match (:class:`MatchResult`), a host ->
device load (:class:`LoadBack`), and the tail of a node an eviction needs
(:func:`tail_units_needed`)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from prefillkit.cache.node import Node
from prefillkit.cache.pages import global_ids


@dataclass(slots=True, init=False)
class MatchResult:
    """Longest cached prefix of a key chain.

    ``node`` is the node holding the last matched unit (root when nothing matched);
    ``device_node`` is the deepest fully device-resident node on the path.
    """

    node: Node
    units: int
    device_node: Node
    device_units: int

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(self, node: Node, units: int, device_node: Node, device_units: int) -> None:
        self.node = node
        self.units = units
        self.device_node = device_node
        self.device_units = device_units

    @property
    def host_units(self) -> int:
        return self.units - self.device_units


@dataclass(slots=True, init=False)
class LoadBack:
    """A completed host -> device load of the path ``(boundary, deepest]``.

    The loaded nodes stay host-locked until ``finish_load_back``. Splits of loaded nodes
    keep both halves between ``boundary`` and ``deepest``, so the walk stays exact.
    ``copies``: per loaded node, in sequence order, ``(start_page, host slots, device
    lane table)`` (page arrays, cache/pages.py; copies, not the nodes' own): host slot
    ``k`` of a node goes to its ``k``-th page, sequence page ``start_page + k``.
    """

    deepest: Node
    boundary: Node
    pages: int
    tokens: int
    copies: tuple[tuple[int, array[int], list[array[int]]], ...] = ()

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        deepest: Node,
        boundary: Node,
        pages: int,
        tokens: int,
        copies: tuple[tuple[int, array[int], list[array[int]]], ...] = (),
    ) -> None:
        self.deepest = deepest
        self.boundary = boundary
        self.pages = pages
        self.tokens = tokens
        self.copies = copies

    def copy_pairs(self) -> list[tuple[int, int]]:
        """``(host slot, engine-facing device page id)`` per loaded page, in order."""
        out: list[tuple[int, int]] = []
        for start, slots, table in self.copies:
            out.extend(zip(slots.tolist(), global_ids(table, start), strict=True))
        return out


def tail_units_needed(short: list[int], end_page: int, n_units: int, unit_pages: int) -> int:
    """Fewest units at the end of a node (``n_units`` units of ``unit_pages`` pages,
    ending at page ``end_page``) whose pages cover ``short[j]`` pages of each owner lane
    ``j``; ``n_units`` when even the whole node does not.

    NOTE: page p is in lane p mod cp, so a tail of T pages ending at ``end_page`` holds
    lane j's pages at distances d_j, d_j + cp, ... from its last page
    (d_j = (end_page - 1 - j) mod cp): it covers a shortfall s > 0 iff
    T >= d_j + (s - 1) cp + 1; and at least ``sum(short)`` pages are needed in all.
    """
    cp = len(short)
    k = min(n_units, max(1, -(-sum(short) // unit_pages)))
    if cp == 1:
        return k
    pages = 0
    for j, s in enumerate(short):
        if s:
            t = (end_page - 1 - j) % cp + (s - 1) * cp + 1
            if t > pages:
                pages = t
    return min(n_units, max(k, -(-pages // unit_pages)))
