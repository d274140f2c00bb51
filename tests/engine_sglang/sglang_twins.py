"""One admission state built twice: in SGLang's real scheduler (with the plugin) and in
prefillkit's standalone scheduler, for the feature differentials.

The state: prompts cached in the tree (SGLang: run through a pass and released, the way a
finished request leaves them; prefillkit: ``seed_cached_prefix``), then a waiting queue of
requests with arrival times (SGLang: ``time_stats.wait_queue_entry_time`` = arrival +
``OFFSET``, its clock now + ``OFFSET``, because SGLang reads 0.0 as unset). The pool is
large (no memory pressure, where the two differ by documented deviations), no running
decode requests, no chunk in flight. A pass's decisions on each side: the admitted
``(rid, prefix_len, extend_end)`` in order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sglang.srt.managers.schedule_batch import FINISH_LENGTH
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

from prefillkit.integrations.sglang.harness import HarnessConfig, build_scheduler, make_req
from prefillkit.integrations.sglang.plugin import install_on
from prefillkit.integrations.sglang.settings import PluginSettings
from prefillkit.models import ModelSpec
from prefillkit.request import Request
from prefillkit.sched.buffer import BufferEstimatorContext
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.interface import build_scheduler as build_standalone
from prefillkit.sched.seeding import seed_cached_prefix

OFFSET = 1000.0
POOL_TOKENS = 1 << 20


@dataclass
class Twin:
    """The state's inputs: cached prompts, waiting prompts with arrival and max_new."""

    page_size: int
    cached: list[list[int]] = field(default_factory=list)
    waiting: list[tuple[str, list[int], float, int]] = field(default_factory=list)


def random_twin(seed: int, page_size: int) -> Twin:
    """Warm requests extend one of a few cached prefixes; cold ones share nothing."""
    rng = random.Random(seed)
    tw = Twin(page_size)
    heads = [[50_000 * (i + 1) + j for j in range(rng.choice([64, 256, 1024]))] for i in range(3)]
    tw.cached = [[*h, 7_000_000 + 1000 * i] for i, h in enumerate(heads)]
    unique = 10_000_000
    for i in range(rng.randint(2, 24)):
        n = rng.choice([16, 200, 1500, 5000])
        tail = list(range(unique, unique + n))
        unique += n
        prompt = (rng.choice(heads) + tail) if rng.random() < 0.55 else tail
        tw.waiting.append((f"q{i}", prompt, round(rng.uniform(0.0, 10.0), 3), rng.randint(1, 512)))
    tw.waiting.sort(key=lambda w: w[2])
    return tw


def sglang_side(
    tw: Twin, settings: PluginSettings, cfg: SchedulerConfig, *, cp_active: bool
) -> tuple[Any, list[float]]:
    """SGLang's scheduler in the state, with the plugin (clock: the list's one value)."""
    s = build_scheduler(
        HarnessConfig(
            page_size=tw.page_size,
            pool_tokens=POOL_TOKENS,
            max_running_requests=256,
            max_context_len=16_384,
            schedule_policy=cfg.schedule_policy,
            chunked_prefill_size=cfg.chunked_prefill_size,
            max_prefill_tokens=cfg.max_prefill_tokens,
        )
    )
    for i, prompt in enumerate(tw.cached):
        s.waiting_queue.append(make_req(f"c{i}", prompt, 1))
        while s.waiting_queue or s.chunked_req is not None:
            sglang_pass(s, release=True)
    now = [0.0]
    install_on(s, settings, lambda: now[0] + OFFSET, cp_size=cfg.cp_size if cp_active else 1)
    for rid, prompt, arrival, max_new in tw.waiting:
        s.waiting_queue.append(make_req(rid, prompt, max_new, queue_entry_time=arrival + OFFSET))
    return s, now


def sglang_pass(s: Any, *, release: bool) -> list[tuple[str, int, int]]:
    """One pass; with ``release`` the completed requests go into the tree (as after
    their forward); the chunked one is checkpointed before the next pass."""
    if s.chunked_req is not None:
        checkpoint_kv_cache(s.chunked_req, s.tree_cache)
    batch, s.running_batch = s._get_new_batch_prefill_raw(None, s.running_batch)
    if batch is None:
        return []
    out = [(r.rid, r.prefix_len, r.extend_end) for r in batch.reqs]
    if release:
        for r in batch.reqs:
            if r is not s.chunked_req:
                r.finished_reason = FINISH_LENGTH(length=0)
                release_kv_cache(r, s.tree_cache, checkpoint=True)
    return out


def standalone_side(tw: Twin, cfg: SchedulerConfig, buffer_model: ModelSpec | None = None) -> Any:
    """prefillkit's scheduler in the same state (pd-prefill: no decode reservation; the
    CP buffer estimator over ``buffer_model``, bf16 KV)."""
    ctx = None
    if buffer_model is not None:
        ctx = BufferEstimatorContext(buffer_model, "bf16", cfg.cp_size, tw.page_size)
    sched = build_standalone(
        cfg, POOL_TOKENS // tw.page_size, tw.page_size, reserve_decode=False, buffer_ctx=ctx
    )
    for i, prompt in enumerate(tw.cached):
        seed_cached_prefix(sched, Request.from_tokens(f"c{i}", prompt, page_size=tw.page_size))
    for rid, prompt, arrival, max_new in tw.waiting:
        req = Request.from_tokens(
            rid, prompt, page_size=tw.page_size, arrival_time=arrival, max_new_tokens=max_new
        )
        assert sched.add_request(req) is None
    return sched


def standalone_pass(sched: Any, now: float) -> list[tuple[str, int, int]]:
    """One pass at ``now``; the forward completes and its requests finish at once."""
    step = sched.schedule(now)
    out = [(r.rid, r.prefix_len, r.extend_end) for r in step.reqs]
    if step.reqs:
        for req in sched.forward_done(step, now):
            sched.finish(req, now)
    return out
