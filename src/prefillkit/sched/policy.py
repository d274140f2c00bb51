"""Waiting-queue ordering policies: fcfs, lpm, dfs-weight, lof, random, and priority.

Each policy is a function of the queue and the cache that returns a new order and
mutates nothing. Matching is a binary search over each request's precomputed key chain,
so cache-aware ordering stays cheap on long queues (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Sequence

from prefillkit.cache.node import Node
from prefillkit.cache.prefix import PrefixCache
from prefillkit.request import (
    IN_BATCH_HEAD,
    IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD,
    Request,
)
from prefillkit.sched.matching import refresh_match

# Upstream in-batch prefix caching thresholds (tokens).
IN_BATCH_PREFIX_CHECK_THRESHOLD = 32


def order_fcfs(waiting: list[Request]) -> list[Request]:
    """Arrival order. NOTE: the scheduler keeps ``waiting`` in arrival order."""
    return waiting


def order_lof(waiting: list[Request]) -> list[Request]:
    """Longest output first (stable for ties)."""
    return sorted(waiting, key=lambda r: -r.max_new_tokens)


# One generator per cache (= per scheduler), created from the seed on first use: a run's
# sequence of shuffles is a function of its seed alone.
_RANDOM: weakref.WeakKeyDictionary[PrefixCache, tuple[int, random.Random]] = (
    weakref.WeakKeyDictionary()
)


def order_random(waiting: list[Request], cache: PrefixCache, seed: int) -> list[Request]:
    """A uniform shuffle (upstream ``random``), deterministic for a given seed: the
    scheduler's passes draw from one generator seeded with ``seed``."""
    state = _RANDOM.get(cache)
    if state is None or state[0] != seed:
        state = _RANDOM[cache] = (seed, random.Random(seed))
    out = list(waiting)
    state[1].shuffle(out)
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
    kt = cache.key_tokens
    check = IN_BATCH_PREFIX_CHECK_THRESHOLD
    probe = -(-IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD // kt) - 1  # unit holding token 32
    seen: set[object] = set()
    scored: list[tuple[int, int, Request]] = []
    for i, req in enumerate(waiting):
        c = refresh_match(cache, req)
        matched = c * kt
        if matched > check:
            n = req.match_node
            if n is not None and not n.on_device:  # a host hit: compare the device part
                dev = cache.match_node(n, c).device_units * kt
            else:
                dev = matched
        else:
            dev = matched
        if dev <= check:
            head: object = req.extra.get(IN_BATCH_HEAD) if req.extra else None
            if head is None and len(keys := req.keys) > probe:
                head = keys[probe]
            if head is not None:
                if head in seen:
                    scored.append((1, i, req))  # deprioritised: after every other request
                    continue
                seen.add(head)
        scored.append((-matched, i, req))
    scored.sort()  # (score, position) are unique: the request itself is never compared
    return [t[2] for t in scored]


def order_dfs_weight(waiting: list[Request], cache: PrefixCache) -> list[Request]:
    """Walk the prefix tree heaviest subtree first; emit a node's requests after its children's.

    As upstream: a request sits at the node of its *device* match (upstream's
    ``last_node``; a host hit does not move it), node weight = number of waiting requests
    whose device match ends in its subtree, and siblings of equal weight keep the order
    of their parent's ``children`` (creation order, :attr:`Node.seq`), not the order of
    the queue. Only the weighted part of the tree is visited: O(queue x path depth),
    not O(tree).

    A match that ends inside a path-compressed node ends at a node of its own upstream
    (matching splits the node there), which is the parent of the rest of the node: so a
    node's requests are emitted deepest match first, then in queue order.
    """
    root = cache.root
    by_node: dict[Node, list[tuple[int, Request]]] = {}
    for req in waiting:
        c = refresh_match(cache, req)
        node = req.match_node
        assert node is not None  # NOTE: refresh_match sets it
        if not node.on_device:  # a host hit: upstream's last_node is the device part
            m = cache.match_node(node, c)
            node, c = m.device_node, m.device_units
        by_node.setdefault(node, []).append((c, req))
    weight: dict[Node, int] = {}
    kids: dict[Node, list[Node]] = {}
    for node, node_reqs in by_node.items():
        n: Node | None = node
        add = len(node_reqs)
        while n is not None:
            if n in weight:
                weight[n] += add
                n = n.parent
                # ancestors of a weighted node are already linked; just add weight
                while n is not None:
                    weight[n] += add
                    n = n.parent
                break
            weight[n] = add
            if n.parent is not None:
                kids.setdefault(n.parent, []).append(n)
            n = n.parent
    out: list[Request] = []
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            reqs = by_node.get(node)
            if reqs:
                if len(reqs) == 1:
                    out.append(reqs[0][1])
                else:
                    reqs.sort(key=lambda t: -t[0])
                    out.extend([r for _, r in reqs])
            continue
        stack.append((node, True))
        children = kids.get(node)
        if children:
            # Heaviest first, ties in the parent's children order: push in reverse so
            # the first one is popped first.
            if len(children) == 1:
                stack.append((children[0], False))
            else:
                children.sort(key=lambda c: (-weight[c], c.seq))
                stack.extend([(c, False) for c in reversed(children)])
    return out


def aged_prefix_len(waiting: Sequence[Request], now: float, max_wait_s: float | None) -> int:
    """How many requests at the front of ``waiting`` have waited at least ``max_wait_s``.

    ``waiting`` is in arrival order (the scheduler's queue is), so the aged requests are
    exactly its front: those with ``now - arrival_time >= max_wait_s``. The scan stops at
    the first younger request, so it costs O(aged + 1), not O(queue). ``None``: no bound
    (0 aged).
    """
    if max_wait_s is None:
        return 0
    cutoff = now - max_wait_s
    k = 0
    for req in waiting:
        if req.arrival_time > cutoff:
            break
        k += 1
    return k


def order_waiting(
    waiting: list[Request],
    policy: str,
    cache: PrefixCache,
    *,
    priority: bool = False,
    low_priority_values_first: bool = False,
    lpm_fallback_queue_len: int | None = None,
    seed: int = 0,
    now: float = 0.0,
    max_wait_s: float | None = None,
    priority_aging: bool = False,
) -> tuple[list[Request], str]:
    """Order the queue; returns (order, policy actually used). ``seed`` seeds ``random``.

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
    args = (policy, cache, priority, low_priority_values_first, lpm_fallback_queue_len, seed)
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
    seed: int,
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
        return order_random(waiting, cache, seed), "random"
    raise ValueError(f"unknown schedule policy {policy!r}")
