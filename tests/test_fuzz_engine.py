"""Whole-engine property fuzzing: random valid configs x random workloads.

Each example draws a :class:`~prefillkit.app.settings.Config` (page sizes, KV pools from "the
largest request barely fits" to roomy, or smaller than some requests; chunking on/off;
CP sizes 1-8 with or without shared KV and the bs>1 limits, mixed chunks and the buffer
cap; HiCache on/off with every write policy and host pools down to less than one
request; every ordering policy; priorities with and without preemption; affinity on/off
with random bounds; pd-prefill and colocated decode) and a workload (sessions whose turns
extend each other over shared system prompts, identical and unique prompts, prompts
without prefix info, bursts, tiny and long prompts, zero-length outputs, priorities),
then replays it through :class:`~prefillkit.sim.engine.Engine` and checks:

- **every step**: ``Scheduler.check()`` (``debug_check_invariants``: every pool and
  cache accounting identity) plus the request-state invariants of :func:`_step_check`;
- **safety at the end**: no page, device lock or host lock is left behind;
- **liveness**: every request that can ever fit has its first token and finished;
  the others were rejected on arrival with a reason and are counted in the summary
  (``stuck`` and ``unfinished`` are 0);
- **affinity bounds**: affinity delays a cold request only by *skipping* it in a pass
  (a STOP makes it lead the next pass; it never skips it). So the honest, checkable
  bound is on the skips, which are affinity's doing alone: a request is skipped in at
  most ``affinity_max_head_defers`` passes, every skip happens while its age is below
  ``affinity_max_age_s``, and only behind a warm-led batch that is launched in that
  pass. Hence affinity's share of any wait ends by ``arrival + affinity_max_age_s +``
  the forward launched in the last skipping pass; any waiting beyond that is memory's,
  the slot limit's or the queue's, whose progress the liveness check covers;
- **determinism**: a second run of the same example gives identical per-request rows,
  batches and summary (the wall-clock time aside) and byte-identical ``--out`` files;
- **every cap, per batch** (:func:`check_caps`), recomputed from the config and the
  shapes of the batch as launched (not from the adder's tallies): CP bs=1 when bs>1 is
  off; with bs>1 the request, page-aligned extend (``min(user, chunk budget)``), cached
  and estimated-buffer limits, each binding only on a batch of two or more (one
  oversized request runs alone); chunked requests solo in CP batches (the mixed mode
  only after a page-aligned carried prefix); the chunk budget over the batch's
  page-ceiled extends; ``max_prefill_tokens`` (all extends below it with chunking off;
  with chunking on it is no per-candidate test, only a close after the admission that
  reaches it: every extend but the last below it, and a batch closed by it reached it);
  the request-slot limit;
- **chunk-by-chunk continuity** (:func:`check_chunks`): a chunk starts exactly where the
  previous one ended, the last ends at the prompt length, cuts are page aligned, at most
  one request is mid-prompt and it is the scheduler's chunked request in the next pass;
- **hits against a reference cache** (:func:`check_chunks`): a plain set of key chains
  inserted when a forward completes, never evicted, bounds from above what a request
  could have been served at admission: its device + host match, its planned prefix and
  its reported ``device_hit_tokens + host_hit_tokens``; ``recomputed_tokens`` is at
  least the prompt minus that bound, and (one admission) equals the extends it ran;
- **the trace loaders and the CLI** (:func:`test_cli_replay_matches_in_process`): a
  random Mooncake / prefillkit-JSONL trace file replayed by ``prefillkit replay
  --trace`` gives the files of an in-process replay of requests built from the same
  rows without the loaders.

Pools include host tiers of an exact small page count (1-8 pages per lane) and page
128. Long runs (thousands of requests, long sessions): ``tests/slow/`` (skipped unless
``pytest --run-slow``).

Budget: ``FUZZ_EXAMPLES`` examples (under a minute on two cores); set
``PREFILLKIT_FUZZ_LONG=1`` (``pytest --fuzz-long``) for 10,000, or
``PREFILLKIT_FUZZ_EXAMPLES=N`` for N.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import prefillkit.sim.engine
from conftest import patches
from prefillkit.app.settings import Config, describe
from prefillkit.cli import run as cli_run
from prefillkit.cost.linear import LinearCostModel
from prefillkit.models import MODELS
from prefillkit.records.metrics import request_row
from prefillkit.records.output import summary_document, write_run
from prefillkit.request import ReqStatus, Request, block_key_chain
from prefillkit.sched.buffer import BufferEstimatorContext, BufferReqShape, estimate_buffer_bytes
from prefillkit.sched.interface import BatchLead, StepOutput
from prefillkit.sched.state import SchedulerState
from prefillkit.sched.waiting import never_fits_reason
from prefillkit.sim.engine import Engine, SimResult

FUZZ_LONG = os.environ.get("PREFILLKIT_FUZZ_LONG", "") not in ("", "0")
FUZZ_EXAMPLES = int(os.environ.get("PREFILLKIT_FUZZ_EXAMPLES", "0")) or (
    10_000 if FUZZ_LONG else 200
)

# NOTE: derandomized (the same examples every run, so CI's time is the same every run:
# drawn afresh, 200 examples took 35-223 s on the 2-core VM, a few scenarios of over a
# second each deciding it); PREFILLKIT_FUZZ_LONG=1 draws afresh (benchmarks/RESULTS.md,
# "The 10,000-example fuzz run").
FUZZ_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=not FUZZ_LONG,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
    print_blob=True,
)


#: Upper bound on chunked forwards per replay (keeps an example well under a second).
MAX_FORWARDS = 300
#: Engine steps after which a replay counts as a livelock (the examples need a few
#: thousand at most; a livelock runs forever).
MAX_STEPS = 200_000
#: Pools up to this many pages are checked every engine step (see :func:`replay`).
CHECK_PAGES = 8192


def LinearCost() -> LinearCostModel:
    """A cheap deterministic cost model: 50 ms + 10 us per extend token, 1 us per
    loaded token; decode 5 ms + 1 ns per context token; transfer 1 us per token."""
    return LinearCostModel(0.05, 1e-5, 1e-6, 0.005, 1e-9, 1e-6)


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True, slots=True)
class ReqSpec:
    """One request of a drawn workload. The prompt is the first ``input_len`` tokens of
    session ``session``'s conversation, whose first ``sys_tokens`` tokens are system
    prompt ``group``'s; ``keyed`` False: a prompt with no prefix info (shares nothing)."""

    arrival: float
    input_len: int
    output_len: int
    group: int
    sys_tokens: int
    session: int
    keyed: bool
    priority: int


@dataclass(slots=True)
class Scenario:
    cfg_kwargs: dict[str, Any]
    reqs: list[ReqSpec]
    key_mult: int
    real_cost: bool
    notes: list[str] = field(default_factory=list)
    # Host pages per owner lane the config was sized for (the exact-size host pools).
    host_pages_per_lane: int | None = None

    def config(self) -> Config:
        return Config(**self.cfg_kwargs)

    def requests(self) -> list[Request]:
        """Fresh requests (a replay mutates them). Keys are chained (key ``i`` names the
        prompt's first ``i + 1`` units), so a session continued under another system
        prompt group shares nothing past the point where the two differ."""
        page = int(self.config().resolved_page_size)
        kt = page * self.key_mult
        out: list[Request] = []
        for i, s in enumerate(self.reqs):
            raw: list[int] = []
            if s.keyed:
                sys_units = s.sys_tokens // kt
                for u in range(s.input_len // kt):
                    if u < sys_units:
                        raw.append(1 + s.group * 10_000_000 + u)
                    else:
                        raw.append(10**12 + s.session * 10_000_000 + u)
            keys = block_key_chain(raw, len(raw) * kt, kt, kt)
            out.append(
                Request(
                    rid=f"r{i}",
                    arrival_time=s.arrival,
                    input_len=s.input_len,
                    max_new_tokens=s.output_len,
                    keys=keys,
                    key_tokens=kt,
                    priority=s.priority,
                )
            )
        return out


@st.composite
def workloads(draw: st.DrawFn, max_requests: int = 60, max_len: int = 6000) -> list[ReqSpec]:
    n = draw(st.integers(1, max_requests))
    n_groups = draw(st.integers(1, 4))
    sys_tokens = [draw(st.sampled_from([0, 1, 16, 100, 512, 2000])) for _ in range(n_groups)]
    n_sessions = draw(st.integers(1, max(1, n)))
    session_group = [draw(st.integers(0, n_groups - 1)) for _ in range(n_sessions)]
    # Decode-heavy workloads (short prompts, long outputs) push colocated decode into
    # retraction; the others stress prefill admission.
    decode_heavy = draw(st.integers(0, 3)) == 0
    length_kind = st.sampled_from(
        ["tiny", "short"] if decode_heavy else ["tiny", "short", "medium", "long"]
    )
    output_len = st.sampled_from([100, 400] if decode_heavy else [0, 1, 2, 8, 40, 200])
    gap = st.sampled_from([0.0, 0.0, 0.001, 0.02, 0.1, 0.5, 3.0])
    t = 0.0
    out: list[ReqSpec] = []
    for _ in range(n):
        t += draw(gap)
        session = draw(st.integers(0, n_sessions - 1))
        group = session_group[session]
        kind = draw(length_kind)
        hi = {"tiny": 8, "short": 300, "medium": 2500, "long": max_len}[kind]
        extra = draw(st.integers(1, hi))
        # Turns of a session extend the system prompt; short prompts may end inside it.
        input_len = draw(st.sampled_from([extra, sys_tokens[group] + extra]))
        out.append(
            ReqSpec(
                arrival=round(t, 6),
                input_len=input_len,
                output_len=draw(output_len),
                group=group,
                sys_tokens=sys_tokens[group],
                session=session,
                keyed=draw(st.booleans()) or draw(st.booleans()),
                priority=draw(st.integers(0, 3)) * draw(st.sampled_from([1, 6])),
            )
        )
    return out


def _pool_pages_needed(spec: ReqSpec, page: int, clip: int, colocated: bool) -> int:
    """Smallest pool (pages) in which ``spec`` passes ``never_fits_reason`` with one lane."""
    seq = spec.input_len + (spec.output_len if colocated else 0)
    memory_test = spec.input_len + min(spec.output_len, clip) + page  # must be < pool tokens
    return max(-(-seq // page), memory_test // page + 1)


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    real_cost: bool | None = None,
    workload: st.SearchStrategy[list[ReqSpec]] | None = None,
    max_forwards: int = MAX_FORWARDS,
) -> Scenario:
    """A config and a workload (``workload``: default :func:`workloads`); chunk budgets
    are raised so that a replay needs at most about ``max_forwards`` forwards."""
    kw: dict[str, Any] = {"debug_check_invariants": True}
    notes: list[str] = []

    # --- parallelism and pages
    # cp 1 often: max_prefill_tokens and the chunk budget bind most without the CP caps.
    cp = draw(st.sampled_from([1, 1, 1, 2, 3, 4, 6, 8]))
    kw["cp_size"] = cp
    kw["tp_size"] = cp * draw(st.sampled_from([1, 1, 2]))
    shared_kv = cp > 1 and draw(st.booleans())
    kw["enable_cp_shared_kv"] = shared_kv
    page = draw(st.sampled_from([1, 2, 4, 16, 64, 128] if cp == 1 else [1, 4, 16, 64, 64, 128]))
    kw["page_size"] = page
    lanes = cp if shared_kv else 1

    reqs = draw(workloads() if workload is None else workload)
    use_real = draw(st.integers(0, 9)) == 0 if real_cost is None else real_cost
    model = Config().model
    if use_real:
        model = kw["model"] = draw(st.sampled_from(list(MODELS)))
    total_input = sum(s.input_len for s in reqs)

    # --- scheduler core
    chunk = draw(st.one_of(st.none(), st.integers(1, 64).map(lambda k: k * page)))
    if chunk is not None:
        # At most a few hundred forwards per replay (the invariant check after every
        # step walks the whole cache): tiny chunks only with small workloads.
        chunk = max(chunk, -(-total_input // (max_forwards * page)) * page)
    kw["chunked_prefill_size"] = chunk
    kw["max_prefill_tokens"] = draw(st.sampled_from([1, page, 256, 2048, 16384]))
    kw["max_running_requests"] = draw(st.sampled_from([None, None, 1, 2, 5]))
    policy = draw(st.sampled_from(["fcfs", "lpm", "dfs-weight", "lof"]))
    kw["schedule_policy"] = policy
    kw["lpm_fallback_queue_len"] = draw(st.sampled_from([None, 0, 3, 128]))
    kw["clip_max_new_tokens"] = draw(st.sampled_from([4096, 4096, 16]))
    kw["schedule_conservativeness"] = draw(st.sampled_from([1.0, 0.1, 0.3, 2.0]))
    kw["new_token_ratio_decay_steps"] = draw(st.sampled_from([600, 5]))
    mode = draw(st.sampled_from(["pd-prefill", "pd-prefill", "colocated"]))
    kw["mode"] = mode

    # --- priority (needs fcfs or lof)
    if policy in ("fcfs", "lof") and draw(st.booleans()):
        kw["enable_priority_scheduling"] = True
        kw["schedule_low_priority_values_first"] = draw(st.booleans())
        kw["priority_scheduling_preemption_threshold"] = draw(st.sampled_from([0, 2, 10]))
        preempt = draw(st.booleans())
        kw["enable_priority_preemption"] = preempt
        kw["enable_preempt_on_no_token"] = preempt and draw(st.booleans())

    # --- CP shared-KV batching
    if shared_kv and draw(st.sampled_from([True, True, False])):
        kw["enable_cp_shared_kv_prefill_bs_gt1"] = True
        kw["cp_shared_kv_prefill_max_requests"] = draw(st.sampled_from([None, 1, 2, 4]))
        kw["cp_shared_kv_prefill_max_total_extend_tokens"] = draw(
            st.one_of(
                st.none(),
                st.sampled_from([1, 2, 4, 8]).map(lambda k: k * page),
                st.integers(1, 64).map(lambda k: k * page),
            )
        )
        kw["cp_shared_kv_prefill_max_cached_tokens"] = draw(
            st.sampled_from([None, 1, 512, 2048, 10_000])
        )
        # Buffer limits around what one long request needs, so that they bind on some
        # batches and not on others (capped below the device's free memory).
        one = estimate_buffer_bytes(
            [BufferReqShape(0, max(s.input_len for s in reqs))],
            BufferEstimatorContext(model=MODELS[model], cp_size=cp, page_size=page),
        )
        kw["cp_shared_kv_prefill_max_buffer_size"] = draw(
            st.sampled_from(
                [None, 1, 2**30, *(max(1, min(int(one * f), 2**32)) for f in (0.5, 1.5, 4))]
            )
        )
        has_cap = chunk is not None or kw["cp_shared_kv_prefill_max_total_extend_tokens"]
        if has_cap and kw["cp_shared_kv_prefill_max_requests"] is not None:
            kw["cp_prefill_mix_chunked"] = draw(st.booleans())

    # --- HiCache
    host_kind = "off"
    n_host = 0
    if draw(st.sampled_from([True, True, False])):
        kw["enable_hierarchical_cache"] = True
        kw["hicache_write_policy"] = draw(
            st.sampled_from(["write_through", "write_through_selective", "write_back"])
        )
        kw["hicache_write_through_threshold"] = draw(st.integers(1, 3))
        kw["hicache_load_back_threshold"] = draw(st.sampled_from([0, 10, 200]))
        host_kind = draw(st.sampled_from(["ratio", "size", "exact"]))
        if host_kind == "ratio":
            kw["hicache_ratio"] = draw(st.sampled_from([1.01, 1.5, 4.0]))
        elif host_kind == "exact":
            # Exactly ``n`` host pages per lane: 1 GB over a per-rank token size of
            # 1e9 // (n * page) bytes leaves n pages and less than one page over. The knob
            # is the whole model's size per token; a GQA model's KV heads split over the
            # attention-TP ranks (max(1, heads // attn_tp) each, as SGLang sizes its
            # pools), so one rank holds local / heads of it: scale it up by heads / local.
            n_host = draw(st.sampled_from([1, 2, 3, 5, 8]))
            spec = MODELS[model]
            heads = spec.num_kv_heads if spec.attention == "gqa" else 0
            local = max(1, heads // (kw["tp_size"] // cp))
            split = heads // local if heads > 0 else 1  # exact: even heads, attn_tp 1 or 2
            kw["hicache_size"] = 1
            kw["kv_bytes_per_token"] = 10**9 // (n_host * page) * split
            notes.append(f"host_pages_per_lane={n_host}")
        else:
            # hicache_size GB per GPU with a huge per-token KV size: from a host pool
            # smaller than one request to a few thousand tokens.
            kw["hicache_size"] = draw(st.integers(1, 3))
            kw["kv_bytes_per_token"] = draw(st.sampled_from([10**6, 10**7, 10**8]))

    # --- affinity (turned off internally under priority scheduling)
    if draw(st.booleans()):
        kw["enable_affinity"] = True
        kw["affinity_warm_floor_tokens"] = draw(st.sampled_from([1, 16, 64, 600]))
        kw["affinity_skip_window"] = draw(st.integers(1, 16))
        kw["affinity_max_head_defers"] = draw(st.integers(0, 4))
        kw["affinity_max_age_s"] = draw(st.sampled_from([0.0, 0.05, 0.3, 5.0]))

    key_mult = draw(st.sampled_from([1, 1, 1, 2, 4]))

    # --- KV pool: relative to the largest (or a typical) request's need.
    colocated = mode == "colocated"
    needs = sorted(_pool_pages_needed(s, page, kw["clip_max_new_tokens"], colocated) for s in reqs)
    # CP bs>1 batches need room for more than one request (their caps bind then).
    multi = bool(kw.get("enable_cp_shared_kv_prefill_bs_gt1"))
    sizing = draw(
        st.sampled_from(
            ["barely", "roomy", "roomy", "tight", "huge"]
            if multi
            else ["barely", "barely", "roomy", "tight", "huge"]
        )
    )
    if sizing == "tight":  # some requests never fit: rejected on arrival
        base = needs[len(needs) // 2]
    else:
        base = needs[-1]
    factor = {"barely": 1.0, "roomy": 3.0, "tight": 1.0, "huge": 50.0}[sizing]
    pages = math.ceil(base * factor) + draw(st.sampled_from([0, 0, 1, lanes]))
    # Lanes: page j lives in lane j % lanes, so a sequence of n pages needs
    # ceil(n / lanes) pages in lane 0; size every lane for that.
    if lanes > 1:
        pages = max(-(-pages // lanes) * lanes, lanes)
        pages += draw(st.sampled_from([0, 0, 1, lanes - 1]))  # uneven lanes too
    kw["max_total_tokens"] = pages * page
    notes.append(f"sizing={sizing} pool_pages={pages}")
    # NOTE: drawn last, so the draws above (and the examples the derandomized mutation
    # tests try) are those of the fuzz before these two knobs were drawn.
    # The wait bound B (default 5 s; None = off, upstream): small bounds make the
    # latency check (check_latency) bind within a short replay.
    kw["schedule_max_wait_s"] = draw(st.sampled_from([5.0, 5.0, None, 0.0, 0.05, 0.3, 1.0]))
    if kw.get("enable_priority_scheduling"):
        kw["enable_priority_aging"] = draw(st.booleans())
    sc = Scenario(kw, reqs, key_mult, use_real, notes)
    if kw.get("enable_hierarchical_cache") and host_kind == "exact":
        sc.host_pages_per_lane = n_host
    return sc


# --------------------------------------------------------------------------- the checks


@dataclass(frozen=True, slots=True)
class Shape:
    """One request of a launched batch, as launched (requests mutate later)."""

    rid: str
    prefix: int  # prefix_len: device prefix + loaded host tokens, or the true prefix
    extend: int
    loaded: int
    device_prefix: int  # the in-scan device match (a fresh admission only)
    host_hit: int  # the in-scan host match (a fresh admission only)
    input_len: int
    fresh: bool  # waiting before the pass (else: the chunked continuation)


@dataclass(slots=True)
class PassLog:
    now: float
    skipped: list[str]
    batch: StepOutput | None  # None: the pass admitted nothing
    extend_tokens: int  # of the batch, when it was launched (requests mutate later)
    shapes: list[Shape] = field(default_factory=list)
    chunked_before: str | None = None  # the scheduler's chunked request entering the pass
    # Per fresh admission: the hit (tokens) the reference cache could serve then.
    ref_bound: dict[str, int] = field(default_factory=dict)
    running_after: int = 0
    # Wait-bound violations (check_latency): an aged request passed over by a younger one.
    passed_over: list[str] = field(default_factory=list)
    # Times that moved (check_ttft): first scheduling or first token changed.
    moved: list[str] = field(default_factory=list)
    promoted: set[str] = field(default_factory=set)  # affinity-promoted leads of the pass


def _ref_hit(ref: set[int], req: Request) -> int:
    """Tokens of ``req``'s longest key-chain prefix in the reference cache."""
    u = 0
    keys = req.keys
    while u < len(keys) and keys[u] in ref:
        u += 1
    return u * req.key_tokens


#: The tests below wrap the engine's scheduler (``_instrument``), which a compiled build
#: (setup.py) binds at build time: there they are skipped, and tests/test_compiled_build.py
#: compares the compiled build's outputs with the source's instead.
INSTRUMENTS = patches(prefillkit.sim.engine)


def state_of(engine: Engine) -> SchedulerState:
    """The state of the engine's scheduler, for inspection (the engine drives the
    scheduler's interface only). NOTE: duck-typed: tests/slow/test_fuzz_mutations.py runs
    a mutated copy of the Scheduler class."""
    state: SchedulerState = engine.sched.state  # type: ignore[attr-defined]
    return state


def _instrument(engine: Engine) -> list[PassLog]:
    """Record, per admission pass, the requests it skipped (their ``affinity_skips``
    grew), the shapes of the batch it launched, and the reference-cache bound of every
    fresh admission. The reference cache is a plain set of keys: a launched request's
    complete key units are added when its forward completes (``forward_done``), nothing
    is ever removed, so it holds every prefix the real caches (device and host) can
    hold."""
    sched = engine.sched
    state = state_of(engine)
    inner: Callable[[float], StepOutput] = sched.schedule
    inner_done = sched.forward_done
    log: list[PassLog] = []
    ref: set[int] = set()
    in_flight: dict[int, list[tuple[Request, int]]] = {}
    bound = wait_bound(state)
    first_sched: dict[str, float] = {}
    first_tok: dict[str, float] = {}
    engine.first_times = (first_sched, first_tok)  # type: ignore[attr-defined]

    def seen_times(req: Request, moved: list[str]) -> None:
        for times, t, what in (
            (first_sched, req.metrics.first_scheduled_time, "first_scheduled"),
            (first_tok, req.metrics.first_token_time, "first_token"),
        ):
            if t is not None and times.setdefault(req.rid, t) != t:
                moved.append(f"ttft:{what} of {req.rid} moved {times[req.rid]} -> {t}")

    def wrapped(now: float) -> StepOutput:
        waiting = list(state.waiting)
        before = {r.rid: r.state.affinity_skips for r in waiting}
        chunked = state.chunked_req
        aged: dict[str, float] = {}
        if bound is not None:
            cutoff = now - bound
            for r in waiting:  # NOTE: arrival order; the same test as the policy's
                if r.arrival_time > cutoff:
                    break
                aged[r.rid] = r.arrival_time
        promoted = {r.rid for r in state.affinity_promoted}
        moved: list[str] = []
        for r in waiting:
            seen_times(r, moved)  # a requeued request keeps its first times
        step = inner(now)
        batch = step if step.reqs else None
        # A skipped request is still waiting (in arrival order, as engine.requests).
        skipped = [
            r.rid
            for r in state.waiting
            if r.rid in before and r.state.affinity_skips > before[r.rid]
        ]
        ext = 0 if batch is None else sum(r.extend_len for r in batch.reqs)
        entry = PassLog(now, skipped, batch, ext, chunked_before=chunked and chunked.rid)
        entry.moved = moved
        entry.promoted = promoted
        if batch is not None and aged:
            # The wait bound: an aged request is ordered behind no younger one (only
            # affinity-promoted leads and the chunked continuation go before it), so a
            # younger fresh admission passes it over only if affinity skipped it.
            pos = {rid: i for i, rid in enumerate(before)}
            admitted = {r.rid for r in batch.reqs if r.rid in before}
            fresh = [rid for rid in admitted if rid not in promoted]
            for rid in aged:
                if rid in admitted or rid in skipped:
                    continue
                younger = [a for a in fresh if pos[a] > pos[rid]]
                if younger:
                    entry.passed_over.append(
                        f"wait:{rid} waited {now - aged[rid]:.3f} s "
                        f">= bound {bound} s and was passed over by {younger} at {now}"
                    )
        if batch is not None:
            batch_reqs = [state.running[s.rid] for s in batch.reqs]
            for r in batch_reqs:
                seen_times(r, entry.moved)
            for r in batch_reqs:
                fresh = r.rid in before
                entry.shapes.append(
                    Shape(
                        r.rid,
                        r.state.prefix_len,
                        r.state.extend_input_len,
                        r.state.loaded_tokens,
                        r.state.device_prefix_len if fresh else -1,
                        r.state.host_hit_len if fresh else -1,
                        r.state.input_len,
                        fresh,
                    )
                )
                if fresh:
                    entry.ref_bound[r.rid] = _ref_hit(ref, r)
            in_flight[id(batch)] = [
                (r, s.extend_end) for r, s in zip(batch_reqs, batch.reqs, strict=True)
            ]
        entry.running_after = len(state.running)
        log.append(entry)
        return step

    def done(step: StepOutput, now: float) -> list[Request]:
        reqs = in_flight.pop(id(step), [])
        for req, computed in reqs:
            ref.update(req.keys[: min(computed // req.key_tokens, len(req.keys))])
        out = inner_done(step, now)
        if log:
            for req, _ in reqs:
                seen_times(req, log[-1].moved)
        return out

    sched.schedule = wrapped  # type: ignore[method-assign]
    sched.forward_done = done  # type: ignore[method-assign]
    return log


def wait_bound(state: SchedulerState) -> float | None:
    """The wait bound B the scheduler states (README Guarantees, ``order_waiting``):
    ``schedule_max_wait_s``, capped by the affinity age bound T with affinity on; None
    (no bound) when off or under strict priority classes (priority without aging)."""
    cfg = state.cfg
    if cfg.enable_priority_scheduling and not cfg.enable_priority_aging:
        return None
    b = cfg.schedule_max_wait_s
    if state.affinity_on:
        t = cfg.affinity_max_age_s
        b = t if b is None or t < b else b
    return b


def check_latency(engine: Engine, result: SimResult, log: list[PassLog]) -> None:
    """The latency bound, per pass and per request (messages start with ``wait:``).

    Per pass: a request that has waited ``>= B`` is passed over by no younger fresh
    admission (affinity-promoted leads and the chunked continuation aside; an affinity
    skip, bounded by check_affinity, aside). Per request, its consequence in time: with
    ``t0 = max(arrival + B, first scheduling of every request ahead of it in arrival
    order)``, a request is first scheduled no later than the first pass at or after
    ``t0`` that admits, fresh and unpromoted, a request that arrived after it (and did
    not skip it): waiting beyond ``B`` + the drain of what was ahead of it in FCFS order
    happens only while nothing younger is admitted either, i.e. while it does not fit.
    Aging off (``B`` None) or strict priority classes: no bound is stated, none checked.
    """
    for p in log:
        assert not p.passed_over, p.passed_over[0]
    bound = wait_bound(state_of(engine))
    if bound is None:
        return
    order = {r.rid: i for i, r in enumerate(sorted(result.requests, key=lambda r: r.arrival_time))}
    # Per pass with a fresh unpromoted admission: its time, the arrival rank of the
    # youngest such admission, the requests it skipped.
    passes: list[tuple[float, int, list[str]]] = []
    for p in log:
        ranks = [order[s.rid] for s in p.shapes if s.fresh and s.rid not in p.promoted]
        if ranks:
            passes.append((p.now, max(ranks), p.skipped))
    ahead = -math.inf  # the latest first scheduling of the requests ahead
    j = 0  # NOTE: t0 never decreases along arrival order, so neither does the scan start
    for r in sorted(result.requests, key=lambda r: order[r.rid]):
        first = r.metrics.first_scheduled_time
        if first is None:
            continue  # rejected on arrival
        t0 = max(r.arrival_time + bound, ahead)
        mine = order[r.rid]
        while j < len(passes) and passes[j][0] < t0:
            j += 1
        for now, youngest, skipped in passes[j:]:
            if now >= first:
                break
            assert youngest <= mine or r.rid in skipped, (
                f"wait:{r.rid} first scheduled at {first}, after a younger admission at "
                f"{now} (bound {bound} s, due from {t0})"
            )
        ahead = max(ahead, first)


def check_ttft(engine: Engine, result: SimResult, log: list[PassLog]) -> None:
    """Truthful times under retraction and preemption (messages start with ``ttft:``):
    the first scheduling and the first token, once set, never move (observed at every
    pass and every completed forward); TTFT >= queueing >= 0; a requeued request keeps
    its first token time."""
    for p in log:
        assert not p.moved, p.moved[0]
    first_sched, first_tok = engine.first_times  # type: ignore[attr-defined]
    for req in result.requests:
        if req.state.status is ReqStatus.REJECTED:
            continue
        row = request_row(req)
        assert req.metrics.first_scheduled_time == first_sched[req.rid], (
            f"ttft:first_scheduled {req.rid}"
        )
        if req.rid in first_tok:
            assert req.metrics.first_token_time == first_tok[req.rid], f"ttft:first_token {req.rid}"
        ttft, queueing = float(row["ttft_s"]), float(row["queueing_s"])
        assert ttft >= queueing >= 0, f"ttft:ttft {ttft} < queueing {queueing} for {req.rid}"


def _step_check(state: SchedulerState) -> None:
    """Request-state invariants, after every engine step (next to ``Scheduler.check``)."""
    for req in state.waiting:
        assert req.state.status is ReqStatus.WAITING, (req.rid, req.state.status)
        assert req.state.locked_node is None, req.rid
        assert req.state.owned_end_page == req.state.owned_start_page == 0, req.rid
    waiting_ids = {id(r) for r in state.waiting}
    assert len(waiting_ids) == len(state.waiting), "a request is queued twice"
    for rid, req in state.running.items():
        assert rid == req.rid
        assert id(req) not in waiting_ids, rid
        assert req.state.status in (
            ReqStatus.PREFILLING,
            ReqStatus.TRANSFERRING,
            ReqStatus.DECODING,
        ), (rid, req.state.status)
        assert req.state.locked_node is not None, rid
    if state.chunked_req is not None:
        assert state.chunked_req.rid in state.running
        assert state.chunked_req.state.status is ReqStatus.PREFILLING
    for req in state.decoding:
        assert req.rid in state.running


def replay(
    sc: Scenario, *, check_every: int | None = None, max_steps: int = MAX_STEPS
) -> tuple[Engine, SimResult, list[PassLog]]:
    """Replay ``sc``, checking the invariants every ``check_every`` engine steps (every
    step: through ``debug_check_invariants``; long runs check less often). The default
    is every step up to ``CHECK_PAGES`` pool pages, and proportionally less often above
    (the page-level invariant check walks every page)."""
    cfg = sc.config()
    if check_every is None:
        check_every = max(1, cfg.max_total_tokens // cfg.resolved_page_size // CHECK_PAGES)
    if check_every > 1:
        cfg = Config(**{**sc.cfg_kwargs, "debug_check_invariants": False})
    reqs = sc.requests()
    engine = Engine(cfg.sim_settings(), reqs, cost=None if sc.real_cost else LinearCost())
    log = _instrument(engine)
    sched = engine.sched
    steps = 0

    def step(finished: int, total: int) -> None:
        nonlocal steps
        steps += 1
        if steps % check_every == 0:
            if check_every > 1:
                sched.check()
            _step_check(state_of(engine))
        if steps > max_steps:
            raise AssertionError(
                f"livelock: {steps} engine steps, {finished} of {total} requests done, "
                f"{state_of(engine).stats}"
            )

    engine.on_progress = step
    result = engine.run()
    return engine, result, log


def check_end_state(sc: Scenario, engine: Engine, result: SimResult) -> None:
    state = state_of(engine)
    summary = result.summary
    assert not result.partial
    # Safety: nothing leaked.
    engine.sched.check()
    assert state.running == {}, sorted(state.running)
    assert not state.waiting and state.chunked_req is None and state.decoding == []
    assert state.pool.owned == [0] * state.pool.cp_size
    assert state.cache.protected_pages == 0, "a device lock was never released"
    if state.cache.host is not None:
        stack = [state.cache.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            assert node.host_lock_ref == 0, f"host lock left on {node}"
    # Liveness: every request that can ever fit finished; the rest were rejected.
    rejected = 0
    for req in result.requests:
        reason = never_fits_reason(state, req)
        if req.state.status is ReqStatus.REJECTED:
            rejected += 1
            assert req.metrics.reject_reason, req.rid
            requeued = f"requeued with {req.state.output_len} output tokens kept: "
            if req.metrics.reject_reason.startswith(requeued):
                # Its re-prefill (prompt + kept output) could never pass admission again.
                assert req.metrics.retractions + req.metrics.preemptions > 0, req.rid
                assert reason == req.metrics.reject_reason[len(requeued) :], (req.rid, reason)
                assert req.metrics.first_scheduled_time is not None
                continue
            assert reason == req.metrics.reject_reason, (req.rid, reason, req.metrics.reject_reason)
            assert req.metrics.first_token_time is None and req.metrics.first_scheduled_time is None
            continue
        assert reason is None, (req.rid, reason)
        assert req.state.status is ReqStatus.FINISHED, (req.rid, req.state.status)
        assert req.metrics.first_token_time is not None, req.rid
        assert req.metrics.first_scheduled_time is not None, req.rid
        assert req.arrival_time <= req.metrics.first_scheduled_time <= req.metrics.first_token_time
        assert (
            req.metrics.finish_time is not None
            and req.metrics.finish_time >= req.metrics.first_token_time
        )
        assert req.metrics.num_chunks >= 1
        assert req.metrics.device_hit_tokens + req.metrics.host_hit_tokens < req.state.input_len
        if not state.cfg.chunking_enabled and _requeues(req) == 0:
            assert req.metrics.num_chunks == 1, (req.rid, req.metrics.num_chunks)
    assert summary["rejected"] == rejected == state.stats.rejected
    # Completed: a first token (a request rejected on a requeue may have had one).
    first_tokens = sum(1 for r in result.requests if r.metrics.first_token_time is not None)
    assert summary["completed"] == first_tokens
    assert summary["stuck"] == 0
    assert summary["unfinished"] == 0
    assert summary["requests"] == len(result.requests)


def check_batches(engine: Engine, result: SimResult, log: list[PassLog]) -> None:
    launched = [p for p in log if p.batch is not None]
    assert len(launched) == len(result.batches)
    for rec, p in zip(result.batches, launched, strict=True):
        assert p.batch is not None
        assert rec.size == len(p.batch.reqs) >= 1
        assert rec.extend_tokens == p.extend_tokens >= 1
        assert rec.duration_s > 0
    starts = [b.start_s for b in result.batches]
    ends = [b.start_s + b.duration_s for b in result.batches]
    # One executor: prefill forwards never overlap.
    for end, start in zip(ends, starts[1:], strict=False):
        assert start >= end - 1e-9


def check_affinity(engine: Engine, result: SimResult, log: list[PassLog]) -> None:
    state = state_of(engine)
    cfg = state.cfg
    by_rid = {r.rid: r for r in result.requests}
    skip_times: dict[str, list[float]] = {}
    for p in log:
        if not p.skipped:
            continue
        assert state.affinity_on, "a request was skipped with affinity off"
        # A skip happens only behind a warm-led batch, which this pass launches.
        assert p.batch is not None and p.batch.lead_class is BatchLead.WARM, p
        assert len(p.skipped) <= cfg.affinity_skip_window
        for rid in p.skipped:
            skip_times.setdefault(rid, []).append(p.now)
    for rid, times in skip_times.items():
        req = by_rid[rid]
        assert len(times) <= cfg.affinity_max_head_defers, (rid, times)
        assert len(times) == req.state.affinity_skips
        for t in times:
            assert t - req.arrival_time < cfg.affinity_max_age_s, (rid, t, req.arrival_time)
    total_skips = sum(len(p.skipped) for p in log)
    assert result.summary["affinity_skips"] == total_skips
    assert result.summary["affinity_defers"] == total_skips
    assert sum(b.skips for b in result.batches) == total_skips


def _requeues(req: Request) -> int:
    """Times ``req`` went back to the queue (priority preemptions and, where counted
    apart, decode retractions)."""
    return req.metrics.preemptions + req.metrics.retractions


def _ceil(tokens: int, page: int) -> int:
    return -(-tokens // page) * page


def check_caps(sc: Scenario, engine: Engine, log: list[PassLog]) -> None:
    """Every admission cap, per launched batch, from the config and the batch's shapes.

    Assertion messages start with ``cap:<name>`` (the mutation tests match on them)."""
    cfg = sc.config()
    page = cfg.resolved_page_size
    chunk = cfg.chunked_prefill_size
    cp = cfg.cp_size > 1
    bs_gt1 = cp and cfg.enable_cp_shared_kv_prefill_bs_gt1
    user = cfg.cp_shared_kv_prefill_max_total_extend_tokens
    ext_limit: int | None = None
    if bs_gt1:
        caps = [c for c in (user, chunk) if c is not None]
        ext_limit = min(caps) if caps else None
    # On the CP bs>1 path the legacy input budget is raised to the CP extend limit.
    input_budget = cfg.max_prefill_tokens
    if ext_limit is not None:
        input_budget = max(input_budget, ext_limit)
    max_reqs = cfg.cp_shared_kv_prefill_max_requests
    max_cached = cfg.cp_shared_kv_prefill_max_cached_tokens
    max_buffer = cfg.cp_shared_kv_prefill_max_buffer_size
    ctx = BufferEstimatorContext(
        model=cfg.model_spec,
        kv_cache_dtype=cfg.sim_settings().resolved_kv_cache_dtype,
        cp_size=cfg.cp_size,
        page_size=page,
    )
    slots = cfg.max_running_requests
    for b, p in enumerate(x for x in log if x.batch is not None):
        assert p.batch is not None
        shapes = p.shapes
        n = len(shapes)
        exts = [_ceil(s.extend, page) for s in shapes]
        total = sum(exts)
        closed_by = p.batch.stop_reason.value
        where = f"batch {b} at {p.now}: {shapes} closed by {closed_by}"
        assert n >= 1, where
        if slots is not None:
            assert p.running_after <= slots, f"cap:max_running_requests {where}"
        if cp and not bs_gt1:
            assert n == 1, f"cap:cp_bs1 {where}"
        if chunk is not None:
            assert total <= chunk, f"cap:chunk_budget {total} > {chunk} {where}"
            if closed_by == "chunk_budget":
                # Closed by the chunk budget: no page of it was left.
                assert total > chunk - page, f"cap:chunk_budget_close {where}"
            if closed_by == "max_prefill_tokens":
                # With chunking on the input budget only closes a batch that reached it.
                assert total >= input_budget, f"cap:max_prefill_tokens_close {where}"
        if n == 1:
            continue  # a single request runs alone, whatever its size
        if chunk is None:
            assert total < input_budget, f"cap:max_prefill_tokens {total} {where}"
        else:
            assert total - exts[-1] < input_budget, f"cap:max_prefill_tokens {total} {where}"
        if cp and not cfg.cp_prefill_mix_chunked:
            for s in shapes[:-1]:
                solo = s.fresh and s.prefix + s.extend == s.input_len
                assert solo, f"cap:chunked_solo {s.rid} {where}"
        if cp and cfg.cp_prefill_mix_chunked and not shapes[0].fresh:
            assert shapes[0].prefix % page == 0, f"cap:chunked_solo unaligned {where}"
        if not bs_gt1:
            continue
        if max_reqs is not None:
            assert n <= max_reqs, f"cap:cp_max_requests {where}"
        if ext_limit is not None:
            assert total <= ext_limit, f"cap:cp_max_total_extend_tokens {total} {where}"
        if max_cached is not None:
            cached = sum(s.prefix for s in shapes)
            assert cached <= max_cached, f"cap:cp_max_cached_tokens {cached} {where}"
        if max_buffer is not None:
            est = estimate_buffer_bytes(
                [BufferReqShape(s.prefix, s.extend, s.loaded) for s in shapes], ctx
            )
            assert est <= max_buffer, f"cap:cp_max_buffer_size {est} {where}"
    if max_reqs is not None and bs_gt1:
        for p in log:
            if p.batch is not None and p.batch.stop_reason.value == "cp_max_requests":
                assert len(p.shapes) == max_reqs, f"cap:cp_max_requests_close {p.shapes}"
    if sc.host_pages_per_lane is not None:
        lanes = cfg.cp_size if cfg.enable_cp_shared_kv else 1
        assert engine.dep.host_pages == sc.host_pages_per_lane * lanes, engine.dep


def check_chunks(sc: Scenario, engine: Engine, result: SimResult, log: list[PassLog]) -> None:
    """Chunk-by-chunk prefix continuity and hits bounded by the reference cache.

    Messages start with ``chunk:`` or ``hit:``."""
    cfg = sc.config()
    page = cfg.resolved_page_size
    chunk = cfg.chunked_prefill_size
    aligned_cuts = chunk is None or chunk % page == 0
    expect: dict[str, int] = {}  # rid -> where its next chunk must start
    bound: dict[str, int] = {}  # rid -> reference bound at its last fresh admission
    first: dict[str, Shape] = {}  # rid -> its last fresh admission
    ran: dict[str, int] = {}  # rid -> extend tokens since its last fresh admission
    chunks: dict[str, int] = {}  # rid -> chunks launched, all admissions
    for p in log:
        # The chunked request entering a pass is exactly the one left mid-prompt.
        assert len(expect) <= 1, f"chunk:two requests mid-prompt {expect}"
        mid = next(iter(expect), None)
        assert p.chunked_before == mid, f"chunk:chunked_req {p.chunked_before} != {mid}"
        if p.batch is None:
            continue
        for j, s in enumerate(p.shapes):
            where = f"at {p.now}: {s}"
            assert s.extend >= 1, f"chunk:empty extend {where}"
            end = s.prefix + s.extend
            assert end <= s.input_len, f"chunk:past the prompt {where}"
            if s.fresh:
                assert s.rid not in expect, f"chunk:readmitted mid-prompt {where}"
                assert s.prefix % page == 0, f"chunk:unaligned prefix {where}"
                assert 0 <= s.loaded <= s.host_hit, f"chunk:loaded {where}"
                assert s.prefix == s.device_prefix + s.loaded, f"chunk:prefix {where}"
                ref = p.ref_bound[s.rid]
                assert s.device_prefix + s.host_hit <= ref, f"hit:match {ref} {where}"
                bound[s.rid] = ref
                first[s.rid] = s
                ran[s.rid] = 0
            else:
                assert j == 0 and s.rid == p.chunked_before, f"chunk:not first {where}"
                assert expect.get(s.rid) == s.prefix, (
                    f"chunk:continuity expected {expect.get(s.rid)} {where}"
                )
                assert s.loaded == 0, f"chunk:continuation loads {where}"
            ran[s.rid] += s.extend
            chunks[s.rid] = chunks.get(s.rid, 0) + 1
            if end < s.input_len:
                if aligned_cuts:
                    assert end % page == 0, f"chunk:unaligned cut {where}"
                expect[s.rid] = end
            else:
                expect.pop(s.rid, None)
                assert ran[s.rid] == s.input_len - first[s.rid].prefix, f"chunk:sum {where}"
    assert not expect, f"chunk:never finished {expect}"
    for req in result.requests:
        if req.state.status is not ReqStatus.FINISHED:
            continue
        row = request_row(req)
        rid = req.rid
        hit = req.metrics.device_hit_tokens + req.metrics.host_hit_tokens
        assert 0 <= hit <= bound[rid], f"hit:reported {rid} {hit} > {bound[rid]}"
        recomputed = row["recomputed_tokens"]
        assert recomputed is not None and recomputed >= req.state.input_len - bound[rid], (
            f"hit:recomputed {rid} {recomputed} < {req.state.input_len} - {bound[rid]}"
        )
        if _requeues(req) == 0:  # one admission: the report is what the batches ran
            s = first[rid]
            assert (req.metrics.device_hit_tokens, req.metrics.host_hit_tokens) == (
                s.device_prefix,
                s.loaded,
            ), f"hit:reported split {rid} {s}"
            assert recomputed == ran[rid], f"hit:recomputed {rid} {recomputed} != {ran[rid]}"
            assert req.metrics.num_chunks == chunks[rid], f"chunk:num_chunks {rid}"


def fingerprint(result: SimResult, cfg: Config) -> tuple[object, ...]:
    """Everything a run reports: request rows, batches, summary, and the bytes of the
    ``--out`` files (``summary.json``, ``requests.csv``, ``batches.csv``)."""
    summary = {k: v for k, v in result.summary.items() if k != "wall_time_s"}
    rows = [request_row(r) for r in result.requests]
    with tempfile.TemporaryDirectory(prefix="prefillkit-fuzz-") as tmp:
        write_run(
            result,
            tmp,
            summary_document(
                result, name="fuzz", config=describe(cfg), workload={"source": "fuzz"}
            ),
        )
        files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir())}
    return (repr(rows), repr(result.batches), repr(summary), repr(result.deployment), files)


def describe_scenario(sc: Scenario) -> None:
    note(f"config: {sc.cfg_kwargs}")
    note(f"{len(sc.reqs)} requests, key_mult={sc.key_mult}, real_cost={sc.real_cost} {sc.notes}")


def run_scenario(
    sc: Scenario, *, check_every: int | None = None, max_steps: int = MAX_STEPS
) -> None:
    engine, result, log = replay(sc, check_every=check_every, max_steps=max_steps)
    check_end_state(sc, engine, result)
    check_batches(engine, result, log)
    check_caps(sc, engine, log)
    check_chunks(sc, engine, result, log)
    check_affinity(engine, result, log)
    check_latency(engine, result, log)
    check_ttft(engine, result, log)
    _, again, _ = replay(sc, check_every=check_every, max_steps=max_steps)
    cfg = sc.config()
    assert fingerprint(again, cfg) == fingerprint(result, cfg), "same input, different results"


@INSTRUMENTS
@FUZZ_SETTINGS
@given(sc=scenarios())
def test_engine_fuzz(sc: Scenario) -> None:
    describe_scenario(sc)
    run_scenario(sc)


@INSTRUMENTS
# NOTE: a fortieth of the examples (5 in CI): with the roofline model a colocated example
# can take seconds (20 examples took 17-187 s on the 2-core VM, depending on the draw).
@settings(FUZZ_SETTINGS, max_examples=max(5, FUZZ_EXAMPLES // 40))
@given(sc=scenarios(real_cost=True))
def test_engine_fuzz_default_cost_model(sc: Scenario) -> None:
    describe_scenario(sc)
    run_scenario(sc)


@INSTRUMENTS
@pytest.mark.parametrize("seed", range(3))
def test_example_scenario_is_deterministic_and_live(seed: int) -> None:
    """A fixed mid-size scenario (HiCache + CP bs>1 + affinity) as a plain test."""
    reqs = [
        ReqSpec(
            arrival=0.01 * i,
            input_len=200 + 97 * ((i * 7 + seed) % 13),
            output_len=(i % 3) * 4,
            group=i % 2,
            sys_tokens=512,
            session=i % 5,
            keyed=i % 7 != 0,
            priority=0,
        )
        for i in range(40)
    ]
    kw: dict[str, Any] = {
        "debug_check_invariants": True,
        "tp_size": 8,
        "cp_size": 8,
        "enable_cp_shared_kv": True,
        "enable_cp_shared_kv_prefill_bs_gt1": True,
        "cp_shared_kv_prefill_max_requests": 4,
        "chunked_prefill_size": 1024,
        "enable_hierarchical_cache": True,
        "enable_affinity": True,
        "affinity_max_age_s": 0.2,
        "max_total_tokens": 64 * 8 * 12,
    }
    sc = Scenario(kw, reqs, 1, False)
    run_scenario(sc)


@INSTRUMENTS
def test_priority_preemption_and_decode_retraction_do_not_livelock() -> None:
    """Found by this fuzz: colocated decode with priority preemption on memory
    (``enable_preempt_on_no_token``). Retraction took the *newest* decoding request,
    which was the high-priority one (priority 6, lower is more important) that had just
    preempted the older priority-12 request; that one came back, grew, and the newcomer
    was retracted again, forever (375k preemptions and 125k retractions in 104,000
    simulated seconds with 4 requests left). Retraction now spares more important
    requests first."""

    def req(t: float, n: int, out: int, sess: int, prio: int, keyed: bool = True) -> ReqSpec:
        return ReqSpec(t, n, out, sess % 2, 1, sess, keyed, prio)

    reqs = [
        req(4.783, 2, 400, 9, 12),
        req(5.303, 129, 100, 5, 1, keyed=False),
        req(5.305, 245, 400, 7, 6),
        req(5.425, 155, 100, 20, 1),
        req(5.445, 34, 100, 14, 1),
        req(5.445, 5, 100, 15, 2),
        req(5.445, 213, 100, 18, 0, keyed=False),
        req(5.465, 136, 100, 0, 3),
    ]
    kw: dict[str, Any] = {
        "debug_check_invariants": True,
        "tp_size": 6,
        "cp_size": 6,
        "enable_cp_shared_kv": True,
        "enable_cp_shared_kv_prefill_bs_gt1": True,
        "cp_shared_kv_prefill_max_requests": 4,
        "page_size": 64,
        "max_total_tokens": 1088,  # 17 pages over 6 lanes
        "mode": "colocated",
        "new_token_ratio_decay_steps": 5,
        "enable_priority_scheduling": True,
        "schedule_low_priority_values_first": True,
        "priority_scheduling_preemption_threshold": 2,
        "enable_preempt_on_no_token": True,
    }
    sc = Scenario(kw, reqs, 1, False)
    run_scenario(sc)
    _, result, _ = replay(sc)
    assert result.summary["completed"] == len(reqs)
    assert result.summary["preemptions"] + result.summary["retractions"] < 100


@INSTRUMENTS
def test_a_requeue_that_can_never_fit_again_is_rejected() -> None:
    """Found by this fuzz: colocated, a 384-token pool (6 pages), a 253-token prompt
    retracted after 64 output tokens by a more important request. Its re-prefill (prompt
    + kept output, 317 tokens) + reserved output + one page is 397 tokens, which never
    passes the admission memory test: it waited at the head of the queue for ever and the
    run ended with it unfinished. It is now rejected when it is requeued."""
    reqs = [
        ReqSpec(3.0, 253, 100, 0, 0, 0, False, 0),
        ReqSpec(3.001, 1, 100, 0, 0, 0, True, 3),
    ]
    kw: dict[str, Any] = {
        "debug_check_invariants": True,
        "tp_size": 2,
        "cp_size": 2,
        "page_size": 64,
        "max_prefill_tokens": 1,
        "clip_max_new_tokens": 16,
        "mode": "colocated",
        "enable_priority_scheduling": True,
        "priority_scheduling_preemption_threshold": 0,
        "enable_hierarchical_cache": True,
        "hicache_write_through_threshold": 1,
        "hicache_load_back_threshold": 0,
        "hicache_ratio": 1.01,
        "max_total_tokens": 384,
        "schedule_max_wait_s": 5.0,
    }
    sc = Scenario(kw, reqs, 1, False)
    run_scenario(sc)
    _, result, _ = replay(sc)
    by_rid = {r.rid: r for r in result.requests}
    b, a = by_rid["r0"], by_rid["r1"]
    assert a.state.status is ReqStatus.FINISHED and b.state.status is ReqStatus.REJECTED
    assert (
        b.metrics.retractions == 1
        and b.state.output_len == 64
        and b.metrics.first_token_time is not None
    )
    assert b.metrics.reject_reason is not None
    assert b.metrics.reject_reason.startswith(
        "requeued with 64 output tokens kept: prompt + reserved"
    )
    assert "397 tokens is not below the KV pool (384 tokens)" in b.metrics.reject_reason
    summary = result.summary
    assert (summary["completed"], summary["rejected"], summary["unfinished"]) == (2, 1, 0)


# --------------------------------------------------------------------------- loaders + CLI


@dataclass(frozen=True, slots=True)
class TraceFile:
    """A drawn trace file: ``fmt`` is mooncake, jsonl-hash, jsonl-tokens or jsonl-len."""

    fmt: str
    rows: list[dict[str, Any]]
    block_size: int
    cfg_kwargs: dict[str, Any]
    time_scale: float = 1.0

    def arrivals(self) -> list[float]:
        """Arrival times as the replay options define them: re-based so that the first
        row arrives at 0, then multiplied by ``--time-scale``."""
        raw = [r["timestamp"] / 1000.0 if "timestamp" in r else r["arrival_s"] for r in self.rows]
        times = [t - raw[0] for t in raw]
        return times if self.time_scale == 1.0 else [t * self.time_scale for t in times]

    def text(self) -> str:
        return "".join(json.dumps(r) + "\n" for r in self.rows)

    def requests(self) -> list[Request]:
        """The requests the rows mean, built directly (not through the loaders)."""
        page = int(self.cfg_kwargs["page_size"])
        out: list[Request] = []
        times = self.arrivals()
        for line, r in enumerate(self.rows, 1):
            prio = int(r.get("priority", 0))
            t = times[line - 1]
            if self.fmt == "mooncake":
                out.append(
                    Request.from_block_hashes(
                        f"L{line}",
                        r["hash_ids"],
                        input_len=r["input_length"],
                        block_size=self.block_size,
                        page_size=page,
                        arrival_time=t,
                        max_new_tokens=r["output_length"],
                        priority=prio,
                    )
                )
            elif self.fmt == "jsonl-hash":
                out.append(
                    Request.from_block_hashes(
                        r["rid"],
                        r["hash_ids"],
                        input_len=r["input_len"],
                        block_size=r["block_size"],
                        page_size=page,
                        arrival_time=t,
                        max_new_tokens=r["output_len"],
                        priority=prio,
                    )
                )
            elif self.fmt == "jsonl-tokens":
                out.append(
                    Request.from_tokens(
                        r["rid"],
                        r["tokens"],
                        page_size=page,
                        arrival_time=t,
                        max_new_tokens=r["output_len"],
                        priority=prio,
                    )
                )
            else:
                out.append(
                    Request(
                        rid=f"L{line}",
                        arrival_time=t,
                        input_len=r["input_len"],
                        max_new_tokens=r["output_len"],
                        keys=[],
                        key_tokens=page,
                        priority=prio,
                    )
                )
        return out

    def flags(self) -> list[str]:
        """Every setting as an explicit SGLang-spelled flag (no deployment default
        applies: tp, cp, shared KV and HiCache are always given)."""
        out: list[str] = []
        for k, v in self.cfg_kwargs.items():
            flag = "--" + k.replace("_", "-")
            if isinstance(v, bool):
                out.append(f"{flag}={'true' if v else 'false'}")
            else:
                out += [flag, "none" if v is None else str(v)]
        return out


@st.composite
def trace_files(draw: st.DrawFn) -> TraceFile:
    fmt = draw(st.sampled_from(["mooncake", "mooncake", "jsonl-hash", "jsonl-tokens", "jsonl-len"]))
    page = draw(st.sampled_from([1, 16, 64, 128, 128]))
    block = draw(st.sampled_from([16, 64, 128, 512])) if fmt != "jsonl-tokens" else page
    n = draw(st.integers(1, 20))
    n_sessions = draw(st.integers(1, n))
    sys_len = draw(st.sampled_from([0, 100, 700, 1500]))
    grown = [sys_len] * n_sessions
    t_ms = 0
    rows: list[dict[str, Any]] = []
    for i in range(n):
        t_ms += draw(st.sampled_from([0, 0, 3, 40, 500]))
        sess = draw(st.integers(0, n_sessions - 1))
        grown[sess] += draw(st.integers(1, 900))
        input_len = min(grown[sess], 3000)
        out_len = draw(st.sampled_from([0, 1, 5, 60]))
        prio = draw(st.integers(0, 2))

        def unit(b: int, sess: int = sess) -> int:  # chain-consistent within a session
            return 1 + b if b * block < sys_len else 10**6 * (sess + 1) + b

        hash_ids = [unit(b) for b in range(-(-input_len // block))]
        if fmt == "mooncake":
            row: dict[str, Any] = {
                "timestamp": t_ms,
                "input_length": input_len,
                "output_length": out_len,
                "hash_ids": hash_ids,
            }
        elif fmt == "jsonl-hash":
            row = {"rid": f"q{i}", "arrival_s": t_ms / 1000.0, "output_len": out_len}
            row |= {"hash_ids": hash_ids, "block_size": block, "input_len": input_len}
        elif fmt == "jsonl-tokens":
            tokens = [t if t < sys_len else 7_000_000 * (sess + 1) + t for t in range(input_len)]
            row = {"rid": f"q{i}", "arrival_s": t_ms / 1000.0, "output_len": out_len}
            row["tokens"] = tokens
        else:
            row = {"arrival_s": t_ms / 1000.0, "output_len": out_len, "input_len": input_len}
        if prio:
            row["priority"] = prio
        rows.append(row)

    # NOTE: the fraction stated, so the CLI's launch line does not get SGLang's
    # GPU-dependent default (app/sglang_memory.py) where the in-process Config has 0.88.
    kw: dict[str, Any] = {
        "page_size": page,
        "debug_check_invariants": True,
        "mem_fraction_static": 0.88,
    }
    cp = draw(st.sampled_from([1, 1, 2, 4]))
    kw["tp_size"] = cp
    kw["cp_size"] = cp
    kw["enable_cp_shared_kv"] = cp > 1
    lanes = cp
    chunk = draw(st.sampled_from([None, 2, 8, 32]))
    kw["chunked_prefill_size"] = None if chunk is None else chunk * max(page, 16)
    if cp > 1 and draw(st.booleans()):
        kw["enable_cp_shared_kv_prefill_bs_gt1"] = True
        kw["cp_shared_kv_prefill_max_requests"] = draw(st.sampled_from([None, 2, 3]))
    kw["max_prefill_tokens"] = draw(st.sampled_from([256, 4096, 16384]))
    kw["schedule_policy"] = draw(st.sampled_from(["fcfs", "lpm", "dfs-weight", "lof"]))
    kw["mode"] = draw(st.sampled_from(["pd-prefill", "colocated"]))
    host = draw(st.sampled_from(["off", "ratio", "exact"]))
    kw["enable_hierarchical_cache"] = host != "off"
    if host == "ratio":
        kw["hicache_ratio"] = 2.0
    elif host == "exact":
        kw["hicache_size"] = 1
        kw["kv_bytes_per_token"] = 10**9 // (draw(st.sampled_from([1, 2, 4])) * page)
    longest = max(
        int(r.get("input_length", r.get("input_len", len(r.get("tokens", []))))) for r in rows
    )
    need = -(-(longest + 64 + page) // page) + 1
    pages = need * draw(st.sampled_from([1, 1, 3]))
    pages = -(-pages // lanes) * lanes
    kw["max_total_tokens"] = pages * page
    return TraceFile(fmt, rows, block, kw, draw(st.sampled_from([1.0, 1.0, 0.5, 3.0])))


def _read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@settings(FUZZ_SETTINGS, max_examples=max(5, FUZZ_EXAMPLES // 4))
@given(tf=trace_files())
def test_cli_replay_matches_in_process(tf: TraceFile) -> None:
    """``prefillkit replay --trace FILE`` on a random trace file (Mooncake or prefillkit
    JSONL) writes what an in-process replay of the same rows writes: the loader reads
    every row as the format says, the CLI builds the config its flags say, and the
    request table holds each row's id, arrival and lengths."""
    note(f"{tf.fmt} block={tf.block_size} x{tf.time_scale} {tf.cfg_kwargs} rows={len(tf.rows)}")
    with tempfile.TemporaryDirectory(prefix="prefillkit-fuzz-cli-") as tmp:
        trace = Path(tmp) / "trace.jsonl"
        trace.write_text(tf.text(), encoding="utf-8")
        fmt = "mooncake" if tf.fmt == "mooncake" else "jsonl"
        argv = ["replay", "--trace", str(trace), "--format", fmt, "-q", "--json"]
        if tf.time_scale != 1.0:
            argv += ["--time-scale", str(tf.time_scale)]
        if tf.fmt == "mooncake" and tf.block_size != 512:
            argv += ["--block-size", str(tf.block_size)]
        out = Path(tmp) / "cli"
        argv += ["--out", str(out), *tf.flags()]
        assert cli_run(argv) == 0, argv

        cfg = Config(**tf.cfg_kwargs)
        reqs = tf.requests()
        result = Engine(cfg.sim_settings(), reqs).run()
        mine = Path(tmp) / "mine"
        write_run(
            result,
            mine,
            summary_document(result, name="cli", config=describe(cfg), workload={"source": "fuzz"}),
        )
        for name in ("requests.csv", "batches.csv"):
            cli_text = (out / name).read_text(encoding="utf-8")
            assert cli_text == (mine / name).read_text(encoding="utf-8"), name
        cli_doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        my_doc = json.loads((mine / "summary.json").read_text(encoding="utf-8"))
        for key in ("config", "deployment", "metrics", "partial"):
            assert cli_doc[key] == my_doc[key], key
        assert not cli_doc["partial"]

        # The loader, checked against the rows themselves.
        rows = _read_csv((out / "requests.csv").read_text(encoding="utf-8"))
        by_rid = {r["rid"]: r for r in rows}
        assert len(by_rid) == len(rows) == len(tf.rows)
        for req in reqs:
            row = by_rid[req.rid]
            assert float(row["arrival_s"]) == req.arrival_time
            assert int(row["input_len"]) == req.state.input_len
            out_col = "max_new_tokens" if "max_new_tokens" in row else "output_len"
            assert int(row[out_col]) == req.max_new_tokens
            assert int(row["priority"]) == req.priority
        batches = _read_csv((out / "batches.csv").read_text(encoding="utf-8"))
        assert len(batches) == len(result.batches)
        done = [r for r in rows if r["status"] != "rejected"]
        column = (
            "raw_extend_tokens"
            if batches and "raw_extend_tokens" in batches[0]
            else "extend_tokens"
        )
        assert sum(int(b[column]) for b in batches) >= sum(
            int(r["recomputed_tokens"]) for r in done
        )
