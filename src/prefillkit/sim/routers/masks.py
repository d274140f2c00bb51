# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Bitmask helpers the two prefix indexes share (prefix_index.py, approx_index.py).

An index keeps one dict ``key -> int``: bit ``i`` set when instance ``i`` holds the key.
"""

from __future__ import annotations

from collections.abc import Sequence

from prefillkit.sched.config import ConfigError

__all__ = ["check_instances", "record_depths", "walk_masks"]


def record_depths(out: list[int], bits: int, depth: int) -> None:
    """Set ``out[i] = depth`` for every bit ``i`` set in ``bits``."""
    while bits:
        low = bits & -bits
        out[low.bit_length() - 1] = depth
        bits ^= low


def walk_masks(masks: dict[int, int], keys: Sequence[int], out: list[int]) -> int:
    """Fill ``out`` (zeros, one per instance) with each instance's count of leading
    ``keys`` present in ``masks``; return the longest such count.

    One pass over ``keys``: the running mask is ANDed with each key's mask; an instance
    whose bit drops out at key ``d`` matched ``d`` keys; the walk stops when no bit is
    left. The cost is the match length plus one step per instance holding the first key,
    independent of the instance count. Assumes prefix-closed key sets per instance (a key
    only with all its ancestors), as both indexes keep; a gap ends that instance's match.
    """
    if not keys:
        return 0
    get = masks.get
    it = iter(keys)
    mask = get(next(it), 0)
    if not mask:
        return 0
    depth = 1
    for key in it:
        m = mask & get(key, 0)
        if m != mask:
            dropped = mask ^ m
            while dropped:  # record_depths, inlined: this loop is the hot path
                low = dropped & -dropped
                out[low.bit_length() - 1] = depth
                dropped ^= low
            if not m:
                return depth
            mask = m
        depth += 1
    record_depths(out, mask, depth)
    return depth


def check_instances(num_instances: object) -> None:
    """A one-line :class:`ConfigError` unless ``num_instances`` is a positive int."""
    if isinstance(num_instances, bool) or not isinstance(num_instances, int):
        raise ConfigError(f"router: the instance count must be an integer, got {num_instances!r}")
    if num_instances < 1:
        raise ConfigError(f"router: needs at least one instance, got {num_instances}")
