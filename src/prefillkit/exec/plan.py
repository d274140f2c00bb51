"""The typed input of one prefill step: what the scheduler decided, nothing more.

Torch-free. Each field maps 1:1 onto the scheduler's future step result (issue 15): per request
its id, the token ids of the extend range, the prefix length, the page ids holding the prefix and
the new page ids to write (both per owner lane), and whether it is a chunk; plus the host-tier
copies of the step.

Page layout (the page-aligned CP split): page ``j`` of a sequence (tokens ``j*P .. j*P+P-1``)
lives on owner lane ``j % R``. ``prefix_pages[l]`` lists, in sequence order, the ids of the prefix
pages on lane ``l``; ``new_pages[l]`` the ids of the pages the extend range writes on lane ``l``
(the page that holds the first extend token onward). Page ids are per lane (each lane has its own
id space), and so are host slots (a lane's host slots are in its rank's host memory).

A prefix is page-aligned (the scheduler never shares a partial page and cuts chunks at page
multiples); the extend range may end inside a page (a sub-page tail).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

RequestId = Hashable


@dataclass(frozen=True)
class HostCopy:
    """One page copy between a lane's host slot and a device page of the same lane."""

    lane: int
    host_slot: int
    page: int


@dataclass(frozen=True)
class ReqPlan:
    """One request's part of a prefill step."""

    rid: RequestId
    token_ids: tuple[int, ...]
    prefix_len: int
    prefix_pages: tuple[tuple[int, ...], ...]
    new_pages: tuple[tuple[int, ...], ...]
    is_chunk: bool = False

    @property
    def extend_len(self) -> int:
        return len(self.token_ids)

    @property
    def seq_len(self) -> int:
        return self.prefix_len + len(self.token_ids)

    def page_table(self, page_size: int, cp_size: int) -> tuple[int, ...]:
        """Page id of each sequence page j (on lane j % cp_size); checks the plan's shape."""
        if self.prefix_len < 0 or self.prefix_len % page_size:
            raise ValueError(f"request {self.rid!r}: prefix_len {self.prefix_len} not page-aligned")
        if not self.token_ids:
            raise ValueError(f"request {self.rid!r}: empty extend range")
        if len(self.prefix_pages) != cp_size or len(self.new_pages) != cp_size:
            raise ValueError(f"request {self.rid!r}: page lists must have one entry per lane")
        n_prefix = self.prefix_len // page_size
        n_total = -(-self.seq_len // page_size)
        table: list[int] = []
        taken_prefix = [0] * cp_size
        taken_new = [0] * cp_size
        for j in range(n_total):
            lane = j % cp_size
            pages, taken = (
                (self.prefix_pages, taken_prefix) if j < n_prefix else (self.new_pages, taken_new)
            )
            if taken[lane] >= len(pages[lane]):
                kind = "prefix" if j < n_prefix else "new"
                raise ValueError(
                    f"request {self.rid!r}: lane {lane} lacks {kind} page for page {j}"
                )
            table.append(pages[lane][taken[lane]])
            taken[lane] += 1
        for lane in range(cp_size):
            if taken_prefix[lane] != len(self.prefix_pages[lane]) or taken_new[lane] != len(
                self.new_pages[lane]
            ):
                raise ValueError(f"request {self.rid!r}: lane {lane} lists pages the layout lacks")
        return tuple(table)


@dataclass(frozen=True)
class StepPlan:
    """One prefill forward: its requests, in batch order, and the step's host-tier copies.

    ``backups`` (device page -> host slot, write-through / write-back) run first, then
    ``loads`` (host slot -> device page, a load-back), then the forward.
    """

    reqs: tuple[ReqPlan, ...]
    loads: tuple[HostCopy, ...] = ()
    backups: tuple[HostCopy, ...] = ()

    def check(self, page_size: int, cp_size: int) -> tuple[tuple[int, ...], ...]:
        """Every request's page table; refuses a page written twice or read while written."""
        tables = tuple(r.page_table(page_size, cp_size) for r in self.reqs)
        if len({r.rid for r in self.reqs}) != len(self.reqs):
            raise ValueError("a request appears twice in one step")
        written: set[tuple[int, int]] = set()
        read: set[tuple[int, int]] = set()
        for r in self.reqs:
            for lane in range(cp_size):
                for page in r.new_pages[lane]:
                    if (lane, page) in written:
                        raise ValueError(f"page {page} of lane {lane} written twice in one step")
                    written.add((lane, page))
                read.update((lane, page) for page in r.prefix_pages[lane])
        both = written & read
        if both:
            lane, page = min(both)
            raise ValueError(f"page {page} of lane {lane} is both a prefix page and a new page")
        for c in self.loads:
            if (c.lane, c.page) in written:
                raise ValueError(f"load-back into page {c.page} of lane {c.lane}, written here")
        return tables
