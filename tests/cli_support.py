"""Running ``prefillkit`` as a child process, for tests that need a real process (locks,
signals, device files): the build under test, whatever conftest.py chose (the source tree
or, with PREFILLKIT_TEST_INSTALLED=1, the installed build)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """``python -m prefillkit.cli ARGS`` from the repository root, output captured."""
    env = dict(os.environ)
    env.pop("PREFILLKIT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "prefillkit.cli", *map(str, args)],
        cwd=ROOT,
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
