# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Waiting-queue ordering policies: fcfs, lpm, dfs-weight, lof, random, and priority.

Each policy is a function of the queue and the cache that returns a new order and
mutates nothing. Matching is a binary search over each request's precomputed key chain,
so cache-aware ordering stays cheap on long queues (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence
from functools import cmp_to_key

from prefillkit.cache.node import Node
from prefillkit.cache.prefix import PrefixCache
from prefillkit.request import (
    IN_BATCH_HEAD,
    IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD,
    Request,
)
from prefillkit.sched.matching import device_units, refresh_match

# Upstream in-batch prefix caching thresholds (tokens).
IN_BATCH_PREFIX_CHECK_THRESHOLD = 32


def order_fcfs(waiting: list[Request]) -> list[Request]:
    """Arrival order. NOTE: the scheduler keeps ``waiting`` in arrival order."""
    return waiting


def order_lof(waiting: list[Request]) -> list[Request]:
    """Longest output first (stable for ties)."""
    return sorted(waiting, key=lambda r: -r.max_new_tokens)


def order_random(waiting: list[Request], rng: random.Random) -> list[Request]:
    """A uniform shuffle (upstream ``random``) drawn from ``rng``: the scheduler's passes
    draw from one generator seeded with its ``seed``, so a run's sequence of shuffles is
    a function of the seed alone."""
    out = list(waiting)
    rng.shuffle(out)
    return out


def order_priority(
    waiting: list[Request], *, low_values_first: bool, lof: bool = False
) -> list[Request]:
    """Priority class first, then (lof: longest output, else) arrival order."""
    sign = 1 if low_values_first else -1
    if lof:
        return sorted(waiting, key=lambda r: (sign * r.priority, -r.max_new_tokens))
    return sorted(waiting, key=lambda r: (sign * r.priority, r.arrival_time))


def order_lpm(waiting: list[Request], cache: PrefixCache) -> list[Request]:
    """Longest matched prefix (device + host) first, with in-batch prefix deprioritising.

    Upstream's in-batch prefix caching: a request whose *device* match is short
    (<= 32 tokens) is compared with the earlier such waiting prompts that were not
    deprioritised; if it shares >= 32 tokens with one of them it is deprioritised
    (that prefix will be computed by the earlier one, so it is better served after it),
    otherwise it joins them. Sharing >= 32 tokens with some prompt is having the same
    first 32 tokens, so the comparison is one set lookup of the request's *head*:
    ``req.extra[IN_BATCH_HEAD]`` when the request was built with it (exact at any page
    size), else its key chain's key of the first 32 tokens, which is exact when the key
    unit divides 32 tokens (page 1/16/32) and otherwise the key of the first unit
    holding token 32 (equal keys share >= 32 tokens; prompts sharing fewer tokens than
    that unit are not detected without their head).
    """
    head_unit = in_batch_head_unit(cache.key_tokens)
    seen: set[object] = set()
    scored: list[tuple[int, int, Request]] = []
    for i, req in enumerate(waiting):
        matched, head = lpm_match(cache, req, head_unit)
        if head is not None:
            if head in seen:
                scored.append((1, i, req))  # deprioritised: after every other request
                continue
            seen.add(head)
        scored.append((-matched, i, req))
    scored.sort()  # (score, position) are unique: the request itself is never compared
    return [t[2] for t in scored]


def in_batch_head_unit(key_tokens: int) -> int:
    """The key unit holding token 32: its key is a prompt's head when the request was
    built without one (see :func:`order_lpm`)."""
    return -(-IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD // key_tokens) - 1


def lpm_match(cache: PrefixCache, req: Request, head_unit: int) -> tuple[int, object]:
    """``req``'s LPM inputs: matched tokens (device + host; refreshes its match) and its
    in-batch head when its *device* match is at most 32 tokens (else None: it takes no
    part in the in-batch check). ``head_unit``: :func:`in_batch_head_unit`."""
    kt = cache.key_tokens
    check = IN_BATCH_PREFIX_CHECK_THRESHOLD
    c = refresh_match(cache, req)
    matched = c * kt
    if matched > check:
        n = req.state.match_node
        if n is None or n.on_device or device_units(cache, req, c) * kt > check:
            return matched, None  # NOTE: a host hit compares its device part
    head: object = req.extra.get(IN_BATCH_HEAD) if req.extra else None
    if head is None and len(keys := req.keys) > head_unit:
        head = keys[head_unit]
    return matched, head


def order_dfs_weight(waiting: list[Request], cache: PrefixCache) -> list[Request]:
    """Walk the prefix tree heaviest subtree first; emit a node's requests after its children's.

    As upstream: a request sits at the node of its *device* match (upstream's
    ``last_node``; a host hit does not move it), node weight = number of waiting requests
    whose device match ends in its subtree, and siblings of equal weight keep the order
    of their parent's ``children`` (creation order, :attr:`Node.seq`), not the order of
    the queue.

    A match that ends inside a path-compressed node ends at a node of its own upstream
    (matching splits the node there), which is the parent of the rest of the node: so a
    node's requests are emitted deepest match first, then in queue order.

    Cost independent of the tree's depth: the union of the request nodes' root paths is
    walked only while it stays within ``4 N + 32`` nodes (:func:`_real_tree`, for N
    distinct request nodes; shallow trees, the usual case); beyond that only the
    *virtual tree* of the request nodes and their branch points is built
    (:func:`_virtual_tree`), with O(log depth) key comparisons per pair of nodes, never
    a walk to the root: O(N log N log depth), O(queue) when they are all one node.
    """
    root = cache.root
    by_node: dict[Node, list[tuple[int, Request]]] = {}
    rep: dict[Node, list[int]] = {}
    for req in waiting:
        c = refresh_match(cache, req)
        node = req.state.match_node
        assert node is not None  # NOTE: refresh_match sets it
        if not node.on_device:  # a host hit: upstream's last_node is the device part
            c = device_units(cache, req, c)
            node = cache.index[req.keys[c - 1]] if c else root
        lst = by_node.get(node)
        if lst is None:
            by_node[node] = [(c, req)]
            rep[node] = req.keys
        else:
            lst.append((c, req))
    out: list[Request] = []
    if len(by_node) == 1:
        ((_, reqs),) = by_node.items()
        if len(reqs) > 1:
            reqs.sort(key=lambda t: -t[0])
        return [r for _, r in reqs]
    tree = _real_tree(by_node, root, 4 * len(by_node) + 32)
    kids, seq = tree if tree is not None else _virtual_tree(by_node, rep, cache)
    weight: dict[Node, int] = {}
    post: list[Node] = []
    todo = [root]
    while todo:  # NOTE: pre-order; reversed it lists every child before its parent
        n = todo.pop()
        post.append(n)
        todo.extend(kids.get(n, ()))
    for n in reversed(post):
        w = len(by_node.get(n, ()))
        for k in kids.get(n, ()):
            w += weight[k]
        weight[n] = w
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            here = by_node.get(node)
            if here:
                if len(here) == 1:
                    out.append(here[0][1])
                else:
                    here.sort(key=lambda t: -t[0])
                    out.extend([r for _, r in here])
            continue
        stack.append((node, True))
        children = kids.get(node)
        if children:
            # Heaviest first, ties in the parent's children order: push in reverse so
            # the first one is popped first.
            if len(children) == 1:
                stack.append((children[0], False))
            else:
                children.sort(key=lambda c: (-weight[c], seq[c]))
                stack.extend([(c, False) for c in reversed(children)])
    return out


def _real_tree(
    by_node: dict[Node, list[tuple[int, Request]]], root: Node, budget: int
) -> tuple[dict[Node, list[Node]], dict[Node, int]] | None:
    """The union of the request nodes' root paths as a tree (``kids`` and ``seq`` as
    :func:`_virtual_tree` gives them), or None when it has more than ``budget`` nodes.

    For a shallow tree (the usual case: a system prompt, a document, a suffix) walking
    the parents is cheaper than the virtual tree's key-chain binary searches; a deep
    chain stops the walk after ``budget`` steps. Same order: the nodes the virtual tree
    leaves out hold no request and have one child on these paths, so they neither emit
    nor reorder anything, and a child's place among its siblings is its own ``seq``.
    """
    kids: dict[Node, list[Node]] = {}
    seq: dict[Node, int] = {}
    for node in by_node:
        n = node
        while n is not root and n not in seq:
            seq[n] = n.seq
            parent = n.parent
            assert parent is not None  # NOTE: a node in the tree has one up to the root
            lst = kids.get(parent)
            if lst is None:
                kids[parent] = [n]
            else:
                lst.append(n)
            n = parent
        if len(seq) > budget:
            return None
    return kids, seq


def _virtual_tree(
    by_node: dict[Node, list[tuple[int, Request]]],
    rep: dict[Node, list[int]],
    cache: PrefixCache,
) -> tuple[dict[Node, list[Node]], dict[Node, int]]:
    """The request nodes and their branch points as a tree: ``kids`` (virtual children
    per node) and, per virtual child, the :attr:`Node.seq` of the real child of its
    virtual parent on its path (its place among the parent's children).

    The key of unit ``i`` on a node's path is the node's own key when ``i`` is inside
    it, else ``rep[node][i]``: the key chain of a request whose match passes through the
    whole node above ``node.start``. Keys are chained hashes, so two paths agree through
    unit ``i`` iff their keys at ``i`` are equal: the longest common prefix of two paths
    is a binary search, and the branch point is the node holding its last unit (found
    in the key index). Nodes are sorted in the tree's pre-order (children in ``seq``
    order), then linked with the usual stack construction of a virtual tree.
    """
    root = cache.root
    index = cache.index

    def key(n: Node, i: int) -> int:
        return n.keys[i - n.start] if i >= n.start else rep[n][i]

    def lcp(a: Node, b: Node) -> int:
        m = min(a.end, b.end)
        if m == 0 or key(a, m - 1) == key(b, m - 1):
            return m
        lo, hi = 0, m - 1  # NOTE: paths agree at every unit < lo, differ at hi
        while lo < hi:
            mid = (lo + hi) >> 1
            if key(a, mid) == key(b, mid):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def child_at(n: Node, i: int) -> Node:
        """The node on ``n``'s path holding unit ``i`` (``i < n.end``)."""
        return n if i >= n.start else index[rep[n][i]]

    def cmp(a: Node, b: Node) -> int:
        if a is b:
            return 0
        c = lcp(a, b)
        if c == a.end:
            return -1  # NOTE: a is an ancestor of b: pre-order puts it first
        if c == b.end:
            return 1
        return -1 if child_at(a, c).seq < child_at(b, c).seq else 1

    kids: dict[Node, list[Node]] = {}
    seq: dict[Node, int] = {}

    def link(parent: Node, child: Node) -> None:
        kids.setdefault(parent, []).append(child)
        seq[child] = child_at(child, parent.end).seq

    stack = [root]
    for v in sorted(by_node, key=cmp_to_key(cmp)):
        if v is root:
            continue
        top = stack[-1]
        c = lcp(top, v)
        if c == top.end:  # NOTE: top is an ancestor of v
            stack.append(v)
            continue
        branch = child_at(v, c - 1) if c else root  # NOTE: ends at unit c (a branch)
        while len(stack) >= 2 and stack[-2].end >= c:
            link(stack[-2], stack[-1])
            stack.pop()
        if stack[-1] is not branch:
            if branch not in rep:
                rep[branch] = rep[v]
            link(branch, stack[-1])
            stack.pop()
            stack.append(branch)
        stack.append(v)
    while len(stack) >= 2:
        link(stack[-2], stack[-1])
        stack.pop()
    return kids, seq


def aged_prefix_len(waiting: Sequence[Request], now: float, max_wait_s: float | None) -> int:
    """How many requests at the front of ``waiting`` have waited at least ``max_wait_s``.

    ``waiting`` is in arrival order (the scheduler's queue is: non-decreasing
    ``arrival_time``), so the aged requests are exactly its front: those with
    ``now - arrival_time >= max_wait_s``, i.e. ``arrival_time <= now - max_wait_s``.
    Found by binary search: O(log queue) per pass, however many have aged (a linear scan
    of the aged front was the hot spot of long LPM replays). ``None``: no bound (0 aged).
    """
    if max_wait_s is None or not waiting:
        return 0
    cutoff = now - max_wait_s
    if waiting[0].arrival_time > cutoff:
        return 0
    return bisect_right(waiting, cutoff, key=_arrival)


def split_aged(
    arrivals: Sequence[float], now: float, max_wait_s: float
) -> tuple[list[int], list[int]]:
    """The wait bound on a queue in any order: (the positions of the requests that have
    waited ``>= max_wait_s`` at ``now``, oldest first, ties in queue order; the other
    positions, in queue order). The bound places the first group ahead of the policy's
    order of the second (:func:`order_waiting`); on a queue in arrival order the first
    group is exactly its front of :func:`aged_prefix_len` requests. An engine whose queue
    is not kept in arrival order (SGLang sorts it in place) uses this form."""
    cutoff = now - max_wait_s
    aged = [i for i, t in enumerate(arrivals) if t <= cutoff]
    aged.sort(key=lambda i: arrivals[i])
    rest = [i for i, t in enumerate(arrivals) if t > cutoff]
    return aged, rest


def _arrival(req: Request) -> float:
    return req.arrival_time


def order_waiting(
    waiting: list[Request],
    policy: str,
    cache: PrefixCache,
    *,
    priority: bool = False,
    low_priority_values_first: bool = False,
    lpm_fallback_queue_len: int | None = None,
    rng: random.Random | None = None,
    now: float = 0.0,
    max_wait_s: float | None = None,
    priority_aging: bool = False,
) -> tuple[list[Request], str]:
    """Order the queue; returns (order, policy actually used). ``random`` draws from
    ``rng`` (the scheduler's generator; None: a fresh one seeded 0).

    ``waiting`` must be in arrival order. The wait bound (aging): with ``max_wait_s`` set,
    every request that has waited ``>= max_wait_s`` seconds at ``now`` (the queue's aged
    front, :func:`aged_prefix_len`) is placed first, in arrival order, and the policy
    orders only the rest behind them. So a request ``max_wait_s`` old is ordered behind
    no request that arrived after it: from then on it is served in FCFS order. Under
    ``fcfs`` this changes nothing (the aged front is already first); under priority
    scheduling it applies only with ``priority_aging`` (strict classes otherwise, as
    upstream). The LPM queue-length fallback looks at the whole queue, as upstream.
    """
    if priority and not priority_aging:
        max_wait_s = None
    k = 0
    if max_wait_s is not None and (priority or policy != "fcfs"):
        k = aged_prefix_len(waiting, now, max_wait_s)
    args = (policy, cache, priority, low_priority_values_first, lpm_fallback_queue_len, rng)
    if k == 0:
        return _order_policy(waiting, *args, len(waiting))
    rest, used = _order_policy(waiting[k:], *args, len(waiting))
    return waiting[:k] + rest, used


def _order_policy(
    waiting: list[Request],
    policy: str,
    cache: PrefixCache,
    priority: bool,
    low_priority_values_first: bool,
    lpm_fallback_queue_len: int | None,
    rng: random.Random | None,
    queue_len: int,
) -> tuple[list[Request], str]:
    """The policy's own order of ``waiting`` (``queue_len``: the whole queue's length)."""
    if priority:
        return order_priority(
            waiting, low_values_first=low_priority_values_first, lof=policy == "lof"
        ), policy
    if policy == "fcfs":
        return order_fcfs(waiting), "fcfs"
    if policy == "lof":
        return order_lof(waiting), "lof"
    if policy == "lpm":
        if lpm_fallback_queue_len is not None and queue_len > lpm_fallback_queue_len:
            return order_fcfs(waiting), "fcfs"
        return order_lpm(waiting, cache), "lpm"
    if policy == "dfs-weight":
        return order_dfs_weight(waiting, cache), "dfs-weight"
    if policy == "random":
        return order_random(waiting, random.Random(0) if rng is None else rng), "random"
    raise ValueError(f"unknown schedule policy {policy!r}")
