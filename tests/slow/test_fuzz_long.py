"""The whole-engine fuzz on workloads large enough for starvation and quadratic costs to
show: thousands of requests, sessions of dozens of growing turns over shared system
prompts, Poisson arrivals up to 70/s. Every check of ``tests/test_fuzz_engine.py``
(caps per batch, chunk continuity, reference-cache hits, liveness, affinity bounds,
determinism) runs on each replay; the cache and pool invariants every 500 engine steps
(every step would make the check itself quadratic).

Marked slow: ``pytest --run-slow tests/slow/test_fuzz_long.py -s`` (prints each replay's
size and wall time). ``PREFILLKIT_FUZZ_LONG_EXAMPLES=N`` sets the number of workloads
(default 6).
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import test_fuzz_engine as fz

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("PREFILLKIT_FUZZ_LONG_EXAMPLES", "0")) or 6


@st.composite
def long_workloads(draw: st.DrawFn) -> list[fz.ReqSpec]:
    """1,000-4,000 requests from a seeded generator (hypothesis draws the knobs only)."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1000, 4000))
    rate = draw(st.sampled_from([5.0, 20.0, 70.0]))
    turns = draw(st.sampled_from([4, 20, 60]))  # mean turns per session
    n_sessions = max(1, n // turns)
    n_groups = draw(st.integers(1, 6))
    sys_tokens = [rng.choice([0, 512, 2048, 4096]) for _ in range(n_groups)]
    cold_share = draw(st.sampled_from([0.0, 0.01, 0.1]))
    grown = [0] * n_sessions
    group_of = [rng.randrange(n_groups) for _ in range(n_sessions)]
    t = 0.0
    out: list[fz.ReqSpec] = []
    for _ in range(n):
        t += rng.expovariate(rate)
        if rng.random() < cold_share:  # a cold prompt sharing nothing
            out.append(fz.ReqSpec(round(t, 6), rng.randint(1, 512), 8, 0, 0, 0, False, 0))
            continue
        sess = rng.randrange(n_sessions)
        g = group_of[sess]
        grown[sess] = min(grown[sess] + rng.randint(16, 512), 12_000)
        out.append(
            fz.ReqSpec(
                arrival=round(t, 6),
                input_len=sys_tokens[g] + grown[sess],
                output_len=rng.choice([0, 1, 8, 64]),
                group=g,
                sys_tokens=sys_tokens[g],
                session=sess,
                keyed=True,
                priority=rng.choice([0, 0, 1, 6]),
            )
        )
    return out


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
@given(sc=fz.scenarios(workload=long_workloads(), max_forwards=20_000, real_cost=False))
def test_long_workload_fuzz(sc: fz.Scenario) -> None:
    fz.describe_scenario(sc)
    t0 = time.perf_counter()
    fz.run_scenario(sc, check_every=500, max_steps=5_000_000)
    wall = time.perf_counter() - t0
    note(f"wall {wall:.1f} s")
    cfg = sc.cfg_kwargs
    print(
        f"\n{len(sc.reqs)} requests, policy {cfg['schedule_policy']}, cp {cfg['cp_size']}, "
        f"chunk {cfg['chunked_prefill_size']}: two replays + checks in {wall:.1f} s"
    )
