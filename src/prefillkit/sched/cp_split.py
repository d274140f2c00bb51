# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The page-aligned CP split of a prefill forward: which rank computes which query rows.

With context-parallel degree ``R`` the KV pool has ``R`` owner lanes and page ``j`` of a
sequence lives on lane ``j mod R`` (docs/design.md §1). The shared-KV prefill path computes
the query rows of a page on the rank that owns the page, so a rank's share of a forward
is the rows of the extend pages it owns. A batch of short extends (one to three pages
each) therefore does not spread evenly over the ranks: requests whose extends start on
the same lane pile onto the same ranks, and the forward waits for the busiest one.

This module is the one place that rule lives. The temporary-buffer estimator
(:mod:`prefillkit.sched.buffer`, query rows of the busiest rank) and the simulator's
forward-time model (per-rank attention, indexer and GEMM rows) both call
:func:`add_lane_rows`; the cost model also asks for the keys each rank's rows attend.

Positions are 0-based token indices of the sequence; the query at position ``x``
attends ``x + 1`` keys causally (itself included). Everything is closed-form integer
arithmetic, ``O(R)`` per request, no per-page loop.
"""

from __future__ import annotations

__all__ = ["add_lane_rows", "add_lane_span"]


def add_lane_rows(lane_rows: list[int], prefix: int, extend: int, page: int) -> None:
    """Add the rows of positions ``[prefix, prefix + extend)`` to the lane owning each page.

    ``len(lane_rows)`` is the CP degree ``R``; page ``j`` is on lane ``j mod R``; the
    first and last pages may be partial. Mutates ``lane_rows`` only.
    """
    if extend > 0:
        add_lane_span(lane_rows, None, prefix, prefix + extend, page)


def add_lane_span(
    lane_rows: list[int], lane_keys: list[int] | None, start: int, end: int, page: int
) -> None:
    """Per lane, add the number of rows in positions ``[start, end)`` to ``lane_rows`` and,
    when ``lane_keys`` is given, the causal keys they attend, ``sum(x + 1)``.

    Mutates ``lane_rows`` (and ``lane_keys``) only. ``start >= end`` adds nothing.
    """
    if end <= start:
        return
    r = len(lane_rows)
    first = start // page
    last = (end - 1) // page
    npages = last - first + 1
    base, rem = divmod(npages, r)
    page_sq = page * page
    page_tri = page * (page + 1) // 2
    for k in range(min(r, npages)):
        lane = (first + k) % r
        n = base + (k < rem)  # pages first+k, first+k+R, ... owned by this lane
        lane_rows[lane] += n * page
        if lane_keys is not None:
            # sum over owned pages j of sum_{t < page} (j*page + t + 1)
            sum_j = n * (first + k) + r * n * (n - 1) // 2
            lane_keys[lane] += page_sq * sum_j + n * page_tri
    head = start - first * page  # positions first*page .. start-1 are not in the span
    if head:
        lane = first % r
        lane_rows[lane] -= head
        if lane_keys is not None:
            lane_keys[lane] -= head * (first * page + 1) + head * (head - 1) // 2
    tail = (last + 1) * page - end  # positions end .. (last+1)*page-1 are not either
    if tail:
        lane = last % r
        lane_rows[lane] -= tail
        if lane_keys is not None:
            lane_keys[lane] -= tail * (end + 1) + tail * (tail - 1) // 2
