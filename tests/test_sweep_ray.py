"""Sweeps on a real local Ray cluster (``ray.init(num_cpus=2)``, one per module).

Matches the process pool file for file; a driver killed with SIGKILL mid-sweep loses no
finished point and its rerun recomputes none; a Ray worker killed mid-task is retried.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweep_support import TINY_GRID, task_log, write

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")

from prefillkit.app.sweep.grid import load_grid  # noqa: E402
from prefillkit.app.sweep.store import Store  # noqa: E402
from prefillkit.app.sweep.sweep import run_sweep  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")

# slower points (~0.5-1 s each) so that the driver can be killed between two of them
SLOW_GRID = """
[grid]
chunked_prefill_size = [4096, 8192, 16384]
schedule_policy = ["fcfs", "lpm"]

[[workload]]
name = "slow"
generator = "agentic"
num_sessions = 400
turns_per_session = [6, 10]
"""


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def test_ray_sweep_matches_process_pool_point_for_point(ray_cluster: str, tmp_path: Path) -> None:
    grid = load_grid(write(tmp_path / "g.toml", TINY_GRID))
    r1 = run_sweep(grid, str(tmp_path / "ray"), backend="ray")
    r2 = run_sweep(grid, str(tmp_path / "proc"), backend="process", jobs=2)
    assert r1.backend == "ray" and r2.backend == "process"
    assert r1.done == r2.done == 8
    for p in grid.points():
        a = (tmp_path / "ray" / "points" / f"{p.id}.parquet").read_bytes()
        b = (tmp_path / "proc" / "points" / f"{p.id}.parquet").read_bytes()
        assert a == b, p.labels


def test_driver_killed_then_rerun_recomputes_nothing(ray_cluster: str, tmp_path: Path) -> None:
    path = write(tmp_path / "g.toml", SLOW_GRID)
    out = tmp_path / "out"
    log = tmp_path / "tasks.log"
    env = {**os.environ, "PYTHONPATH": SRC}
    # The driver as `prefillkit sweep --address ... --jobs 1` runs it, with the task log.
    driver = (
        "import sys\n"
        "from prefillkit.app.sweep.grid import load_grid\n"
        "from prefillkit.app.sweep.sweep import run_sweep\n"
        "path, out, address, log = sys.argv[1:]\n"
        "run_sweep(load_grid(path), out, backend='ray', address=address, jobs=1,\n"
        "          hooks={'task_log': log})\n"
    )
    cmd = [sys.executable, "-c", driver, str(path), str(out), ray_cluster, str(log)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    points = out / "points"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if points.is_dir() and len(list(points.glob("*.parquet"))) >= 2:
            break
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before it was killed: {proc.stderr.read()!r}")  # type: ignore[union-attr]
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("no point stored within 60 s")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stored = {p.stem for p in points.glob("*.parquet")}
    total = len(load_grid(path).points())
    assert 2 <= len(stored) < total
    started_before = task_log(log)
    run = run_sweep(load_grid(path), str(out), backend="ray", hooks={"task_log": str(log)})
    assert run.cached == len(stored) and run.done == total - len(stored)
    rerun = task_log(log)[len(started_before) :]
    assert not stored & set(rerun), "a finished point was recomputed"
    # none lost: every point stored once and readable
    ids = [p.id for p in load_grid(path).points()]
    rows = Store(out).read_rows(ids)
    assert sorted(rows) == sorted(ids) and all(r["status"] == "ok" for r in rows.values())


def test_ray_worker_killed_mid_task_is_retried(ray_cluster: str, tmp_path: Path) -> None:
    log = tmp_path / "tasks.log"
    crash = tmp_path / "crash"
    crash.mkdir()
    hooks = {"task_log": str(log), "crash_once": str(crash)}
    text = TINY_GRID.replace("seeds = [0, 1]", "seeds = [0]").replace(
        'schedule_policy = ["fcfs", "lpm"]', 'schedule_policy = ["fcfs"]'
    )
    grid = load_grid(write(tmp_path / "g.toml", text))
    run = run_sweep(grid, str(tmp_path / "out"), backend="ray", hooks=hooks)
    assert (run.done, run.failed) == (2, 0)
    ids = [p.id for p in grid.points()]
    assert sorted(task_log(log)) == sorted(ids * 2)  # each died once, then ran again
    rows = Store(tmp_path / "out").read_rows(ids)
    assert all(r["attempts"] == 2 and r["status"] == "ok" for r in rows.values())


def test_capacity_on_ray(ray_cluster: str, tmp_path: Path) -> None:
    from prefillkit.app.sweep.capacity import run_capacity
    from prefillkit.app.sweep.rate_search import Slo
    from sweep_support import even_trace

    even_trace(tmp_path / "even.jsonl", 40)
    grid = load_grid(
        write(
            tmp_path / "g.toml",
            '[grid]\nschedule_policy = ["fcfs", "lpm"]\n\n'
            '[[workload]]\nname = "even"\ntrace = "even.jsonl"\nformat = "jsonl"\n',
        )
    )
    ray_result = run_capacity(
        grid,
        str(tmp_path / "ray"),
        Slo(ttft_s=0.5),
        rate_min=1.0,
        rate_max=100.0,
        tolerance=0.1,
        backend="ray",
    )
    proc_result = run_capacity(
        grid,
        str(tmp_path / "proc"),
        Slo(ttft_s=0.5),
        rate_min=1.0,
        rate_max=100.0,
        tolerance=0.1,
        backend="process",
    )
    assert ray_result["configs"] == proc_result["configs"]
    assert all(c["status"] == "found" for c in ray_result["configs"])
