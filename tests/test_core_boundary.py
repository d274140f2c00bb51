"""The scheduler core is embeddable: it loads no simulator, CLI or heavy dependency."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "prefillkit"


def _core_modules() -> tuple[str, ...]:
    """Every module of the core (cache/, sched/, request.py) and the leaf modules it uses."""
    names = ["prefillkit.config", "prefillkit.models", "prefillkit.request", "prefillkit.text"]
    for package in ("cache", "sched"):
        for path in sorted((SRC / package).glob("*.py")):
            stem = path.stem
            names.append(f"prefillkit.{package}" + ("" if stem == "__init__" else f".{stem}"))
    return tuple(names)


CORE = _core_modules()
FORBIDDEN = (
    "numpy",
    "click",
    "rich",
    "matplotlib",
    "prefillkit.sim",
    "prefillkit.cli",
    "prefillkit.workloads",
    "prefillkit.report",
    "prefillkit.runner",
)


def test_core_list_covers_every_core_module() -> None:
    assert {
        "prefillkit.sched.scheduler",
        "prefillkit.sched.cp_split",
        "prefillkit.cache.pool",
    } <= set(CORE)


def test_core_imports_only_stdlib_and_xxhash() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}"
        + f" or any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r})]\n"
        + "print(','.join(sorted(bad)))\n"
    )
    # NOTE: the tree under test, not whatever prefillkit is installed.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == ""
