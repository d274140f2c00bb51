"""Randomised pre-pass states of SGLang's real scheduler on CPU, for the differentials.

A state is built from a seed alone (:func:`build_state`), so building it twice gives two
schedulers in the same state: one stock, one with the plugin. Each state is made the way a
server gets there, with SGLang's own calls: earlier passes (``_get_new_batch_prefill_raw``)
whose requests are released into the radix tree (``release_kv_cache``: cached prefixes)
or kept running with some output (the running decode batch, holding KV and a decode
reservation), a long request left mid-chunk (``checkpoint_kv_cache`` before the pass, as
``get_next_batch_to_run`` does), a small KV pool (allocator pressure: the tree's LRU
evicts), and a waiting queue of requests that share prefixes with the tree and with each
other. Page 1, 16 and 64; fcfs, lpm and dfs-weight.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sglang.srt.managers.schedule_batch import FINISH_LENGTH, ScheduleBatch
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

from prefillkit.integrations.sglang.harness import (
    HarnessConfig,
    build_scheduler,
    make_req,
)

PAGES = (1, 16, 64)
POLICIES = ("fcfs", "lpm", "dfs-weight")


@dataclass(frozen=True)
class StateSpec:
    seed: int
    page_size: int
    policy: str
    pool_tokens: int
    chunked_prefill_size: int | None
    max_prefill_tokens: int
    running: int
    with_chunk: bool


def spec_of(seed: int) -> StateSpec:
    rng = random.Random(seed)
    page = PAGES[seed % 3]
    chunk = rng.choice([None, 512, 2048, 8192])
    return StateSpec(
        seed=seed,
        page_size=page,
        policy=POLICIES[(seed // 3) % 3],
        pool_tokens=rng.choice([4096, 8192, 16384, 65536]),
        chunked_prefill_size=chunk,
        max_prefill_tokens=rng.choice([1024, 4096, 16384]),
        running=rng.choice([0, 0, 2, 6]),
        with_chunk=chunk is not None and rng.random() < 0.4,
    )


class _Tokens:
    """Prompts over a few shared prefixes (system prompts, documents) and unique tails."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.prefixes = [
            [10_000 * (i + 1) + j for j in range(rng.choice([32, 96, 300, 700]))] for i in range(4)
        ]
        self.next_unique = 1_000_000

    def prompt(self, max_len: int) -> list[int]:
        rng = self.rng
        head: list[int] = []
        if rng.random() < 0.7:
            p = rng.choice(self.prefixes)
            head = p[: rng.randint(1, len(p))] if rng.random() < 0.3 else list(p)
        n = rng.randint(1, max_len)
        tail = list(range(self.next_unique, self.next_unique + n))
        self.next_unique += n
        return head + tail


def _run_pass(s: Any) -> Any:
    if s.chunked_req is not None:
        checkpoint_kv_cache(s.chunked_req, s.tree_cache)
    batch, s.running_batch = s._get_new_batch_prefill_raw(None, s.running_batch)
    return batch


def _release(s: Any, req: Any) -> None:
    req.finished_reason = FINISH_LENGTH(length=0)
    release_kv_cache(req, s.tree_cache, checkpoint=True)


def _history(s: Any, spec: StateSpec, tokens: _Tokens, rng: random.Random) -> None:
    """Earlier passes: cached prefixes in the tree; ``spec.running`` requests kept."""
    kept: list[Any] = []
    for i in range(rng.randint(2, 8)):
        s.waiting_queue.append(make_req(f"h{i}", tokens.prompt(600), rng.randint(1, 256)))
    for _ in range(12):
        if not s.waiting_queue and s.chunked_req is None:
            break
        batch = _run_pass(s)
        if batch is None:
            break
        for req in batch.reqs:
            if req is s.chunked_req:
                continue
            if len(kept) < spec.running:
                req.output_ids.extend(
                    range(rng.randint(0, min(200, req.sampling_params.max_new_tokens - 1) or 0))
                )
                kept.append(req)
            else:
                _release(s, req)
    if s.chunked_req is not None:  # finish it off: no chunk unless the spec asks for one
        while s.chunked_req is not None:
            batch = _run_pass(s)
            for req in batch.reqs if batch is not None else []:
                if req is not s.chunked_req:
                    _release(s, req)
    s.running_batch = ScheduleBatch(reqs=kept, batch_is_full=False)


def _chunk(s: Any, spec: StateSpec, tokens: _Tokens, rng: random.Random) -> None:
    """A long request cut into a chunk by a pass of its own (left mid-prefill)."""
    assert spec.chunked_prefill_size is not None
    # NOTE: prompts stay below the context length (16,384: SGLang's tokenizer manager
    # refuses longer ones before they reach the scheduler).
    n = min(
        spec.chunked_prefill_size + rng.randint(spec.page_size, 3 * spec.chunked_prefill_size),
        14_000,
    )
    req = make_req("chunked", tokens.prompt(n), rng.randint(1, 128))
    s.waiting_queue.insert(0, req)
    batch = _run_pass(s)
    if batch is None:
        s.waiting_queue.remove(req)
        return
    for r in batch.reqs:
        if r is not s.chunked_req:
            s.running_batch.reqs.append(r)


def build_state(spec: StateSpec, *, queue_len: int | None = None) -> Any:
    """SGLang's ``Scheduler`` in the pre-pass state of ``spec`` (its waiting queue set)."""
    rng = random.Random(spec.seed * 7919 + 1)
    cfg = HarnessConfig(
        page_size=spec.page_size,
        pool_tokens=spec.pool_tokens,
        max_running_requests=rng.choice([8, 32, 256]),
        max_context_len=16_384,
        schedule_policy=spec.policy,
        chunked_prefill_size=spec.chunked_prefill_size,
        max_prefill_tokens=spec.max_prefill_tokens,
        new_token_ratio=rng.choice([0.7, 0.3, 1.0]),
    )
    s = build_scheduler(cfg)
    tokens = _Tokens(rng)
    _history(s, spec, tokens, rng)
    if spec.with_chunk:
        _chunk(s, spec, tokens, rng)
    n = queue_len if queue_len is not None else rng.randint(1, 40)
    for i in range(n):
        s.waiting_queue.append(
            make_req(f"w{i}", tokens.prompt(rng.choice([64, 600, 3000])), rng.randint(1, 1024))
        )
    return s


def outcome(s: Any) -> dict[str, Any]:
    """One pass's decisions and what they left: admitted requests with their prefix and
    extend, the chunked request, the order of the queue, whether the batch is full, the
    allocator's free tokens and the tree's evictable / protected sizes."""
    batch = _run_pass(s)
    admitted = [] if batch is None else [(r.rid, r.prefix_len, r.extend_end) for r in batch.reqs]
    return {
        "admitted": admitted,
        "chunked": None if s.chunked_req is None else s.chunked_req.rid,
        "queue": [r.rid for r in s.waiting_queue],
        "batch_is_full": bool(s.running_batch.batch_is_full),
        "available": int(s.token_to_kv_pool_allocator.available_size()),
        "evictable": int(s.tree_cache.evictable_size()),
        "protected": int(s.tree_cache.protected_size()),
    }
