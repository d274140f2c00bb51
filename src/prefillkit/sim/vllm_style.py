"""The vLLM engine style (``--engine-style vllm``): how a vLLM v1 engine runs the
scheduler's steps, against SGLang's (prefillkit's default).

vLLM's scheduler has no prefill and decode phases: each step gives every running request
the tokens it needs next, decoding requests one each, and the same forward carries the
new prefill chunks (vLLM's ``Scheduler.schedule``: running requests first, then the
waiting ones, under one ``max_num_batched_tokens`` budget and ``max_num_seqs``).
SGLang's colocated loop (prefillkit's default) runs a prefill batch on its own and decodes
between prefill batches.

The simulator models the difference where it changes TTFT and decode progress:

- a prefill forward also carries one decode token for every request decoding when it
  starts (its cost model prices them as extend-1 requests over their context), and those
  requests advance one token when it finishes, so decode does not stall behind prefill;
- the prefill budget and chunk are the scheduler's (``--chunked-prefill-size`` /
  ``--max-prefill-tokens`` stand for ``max_num_batched_tokens``,
  ``--max-running-requests`` for ``max_num_seqs``, docs/vllm.md).

ASSUMPTION (a stated deviation): the decode tokens ride on top of the prefill budget
instead of coming out of it; with ``max_num_seqs`` decoding requests that is at most
``max_num_seqs`` tokens of ``max_num_batched_tokens`` (256 of 8,192: 3 %).
"""

from __future__ import annotations

from prefillkit.sched.buffer import ReqShape

__all__ = ["decode_shapes"]


def decode_shapes(n_decoding: int, context_tokens: int) -> list[ReqShape]:
    """The decode tokens a vLLM-style prefill forward carries: one extend token for each
    of ``n_decoding`` requests over their mean context (``context_tokens`` in all)."""
    if n_decoding <= 0:
        return []
    return [ReqShape(context_tokens // n_decoding, 1, 0)] * n_decoding
