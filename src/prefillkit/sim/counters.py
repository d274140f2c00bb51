"""Several schedulers' counters as one (the DP ranks of an instance, a fleet's instances)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["merge_counters"]


def merge_counters(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The counters of ``parts`` summed, but ``affinity_max_*`` (a per-pass maximum): the
    largest. Keys in first-seen order."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key not in out:
                out[key] = value
            elif key.startswith("affinity_max_"):
                out[key] = max(out[key], value)
            else:
                out[key] += value
    return out
