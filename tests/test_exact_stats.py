"""records/exact_stats.py: numpy's percentiles, means and standard deviations, a chunk at a
time (the summary of a streaming run reads its columns from disk)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from prefillkit.records.exact_stats import mean_std, order_stats, pairwise_sum, percentiles

QS = (0.0, 1.0, 25.0, 50.0, 90.0, 95.0, 99.0, 99.9, 100.0, 33.3)


def _samples() -> Iterator[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    yield "one", np.array([3.25])
    yield "two", np.array([2.0, 1.0])
    yield "wide", rng.exponential(1.0, 5_000) * 10.0 ** rng.uniform(-6, 6, 5_000)
    yield "signed", rng.normal(0.0, 1e3, 4_097)
    yield "ties", rng.integers(0, 4, 3_001).astype(float) * 0.1
    yield "equal", np.full(2_000, 1.5)
    yield "zeros and negatives", np.concatenate((np.zeros(500), -rng.random(700), rng.random(9)))
    yield "ttft-like", 0.05 + rng.gamma(2.0, 0.3, 10_000)


def _chunks(a: np.ndarray, size: int):  # type: ignore[no-untyped-def]
    return lambda: (a[i : i + size] for i in range(0, len(a), size))


@pytest.mark.parametrize(("name", "a"), list(_samples()))
@pytest.mark.parametrize("limit", [1, 7, 300, 1 << 20])
def test_percentiles_are_numpys(name: str, a: np.ndarray, limit: int) -> None:
    got = percentiles(_chunks(a, 113), len(a), QS, limit)
    want = [float(np.percentile(a, q)) for q in QS]
    assert got == want, name  # the same floats, not close ones


@pytest.mark.parametrize(("name", "a"), list(_samples()))
def test_order_statistics_are_the_sorted_values(name: str, a: np.ndarray) -> None:
    ranks = sorted({0, len(a) // 3, len(a) // 2, len(a) - 1})
    s = np.sort(a)
    assert order_stats(_chunks(a, 50), len(a), ranks, limit=3) == {k: float(s[k]) for k in ranks}


@pytest.mark.parametrize(("name", "a"), list(_samples()))
@pytest.mark.parametrize("limit", [1, 8, 129, 1000, 1 << 20])
def test_pairwise_sums_mean_and_std_are_numpys(name: str, a: np.ndarray, limit: int) -> None:
    def read(lo: int, hi: int) -> np.ndarray:
        return a[lo:hi].copy()

    assert pairwise_sum(read, 0, len(a), limit) == float(np.add.reduce(a)), name
    assert mean_std(read, len(a), limit) == (float(np.mean(a)), float(np.std(a))), name


def test_bad_ranks_are_refused() -> None:
    a = np.arange(5.0)
    with pytest.raises(ValueError, match=r"outside 0\.\.4"):
        order_stats(_chunks(a, 2), 5, [5])
    assert order_stats(_chunks(a, 2), 5, []) == {}
