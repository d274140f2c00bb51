"""Scheduler-driven execution: the executor runs exactly the scheduler's steps, bit for bit.

Random multi-turn sessions with shared system prompts (a scaled-down Mooncake shape: each turn's
prompt extends the previous turn's) go through the real scheduler -- chunked prefill, a device
pool small enough to evict, the host tier with load-back -- and every step's ``StepOutput`` is
turned into the executor's plan (``prefillkit.exec.drive``) and executed. ``check()`` (page-level
ownership) runs after every step. Every request's first-token logits must equal, **bitwise**, an
unbatched, uncached, unchunked forward of its whole prompt on a fresh executor: the executor's
arithmetic is batch-invariant (``exec/ops.py``), so batching, chunking, prefix hits, load-backs,
dedup at ``forward_done`` and CP ranks change no rounding. CP 2 runs the same kind of workload
on a scheduler with two owner lanes and two gloo ranks. Negative control: the same steps with
the load-backs dropped change some request's logits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

torch = pytest.importorskip("torch")

from exec_support import assert_bitwise, differs  # noqa: E402
from prefillkit.cache.events import BlockLoadedBack, BlockRemoved, BlockStored, KVEvent  # noqa: E402
from prefillkit.exec.drive import StepDriver, SyntheticTokens, lane_tables  # noqa: E402
from prefillkit.exec.executor import Executor  # noqa: E402
from prefillkit.exec.model import Model, ModelConfig  # noqa: E402
from prefillkit.exec.plan import ReqPlan, StepPlan  # noqa: E402
from prefillkit.request import Request  # noqa: E402
from prefillkit.sched.config import SchedulerConfig  # noqa: E402
from prefillkit.sched.interface import build_scheduler  # noqa: E402

PAGE = 4
VOCAB = ModelConfig().vocab


def sessions(seed: int, n_sessions: int, turns: int) -> list[tuple[int, str, list[int]]]:
    """(arrival step, rid, prompt): sessions on 3 shared system prompts, turns growing."""
    rng = random.Random(seed)
    systems = [[rng.randrange(VOCAB) for _ in range(rng.randrange(12, 41))] for _ in range(3)]
    # two identical cold prompts arriving first, together: computed twice in one batch, the
    # second one's pages freed as duplicates at forward_done (its page table then names the
    # first one's cached pages)
    twin = [rng.randrange(VOCAB) for _ in range(10)]
    out: list[tuple[int, str, list[int]]] = [(0, "twinA", twin), (0, "twinB", list(twin))]
    for s in range(n_sessions):
        prompt = list(rng.choice(systems))
        t = rng.randrange(4)
        for k in range(turns):
            prompt = prompt + [rng.randrange(VOCAB) for _ in range(rng.randrange(3, 30))]
            out.append((t, f"s{s}t{k}", list(prompt)))
            t += rng.randrange(1, 6)
    # and two longer ones one step apart: the second one's chunks may continue on pages the
    # first one cached
    twin2 = [rng.randrange(VOCAB) for _ in range(70)]
    out += [(1, "twinC", twin2), (2, "twinD", list(twin2))]
    return sorted(out, key=lambda x: x[0])


@dataclass
class Run:
    plans: list[StepPlan] = field(default_factory=list)
    prompts: dict[str, list[int]] = field(default_factory=dict)
    logits: dict[str, torch.Tensor] = field(default_factory=dict)
    load_backs: int = 0
    backups: int = 0
    chunks: int = 0
    dedups: int = 0
    evicted: int = 0


def drive(
    seed: int,
    cp: int,
    *,
    execute: bool,
    policy: str = "write_through",
    total_pages: int = 72,
    host_pages: int = 400,
) -> Run:
    """Replay a random session workload through the scheduler; with ``execute`` run each step
    on an in-process executor (CP 1), else only record the plans."""
    cfg = SchedulerConfig(
        page_size=PAGE,
        max_prefill_tokens=96,
        chunked_prefill_size=32,
        schedule_policy="fcfs",
        enable_hierarchical_cache=True,
        hicache_write_policy=policy,
        hicache_load_back_threshold=0,
        cp_size=cp,
        enable_cp_shared_kv=cp > 1,
        enable_cp_shared_kv_prefill_bs_gt1=cp > 1,
        cp_prefill_mix_chunked=cp > 1,
        cp_shared_kv_prefill_max_requests=4 if cp > 1 else None,
    )
    sched = build_scheduler(cfg, total_pages, PAGE, host_pages=host_pages, reserve_decode=False)
    run = Run()
    work = sessions(seed, 10, 4)
    run.prompts = {rid: p for _, rid, p in work}
    executor = None
    if execute:
        executor = Executor(Model(ModelConfig()), PAGE, -(-total_pages // cp), host_pages)
    driver = StepDriver(executor, lambda r: run.prompts[r.rid], PAGE, cp)
    events: list[KVEvent] = []

    def listen(ev: KVEvent) -> None:
        events.append(ev)
        driver.on_kv_event(ev)

    sched.set_kv_listener(listen)
    rng = random.Random(seed + 1)
    holding: list[tuple[int, Request]] = []  # finished prefills whose KV is still being sent
    i = step_no = 0
    while i < len(work) or sched.has_work or holding:
        while i < len(work) and work[i][0] <= step_no:
            _, rid, p = work[i]
            req = Request.from_tokens(rid, p, page_size=PAGE, max_new_tokens=1)
            assert sched.add_request(req) is None
            i += 1
        step = sched.schedule(float(step_no))
        if step.reqs:
            if execute:
                driver.forward(step, [sched.state.running[s.rid] for s in step.reqs])
            else:
                run.plans.append(driver.plan(step, [sched.state.running[s.rid] for s in step.reqs]))
            run.load_backs += sum(len(s.load_back) for s in step.reqs)
            run.chunks += sum(s.is_chunk for s in step.reqs)
            used = {s.rid: s.prefix_page_ids() + s.page_ids() for s in step.reqs}
            reqs = {s.rid: sched.state.running[s.rid] for s in step.reqs}
            for req in sched.forward_done(step, float(step_no) + 0.5):
                holding.append((step_no + rng.randrange(0, 4), req))
            for s in step.reqs:
                if sched.page_table(reqs[s.rid])[: len(used[s.rid])] != used[s.rid]:
                    run.dedups += 1  # its duplicate pages were freed for the cached ones
        for due, req in [h for h in holding if h[0] <= step_no]:
            sched.finish(req, float(step_no))
            holding.remove((due, req))
        sched.check()
        step_no += 1
        assert step_no < 2000, "the workload did not drain"
    run.backups = sum(1 for e in events if isinstance(e, BlockStored) and e.medium == "CPU")
    run.evicted = sum(1 for e in events if isinstance(e, BlockRemoved) and e.medium == "GPU")
    assert any(isinstance(e, BlockLoadedBack) for e in events) == (run.load_backs > 0)
    run.logits = dict(driver.logits)
    return run


_REF: dict[tuple[int, ...], torch.Tensor] = {}


def reference(tokens: list[int]) -> torch.Tensor:
    """Unbatched, uncached, unchunked: the whole prompt cold on a fresh executor (CP 1)."""
    key = tuple(tokens)
    if key not in _REF:
        n = -(-len(tokens) // PAGE)
        ex = Executor(Model(ModelConfig()), PAGE, n)
        plan = StepPlan((ReqPlan("ref", key, 0, ((),), (tuple(range(n)),)),))
        _REF[key] = ex.step(plan).logits["ref"]
    return _REF[key]


def exercised(run: Run) -> None:
    assert run.chunks > 0 and run.load_backs > 0 and run.backups > 0 and run.evicted > 0
    assert run.dedups > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_scheduler_driven_cp1_matches_reference(seed: int) -> None:
    run = drive(seed, 1, execute=True)
    exercised(run)
    assert set(run.logits) == set(run.prompts)
    for rid, got in run.logits.items():
        assert_bitwise(got, reference(run.prompts[rid]))


def test_write_back_policy_and_dropped_load_backs() -> None:
    run = drive(2, 1, execute=False, policy="write_back", total_pages=60)
    assert run.load_backs > 0 and run.backups > 0
    cfg = ModelConfig()

    def execute(plans: list[StepPlan]) -> dict[str, torch.Tensor]:
        ex = Executor(Model(cfg), PAGE, 60, 400)
        out: dict[str, torch.Tensor] = {}
        for p in plans:
            out.update({str(k): v for k, v in ex.step(p).logits.items()})
        return out

    got = execute(run.plans)
    for rid, v in got.items():
        assert_bitwise(v, reference(run.prompts[rid]))
    # control: without the load-backs the loaded pages hold stale (or NaN) rows
    dropped = execute([replace(p, loads=()) for p in run.plans])
    assert any(differs(dropped[rid], got[rid]) for rid in got)


def test_scheduler_driven_cp2_over_gloo_matches_reference() -> None:
    from prefillkit.exec.cp import run_cp

    run = drive(3, 2, execute=False)
    exercised(run)
    outs = run_cp(ModelConfig(), PAGE, 36, run.plans, 2, n_host_slots=400)
    got = {str(k): v for o in outs for k, v in o.logits.items()}
    assert set(got) == set(run.prompts)
    for rid, v in got.items():
        assert_bitwise(v, reference(run.prompts[rid]))


def test_lane_tables_maps_engine_ids_to_lane_local() -> None:
    assert lane_tables([0, 3, 4, 7], 0, 2) == ((0, 2), (1, 3))
    assert lane_tables([5, 2], 1, 2) == ((1,), (2,))
    with pytest.raises(ValueError, match="lane"):
        lane_tables([0, 2], 0, 2)


def test_synthetic_tokens_follow_the_key_chain() -> None:
    toks = SyntheticTokens(VOCAB)
    a = Request.from_block_hashes("a", [1, 2, 3], input_len=40, block_size=8, page_size=4)
    b = Request.from_block_hashes("b", [1, 2, 9], input_len=30, block_size=8, page_size=4)
    ta, tb = toks(a), toks(b)
    assert len(ta) == 40 and len(tb) == 30
    assert ta[:16] == tb[:16] and ta[16:24] != tb[16:24]
    assert all(0 <= t < VOCAB for t in ta + tb)
