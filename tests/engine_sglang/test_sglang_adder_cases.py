"""Hand-built cases on SGLang's real scheduler with the plugin, in the manner of SGLang's
own adder tests: a pass over a queue whose every request's class is known, and what the
pass admits, leaves queued and leaves locked."""

from __future__ import annotations

import pytest

from prefillkit.integrations.sglang import MissingExtraError, require_sglang

try:
    require_sglang()
except MissingExtraError as err:
    pytest.skip(str(err), allow_module_level=True)

from sglang_twins import Twin, sglang_pass, sglang_side

from prefillkit.integrations.sglang.adder import state_of
from prefillkit.integrations.sglang.settings import settings_from_scheduler_config
from prefillkit.sched.config import SchedulerConfig

HEAD = list(range(100_000, 100_256))  # a cached 256-token prefix


def _twin(*queue: tuple[str, bool, int, float]) -> Twin:
    """Requests (rid, warm, new tokens, arrival): warm ones extend the cached HEAD."""
    tw = Twin(page_size=16, cached=[[*HEAD, 1]])
    unique = 5_000_000
    for rid, warm, n, arrival in queue:
        tail = list(range(unique, unique + n))
        unique += n
        tw.waiting.append((rid, (HEAD + tail) if warm else tail, arrival, 16))
    return tw


def _sched(tw: Twin, cp_active: bool = False, **kw: object) -> tuple[object, list[float]]:
    kw.setdefault("schedule_max_wait_s", None)
    cfg = SchedulerConfig(page_size=16, **kw)  # type: ignore[arg-type]
    return sglang_side(tw, settings_from_scheduler_config(cfg), cfg, cp_active=cp_active)


def test_a_cold_request_behind_a_warm_lead_is_skipped_untouched() -> None:
    s, clock = _sched(
        _twin(("w1", True, 100, 0.0), ("c", False, 200, 0.0), ("w2", True, 50, 0.0)),
        enable_affinity=True,
    )
    clock[0] = 1.0
    protected_before = s.tree_cache.protected_size()
    assert sglang_pass(s, release=False) == [("w1", 256, 356), ("w2", 256, 306)]
    assert [r.rid for r in s.waiting_queue] == ["c"]
    cold = s.waiting_queue[0]
    assert cold.lock is None  # no lock, no allocation: the scan only looked at it
    assert s.tree_cache.protected_size() == protected_before + 256  # the shared head
    assert state_of(s.tree_cache).defers[cold] == 1


def test_a_tripped_bound_stops_the_scan_and_the_cold_request_leads_next_pass() -> None:
    s, clock = _sched(
        _twin(
            ("w1", True, 100, 0.0),
            ("c1", False, 200, 0.0),
            ("c2", False, 300, 0.0),
            ("w2", True, 50, 0.0),
        ),
        enable_affinity=True,
        affinity_skip_window=1,
    )
    clock[0] = 1.0
    # c1 is skipped (the window fills); c2 trips W and stops the scan: w2 waits too.
    assert sglang_pass(s, release=True) == [("w1", 256, 356)]
    assert state_of(s.tree_cache).counters["affinity_stops_w"] == 1
    # Next pass: the stopped request leads (promoted), cold joins cold, warm joins cold.
    clock[0] = 2.0
    assert [rid for rid, _, _ in sglang_pass(s, release=True)] == ["c2", "c1", "w2"]


def test_cp_without_bs_gt1_runs_one_request_per_batch() -> None:
    s, _ = _sched(
        _twin(("a", True, 100, 0.0), ("b", True, 100, 0.0)),
        cp_active=True,
        cp_size=2,
        enable_cp_shared_kv=True,
    )
    assert [r for r, _, _ in sglang_pass(s, release=True)] == ["a"]
    assert state_of(s.tree_cache).last_close is not None
    assert state_of(s.tree_cache).last_close.value == "cp_bs1"


def test_cp_cached_token_limit_counts_each_admission_prefix() -> None:
    s, _ = _sched(
        _twin(("a", True, 100, 0.0), ("b", True, 100, 0.0), ("c", False, 100, 0.0)),
        cp_active=True,
        cp_size=2,
        enable_cp_shared_kv=True,
        enable_cp_shared_kv_prefill_bs_gt1=True,
        cp_shared_kv_prefill_max_cached_tokens=300,
    )
    # a brings 256 cached tokens; b would make 512 > 300: the batch closes before c.
    assert [r for r, _, _ in sglang_pass(s, release=True)] == ["a"]
    assert state_of(s.tree_cache).last_close.value == "cp_max_cached_tokens"  # type: ignore[union-attr]


def test_a_chunked_continuation_runs_alone_under_cp_bs_gt1() -> None:
    s, _ = _sched(
        _twin(("long", False, 1500, 0.0), ("b", True, 100, 0.0)),
        cp_active=True,
        cp_size=2,
        enable_cp_shared_kv=True,
        enable_cp_shared_kv_prefill_bs_gt1=True,
        chunked_prefill_size=1024,
    )
    assert sglang_pass(s, release=True) == [("long", 0, 1024)]
    # The last chunk leaves budget for b, but a chunk-led batch stays solo.
    assert sglang_pass(s, release=True) == [("long", 1024, 1500)]
    assert state_of(s.tree_cache).last_close.value == "chunked_solo"  # type: ignore[union-attr]


def test_the_wait_bound_puts_an_aged_request_ahead_of_lpm() -> None:
    tw = _twin(("old-cold", False, 100, 0.0), ("new-warm", True, 100, 9.0))
    common = {"schedule_policy": "lpm", "max_prefill_tokens": 128, "chunked_prefill_size": None}
    stock, _ = _sched(tw, **common)
    bounded, clock = _sched(tw, **common, schedule_max_wait_s=5.0)
    clock[0] = 10.0
    # Plain LPM serves the warm one first; with the 5 s bound the 10 s old request goes first.
    assert next(r for r, _, _ in sglang_pass(stock, release=True)) == "new-warm"
    assert next(r for r, _, _ in sglang_pass(bounded, release=True)) == "old-cold"
