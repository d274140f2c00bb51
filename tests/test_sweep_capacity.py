"""Capacity search finds a known threshold within its tolerance.

Synthetic workload: ``n`` identical requests sharing nothing, evenly spaced. Rescaled to
mean rate ``r`` (``n / (span r)``) they arrive every ``d = n / ((n - 1) r)`` seconds; each
forward takes ``S`` (one request per forward on the default deployment), so request ``k``
waits ``k max(0, S - d)`` and the p99 TTFT (linear interpolation over ``k = 0..n-1``) is
``S + 0.99 (n - 1) max(0, S - d)``: the rate at which it reaches a bound ``B`` is known.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sweep_support import even_trace, task_log, write

pytest.importorskip("pyarrow")

from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.capacity import run_capacity
from prefillkit.app.sweep.grid import load_grid
from prefillkit.app.sweep.points import run_point
from prefillkit.app.sweep.rate_search import Slo, slo_values
from prefillkit.cli import run

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

N = 40


def _grid(tmp_path: Path) -> Path:
    even_trace(tmp_path / "even.jsonl", N)
    return write(
        tmp_path / "g.toml",
        '[grid]\nschedule_policy = ["fcfs", "lpm"]\n\n'
        '[[workload]]\nname = "even"\ntrace = "even.jsonl"\nformat = "jsonl"\n',
    )


def _service_time(tmp_path: Path) -> float:
    point = load_grid(_grid(tmp_path)).points()[0].with_rate(0.1)
    status, row, _ = run_point(point.to_dict())
    assert status == "ok"
    ttft = np.array(row["ttft_s"])
    assert np.ptp(ttft) < 1e-9  # no queueing at a low rate: every TTFT is S
    return float(ttft[0])


def test_capacity_finds_the_known_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _service_time(tmp_path)
    bound = 0.5
    d_star = s - (bound - s) / (0.99 * (N - 1))
    r_star = N / ((N - 1) * d_star)
    tol = 0.02
    log = tmp_path / "tasks.log"
    monkeypatch.setenv("PREFILLKIT_SWEEP_TASK_LOG", str(log))
    grid = load_grid(_grid(tmp_path))
    result = run_capacity(
        grid,
        str(tmp_path / "out"),
        Slo(ttft_s=bound),
        rate_min=1.0,
        rate_max=100.0,
        tolerance=tol,
        backend="process",
        jobs=2,
    )
    assert len(result["configs"]) == 2
    for c in result["configs"]:
        assert c["status"] == "found"
        lo, hi = c["capacity_rps"], c["upper_rps"]
        assert lo <= r_star < hi, (lo, r_star, hi)
        assert hi / lo <= 1 + tol
        assert all(p["ok"] == (p["rate"] <= r_star) for p in c["probes"])
    saved = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert saved["configs"][0]["capacity_rps"] == result["configs"][0]["capacity_rps"]
    # a rerun reuses every probe
    n_tasks = len(task_log(log))
    again = run_capacity(
        grid,
        str(tmp_path / "out"),
        Slo(ttft_s=bound),
        rate_min=1.0,
        rate_max=100.0,
        tolerance=tol,
        backend="process",
        jobs=2,
    )
    assert len(task_log(log)) == n_tasks
    assert again["configs"] == result["configs"]


def test_capacity_out_of_range_and_goodput(tmp_path: Path) -> None:
    s = _service_time(tmp_path)
    grid = load_grid(_grid(tmp_path))
    below = run_capacity(
        grid,
        str(tmp_path / "a"),
        Slo(ttft_s=s / 2),
        rate_min=1.0,
        rate_max=4.0,
        backend="process",
    )
    assert {c["status"] for c in below["configs"]} == {"below"}
    above = run_capacity(
        grid,
        str(tmp_path / "b"),
        Slo(goodput=0.9, goodput_ttft_s=10 * s),
        rate_min=1.0,
        rate_max=4.0,
        backend="process",
    )
    assert {c["status"] for c in above["configs"]} == {"above"}
    assert above["configs"][0]["capacity_rps"] == 4.0


def test_slo_values_count_missing_first_tokens_as_infinite() -> None:
    row = {"requests": 4, "ttft_s": [0.1, 0.2, 0.3]}
    v = slo_values(row, Slo(ttft_s=1.0, goodput=0.7, goodput_ttft_s=0.25))
    assert v["ttft_pct_s"] is None and v["goodput"] == 0.5 and v["ok"] is False
    v = slo_values({"requests": 3, "ttft_s": [0.1, 0.2, 0.3]}, Slo(ttft_s=0.3, percentile=50))
    assert v["ttft_pct_s"] == pytest.approx(0.2) and v["ok"] is True


def test_capacity_cli_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = _grid(tmp_path)
    base = ["capacity", str(grid), "--out", str(tmp_path / "o"), "--backend", "process"]
    assert run([*base, "--rate-min", "1", "--rate-max", "2"]) == 2
    assert "give an SLO" in capsys.readouterr().err
    assert run([*base, "--slo-ttft", "1", "--rate-min", "3", "--rate-max", "2"]) == 2
    assert "--rate-min/--rate-max" in capsys.readouterr().err
    rated = write(
        tmp_path / "r.toml", grid.read_text().replace("[grid]\n", "[grid]\nrate = [1.0]\n")
    )
    with pytest.raises(SweepError, match=r"\[grid\] rate: capacity searches"):
        run_capacity(
            load_grid(rated),
            str(tmp_path / "o2"),
            Slo(ttft_s=1.0),
            rate_min=1,
            rate_max=2,
            backend="process",
        )


def test_capacity_cli_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = _grid(tmp_path)
    rc = run(
        [
            "capacity",
            str(grid),
            "--out",
            str(tmp_path / "o"),
            "--backend",
            "process",
            "--slo-ttft",
            "0.5",
            "--rate-min",
            "1",
            "--rate-max",
            "100",
            "-q",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "capacity" in out and "found" in out
    assert (tmp_path / "o" / "report.html").is_file()


# --------------------------------------------------------------------------- report


def _view(points: list[tuple[str, dict[str, Any], float, float]]) -> Any:
    """A render ``View`` of finished points ``(id, labels, p99 s, input tok/s)``."""
    from prefillkit.app.sweep.view import View

    manifest = {
        "points": [{"id": pid, "labels": labels} for pid, labels, _, _ in points],
        "varied": sorted({k for _, labels, _, _ in points for k in labels}),
    }
    rows = {
        pid: {"status": "ok", "workload": "w", "ttft_p99_s": p99, "input_throughput_tok_s": thr}
        for pid, _, p99, thr in points
    }
    return View(manifest, rows)


def test_knob_effect_median_is_the_true_median() -> None:
    """An even count of points per value: the median is the mean of the middle two (it
    was the upper one: 3.0 for 1, 2, 3, 4)."""
    from prefillkit.app.sweep.view import knob_effect

    view = _view(
        [(f"p{i}", {"rate": 1.0}, p99, 100.0) for i, p99 in enumerate([4.0, 1.0, 3.0, 2.0])]
        + [("q0", {"rate": 2.0}, 5.0, 50.0), ("q1", {"rate": 2.0}, 7.0, 50.0)]
        + [("r0", {"rate": 3.0}, 1.0, 10.0)]
    )
    got = knob_effect(view, "rate", [1.0, 2.0, 3.0, 4.0])
    assert [m for _, m in got[:3]] == [2.5, 6.0, 1.0]
    assert sorted(got[0][0]) == [1.0, 2.0, 3.0, 4.0]
    assert got[3][0] == [] and np.isnan(got[3][1])


def test_pareto_labels_of_close_points_do_not_overlap() -> None:
    """A capacity search's probes crowd the front near the limit: their labels are moved
    apart (with one fixed offset, every label of the cluster sat on the next)."""
    from prefillkit.app.sweep.figures import pareto_figure

    cluster = [(f"c{i}", {"rate": 10.0 + i * 0.01}, 1.0 + i * 0.002, 1000.0 + i) for i in range(8)]
    spread = [("far0", {"rate": 1.0}, 0.1, 100.0), ("far1", {"rate": 50.0}, 9.0, 5000.0)]
    view = _view(cluster + spread)
    fig = pareto_figure(view)
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    labels = [t for t in ax.texts if t.get_text().startswith("#")]
    assert sorted(int(t.get_text()[1:]) for t in labels) == list(range(1, 11))
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b)
    # Each label stays near its point (within the offsets tried: 12 rows of 10 points).
    for t in labels:
        px, py = ax.transData.transform(t.xy)
        box = t.get_window_extent(renderer)
        near_x = min(abs(box.x0 - px), abs(box.x1 - px)) < 20 * fig.dpi / 72
        near_y = min(abs(box.y0 - py), abs(box.y1 - py)) < 130 * fig.dpi / 72
        assert near_x and near_y, (t.get_text(), box, px, py)
    import matplotlib.pyplot as plt

    plt.close(fig)
