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
from dataclasses import asdict, dataclass, field
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
    tally = _Tally()
    for rec in records:
        tally.add(rec, token_block_size)
    return tally.stats()


def _frac(a: int, b: int) -> float:
    return a / b if b else 0.0


@dataclass(slots=True)
class _Tally:
    """What :func:`trace_stats` counts, one record at a time."""

    # Trie of all earlier prefixes: (parent node, block id) -> node. One root per
    # (kind, block size) so ids of different origins never match each other.
    trie: dict[tuple[int, int], int] = field(default_factory=dict)
    roots: dict[tuple[bool, int], int] = field(default_factory=dict)
    n_nodes: int = 0
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    first_t: float = 0.0
    last_t: float = 0.0
    n_prefix: int = 0
    hit_b: int = 0
    hit_b_full: int = 0
    hit_t: int = 0
    hit_t_full: int = 0
    total_t: int = 0
    with_hit: int = 0
    all_hit: int = 0

    def add(self, rec: TraceRecord, token_block_size: int) -> None:
        """Count ``rec``, the next record in order."""
        if not self.inputs:
            self.first_t = rec.arrival_s
        self.last_t = rec.arrival_s
        self.inputs.append(rec.input_len)
        self.outputs.append(rec.output_len)
        self.total_t += rec.input_len
        got = prefix_block_ids(rec, token_block_size)
        if got is None:
            self.blocks.append(-(-rec.input_len // token_block_size))
            return
        self.n_prefix += 1
        ids, bs = got
        n = len(ids)
        self.blocks.append(n)
        root_key = (rec.hash_ids is not None, bs)
        node = self.roots.get(root_key)
        if node is None:
            node = self.roots[root_key] = -1 - len(self.roots)
        tail_tokens = rec.input_len - (n - 1) * bs  # tokens in the last block
        hits = self._match(node, ids, bs, tail_tokens)
        if hits:
            self.with_hit += 1
            if hits == n:
                self.all_hit += 1

    def _match(self, node: int, ids: Sequence[int], bs: int, tail_tokens: int) -> int:
        """Walk ``ids`` down the trie from ``node``, adding the blocks past the longest
        earlier prefix and counting the hit blocks (block level and token weighted, with
        and without a partial last block); returns how many blocks hit."""
        trie = self.trie
        n = len(ids)
        n_nodes = self.n_nodes
        hit_b = hit_b_full = hit_t = hit_t_full = 0
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
        self.n_nodes = n_nodes
        self.hit_b += hit_b
        self.hit_b_full += hit_b_full
        self.hit_t += hit_t
        self.hit_t_full += hit_t_full
        return hits

    def stats(self) -> TraceStats:
        """The statistics of the records counted so far."""
        n_req = len(self.inputs)
        total_b = sum(self.blocks)
        span = self.last_t - self.first_t
        return TraceStats(
            num_requests=n_req,
            span_s=span,
            mean_rate=(n_req / span) if span > 0 else math.inf,
            input_len=LengthStats.of(self.inputs),
            output_len=LengthStats.of(self.outputs),
            blocks_per_request=LengthStats.of(self.blocks),
            total_blocks=total_b,
            total_tokens=self.total_t,
            distinct_blocks=self.n_nodes,
            num_with_prefix_info=self.n_prefix,
            block_hit_rate=_frac(self.hit_b, total_b),
            block_hit_rate_no_partial=_frac(self.hit_b_full, total_b),
            token_hit_rate=_frac(self.hit_t, self.total_t),
            token_hit_rate_no_partial=_frac(self.hit_t_full, self.total_t),
            requests_with_hit=self.with_hit,
            requests_all_hit=self.all_hit,
        )
