"""The CP batch rules (sched/verdicts.py) and the wait bound's any-order form
(sched/policy.py ``split_aged``): pure functions shared by prefillkit's adder and the
SGLang plugin, pinned by their tables."""

from __future__ import annotations

import random

import pytest

from prefillkit.request import Request
from prefillkit.sched.policy import aged_prefix_len, split_aged
from prefillkit.sched.verdicts import (
    CloseReason,
    CpMode,
    cp_extend_limit,
    cp_pre_admission_reason,
    cp_token_limit_reason,
)


@pytest.mark.parametrize(
    ("mode", "admitted", "chunk_blocks", "max_requests", "expected"),
    [
        (CpMode.BS1, 0, False, None, None),
        (CpMode.BS_GT1, 0, True, 1, None),
        (CpMode.OFF, 5, True, 1, None),
        (CpMode.BS1, 1, False, None, CloseReason.CP_BS1),
        (CpMode.BS_GT1, 1, True, None, CloseReason.CHUNKED_SOLO),
        (CpMode.BS_GT1, 3, False, 3, CloseReason.CP_MAX_REQUESTS),
        (CpMode.BS_GT1, 2, False, 3, None),
        (CpMode.BS_GT1, 9, False, None, None),
    ],
)
def test_cp_pre_admission_table(
    mode: CpMode,
    admitted: int,
    chunk_blocks: bool,
    max_requests: int | None,
    expected: CloseReason | None,
) -> None:
    assert cp_pre_admission_reason(mode, admitted, chunk_blocks, max_requests) is expected


@pytest.mark.parametrize(
    ("batch_ext", "batch_cached", "prefix", "ext", "ext_limit", "cached_limit", "expected"),
    [
        (4096, 0, 0, 4096, 8192, None, None),  # exactly at the limit: admitted
        (4096, 0, 0, 4160, 8192, None, CloseReason.CP_MAX_EXTEND),
        (0, 60_000, 5_000, 64, None, 64_000, CloseReason.CP_MAX_CACHED),
        (0, 59_000, 5_000, 64, None, 64_000, None),
        (8192, 99_999, 1, 64, 8192, 0, CloseReason.CP_MAX_EXTEND),  # extend checked first
        (0, 0, 10**9, 10**9, None, None, None),
    ],
)
def test_cp_token_limit_table(
    batch_ext: int,
    batch_cached: int,
    prefix: int,
    ext: int,
    ext_limit: int | None,
    cached_limit: int | None,
    expected: CloseReason | None,
) -> None:
    got = cp_token_limit_reason(batch_ext, batch_cached, prefix, ext, ext_limit, cached_limit)
    assert got is expected


def test_cp_extend_limit_is_the_user_limit_capped_by_the_chunk_budget() -> None:
    assert cp_extend_limit(16_384, 8192) == 8192
    assert cp_extend_limit(4096, 8192) == 4096
    assert cp_extend_limit(None, 8192) == 8192
    assert cp_extend_limit(4096, None) == 4096
    assert cp_extend_limit(None, None) is None


def test_split_aged_at_one_hand_computed_point() -> None:
    # now 10, bound 5: arrivals <= 5 have aged; oldest first, ties in queue order.
    aged, rest = split_aged([7.0, 5.0, 1.0, 9.0, 1.0], 10.0, 5.0)
    assert aged == [2, 4, 1]
    assert rest == [0, 3]


def test_split_aged_on_an_arrival_ordered_queue_is_its_aged_front() -> None:
    rng = random.Random(3)
    for _ in range(200):
        times = sorted(round(rng.uniform(0, 20), 1) for _ in range(rng.randint(0, 30)))
        reqs = [Request(f"r{i}", t, 8, 1, [], 1) for i, t in enumerate(times)]
        now, bound = rng.uniform(0, 25), rng.choice([0.0, 1.0, 5.0])
        aged, rest = split_aged(times, now, bound)
        k = aged_prefix_len(reqs, now, bound)
        assert aged == list(range(k))
        assert rest == list(range(k, len(times)))
