"""Depth-independent paths (issue 16 item 4): counted locks and the virtual-tree
dfs-weight order, checked against the walk-to-the-root implementations they replace.

- ``order_dfs_weight`` builds only the virtual tree of the request nodes; here random
  branching trees (host tier on, so some matches end in host-only nodes) and random
  queues are ordered by it and by the old walk (kept below as the reference): equal.
- Locks count own locks + locked children (cache/node.py); ``check_invariants``
  recomputes lockedness bottom-up from the live requests' locked nodes. A chain 2,000
  nodes deep is locked and unlocked at the bottom with a bounded number of node visits.
"""

from __future__ import annotations

import random
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from prefillkit.cache import HostTier, KVPool, PrefixCache, check_invariants
from prefillkit.cache.node import Node
from prefillkit.request import Request
from prefillkit.sched import policy
from prefillkit.sched.matching import device_units, refresh_match
from prefillkit.sched.policy import order_dfs_weight

PAGE = 2


def reference_dfs_weight(waiting: list[Request], cache: PrefixCache) -> list[Request]:
    """The walk-to-the-root dfs-weight order (prefillkit before issue 16 item 4)."""
    root = cache.root
    by_node: dict[Node, list[tuple[int, Request]]] = {}
    for req in waiting:
        c = refresh_match(cache, req)
        node = req.state.match_node
        assert node is not None
        if not node.on_device:
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
            reqs = sorted(by_node.get(node, []), key=lambda t: -t[0])
            out.extend(r for _, r in reqs)
            continue
        stack.append((node, True))
        children = sorted(kids.get(node, []), key=lambda c: (-weight[c], c.seq))
        stack.extend((c, False) for c in reversed(children))
    return out


def _prefill(cache: PrefixCache, tokens: list[int]) -> None:
    keys = Request.from_tokens("_", tokens, page_size=PAGE).keys
    m = cache.match(keys, len(keys))
    node = cache.lock(m.device_node, m.device_units)
    start = m.device_units * cache.unit_pages
    if cache.alloc_pages(start, (len(keys) - m.device_units) * cache.unit_pages) is None:
        cache.unlock(node)
        return
    node = cache.insert(node, keys, m.device_units, len(keys))
    cache.unlock(node)


def _random_prompt(rng: random.Random, bases: list[list[int]]) -> list[int]:
    if bases and rng.random() < 0.85:
        base = rng.choice(bases)
        cut = rng.randrange(0, len(base) + 1)
        return base[:cut] + [rng.randrange(6) for _ in range(rng.randrange(1, 12))]
    return [rng.randrange(6) for _ in range(rng.randrange(1, 16))]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([None, 40, 400]))
def test_dfs_weight_equals_the_root_walk(seed: int, host_pages: int | None) -> None:
    rng = random.Random(seed)
    host = HostTier(host_pages, write_policy="write_through") if host_pages else None
    cache = PrefixCache(KVPool(rng.choice([40, 120, 600]), PAGE), PAGE, host)
    bases: list[list[int]] = []
    for _ in range(rng.randrange(1, 40)):
        p = _random_prompt(rng, bases)
        bases.append(p)
        _prefill(cache, p)
    check_invariants(cache, [])
    for _ in range(3):
        waiting = [
            Request.from_tokens(f"w{i}", [*_random_prompt(rng, bases), 7], page_size=PAGE)
            for i in range(rng.randrange(1, 30))
        ]
        for r in waiting:  # the binary search for the device part equals the walk
            c = refresh_match(cache, r)
            assert device_units(cache, r, c) == cache.match_node(r.state.match_node, c).device_units  # type: ignore[arg-type]
        want = [r.rid for r in reference_dfs_weight(waiting, cache)]
        assert [r.rid for r in order_dfs_weight(waiting, cache)] == want  # the parent walk
        with patch.object(policy, "_real_tree", lambda *a: None):  # the virtual tree
            assert [r.rid for r in order_dfs_weight(waiting, cache)] == want
        _prefill(cache, _random_prompt(rng, bases))  # the tree moves between passes


def _chain(depth: int) -> tuple[PrefixCache, list[int]]:
    cache = PrefixCache(KVPool(4 * depth + 8, PAGE), PAGE)
    tokens: list[int] = []
    for t in range(depth):
        tokens = [*tokens, t % 5, t % 7]
        _prefill(cache, tokens)
    return cache, Request.from_tokens("_", [*tokens, 9], page_size=PAGE).keys


def test_locks_below_a_locked_ancestor_touch_one_node() -> None:
    """With the chain locked at depth d, locking and unlocking a deeper node changes only
    that node's count and its nearest locked ancestor's, never the path to the root."""
    cache, keys = _chain(2_000)
    top = cache.match(keys, 1000)
    held = cache.lock(top.device_node, top.device_units)
    cache.commit()
    before = {id(n): n.lock_ref for n in cache.index.values()}
    deep = cache.match(keys, len(keys) - 1)
    node = cache.lock(deep.device_node, deep.device_units)
    cache.commit()
    changed = [n for n in set(cache.index.values()) if n.lock_ref != before[id(n)]]
    # the new lock's node, the unlocked nodes it crossed (down to HELD) and HELD itself
    assert len(changed) == deep.device_units - top.device_units + 1
    assert held.lock_ref == 2  # own lock + one locked child
    check_invariants(cache, page_holders=[("a", held.end, [], held), ("b", node.end, [], node)])
    cache.unlock(node)
    cache.unlock(held)
    check_invariants(cache, [])
    assert all(n.lock_ref == 0 for n in cache.index.values())
    assert cache.protected_pages == 0 and cache.evictable_pages == cache.cached_pages


def test_invariant_checker_catches_a_stale_count() -> None:
    import pytest

    from prefillkit.cache.invariants import InvariantError

    cache, keys = _chain(50)
    m = cache.match(keys, 30)
    node = cache.lock(m.device_node, m.device_units)
    cache.commit()
    holders = [("a", node.end, [], node)]
    check_invariants(cache, page_holders=holders)
    node.lock_ref -= 1  # a lost lock: the request still holds it
    with pytest.raises(InvariantError, match="own locks"):
        check_invariants(cache, page_holders=holders)
    node.lock_ref += 1
    parent = node.parent
    assert parent is not None
    parent.lock_ref -= 1  # a parent that no longer counts its locked child
    with pytest.raises(InvariantError, match="below its locked children"):
        check_invariants(cache)
    parent.lock_ref += 1
    check_invariants(cache, page_holders=holders)
