# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The two prefix indexes a router reads: what each instance holds, exactly or believed.

Both key a prefix by the core's chained cache keys (one per ``key_tokens`` tokens; equal
keys mean equal whole prefixes), and both keep one dict ``key -> int`` bitmask of the
instances holding that key. Matching walks a request's keys once, AND-ing the masks and
recording each instance's depth when its bit drops out, and stops when the mask is 0: the
cost is the match length (plus one step per instance that held the first key), not the
instance count.

- :class:`ExactPrefixIndex`: each instance's device cache as its KV events report it
  (vLLM / SGLang KV events; Dynamo's ``KvIndexer``, llm-d's ``kvcache.Index``), with no
  delay.
- :class:`ApproximatePrefixIndex`: sglang-router's approximate tree (``sgl-router/src/
  policies/tree.rs``): where the router itself sent which prefix, per-tenant last-access
  times, LRU leaf eviction per tenant down to ``max_tree_size`` every
  ``eviction_interval_s`` (approx_index.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prefillkit.cache.events import BlockLoadedBack, BlockRemoved, BlockStored, KVEvent
from prefillkit.sched.config import ConfigError
from prefillkit.sim.routers.approx_index import ApproximatePrefixIndex
from prefillkit.sim.routers.masks import check_instances, walk_masks

__all__ = ["ApproximatePrefixIndex", "ExactPrefixIndex"]


class ExactPrefixIndex:
    """Which device ("GPU") keys each instance holds, from its KV events.

    ``BlockStored`` on GPU and ``BlockLoadedBack`` (host to device) add the run's keys;
    ``BlockRemoved`` on GPU removes them. Host-tier ("CPU") events are ignored: a router
    here matches against the device cache only (a host hit still costs a load-back; Dynamo
    and llm-d can weight host tiers, which this index does not model). Events reach the
    index with zero delay (the engines publish them asynchronously).
    """

    __slots__ = ("_copies", "_masks", "_sizes", "num_instances")

    def __init__(self, num_instances: int) -> None:
        check_instances(num_instances)
        self.num_instances = num_instances
        self._masks: dict[int, int] = {}
        self._sizes = [0] * num_instances
        # NOTE: an instance of several schedulers (DP attention ranks, one listener
        # each: ``listener(i, shared=True)``) may hold a key on more than one of them;
        # the copies beyond the first, per (key, instance), so that one rank's removal
        # leaves the key held while another rank still has it.
        self._copies: dict[tuple[int, int], int] = {}

    def listener(self, index: int, *, shared: bool = False) -> Callable[[KVEvent], None]:
        """The KV listener for instance ``index`` (``SchedulerInterface.set_kv_listener``);
        ``shared``: the instance's schedulers (DP attention ranks) share it, each keeping
        its own cache (a key stays held while any of them holds it)."""
        if not 0 <= index < self.num_instances:
            raise ConfigError(
                f"router: instance index {index} out of range [0, {self.num_instances})"
            )
        return _Listener(self, index, shared)

    def on_event(self, event: KVEvent, index: int, shared: bool) -> None:
        """Instance ``index``'s KV event (module docstring: which events count)."""
        bit = 1 << index
        if isinstance(event, BlockStored):
            if event.medium == "GPU":
                self._add(event.keys, bit, index, shared)
        elif isinstance(event, BlockRemoved):
            if event.medium == "GPU":
                self._remove(event.keys, bit, index, shared)
        elif isinstance(event, BlockLoadedBack):
            self._add(event.keys, bit, index, shared)

    def _add(self, keys: Sequence[int], bit: int, index: int, shared: bool) -> None:
        masks = self._masks
        added = 0
        for key in keys:
            m = masks.get(key, 0)
            if not m & bit:
                masks[key] = m | bit
                added += 1
            elif shared:
                copies = self._copies
                copies[key, index] = copies.get((key, index), 0) + 1
        self._sizes[index] += added

    def _remove(self, keys: Sequence[int], bit: int, index: int, shared: bool) -> None:
        masks = self._masks
        removed = 0
        for key in keys:
            m = masks.get(key, 0)
            if shared and m & bit and self._release_copy(key, index):
                continue
            if m & bit:
                removed += 1
                if m == bit:
                    del masks[key]
                else:
                    masks[key] = m ^ bit
        self._sizes[index] -= removed

    def _release_copy(self, key: int, index: int) -> bool:
        """Drop one extra copy of ``key`` on instance ``index``; False: none left."""
        copies = self._copies
        n = copies.get((key, index), 0)
        if n == 0:
            return False
        if n == 1:
            del copies[key, index]
        else:
            copies[key, index] = n - 1
        return True

    def matched_units(self, keys: Sequence[int]) -> list[int]:
        """Per instance, how many leading ``keys`` its device cache holds."""
        out = [0] * self.num_instances
        walk_masks(self._masks, keys, out)
        return out

    def sizes(self) -> list[int]:
        """Per instance, how many keys (key units) its device cache holds."""
        return list(self._sizes)

    def holds(self, key: int, index: int) -> bool:
        """Whether instance ``index`` holds ``key`` on device."""
        return bool(self._masks.get(key, 0) >> index & 1)


class _Listener:
    """One instance's KV listener: its events go to the index (a class, not a closure:
    the compiled build calls it without a Python frame)."""

    __slots__ = ("index", "owner", "shared")

    def __init__(self, owner: ExactPrefixIndex, index: int, shared: bool) -> None:
        self.owner = owner
        self.index = index
        self.shared = shared

    def __call__(self, event: KVEvent) -> None:
        self.owner.on_event(event, self.index, self.shared)
