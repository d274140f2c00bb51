"""Truthful flags and verdicts (issue 33 items 7 and 9): overload with its reason
(compute-bound, memory-bound, drain), no verdict from too few requests, a degenerate
warm/cold split said as such, and identical plot series kept apart.

The decisions are pure functions (``prefillkit.records.run_flags``,
``prefillkit.report.verdicts``, ``prefillkit.report.plot_base``), tested by table; the
end-to-end tests run the bundled Mooncake slice, where every request starts with the same
512-token block, so all but the first one or two are warm.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure

import prefillkit.report.plots as plots
from prefillkit.app.launch import build_config
from prefillkit.app.replay import WorkloadSpec, load_requests, open_workload
from prefillkit.records.run_flags import (
    drain_limit_s,
    drain_seconds,
    overload_verdict,
    split_degenerate,
    split_note,
    window_bound,
)
from prefillkit.records.steady import steady_metrics
from prefillkit.report.paired import compare_runs, headline_rows
from prefillkit.report.plot_base import twin_kw, twin_note, twins
from prefillkit.report.rundir import RunData, load_run
from prefillkit.report.verdicts import min_samples, n_text, overload_text, too_few
from prefillkit.request import ReqStatus, Request
from prefillkit.sim.engine import Engine

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- overload


def _window(arrivals: int, start: int, end: int, util: float) -> dict[str, Any]:
    """A window record as :func:`prefillkit.records.steady.window_record` gives it."""
    return {
        "arrivals": arrivals,
        "backlog_start": start,
        "backlog_end": end,
        "utilization": util,
        "saturated": util >= 0.98 and end > start,
    }


def _grow(util: float, n: int = 4, step: int = 15, arrivals: int = 10) -> list[dict[str, Any]]:
    """``n`` windows of ``arrivals`` each whose backlog grows by ``step`` per window."""
    return [_window(arrivals, i * step, (i + 1) * step, util) for i in range(n)]


@pytest.mark.parametrize(
    ("windows", "drain_s", "overloaded", "reason", "over"),
    [
        # the report: busy 95 %, the queue keeps growing -> memory-bound (was "no")
        (_grow(0.954), 1.0, True, "memory-bound", [0, 1, 2, 3]),
        (_grow(0.99), 1.0, True, "compute-bound", [0, 1, 2, 3]),
        # steady: the backlog comes and goes
        (
            [_window(10, 2, 3, 0.9), _window(10, 3, 1, 0.9), _window(10, 1, 4, 0.9)],
            1.0,
            False,
            None,
            [],
        ),
        # growing, but never more than a window's arrivals waiting: not overload
        (_grow(0.9, step=2), 1.0, False, None, []),
        # one growing window only (a burst): not overload
        (
            [_window(10, 0, 5, 0.9), _window(10, 5, 30, 0.9), _window(10, 30, 0, 0.5)],
            1.0,
            False,
            None,
            [],
        ),
        # the backlog is cleared only long after the last arrival
        ([_window(10, 0, 3, 0.9)], 120.0, True, "drain", []),
        (_grow(0.954), 500.0, True, "memory-bound, drain", [0, 1, 2, 3]),
        # saturated, then held back by memory: both reasons
        (
            [*_grow(0.99, n=2), *[_window(10, 40 + 15 * i, 55 + 15 * i, 0.8) for i in range(2)]],
            1.0,
            True,
            "compute-bound, memory-bound",
            [0, 1, 2, 3],
        ),
        ([], 0.0, False, None, []),
    ],
)
def test_overload_rule(
    windows: list[dict[str, Any]],
    drain_s: float,
    overloaded: bool,
    reason: str | None,
    over: list[int],
) -> None:
    got = overload_verdict(windows, drain_s, limit_s=60.0)
    assert (got["overloaded"], got["overload_reason"], got["overloaded_windows"]) == (
        overloaded,
        reason,
        over,
    )


@pytest.mark.parametrize(
    ("window", "bound"),
    [
        (_window(10, 10, 25, 0.95), "memory-bound"),
        (_window(10, 10, 25, 0.99), "compute-bound"),
        (_window(10, 0, 5, 0.99), "compute-bound"),  # saturated: the old rule, unchanged
        (_window(10, 0, 10, 0.95), None),  # backlog == arrivals: no older request waits
        (_window(10, 30, 20, 0.5), None),  # shrinking
    ],
)
def test_window_bound(window: dict[str, Any], bound: str | None) -> None:
    assert window_bound(window) == bound


@pytest.mark.parametrize(
    ("t0", "t_last", "window_s", "limit"),
    [(0.0, 1022.0, 60.0, 102.2), (0.0, 200.0, 60.0, 60.0), (5.0, 105.0, 10.0, 10.0)],
)
def test_drain_limit(t0: float, t_last: float, window_s: float, limit: float) -> None:
    assert drain_limit_s(t0, t_last, window_s) == pytest.approx(limit)


def test_drain_seconds() -> None:
    # the report: 1,022 s of arrivals, 1,658 simulated seconds
    assert drain_seconds(1022.0, 1658.0, 0, 1658.0) == pytest.approx(636.0)
    assert drain_seconds(1022.0, 1030.0, 3, 1658.0) == pytest.approx(636.0)  # still waiting
    assert drain_seconds(10.0, None, 0, 12.0) == pytest.approx(2.0)
    assert drain_limit_s(0.0, 1022.0, 60.0) < 636.0  # so the report's run drains


def _synthetic(busy: float, first_token: Any) -> dict[str, Any]:
    """60 requests, one a second, 10 s windows; the executor busy ``busy`` of each window."""
    reqs = []
    for k in range(60):
        req = Request(f"r{k}", float(k), input_len=100, max_new_tokens=1, keys=[], key_tokens=1)
        req.metrics.first_token_time = first_token(k)
        req.state.status = ReqStatus.FINISHED
        reqs.append(req)
    end = max(float(first_token(k)) for k in range(60))
    starts = np.arange(0.0, end, 10.0)
    return steady_metrics(
        reqs, (starts, np.full(len(starts), 10.0 * busy)), {}, window_s=10.0, sim_end_s=end
    )


@pytest.mark.parametrize(
    ("busy", "first_token", "reason"),
    [
        (0.954, lambda k: 2.0 * k + 1.0, "memory-bound, drain"),  # served at half the rate
        (0.99, lambda k: 2.0 * k + 1.0, "compute-bound, drain"),
        (0.5, lambda k: k + 0.5, None),  # keeps up
    ],
)
def test_steady_metrics_flag_overload_whatever_the_busy_fraction(
    busy: float, first_token: Any, reason: str | None
) -> None:
    m = _synthetic(busy, first_token)
    assert m["overloaded"] is (reason is not None)
    assert m["overload_reason"] == reason
    if reason is not None:
        assert m["drain_s"] == pytest.approx(119.0 - 59.0)
        assert m["overloaded_windows"] == ([2, 3, 4, 5] if busy < 0.98 else list(range(6)))


@pytest.mark.parametrize(
    ("metrics", "text"),
    [
        ({"overloaded": False}, "no"),
        (
            {
                "overloaded": True,
                "overload_reason": "memory-bound, drain",
                "drain_s": 636.2,
                "overloaded_windows": [3, 4, 5, 9],
            },
            "yes: memory-bound, drain (windows 3-5, 9; 636 s past the last arrival)",
        ),
        (
            {"overloaded": True, "overload_reason": "compute-bound", "overloaded_windows": [0, 1]},
            "yes: compute-bound (windows 0-1)",
        ),
        ({"overloaded": True, "overloaded_windows": [2, 3]}, "yes: windows 2-3"),  # old summary
    ],
)
def test_overload_text(metrics: dict[str, Any], text: str) -> None:
    assert overload_text(metrics) == text


# --------------------------------------------------------------------------- minimum n


@pytest.mark.parametrize(
    ("key", "need"),
    [
        ("ttft_p99_s", 101),  # (2 - 0.99) / (1 - 0.99)
        ("cold_ttft_p99_s", 101),
        ("ttft_p99.9_s", 1001),
        ("ttft_p90_s", 30),  # 11, but never fewer than 30
        ("ttft_p50_s", 30),
        ("ttft_mean_s", 30),
        ("warm_ttft_max_s", 30),
        ("steady_ttft_p99_s", 101),
        ("queueing_p99_s", 101),
        ("slo_attainment", 30),
        ("cache_hit_rate", None),  # run totals: no minimum
        ("input_throughput_tok_s", None),
        ("overloaded", None),
    ],
)
def test_min_samples(key: str, need: int | None) -> None:
    assert min_samples(key) == need


@pytest.mark.parametrize(
    ("key", "counts", "word"),
    [
        ("cold_ttft_p99_s", [1, 2], "n too small (n=1 < 101)"),  # the README's case
        ("cold_ttft_p99_s", [101, 400], None),
        ("ttft_p99_s", [100, 400], "n too small (n=100 < 101)"),
        ("ttft_p50_s", [29, 29], "n too small (n=29 < 30)"),
        ("ttft_p50_s", [30, 30], None),
        ("cache_hit_rate", [1, 1], None),
        ("ttft_p99_s", [None, None], None),  # unknown (an older summary): no gate
    ],
)
def test_too_few(key: str, counts: list[int | None], word: str | None) -> None:
    assert too_few(key, counts) == word


def test_n_text() -> None:
    assert n_text([400, 400, 400]) == "400"
    assert n_text([1, 1, 2]) == "1/1/2"
    assert n_text([1_200, None]) == "1,200/-"


# --------------------------------------------------------------------------- split


@pytest.mark.parametrize(
    ("warm", "cold", "degenerate"),
    [
        (599, 1, True),  # the Mooncake slice
        (600, 0, True),
        (0, 50, True),
        (594, 6, False),  # 1 %: not under it
        (99, 1, False),
        (300, 300, False),
        (0, 0, False),  # no request: no split
    ],
)
def test_split_degenerate(warm: int, cold: int, degenerate: bool) -> None:
    assert split_degenerate(warm, cold) is degenerate
    assert (split_note(warm, cold, 64) is not None) is degenerate


def test_split_note_names_the_rule() -> None:
    assert split_note(599, 1, 64) == (
        "warm/cold split degenerate: 599 of 600 requests warm (warm: device + host hit "
        "≥ 64 tokens at first admission); the affinity policy has almost nothing to reorder"
    )
    assert "degenerate: 40 of 40 requests cold (warm: device + host hit ≥ 128 tokens" in (
        split_note(0, 40, 128) or ""
    )


# --------------------------------------------------------------------------- plots


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        ([(np.array([1.0, 2.0]),), (np.array([1.0, 2.0]),)], [None, 0]),
        ([(np.array([1.0, 2.0]),), (np.array([1.0, 3.0]),)], [None, None]),
        ([(np.array([1.0, np.nan]),), (np.array([1.0, np.nan]),)], [None, 0]),  # NaN == NaN
        ([(np.zeros(0),), (np.zeros(0),)], [None, None]),  # nothing drawn: nothing hidden
        (
            [(np.ones(3),), (np.zeros(3),), (np.ones(3),), (np.ones(3),)],
            [None, None, 0, 0],
        ),
        ([(np.ones(2), np.ones(2)), (np.ones(2), np.zeros(2))], [None, None]),
        ([None, (np.ones(2),)], [None, None]),
    ],
)
def test_twins(series: list[tuple[np.ndarray, ...] | None], expected: list[int | None]) -> None:
    assert twins(series) == expected


def test_every_copy_of_a_series_gets_its_own_style() -> None:
    same = [None, 0, 0]
    styles = [twin_kw(same, i, 4.0) for i in range(3)]
    assert "ls" not in styles[0] and styles[1]["ls"] != styles[2]["ls"]
    assert styles[0]["ms"] < styles[1]["ms"] < styles[2]["ms"]
    assert styles[1]["markerfacecolor"] == "none"
    assert [twin_note(same, i, ["a", "b", "c"]) for i in range(3)] == [
        "",
        " (identical to a)",
        " (identical to a)",
    ]


# --------------------------------------------------------------------------- end to end

#: A KV pool of 60,000 tokens held through slow transfers: the executor idles (16 % busy)
#: while the requests queue for pages.
MEMORY_BOUND = [
    "--model", "llama-3.1-8b", "--tp", "1", "--mode", "pd-prefill",
    "--max-total-tokens", "60000", "--kv-transfer-bandwidth-gbps", "0.3",
]  # fmt: skip


def test_memory_bound_replay_is_overloaded_in_list_and_streaming_runs() -> None:
    cfg = build_config(None, MEMORY_BOUND).config
    spec = WorkloadSpec(trace="mooncake-slice")
    page = cfg.resolved_page_size
    listed = Engine(cfg.sim_settings(), load_requests(spec, page_size=page).requests).run()
    streamed = Engine(cfg.sim_settings(), open_workload(spec, page_size=page).requests).run()
    for m in (listed.summary, streamed.summary):
        assert m["executor_utilization"] < 0.5 and m["saturated_windows"] == []
        assert m["overloaded"] is True and m["overload_reason"] == "memory-bound, drain"
        assert m["drain_s"] > 1000.0 and m["cache_split_degenerate"] is True
    keys = ("overloaded", "overload_reason", "drain_s", "overloaded_windows")
    assert [listed.summary[k] for k in keys] == [streamed.summary[k] for k in keys]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prefillkit.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_replay_summary_names_the_reason_and_the_degenerate_split() -> None:
    proc = _cli("replay", "--trace", "mooncake-slice", *MEMORY_BOUND)
    assert proc.returncode == 0, proc.stderr
    assert "yes: memory-bound, drain (windows 1-3; 1,144 s past the last arrival)" in proc.stdout
    assert (
        "warm/cold split degenerate: 577 of 579 requests warm (warm: device + host hit ≥ 64 "
        "tokens at first admission)" in proc.stdout
    )


@pytest.mark.interpreted
def test_compare_on_the_mooncake_slice_shows_n_and_refuses_thin_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cmp"
    proc = _cli(
        "compare", "--trace", "mooncake-slice", "--max-requests", "200",
        "--variant", "fcfs:--schedule-policy fcfs",
        "--variant", "affinity:--enable-affinity",
        "--variant", "fcfs-again:--schedule-policy fcfs",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "n too small (n=1 < 101)" in text  # cold TTFT p99 rests on one request
    assert "warm/cold split degenerate: 199 of 200 requests warm" in text
    assert "(101 for p99)" in text  # the rule, stated under the table
    doc = json.loads((out / "compare.json").read_text())
    assert doc["min_n"]["cold_ttft_p99_s"] == 101 and doc["min_n"]["ttft_p50_s"] == 30
    for v in doc["variants"]:
        assert v["n"]["cold_ttft_p99_s"] == 1 and v["n"]["ttft_p99_s"] == 200
        assert v["split_note"].startswith("warm/cold split degenerate: 199 of 200")
    header, rows = headline_rows(doc)
    assert header[:2] == ["metric", "n"]
    cold = next(r for r in rows if r[0] == "cold TTFT p99")
    assert cold[1] == "1" and "better" not in cold[-1] and "worse" not in cold[-1]
    # identical variants: the second copy is drawn over the first and says so
    runs: list[RunData] = []
    for v in doc["variants"]:
        run = load_run(out / v["dir"])
        run.name = v["name"]
        runs.append(run)
    legends: list[str] = []

    def keep_legend(fig: Figure, path: str | Path) -> Path:
        for ax in fig.axes:
            if (legend := ax.get_legend()) is not None:
                legends.extend(t.get_text() for t in legend.get_texts())
        return Path(path)

    monkeypatch.setattr(plots, "_save", keep_legend)
    plots.plot_windows(runs, tmp_path / "w.png")
    plots.plot_ttft_cdf(runs, tmp_path / "c.png")
    plots.plot_queue_length(runs, tmp_path / "q.png")
    assert sum("fcfs-again (identical to fcfs)" in t for t in legends) == 2  # both panels
    assert any(t.startswith("fcfs-again (p99") and "identical to fcfs" in t for t in legends)
    assert any("identical to fcfs" in t for t in legends if t.startswith("fcfs-again (max"))
    assert compare_runs(runs, n_boot=10)["variants"][2]["n"]["cold_ttft_p99_s"] == 1
