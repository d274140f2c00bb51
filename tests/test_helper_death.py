"""Helper processes die with their parent (issue 33 item 2).

The workload helper (app/prefetch.py) of a replay killed with SIGKILL must not stay
blocked writing to a pipe nobody reads, holding the run's stdout and stderr: the
pipeline ``prefillkit replay ... | cat`` ends. The row writer (records/row_writer.py) of a
killed ``--out`` run ends too, removing its files. Every wait polls a condition (the
helper exists, is blocked, has written) up to a timeout, never a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the workload helper is forked on Linux only"
    ),
    pytest.mark.interpreted,  # the subject is the application layer
]

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


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def _is_row_writer(pid: int) -> bool:
    return "-I" in _cmdline(pid)  # python -I -S -c ... (records/row_writer.py _CHILD)


def _helper_of(parent: int) -> int:
    """The workload helper: the child forked from ``parent`` (not the row writer)."""

    def helper() -> list[int]:
        return [c for c in _children(parent) if not _is_row_writer(c)]

    assert _wait_for(helper, 60), "the workload helper never started"
    return helper()[0]


def _status_mask(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no {field} in /proc/{pid}/status")


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


def test_the_workload_helper_holds_no_stdout_and_ignores_stop_signals() -> None:
    """Its stdout is /dev/null (a pipeline the run writes into never waits for it), and
    a signal to the whole process group (Ctrl-C, ``timeout``'s SIGTERM) is the run's:
    killed by it, the helper would cut a message in two (seen: ``got end of file during
    message`` instead of a partial set, 1 run in 6 under ``timeout -s TERM``)."""
    parent = subprocess.Popen(
        RUN, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        helper = _helper_of(parent.pid)
        ignored = 1 << (signal.SIGINT - 1) | 1 << (signal.SIGTERM - 1)
        assert _wait_for(lambda: _status_mask(helper, "SigIgn") & ignored == ignored, 10)
        assert os.readlink(f"/proc/{helper}/fd/1") == os.devnull
        assert os.readlink(f"/proc/{parent.pid}/fd/1").startswith("pipe:")
    finally:
        parent.kill()
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()


def test_killed_parent_takes_its_row_writer_along_and_its_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    parent = subprocess.Popen(
        [*RUN, "--out", str(out)],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait_for(lambda: any(_is_row_writer(c) for c in _children(parent.pid)), 60)
        writer = next(c for c in _children(parent.pid) if _is_row_writer(c))
        assert _wait_for(lambda: _status_mask(writer, "SigCgt") & (1 << (signal.SIGHUP - 1)), 10), (
            "the row writer never watched its parent"
        )

        def rows_written() -> bool:
            return any(p.stat().st_size > 0 for p in out.glob(".requests.csv.*.part"))

        assert _wait_for(rows_written, 60), "no rows written"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_for(lambda: _gone(writer), 10), f"row writer {writer} outlived its parent"
        assert not list(out.glob(".*.csv.*.part")), "the row writer left its files"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
