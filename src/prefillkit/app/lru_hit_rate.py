"""The hit rate of a size-limited LRU prefix cache over a trace (``prefillkit
trace-stats --lru-cache-tokens``): the requests replayed in order through prefillkit's own
prefix cache, without concurrency or a host tier."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefillkit.app.replay import InputError
from prefillkit.cache import KVPool, PrefixCache
from prefillkit.request import Request
from prefillkit.sim.sizing import key_tokens_of

__all__ = ["LruHitRate", "lru_hit_rate"]


@dataclass(frozen=True, slots=True)
class LruHitRate:
    """Hit rate of a size-limited LRU prefix cache (see :func:`lru_hit_rate`): token
    weighted (``hit_rate``) and, when the requests' block sizes were given, block weighted
    (``block_hit_rate``, as ``trace-stats``' ideal hit rate)."""

    cache_tokens: int
    page_size: int
    key_tokens: int
    hit_tokens: int
    total_tokens: int
    oversized_requests: int  # requests larger than the whole cache (all misses)
    hit_blocks: int = 0
    total_blocks: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.total_tokens if self.total_tokens else 0.0

    @property
    def block_hit_rate(self) -> float:
        return self.hit_blocks / self.total_blocks if self.total_blocks else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "cache_tokens": self.cache_tokens,
            "page_size": self.page_size,
            "key_tokens": self.key_tokens,
            "hit_rate": self.hit_rate,
            "hit_tokens": self.hit_tokens,
            "total_tokens": self.total_tokens,
            "block_hit_rate": self.block_hit_rate,
            "hit_blocks": self.hit_blocks,
            "total_blocks": self.total_blocks,
            "oversized_requests": self.oversized_requests,
        }


def lru_hit_rate(
    requests: Sequence[Request],
    cache_tokens: int,
    page_size: int,
    block_tokens: Sequence[int] | None = None,
) -> LruHitRate:
    """Replay ``requests`` in order through an LRU prefix cache of ``cache_tokens`` tokens.

    Per request: match its whole key chain, lock the match, allocate pages for the missing
    key units (evicting LRU entries), insert them and unlock. A request whose missing
    units do not fit even in an empty-enough cache counts all its misses and is not
    inserted. ``hit_rate`` is token weighted: matched units × key-unit tokens over all
    prompt tokens (a partial last unit never hits). With ``block_tokens`` (each request's
    block size: its hash blocks', else the page size) the hits are also counted in blocks:
    ``block_hit_rate`` is matched blocks over ``ceil(input / block)`` blocks, the
    weighting of ``trace-stats``' ideal hit rate (a matched key unit is ``key_tokens /
    block`` blocks). No host tier, no concurrency.
    """
    pages = cache_tokens // page_size
    if pages < 1:
        raise InputError(
            f"--lru-cache-tokens: {cache_tokens} is less than one page of {page_size} tokens"
        )
    key_tokens = key_tokens_of(list(requests), page_size)
    cache = PrefixCache(KVPool(pages, page_size, 1), key_tokens)
    unit_pages = cache.unit_pages
    hit = total = oversized = hit_blocks = total_blocks = 0
    for i, req in enumerate(requests):
        total += req.state.input_len
        block = 0 if block_tokens is None else block_tokens[i]
        if block:
            total_blocks += -(-req.state.input_len // block)
        keys = req.keys
        units = len(keys)
        if units == 0:
            continue
        m = cache.match(keys, units)
        hit += m.units * key_tokens
        if block:
            hit_blocks += m.units * key_tokens // block
        node = cache.lock(m.node, m.units)
        cache.commit()  # NOTE: a use: the unlock below refreshes LRU order even on a full hit
        if m.units < units:
            lanes = cache.alloc_pages(m.units * unit_pages, (units - m.units) * unit_pages)
            if lanes is None:
                oversized += 1
                cache.unlock(node)
                continue
            node = cache.insert(node, keys, m.units, units)
        cache.unlock(node)
    return LruHitRate(
        cache_tokens, page_size, key_tokens, hit, total, oversized, hit_blocks, total_blocks
    )
