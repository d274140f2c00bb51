"""One test per admission rule of ``PrefillAdder`` (docs/design.md §2-§4 and upstream).

Every test drives a real cache by hand (``tests/conftest.py``) and checks the cache
invariants after every admission; most end by allocating the batch's pages exactly as
the scheduler does after a pass (``alloc_batch``).
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import (
    add,
    add_chunked,
    alloc_batch,
    finish,
    make_adder,
    make_cache,
    make_chunked,
    make_limits,
    make_req,
    snapshot,
    to_host,
    warm,
)
from prefillkit.cache import PrefixCache, check_invariants
from prefillkit.models import get_model
from prefillkit.request import Request
from prefillkit.sched.adder import AdmissionLimits, PrefillAdder, ignore_eos_fits
from prefillkit.sched.buffer import BufferEstimatorContext, BufferReqShape, estimate_buffer_bytes
from prefillkit.sched.verdicts import AddReqResult, CloseReason, CpMode

CONT = AddReqResult.CONTINUE
NO_TOKEN = AddReqResult.NO_TOKEN
OTHER = AddReqResult.OTHER
GLM5 = get_model("glm-5")


def running_req(rid: str, max_new: int, output: int, ignore_eos: bool = False) -> Request:
    r = make_req(rid, 8, 4, max_new=max_new, ignore_eos=ignore_eos)
    r.state.output_len = output
    return r


def bs_gt1(page: int = 4, **kw: Any) -> AdmissionLimits:
    return make_limits(page, cp_mode=CpMode.BS_GT1, **kw)


def mix_limits(
    page: int = 4,
    chunk: int = 400,
    max_requests: int = 4,
    cp_max_total_extend_tokens: int | None = None,
    **kw: Any,
) -> AdmissionLimits:
    """bs>1 with cp_prefill_mix_chunked and a consistent staging identity."""
    cap = chunk if cp_max_total_extend_tokens is None else min(cp_max_total_extend_tokens, chunk)
    cap_pages = -(-cap // page)
    return bs_gt1(
        page,
        chunked_prefill_size=chunk,
        cp_max_requests=max_requests,
        cp_max_total_extend_tokens=cp_max_total_extend_tokens,
        cp_prefill_mix_chunked=True,
        staging_identity=(cap_pages, max_requests, cap_pages + max_requests),
        **kw,
    )


# ============================================================== budgets
def test_rem_total_and_cur_rem_are_free_plus_evictable_minus_offsets() -> None:
    cache = make_cache(1000, 4)
    warm(cache, make_req("w", 40, 4).keys)  # 10 evictable pages, 990 free
    adder = make_adder(cache)
    assert adder.rem_total_tokens == (990 + 10) * 4
    assert adder.cur_rem_tokens == (990 + 10) * 4
    assert adder.budget_state() is CONT


def test_running_reservation_is_remaining_output_clipped_at_4096_times_ratio() -> None:
    cache = make_cache(1000, 4)
    running = [
        running_req("a", max_new=100, output=10),  # min(90, 4096) x 0.5 = 45
        running_req("b", max_new=100_000, output=0),  # clipped: 4096 x 0.5 = 2048
        running_req("c", max_new=50, output=0, ignore_eos=True),  # ratio 1.0: 50
    ]
    adder = make_adder(cache, running=running, ratio=0.5)
    assert adder.rem_total_token_offset == 45 + 2048 + 50
    assert adder.rem_total_tokens == 4000 - (45 + 2048 + 50)
    # The reservation only holds back rem_total; cur_rem is free + evictable.
    assert adder.cur_rem_tokens == 4000
    assert adder.budget_state() is CONT
    clipped = make_adder(cache, make_limits(4, clip_max_new_tokens=64), running, 0.5)
    assert clipped.rem_total_token_offset == 0.5 * 64 + 0.5 * 64 + 50


def test_admitted_request_charges_ceil_extend_plus_page_plus_max_new() -> None:
    cache = make_cache(2000, 4)
    warm(cache, make_req("w", 12, 4, family="f", shared=3).keys)
    adder = make_adder(cache, chunked_prefill_size=1000, max_prefill_tokens=500)
    before_total = adder.rem_total_tokens
    req = make_req("r", 30, 4, family="f", shared=3, max_new=5000)
    assert add(adder, req) is CONT
    assert (req.state.prefix_len, req.state.extend_input_len, req.state.loaded_tokens) == (
        12,
        18,
        0,
    )
    assert adder.rem_total_token_offset == 20 + 4 + 4096  # ceil_page(18) + page + clip
    assert adder.cur_rem_token_offset == 20 + 4
    assert adder.rem_input_tokens == 500 - 20
    assert adder.rem_chunk_tokens == 1000 - 20
    assert (adder.batch_extend_tokens, adder.batch_cached_tokens) == (20, 12)
    # Read live: the locked prefix (3 pages) also left the evictable pool.
    assert adder.rem_total_tokens == before_total - 12 - (20 + 4 + 4096)
    alloc_batch(adder, {})


def test_requeued_request_reserves_its_whole_clipped_output() -> None:
    # Upstream (0.5.23 _select_prefill_admission) tests memory with what is left to
    # generate, min(max_new - output, 4096), but reserves the whole min(max_new, 4096)
    # for an admitted request, also one requeued with output kept (retraction or
    # priority preemption). Found by the differential against upstream's PrefillAdder.
    def requeued(max_new: int, output: int) -> Request:
        r = make_req("q", 30 + output, 4, max_new=max_new)
        r.prompt_len = 30
        r.state.output_len = output
        return r

    cache = make_cache(2000, 4)
    adder = make_adder(cache)
    assert add(adder, requeued(100, 60)) is CONT
    # ceil_page(90) + page + min(100, 4096): the whole output, not the 40 left.
    assert adder.rem_total_token_offset == 92 + 4 + 100
    clipped = make_adder(make_cache(2000, 4), make_limits(4, clip_max_new_tokens=64))
    assert add(clipped, requeued(100, 60)) is CONT
    assert clipped.rem_total_token_offset == 92 + 4 + 64
    # The memory test uses what is left: 90 + 40 + 4 = 134 < 4000 - 3865 = 135 passes
    # (with the whole output, 90 + 100 + 4 = 194, it would not); the reservation then
    # takes the whole output and closes the batch (135 - 196 <= 0).
    tight = make_adder(make_cache(1000, 4), running=[running_req("d", 3865, 0)])
    assert tight.rem_total_tokens == 135
    assert add(tight, requeued(100, 60)) is NO_TOKEN
    assert [r.rid for r in tight.can_run_list] == ["q"]
    assert tight.rem_total_token_offset == 3865 + 92 + 4 + 100


def test_memory_test_runs_with_the_prefix_locked() -> None:
    # 100 one-token pages: a 40-token cached prefix (evictable) and 60 free.
    def setup(max_new: int) -> tuple[PrefixCache, PrefillAdder, Request]:
        cache = make_cache(100, 1)
        warm(cache, make_req("w", 40, 1, family="f", shared=40).keys)
        req = make_req("r", 60, 1, family="f", shared=40, max_new=max_new)
        return cache, make_adder(cache), req

    # total = (60 - 40) + 40 + 1 = 61 < 100 before the lock, but >= 60 once the
    # 40 prefix pages are pinned: NO_TOKEN.
    cache, adder, req = setup(40)
    assert adder.rem_total_tokens == 100
    assert add(adder, req) is NO_TOKEN
    assert adder.closed_by is CloseReason.MEMORY
    assert cache.protected_pages == 0 and not adder.can_run_list
    # total == rem_total (60) is already NO_TOKEN: the test is strict.
    cache, adder, req = setup(39)
    assert add(adder, req) is NO_TOKEN
    cache, adder, req = setup(38)
    assert add(adder, req) is CONT
    alloc_batch(adder, {})
    # The same total without a cached prefix to pin is admitted.
    cache = make_cache(100, 1)
    warm(cache, make_req("w", 40, 1, family="f", shared=40).keys)
    adder = make_adder(cache)
    assert add(adder, make_req("x", 20, 1, max_new=40)) is CONT


def test_budget_state_after_admission_is_the_verdict_for_the_next_candidate() -> None:
    cache = make_cache(30, 4)  # 120 tokens
    adder = make_adder(cache)
    # total = 40 + 60 + 4 = 104 < 120; afterwards rem_total = 120 - (40 + 4 + 60) = 16.
    assert add(adder, make_req("a", 40, 4, max_new=60)) is CONT
    assert adder.rem_total_tokens == 16
    # total = 8 + 0 + 4 = 12 < 16: admitted, then rem_total = 16 - 12 = 4 > 0.
    assert add(adder, make_req("b", 8, 4, max_new=0)) is CONT
    assert add(adder, make_req("c", 4, 4, max_new=0)) is NO_TOKEN  # 8 >= 4
    assert adder.closed_by is CloseReason.MEMORY
    cache = make_cache(30, 4)
    adder = make_adder(cache)
    assert add(adder, make_req("a", 39, 4, max_new=77)) is NO_TOKEN  # 39 + 77 + 4 >= 120
    # 39 + 76 + 4 = 119 < 120: admitted; charged ceil_page(39) + 4 + 76 = 120 -> rem_total 0.
    assert add(adder, make_req("a", 39, 4, max_new=76)) is NO_TOKEN
    assert len(adder.can_run_list) == 1 and adder.rem_total_tokens == 0
    alloc_batch(adder, {})


def test_first_request_may_exceed_max_prefill_tokens() -> None:
    cache = make_cache(10_000, 1)
    adder = make_adder(cache, max_prefill_tokens=100)
    req = make_req("big", 150, 1)
    assert add(adder, req) is OTHER  # admitted; the budget verdict stops the scan
    assert adder.can_run_list == [req] and req.state.extend_input_len == 150
    assert adder.closed_by is CloseReason.MAX_PREFILL_TOKENS
    assert add(adder, make_req("next", 1, 1)) is OTHER
    assert adder.can_run_list == [req]
    alloc_batch(adder, {})


def test_later_request_stops_with_other_at_input_budget() -> None:
    # Chunking off: rem_input_tokens = 100 - 60 = 40; ceil_page(extend) >= 40 is OTHER.
    cache = make_cache(10_000, 4)
    adder = make_adder(cache, max_prefill_tokens=100, chunked_prefill_size=None)
    assert add(adder, make_req("a", 60, 4)) is CONT
    before = snapshot(adder)
    assert add(adder, make_req("b", 37, 4)) is OTHER  # ceil_page(37) = 40 >= 40
    assert adder.closed_by is CloseReason.MAX_PREFILL_TOKENS
    assert snapshot(adder) == before
    assert add(adder, make_req("c", 36, 4)) is CONT  # 36 < 40
    alloc_batch(adder, {})


def test_input_budget_not_applied_with_chunking_on() -> None:
    # Upstream: "Without chunking, allow the first request even above the input cap" --
    # the per-candidate rem_input_tokens check exists only with chunking off. With
    # chunking on, rem_chunk_tokens admits or truncates the candidate.
    cache = make_cache(10_000, 4)
    adder = make_adder(cache, max_prefill_tokens=100, chunked_prefill_size=1000)
    assert add(adder, make_req("a", 60, 4)) is CONT  # rem_input 40 > 0
    big = make_req("b", 500, 4)
    # ceil_page(500) >= 40 would be OTHER with chunking off; here it fits rem_chunk 940.
    assert add(adder, big) is OTHER  # admitted; now rem_input <= 0 closes the batch
    assert adder.can_run_list[-1] is big and big.state.extend_input_len == 500
    assert adder.closed_by is CloseReason.MAX_PREFILL_TOKENS
    alloc_batch(adder, {})


def test_input_budget_equal_to_chunk_truncates_the_next_request() -> None:
    # The example: page 1, max_prefill = chunk = 100; after a 16-token last
    # chunk the next request is cut to an 84-token chunk (it used to stop the pass).
    cache = make_cache(10_000, 1)
    chunked = make_chunked(cache, "c", 116, 100)
    adder = make_adder(cache, max_prefill_tokens=100, chunked_prefill_size=100)
    assert add_chunked(adder, chunked) is None  # last chunk: 16 tokens
    nxt = make_req("n", 300, 1)
    assert add(adder, nxt) is OTHER  # truncated, then both budgets are used up
    assert (nxt.state.prefix_len, nxt.state.extend_input_len) == (0, 84)
    assert adder.new_chunked_req is nxt
    # budget_state tests rem_input before rem_chunk (as upstream).
    assert adder.closed_by is CloseReason.MAX_PREFILL_TOKENS


def test_upstream_log_counters_count_raw_extends_and_no_hit_for_a_continuation() -> None:
    # Upstream: log_input_tokens += raw extend (budgets take ceil_page(extend));
    # log_hit_tokens += prefix_len of add_one_req admissions, + 0 in add_chunked_req.
    cache = make_cache(1000, 4)
    warm(cache, make_req("w", 16, 4, family="f", shared=4).keys)
    chunked = make_chunked(cache, "c", 120, 32)
    adder = make_adder(cache, chunked_prefill_size=400)
    assert add_chunked(adder, chunked) is None  # 88-token last chunk after 32 computed
    assert add(adder, make_req("a", 37, 4, family="f", shared=4)) is CONT  # 16 hit, 21 new
    assert adder.batch_extend_tokens == 88 + 24  # page-ceiled, prefillkit's own
    assert adder.batch_cached_tokens == 32 + 16  # true prefixes, prefillkit's own
    assert adder.log_input_tokens == 88 + 21
    assert adder.log_hit_tokens == 16
    alloc_batch(adder, {})


# ============================================================== chunked prefill
def test_chunk_cut_is_page_aligned_floor_of_rem_chunk() -> None:
    cache = make_cache(1000, 4)
    warm(cache, make_req("w", 12, 4, family="f", shared=3).keys)
    # A chunk budget that is not a page multiple: the cut is floor(30 / 4) * 4 = 28.
    adder = make_adder(cache, chunked_prefill_size=30)
    req = make_req("r", 100, 4, family="f", shared=3)
    assert add(adder, req) is CONT  # rem_chunk = 2 is left: not yet a budget stop
    assert (req.state.prefix_len, req.state.extend_input_len) == (12, 28)
    assert (req.state.prefix_len + req.state.extend_input_len) % 4 == 0
    assert adder.new_chunked_req is req
    alloc_batch(adder, {})
    # After a page-ceiled earlier request: 40 - ceil_page(10) = 28 left.
    cache = make_cache(1000, 4)
    adder = make_adder(cache, chunked_prefill_size=40)
    assert add(adder, make_req("a", 10, 4)) is CONT
    req = make_req("r", 100, 4)
    assert add(adder, req) is OTHER
    assert req.state.extend_input_len == 28 and adder.rem_chunk_tokens == 0
    assert adder.closed_by is CloseReason.CHUNK_BUDGET
    alloc_batch(adder, {})


def test_truncated_chunk_reserves_no_output_tokens() -> None:
    cache = make_cache(1000, 4)
    adder = make_adder(cache, chunked_prefill_size=40)
    req = make_req("r", 100, 4, max_new=1000)
    add(adder, req)
    assert req.state.extend_input_len == 40
    assert adder.rem_total_token_offset == 40 + 4 + 0
    assert adder.cur_rem_token_offset == 40 + 4


def test_request_that_fits_the_chunk_budget_is_not_truncated() -> None:
    cache = make_cache(1000, 4)
    adder = make_adder(cache, chunked_prefill_size=40)
    req = make_req("r", 38, 4, max_new=7)  # ceil_page(38) = 40 <= 40
    assert add(adder, req) is OTHER  # chunk budget used up
    assert req.state.extend_input_len == 38 and adder.new_chunked_req is None
    assert adder.rem_total_token_offset == 40 + 4 + 7
    assert (adder.chunked_req_in_batch, adder.has_chunked_req_in_batch) == (None, False)


def test_chunk_budget_below_one_page_stops_with_other_and_no_trace() -> None:
    cache = make_cache(1000, 4)
    adder = make_adder(cache, chunked_prefill_size=42)
    assert add(adder, make_req("a", 38, 4)) is CONT  # rem_chunk = 42 - 40 = 2 > 0
    before = snapshot(adder)
    assert add(adder, make_req("b", 100, 4)) is OTHER  # floor(2 / 4) * 4 = 0
    assert adder.closed_by is CloseReason.CHUNK_BUDGET
    assert snapshot(adder) == before


def test_chunked_req_budget_seeded_with_true_prefix() -> None:
    cache = make_cache(1000, 4)
    chunked = make_chunked(cache, "c", 200, 64)
    ctx = BufferEstimatorContext(GLM5, cp_size=1, page_size=4)
    adder = make_adder(cache, make_limits(4, chunked_prefill_size=40, buffer_ctx=ctx))
    assert add_chunked(adder, chunked) is chunked  # still unfinished
    assert (chunked.state.prefix_len, chunked.state.extend_input_len) == (64, 40)
    assert adder.batch_cached_tokens == 64  # prefillkit's tally seeds the true prefix
    assert (adder.log_hit_tokens, adder.log_input_tokens) == (0, 40)  # upstream's counters
    assert adder.batch_shapes == [BufferReqShape(64, 40, 0)]
    assert adder.batch_buffer_bytes() == estimate_buffer_bytes([BufferReqShape(64, 40, 0)], ctx)
    assert adder.batch_buffer_bytes() > estimate_buffer_bytes([BufferReqShape(0, 40, 0)], ctx)
    alloc_batch(adder, {})


def test_chunked_prefix_counts_against_cp_cached_limit() -> None:
    # With followers allowed (mixed-chunk mode), the CP cached-token tally starts at the
    # chunked request's true prefix: 160 + a follower's 40-token prefix > 190.
    cache = make_cache(1000, 4, cp=2)
    chunked = make_chunked(cache, "c", 202, 160)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    adder = make_adder(cache, mix_limits(cp_max_cached_tokens=190))
    add_chunked(adder, chunked)
    assert adder.batch_cached_tokens == 160
    before = snapshot(adder)
    assert add(adder, make_req("b", 60, 4, family="f", shared=10)) is OTHER
    assert adder.closed_by is CloseReason.CP_MAX_CACHED
    assert snapshot(adder) == before
    assert add(adder, make_req("c2", 60, 4)) is CONT  # 160 + 0 <= 190


def test_last_chunk_reserves_output_tokens() -> None:
    cache = make_cache(1000, 4)
    chunked = make_chunked(cache, "c", 90, 64, max_new=5000)
    adder = make_adder(cache, chunked_prefill_size=40)
    assert add_chunked(adder, chunked) is None  # finished with this chunk
    assert chunked.state.extend_input_len == 26
    assert adder.rem_total_token_offset == 28 + 4 + 4096
    assert adder.cur_rem_token_offset == 28 + 4
    assert adder.chunked_req_in_batch is chunked and adder.has_chunked_req_in_batch
    alloc_batch(adder, {})


def test_add_chunked_req_makes_progress_when_rem_total_nonpositive() -> None:
    cache = make_cache(200, 4)
    chunked = make_chunked(cache, "c", 200, 64)
    adder = make_adder(cache, chunked_prefill_size=40, running=[running_req("d", 10**6, 0)])
    assert adder.rem_total_tokens <= 0
    assert add_chunked(adder, chunked) is chunked
    assert chunked.state.extend_input_len == 40  # takes rem_chunk_tokens anyway
    assert adder.budget_state() is NO_TOKEN
    alloc_batch(adder, {})


def test_add_chunked_req_takes_min_of_chunk_and_rem_total_page_aligned() -> None:
    cache = make_cache(300, 4)
    chunked = make_chunked(cache, "c", 400, 64)  # 16 pages locked, 284 free = 1136 tokens
    running = [running_req("d", 1136 - 50, 0)]
    adder = make_adder(cache, chunked_prefill_size=400, running=running)
    assert adder.rem_total_tokens == 50
    assert add_chunked(adder, chunked) is chunked
    assert chunked.state.extend_input_len == 48  # floor_page(min(400, 50))
    assert (chunked.state.prefix_len + chunked.state.extend_input_len) % 4 == 0
    alloc_batch(adder, {})


def test_add_chunked_req_positive_budget_below_a_page_takes_one_page() -> None:
    cache = make_cache(300, 4)
    chunked = make_chunked(cache, "c", 400, 64)
    adder = make_adder(cache, chunked_prefill_size=400, running=[running_req("d", 1136 - 2, 0)])
    assert adder.rem_total_tokens == 2
    add_chunked(adder, chunked)
    assert chunked.state.extend_input_len == 4


def test_add_chunked_req_waits_when_no_page_is_allocatable() -> None:
    cache = make_cache(40, 4)
    chunked = make_chunked(cache, "c", 400, 64)  # 16 pages locked
    assert cache.alloc_pages(0, 24) is not None  # everything else is owned by others
    adder = make_adder(cache, chunked_prefill_size=40)
    assert add_chunked(adder, chunked, owned=[(0, 24)]) is chunked
    assert adder.can_run_list == [] and adder.closed_by is CloseReason.MEMORY
    assert (adder.chunked_req_in_batch, adder.has_chunked_req_in_batch) == (None, False)


@pytest.mark.parametrize(
    ("taken", "pages"),
    [
        ([10, 7], 3),  # room [1, 5]: pages 17 (lane 1), 18 (lane 0), 19 (lane 1)
        ([11, 7], 1),  # room [0, 5]: page 17 (lane 1) only; an empty lane does not block it
        ([11, 12], 0),  # no room at all: the chunk waits
    ],
)
def test_add_chunked_req_chunk_is_bounded_per_owner_lane(taken: list[int], pages: int) -> None:
    # cp 2, 40 pages ([20, 20]); the carried 68 tokens hold pages 0..16 (lanes [9, 8]), so
    # the next chunk starts at page 17, owned by lane 1. The cut is the exact per-lane bound.
    cache = make_cache(40, 4, cp=2)
    chunked = make_chunked(cache, "c", 400, 68)
    cache.pool.alloc_owned(taken)
    adder = make_adder(cache, chunked_prefill_size=400)
    assert add_chunked(adder, chunked, owned=None) is chunked
    if pages == 0:
        assert adder.can_run_list == [] and adder.closed_by is CloseReason.MEMORY
        return
    assert chunked.state.extend_input_len == pages * 4
    assert (chunked.state.prefix_len + chunked.state.extend_input_len) % 4 == 0
    assert cache.alloc_pages(17, pages) is not None  # allocatable with the others held
    check_invariants(cache, None)


def test_chunked_req_flags_updated_together_on_both_chunked_paths() -> None:
    cache = make_cache(1000, 4)
    adder = make_adder(cache, chunked_prefill_size=40)
    assert (adder.chunked_req_in_batch, adder.has_chunked_req_in_batch) == (None, False)
    req = make_req("r", 100, 4)
    add(adder, req)  # path 1: a new request truncated into the chunked request
    assert (adder.chunked_req_in_batch, adder.has_chunked_req_in_batch) == (req, True)
    assert adder.new_chunked_req is req
    chunked = make_chunked(cache, "c", 200, 64)
    adder = make_adder(cache, chunked_prefill_size=40)
    add_chunked(adder, chunked)  # path 2: the in-flight chunked request's next chunk
    assert (adder.chunked_req_in_batch, adder.has_chunked_req_in_batch) == (chunked, True)
    assert adder.new_chunked_req is None  # the scheduler keeps its own chunked_req


# ============================================================== CP bs=1 gate
def test_cp_bs1_gate_admits_exactly_one_request() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, make_limits(4, cp_mode=CpMode.BS1))
    assert add(adder, make_req("a", 8, 4)) is CONT
    before = snapshot(adder)
    assert add(adder, make_req("b", 8, 4)) is OTHER
    assert adder.closed_by is CloseReason.CP_BS1
    assert snapshot(adder) == before
    alloc_batch(adder, {})


def test_cp_bs1_chunked_continuation_runs_alone() -> None:
    cache = make_cache(1000, 4, cp=2)
    chunked = make_chunked(cache, "c", 90, 64)
    adder = make_adder(cache, make_limits(4, cp_mode=CpMode.BS1, chunked_prefill_size=400))
    add_chunked(adder, chunked)
    assert add(adder, make_req("b", 8, 4)) is OTHER
    assert adder.closed_by is CloseReason.CP_BS1 and adder.can_run_list == [chunked]


def test_cp_bs1_single_oversized_request_runs_alone() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, make_limits(4, cp_mode=CpMode.BS1, max_prefill_tokens=16))
    req = make_req("a", 400, 4)
    add(adder, req)
    assert adder.can_run_list == [req] and req.state.extend_input_len == 400
    alloc_batch(adder, {})


# ============================================================== CP bs>1 limits
def test_cp_max_requests_stops_only_additional_requests() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, bs_gt1(cp_max_requests=2))
    assert add(adder, make_req("a", 8, 4)) is CONT
    assert add(adder, make_req("b", 8, 4)) is CONT
    before = snapshot(adder)
    assert add(adder, make_req("c", 8, 4)) is OTHER
    assert adder.closed_by is CloseReason.CP_MAX_REQUESTS
    assert snapshot(adder) == before
    alloc_batch(adder, {})
    solo = make_adder(make_cache(1000, 4, cp=2), bs_gt1(cp_max_requests=1))
    assert add(solo, make_req("a", 8, 4)) is CONT  # never blocks the first request


def test_cp_extend_limit_stops_only_additional_requests() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, bs_gt1(cp_max_total_extend_tokens=40))
    big = make_req("big", 400, 4)
    assert add(adder, big) is CONT  # 400 > 40 but alone: runs (no deadlock)
    assert add(adder, make_req("b", 1, 4)) is OTHER
    assert adder.closed_by is CloseReason.CP_MAX_EXTEND
    assert adder.can_run_list == [big]
    alloc_batch(adder, {})
    adder = make_adder(make_cache(1000, 4, cp=2), bs_gt1(cp_max_total_extend_tokens=40))
    assert add(adder, make_req("a", 20, 4)) is CONT
    assert add(adder, make_req("b", 17, 4)) is CONT  # page-aligned: 20 + 20 = 40 <= 40
    assert add(adder, make_req("c", 1, 4)) is OTHER  # 40 + 4 > 40
    assert adder.batch_extend_tokens == 40


def test_cached_limit_never_blocks_single_request() -> None:
    cache = make_cache(1000, 4, cp=2)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    adder = make_adder(cache, bs_gt1(cp_max_cached_tokens=16))
    a = make_req("a", 60, 4, family="f", shared=10)
    assert add(adder, a) is CONT and a.state.prefix_len == 40  # 40 > 16, alone: runs
    assert add(adder, make_req("b", 8, 4)) is OTHER  # 40 + 0 > 16
    assert adder.closed_by is CloseReason.CP_MAX_CACHED
    alloc_batch(adder, {})


def test_cached_limit_bounds_the_sum_of_prefixes() -> None:
    cache = make_cache(1000, 4, cp=2)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    warm(cache, make_req("v", 8, 4, family="g", shared=2).keys)
    adder = make_adder(cache, bs_gt1(cp_max_cached_tokens=48))
    assert add(adder, make_req("a", 60, 4, family="f", shared=10)) is CONT
    assert add(adder, make_req("b", 20, 4, family="g", shared=2)) is CONT  # 40 + 8 = 48
    assert add(adder, make_req("c", 20, 4, family="g", shared=2)) is OTHER  # 56 > 48
    assert adder.batch_cached_tokens == 48
    alloc_batch(adder, {})


def test_cp_buffer_limit_stops_only_additional_requests() -> None:
    ctx = BufferEstimatorContext(GLM5, cp_size=2, page_size=4)
    one = estimate_buffer_bytes([BufferReqShape(0, 40, 0)], ctx)
    two = estimate_buffer_bytes([BufferReqShape(0, 40, 0), BufferReqShape(0, 40, 0)], ctx)
    for limit, admitted in ((1, 1), (one, 1), (two - 1, 1), (two, 2)):
        cache = make_cache(1000, 4, cp=2)
        adder = make_adder(cache, bs_gt1(cp_max_buffer_size=limit, buffer_ctx=ctx))
        assert add(adder, make_req("a", 40, 4)) is CONT  # the first always runs
        res = add(adder, make_req("b", 40, 4))
        assert len(adder.can_run_list) == admitted
        if admitted == 1:
            assert res is OTHER and adder.closed_by is CloseReason.CP_MAX_BUFFER
        assert adder.batch_buffer_bytes() <= max(limit, one)
        alloc_batch(adder, {})


def test_lone_request_exceeding_every_cp_limit_runs_alone() -> None:
    ctx = BufferEstimatorContext(GLM5, cp_size=2, page_size=4)
    cache = make_cache(1000, 4, cp=2)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    limits = bs_gt1(
        max_prefill_tokens=4,
        cp_max_requests=1,
        cp_max_total_extend_tokens=4,
        cp_max_cached_tokens=4,
        cp_max_buffer_size=1,
        buffer_ctx=ctx,
    )
    adder = make_adder(cache, limits)
    req = make_req("a", 400, 4, family="f", shared=10)
    add(adder, req)
    assert adder.can_run_list == [req] and req.state.extend_input_len == 360
    alloc_batch(adder, {})


def test_extend_limit_is_min_of_user_limit_and_chunk_budget() -> None:
    cache = make_cache(1000, 4, cp=2)
    for user, chunk in ((80, 40), (40, 80)):
        limits = bs_gt1(cp_max_total_extend_tokens=user, chunked_prefill_size=chunk)
        assert make_adder(cache, limits).cp_extend_limit == 40
    # Behaviour: with user 40 < chunk 80, a follower is stopped by the extend cap even
    # though the chunk budget would still truncate-and-admit it.
    adder = make_adder(cache, bs_gt1(cp_max_total_extend_tokens=40, chunked_prefill_size=80))
    assert add(adder, make_req("a", 20, 4)) is CONT
    assert add(adder, make_req("b", 100, 4)) is OTHER
    assert adder.closed_by is CloseReason.CP_MAX_EXTEND


def test_extend_limit_defaults_to_chunk_budget() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, bs_gt1(chunked_prefill_size=40, max_prefill_tokens=16))
    assert adder.cp_extend_limit == 40
    assert adder.rem_input_tokens == 40  # the legacy budget is lifted to it
    assert add(adder, make_req("a", 12, 4)) is CONT
    assert add(adder, make_req("b", 20, 4)) is CONT  # the legacy 16 would have stopped it
    assert adder.batch_extend_tokens == 32
    alloc_batch(adder, {})


def test_extend_limit_unlimited_without_user_limit_or_chunking() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, bs_gt1(max_prefill_tokens=400))
    assert adder.cp_extend_limit is None and adder.rem_input_tokens == 400


def test_requests_and_cached_limits_none_are_unlimited() -> None:
    cache = make_cache(4000, 4, cp=2)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    adder = make_adder(cache, bs_gt1(max_prefill_tokens=10**6))
    for i in range(50):
        assert add(adder, make_req(f"r{i}", 60, 4, family="f", shared=10)) is CONT
    assert len(adder.can_run_list) == 50 and adder.batch_cached_tokens == 50 * 40
    alloc_batch(adder, {})


@pytest.mark.parametrize("mode", list(CpMode), ids=[m.value for m in CpMode])
def test_legacy_input_budget_raised_only_on_cp_path(mode: CpMode) -> None:
    cp = 1 if mode is CpMode.OFF else 2
    cache = make_cache(1000, 4, cp=cp)
    limits = make_limits(4, cp_mode=mode, max_prefill_tokens=16, cp_max_total_extend_tokens=64)
    adder = make_adder(cache, limits)
    assert adder.rem_input_tokens == (64 if mode is CpMode.BS_GT1 else 16)
    # Allocator-owned budgets are unchanged by the lift.
    assert adder.rem_total_tokens == adder.cur_rem_tokens == 4000
    assert adder.rem_total_token_offset == adder.cur_rem_token_offset == 0
    add(adder, make_req("a", 12, 4))
    res = add(adder, make_req("b", 40, 4))  # 12 + 40 <= 64, but 40 >= 16 - 12
    if mode is CpMode.BS_GT1:
        assert res is CONT and len(adder.can_run_list) == 2
    else:
        assert res is OTHER and len(adder.can_run_list) == 1
        assert adder.closed_by is (
            CloseReason.CP_BS1 if mode is CpMode.BS1 else CloseReason.MAX_PREFILL_TOKENS
        )


def test_legacy_input_budget_never_lowered_by_a_smaller_cp_limit() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, bs_gt1(max_prefill_tokens=16, cp_max_total_extend_tokens=8))
    assert adder.cp_extend_limit == 8 and adder.rem_input_tokens == 16


# ============================================================== chunked requests stay solo
def test_chunked_led_batch_admits_no_followers() -> None:
    for need in (40, 1000):  # a tail chunk (headroom left) and a full chunk
        cache = make_cache(1000, 4, cp=2)
        chunked = make_chunked(cache, "c", 160 + need, 160)
        adder = make_adder(cache, bs_gt1(chunked_prefill_size=400))
        add_chunked(adder, chunked)
        before = snapshot(adder)
        assert add(adder, make_req("b", 8, 4)) is OTHER
        assert adder.closed_by is CloseReason.CHUNKED_SOLO
        assert snapshot(adder) == before
        alloc_batch(adder, {})


def test_chunked_led_batch_with_cp_off_admits_followers_like_upstream() -> None:
    cache = make_cache(1000, 4)
    chunked = make_chunked(cache, "c", 200, 160)
    adder = make_adder(cache, chunked_prefill_size=400)
    add_chunked(adder, chunked)
    assert add(adder, make_req("b", 8, 4)) is CONT
    assert len(adder.can_run_list) == 2


def test_freshly_chunked_request_keeps_earlier_requests_in_cp_batch() -> None:
    cache = make_cache(1000, 4, cp=2)
    adder = make_adder(cache, bs_gt1(chunked_prefill_size=40))
    a = make_req("a", 8, 4)
    b = make_req("b", 100, 4)
    assert add(adder, a) is CONT
    assert add(adder, b) is OTHER  # truncated to the 32 tokens left; chunk budget used up
    assert adder.can_run_list == [a, b] and b.state.extend_input_len == 32
    assert (adder.chunked_req_in_batch, adder.has_chunked_req_in_batch) == (b, True)
    alloc_batch(adder, {})


def test_mix_chunked_tail_chunk_admits_followers_bounded_by_caps() -> None:
    # Tail chunk: 202 - 160 = 42 tokens (its end is not page-aligned, its prefix is).
    cache = make_cache(1000, 4, cp=2)
    chunked = make_chunked(cache, "c", 202, 160)
    adder = make_adder(cache, mix_limits(max_requests=3))
    assert add_chunked(adder, chunked) is None
    assert add(adder, make_req("b", 100, 4)) is CONT
    assert add(adder, make_req("c2", 100, 4)) is CONT
    assert add(adder, make_req("d", 8, 4)) is OTHER
    assert adder.closed_by is CloseReason.CP_MAX_REQUESTS
    alloc_batch(adder, {})
    # The extend cap (user 160 < chunk 400) counts the chunk: 44 + 100 = 144; +20 > 160.
    cache = make_cache(1000, 4, cp=2)
    chunked = make_chunked(cache, "c", 202, 160)
    adder = make_adder(cache, mix_limits(cp_max_total_extend_tokens=160))
    add_chunked(adder, chunked)
    assert add(adder, make_req("b", 100, 4)) is CONT
    assert add(adder, make_req("c2", 20, 4)) is OTHER
    assert adder.closed_by is CloseReason.CP_MAX_EXTEND
    assert adder.batch_extend_tokens == 144


@pytest.mark.parametrize("user", [None, 160])
def test_mix_chunked_full_chunk_ends_scan_via_extend_cap(user: int | None) -> None:
    cache = make_cache(1000, 4, cp=2)
    chunked = make_chunked(cache, "c", 2000, 160)
    adder = make_adder(cache, mix_limits(cp_max_total_extend_tokens=user))
    assert add_chunked(adder, chunked) is chunked
    assert chunked.state.extend_input_len == 400  # a full chunk
    assert adder.cp_extend_limit is not None
    assert adder.batch_extend_tokens >= adder.cp_extend_limit  # the chunk-clamped cap is used up
    before = snapshot(adder)
    assert add(adder, make_req("b", 4, 4)) is OTHER
    assert adder.can_run_list == [chunked]
    assert snapshot(adder) == before


def test_mix_chunked_non_page_aligned_chunked_prefix_stays_solo() -> None:
    cache = make_cache(1000, 4, cp=2)
    chunked = make_chunked(cache, "c", 202, 162)  # a sub-page carried prefix
    adder = make_adder(cache, mix_limits())
    add_chunked(adder, chunked)
    assert chunked.state.prefix_len % 4 != 0
    before = snapshot(adder)
    assert add(adder, make_req("b", 8, 4)) is OTHER
    assert adder.closed_by is CloseReason.CHUNKED_SOLO
    assert snapshot(adder) == before


def test_cp_mode_must_be_the_enum() -> None:
    with pytest.raises(TypeError):
        AdmissionLimits(4, 16384, None, cp_mode="bs1")  # type: ignore[arg-type]


def test_mix_chunked_staging_identity_assertion_fires_when_broken() -> None:
    base: dict[str, Any] = {
        "cp_max_requests": 4,
        "chunked_prefill_size": 400,
        "cp_prefill_mix_chunked": True,
    }
    AdmissionLimits(4, 16384, cp_mode=CpMode.BS_GT1, staging_identity=(100, 4, 104), **base)
    broken: list[tuple[int, int, int] | None] = [
        None,  # no identity at all
        (100, 4, 105),  # cap + slack != staging
        (90, 4, 94),  # consistent tuple, but not the extend cap these limits enforce
        (100, 3, 103),  # not the request slack these limits enforce
    ]
    for ident in broken:
        with pytest.raises(AssertionError, match="staging"):
            AdmissionLimits(4, 16384, cp_mode=CpMode.BS_GT1, staging_identity=ident, **base)
    # The identity is not required with the mode off.
    AdmissionLimits(
        4, 16384, cp_mode=CpMode.BS_GT1, staging_identity=None, chunked_prefill_size=400
    )


# ============================================================== HiCache load-back
def hicache_setup(total_pages: int, cp: int = 2, max_new: int = 4) -> tuple[PrefixCache, Request]:
    """An 8-unit family prefix: units 0-1 on device, units 2-7 on host only. The request
    (42 tokens) matches device 8 tokens + host hit 24 tokens."""
    cache = make_cache(total_pages, 4, cp=cp, host_pages=1000)
    family = make_req("w", 32, 4, family="f", shared=8).keys
    warm(cache, family)
    to_host(cache, family, keep_units=2)
    req = make_req("r", 42, 4, family="f", shared=8, max_new=max_new)
    m = cache.match(req.keys, req.state.max_match_units)
    assert (m.device_units, m.host_units) == (2, 6)
    return cache, req


def test_hicache_quota_counts_evictable() -> None:
    # Per lane (cp 2): host hit = pages 2..7 = [3, 3]; free = [2, 2] alone would reject,
    # free + evictable (with the device prefix pinned) = [9, 9] admits; the eviction
    # itself happens in the load path.
    cache, req = hicache_setup(20)
    warm(cache, make_req("o", 56, 4).keys)  # 14 evictable pages: [7, 7]
    assert cache.pool.free == [2, 2] and cache.evictable_lanes == [8, 8]
    adder = make_adder(cache)
    assert add(adder, req) is CONT
    assert (req.state.device_prefix_len, req.state.host_hit_len) == (8, 24)
    assert (req.state.loaded_tokens, req.state.prefix_len, req.state.extend_input_len) == (
        24,
        32,
        10,
    )
    assert len(adder.load_backs) == 1 and adder.batch_load_back_tokens == 24
    assert adder.batch_cached_tokens == 32
    assert cache.match(req.keys, req.state.max_match_units).device_units == 8
    owned: dict[str, tuple[int, int]] = {}
    alloc_batch(adder, owned)
    cache.finish_load_back(adder.load_backs[0])
    finish(cache, [req], owned)


def test_hicache_quota_gate_is_per_lane_and_failure_is_a_miss() -> None:
    # Lane 0 has room for 2 pages, the host hit needs 3 there: the gate fails although the
    # token total would pass. The hit is recomputed as a miss: prefix = device prefix only,
    # and the chunk (2 pages, one per lane) still fits.
    cache, req = hicache_setup(44)
    cache.pool.alloc_owned([19, 0])  # held by other requests: free [2, 21] of [22, 22]
    assert cache.pool.free == [2, 21]
    adder = make_adder(cache, chunked_prefill_size=8)
    assert add(adder, req, owned=None) is OTHER  # admitted as a chunk; chunk budget used
    assert adder.can_run_list == [req]
    assert (req.state.host_hit_len, req.state.loaded_tokens, req.state.prefix_len) == (24, 0, 8)
    assert req.state.extend_input_len == 8 and adder.new_chunked_req is req
    assert adder.load_backs == [] and adder.batch_cached_tokens == 8
    m = cache.match(req.keys, req.state.max_match_units)
    assert (m.device_units, m.host_units) == (2, 6)  # nothing was loaded


def test_load_back_prefix_len_counts_against_cached_token_limit() -> None:
    # prefix_len = device 8 + loaded 24 = 32. With a 36-token cached limit, a follower with
    # an 8-token device prefix is stopped (32 + 8 > 36); device-only counting would pass.
    cache, req = hicache_setup(200)
    warm(cache, make_req("v", 8, 4, family="g", shared=2).keys)
    adder = make_adder(cache, bs_gt1(cp_max_cached_tokens=36))
    assert add(adder, req) is CONT and adder.batch_cached_tokens == 32
    assert add(adder, make_req("b", 20, 4, family="g", shared=2)) is OTHER
    assert adder.closed_by is CloseReason.CP_MAX_CACHED
    owned: dict[str, tuple[int, int]] = {}
    alloc_batch(adder, owned)
    cache.finish_load_back(adder.load_backs[0])
    finish(cache, [req], owned)


def test_host_hit_rejected_by_cached_limit_is_not_loaded() -> None:
    cache, req = hicache_setup(200)
    warm(cache, make_req("v", 8, 4, family="g", shared=2).keys)
    adder = make_adder(cache, bs_gt1(cp_max_cached_tokens=36))
    assert add(adder, make_req("b", 20, 4, family="g", shared=2)) is CONT  # cached 8
    before = snapshot(adder)
    assert add(adder, req) is OTHER  # 8 + 32 > 36
    assert adder.closed_by is CloseReason.CP_MAX_CACHED
    assert snapshot(adder) == before and adder.load_backs == []
    m = cache.match(req.keys, req.state.max_match_units)
    assert (m.device_units, m.host_units) == (2, 6)


@pytest.mark.parametrize(("threshold", "loaded"), [(25, 0), (24, 24), (10, 24)])
def test_host_hit_below_load_back_threshold_not_loaded(threshold: int, loaded: int) -> None:
    cache, req = hicache_setup(200)
    adder = make_adder(cache, load_back_threshold=threshold)
    assert add(adder, req) is CONT
    assert req.state.host_hit_len == 24 and req.state.loaded_tokens == loaded
    assert req.state.prefix_len == 8 + loaded and req.state.extend_input_len == 42 - 8 - loaded
    assert len(adder.load_backs) == (1 if loaded else 0)
    owned: dict[str, tuple[int, int]] = {}
    alloc_batch(adder, owned)
    for lb in adder.load_backs:
        cache.finish_load_back(lb)
    finish(cache, [req], owned)


@pytest.mark.parametrize(("threshold", "expect"), [(10, CONT), (25, OTHER)])
def test_host_hit_not_charged_to_input_budget(threshold: int, expect: AddReqResult) -> None:
    # rem_input = 50 - ceil_page(18) = 30. Loaded: extend 10 -> 12 < 30. Not loaded:
    # 34 -> 36 >= 30 (checked after load-back planning, as upstream).
    cache, req = hicache_setup(200)
    adder = make_adder(cache, max_prefill_tokens=50, load_back_threshold=threshold)
    assert add(adder, make_req("a", 18, 4)) is CONT
    assert add(adder, req) is expect


def test_host_hit_tokens_need_device_room_in_memory_test() -> None:
    # total = (42 - 8) + max_new + page, host-hit tokens included.
    cache, req = hicache_setup(200, max_new=10**6)
    adder = make_adder(cache)
    total = 34 + 4096 + 4
    assert total >= adder.rem_total_tokens
    assert add(adder, req) is NO_TOKEN


# ============================================================== per-lane feasibility
def test_per_lane_feasibility_rejects_when_one_owner_lane_is_full() -> None:
    cache = make_cache(20, 4, cp=2)
    cache.pool.alloc_owned([9, 0])  # free [1, 10]: 44 tokens in total
    adder = make_adder(cache)
    req = make_req("a", 12, 4, max_new=0)  # pages 0, 1, 2 -> lanes [2, 1]
    assert 12 + 0 + 4 < adder.rem_total_tokens  # the token test alone would pass
    before = snapshot(adder)
    assert add(adder, req, owned=None) is NO_TOKEN
    assert adder.closed_by is CloseReason.MEMORY
    assert snapshot(adder) == before


def test_per_lane_feasibility_accumulates_planned_pages() -> None:
    cache = make_cache(80, 4, cp=2)
    cache.pool.alloc_owned([37, 0])  # free [3, 40]
    adder = make_adder(cache)
    for rid in "abc":  # two pages each: [1, 1]
        assert add(adder, make_req(rid, 8, 4, max_new=0), owned=None) is CONT
    assert adder.planned_lanes == [3, 3]
    assert add(adder, make_req("d", 8, 4, max_new=0), owned=None) is NO_TOKEN
    assert len(adder.can_run_list) == 3
    cache.pool.release_owned([37, 0])
    alloc_batch(adder, {})


# ============================================================== rejected candidates
def _reject_cases() -> dict[str, tuple[PrefillAdder, Request, AddReqResult, CloseReason]]:
    cases: dict[str, tuple[PrefillAdder, Request, AddReqResult, CloseReason]] = {}

    cache = make_cache(100, 1)
    warm(cache, make_req("w", 40, 1, family="f", shared=40).keys)
    adder = make_adder(cache)
    add(adder, make_req("a", 4, 1, max_new=0))
    # 20 + 34 + 1 = 55 < 95 before the lock, >= 55 once the prefix is pinned.
    req = make_req("r", 60, 1, family="f", shared=40, max_new=34)
    cases["memory_after_lock"] = (adder, req, NO_TOKEN, CloseReason.MEMORY)

    adder = make_adder(make_cache(100, 1))
    add(adder, make_req("a", 4, 1))
    cases["memory_before_lock"] = (adder, make_req("r", 90, 1), NO_TOKEN, CloseReason.MEMORY)

    cache = make_cache(1000, 4)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    adder = make_adder(cache, max_prefill_tokens=64)
    add(adder, make_req("a", 20, 4))
    req = make_req("r", 200, 4, family="f", shared=10)
    cases["max_prefill"] = (adder, req, OTHER, CloseReason.MAX_PREFILL_TOKENS)

    cache = make_cache(1000, 4)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    adder = make_adder(cache, chunked_prefill_size=42)
    add(adder, make_req("a", 38, 4))
    req = make_req("r", 200, 4, family="f", shared=10)
    cases["chunk_budget"] = (adder, req, OTHER, CloseReason.CHUNK_BUDGET)

    def cp_case(limits: AdmissionLimits, first: Request) -> PrefillAdder:
        cache = make_cache(1000, 4, cp=2)
        warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
        adder = make_adder(cache, limits)
        add(adder, first)
        return adder

    def cand() -> Request:
        return make_req("r", 60, 4, family="f", shared=10)

    ctx = BufferEstimatorContext(GLM5, cp_size=2, page_size=4)
    cases["cp_bs1"] = (
        cp_case(make_limits(4, cp_mode=CpMode.BS1), make_req("a", 8, 4)),
        cand(),
        OTHER,
        CloseReason.CP_BS1,
    )
    cases["cp_requests"] = (
        cp_case(bs_gt1(cp_max_requests=1), make_req("a", 8, 4)),
        cand(),
        OTHER,
        CloseReason.CP_MAX_REQUESTS,
    )
    cases["cp_extend"] = (
        cp_case(bs_gt1(cp_max_total_extend_tokens=16), make_req("a", 8, 4)),
        cand(),
        OTHER,
        CloseReason.CP_MAX_EXTEND,
    )
    cases["cp_cached"] = (
        cp_case(bs_gt1(cp_max_cached_tokens=16), make_req("a", 8, 4)),
        cand(),
        OTHER,
        CloseReason.CP_MAX_CACHED,
    )
    cases["cp_buffer"] = (
        cp_case(bs_gt1(cp_max_buffer_size=1, buffer_ctx=ctx), make_req("a", 8, 4)),
        cand(),
        OTHER,
        CloseReason.CP_MAX_BUFFER,
    )
    cache = make_cache(1000, 4, cp=2)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    adder = make_adder(cache, bs_gt1(cp_max_cached_tokens=16))
    add(adder, make_req("a", 8, 4))
    # The candidate's 6-unit prefix ends inside the cached 10-unit node: locking it splits
    # the node; the split stays (same keys, same residency and counts), nothing else does.
    req = make_req("r", 60, 4, family="f", shared=6)
    cases["split_prefix_cp_cached"] = (adder, req, OTHER, CloseReason.CP_MAX_CACHED)

    cache = make_cache(1000, 4, cp=2)
    chunked = make_chunked(cache, "c", 400, 160)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    adder = make_adder(cache, bs_gt1(chunked_prefill_size=400))
    add_chunked(adder, chunked)
    cases["chunked_solo"] = (adder, cand(), OTHER, CloseReason.CHUNKED_SOLO)

    cache = make_cache(40, 4, cp=2)
    warm(cache, make_req("w", 40, 4, family="f", shared=10).keys)
    cache.pool.alloc_owned([14, 0])  # free [1, 15]; pages 10..14 need [3, 2]
    adder = make_adder(cache)
    cases["owner_lane"] = (adder, cand(), NO_TOKEN, CloseReason.MEMORY)

    cache, req = hicache_setup(200)
    warm(cache, make_req("v", 8, 4, family="g", shared=2).keys)
    adder = make_adder(cache, bs_gt1(cp_max_cached_tokens=36))
    add(adder, make_req("b", 20, 4, family="g", shared=2))
    cases["host_hit_cp_cached"] = (adder, req, OTHER, CloseReason.CP_MAX_CACHED)
    return cases


@pytest.mark.parametrize("case", sorted(_reject_cases()))
def test_rejected_candidate_leaves_no_trace(case: str) -> None:
    adder, req, result, reason = _reject_cases()[case]
    before = snapshot(adder)
    res = adder.add_one_req(req)
    check_invariants(adder.cache, None)
    assert (res, adder.closed_by) == (result, reason)
    assert req not in adder.can_run_list and req.state.locked_node is None
    assert snapshot(adder) == before
    if adder.cache.pool.owned == [0] * adder.cache.cp_size:
        alloc_batch(adder, {})  # what was admitted before is still allocatable


# ============================================================== ignore_eos admission
@pytest.mark.parametrize(
    ("cur_rem", "states", "fits"),
    [
        (100.0, [], True),
        (100.0, [(0.0, 50)], True),  # nothing left to decode: ignored
        (100.0, [(99.0, 10)], False),  # 100 - 99 <= 1
        (100.0, [(98.0, 10)], True),
        # two requests: first 40 each (80 <= 100 - 2), then the second 50 more after
        # the first frees 30: 100 + 30 - 50 = 80 > 1.
        (100.0, [(40.0, 30), (50.0, 5)], True),
        (100.0, [(49.0, 30), (50.0, 5)], False),  # 100 - 2 x 49 = 2 <= 2
    ],
)
def test_ignore_eos_reserves_the_full_output_table(
    cur_rem: float, states: list[tuple[float, int]], fits: bool
) -> None:
    assert ignore_eos_fits(cur_rem, states) is fits


def test_ignore_eos_reserves_the_full_output() -> None:
    # 1000 tokens, output clipped at 100: an ignore_eos request of 100 tokens with 950
    # output tokens passes the clipped memory test (100 + 100 + 4 < 1000 - 60) but not
    # the full-output rule: 896 left; the running request (60 left at ratio 0.1) ends
    # first and frees 8, then 896 + 8 - 950 <= 1.
    def adder_for(on: bool) -> PrefillAdder:
        cache = make_cache(250, 4)
        running = [running_req("d", 600, 0)]
        limits = make_limits(4, ignore_eos_admission=on, clip_max_new_tokens=100)
        return make_adder(cache, limits, running, ratio=0.1)

    for on in (False, True):
        adder = adder_for(on)
        req = make_req("i", 100, 4, max_new=950, ignore_eos=True)
        before = snapshot(adder)
        res = add(adder, req)
        if on:
            assert res is NO_TOKEN and snapshot(adder) == before
        else:
            assert res is CONT and adder.can_run_list == [req]
    # A non-ignore_eos request is unaffected by the knob.
    adder = adder_for(True)
    assert add(adder, make_req("n", 100, 4, max_new=950)) is CONT
