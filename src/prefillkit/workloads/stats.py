"""Summary statistics of a workload, including its ideal prefix-cache hit rate.

Ideal hit rate (infinite cache, as the traces README defines it): requests are replayed
in order; block ``i`` of a request hits iff the prefix ``hash_ids[0..i]`` appeared in an
earlier request -- longest-prefix matching against a trie of all earlier requests. It is
reported four ways: block level or token weighted (a partial last block weighs its real
tokens), each counting a repeated partial last block as a hit (the trace convention) or
never sharing a partial last block.

Records with token ids are cut into ``token_block_size``-token blocks identified by a
chained xxh3 hash; records with neither hash ids nor tokens never hit (their blocks are
counted with ``token_block_size`` as well). ``trace-stats`` and ``generate``'s note both
pass :data:`TOKEN_BLOCK_SIZE` (unless ``trace-stats --page-size`` says otherwise), so they
report one figure for one file.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import xxhash

from prefillkit.request import token_key_chain
from prefillkit.text import lazy_module
from prefillkit.workloads.record import TraceRecord

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = ["TOKEN_BLOCK_SIZE", "LengthStats", "TraceStats", "prefix_block_ids", "trace_stats"]

#: Tokens per block of a token-id prompt: ``trace-stats --page-size``'s default (64, the
#: KV page size of the replays).
TOKEN_BLOCK_SIZE = 64


@dataclass(frozen=True, slots=True)
class LengthStats:
    """Distribution of a length (numpy ``percentile``, linear interpolation)."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: int
    min: int

    @classmethod
    def of(cls, values: Sequence[int]) -> LengthStats:
        if not values:
            return cls(math.nan, math.nan, math.nan, math.nan, 0, 0)
        a = np.asarray(values, dtype=np.float64)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(
            mean=float(a.mean()),
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
            max=int(a.max()),
            min=int(a.min()),
        )


@dataclass(frozen=True, slots=True)
class TraceStats:
    """Summary of a workload. Hit rates are fractions in [0, 1]."""

    num_requests: int
    span_s: float  # last arrival - first arrival
    mean_rate: float  # num_requests / span_s (inf if span is 0)
    input_len: LengthStats
    output_len: LengthStats
    blocks_per_request: LengthStats
    total_blocks: int
    total_tokens: int  # sum of input lengths
    distinct_blocks: int  # trie nodes: footprint of an infinite cache
    num_with_prefix_info: int  # records with hash ids or tokens
    block_hit_rate: float  # repeated partial last block counts (Mooncake: 36.64 %)
    block_hit_rate_no_partial: float  # partial last block never shared (36.60 %)
    token_hit_rate: float  # token weighted (37.36 %)
    token_hit_rate_no_partial: float  # token weighted, no partial sharing (37.34 %)
    requests_with_hit: int  # at least one hit block
    requests_all_hit: int  # every block hits

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prefix_block_ids(rec: TraceRecord, token_block_size: int) -> tuple[Sequence[int], int] | None:
    """``(block ids, block size)`` describing ``rec``'s prompt, or None without prefix info.

    Hash-id records give their ids; token records are cut into ``token_block_size``
    blocks, each named by a hash chained on the previous one (the partial tail included).
    """
    if rec.hash_ids is not None:
        assert rec.block_size is not None
        return rec.hash_ids, rec.block_size
    if rec.tokens is not None:
        ids = token_key_chain(rec.tokens, token_block_size)
        tail = rec.tokens[len(ids) * token_block_size :]
        if tail:
            prev = ids[-1] if ids else 0
            ids.append(xxhash.xxh3_64_intdigest(array("I", tail).tobytes(), prev))
        return ids, token_block_size
    return None


def trace_stats(records: Iterable[TraceRecord], *, token_block_size: int = 512) -> TraceStats:
    """Statistics of ``records`` (consumed once, in order); see the module docstring."""
    if token_block_size <= 0:
        raise ValueError(f"token_block_size must be > 0, got {token_block_size}")
    # Trie of all earlier prefixes: (parent node, block id) -> node. One root per
    # (kind, block size) so ids of different origins never match each other.
    trie: dict[tuple[int, int], int] = {}
    roots: dict[tuple[bool, int], int] = {}
    n_nodes = 0

    inputs: list[int] = []
    outputs: list[int] = []
    blocks: list[int] = []
    first_t = last_t = 0.0
    n_prefix = 0
    hit_b = hit_b_full = 0
    hit_t = hit_t_full = 0
    total_t = 0
    with_hit = all_hit = 0

    for rec in records:
        if not inputs:
            first_t = rec.arrival_s
        last_t = rec.arrival_s
        inputs.append(rec.input_len)
        outputs.append(rec.output_len)
        total_t += rec.input_len
        got = prefix_block_ids(rec, token_block_size)
        if got is None:
            blocks.append(-(-rec.input_len // token_block_size))
            continue
        n_prefix += 1
        ids, bs = got
        n = len(ids)
        blocks.append(n)
        root_key = (rec.hash_ids is not None, bs)
        node = roots.get(root_key)
        if node is None:
            node = roots[root_key] = -1 - len(roots)
        tail_tokens = rec.input_len - (n - 1) * bs  # tokens in the last block
        hits = 0
        matching = True
        for i, h in enumerate(ids):
            key = (node, h)
            child = trie.get(key) if matching else None
            if child is None:
                matching = False
                n_nodes += 1
                trie[key] = node = n_nodes
                continue
            node = child
            hits += 1
            is_last = i == n - 1
            w = tail_tokens if is_last else bs
            hit_b += 1
            hit_t += w
            if not (is_last and tail_tokens < bs):
                hit_b_full += 1
                hit_t_full += w
        if hits:
            with_hit += 1
            if hits == n:
                all_hit += 1

    n_req = len(inputs)
    total_b = sum(blocks)
    span = last_t - first_t

    def frac(a: int, b: int) -> float:
        return a / b if b else 0.0

    return TraceStats(
        num_requests=n_req,
        span_s=span,
        mean_rate=(n_req / span) if span > 0 else math.inf,
        input_len=LengthStats.of(inputs),
        output_len=LengthStats.of(outputs),
        blocks_per_request=LengthStats.of(blocks),
        total_blocks=total_b,
        total_tokens=total_t,
        distinct_blocks=n_nodes,
        num_with_prefix_info=n_prefix,
        block_hit_rate=frac(hit_b, total_b),
        block_hit_rate_no_partial=frac(hit_b_full, total_b),
        token_hit_rate=frac(hit_t, total_t),
        token_hit_rate_no_partial=frac(hit_t_full, total_t),
        requests_with_hit=with_hit,
        requests_all_hit=all_hit,
    )
