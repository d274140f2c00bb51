"""Running ``prefillkit`` as a child process, for tests that need a real process (locks,
signals, device files): the build under test, whatever conftest.py chose (the source tree
or, with PREFILLKIT_TEST_INSTALLED=1, the installed build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str | os.PathLike[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m prefillkit.cli ARGS`` from ``cwd`` (the repository root), output captured."""
    env = dict(os.environ)
    env.pop("PREFILLKIT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "prefillkit.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``prefillkit: error:`` line of a run that exited 2 (asserted)."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prefillkit: error: "), proc.stderr
    return lines[0]


#: Runs ``prefillkit.cli.run`` on each argv read from stdin (a JSON list), in one
#: interpreter; prints ``[{"code", "stdout", "stderr"}, ...]`` (code -1: it raised).
_BATCH_DRIVER = """
import contextlib, io, json, sys, traceback
from prefillkit.cli import run

results = []
for argv in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run(argv)
        except BaseException:
            traceback.print_exc()
            code = -1
    results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
json.dump(results, sys.stdout)
"""


def cli_batch(argvs: list[list[str]], *, timeout: float) -> list[dict[str, Any]]:
    """Each argv through ``prefillkit`` in one child interpreter (many runs, one start-up):
    per argv its exit code, stdout and stderr."""
    env = dict(os.environ)
    env.pop("PREFILLKIT_DEBUG", None)
    env.setdefault("COLUMNS", "120")
    proc = subprocess.run(
        [sys.executable, "-c", _BATCH_DRIVER],
        input=json.dumps(argvs),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    return results
