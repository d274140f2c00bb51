"""A toy engine embedding prefillkit's scheduler through its typed interface only.

The "executor" writes each page's tokens into a page-indexed KV array and checks that no
page is ever written while another live request holds it, that every prefix page holds
exactly the tokens of the prefix it stands for (whoever computed them), and that every
page is free or cached at the end (``check``: every page is free, cached or held by a
live request, exactly once). Run: ``python examples/embed_engine.py``.
"""

from __future__ import annotations

import random

from prefillkit.request import Request
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.interface import SchedulerInterface, build_scheduler

PAGE, PAGES = 4, 96


def main(n_requests: int = 40, seed: int = 0) -> None:
    rng = random.Random(seed)
    cfg = SchedulerConfig(page_size=PAGE, max_prefill_tokens=64, chunked_prefill_size=32)
    engine: SchedulerInterface = build_scheduler(cfg, PAGES, PAGE)
    kv: list[tuple[int, ...] | None] = [None] * PAGES  # page id -> the tokens it holds
    prompts = [[rng.randrange(50) for _ in range(8)] for _ in range(3)]  # shared prefixes
    requests: dict[str, Request] = {}  # the engine's own requests, by id (a step names ids)
    live: dict[str, Request] = {}
    tokens_of: dict[str, list[int]] = {}  # the toy executor's prompts
    for i in range(n_requests):
        tokens = rng.choice(prompts) + [rng.randrange(1000) for _ in range(rng.randrange(1, 60))]
        tokens_of[f"r{i}"] = tokens
        req = requests[f"r{i}"] = Request.from_tokens(
            f"r{i}", tokens, page_size=PAGE, max_new_tokens=4
        )
        engine.add_request(req)
    now = 0.0
    while engine.has_work:
        step = engine.schedule(now)
        # Pages other live requests hold right now (cached prefixes are shared by many,
        # but never handed out as new pages while held).
        held = {pid: rid for rid, r in live.items() for pid in engine.page_table(r)}
        for s in step.reqs:
            toks = tokens_of[s.rid]
            for j, pid in enumerate(s.prefix_page_ids()):
                assert kv[pid] == tuple(toks[j * PAGE : (j + 1) * PAGE]), (s.rid, j, pid)
            for j, pid in enumerate(s.page_ids(), s.new_start_page):
                assert held.get(pid, s.rid) == s.rid, f"{s.rid} got page {pid}: {held[pid]}'s"
                held[pid] = s.rid
                kv[pid] = tuple(toks[j * PAGE : min((j + 1) * PAGE, s.extend_end)])
            live[s.rid] = requests[s.rid]
        now += 1.0
        for req in engine.forward_done(step, now):
            engine.finish(req, now)  # pd-prefill: KV sent out at once
            del live[req.rid]
        engine.check()
    # Nothing is live now: check() finds every page free or cached, none leaked.
    assert not live and engine.num_pending() == 0 and engine.decode_load() == (0, 0)
    engine.check()
    print(f"ok: {n_requests} requests, {PAGES} pages all free or cached again")


if __name__ == "__main__":
    main()
