"""Report package: run-directory loading, paired comparison, plots and the HTML page."""

from __future__ import annotations

import base64
import csv
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from rich.table import Table

from prefillkit.report import plot_ttft_time, plots
from prefillkit.report.html import write_report
from prefillkit.report.paired import (
    bootstrap_p99_diff,
    compare_runs,
    comparison_table,
    paired_ttft,
    paired_ttft_values,
    ratio_summary,
)
from prefillkit.report.rundir import BATCH_COLUMNS, REQUEST_COLUMNS, RunData, load_run

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
N_REQ = 300


# --------------------------------------------------------------------------- fixtures


def _base_requests(seed: int = 7, n: int = N_REQ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.05, n))
    input_len = rng.integers(500, 8000, n).astype(float)
    device = np.floor(input_len * rng.uniform(0.0, 0.7, n))
    host = np.floor((input_len - device) * rng.uniform(0.0, 0.5, n))
    queueing = rng.exponential(0.08, n)
    ttft = queueing + input_len / 40_000 + rng.lognormal(-3.0, 0.6, n)
    return {
        "rid": np.array([f"r{i:04d}" for i in range(n)], dtype=object),
        "arrival_s": arrival,
        "queueing_s": queueing,
        "ttft_s": ttft,
        "input_len": input_len,
        "max_new_tokens": rng.integers(1, 300, n).astype(float),
        "device_hit_tokens": device,
        "host_hit_tokens": host,
        "recomputed_tokens": input_len - device - host,
        "priority": np.zeros(n),
        "preemptions": (rng.random(n) < 0.03).astype(float),
        "affinity_skips": rng.integers(0, 3, n).astype(float),
    }


def _cache_class(req: dict[str, np.ndarray], i: int) -> str:
    hit = int(req["device_hit_tokens"][i]) + int(req["host_hit_tokens"][i])
    return "warm" if hit >= 64 else "cold"


def _write_run(
    root: Path,
    name: str,
    req: dict[str, np.ndarray],
    *,
    status: np.ndarray | None = None,
    config: dict[str, Any] | None = None,
    partial: bool = False,
    affinity: tuple[int, int] = (40, 12),
    order: np.ndarray | None = None,
    seed: int = 1,
) -> Path:
    """Write summary.json, requests.csv and batches.csv the way the simulator does."""
    rng = np.random.default_rng(seed)
    n = len(req["rid"])
    status = np.full(n, "finished", dtype=object) if status is None else status
    run = root / name
    run.mkdir(parents=True)
    fin = status == "finished"
    sched = req["arrival_s"] + req["queueing_s"]
    with (run / "requests.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(REQUEST_COLUMNS)
        for i in order if order is not None else range(n):
            scheduled = status[i] != "rejected" and not (status[i] == "unfinished" and i % 2)
            w.writerow(
                [
                    req["rid"][i],
                    f"{req['arrival_s'][i]:.6f}",
                    f"{sched[i]:.6f}" if scheduled else "",
                    f"{req['arrival_s'][i] + req['ttft_s'][i]:.6f}" if fin[i] else "",
                    repr(float(req["ttft_s"][i])) if fin[i] else "",
                    f"{req['queueing_s'][i]:.6f}" if scheduled else "",
                    int(req["input_len"][i]),
                    int(req["max_new_tokens"][i]),
                    1 + int(req["input_len"][i]) // 4096,
                    int(req["device_hit_tokens"][i]),
                    int(req["host_hit_tokens"][i]),
                    int(req["recomputed_tokens"][i]),
                    int(req["priority"][i]),
                    status[i],
                    "queue_full" if status[i] == "rejected" else "",
                    int(req["preemptions"][i]),
                    0,  # retractions
                    0,  # requeue_recomputed_tokens
                    0.0,  # requeue_lost_s
                    int(req["affinity_skips"][i]),
                    _cache_class(req, i) if scheduled else "",
                    "",
                ]
            )
    nb = 120
    end = float(req["arrival_s"].max()) + 0.5
    start = np.sort(rng.uniform(0.0, end, nb))
    size = rng.integers(1, 9, nb)
    extend = size * rng.integers(300, 2500, nb)
    cached = size * rng.integers(0, 3000, nb)
    with (run / "batches.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(BATCH_COLUMNS)
        for b in range(nb):
            w.writerow(
                [
                    b,
                    f"{start[b]:.6f}",
                    f"{rng.uniform(0.01, 0.2):.6f}",
                    int(size[b]),
                    int(extend[b]),
                    int(cached[b]),
                    int(cached[b]) // 2,  # device hit
                    int(cached[b]) // 4,  # host hit
                    int(cached[b]) - int(cached[b]) // 2 - int(cached[b]) // 4,  # carried
                    int(rng.integers(0, 500)),
                    int(rng.integers(1, 4) * 2**28),
                    ("warm", "cold", "none")[b % 3],
                    ("token_budget", "buffer_limit", "queue_empty")[b % 3],
                    ("true", "false")[b % 2],
                    int(rng.integers(0, 40)),
                    int(rng.integers(0, 2)),
                    int(rng.integers(0, 2)),
                    " ".join(str(r) for r in req["rid"][: int(size[b])]),
                ]
            )
    ttft = req["ttft_s"][fin]
    metrics: dict[str, Any] = {
        "requests": n,
        "completed": int(fin.sum()),
        "rejected": int((status == "rejected").sum()),
        "ttft_p50_s": float(np.quantile(ttft, 0.5)),
        "ttft_p90_s": float(np.quantile(ttft, 0.9)),
        "ttft_p99_s": float(np.quantile(ttft, 0.99)),
        "ttft_max_s": float(ttft.max()),
        "ttft_mean_s": float(ttft.mean()),
        "queueing_mean_s": float(req["queueing_s"].mean()),
        "device_hit_rate": float(req["device_hit_tokens"].sum() / req["input_len"].sum()),
        "host_hit_rate": float(req["host_hit_tokens"].sum() / req["input_len"].sum()),
        "cache_hit_rate": float(
            (req["device_hit_tokens"].sum() + req["host_hit_tokens"].sum()) / req["input_len"].sum()
        ),
        "input_throughput_tok_s": float(req["input_len"].sum() / end),
        "executor_utilization": 0.83,
        "num_batches": nb,
        "mean_batch_size": float(size.mean()),
        "affinity_skips": affinity[0],
        "affinity_defers": affinity[1],
        "affinity_stops": 0,
        "preemptions": int(req["preemptions"].sum()),
        "evicted_pages": 1234,
        "sim_duration_s": end,
        "wall_time_s": None,  # any metric may be null
        "some_future_metric": 3.5,  # unknown keys are tolerated
    }
    summary = {
        "name": name,
        "partial": partial,
        "config": config or {"schedule_policy": "lpm", "chunked_prefill_size": 8192},
        "workload": {"source": "synthetic", "requests": n, "seed": 7},
        "metrics": metrics,
    }
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    return run


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    req = _base_requests()
    n = len(req["rid"])
    rng = np.random.default_rng(11)
    base = _write_run(root, "baseline", req, affinity=(0, 0), seed=1)

    fast = dict(req)
    fast["ttft_s"] = req["ttft_s"] * rng.lognormal(np.log(0.75), 0.2, n)
    fast["queueing_s"] = np.minimum(req["queueing_s"], fast["ttft_s"] * 0.5)
    status = np.full(n, "finished", dtype=object)
    status[rng.choice(n, 9, replace=False)] = "rejected"
    aff = _write_run(
        root,
        "affinity",
        fast,
        status=status,
        config={"schedule_policy": "lpm", "chunked_prefill_size": 8192, "affinity": "warm-first"},
        order=rng.permutation(n),  # rows in another order: the join is on rid
        seed=2,
    )

    slow = dict(req)
    slow["ttft_s"] = req["ttft_s"] * 1.3
    status = np.full(n, "finished", dtype=object)
    status[-30:] = "unfinished"
    part = _write_run(
        root,
        "small-chunks <b>&",
        slow,
        status=status,
        config={"schedule_policy": "lpm", "chunked_prefill_size": 2048},
        partial=True,
        affinity=(5, 0),
        seed=3,
    )
    return [base, aff, part]


@pytest.fixture(scope="module")
def runs(run_dirs: list[Path]) -> list[RunData]:
    return [load_run(p) for p in run_dirs]


def _empty_run(tmp_path: Path) -> RunData:
    run = tmp_path / "empty"
    run.mkdir()
    (run / "requests.csv").write_text(",".join(REQUEST_COLUMNS) + "\n")
    (run / "batches.csv").write_text(",".join(BATCH_COLUMNS) + "\n")
    (run / "summary.json").write_text(json.dumps({"name": "empty", "partial": True}))
    return load_run(run)


def _run_from_ttft(name: str, rids: list[str], ttft: np.ndarray) -> RunData:
    n = len(rids)
    return RunData(
        name=name,
        summary={"name": name},
        requests={
            "rid": np.array(rids, dtype=object),
            "arrival_s": np.arange(n, dtype=float),
            "ttft_s": np.asarray(ttft, dtype=float),
            "status": np.full(n, "finished", dtype=object),
        },
        batches={},
    )


# --------------------------------------------------------------------------- load_run


def test_load_run_columns(runs: list[RunData]) -> None:
    base, aff, part = runs
    assert base.name == "baseline"
    assert base.num_requests == N_REQ and base.num_batches == 120
    assert set(REQUEST_COLUMNS) <= set(base.requests)
    assert base.requests["ttft_s"].dtype == float
    assert base.requests["rid"][0] == "r0000"
    assert base.batches["has_chunked"][:2].tolist() == [1.0, 0.0]
    assert base.batches["lead_class"][0] == "warm"
    assert base.metric("wall_time_s") is None
    assert base.metric("ttft_p99_s") == pytest.approx(base.summary["metrics"]["ttft_p99_s"])
    rejected = aff.requests["status"] == "rejected"
    assert rejected.sum() == 9
    assert np.isnan(aff.requests["ttft_s"][rejected]).all()
    assert aff.config["affinity"] == "warm-first"
    assert part.partial and not base.partial
    assert len(part.finished_ttft()) == N_REQ - 30


def test_load_run_empty_csvs(tmp_path: Path) -> None:
    run = _empty_run(tmp_path)
    assert run.num_requests == 0 and run.num_batches == 0
    assert len(run.finished_ttft()) == 0
    assert run.metrics == {}


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: (d / "summary.json").unlink(), "missing summary.json"),
        (lambda d: (d / "requests.csv").unlink(), "missing requests.csv"),
        (lambda d: (d / "batches.csv").unlink(), "missing batches.csv"),
        (lambda d: (d / "summary.json").write_text("{not json"), "corrupt summary.json"),
        (lambda d: (d / "summary.json").write_text("[1, 2]"), "corrupt summary.json"),
        (
            lambda d: (d / "summary.json").write_text('{"metrics": [1]}'),
            "corrupt summary.json",
        ),
        (lambda d: (d / "requests.csv").write_text(""), "corrupt requests.csv"),
        (lambda d: (d / "requests.csv").write_text("rid,arrival_s\nr1,0.1\n"), "ttft_s"),
        (
            lambda d: (d / "requests.csv").write_text("rid,arrival_s,ttft_s,status\nr1,0.1,x,ok\n"),
            "corrupt requests.csv",
        ),
        (
            lambda d: (d / "batches.csv").write_text("start_s,size\n0.1,1,7\n"),
            "corrupt batches.csv",
        ),
        (lambda d: (d / "batches.csv").write_bytes(b"start_s,size\n\xff\xfe,1\n"), "batches.csv"),
    ],
)
def test_load_run_errors(tmp_path: Path, run_dirs: list[Path], mutate: Any, needle: str) -> None:
    run = _copy_run(run_dirs[0], tmp_path / "run")
    mutate(run)
    with pytest.raises(ValueError) as exc:
        load_run(run)
    msg = str(exc.value)
    assert needle in msg
    assert "\n" not in msg


def test_load_run_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not found"):
        load_run(tmp_path / "nope")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValueError, match="not a run directory"):
        load_run(f)


# --------------------------------------------------------------------------- compare


def test_paired_ratio_constructed() -> None:
    rng = np.random.default_rng(3)
    rids = [f"q{i}" for i in range(200)]
    base_t = rng.uniform(0.05, 2.0, 200)
    perm = rng.permutation(200)  # other lists the same requests in another order
    base = _run_from_ttft("base", rids, base_t)
    other = _run_from_ttft("half", [rids[i] for i in perm], base_t[perm] * 0.5)
    ratios = paired_ttft(base, other)
    assert len(ratios) == 200
    np.testing.assert_allclose(ratios, 0.5)
    s = ratio_summary(ratios)
    assert s["p10"] == pytest.approx(0.5) and s["p90"] == pytest.approx(0.5)
    assert s["frac_improved"] == 1.0 and s["frac_worse"] == 0.0


def test_paired_only_requests_finished_in_both(runs: list[RunData]) -> None:
    base, aff, part = runs
    rids, b, o = paired_ttft_values(base, aff)
    assert len(rids) == N_REQ - 9
    assert len(set(rids.tolist())) == len(rids)
    idx = {r: i for i, r in enumerate(aff.requests["rid"])}
    for k in (0, 57, len(rids) - 1):
        assert o[k] == aff.requests["ttft_s"][idx[rids[k]]]
        assert b[k] == base.requests["ttft_s"][int(rids[k][1:])]
    assert len(paired_ttft(base, part)) == N_REQ - 30
    np.testing.assert_allclose(paired_ttft(base, part), 1.3)


def test_ratio_summary_values() -> None:
    s = ratio_summary([0.5, 0.995, 1.0, 1.005, 2.0, np.nan])
    assert s["n"] == 5
    assert s["p50"] == pytest.approx(1.0)
    assert s["frac_improved"] == pytest.approx(0.2)
    assert s["frac_worse"] == pytest.approx(0.2)
    empty = ratio_summary([])
    assert empty["n"] == 0 and empty["p50"] is None


def test_bootstrap_ci_contains_true_diff() -> None:
    rng = np.random.default_rng(5)
    base = rng.exponential(1.0, 4000)
    other = 2.0 * base  # population p99 difference: ln(100) * (2 - 1)
    true_diff = float(np.log(100.0))
    diff, lo, hi = bootstrap_p99_diff(base, other, n_boot=1000, seed=1)
    assert lo < diff < hi
    assert lo <= true_diff <= hi
    # A constant shift moves every resampled p99 by exactly that shift.
    d2, lo2, hi2 = bootstrap_p99_diff(base, base + 0.25, n_boot=200, seed=0)
    assert d2 == pytest.approx(0.25) and lo2 == pytest.approx(0.25) and hi2 == pytest.approx(0.25)


def test_bootstrap_deterministic_and_paired() -> None:
    rng = np.random.default_rng(9)
    base = rng.lognormal(-2.0, 1.0, 1500)
    other = base * rng.lognormal(np.log(0.8), 0.1, 1500)
    a = bootstrap_p99_diff(base, other, seed=42)
    b = bootstrap_p99_diff(base, other, seed=42)
    c = bootstrap_p99_diff(base, other, seed=43)
    assert a == b
    assert a[0] == c[0] and (a[1], a[2]) != (c[1], c[2])
    assert a[2] < 0  # clearly faster: the whole interval is below zero
    wider = bootstrap_p99_diff(base, other, seed=42, ci=0.99)
    assert wider[1] <= a[1] and wider[2] >= a[2]
    assert all(np.isnan(bootstrap_p99_diff([], [])))
    with pytest.raises(ValueError):
        bootstrap_p99_diff([1.0, 2.0], [1.0])


def test_compare_runs_structure(runs: list[RunData]) -> None:
    cmp = compare_runs(runs, n_boot=300)
    json.dumps(cmp, allow_nan=False)  # strictly JSON-serialisable
    assert cmp["baseline"] == "baseline"
    assert [v["name"] for v in cmp["variants"]] == [r.name for r in runs]
    base, aff, part = cmp["variants"]
    assert base["is_baseline"] and base["paired"] is None
    assert base["delta"]["ttft_p99_s"] == 0.0 and base["ratio"]["ttft_p99_s"] == 1.0
    assert aff["metrics"]["ttft_p99_s"] == pytest.approx(runs[1].metric("ttft_p99_s"))
    assert aff["delta"]["ttft_p99_s"] == pytest.approx(
        runs[1].metric("ttft_p99_s") - runs[0].metric("ttft_p99_s")
    )
    assert aff["ratio"]["rejected"] is None  # zero baseline: no ratio
    p = aff["paired"]
    assert p["n_paired"] == N_REQ - 9
    assert p["ratio"]["p50"] < 1.0 and p["ratio"]["frac_improved"] > 0.5
    assert p["p99_diff_lo_s"] <= p["p99_diff_s"] <= p["p99_diff_hi_s"]
    assert part["partial"] is True
    assert part["paired"]["ratio"]["p50"] == pytest.approx(1.3)
    assert compare_runs(runs, n_boot=300) == cmp  # deterministic


def test_comparison_table_renders(runs: list[RunData]) -> None:
    table = comparison_table(compare_runs(runs, n_boot=200))
    assert isinstance(table, Table)
    console = Console(record=True, width=200)
    console.print(table)
    text = console.export_text()
    for needle in ("TTFT p99", "baseline", "affinity", "×", "paired requests", "CI"):
        assert needle in text


# --------------------------------------------------------------------------- plots


PLOT_FUNCS = [
    plots.plot_ttft_cdf,
    plot_ttft_time.plot_ttft_over_time,
    plots.plot_queue_length,
    plots.plot_batches,
    plots.plot_cache_split,
    plots.plot_affinity,
]


@pytest.mark.parametrize("func", PLOT_FUNCS, ids=lambda f: f.__name__)
def test_plot_writes_png(func: Any, runs: list[RunData], tmp_path: Path) -> None:
    path = func(runs, tmp_path / "sub" / "plot.png")
    assert path == tmp_path / "sub" / "plot.png"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000


@pytest.mark.parametrize("func", PLOT_FUNCS, ids=lambda f: f.__name__)
def test_plot_empty_data(func: Any, tmp_path: Path) -> None:
    empty = _empty_run(tmp_path)
    for data in ([empty], []):
        out = func(data, tmp_path / "e.png")
        if func is plots.plot_affinity:
            assert out is None  # all counts zero: skipped
        else:
            assert out.read_bytes()[:8] == PNG_MAGIC


def test_plot_affinity_skipped_when_all_zero(runs: list[RunData], tmp_path: Path) -> None:
    assert plots.plot_affinity(runs[:1], tmp_path / "a.png") is None
    assert not (tmp_path / "a.png").exists()


def test_queue_length_series(runs: list[RunData]) -> None:
    t, q = plots.queue_length_series(runs[0])
    assert np.all(np.diff(t) > 0)
    assert q.min() >= 0 and q[-1] == 0  # every request of the baseline got scheduled
    _, q_part = plots.queue_length_series(runs[2])
    assert q_part[-1] == 15  # the unfinished, never-scheduled requests still wait


def test_variant_colors_consistent(runs: list[RunData]) -> None:
    assert plots.variant_colors(runs)[:2] == plots.variant_colors(runs[:2])
    assert len(set(plots.variant_colors(runs))) == len(runs)


# --------------------------------------------------------------------------- html


def _write_html(runs: list[RunData], out: Path) -> Path:
    return write_report(
        runs, out, title="Scheduler <variants>", comparison=compare_runs(runs, n_boot=300)
    )


def test_html_self_contained(runs: list[RunData], tmp_path: Path) -> None:
    path = _write_html(runs, tmp_path / "out" / "report.html")
    page = path.read_text(encoding="utf-8")
    imgs = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == page.count("<img") == len(plots.PLOTS)
    for b64 in imgs:
        assert base64.b64decode(b64)[:8] == PNG_MAGIC
    assert "http://" not in page and "https://" not in page
    assert not re.search(r'(src|href)="(?!data:)', page)
    for table_id in (
        "headline",
        "deployment",
        "runs",
        "config-diff",
        "summary",
        "comparison",
        "paired",
    ):
        assert f'<table id="{table_id}">' in page
    # The page leads with the verdict table, then the plots; the long tables come after,
    # folded (one <details> each, plus one full configuration per run).
    assert page.index('id="headline"') < page.index("<img") < page.index('id="comparison"')
    assert page.index("<img") < page.index('id="summary"')
    assert page.count("<details>") == len(runs) + 2
    assert "chunked_prefill_size" in page and "warm-first" in page
    # Escaping: names and titles never become markup.
    assert "small-chunks &lt;b&gt;&amp;" in page and "<b>&" not in page
    assert "Scheduler &lt;variants&gt;" in page
    for plot in plots.PLOTS:
        assert plot.title in page
    assert "data-images" not in page.split("<script>")[0]  # set by the script at load


def test_html_single_run_without_comparison(runs: list[RunData], tmp_path: Path) -> None:
    page = write_report(runs[:1], tmp_path / "one.html").read_text()
    assert '<table id="summary">' in page and 'id="comparison"' not in page
    assert "plot omitted" in page  # the baseline has no affinity decisions
    assert page.count("<img") == len(plots.PLOTS) - 1


def test_html_empty_run(tmp_path: Path) -> None:
    page = write_report([_empty_run(tmp_path)], tmp_path / "empty.html").read_text()
    assert page.count("<img") == len(plots.PLOTS) - 1


def test_html_in_headless_chromium(runs: list[RunData], tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip(
            "chromium is not installed (apt-get install -y chromium); browser check skipped"
        )
    report = _write_html(runs, tmp_path / "report.html")
    n_images = report.read_text().count("<img")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--virtual-time-budget=5000",
    ]
    url = report.resolve().as_uri()
    dom = subprocess.run(
        [chromium, *flags, f"--user-data-dir={tmp_path / 'profile-dom'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body is not None, dom.stdout[:500]
    loaded = re.search(r'data-images-loaded="(\d+)"', body.group(0))
    assert loaded is not None, f"inline script did not run: {body.group(0)}"
    assert int(loaded.group(1)) == n_images
    for table_id in ("runs", "config-diff", "summary", "comparison", "paired"):
        assert f'<table id="{table_id}">' in dom.stdout

    shot = tmp_path / "report.png"
    res = subprocess.run(
        [
            chromium,
            *flags,
            f"--user-data-dir={tmp_path / 'profile-shot'}",
            f"--screenshot={shot}",
            "--window-size=1280,4000",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == PNG_MAGIC
    assert shot.stat().st_size > 50_000
