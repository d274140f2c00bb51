"""Helper processes die with their parent (issue 33 item 2).

The workload helper (app/prefetch.py) of a replay killed with SIGKILL must not stay
blocked writing to a pipe nobody reads, holding the run's stdout and stderr: the
pipeline ``prefillkit replay ... | cat`` ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the workload helper is forked on Linux only"
)

ROOT = Path(__file__).resolve().parents[1]
# A generated run long enough to be killed mid-way (its helper generates far ahead).
RUN = [sys.executable, "-m", "prefillkit.cli", "replay", "-q", "--generator", "agentic",
       "--agentic-sessions", "20000"]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PREFILLKIT_HELPERS"] = "process"  # the helpers even on one core
    return env


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _wait_for(predicate: object, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # a zombie has exited (its reaper is not ours)


def _blocked_in_a_write(pid: int) -> bool:
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def _helper_of(parent: int) -> int:
    assert _wait_for(lambda: _children(parent), 60), "the workload helper never started"
    return _children(parent)[0]


def test_killed_parent_takes_its_blocked_helper_along() -> None:
    parent = subprocess.Popen(
        RUN, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        helper = _helper_of(parent.pid)
        # the helper runs ahead until the pipe is full (when wchan is readable: not
        # every kernel shows it, and then the kill below comes a moment later)
        _wait_for(lambda: _blocked_in_a_write(helper), 10)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_for(lambda: _gone(helper), 10), f"helper {helper} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_pipeline_ends_when_the_run_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    run = " ".join(RUN)
    shell = f"( {run} & echo $! > {pidfile}; wait ) | cat"
    pipeline = subprocess.Popen(
        ["bash", "-c", shell], cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert _wait_for(lambda: pidfile.is_file() and pidfile.read_text().strip(), 30)
        parent = int(pidfile.read_text())
        _helper_of(parent)
        os.kill(parent, signal.SIGKILL)
        pipeline.communicate(timeout=15)  # raises TimeoutExpired if a helper holds the pipe
        assert pipeline.returncode is not None
    finally:
        if pipeline.poll() is None:
            pipeline.kill()
            pipeline.wait()
