# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""A batch's cached tokens, split by where they come from.

The scheduler's ``StepOutput.cached_tokens`` is the sum of each request's true prefix
(``prefix_len``): the tokens the forward reads as KV instead of computing. For a
request's first chunk (or its only one) that prefix is its cache hit -- ``loaded_tokens``
of it loaded back from the host tier, the rest already on device. For a chunked
continuation it is everything computed before this chunk: the request's own earlier
chunks plus the hit it had at its first chunk. Summed over batches, the plain total
therefore counts a long prompt's earlier chunks again at every later chunk (on the
Mooncake trace 262 M "cached" tokens against 145 M prompt tokens at a 21.7 % hit rate).

:func:`split_cached` splits one step's total three ways, so every batch row reads
``cached_tokens = device_hit_tokens + host_hit_tokens + carried_prefix_tokens``:

- ``device_hit_tokens``: prefix of first chunks found in the device cache;
- ``host_hit_tokens``: prefix of first chunks loaded back from the host tier;
- ``carried_prefix_tokens``: the whole prefix of continuations (the chunk's carried
  prefix, no new cache hit).

Summed over a run, the hit columns equal the requests' own hit tokens (``requests.csv``
``device_hit_tokens`` / ``host_hit_tokens``) except that a requeued request's
re-prefill counts its hit again (the request row keeps its first admission's).
Nothing here changes admission: the split is read from the step's per-request
``prefix_len``, ``loaded_tokens`` and whether the request was mid-chunk before the step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefillkit.sched.interface import StepOutput

__all__ = ["CACHED_COLUMNS", "CachedSplit", "cached_totals", "split_cached"]

#: The batch columns of the split, in ``batches.csv`` order (after ``cached_tokens``).
CACHED_COLUMNS: tuple[str, ...] = (
    "device_hit_tokens",
    "host_hit_tokens",
    "carried_prefix_tokens",
)


@dataclass(frozen=True, slots=True, init=False)
class CachedSplit:
    device_hit_tokens: int = 0
    host_hit_tokens: int = 0
    carried_prefix_tokens: int = 0

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self, device_hit_tokens: int = 0, host_hit_tokens: int = 0, carried_prefix_tokens: int = 0
    ) -> None:
        object.__setattr__(self, "device_hit_tokens", device_hit_tokens)
        object.__setattr__(self, "host_hit_tokens", host_hit_tokens)
        object.__setattr__(self, "carried_prefix_tokens", carried_prefix_tokens)

    @property
    def total(self) -> int:
        return self.device_hit_tokens + self.host_hit_tokens + self.carried_prefix_tokens


def split_cached(step: StepOutput, mid_chunk: set[str]) -> CachedSplit:
    """The split of ``step``'s cached tokens.

    ``mid_chunk`` holds the ids of the requests whose last forward was a chunk (their
    prompt not complete yet): a request of ``step`` in it is a continuation. It is
    updated in place for the next step (a request whose forward in ``step`` is a chunk
    joins it, the others leave it), so an engine keeps one set for the whole run and
    calls this once per step, in order.
    """
    device = host = carried = 0
    for s in step.reqs:
        if s.rid in mid_chunk:
            carried += s.prefix_len
        else:
            host += s.loaded_tokens
            device += s.prefix_len - s.loaded_tokens
        if s.is_chunk:
            mid_chunk.add(s.rid)
        else:
            mid_chunk.discard(s.rid)
    return CachedSplit(device, host, carried)


def cached_totals(batches: Iterable[Any], prompt_tokens: int | None = None) -> dict[str, Any]:
    """Run totals of the split over batch records (objects or rows with the columns).

    Keys: ``batch_cached_tokens`` (the plain sum), ``batch_device_hit_tokens``,
    ``batch_host_hit_tokens``, ``batch_carried_prefix_tokens`` and, with
    ``prompt_tokens``, ``prompt_tokens``.
    """
    dev = host = carried = total = 0
    for b in batches:
        get = b.get if isinstance(b, Mapping) else lambda k, _b=b: getattr(_b, k)
        dev += int(get("device_hit_tokens") or 0)
        host += int(get("host_hit_tokens") or 0)
        carried += int(get("carried_prefix_tokens") or 0)
        total += int(get("cached_tokens") or 0)
    out: dict[str, Any] = {}
    if prompt_tokens is not None:
        out["prompt_tokens"] = prompt_tokens
    out.update(
        batch_cached_tokens=total,
        batch_device_hit_tokens=dev,
        batch_host_hit_tokens=host,
        batch_carried_prefix_tokens=carried,
    )
    return out
