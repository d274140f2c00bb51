"""Waiting-queue ordering policies: fcfs, lpm, dfs-weight, lof, and priority.

Each policy is a function of the queue and the cache that returns a new order and
mutates nothing. Matching is a binary search over each request's precomputed key chain,
so cache-aware ordering stays cheap on long queues (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

from prefillkit.cache.node import Node
from prefillkit.cache.prefix import PrefixCache
from prefillkit.request import Request
from prefillkit.sched.matching import refresh_match

# Upstream in-batch prefix caching thresholds (tokens).
IN_BATCH_PREFIX_CHECK_THRESHOLD = 32
IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD = 32


def order_fcfs(waiting: list[Request]) -> list[Request]:
    """Arrival order. NOTE: the scheduler keeps ``waiting`` in arrival order."""
    return waiting


def order_lof(waiting: list[Request]) -> list[Request]:
    """Longest output first (stable for ties)."""
    return sorted(waiting, key=lambda r: -r.max_new_tokens)


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

    A request whose match is short (<= 32 tokens) but whose first 32 tokens equal those
    of an earlier such waiting request is deprioritised: that prefix will be computed
    by the earlier one, so it is better served after it (upstream's in-batch caching).
    Since keys identify whole prefixes, "shares >= 32 tokens with a waiting prompt" is
    one set lookup of the key covering token 32.
    """
    kt = cache.key_tokens
    probe = -(-IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD // kt) - 1  # unit holding token 32
    seen: set[int] = set()
    scored: list[tuple[int, int, Request]] = []
    for i, req in enumerate(waiting):
        matched = refresh_match(cache, req) * kt
        if matched <= IN_BATCH_PREFIX_CHECK_THRESHOLD and len(keys := req.keys) > probe:
            key = keys[probe]
            if key in seen:
                scored.append((1, i, req))  # deprioritised: after every other request
                continue
            seen.add(key)
        scored.append((-matched, i, req))
    scored.sort()  # (score, position) are unique: the request itself is never compared
    return [t[2] for t in scored]


def order_dfs_weight(waiting: list[Request], cache: PrefixCache) -> list[Request]:
    """Walk the prefix tree heaviest subtree first; emit a node's requests after its children's.

    Node weight = number of waiting requests whose match ends in its subtree. Only the
    weighted part of the tree is visited: O(queue x path depth), not O(tree). Siblings
    of equal weight keep the order of their earliest waiting request.

    A match that ends inside a path-compressed node ends at a node of its own upstream
    (matching splits the node there), which is the parent of the rest of the node: so a
    node's requests are emitted deepest match first (stable for ties).
    """
    root = cache.root
    by_node: dict[Node, list[tuple[int, Request]]] = {}
    for req in waiting:
        c = refresh_match(cache, req)
        by_node.setdefault(req.match_node, []).append((c, req))  # type: ignore[arg-type]
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
            # Heaviest first, ties by first appearance (``kids`` is in that order):
            # push in reverse so the first one is popped first.
            if len(children) == 1:
                stack.append((children[0], False))
            else:
                children.sort(key=lambda c: -weight[c])
                stack.extend([(c, False) for c in reversed(children)])
    return out


def order_waiting(
    waiting: list[Request],
    policy: str,
    cache: PrefixCache,
    *,
    priority: bool = False,
    low_priority_values_first: bool = False,
    lpm_fallback_queue_len: int | None = None,
) -> tuple[list[Request], str]:
    """Order the queue; returns (order, policy actually used)."""
    if priority:
        return order_priority(
            waiting, low_values_first=low_priority_values_first, lof=policy == "lof"
        ), policy
    if policy == "fcfs":
        return order_fcfs(waiting), "fcfs"
    if policy == "lof":
        return order_lof(waiting), "lof"
    if policy == "lpm":
        if lpm_fallback_queue_len is not None and len(waiting) > lpm_fallback_queue_len:
            return order_fcfs(waiting), "fcfs"
        return order_lpm(waiting, cache), "lpm"
    if policy == "dfs-weight":
        return order_dfs_weight(waiting, cache), "dfs-weight"
    raise ValueError(f"unknown schedule policy {policy!r}")
