"""Build hook: compiles the hot modules with mypyc (the same Python source, as C).

The scheduler core and the simulator's event loop are plain, fully typed Python; mypyc
(part of mypy, https://mypyc.readthedocs.io) compiles them to C extension modules that
run the same code about twice as fast (benchmarks/RESULTS.md). The ``.py`` files ship
beside the extensions, and the pure-Python package is the fallback:

- ``PREFILLKIT_PURE_PYTHON=1 pip install .`` skips compilation;
- an editable install (``pip install -e .``) is never compiled, so edits take effect;
- without mypyc or a C compiler the build warns and installs the pure-Python package.

``python -c "import prefillkit; print(prefillkit.build())"`` (or ``prefillkit --version``) says
which one is installed.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

#: The compiled modules: the core, the event loop and what it calls per request or per
#: forward. Everything else stays interpreted.
COMPILED = [
    "src/prefillkit/request.py",
    "src/prefillkit/cache/events.py",
    "src/prefillkit/cache/host.py",
    "src/prefillkit/cache/node.py",
    "src/prefillkit/cache/pages.py",
    "src/prefillkit/cache/pool.py",
    "src/prefillkit/cache/prefix.py",
    "src/prefillkit/cache/lookup.py",
    "src/prefillkit/cache/tiers.py",
    "src/prefillkit/sched/adder.py",
    "src/prefillkit/sched/affinity.py",
    "src/prefillkit/sched/batch.py",
    "src/prefillkit/sched/buffer.py",
    "src/prefillkit/sched/config.py",
    "src/prefillkit/sched/cp_split.py",
    "src/prefillkit/sched/decode.py",
    "src/prefillkit/sched/interface.py",
    "src/prefillkit/sched/launch.py",
    "src/prefillkit/sched/lpm_order.py",
    "src/prefillkit/sched/matching.py",
    "src/prefillkit/sched/policy.py",
    "src/prefillkit/sched/preempt.py",
    "src/prefillkit/sched/prefill_pass.py",
    "src/prefillkit/sched/scheduler.py",
    "src/prefillkit/sched/seeding.py",
    "src/prefillkit/sched/state.py",
    "src/prefillkit/sched/step.py",
    "src/prefillkit/sched/verdicts.py",
    "src/prefillkit/sched/waiting.py",
    "src/prefillkit/sim/engine.py",
    "src/prefillkit/sim/routers/masks.py",
    "src/prefillkit/sim/routers/prefix_index.py",
    "src/prefillkit/records/collector.py",
    "src/prefillkit/cost/roofline.py",
    "src/prefillkit/cost/rank_work.py",
    "src/prefillkit/cost/cached.py",
    "src/prefillkit/records/metrics.py",
    "src/prefillkit/records/output.py",
    "src/prefillkit/records/row_writer.py",
    "src/prefillkit/workloads/mooncake.py",
    "src/prefillkit/workloads/jsonl.py",
    "src/prefillkit/workloads/json_row.py",
    "src/prefillkit/workloads/trace_reader.py",
    "src/prefillkit/workloads/record.py",
]


def _warn(msg: str) -> None:
    print(f"prefillkit build: {msg}; installing the pure-Python package", file=sys.stderr)


class _OptionalBuildExt(build_ext):
    """build_ext that compiles an extension's C files in parallel (one compiler process per
    usable core, at most 8, largest file first) and falls back to the pure-Python package
    when compiling fails.
    """

    def build_extension(self, ext: Any) -> None:
        compile_serial = self.compiler.compile
        # NOTE: the cores this process may run on, at most 8 (the largest module's
        # compiler process peaks at ~160 MB).
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        jobs = min(len(ext.sources), cores or 1, 8)

        def compile_parallel(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            # NOTE: one call per source, each its own compiler process (the threads only
            # wait); the object list keeps the sources' order, as the linker gets it.
            by_size = sorted(sources, key=lambda s: -Path(s).stat().st_size)
            with ThreadPoolExecutor(jobs) as pool:
                done = {s: pool.submit(compile_serial, [s], *args, **kwargs) for s in by_size}
                return [obj for s in sources for obj in done[s].result()]

        if jobs == 1:
            super().build_extension(ext)
            return
        self.compiler.compile = compile_parallel  # type: ignore[method-assign]
        try:
            super().build_extension(ext)
        finally:
            del self.compiler.compile  # the class's (serial) method again

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # a missing compiler or headers: CCompilerError, OSError, ...
            _warn(f"compiling the mypyc extensions failed ({e})")
            for out in self.get_outputs():
                Path(out).unlink(missing_ok=True)
            self.extensions = []


def _ext_modules() -> list:
    if os.environ.get("PREFILLKIT_PURE_PYTHON") == "1":
        return []
    if "editable_wheel" in sys.argv or "develop" in sys.argv:
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not installed")
        return []
    # NOTE: numpy appears only in annotations of the compiled modules; a build
    # environment without it types those as Any (--ignore-missing-imports).
    # NOTE: one C file per module (multi_file), so the build compiles them in parallel
    # (a single 17 MB file took ~2 min of one core; measured no difference at run time).
    return mypycify(
        ["--ignore-missing-imports", *COMPILED], opt_level="3", group_name="prefillkit",
        multi_file=True,
    )  # fmt: skip


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": _OptionalBuildExt})
