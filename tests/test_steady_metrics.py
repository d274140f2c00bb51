"""Steady-state metrics (windows, steady interval, overload, warm/cold) and batch tracing.

The synthetic run (:func:`synthetic`) is small enough to work out by hand: 20 requests,
one every 5 s from t = 0 to t = 95, 10 s windows, an executor fully busy from 20 s to
50 s while the requests arriving then wait until 50-55 s.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prefillkit.app.replay import WorkloadSpec, load_requests
from prefillkit.app.settings import Config, describe
from prefillkit.cost.roofline import ReqShape
from prefillkit.records.metrics import BATCH_COLUMNS, REQUEST_COLUMNS, BatchTrace
from prefillkit.records.output import summary_document, write_run
from prefillkit.records.run_options import RunOptions
from prefillkit.records.steady import (
    MAX_WINDOWS,
    busy_before,
    check_window_s,
    overload_runs,
    steady_interval,
    steady_metrics,
)
from prefillkit.report.paired import compare_runs, comparison_rows
from prefillkit.report.plots import plot_windows, window_series
from prefillkit.report.rundir import load_run
from prefillkit.request import ReqStatus, Request
from prefillkit.sim.engine import Engine, SimConfigError, SimResult
from prefillkit.workloads.bundled import bundled_trace_path
from prefillkit.workloads.trace_reader import ReplayOptions

ROOT = Path(__file__).resolve().parents[1]
# The bundled slice: the full trace's first 600 requests (these tests use 300 of them).
TRACE = Path(bundled_trace_path("mooncake-slice"))

# --------------------------------------------------------------------------- synthetic run

ARRIVALS = [5.0 * i for i in range(20)]  # 0, 5, ..., 95


def _first_token(arrival: float) -> float:
    """TTFT 1 s, except that the arrivals at 20..45 s wait for 50..55 s."""
    if 20.0 <= arrival < 50.0:
        return 50.0 + (arrival - 20.0) / 5.0
    return arrival + 1.0


def _req(rid: str, arrival: float, first_token: float | None) -> Request:
    req = Request(rid, arrival, input_len=100, max_new_tokens=1, keys=[], key_tokens=1)
    req.metrics.first_token_time = first_token
    req.state.status = ReqStatus.FINISHED if first_token is not None else ReqStatus.WAITING
    return req


def synthetic(sim_end_s: float = 110.0) -> dict[str, Any]:
    reqs = [_req(f"r{i}", a, _first_token(a)) for i, a in enumerate(ARRIVALS)]
    # Busy 1 s per request outside 20..56 s; one 30 s stretch 20..50 s, then 50..56 s.
    spans = [(a, 1.0) for a in ARRIVALS if a < 20.0 or a >= 60.0] + [(20.0, 30.0), (50.0, 6.0)]
    spans.sort()
    busy = (np.array([s for s, _ in spans]), np.array([d for _, d in spans]))
    classes = {r.rid: "warm" if r.arrival_time < 50.0 else "cold" for r in reqs}
    return steady_metrics(reqs, busy, classes, window_s=10.0, sim_end_s=sim_end_s)


def test_synthetic_windows_by_hand() -> None:
    m = synthetic()
    assert m["num_windows"] == 10  # floor(95 / 10) + 1
    w = m["windows"]
    assert [x["start_s"] for x in w] == [10.0 * i for i in range(10)]
    assert [x["arrivals"] for x in w] == [2] * 10
    assert [x["requests"] for x in w] == [2] * 10
    # Utilisation: 2 s of 10 outside the busy stretch, all of 20..50, 6 s of 50..60.
    assert [x["utilization"] for x in w] == pytest.approx(
        [0.2, 0.2, 1.0, 1.0, 1.0, 0.6, 0.2, 0.2, 0.2, 0.2]
    )
    # Backlog just before 20 s: 4 arrived (0..15), 4 first tokens (1, 6, 11, 16) -> 0;
    # then +2 arrivals per window and no first token before 50 s; before 60 s, 12 arrived
    # (0..55) and all 12 have their first token (the last at 56 s).
    assert [x["backlog_start"] for x in w[:7]] == [0, 0, 0, 2, 4, 6, 0]
    assert [x["backlog_end"] for x in w[:7]] == [0, 0, 2, 4, 6, 0, 0]
    # First tokens in [50, 60): 50..55 (arrivals 20..45), 51 and 56 (arrivals 50, 55).
    assert w[5]["first_tokens"] == 8
    assert [x["first_tokens"] for x in w[2:5]] == [0, 0, 0]
    # Window 2 holds the arrivals at 20 and 25 s: TTFT 30 and 26 s.
    assert w[2]["ttft_max_s"] == 30.0
    assert w[2]["ttft_p50_s"] == pytest.approx(28.0)
    assert w[2]["ttft_p90_s"] == pytest.approx(26.0 + 0.9 * 4.0)
    assert w[0]["ttft_p99_s"] == pytest.approx(1.0)


def test_synthetic_saturation_and_overload() -> None:
    m = synthetic()
    assert [x["saturated"] for x in m["windows"]] == [False] * 2 + [True] * 3 + [False] * 5
    assert m["saturated_windows"] == [2, 3, 4]
    assert m["overloaded"] is True
    assert m["overloaded_windows"] == [2, 3, 4]


def test_synthetic_steady_interval_by_hand() -> None:
    m = synthetic()
    # Warm-up: max(10 s, 10 % of 95 s) after 0; drain: the last 10 s before 95.
    assert (m["steady_start_s"], m["steady_end_s"]) == (10.0, 85.0)
    # Arrivals 10, 15, ..., 80: TTFT 1 x 9 and 30, 26, 22, 18, 14, 10.
    assert m["steady_requests"] == m["steady_completed"] == 15
    assert m["steady_ttft_p50_s"] == pytest.approx(1.0)
    assert m["steady_ttft_p90_s"] == pytest.approx(22.0 + 0.6 * 4.0)  # position 12.6
    assert m["steady_ttft_p99_s"] == pytest.approx(26.0 + 0.86 * 4.0)  # position 13.86
    assert m["steady_ttft_max_s"] == 30.0


def test_synthetic_warm_cold_split() -> None:
    m = synthetic()
    # Warm: arrivals 0..45 (TTFT 1 x 4, then 30, 26, 22, 18, 14, 10); cold: 50..95, 1 s.
    assert (m["warm_requests"], m["cold_requests"]) == (10, 10)
    assert m["warm_ttft_max_s"] == 30.0
    assert m["warm_ttft_p50_s"] == pytest.approx(12.0)  # (10 + 14) / 2
    assert m["cold_ttft_p50_s"] == m["cold_ttft_p99_s"] == m["cold_ttft_max_s"] == 1.0


def test_last_window_ends_with_the_simulation() -> None:
    m = synthetic(sim_end_s=97.0)
    last = m["windows"][-1]
    assert (last["start_s"], last["end_s"]) == (90.0, 97.0)
    assert last["utilization"] == pytest.approx(2.0 / 7.0)  # busy 90..91 and 95..96


def test_rejected_requests_leave_the_backlog() -> None:
    reqs = [_req("a", 0.0, 1.0), _req("b", 0.5, None), _req("c", 2.0, 3.0)]
    reqs[1].state.status = ReqStatus.REJECTED
    busy = (np.array([0.0]), np.array([3.0]))
    m = steady_metrics(reqs, busy, {}, window_s=10.0, sim_end_s=4.0)
    (w,) = m["windows"]
    assert (w["start_s"], w["end_s"]) == (0.0, 4.0)
    # Counting the rejected request, the backlog would end at 1 instead of 0.
    assert (w["arrivals"], w["requests"], w["backlog_start"], w["backlog_end"]) == (3, 2, 0, 0)
    assert w["utilization"] == pytest.approx(0.75) and w["saturated"] is False
    assert m["steady_start_s"] is None and m["steady_ttft_p99_s"] is None
    assert m["warm_requests"] == m["cold_requests"] == 0


def test_no_requests() -> None:
    m = steady_metrics([], (np.zeros(0), np.zeros(0)), {}, window_s=60.0, sim_end_s=0.0)
    assert m["windows"] == [] and m["overloaded"] is False and m["steady_requests"] == 0


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([False, True, False, True, False], []),  # isolated: never longer than one window
        ([True, True], [0, 1]),
        ([True, False, True, True, True, False, True], [2, 3, 4]),
        ([], []),
    ],
)
def test_overload_needs_consecutive_saturated_windows(
    flags: list[bool], expected: list[int]
) -> None:
    assert overload_runs(flags) == expected


def test_steady_interval_rule() -> None:
    assert steady_interval(0.0, 1000.0, 60.0) == (100.0, 940.0)  # 10 % > one window
    assert steady_interval(0.0, 300.0, 60.0) == (60.0, 240.0)  # one window > 10 %
    assert steady_interval(0.0, 100.0, 60.0) is None  # warm-up meets the drain


def test_busy_before_counts_partial_intervals() -> None:
    starts, durs = np.array([1.0, 5.0]), np.array([2.0, 1.0])
    got = busy_before(starts, durs, np.array([0.0, 1.0, 2.0, 4.0, 5.5, 10.0]))
    assert got.tolist() == pytest.approx([0.0, 0.0, 1.0, 2.0, 2.5, 3.0])


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_check_window_s_rejects_bad_lengths(bad: float) -> None:
    with pytest.raises(ValueError, match="> 0"):
        check_window_s(bad, [0.0, 1.0])


def test_check_window_s_caps_the_window_count() -> None:
    check_window_s(1.0, [0.0, MAX_WINDOWS - 1.0])
    with pytest.raises(ValueError, match="windows; the most is"):
        check_window_s(1.0, [0.0, float(MAX_WINDOWS)])
    with pytest.raises(SimConfigError, match=r"^--window-s: "):
        Engine(
            Config(tp_size=8).sim_settings(),
            [_req("a", 0.0, None), _req("b", 1e9, None)],
            options=RunOptions(window_s=1.0),
        )


def test_check_window_s_message_is_short_for_huge_spans() -> None:
    """A span of 1e301 s (--rate 1e-300) was quoted with all its 300 digits."""
    with pytest.raises(ValueError) as info:
        check_window_s(60.0, [0.0, 1e301])
    assert str(info.value) == (
        "60 s windows over the 1e+301 s arrival span make 1.67e+299 windows; the most is "
        "10,000 (use a longer window)"
    )
    with pytest.raises(ValueError, match="makes over 1e\\+308 windows already"):
        check_window_s(1e-300, [0.0, 1e301], so_far=True)


def _window_trace(path: Path) -> Path:
    arrivals = [0.0, 0.0, 3.0, 3.0, 15.0]
    path.write_text(
        "".join(f'{{"arrival_s": {t}, "output_len": 2, "input_len": 100}}\n' for t in arrivals)
    )
    return path


def test_cli_huge_rate_or_tiny_window_message_is_short_and_true(tmp_path: Path) -> None:
    """--rate 1e-300 gave a 926-character line; --window-s 1e-9 quoted a 3 s "arrival span"
    for arrivals spanning 15 s (a streamed replay checks as requests arrive: the message
    now quotes the time reached, and names the trace)."""
    trace = _window_trace(tmp_path / "t.jsonl")
    base = [sys.executable, "-m", "prefillkit", "replay", "--trace", str(trace), "-q"]
    lines = {}
    for flag, value in (("--rate", "1e-300"), ("--window-s", "1e-9")):
        proc = subprocess.run([*base, flag, value], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        (lines[flag],) = proc.stderr.splitlines()
        assert len(lines[flag]) < 250, lines[flag]
        assert lines[flag].startswith(f"prefillkit: error: {trace}: --window-s: ")
    window = lines["--window-s"]
    assert "a request arriving 3.0 s after the first makes 3,000,000,000 windows already" in window
    assert "arrival span" not in window
    with pytest.raises(ValueError, match=r"over the 15\.0 s arrival span"):
        check_window_s(1e-9, [0.0, 0.0, 3.0, 3.0, 15.0])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--window-s", "-1"], "--window-s"),
        (["--window-s", "0.001"], "--window-s: 0.001 s windows"),
    ],
)
def test_cli_bad_window_is_one_line(args: list[str], needle: str) -> None:
    cmd = [sys.executable, "-m", "prefillkit", "replay", "--trace", str(TRACE)]
    proc = subprocess.run(
        [*cmd, "--max-requests", "300", "-q", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- real replay


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def replay_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimResult, Config]:
    """A small Mooncake replay with chunking (2,048-token chunks) and CP bs>1 batches."""
    cfg = Config(
        tp_size=8,
        cp_size=8,
        enable_cp_shared_kv=True,
        enable_cp_shared_kv_prefill_bs_gt1=True,
        enable_hierarchical_cache=True,
        chunked_prefill_size=2048,
        max_total_tokens=400_000,
    )
    w = load_requests(
        WorkloadSpec(trace=str(TRACE), fmt="mooncake", replay=ReplayOptions(max_requests=300)),
        page_size=64,
    )
    result = Engine(cfg.sim_settings(), w.requests, options=RunOptions(window_s=10.0)).run()
    out = tmp_path_factory.mktemp("steady") / "run"
    write_run(
        result,
        out,
        summary_document(result, name="run", config=describe(cfg), workload={"source": "test"}),
    )
    return out, result, cfg


def test_batch_ids_and_rids_agree(replay_dir: tuple[Path, SimResult, Config]) -> None:
    out, result, _ = replay_dir
    _, reqs = _rows(out / "requests.csv")
    _, batches = _rows(out / "batches.csv")
    rids_of = {int(b["batch_id"]): b["rids"].split() for b in batches}
    assert all(len(r) == int(b["size"]) for r, b in zip(rids_of.values(), batches, strict=True))
    assert any(len(r) > 1 for r in rids_of.values())  # bs>1 batches happened
    seen: dict[str, list[int]] = {}
    for b in sorted(rids_of):
        for rid in rids_of[b]:
            seen.setdefault(rid, []).append(b)
    chunked = 0
    for row in reqs:
        ids = [int(x) for x in row["batch_ids"].split()]
        assert len(ids) == int(row["num_chunks"])
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        assert all(row["rid"] in rids_of[b] for b in ids)
        assert seen.get(row["rid"], []) == ids
        chunked += len(ids) > 1
    assert chunked > 0  # some requests ran in several chunks
    assert sum(len(r) for r in rids_of.values()) == sum(int(r["num_chunks"]) for r in reqs)
    assert len(result.trace) == len(batches)


def test_cache_class_is_first_admission_hit(replay_dir: tuple[Path, SimResult, Config]) -> None:
    out, _, cfg = replay_dir
    header, reqs = _rows(out / "requests.csv")
    assert tuple(header) == REQUEST_COLUMNS
    floor = cfg.affinity_warm_floor_tokens
    classes = set()
    for row in reqs:
        hit = int(row["device_hit_tokens"]) + int(row["host_hit_tokens"])
        assert row["cache_class"] == ("warm" if hit >= floor else "cold")
        classes.add(row["cache_class"])
    assert classes == {"warm", "cold"}


def test_breakdown_columns_follow_the_cost_model(
    replay_dir: tuple[Path, SimResult, Config],
) -> None:
    out, result, _ = replay_dir
    header, batches = _rows(out / "batches.csv")
    keys = result.trace.keys
    assert "total" in keys
    terms = [f"t_{k}_s" for k in keys if k != "total"]
    assert header == [*BATCH_COLUMNS, *terms]
    assert all(b[t] != "" for b in batches for t in terms)


class TermCost:
    """A cost model with its own breakdown terms: 1 ms per extend token plus 2 ms."""

    breakdown_keys = ("compute", "fixed", "total")

    def __init__(self) -> None:
        self.calls = 0

    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        self.calls += 1
        compute = sum(s.extend_len for s in batch) * 1e-3
        return {"compute": compute, "fixed": 0.002, "total": compute + 0.002}

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        raise AssertionError("the engine calls breakdown, not forward_time")

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        return 0.001

    def kv_transfer_time(self, tokens: int) -> float:
        return 0.0


def test_custom_breakdown_terms_become_columns(tmp_path: Path) -> None:
    cfg = Config(max_total_tokens=100_000, tp_size=8)
    reqs = [
        Request.from_tokens(f"q{i}", list(range(i, i + 300)), page_size=1, arrival_time=0.1 * i)
        for i in range(5)
    ]
    cost = TermCost()
    result = Engine(cfg.sim_settings(), reqs, cost=cost).run()
    write_run(
        result, tmp_path, summary_document(result, name="t", config=describe(cfg), workload={})
    )
    header, batches = _rows(tmp_path / "batches.csv")
    assert header == [*BATCH_COLUMNS, "t_compute_s", "t_fixed_s"]
    assert cost.calls == len(batches) > 0  # once per batch
    for b in batches:
        assert float(b["t_compute_s"]) == pytest.approx(int(b["raw_extend_tokens"]) * 1e-3)
        assert float(b["t_fixed_s"]) == 0.002
        assert float(b["duration_s"]) == pytest.approx(float(b["t_compute_s"]) + 0.002)


def test_batch_trace_inverts_to_batch_ids() -> None:
    trace = BatchTrace(("x", "total"))
    a, b, c = (_req(n, 0.0, None) for n in "abc")
    a.metrics.device_hit_tokens, b.metrics.host_hit_tokens = 100, 10
    trace.record([a, b], {"x": 1.0, "total": 1.0})
    a.metrics.device_hit_tokens = 0  # a later admission must not change a's class
    trace.record([c, a], {"x": 2.0, "total": 2.0})
    assert trace.batch_ids() == {"a": [0, 1], "b": [0], "c": [1]}
    assert trace.batch_rids(1) == ["c", "a"]
    assert trace.batch_terms(1) == {"t_x_s": 2.0}
    assert trace.cache_classes(64) == {"a": "warm", "b": "cold", "c": "cold"}


def test_summary_windows_and_reports(
    replay_dir: tuple[Path, SimResult, Config], tmp_path: Path
) -> None:
    out, result, _ = replay_dir
    m = result.summary
    assert m["window_s"] == 10.0 and m["num_windows"] == len(m["windows"]) > 2
    assert sum(w["arrivals"] for w in m["windows"]) == m["requests"]
    assert sum(w["requests"] for w in m["windows"]) == m["completed"]
    assert m["warm_requests"] + m["cold_requests"] == m["completed"]
    assert m["steady_requests"] < m["requests"]
    run = load_run(out)
    mid, p99, util, _ = window_series(run)
    assert len(mid) == m["num_windows"]
    assert np.nanmax(util) <= 1.0 + 1e-9 and np.nanmax(p99) <= m["ttft_max_s"]
    assert plot_windows([run, run], tmp_path / "w.png").stat().st_size > 0
    cmp = compare_runs([run, run], n_boot=20)
    _, rows, paired = comparison_rows(cmp)
    labels = {r[0]: r for r in rows}
    for label in ("steady TTFT p90", "steady TTFT p99", "warm TTFT p99", "cold TTFT p99"):
        assert label in labels
    flag = "yes" if m["overloaded"] else "no"
    assert labels["overloaded"][1:] == [flag, flag]  # a flag: no delta, no ratio
    warm_row = next(r for r in paired if r[0].startswith("warm TTFT ratio"))
    assert warm_row[2] == f"×1 / ×1 (n={m['warm_requests']:,})"
