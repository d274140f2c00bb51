# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""How one prefill forward's work splits over the context-parallel ranks.

The page-aligned CP split of :mod:`prefillkit.sched.cp_split` (page ``j`` of a sequence
on rank ``j mod R``, the function the buffer estimator also uses): per rank, the query
rows, the attention keys (causal; capped at ``index_topk`` on DSA/NSA sparse models) and
the keys the DSA indexer scans (every causal key, in requests whose context exceeds the
dense threshold). Pure and hot (one call per forward): compiled with the rest of the
event loop (setup.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from prefillkit.sched.buffer import ReqShape
from prefillkit.sched.cp_split import add_lane_span

__all__ = ["rank_work"]


def rank_work(
    batch: Sequence[ReqShape], cp_size: int, page_size: int, topk: int, threshold: int
) -> tuple[list[int], list[int], list[int]]:
    """Per attention rank: query rows, attention keys and indexer keys of ``batch``.

    One :func:`add_lane_span` per request, two when a sparse model's extend straddles
    ``index_topk``: rows below the cap attend their causal keys, rows at or above it
    attend exactly ``index_topk``; the indexer scans every row's causal keys in
    requests whose context exceeds ``sparse_dense_threshold``.
    """
    r = cp_size
    page = page_size if r > 1 else 1
    if not topk:
        return _dense_rank_work(batch, r, page)
    if len(batch) == 1:  # the common bs = 1 forward: one span, lanes derived from it
        req = batch[0]
        p, e = req.prefix_len, req.extend_len
        end = p + e
        if e > 0 and (p >= topk or end <= topk):
            rq = [0] * r
            kq = [0] * r
            add_lane_span(rq, kq, p, end, page)
            attn = [topk * x for x in rq] if p >= topk else kq
            return rq, attn, (kq if end > threshold else [0] * r)
    low_rows = [0] * r  # rows below the top-k cap, requests without the indexer
    low_keys = [0] * r
    low_rows_i = [0] * r  # rows below the cap, requests with the indexer
    low_keys_i = [0] * r
    high_rows = [0] * r  # rows at or above the cap, requests with the indexer
    high_keys = [0] * r
    high_rows_n = [0] * r  # rows at or above the cap, without (threshold > topk)
    for req in batch:
        p, e = req.prefix_len, req.extend_len
        if p < 0 or e < 0:
            raise ValueError(f"negative ReqShape field: {req}")
        if e == 0:
            continue
        end = p + e
        indexer = end > threshold
        if p < topk:
            if indexer:
                add_lane_span(low_rows_i, low_keys_i, p, min(end, topk), page)
            else:
                add_lane_span(low_rows, low_keys, p, min(end, topk), page)
        if end > topk:
            if indexer:
                add_lane_span(high_rows, high_keys, max(p, topk), end, page)
            else:
                add_lane_span(high_rows_n, None, max(p, topk), end, page)
    lanes = range(r)
    rows = [low_rows[i] + low_rows_i[i] + high_rows[i] + high_rows_n[i] for i in lanes]
    attn = [low_keys[i] + low_keys_i[i] + topk * (high_rows[i] + high_rows_n[i]) for i in lanes]
    idx = [low_keys_i[i] + high_keys[i] for i in lanes]
    return rows, attn, idx


def _dense_rank_work(
    batch: Sequence[ReqShape], r: int, page: int
) -> tuple[list[int], list[int], list[int]]:
    """:func:`rank_work` of a dense model: every row attends its causal keys, no indexer."""
    rows = [0] * r
    attn = [0] * r
    for req in batch:
        p, e = req.prefix_len, req.extend_len
        if p < 0 or e < 0:
            raise ValueError(f"negative ReqShape field: {req}")
        add_lane_span(rows, attn, p, p + e, page)
    return rows, attn, [0] * r
