# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Page ids as compact arrays: the representation of pages held by the pool, the cache's
nodes and the requests.

A *page array* is an ``array('q')`` of lane-local page ids of one owner lane, in order.
Arrays hold raw 64-bit ints (no Python object per id, nothing for the garbage collector
to scan), and every bulk operation here — take N ids off a free stack, give them back,
split a node's ids, append a chunk's ids to a page table — is one C-level slice copy,
~1 ns per id. Per-id Python lists cost +45 % on the Mooncake replay and 6.7x on the
page-1 admission pass (benchmarks/RESULTS.md); coalescing runs of ids fragment at page
1 (decode interleaves requests page by page, LRU eviction frees scattered nodes) until a
run list is as long as the id list and ~100x slower per id.

A *lane table* is one page array per owner lane (``list[array]``, length ``cp_size``):
the pages of a sequence range where sequence page ``j`` lives on lane ``j mod cp_size``
(the page-aligned CP split), each lane's ids in sequence order. The engine-facing page
id of lane-local id ``k`` on lane ``i`` is ``k * cp_size + i`` (:func:`global_ids`), so
ids of different lanes never collide.

NOTE: every function here is pure except where its docstring says it mutates.
"""

from __future__ import annotations

from array import array

__all__ = [
    "IdStack",
    "empty_table",
    "global_ids",
    "pending_table",
    "take",
]

_TYPECODE = "q"


def empty_table(cp_size: int) -> list[array[int]]:
    """A lane table holding no pages."""
    return [array(_TYPECODE) for _ in range(cp_size)]


#: Ids an :class:`IdStack` materialises at construction (8 bytes each); the rest of a
#: larger id space is materialised on demand, at least this many at a time.
EAGER_IDS: int = 1 << 20


class IdStack:
    """The free ids of one id space ``[0, size)`` (a lane's pages, the host slots): a
    stack of ids given back on top of ids never handed out (materialised lazily, so an
    id space of 10^12 costs nothing until used). Taking ``n`` ids is one slice copy.

    NOTE: the free ids are ``ids[:top]`` (top of the stack last) and ``[fresh, size)``,
    never materialised; ``ids`` beyond ``top`` is spare room, so taking and giving back
    never resize the array (a shrinking ``del`` reallocates a large array each time).
    """

    __slots__ = ("fresh", "ids", "size", "top")

    def __init__(self, size: int) -> None:
        self.size = size
        self.fresh = 0
        self.top = 0
        self.ids = array(_TYPECODE)
        self._grow(min(size, EAGER_IDS))

    def __len__(self) -> int:
        return self.top + self.size - self.fresh

    def _grow(self, n: int) -> None:
        """Materialise the next ``max(n, EAGER_IDS)`` never-used ids (capped at size)
        below the stack's current contents, lowest on top."""
        stop = min(self.size, self.fresh + max(n, EAGER_IDS))
        if stop > self.fresh:
            fresh = array(_TYPECODE, range(stop - 1, self.fresh - 1, -1))
            fresh.extend(self.ids[: self.top])  # NOTE: given-back ids stay on top
            self.ids = fresh
            self.top = len(fresh)
            self.fresh = stop

    def take(self, n: int) -> array[int]:
        """Take ``n`` free ids (the caller checked ``len(self) >= n``)."""
        if self.top < n:
            self._grow(n - self.top)
        top = self.top
        self.top = top - n
        return self.ids[top - n : top]

    def pop(self) -> int:
        """Take one free id (the caller checked there is one)."""
        if not self.top:
            self._grow(1)
        self.top -= 1
        return self.ids[self.top]

    def give(self, ids: array[int]) -> None:
        """Mark ``ids`` free (the caller guarantees they were not)."""
        top = self.top
        end = top + len(ids)
        if end <= len(self.ids):
            self.ids[top:end] = ids
        else:
            del self.ids[top:]
            self.ids.extend(ids)
        self.top = end


#: Pages allocated by one step for one request, not yet in its page table: per owner
#: lane, ``blocks[i][offs[i] : offs[i] + counts[i]]`` (the blocks are the batch's, shared).
Pending = tuple[list["array[int]"], list[int], list[int]]


def pending_table(pending: Pending) -> list[array[int]]:
    """The lane table of a :data:`Pending` run (new arrays)."""
    blocks, offs, counts = pending
    return [b[o : o + n] for b, o, n in zip(blocks, offs, counts, strict=True)]


def take(stack: array[int], n: int) -> array[int]:
    """Pop the top ``n`` ids off ``stack`` (mutated; the caller checked it holds them)."""
    k = len(stack) - n
    out = stack[k:]
    del stack[k:]
    return out


def global_ids(lanes: list[array[int]], start_page: int) -> list[int]:
    """Engine-facing page ids of a lane table covering sequence pages from ``start_page``,
    in sequence order: lane-local id ``k`` of lane ``i`` is ``k * R + i`` (O(pages))."""
    r = len(lanes)
    if r == 1:
        return lanes[0].tolist()
    n = sum(len(a) for a in lanes)
    out = [0] * n
    for off in range(min(r, n)):
        lane = (start_page + off) % r
        out[off::r] = [k * r + lane for k in lanes[lane]]
    return out
