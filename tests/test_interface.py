"""The typed scheduler interface: the engine loop touches nothing else, a step is one
immutable result naming real pages, and the event hooks report decisions and KV."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from prefillkit.cache.events import BlockLoadedBack, BlockRemoved, BlockStored
from prefillkit.cache.pages import pending_table
from prefillkit.request import ReqStatus, Request
from prefillkit.sched import interface
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.interface import (
    AdmissionEvent,
    AdmissionEventKind,
    SchedulerInterface,
    StepOutput,
    build_scheduler,
)
from prefillkit.sched.scheduler import Scheduler

ENGINE = Path(interface.__file__).parents[1] / "sim" / "engine.py"


def protocol_members() -> set[str]:
    return {
        n
        for n, _ in inspect.getmembers(SchedulerInterface)
        if not n.startswith("_") and n in SchedulerInterface.__dict__
    }


def test_engine_uses_only_the_interface() -> None:
    """Every attribute the engine reads off its scheduler is a Protocol member, and it
    never sets a request's status itself."""
    tree = ast.parse(ENGINE.read_text())
    allowed = protocol_members()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            v = node.value
            is_sched = (isinstance(v, ast.Name) and v.id == "sched") or (
                isinstance(v, ast.Attribute)
                and v.attr == "sched"
                and isinstance(v.value, ast.Name)
                and v.value.id == "self"
            )
            if is_sched:
                used.add(node.attr)
            if node.attr == "status" and isinstance(node.ctx, ast.Store):
                pytest.fail(f"sim/engine.py sets .status at line {node.lineno}")
    assert used, "the AST check found no scheduler call (renamed attribute?)"
    assert used <= allowed, f"engine touches scheduler internals: {sorted(used - allowed)}"


def test_scheduler_implements_the_protocol() -> None:
    for name in protocol_members():
        assert hasattr(Scheduler, name), name


def test_the_interface_is_the_schedulers_only_public_api() -> None:
    """Its public calls are exactly the Protocol's; ``state`` is there to be inspected."""
    s = make()
    public = {n for n in dir(s) if not n.startswith("_")}
    assert public == protocol_members() | {"state"}


def test_the_factory_builds_a_scheduler_from_its_config() -> None:
    cfg = SchedulerConfig(page_size=4, max_prefill_tokens=64, chunked_prefill_size=None)
    s = build_scheduler(cfg, 64, 4, reserve_decode=False)
    assert isinstance(s, Scheduler) and s.state.pool.total_pages == 64
    assert not s.state.reserve_decode and s.state.cfg is cfg


def _sched_imports(path: Path) -> set[str]:
    """The sched/ modules ``path`` imports, at any depth (function-level and
    TYPE_CHECKING imports included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "prefillkit.sched":
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("prefillkit.sched."):
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("prefillkit.sched."):
                    out.add(a.name.split(".")[2])
    return out


def test_the_scheduler_modules_import_no_circle() -> None:
    """No module of sched/ imports a module that imports it back, however indirectly."""
    deps = {p.stem: _sched_imports(p) for p in Path(interface.__file__).parent.glob("*.py")}
    assert "scheduler" in deps["interface"] and "step" in deps["scheduler"]

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(deps[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(deps.get(m, ()))
        return seen

    circles = sorted(m for m in deps if m in reachable(m))
    assert circles == [], circles


def make(cfg: SchedulerConfig | None = None, pages: int = 64, host: int = 0) -> Scheduler:
    cfg = cfg or SchedulerConfig(page_size=4, max_prefill_tokens=64, chunked_prefill_size=None)
    return Scheduler(cfg, pages, 4, host_pages=host)


def req(rid: str, tokens: list[int], t: float = 0.0) -> Request:
    return Request.from_tokens(rid, tokens, page_size=4, arrival_time=t, max_new_tokens=8)


def test_step_is_immutable_and_names_pages() -> None:
    s = make()
    a = req("a", list(range(20)))
    s.add_request(a)
    step = s.schedule(0.0)
    assert isinstance(step, StepOutput) and len(step.reqs) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.reqs = ()  # type: ignore[misc]
    r = step.reqs[0]
    assert (r.prefix_len, r.extend_start, r.extend_end, r.is_chunk) == (0, 0, 20, False)
    assert r.prefix_page_ids() == [] and len(r.page_ids()) == 5 and r.new_start_page == 0
    assert a.state.pending_pages is not None
    assert r.page_ids() == pending_table(a.state.pending_pages)[0].tolist()
    a_pages = r.page_ids()
    s.forward_done(step, 1.0)
    s.begin_transfer(a)
    assert a.state.status is ReqStatus.TRANSFERRING
    s.check()
    # A second request with the same 16-token prefix: its prefix pages are a's pages.
    b = req("b", [*list(range(16)), 99, 98, 97])
    s.add_request(b)
    step2 = s.schedule(2.0)
    rb = step2.reqs[0]
    assert rb.prefix_len == 16 and rb.prefix_page_ids() == a_pages[:4]
    assert not set(rb.page_ids()) & set(a_pages)
    s.check()
    s.finish(a, 3.0)
    s.forward_done(step2, 3.0)
    s.finish(b, 3.0)
    s.check()
    assert s.state.pool.owned == [0]


def test_empty_step_says_why() -> None:
    s = make()
    assert not s.has_work
    s.add_request(req("a", list(range(20))))
    s.schedule(0.0)
    s.add_request(req("b", list(range(100, 400))))  # 300 tokens, more than the 64-token budget
    step = s.schedule(0.0)
    assert step.stop_reason.value in {"memory", "max_prefill_tokens", "queue_empty"}


def test_admission_observer_sees_candidates_and_stop() -> None:
    s = make()
    events: list[AdmissionEvent] = []
    s.set_admission_observer(events.append)
    for i in range(3):
        s.add_request(req(f"r{i}", list(range(i * 100, i * 100 + 30))))
    step = s.schedule(0.0)
    kinds = [e.kind for e in events]
    assert kinds[-1] is AdmissionEventKind.STOP and events[-1].reason == step.stop_reason.value
    cands = [e for e in events if e.kind is AdmissionEventKind.CANDIDATE]
    assert [e.rid for e in cands if e.admitted] == [r.rid for r in step.reqs]
    assert all(isinstance(e.rem_total_tokens, float | int) for e in cands)


def test_observer_changes_nothing() -> None:
    def run(observe: bool) -> list[tuple[str, int, int]]:
        s = make()
        if observe:
            s.set_admission_observer(lambda e: None)
            s.set_kv_listener(lambda e: None)
        out = []
        for i in range(6):
            s.add_request(req(f"r{i}", list(range(i % 2 * 50, i % 2 * 50 + 30 + i))))
        while s.has_work:
            step = s.schedule(0.0)
            for r in step.reqs:
                out.append((r.rid, r.prefix_len, r.extend_end))
            for r in s.forward_done(step, 0.0):
                s.finish(r, 0.0)
        return out

    assert run(True) == run(False)


def test_kv_events() -> None:
    cfg = SchedulerConfig(
        page_size=4,
        max_prefill_tokens=64,
        chunked_prefill_size=None,
        enable_hierarchical_cache=True,
        hicache_write_policy="write_through",
        hicache_load_back_threshold=1,
    )
    s = make(cfg, pages=16, host=64)
    events: list[object] = []
    s.set_kv_listener(events.append)
    a = req("a", list(range(20)))
    s.add_request(a)
    step = s.schedule(0.0)
    for r in s.forward_done(step, 0.0):
        s.finish(r, 0.0)
    stored = [e for e in events if isinstance(e, BlockStored)]
    assert {e.medium for e in stored} == {"GPU", "CPU"}
    gpu = next(e for e in stored if e.medium == "GPU")
    assert gpu.keys == tuple(a.keys) and list(gpu.pages) == step.reqs[0].page_ids()
    # A cold request that needs the whole pool evicts a's pages (they stay on host) ...
    c = req("c", list(range(500, 548)))
    s.add_request(c)
    step = s.schedule(1.0)
    assert any(isinstance(e, BlockRemoved) and e.medium == "GPU" for e in events)
    for r in s.forward_done(step, 1.0):
        s.finish(r, 1.0)
    # ... and a's prefix comes back by a load-back with (host slot, device page) copies.
    b = req("b", [*list(range(20)), 7])
    s.add_request(b)
    step = s.schedule(2.0)
    loads = [e for e in events if isinstance(e, BlockLoadedBack)]
    assert loads, events
    rb = step.reqs[0]
    assert rb.loaded_tokens > 0 and rb.load_back == tuple(p for e in loads for p in e.copies)
    assert [d for _, d in rb.load_back] == rb.prefix_page_ids()[-len(rb.load_back) :]
    s.check()


def test_abort_frees_everything_wherever_the_request_is() -> None:
    s = make()
    a = req("a", list(range(20)))
    b = req("b", list(range(100, 130)))
    s.add_request(a)
    step = s.schedule(0.0)
    s.add_request(b)
    s.abort(b, 0.5)  # waiting
    s.abort(a, 0.5)  # running, mid-forward
    assert a.state.status is ReqStatus.ABORTED and b.state.status is ReqStatus.ABORTED
    assert not s.has_work and s.num_pending() == 0
    s.check()
    assert s.state.pool.owned == [0] and step.reqs[0].rid == "a"


def test_multi_lane_steps_name_pages_on_their_owner_lanes() -> None:
    cfg = SchedulerConfig(
        page_size=4,
        cp_size=4,
        enable_cp_shared_kv=True,
        max_prefill_tokens=256,
        chunked_prefill_size=None,
    )
    s = Scheduler(cfg, 64, 4)
    a = req("a", list(range(40)))
    s.add_request(a)
    step = s.schedule(0.0)
    ra = step.reqs[0]
    ids = ra.page_ids()
    assert [pid % 4 for pid in ids] == [j % 4 for j in range(10)]  # page j on lane j mod 4
    s.forward_done(step, 1.0)
    b = req("b", [*list(range(32)), 5, 6, 7, 8, 9])
    s.add_request(b)
    rb = s.schedule(1.0).reqs[0]
    assert rb.prefix_page_ids() == ids[:8] and rb.new_start_page == 8
    assert [pid % 4 for pid in rb.page_ids()] == [j % 4 for j in range(8, 10)]
    s.check()
