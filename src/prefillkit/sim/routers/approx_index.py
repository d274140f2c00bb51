"""sglang-router's approximate radix tree, at key-unit granularity.

sglang-router (``sgl-router/src/policies/tree.rs``, ``Tree``) keeps one radix tree over
the prompt *characters* of every request it routed, each node carrying a map
tenant (worker) -> last access time, and per tenant a character count:

- ``insert(text, tenant)`` attaches the tenant to every node on the text's path (new
  nodes and splits included), stamps all of them now, and adds the characters of the
  nodes newly attached to the tenant's count;
- ``prefix_match(text)`` walks the tree as far as the text matches, returns the matched
  text and the first tenant of the deepest node, and stamps that tenant now on that node
  and every ancestor;
- ``evict_tenant_by_size(max)`` (every ``eviction_interval_secs`` on a background thread):
  per tenant above ``max`` characters, pops that tenant's leaves (nodes it holds with no
  child it holds) oldest stamp first, detaching it and pushing the parent when that
  becomes its leaf, until the tenant is at or under ``max``;
- ``get_smallest_tenant()``: the tenant with the fewest characters.

Here a node is a key unit (``key_tokens`` tokens, named by its chained key, whose parent
is the previous key), and sizes are counted in tokens (key units x ``key_tokens``), not
characters: the deviation docs/routers.md states. A tenant's keys are prefix-closed
(insert attaches a whole path, eviction takes leaves only), so the keys of a request one
tenant holds are a leading run, found by bisection.

Stamps are kept lazily, with the same result: stamping a path stamps every node on it,
so a node's stamp is the latest of the stamps of the paths that *ended* at it and of its
children's stamps. Only a path's last key is stamped; a node's own value starts at -inf
(an interior node); eviction, which only ever pops leaves (whose stamp is their own),
folds a popped node's stamp into its parent's before the parent can become a leaf. An
insert thus costs the new keys plus a bisection, not the whole path.

Eviction runs lazily: on the first :meth:`insert` or :meth:`matched_units` call at or
after each multiple of ``eviction_interval_s`` of simulated time (0: never), once, however
many boundaries passed.
Equal stamps pop the smaller key first (sglang-router's heap order among equal stamps is
unspecified); everything is deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from prefillkit.sched.config import ConfigError
from prefillkit.sim.routers.masks import check_instances, walk_masks

__all__ = ["ApproximatePrefixIndex"]


class ApproximatePrefixIndex:
    """The router's belief of what each instance (tenant) caches, from where it routed.

    ``max_tree_size_tokens``: the per-tenant size eviction trims to;
    ``eviction_interval_s``: simulated seconds between evictions (0: never);
    ``key_tokens``: tokens per key unit (sizes are reported in tokens).
    """

    __slots__ = (
        "_access",
        "_masks",
        "_memo",
        "_next_eviction",
        "_parent",
        "_version",
        "eviction_interval_s",
        "evictions",
        "key_tokens",
        "max_tree_size_tokens",
        "num_instances",
    )

    def __init__(
        self,
        num_instances: int,
        max_tree_size_tokens: int,
        eviction_interval_s: float,
        key_tokens: int,
    ) -> None:
        check_instances(num_instances)
        _check(max_tree_size_tokens >= 0, "max_tree_size", max_tree_size_tokens, ">= 0")
        _check(
            math.isfinite(eviction_interval_s) and eviction_interval_s >= 0,
            "eviction_interval_s",
            eviction_interval_s,
            ">= 0 and finite",
        )
        _check(key_tokens >= 1, "key_tokens", key_tokens, ">= 1")
        self.num_instances = num_instances
        self.max_tree_size_tokens = max_tree_size_tokens
        self.eviction_interval_s = float(eviction_interval_s)
        self.key_tokens = key_tokens
        #: Runs of :meth:`evict` so far (lazy, at interval boundaries).
        self.evictions = 0
        self._masks: dict[int, int] = {}
        self._parent: dict[int, int | None] = {}
        self._access: list[dict[int, float]] = [{} for _ in range(num_instances)]
        self._next_eviction = eviction_interval_s if eviction_interval_s > 0 else math.inf
        #: Bumped whenever a tenant's holdings change (new keys, an eviction run).
        self._version = 0
        #: The last :meth:`matched_units`: (keys object, per-tenant units, version). An
        #: :meth:`insert` of the same keys object at the same version reads its tenant's
        #: leading run from it instead of bisecting (the route-then-insert of one request).
        self._memo: tuple[Sequence[int], tuple[int, ...], int] | None = None

    # ------------------------------------------------------------------ queries
    def matched_units(self, keys: Sequence[int], now: float, touch: bool = True) -> list[int]:
        """Per tenant, how many leading ``keys`` it holds. With ``touch`` (sglang-router's
        ``prefix_match``), the tenant with the longest match (the lowest index among
        equals) is stamped ``now`` along its matched path."""
        self._evict_due(now)
        out = [0] * self.num_instances
        best = walk_masks(self._masks, keys, out)
        self._memo = (keys, tuple(out), self._version)
        if touch and best:
            self._access[out.index(best)][keys[best - 1]] = now
        return out

    def tenant_sizes(self) -> list[int]:
        """Per tenant, the tokens its tree holds (key units x ``key_tokens``)."""
        kt = self.key_tokens
        return [units * kt for units in map(len, self._access)]

    def tenant_units(self) -> list[int]:
        """Per tenant, the key units its tree holds."""
        return list(map(len, self._access))

    def holds(self, key: int, index: int) -> bool:
        """Whether tenant ``index`` holds ``key``."""
        return bool(self._masks.get(key, 0) >> index & 1)

    def last_access(self, key: int, index: int) -> float | None:
        """Tenant ``index``'s stamp on ``key`` (None if it does not hold it): the latest
        stamp of ``key`` and the keys below it (module docstring). O(size): for tests."""
        acc = self._access[index]
        if key not in acc:
            return None
        parent = self._parent
        latest = acc[key]
        for k, stamp in acc.items():
            if stamp > latest and self._below(k, key, parent):
                latest = stamp
        return latest

    @staticmethod
    def _below(k: int | None, key: int, parent: dict[int, int | None]) -> bool:
        while k is not None:
            if k == key:
                return True
            k = parent[k]
        return False

    # ------------------------------------------------------------------ updates
    def insert(self, keys: Sequence[int], index: int, now: float) -> None:
        """sglang-router ``insert``: tenant ``index`` now holds ``keys`` (a request routed
        there); every key on the path is stamped ``now``."""
        self._evict_due(now)
        if not keys:
            return
        acc = self._access[index]
        memo = self._memo
        if memo is not None and memo[0] is keys and memo[2] == self._version and _frozen(keys):
            held = memo[1][index]
        else:
            held = _leading(acc, keys)
        if held < len(keys):
            self._version += 1
            bit = 1 << index
            masks = self._masks
            parent = self._parent
            prev = keys[held - 1] if held else None
            for key in keys[held:]:
                m = masks.get(key, 0)
                if not m:
                    parent[key] = prev
                masks[key] = m | bit
                acc[key] = _INTERIOR
                prev = key
        acc[keys[-1]] = now

    def touch(self, keys: Sequence[int], index: int, now: float) -> None:
        """Stamp ``now`` on the leading ``keys`` tenant ``index`` holds (sglang-router's
        ``prefix_match`` stamping the tenant it returns)."""
        acc = self._access[index]
        held = _leading(acc, keys)
        if held:
            acc[keys[held - 1]] = now

    def evict(self) -> None:
        """sglang-router ``evict_tenant_by_size``: every tenant above
        ``max_tree_size_tokens`` drops its least recently stamped leaves until it is not."""
        self.evictions += 1
        self._version += 1
        limit = self.max_tree_size_tokens // self.key_tokens
        for index, acc in enumerate(self._access):
            if len(acc) > limit:
                self._evict_tenant(index, limit)

    def _evict_due(self, now: float) -> None:
        if now < self._next_eviction:
            return
        self.evict()
        interval = self.eviction_interval_s
        self._next_eviction = (math.floor(now / interval) + 1) * interval

    def _evict_tenant(self, index: int, limit: int) -> None:
        acc = self._access[index]
        parent = self._parent
        children: dict[int, int] = {}
        for key in acc:
            p = parent[key]
            if p is not None:
                children[p] = children.get(p, 0) + 1
        heap = [(stamp, key) for key, stamp in acc.items() if key not in children]
        heapq.heapify(heap)
        bit = 1 << index
        masks = self._masks
        while len(acc) > limit and heap:
            stamp, key = heapq.heappop(heap)
            del acc[key]
            p = parent[key]
            m = masks[key] ^ bit
            if m:
                masks[key] = m
            else:
                del masks[key]
                del parent[key]
            if p is not None:
                if stamp > acc[p]:
                    acc[p] = stamp  # the parent was stamped with every path through key
                left = children[p] - 1
                children[p] = left
                if not left:
                    heapq.heappush(heap, (acc[p], p))


#: The own stamp of a key no path has ended at yet (an interior node).
_INTERIOR = -math.inf


def _leading(acc: dict[int, float], keys: Sequence[int]) -> int:
    """How many leading ``keys`` are in ``acc``: bisection, as a tenant's keys are
    prefix-closed (held keys form a leading run of any chain)."""
    lo, hi = 0, len(keys)
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] in acc:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _frozen(keys: Sequence[int]) -> bool:
    """Whether ``keys`` cannot have changed since it was seen (a tuple)."""
    return type(keys) is tuple


def _check(ok: bool, param: str, value: object, rule: str) -> None:
    if not ok:
        raise ConfigError(f"router.{param}: must be {rule}, got {value!r}")
