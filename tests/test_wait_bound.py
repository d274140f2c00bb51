"""The wait bound (issue 16 item 1): aging under every ordering policy.

Rule (``policy.order_waiting``): at a pass at time ``now``, every waiting request with
``now - arrival_time >= --schedule-max-wait-s`` goes first, in arrival order, ahead of
the policy's order of the rest. With affinity on, the bound is
``min(--schedule-max-wait-s, --affinity-max-age-s)``.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

import prefillkit.sched.policy
from conftest import patches
from prefillkit.app.settings import Config
from prefillkit.cache import KVPool, PrefixCache
from prefillkit.request import Request
from prefillkit.sched.policy import aged_prefix_len, order_waiting
from prefillkit.sim.engine import simulate

ROOT = Path(__file__).resolve().parents[1]


def _req(rid: str, t: float, tokens: list[int] | None = None, prio: int = 0) -> Request:
    return Request.from_tokens(
        rid, tokens or [10**7 + sum(map(ord, rid))], page_size=1, arrival_time=t, priority=prio
    )


# ------------------------------------------------------------- the pure rule
@pytest.mark.parametrize(
    ("arrivals", "now", "max_wait", "aged"),
    [
        ([], 10.0, 5.0, 0),
        ([0.0, 1.0, 2.0], 10.0, None, 0),  # off
        ([0.0, 1.0, 2.0], 4.9, 5.0, 0),  # nobody 5 s old yet
        ([0.0, 1.0, 2.0], 5.0, 5.0, 1),  # exactly the bound: aged
        ([0.0, 1.0, 2.0], 6.5, 5.0, 2),
        ([0.0, 1.0, 2.0], 100.0, 5.0, 3),
        ([0.0, 0.0, 3.0], 5.0, 5.0, 2),  # ties in arrival
        ([0.0, 1.0, 2.0], 2.0, 0.0, 3),  # bound 0: everything that arrived is aged
    ],
)
def test_aged_prefix_len_table(
    arrivals: list[float], now: float, max_wait: float | None, aged: int
) -> None:
    waiting = [_req(f"r{i}", t) for i, t in enumerate(arrivals)]
    assert aged_prefix_len(waiting, now, max_wait) == aged


@patches(prefillkit.sched.policy)  # a stand-in request type counts the reads
def test_aged_prefix_len_is_a_binary_search() -> None:
    """O(log queue): finding the aged front of 100,000 waiting requests reads about 17
    arrival times, however many have aged (the linear scan was a measured hot spot)."""
    reads = 0

    class R:
        def __init__(self, t: float) -> None:
            self._t = t

        @property
        def arrival_time(self) -> float:
            nonlocal reads
            reads += 1
            return self._t

    waiting = [R(i * 0.001) for i in range(100_000)]
    for now, aged in [(4.0, 0), (5.0, 1), (55.0, 50_001), (1000.0, 100_000)]:
        reads = 0
        assert aged_prefix_len(waiting, now, 5.0) == aged  # type: ignore[arg-type]
        assert reads <= 20


def _lpm_queue() -> tuple[PrefixCache, list[Request]]:
    """Three cold requests then three warm ones (warm share a cached prefix)."""
    cache = PrefixCache(KVPool(512, 1), 1)
    shared = list(range(1, 65))
    keys = Request.from_tokens("seed", shared, page_size=1).keys
    m = cache.match(keys, len(keys))
    node = cache.lock(m.device_node, m.device_units)
    assert cache.alloc_pages(0, len(keys)) is not None
    cache.unlock(cache.insert(node, keys, 0, len(keys)))
    waiting = [_req(f"c{i}", float(i), [5000 + 100 * i + j for j in range(40)]) for i in range(3)]
    waiting += [_req(f"w{i}", 3.0 + i, [*shared, 7000 + i]) for i in range(3)]
    return cache, waiting


def _rids(order: list[Request]) -> list[str]:
    return [r.rid for r in order]


@pytest.mark.parametrize(
    ("policy", "now", "max_wait", "expected"),
    [
        # LPM alone: warm first (match 64), the colds last
        ("lpm", 10.0, None, ["w0", "w1", "w2", "c0", "c1", "c2"]),
        ("lpm", 4.0, 5.0, ["w0", "w1", "w2", "c0", "c1", "c2"]),  # nobody aged
        ("lpm", 6.0, 5.0, ["c0", "c1", "w0", "w1", "w2", "c2"]),  # c0, c1 aged
        ("lpm", 9.0, 5.0, ["c0", "c1", "c2", "w0", "w1", "w2"]),  # w0 aged too: arrival
        ("dfs-weight", 6.0, 5.0, ["c0", "c1", "w0", "w1", "w2", "c2"]),
        ("fcfs", 6.0, 5.0, ["c0", "c1", "c2", "w0", "w1", "w2"]),  # unchanged
    ],
)
def test_order_waiting_aged_front_table(
    policy: str, now: float, max_wait: float | None, expected: list[str]
) -> None:
    cache, waiting = _lpm_queue()
    before = list(waiting)
    order, used = order_waiting(waiting, policy, cache, now=now, max_wait_s=max_wait)
    assert _rids(order) == expected
    assert used == policy
    assert waiting == before  # mutates nothing


def test_fcfs_order_is_the_queue_itself() -> None:
    cache, waiting = _lpm_queue()
    order, _ = order_waiting(waiting, "fcfs", cache, now=100.0, max_wait_s=0.0)
    assert order is waiting


def test_lpm_fallback_counts_the_whole_queue() -> None:
    cache, waiting = _lpm_queue()
    # 6 waiting > 5: upstream's queue-length fallback (FCFS) though only 4 are young
    order, used = order_waiting(
        waiting, "lpm", cache, lpm_fallback_queue_len=5, now=6.0, max_wait_s=5.0
    )
    assert used == "fcfs" and _rids(order) == _rids(waiting)


def test_priority_keeps_strict_classes_unless_aging_is_asked_for() -> None:
    cache = PrefixCache(KVPool(64, 1), 1)
    waiting = [_req("low0", 0.0, prio=0), _req("low1", 1.0, prio=0), _req("high2", 2.0, prio=5)]
    kw = {"priority": True, "now": 5.5, "max_wait_s": 5.0}  # only low0 is 5 s old
    strict, _ = order_waiting(waiting, "fcfs", cache, **kw)  # type: ignore[arg-type]
    assert _rids(strict) == ["high2", "low0", "low1"]
    aged, _ = order_waiting(waiting, "fcfs", cache, priority_aging=True, **kw)  # type: ignore[arg-type]
    assert _rids(aged) == ["low0", "high2", "low1"]


# ------------------------------------------------------------- knobs
def test_knob_defaults_and_normalisation() -> None:
    assert Config().schedule_max_wait_s == 5.0
    assert Config().enable_priority_aging is False
    assert Config(schedule_max_wait_s=-1).schedule_max_wait_s is None
    assert Config(schedule_max_wait_s=0).schedule_max_wait_s == 0.0


@pytest.mark.parametrize("value", ["-2", "nan", "inf", "abc"])
def test_bad_max_wait_is_one_line_exit_2(value: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefillkit.cli",
            "replay",
            "--trace",
            str(tmp_path / "none.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--schedule-max-wait-s",
            value,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--schedule-max-wait-s" in lines[0], proc.stderr


# ------------------------------------------------------------- the example
def _cold_stream(seed: int = 0) -> list[Request]:
    """60 s Poisson stream at 70/s of warm requests (4,096 shared tokens + 512 unique)
    with 8 cold 512-token prompts spread over it."""
    rng = random.Random(seed)
    shared = list(range(4096))
    reqs: list[Request] = []
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(70.0)
        if t >= 60.0:
            break
        unique = [10_000_000 + 512 * i + j for j in range(512)]
        reqs.append(
            Request.from_tokens(
                f"w{i}", shared + unique, page_size=1, arrival_time=t, max_new_tokens=1
            )
        )
        i += 1
    for k in range(8):
        toks = [2_000_000_000 + 512 * k + j for j in range(512)]
        reqs.append(
            Request.from_tokens(
                f"c{k}", toks, page_size=1, arrival_time=7.5 * k + 3.75, max_new_tokens=1
            )
        )
    reqs.sort(key=lambda r: r.arrival_time)
    return reqs


def _cold_max_wait(policy: str, **kw: object) -> float:
    cfg = Config(
        model="llama-3.1-8b",
        tp_size=1,
        chunked_prefill_size=1024,
        schedule_policy=policy,
        **kw,  # type: ignore[arg-type]
    )
    res = simulate(cfg.sim_settings(), _cold_stream())
    waits = []
    for r in res.requests:
        if r.rid.startswith("c"):
            assert r.metrics.first_scheduled_time is not None
            waits.append(r.metrics.first_scheduled_time - r.arrival_time)
    assert len(waits) == 8
    return max(waits)


@pytest.fixture(scope="module")
def fcfs_cold_max() -> float:
    return _cold_max_wait("fcfs")


@pytest.mark.parametrize("policy", ["lpm", "dfs-weight"])
def test_cold_max_wait_bounded_by_default(policy: str, fcfs_cold_max: float) -> None:
    """Default bound 5 s: a cold request waits at most the bound plus what FCFS gives it
    (slack: one pass's forward)."""
    bound = Config().schedule_max_wait_s
    assert bound is not None
    got = _cold_max_wait(policy)
    assert got <= max(bound, fcfs_cold_max) + 0.5, (got, fcfs_cold_max)


def test_cold_starves_without_the_bound(fcfs_cold_max: float) -> None:
    """The bound off (upstream): LPM leaves cold requests queued for tens of seconds."""
    got = _cold_max_wait("lpm", schedule_max_wait_s=-1)
    assert got > 30.0 and got > 5 * fcfs_cold_max


def test_affinity_age_bounds_cold_wait_under_lpm(fcfs_cold_max: float) -> None:
    """Affinity's T bounds the actual wait of a cold request under LPM, even with the
    scheduler's own bound off: a cold T old is at the front of the order."""
    t = 2.0
    got = _cold_max_wait("lpm", schedule_max_wait_s=-1, enable_affinity=True, affinity_max_age_s=t)
    assert got <= max(t, fcfs_cold_max) + 0.5, (got, fcfs_cold_max)
