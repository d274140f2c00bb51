"""Depth and queue-length paths (issue 16 items 4 and 6): wall times, printed.

1. **Deep chain**: one session of N growing turns (default 8,000): turn t's prompt is
   the previous prompt plus one 64-token block (keys chained from block ids), 1 output
   token, turns 0.5 s apart so that at most one request waits; llama-3.1-8b TP 1, page
   64, pd-prefill, the default cost model. The tree is one chain N nodes deep: every
   lock, unlock and dfs-weight pass used to walk it to the root.
2. **50,000 waiting**: the queue of ``tests/test_extremes.py`` (50,000 requests at
   t = 0, 50 groups sharing a 4-unit prefix, page 16), one ordering pass
   (``policy.order_waiting``) timed on the queue as it stands after the first
   admission pass, and the whole replay, under fcfs and lpm, with the default wait
   bound (5 s) and with it off.

Run: ``PYTHONPATH=src python benchmarks/bench_paths.py [--turns 8000] [--queue 50000]
[--skip-replay]``. The imported ``prefillkit`` is the one on ``PYTHONPATH``, so the
same script times an older tree (``cd OLD && PYTHONPATH=src python NEW/benchmarks/...``).
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import time
from itertools import islice

from prefillkit.app.settings import Config
from prefillkit.cost.linear import LinearCostModel
from prefillkit.request import Request, block_key_chain
from prefillkit.sched.policy import order_waiting
from prefillkit.sim.engine import Engine

BLOCK = 64


def deep_chain(turns: int) -> list[Request]:
    out: list[Request] = []
    for t in range(turns):
        n = (t + 1) * BLOCK
        keys = block_key_chain(list(range(t + 1)), n, BLOCK, BLOCK)
        out.append(Request(f"t{t}", t * 0.5, n, 1, keys, BLOCK))
    return out


def time_deep(turns: int, policy: str) -> tuple[float, int]:
    cfg = Config(
        model="llama-3.1-8b",
        tp_size=1,
        page_size=BLOCK,
        max_total_tokens=(turns + 8) * BLOCK * 2,
        schedule_policy=policy,
    )
    reqs = deep_chain(turns)
    t0 = time.perf_counter()
    res = Engine(cfg.sim_settings(), reqs).run()
    wall = time.perf_counter() - t0
    assert res.summary["completed"] == turns, res.summary
    return wall, max(b.waiting_len for b in res.batches)


def LinearCost() -> LinearCostModel:
    """The cost model of tests/test_extremes.py (10 ms + 10 us per extend token)."""
    return LinearCostModel()


def big_queue(n: int) -> list[Request]:
    reqs: list[Request] = []
    for i in range(n):
        g = i % 50
        keys = [hash(("sys", g, u)) for u in range(4)] + [hash(("q", i))]
        reqs.append(Request(f"r{i}", 0.0, 80 + i % 7, 4, keys, 16))
    return reqs


def queue_cfg(policy: str, max_wait: float | None) -> Config:
    return Config(
        page_size=16,
        schedule_policy=policy,
        max_total_tokens=1_000_000,
        schedule_max_wait_s=max_wait,
    )


def time_pass(n: int, policy: str, max_wait: float | None, now: float) -> tuple[float, float]:
    """Median wall times of one ordering pass over the queue after the first batch: a
    full ``order_waiting`` and (lpm) the scheduler's kept order (``sched/lpm_order.py``)
    up to its first 64 requests, as a pass scans them (0.0 for fcfs)."""
    engine = Engine(queue_cfg(policy, max_wait).sim_settings(), big_queue(n), cost=LinearCost())
    sched = engine.sched
    for r in engine.requests:
        sched.add_request(r)
    sched.schedule(0.0)  # one admission pass: the cache holds the prefixes
    # NOTE: the scheduler's state (queue, cache, kept order); an older tree keeps it on
    # the scheduler itself.
    state = getattr(sched, "state", sched)
    waiting = list(state.waiting)
    gc.collect()
    gc.freeze()  # NOTE: as the engine loop does; else gen-2 collections dominate the figure
    full = []
    for _ in range(5):
        t0 = time.perf_counter()
        order_waiting(waiting, policy, state.cache, now=now, max_wait_s=max_wait)
        full.append(time.perf_counter() - t0)
    kept_order = getattr(state, "lpm", getattr(state, "_lpm", None))
    kept = [0.0]
    if kept_order is not None:
        cutoff = None if max_wait is None else now - max_wait
        kept = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _req in islice(kept_order.order(cutoff), 64):
                pass
            kept.append(time.perf_counter() - t0)
    return statistics.median(full), statistics.median(kept)


def time_replay(n: int, policy: str, max_wait: float | None) -> tuple[float, int]:
    engine = Engine(queue_cfg(policy, max_wait).sim_settings(), big_queue(n), cost=LinearCost())
    t0 = time.perf_counter()
    res = engine.run()
    wall = time.perf_counter() - t0
    assert res.summary["completed"] == n
    return wall, len(res.batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=8000)
    ap.add_argument("--queue", type=int, default=50_000)
    ap.add_argument("--skip-replay", action="store_true", help="only one pass of the queue")
    ap.add_argument("--skip-deep", action="store_true")
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {time.strftime('%F')}")
    if not args.skip_deep:
        for policy in ("fcfs", "dfs-weight"):
            wall, most = time_deep(args.turns, policy)
            print(
                f"deep chain, {args.turns:,} turns, {policy}: {wall:.2f} s wall "
                f"(at most {most} waiting)"
            )
    for policy, max_wait, now in (
        ("fcfs", 5.0, 0.01),
        ("lpm", None, 0.01),
        ("lpm", 5.0, 0.01),
        ("lpm", 5.0, 6.0),
    ):
        t, kept = time_pass(args.queue, policy, max_wait, now)
        print(
            f"one ordering pass, {args.queue:,} waiting, {policy}, wait bound {max_wait} s, "
            f"at t={now} s: {t * 1e3:.1f} ms full, {kept * 1e3:.3f} ms kept"
        )
    if not args.skip_replay:
        for policy, max_wait in (("fcfs", 5.0), ("lpm", 5.0), ("lpm", None)):
            wall, batches = time_replay(args.queue, policy, max_wait)
            print(
                f"replay, {args.queue:,} requests at t=0, {policy}, wait bound {max_wait} s: "
                f"{wall:.1f} s wall, {batches:,} batches"
            )


if __name__ == "__main__":
    main()
