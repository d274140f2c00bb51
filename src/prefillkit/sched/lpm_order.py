# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The LPM order kept across passes: work per pass bounded by what changed.

:func:`prefillkit.sched.policy.order_lpm` confirms every waiting request's match and
sorts the whole queue on every pass: O(queue) Python work per pass (50,000 waiting:
seconds per simulated second). :class:`LpmOrder` keeps the same order as a sorted list
and rescores only the requests whose score may have changed, which the cache tells it
(``PrefixCache.changed_nodes`` and ``PrefixCache.new_heads``). The order it yields is
exactly ``order_waiting(waiting, "lpm", ...)``'s (the scheduler's ``check()`` compares
it with a from-scratch :func:`order_lpm`, and so does the fuzz).

A request's LPM key is ``(score, arrival_time, seq)`` where ``seq`` is its enqueue
number (so ``(arrival_time, seq)`` is its queue position) and ``score`` is ``-matched``
tokens, or ``1`` when in-batch prefix deprioritised (a short-match request whose head an
earlier short-match request shares; see ``order_lpm``). The score depends on:

- the matched length ``c`` units: it grows only when unit ``c``'s key becomes cached, and
  then as the first key of a new node (the node holding unit ``c - 1`` has the key
  after it fixed, and a branch grows at a node's end); it shrinks only when the node
  holding unit ``c - 1`` (the match node) leaves the tree (leaves go first, so an
  ancestor never leaves before it);
- whether the device part is at most 32 tokens (for ``matched > 32``: whether the node
  holding unit ``32 // key_tokens`` of the path, the *probe node*, is on device);
- the earlier short-match requests with the same head (kept per head, sorted by
  position: only the first of a head's group is not deprioritised).

So each member is registered at its match node and its probe node (any change: split,
merge, device eviction, revival, load-back, removal) and at the key after its match (a
new node starting with it). A registration is dropped when it fires; the request is
then rescored at the next pass. NOTE: O(log queue) per rescored request (bisect; the
list shifts are C memmoves), O(1) per cache change, nothing for untouched requests.

Aging (the wait bound) takes requests out in arrival order as they reach ``max_wait_s``
(a heap of positions); they form ``aged``, the front of the order, in queue order.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from heapq import heappop, heappush
from itertools import chain
from typing import Any

from prefillkit.cache.node import Node
from prefillkit.cache.prefix import PrefixCache
from prefillkit.request import Request
from prefillkit.sched.policy import (
    IN_BATCH_PREFIX_CHECK_THRESHOLD,
    in_batch_head_unit,
    lpm_match,
    order_lpm,
)

#: (score, arrival_time, seq): the sort key of a member.
LpmKey = tuple[int, float, int]
#: (arrival_time, seq): a request's queue position.
Pos = tuple[float, int]


class _Member:
    """One queued request's state: its position, and (not aged) its key, matched tokens,
    head (short-match members with one) and registrations (match node, probe node, the
    key after its match)."""

    __slots__ = ("head", "key", "matched", "node", "pos", "probe", "req", "want")

    def __init__(self, req: Request, pos: Pos) -> None:
        self.req = req
        self.pos = pos
        self.key: LpmKey | None = None  # NOTE: None while aged (not in the sorted list)
        self.matched = 0
        self.head: object = None
        self.node: Node | None = None
        self.probe: Node | None = None
        self.want: int | None = None


class LpmOrder:
    """The waiting queue's LPM order (fallback and priority are the caller's).

    Mutated only by :meth:`add`, :meth:`remove`, :meth:`requeue`, :meth:`reset` (the
    queue changed) and :meth:`order` (aging and the cache's changes since the last
    call)."""

    def __init__(self, cache: PrefixCache, aging: bool) -> None:
        self.cache = cache
        self.aging = aging
        kt = cache.key_tokens
        check = IN_BATCH_PREFIX_CHECK_THRESHOLD
        self._check = check
        self._probe_unit = check // kt  # NOTE: dev <= 32 tokens iff this unit is off device
        self._head_unit = in_batch_head_unit(kt)
        self.keys: list[LpmKey] = []
        self.reqs: list[Request] = []  # NOTE: reqs[i] is the member keyed keys[i]
        self.aged: dict[Request, None] = {}  # in queue order
        self._m: dict[Request, _Member] = {}  # every queued request (members and aged)
        # Per head, its short-match members in queue order (the first leads the group).
        self._groups: dict[object, list[_Member]] = {}
        self._at_node: dict[Node, dict[Request, None]] = {}
        self._at_key: dict[int, dict[Request, None]] = {}
        self._dirty: dict[Request, None] = {}
        self._heap: list[tuple[float, int, Request]] = []
        self._cutoff: float | None = None  # the latest aging cutoff (None: none yet)
        self._seq = 0
        # NOTE: the cache records changes exactly while the queue is not empty.
        cache.changed_nodes = None
        cache.new_heads = None

    # ------------------------------------------------------------------ the queue
    def add(self, req: Request) -> None:
        """``req`` joined the queue at its end (its arrival is the latest)."""
        if not self._m:
            self._forget_changes(record=True)
        self._seq += 1
        pos = (req.arrival_time, self._seq)
        m = self._m[req] = _Member(req, pos)
        if self.aging:
            heappush(self._heap, (pos[0], pos[1], req))
        self._rescore(m)

    def remove(self, req: Request) -> None:
        """``req`` left the queue (admitted or aborted)."""
        m = self._m.pop(req, None)
        if m is None:
            return
        if m.key is None:
            del self.aged[req]
        else:
            self._leave(m)
        if not self._m:  # NOTE: nothing is registered: the cache's changes concern none
            self._forget_changes(record=False)

    def requeue(self, req: Request, queue: Iterable[Request]) -> None:
        """``req`` went back to its arrival position in ``queue`` (the whole queue, in
        queue order, ``req`` included): behind every request of its arrival time, so a
        fresh ``seq`` places it. Only when it is already aged (the aged front is kept in
        queue order) is everything rebuilt."""
        if self._cutoff is not None and req.arrival_time <= self._cutoff:
            self.reset(queue)
        else:
            self.add(req)

    def reset(self, queue: Iterable[Request]) -> None:
        """Rebuild from ``queue`` (in queue order)."""
        cache = self.cache
        self.__init__(cache, self.aging)  # type: ignore[misc]
        for req in queue:
            self.add(req)

    # ------------------------------------------------------------------ the order
    def order(self, cutoff: float | None) -> Iterator[Request]:
        """The order: the requests that arrived at or before ``cutoff`` (None: no wait
        bound) in queue order, then the rest by LPM key. Valid until the queue or the
        cache next changes."""
        if cutoff is not None:
            self._age(cutoff)
        self._drain()
        if self.aged:
            return chain(self.aged, self.reqs)
        return iter(self.reqs)

    def _forget_changes(self, record: bool) -> None:
        """Drop what the cache recorded (nobody is registered), and record from now on
        (``record``) or not: the cache records nothing while the queue is empty."""
        cache = self.cache
        cache.changed_nodes = [] if record else None
        cache.new_heads = [] if record else None

    def _age(self, cutoff: float) -> None:
        if self._cutoff is None or cutoff > self._cutoff:
            self._cutoff = cutoff
        heap = self._heap
        members = self._m
        while heap and heap[0][0] <= cutoff:
            arrival, seq, req = heappop(heap)
            m = members.get(req)
            if m is not None and m.pos == (arrival, seq) and m.key is not None:
                self._leave(m)
                self.aged[req] = None

    def _drain(self) -> None:
        cache = self.cache
        dirty = self._dirty
        _fire(cache.changed_nodes, self._at_node, dirty)
        _fire(cache.new_heads, self._at_key, dirty)
        if dirty:
            members = self._m
            for req in dirty:
                m = members.get(req)
                if m is not None and m.key is not None:
                    self._rescore(m)
            dirty.clear()

    # ------------------------------------------------------------------ one member
    def _leave(self, m: _Member) -> None:
        """Take member ``m`` out of the sorted list, its head group and registrations
        (its ``key`` becomes None)."""
        self._unregister(m)
        self._dirty.pop(m.req, None)
        key = m.key
        assert key is not None
        i = bisect_left(self.keys, key)
        del self.keys[i]
        del self.reqs[i]
        m.key = None
        self._leave_group(m)

    def _rescore(self, m: _Member) -> None:
        """Recompute ``m``'s match, registrations, head group and key."""
        cache = self.cache
        req = m.req
        matched, head = lpm_match(cache, req, self._head_unit)
        c = req.state.match_hint  # NOTE: lpm_match refreshed the match
        node = req.state.match_node
        self._unregister(m)
        m.node = None if node is cache.root else node
        # The probe node decides a host hit's in-batch check (its device part).
        m.probe = (
            cache.index[req.keys[self._probe_unit]]
            if matched > self._check and node is not None and not node.on_device
            else None
        )
        m.want = req.keys[c] if c < req.state.max_match_units else None
        self._register(m)
        m.matched = matched
        if m.head != head:
            self._leave_group(m)
            if head is not None:
                self._join_group(m, head)
        pos = m.pos
        first = head is None or self._groups[head][0] is m
        self._set_key(m, (-matched if first else 1, pos[0], pos[1]))

    def _register(self, m: _Member) -> None:
        req, node, probe = m.req, m.node, m.probe
        at_node = self._at_node
        if node is not None:
            at_node.setdefault(node, {})[req] = None
        if probe is not None and probe is not node:
            at_node.setdefault(probe, {})[req] = None
        if m.want is not None:
            self._at_key.setdefault(m.want, {})[req] = None

    def _unregister(self, m: _Member) -> None:
        req = m.req
        if m.node is not None:
            _drop(self._at_node, m.node, req)
        if m.probe is not None:
            _drop(self._at_node, m.probe, req)
        if m.want is not None:
            _drop(self._at_key, m.want, req)
        m.node = m.probe = m.want = None

    def _set_key(self, m: _Member, key: LpmKey) -> None:
        keys = self.keys
        old = m.key
        if old == key:
            return
        if old is not None:
            i = bisect_left(keys, old)
            del keys[i]
            del self.reqs[i]
        j = bisect_left(keys, key)
        keys.insert(j, key)
        self.reqs.insert(j, m.req)
        m.key = key

    def _join_group(self, m: _Member, head: object) -> None:
        group = self._groups.setdefault(head, [])
        i = bisect_left(group, m.pos, key=_pos_of)
        group.insert(i, m)
        m.head = head
        if i == 0 and len(group) > 1:  # the former first is deprioritised now
            other = group[1]
            p = other.pos
            self._set_key(other, (1, p[0], p[1]))

    def _leave_group(self, m: _Member) -> None:
        head = m.head
        if head is None:
            return
        m.head = None
        group = self._groups[head]
        i = bisect_left(group, m.pos, key=_pos_of)
        del group[i]
        if not group:
            del self._groups[head]
        elif i == 0:  # the next one leads its group now
            other = group[0]
            p = other.pos
            self._set_key(other, (-other.matched, p[0], p[1]))

    # ------------------------------------------------------------------ checks
    def check(self, queue: list[Request]) -> None:
        """Raise AssertionError unless the state is that of ``queue`` (in queue order)
        and the members' order is a from-scratch :func:`order_lpm` of them."""
        aged = list(self.aged)
        if queue[: len(aged)] != aged:
            raise AssertionError("lpm order: the aged requests are not the queue's front")
        rest = queue[len(aged) :]
        members = [r for r, m in self._m.items() if m.key is not None]
        if set(rest) != set(members) or len(rest) != len(members):
            raise AssertionError("lpm order: members differ from the queue's unaged part")
        self._drain()
        expect = order_lpm(rest, self.cache)
        if expect != self.reqs:
            pairs = enumerate(zip(expect, self.reqs, strict=True))
            first = next(i for i, (a, b) in pairs if a is not b)
            raise AssertionError(
                f"lpm order: position {first} holds {self.reqs[first].rid}, "
                f"a full re-sort puts {expect[first].rid} there"
            )


def _pos_of(m: _Member) -> Pos:
    return m.pos


def _fire(
    changed: list[Any] | None, at: dict[Any, dict[Request, None]], dirty: dict[Request, None]
) -> None:
    """Mark dirty every request registered at one of ``changed`` (those registrations
    are used up) and empty ``changed``."""
    if changed:
        for what in changed:
            reqs = at.pop(what, None)
            if reqs:
                dirty.update(reqs)
        changed.clear()


def _drop(at: dict[Any, dict[Request, None]], what: object, req: Request) -> None:
    """Take ``req``'s registration at ``what`` out of ``at`` (gone already: nothing)."""
    waiters = at.get(what)
    if waiters is not None:
        waiters.pop(req, None)
        if not waiters:
            del at[what]
