"""Admission hot-path benchmark: one whole admission pass over long waiting queues.

Workload: upstream SGLang's admission benchmark shape (issue 17 item 4), so that the
pass can be set beside upstream's ``PrefillAdder`` figures (:data:`UPSTREAM_MS`):
- 16 system prompts x 8 documents, each 512 + 512 tokens of token ids: 128 cached
  contexts inserted into the device cache and unlocked before timing (page 1 and 64);
- N waiting requests (100, 1,000, 5,000), each a 1,024-token context and a unique
  128-512-token suffix: 75 % a cached context, 12.5 % an uncached document under a
  cached system prompt (512-token hit), 12.5 % fully cold; max_new_tokens 256; seeded;
- 64 running decode requests holding a slot and a decode reservation (max_new_tokens
  512, 1-400 tokens generated) and one page of KV each (a 1-token prompt: the scheduler
  has no decoding request without KV; upstream's hold none), new_token_ratio 0.7;
- a 1,048,576-token pool;
- scenario "default": max_prefill_tokens 16,384, chunked_prefill_size 8,192,
  max_running_requests 1,024; scenario "wide": no prefill/chunk limits, so every waiting
  request reaches add_one_req until the pool says NO_TOKEN;
- policies fcfs, lpm (fallback off), dfs-weight.

Timed: one whole pass (ordering + matching + adding until the scan stops, plus the
post-pass page allocation: ``prefill_pass.run_pass``, what ``Scheduler.schedule`` runs
before it builds the engine's step) with requests already created (key chains computed on
arrival, outside the timer); median of 11 repeats (the issue asks for at least 7;
11 steadies the figures on a noisy 2-core VM), state rebuilt outside the timer.
Ordering alone is timed separately to give the per-waiting-request matching cost.
Each (page size, N) workload runs in its own freshly forked process, so one workload's
leftover heap does not change the memory locality of the next (measured: running N=100
first made the page-1 N=1,000 pass up to 1.9x slower in the same process).

Each row prints upstream's pass time for its cell and the speed-up over it; the last
line counts the cells at least 10x faster (issue 17's target) and names the lowest.

Run: python benchmarks/bench_admission.py [--repeats 11] [--sizes 100,1000,5000]
(the installed prefillkit: ``pip install .`` is the compiled build, setup.py; the
compiled pass cannot be wrapped, so there the ordering column times the warm re-order).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing
import platform
import random
import statistics
import time
from typing import Any
from unittest.mock import patch

from rich.console import Console
from rich.table import Table

import prefillkit
from prefillkit.cache.invariants import check_invariants
from prefillkit.request import Request, token_key_chain
from prefillkit.sched import prefill_pass
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.policy import order_waiting
from prefillkit.sched.prefill_pass import run_pass
from prefillkit.sched.scheduler import Scheduler

VOCAB = 32_000
POOL_TOKENS = 1_048_576

#: Upstream SGLang 0.5.23's pass time on this workload (issue 17's table: this machine
#: class, median of 3 interleaved rounds, ms; its lpm forced past the 128-request
#: fallback), by (page size, N, scenario): fcfs, lpm, dfs-weight.
UPSTREAM_MS: dict[tuple[int, int, str], tuple[float, float, float]] = {
    (1, 100, "default"): (2.25, 3.77, 3.50),
    (1, 100, "wide"): (4.91, 10.6, 18.5),
    (1, 1000, "default"): (1.20, 19.3, 32.7),
    (1, 1000, "wide"): (71.8, 81.3, 73.7),
    (1, 5000, "default"): (1.20, 118.0, 120.0),
    (1, 5000, "wide"): (85.2, 233.0, 224.0),
    (64, 100, "default"): (1.29, 4.37, 3.72),
    (64, 100, "wide"): (8.94, 10.7, 10.6),
    (64, 1000, "default"): (1.13, 27.1, 29.6),
    (64, 1000, "wide"): (63.9, 74.4, 58.2),
    (64, 5000, "default"): (1.17, 144.0, 155.0),
    (64, 5000, "wide"): (96.0, 253.0, 267.0),
}
POLICIES = ("fcfs", "lpm", "dfs-weight")


def rand_tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(n)]


class Workload:
    def __init__(self, page_size: int, n_waiting: int, seed: int = 0) -> None:
        rng = random.Random(seed)
        self.page_size = page_size
        systems = [rand_tokens(rng, 512) for _ in range(16)]
        self.contexts = [s + rand_tokens(rng, 512) for s in systems for _ in range(8)]
        self.context_reqs = [
            Request.from_tokens(f"ctx{i}", c, page_size=page_size, max_new_tokens=1)
            for i, c in enumerate(self.contexts)
        ]
        self.running = [
            Request.from_tokens(
                f"run{i}", rand_tokens(rng, 1), page_size=page_size, max_new_tokens=512
            )
            for i in range(64)
        ]
        self.generated = [rng.randint(1, 400) for _ in self.running]
        self.waiting: list[Request] = []
        for i in range(n_waiting):
            kind = rng.random()
            ctx = self.contexts[rng.randrange(len(self.contexts))]
            if kind < 0.75:
                head = ctx
            elif kind < 0.875:  # an uncached document under a cached system prompt
                head = ctx[:512] + rand_tokens(rng, 512)
            else:
                head = rand_tokens(rng, 1024)
            toks = head + rand_tokens(rng, rng.randint(128, 512))
            self.waiting.append(
                Request.from_tokens(
                    f"w{i}", toks, page_size=page_size, arrival_time=i * 1e-4, max_new_tokens=256
                )
            )


def make_config(page_size: int, scenario: str, policy: str) -> SchedulerConfig:
    if scenario == "default":
        limits: dict[str, object] = {
            "max_prefill_tokens": 16_384,
            "chunked_prefill_size": 8_192,
            "max_running_requests": 1_024,
        }
    else:
        limits = {
            "max_prefill_tokens": 10**9,
            "chunked_prefill_size": -1,
            "max_running_requests": 100_000,
        }
    return SchedulerConfig(
        page_size=page_size,
        schedule_policy=policy,
        lpm_fallback_queue_len=-1,
        init_new_token_ratio=0.7,
        **limits,  # type: ignore[arg-type]
    )


def build_state(w: Workload, cfg: SchedulerConfig) -> tuple[Scheduler, float]:
    """Fresh scheduler: cached contexts, 64 decoding requests, N waiting (untimed); and
    the seconds the N arrivals took (``add_request``: the first match, and under lpm the
    kept order's insertion, sched/lpm_order.py)."""
    for r in (*w.context_reqs, *w.running, *w.waiting):
        r.state.output_len = 0  # NOTE: a requeue keeps the output; each repeat starts afresh
        r.reset_for_requeue()
        r.state.locked_node = None
        r.state.affinity_skips = 0
    sched = Scheduler(cfg, POOL_TOKENS // w.page_size, w.page_size, reserve_decode=True)
    cache = sched.state.cache
    for r in w.context_reqs:
        m = cache.match(r.keys, len(r.keys))
        node = cache.lock(m.device_node, m.device_units)
        n = len(r.keys) - m.units
        assert cache.alloc_pages(m.units * cache.unit_pages, n * cache.unit_pages) is not None
        cache.unlock(cache.insert(node, r.keys, m.units, len(r.keys)))
    # Running decode requests: admit them alone, finish their prefill, start decoding.
    for r in w.running:
        sched.add_request(r)
    while sched.has_work:
        step = sched.schedule(0.0)
        assert step.reqs
        for r in sched.forward_done(step, 0.0):
            sched.start_decode(r)
    for r, generated in zip(w.running, w.generated, strict=True):
        r.state.output_len = generated  # NOTE: only the reservation reads it (no KV grows)
    t0 = time.perf_counter()
    for r in w.waiting:  # arrival processing: queue + first match (outside the timer)
        assert sched.add_request(r) is None
    return sched, time.perf_counter() - t0


#: The compiled build (setup.py) runs: the pass cannot be instrumented from Python.
COMPILED = prefillkit.compiled()


class OrderTimer:
    """Wraps the scheduler's ``order_waiting`` (or, under lpm, the kept order's
    ``LpmOrder.order``: aging and the rescoring of what changed; its iterator is lazy)
    to time the ordering done inside the pass."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last_s = 0.0

    def __call__(self, *args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        out = self.inner(*args, **kw)
        self.last_s = time.perf_counter() - t0
        return out


def bench_one(w: Workload, cfg: SchedulerConfig, repeats: int) -> dict[str, object]:
    pass_s: list[float] = []
    order_s: list[float] = []
    warm_order_s: list[float] = []
    add_s: list[float] = []
    admitted = 0
    closed = ""
    for _ in range(repeats):
        sched, added = build_state(w, cfg)
        add_s.append(added)
        st = sched.state
        kept = st.lpm
        gc.collect()
        gc.disable()
        if COMPILED:  # NOTE: a compiled scheduler's calls cannot be wrapped
            timer = OrderTimer(None)
            target: Any = contextlib.nullcontext()
        elif kept is not None:
            timer = OrderTimer(kept.order)
            target = patch.object(kept, "order", timer)
        else:
            timer = OrderTimer(order_waiting)
            target = patch.object(prefill_pass, "order_waiting", timer)
        with target:
            t0 = time.perf_counter()
            batch = run_pass(st, 1.0)
            t1 = time.perf_counter()
        # Steady state: the next pass re-orders with the hints this pass left.
        t2 = time.perf_counter()
        if kept is not None:
            kept.order(None)  # the kept order rescores what the pass changed
        else:
            order_waiting(
                list(st.waiting),
                cfg.schedule_policy,
                st.cache,
                lpm_fallback_queue_len=cfg.lpm_fallback_queue_len,
            )
        t3 = time.perf_counter()
        gc.enable()
        pass_s.append(t1 - t0)
        order_s.append(timer.last_s)
        warm_order_s.append(t3 - t2)
        assert batch is not None
        admitted = len(batch.reqs)
        assert st.last_pass_reason is not None
        closed = st.last_pass_reason._value_
    check_invariants(st.cache)
    p = statistics.median(pass_s)
    # NOTE: compiled, the ordering inside the pass is not timed: the warm re-order stands in.
    o = statistics.median(warm_order_s if COMPILED else order_s)
    n = len(w.waiting)
    return {
        "ms_per_pass": p * 1e3,
        "us_per_admitted": (p - o) * 1e6 / max(admitted, 1),
        "us_per_waiting_ordered": o * 1e6 / n,
        "us_per_waiting_ordered_warm": statistics.median(warm_order_s) * 1e6 / n,
        "us_per_arrival": statistics.median(add_s) * 1e6 / n,
        "admitted": admitted,
        "closed_by": closed,
    }


def bench_group(group: tuple[int, int, int]) -> list[tuple[list[str], float | None]]:
    """Every scenario and policy on one (page size, N) workload: the table rows, each
    with its speed-up over upstream (None: upstream was not measured at this N)."""
    page, n, repeats = group
    w = Workload(page, n)
    rows: list[tuple[list[str], float | None]] = []
    for scenario in ("default", "wide"):
        upstream = UPSTREAM_MS.get((page, n, scenario))
        for k, policy in enumerate(POLICIES):
            r = bench_one(w, make_config(page, scenario, policy), repeats)
            ms = float(r["ms_per_pass"])  # type: ignore[arg-type]
            up = None if upstream is None else upstream[k]
            ratio = None if up is None else up / ms
            rows.append(
                (
                    [
                        str(page),
                        str(n),
                        scenario,
                        policy,
                        f"{ms:.3f}",
                        f"{r['us_per_admitted']:.1f}",
                        f"{r['us_per_waiting_ordered']:.2f}",
                        f"{r['us_per_waiting_ordered_warm']:.2f}",
                        f"{r['us_per_arrival']:.1f}",
                        str(r["admitted"]),
                        str(r["closed_by"]),
                        "-" if up is None else f"{up:g}",
                        "-" if ratio is None else f"{ratio:.1f}x",
                    ],
                    ratio,
                )
            )
    return rows


def bench_hash_chain(page_size: int) -> float:
    rng = random.Random(1)
    toks = rand_tokens(rng, 8192)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        token_key_chain(toks, page_size)
    return (time.perf_counter() - t0) / reps / 8.192 * 1e6  # us per 1k tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--page-sizes", default="1,64")
    args = ap.parse_args()
    console = Console()
    console.print(
        f"prefillkit admission benchmark - {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, median of {args.repeats}, "
        f"prefillkit {prefillkit.build()}"
    )
    table = Table(title="One admission pass (ordering + matching + adding + allocation)")
    for col in (
        "page",
        "N",
        "scenario",
        "policy",
        "ms/pass",
        "us/admitted",
        "us/waiting ordered",
        "(next pass)",
        "us/arrival",
        "admitted",
        "stopped by",
        "upstream ms",
        "speed-up",
    ):
        table.add_column(col, justify="right")
    sizes = [int(x) for x in args.sizes.split(",")]
    groups = [(int(page), n, args.repeats) for page in args.page_sizes.split(",") for n in sizes]
    t_start = time.perf_counter()
    ratios: list[tuple[float, str]] = []
    # NOTE: one fresh process per workload (maxtasksperchild=1), run one at a time.
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        for rows in pool.imap(bench_group, groups):
            for row, ratio in rows:
                table.add_row(*row)
                if ratio is not None:
                    ratios.append((ratio, " ".join(row[:4])))
    console.print(table)
    if ratios:
        lowest, where = min(ratios)
        met = sum(r >= 10 for r, _ in ratios)
        console.print(
            f"{met} of {len(ratios)} cells at least 10x upstream's pass time; "
            f"the lowest {lowest:.1f}x (page N scenario policy: {where})"
        )
    for page in (1, 64):
        console.print(
            f"hash chain build, page {page}: {bench_hash_chain(page):.1f} us per 1k tokens"
        )
    console.print(f"total benchmark time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
