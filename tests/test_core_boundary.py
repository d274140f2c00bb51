"""The scheduler core is embeddable: it loads no simulator, CLI or heavy dependency."""

from __future__ import annotations

import subprocess
import sys

CORE = (
    "prefillkit.config",
    "prefillkit.models",
    "prefillkit.request",
    "prefillkit.cache",
    "prefillkit.sched.adder",
    "prefillkit.sched.scheduler",
    "prefillkit.sched.policy",
    "prefillkit.sched.affinity",
    "prefillkit.sched.buffer",
    "prefillkit.sched.preempt",
)
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


def test_core_imports_only_stdlib_and_xxhash() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}"
        + f" or any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r})]\n"
        + "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
