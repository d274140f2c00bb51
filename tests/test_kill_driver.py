"""Kill -9 and SIGINT at the moment ``prefillkit replay --out`` starts writing (issue 16
item 6), from outside the process.

A driver starts the CLI as a child process over a folder holding a previous complete
run, polls the folder, and signals the child the instant its writing shows, at one of
two moments: ``temp`` (the first ``.NAME.<pid>.<hex>.tmp`` temporary appears) or
``swap`` (the previous ``summary.json`` leaves: the files are going into place).
Then:

- **SIGKILL**: the folder holds either a complete set that reads back (``load_run``)
  or no ``summary.json`` at all (readers refuse it by name), never a mix; the next run
  removes the dead writer's temporaries and leaves a complete set;
- **SIGINT**: the child exits 130 and the folder reads back complete, with no
  temporary left: the previous set when the signal came while the temporaries were
  being written, the new set once the swap had begun (the signal waits for the set).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prefillkit.records.output import SUMMARY_FILE
from prefillkit.report.rundir import load_run

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

SRC = Path(__file__).resolve().parents[1] / "src"
OLD, NEW = 40, 500  # requests of the previous run and of the signalled one


def _replay(out: Path, n: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    cmd = [sys.executable, "-m", "prefillkit.cli", "replay", "--max-requests", str(n)]
    cmd += ["--quiet", "--json", "--out", str(out)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _writing(out: Path, moment: str) -> bool:
    names = os.listdir(out)
    if moment == "swap":
        return SUMMARY_FILE not in names
    return SUMMARY_FILE not in names or any(n.endswith(".tmp") for n in names)


def _signal_when_writing(out: Path, sig: int, moment: str) -> tuple[int, bool]:
    """Run replays of NEW requests over ``out`` (up to 4, while the moment is missed);
    send ``sig`` the moment writing shows. Returns (exit code, whether it was sent)."""
    for _ in range(4):
        code, sent = _try_signal(out, sig, moment)
        if sent:
            break
    _OUTCOMES.append(sent)
    return code, sent


#: Whether each signalling test caught the writing (a test that loses the race skips).
_OUTCOMES: list[bool] = []


def _try_signal(out: Path, sig: int, moment: str) -> tuple[int, bool]:
    proc = _replay(out, NEW)
    sent = False
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if _writing(out, moment):
            proc.send_signal(sig)
            sent = True
            break
    _, err = proc.communicate(timeout=300)
    assert b"Traceback" not in err, err.decode()
    return proc.returncode, sent


def _temporaries(out: Path) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.endswith(".tmp"))


@pytest.fixture
def previous_run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    proc = _replay(out, OLD)
    assert proc.wait(timeout=300) == 0
    assert load_run(out).num_requests == OLD
    return out


@pytest.mark.parametrize("moment", ["temp", "swap"])
def test_sigkill_while_writing_leaves_no_mix(previous_run: Path, moment: str) -> None:
    out = previous_run
    code, sent = _signal_when_writing(out, signal.SIGKILL, moment)
    if not sent:
        pytest.skip("the child finished writing before the driver saw it start")
    assert code == -signal.SIGKILL
    if (out / SUMMARY_FILE).exists():
        run = load_run(out)  # a complete set, old or new, never a mix
        assert run.num_requests in (OLD, NEW)
    else:
        with pytest.raises(ValueError, match=r"missing summary\.json"):
            load_run(out)
    # The next run removes the dead writer's temporaries and writes a complete set.
    proc = _replay(out, OLD)
    assert proc.wait(timeout=300) == 0
    assert _temporaries(out) == []
    assert load_run(out).num_requests == OLD


@pytest.mark.parametrize("moment", ["temp", "swap"])
def test_sigint_while_writing_leaves_a_whole_set(previous_run: Path, moment: str) -> None:
    out = previous_run
    code, sent = _signal_when_writing(out, signal.SIGINT, moment)
    if not sent:
        pytest.skip("the child finished writing before the driver saw it start")
    assert code == 130
    run = load_run(out)
    # NOTE: a signal sent at "temp" may land once the swap began: then the new set.
    assert run.num_requests in ((NEW,) if moment == "swap" else (OLD, NEW)), moment
    assert _temporaries(out) == []


def test_the_race_was_won_at_least_once() -> None:
    """A race lost now and then skips one test; lost by every test, this file would
    prove nothing while passing: then it fails. (Runs last: pytest keeps file order.)"""
    if not _OUTCOMES:
        pytest.skip("no signalling test ran (deselected)")
    assert any(_OUTCOMES), f"every signalling test missed the writing ({len(_OUTCOMES)} tries)"
