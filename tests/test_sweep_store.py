"""The sweep store and the process-pool backend: resume, failures, schema, rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep_support import TINY_GRID, task_log, write

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from prefillkit.app.launch import build_config  # noqa: E402
from prefillkit.app.replay import (  # noqa: E402
    WorkloadSpec,
    load_requests,
    make_replay_options,
    run_replay,
)
from prefillkit.app.sweep.grid import load_grid  # noqa: E402
from prefillkit.app.sweep.store import METRIC_COLUMNS, Store  # noqa: E402
from prefillkit.app.sweep.sweep import run_sweep  # noqa: E402
from prefillkit.cli import run  # noqa: E402


def _sweep(grid: Path, out: Path, **kw: object) -> object:
    return run_sweep(load_grid(grid), str(out), backend="process", jobs=2, **kw)  # type: ignore[arg-type]


def test_process_sweep_stores_every_point_and_resumes(
    tmp_path: Path,
) -> None:
    log = tmp_path / "tasks.log"
    hooks = {"task_log": str(log)}
    grid = write(tmp_path / "g.toml", TINY_GRID)
    out = tmp_path / "out"
    first = _sweep(grid, out, hooks=hooks)
    assert (first.done, first.cached, first.failed) == (8, 0, 0)  # type: ignore[attr-defined]
    assert len(task_log(log)) == 8
    second = _sweep(grid, out, hooks=hooks)
    assert (second.done, second.cached) == (0, 8)  # type: ignore[attr-defined]
    assert len(task_log(log)) == 8  # nothing recomputed
    # a changed grid reuses the points it shares
    changed = write(tmp_path / "g2.toml", TINY_GRID.replace("[4096, 8192]", "[8192, 16384]"))
    third = _sweep(changed, out, hooks=hooks)
    assert (third.done, third.cached) == (4, 4)  # type: ignore[attr-defined]
    assert len(task_log(log)) == 12
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "prefillkit-sweep" and len(manifest["points"]) == 8
    assert len(list((out / "points").glob("*.parquet"))) == 12


def test_point_matches_an_in_process_replay(tmp_path: Path) -> None:
    grid = write(tmp_path / "g.toml", TINY_GRID)
    out = tmp_path / "out"
    _sweep(grid, out)
    point = load_grid(grid).points()[5]
    row = Store(out).read_rows([point.id])[point.id]
    cfg = build_config(
        None,
        [
            "--chunked-prefill-size",
            str(point.settings["chunked_prefill_size"]),
            "--schedule-policy",
            str(point.settings["schedule_policy"]),
            "--seed",
            str(point.seed),
        ],
        preset="demo",
    ).config
    spec = WorkloadSpec(
        generator="agentic",
        generator_args={"num_sessions": 4, "turns_per_session": (2, 4)},
        replay=make_replay_options(),
    )
    requests = load_requests(spec, page_size=cfg.resolved_page_size, seed=cfg.seed).requests
    result = run_replay(cfg.sim_settings(), requests, progress=False, handle_sigint=False)
    for key in (
        "requests",
        "ttft_p99_s",
        "input_throughput_tok_s",
        "num_batches",
        "cache_hit_rate",
    ):
        assert row[key] == result.summary[key], key
    assert row["cfg_chunked_prefill_size"] == point.settings["chunked_prefill_size"]
    assert row["seed"] == point.seed and row["status"] == "ok" and row["attempts"] == 1


def test_dataset_schema_is_one_table(tmp_path: Path) -> None:
    grid = write(tmp_path / "g.toml", TINY_GRID)
    out = tmp_path / "out"
    _sweep(grid, out)
    import pyarrow.dataset as pads

    ds = pads.dataset(str(out / "points"), format="parquet")
    table = ds.to_table()
    assert table.num_rows == 8
    names = set(table.schema.names)
    assert {"point_id", "status", "seed", "cfg_schedule_policy", "ttft_s"} <= names
    assert {name for name, _ in METRIC_COLUMNS} <= names
    results = pq.read_table(out / "results.parquet")
    assert results.column("point_id").to_pylist() == [p.id for p in load_grid(grid).points()]


def test_failed_point_recorded_retried_once_and_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "tasks.log"
    hooks = {"task_log": str(log)}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_s": 0, "output_len": 4, "input_len": 100}\n{"arrival_s": "x"}\n')
    grid = write(
        tmp_path / "g.toml",
        TINY_GRID.replace("seeds = [0, 1]", "seeds = [0]")
        + '\n[[workload]]\nname = "bad"\ntrace = "bad.jsonl"\n',
    )
    out = tmp_path / "out"
    rc = run(["sweep", str(grid), "--out", str(out), "--backend", "process", "-q"])
    assert rc == 1
    err = capsys.readouterr().err
    failed = [p for p in load_grid(grid).points() if p.workload["name"] == "bad"]
    assert len(failed) == 4
    rows = Store(out).read_rows([p.id for p in failed])
    for p in failed:
        row = rows[p.id]
        assert row["status"] == "failed" and row["attempts"] == 2  # retried once
        assert "bad.jsonl:2: " in row["error"]
        assert "\n" not in row["error"]
    assert "failed: " in err
    # a rerun retries the failed points (and only them), each once more
    rerun = _sweep(grid, out, hooks=hooks)
    assert (rerun.failed, rerun.cached) == (4, 4)  # type: ignore[attr-defined]
    assert sorted(task_log(log)) == sorted(p.id for p in failed for _ in range(2))


def test_worker_process_killed_mid_task_is_retried(
    tmp_path: Path,
) -> None:
    log = tmp_path / "tasks.log"
    crash = tmp_path / "crash"
    crash.mkdir()
    hooks = {"task_log": str(log), "crash_once": str(crash)}
    grid = write(tmp_path / "g.toml", TINY_GRID.replace("seeds = [0, 1]", "seeds = [0]"))
    out = tmp_path / "out"
    r = _sweep(grid, out, hooks=hooks)
    assert (r.done, r.failed) == (4, 0)  # type: ignore[attr-defined]
    ids = [p.id for p in load_grid(grid).points()]
    assert sorted(task_log(log)) == sorted(ids * 2)
    assert all(row["attempts"] == 2 for row in Store(out).read_rows(ids).values())


def test_show_rerenders_from_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = write(tmp_path / "g.toml", TINY_GRID)
    out = tmp_path / "out"
    assert run(["sweep", str(grid), "--out", str(out), "--backend", "process", "-q"]) == 0
    printed = capsys.readouterr().out
    (out / "report.html").unlink()
    assert run(["sweep", "--show", str(out), "-q"]) == 0
    assert capsys.readouterr().out == printed
    page = (out / "report.html").read_text()
    assert "Pareto front" in page and "data:image/png;base64," in page
    assert (out / "pareto.png").is_file()
    assert run(["sweep", "--show", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_store_refuses_a_foreign_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = write(tmp_path / "g.toml", TINY_GRID)
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("x")
    assert run(["sweep", str(grid), "--out", str(other), "--backend", "process"]) == 2
    assert "not empty" in capsys.readouterr().err


def test_ctrl_c_stops_stores_and_resumes(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    grid = write(
        tmp_path / "g.toml",
        "[grid]\nchunked_prefill_size = [4096, 8192, 16384]\n\n"
        '[[workload]]\ngenerator = "agentic"\nnum_sessions = 300\nturns_per_session = [6, 10]\n',
    )
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    cmd = [
        sys.executable,
        "-m",
        "prefillkit.cli",
        "sweep",
        str(grid),
        "--out",
        str(out),
        "--backend",
        "process",
        "--jobs",
        "1",
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not list((out / "points").glob("*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    stored = len(list((out / "points").glob("*.parquet")))
    if proc.returncode == 0:  # it finished before the signal arrived
        assert stored == 3
        return
    assert proc.returncode == 130, err
    assert f"interrupted: {stored} of 3 points are stored" in err
    assert "Traceback" not in err
    assert run(["sweep", str(grid), "--out", str(out), "--backend", "process", "-q"]) == 0
    assert len(list((out / "points").glob("*.parquet"))) == 3


ROUTER_GRID = """
[base]
flags = "--instances 2"

[grid]
router = ["cache-aware", "kv-cost", "round-robin"]

[[workload]]
name = "tiny"
generator = "agentic"
num_sessions = 6
turns_per_session = [2, 4]
"""


def test_a_router_axis_stores_the_fleet_metrics_in_one_table(tmp_path: Path) -> None:
    """Router variants as a sweep axis: the fleet's metrics are typed columns (a router
    with no approximate view stores a null wrong share, not a string)."""
    grid = write(tmp_path / "g.toml", ROUTER_GRID)
    out = tmp_path / "out"
    res = _sweep(grid, out)
    assert (res.done, res.failed) == (3, 0)  # type: ignore[attr-defined]
    table = pq.read_table(out / "results.parquet")
    assert table.column("instances").to_pylist() == [2, 2, 2]
    assert table.schema.field("router_view_wrong_share").type == pa.float64()
    shares = dict(
        zip(
            table.column("router").to_pylist(),
            table.column("router_view_wrong_share").to_pylist(),
            strict=True,
        )
    )
    assert shares["kv-cost"] is None and shares["round-robin"] is None
    assert shares["cache-aware"] is not None
