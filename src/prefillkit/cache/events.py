# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""KV-cache events (vLLM's ``KVCacheEvent`` family is the model).

A :class:`~prefillkit.cache.prefix.PrefixCache` with a ``kv_listener`` calls it with one
event per change of what the cache holds; with none attached (the default) no event
object is ever built. ``keys`` are the cache keys (chained hashes, one per key unit) of
the affected run, ``start_unit`` the unit index of its first key; ``medium`` is
``"GPU"`` (device tier) or ``"CPU"`` (host tier).

- :class:`BlockStored`: a run became resident on ``medium``: computed and cached on
  device (``pages``: its device page ids, engine-facing, in sequence order), or backed up
  to host (``slots``: its host slot ids, in sequence order).
- :class:`BlockRemoved`: a run left ``medium``: evicted from device (it may stay on
  host) or dropped from host.
- :class:`BlockLoadedBack`: a host run was loaded to device; ``copies`` are the
  ``(host slot, device page)`` pairs to copy, in sequence order.

Events are built only when a listener is attached, so their O(pages) id lists cost
nothing otherwise (``benchmarks/bench_admission.py`` measures the attached case).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockStored:
    keys: tuple[int, ...]
    start_unit: int
    medium: str
    pages: tuple[int, ...] = ()
    slots: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    keys: tuple[int, ...]
    start_unit: int
    medium: str


@dataclass(frozen=True, slots=True)
class BlockLoadedBack:
    keys: tuple[int, ...]
    start_unit: int
    copies: tuple[tuple[int, int], ...]


KVEvent = BlockStored | BlockRemoved | BlockLoadedBack
KVListener = Callable[[KVEvent], None]
