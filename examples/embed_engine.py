"""A toy engine embedding prefillkit's scheduler through its typed interface only.

The "executor" writes each request's id into a page-indexed KV array and checks that
no page is ever used by two live requests, that prefix pages hold what the prefix's
owner wrote, and that every page is back on the free lists at the end.
Run: python examples/embed_engine.py
"""

from __future__ import annotations

import random

from prefillkit.config import Config
from prefillkit.request import Request
from prefillkit.sched.interface import SchedulerInterface
from prefillkit.sched.scheduler import Scheduler

PAGE, PAGES = 4, 96


def main(n_requests: int = 40, seed: int = 0) -> None:
    rng = random.Random(seed)
    cfg = Config(page_size=PAGE, max_prefill_tokens=64, chunked_prefill_size=32)
    sched = Scheduler(cfg, PAGES, PAGE)
    engine: SchedulerInterface = sched  # everything below goes through the interface
    # page id -> (request, sequence page index) whose KV it holds
    kv: list[tuple[str, int] | None] = [None] * PAGES
    prompts = [[rng.randrange(50) for _ in range(8)] for _ in range(3)]  # shared prefixes
    for i in range(n_requests):
        tokens = rng.choice(prompts) + [rng.randrange(1000) for _ in range(rng.randrange(1, 60))]
        engine.add_request(Request.from_tokens(f"r{i}", tokens, page_size=PAGE, max_new_tokens=4))
    live: dict[str, list[int]] = {}  # rid -> pages its forwards wrote
    now = 0.0
    while engine.has_work:
        step = engine.schedule(now)
        for s in step.reqs:
            for j, pid in enumerate(s.prefix_pages):  # holds what the prefix's owner wrote
                held = kv[pid]
                assert held is not None and held[1] == j, f"{s.rid}: prefix page {pid}: {held}"
            first = len(s.prefix_pages)
            for j, pid in enumerate(s.new_pages, first):
                held = kv[pid]
                assert held is None or held[0] not in live or held[0] == s.rid, (pid, held)
                kv[pid] = (s.rid, j)
            live.setdefault(s.rid, []).extend(s.new_pages)
        now += 1.0
        for req in engine.forward_done(step, now):
            engine.finish(req, now)  # pd-prefill: KV sent out at once
            # Pages the cache keeps stay as written; pages freed now become reusable.
            del live[req.rid]
        engine.check()
    assert not live, f"requests never finished: {sorted(live)}"
    pool = sched.pool
    assert pool.owned == [0] * pool.cp_size, "a request kept pages"
    sched.cache.evict_tokens(PAGES * PAGE)  # drop the cache: every page back to free
    engine.check()  # (the two lines above read the pool/cache only to audit the end)
    assert pool.free_total == PAGES, f"{PAGES - pool.free_total} pages leaked"
    print(f"ok: {n_requests} requests, {PAGES} pages all free again")


if __name__ == "__main__":
    main()
