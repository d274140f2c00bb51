"""The compiled build (setup.py: mypyc) runs the same program as the source tree.

``pip install .`` compiles the core and the event loop; the tests around this one import
the source tree (``pythonpath = src``). Here the same replays run in both, each in its
own process, and every output file must be byte-identical: a compiled module differs
only where the C types do (an ``int`` passed as ``float`` becomes one, a class cannot be
patched), and a difference of that kind changes a row. The cases cover every policy,
both modes, HiCache, affinity, CP, priority and slot limits, then a seeded sample of
flag combinations (``_sampled_flags``) under ``--debug-check-invariants``.

Skipped (with the reason) unless exactly one of the two is compiled and both come from
the same source (an editable install of this tree, or a stale wheel, has nothing to add).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

# NOTE: the subject here is interpreted code; .ci/run's compiled-build run skips it.
pytestmark = pytest.mark.interpreted

SRC = Path(__file__).resolve().parents[1] / "src"
TRACES = SRC.parent.parent / "shared" / "traces"
MOONCAKE = TRACES / "mooncake_fast25" / "conversation_trace.jsonl"

_WHERE = (
    "import prefillkit, prefillkit.sched.scheduler as m; print(prefillkit.__file__, m.__file__)"
)


def _env(source: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if source:
        env["PYTHONPATH"] = str(SRC)
    return env


def _locate(source: bool, cwd: Path) -> tuple[Path, bool] | None:
    """(package folder, compiled?) of the build a process imports, or None."""
    out = subprocess.run(
        [sys.executable, "-c", _WHERE], env=_env(source), cwd=cwd, capture_output=True, text=True
    )
    if out.returncode:
        return None
    pkg, mod = out.stdout.split()
    return Path(pkg).parent, not mod.endswith(".py")


def _sources(pkg: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        digest.update(f.relative_to(pkg).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> None:
    cwd = tmp_path_factory.mktemp("where")
    src, installed = _locate(True, cwd), _locate(False, cwd)
    if installed is None:
        pytest.skip("no installed prefillkit to compare with the source tree")
    assert src is not None
    if src[0] == installed[0] or src[1] == installed[1]:
        pytest.skip("one build only: `pip install .` (not -e) installs the compiled one")
    if _sources(src[0]) != _sources(installed[0]):
        pytest.skip("the installed prefillkit is not this tree: `pip install .` again")


#: (name, replay arguments): every output of each must be identical in both builds.
SLICE = ["--trace", "mooncake-slice"]
README_FLAGS = (
    "--spread-buckets --model-path zai-org/GLM-5-FP8 --tp 8 --trust-remote-code "
    "--page-size 64 --cp-size 8 --enable-cp-shared-kv --chunked-prefill-size 16384 "
    "--max-prefill-tokens 16384 --enable-hierarchical-cache --hicache-ratio 2 "
    "--hicache-write-policy write_through --schedule-policy fcfs "
    "--mem-fraction-static 0.88 --disaggregation-mode prefill"
).split()
#: Short agentic sessions (2,048-token system prompts): small pools still fit them.
AGENTIC = (
    "--generator agentic --agentic-sessions 30 --agentic-system-prompt-len 2048 "
    "--agentic-first-user-len 64,512 --agentic-turn-append-len 64,256 "
    "--agentic-output-len 16,128 --max-requests 200"
).split()
CASES: list[tuple[str, list[str]]] = [
    ("readme-slice", [*SLICE, *README_FLAGS]),
    ("slice-lpm-affinity", [*SLICE, "--schedule-policy", "lpm", "--enable-affinity", "true"]),
    (
        "slice-colocated-dfs",
        [*SLICE, "--schedule-policy", "dfs-weight", "--max-total-tokens", "120000",
         "--max-running-requests", "8"],
    ),
    ("default", ["--max-requests", "400"]),
    ("bad-pool", ["--max-total-tokens", "-1"]),
    ("bad-wait", ["--schedule-max-wait-s", "-2", "--schedule-policy", "lpm"]),
    ("seed-generator", ["--generator", "seed", "--max-requests", "300"]),
    (
        "agentic-random-writeback",
        [*AGENTIC, "--schedule-policy", "random", "--enable-hierarchical-cache", "true",
         "--hicache-write-policy", "write_back", "--max-total-tokens", "20000",
         "--debug-check-invariants", "true"],
    ),
    (
        "agentic-lof-priority",
        [*AGENTIC, "--schedule-policy", "lof", "--enable-priority-scheduling", "true",
         "--enable-preempt-on-no-token", "true", "--max-total-tokens", "12000",
         "--debug-check-invariants", "true"],
    ),
]  # fmt: skip


def _sampled_flags(n: int, seed: int = 17) -> list[tuple[str, list[str]]]:
    """``n`` seeded combinations of the admission flags on the agentic generator."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        page = rng.choice([1, 16, 64])
        pool = rng.choice([8000, 30000, 400000])
        flags = [*AGENTIC[:-1], str(rng.choice([50, 120])), "--page-size", str(page)]
        flags += ["--agentic-session-rate", rng.choice(["2", "20"])]  # light or contended
        flags += ["--max-total-tokens", str(pool)]
        flags += ["--schedule-policy", rng.choice(["fcfs", "lpm", "dfs-weight", "lof", "random"])]
        flags += ["--chunked-prefill-size", str(rng.choice([512, 2048, 8192]))]
        if pool // page <= 5000:  # NOTE: the invariant check walks every page, every step
            flags += ["--debug-check-invariants", "true"]
        if rng.random() < 0.5:
            flags += ["--disaggregation-mode", "prefill"]
        if rng.random() < 0.4:
            flags += ["--max-running-requests", str(rng.choice([1, 3, 16]))]
        if rng.random() < 0.4:
            write = rng.choice(["write_through", "write_back", "write_through_selective"])
            flags += ["--enable-hierarchical-cache", "true", "--hicache-write-policy", write]
        if rng.random() < 0.4:
            age = rng.choice(["0.5", "5.0"])
            flags += ["--enable-affinity", "true", "--affinity-max-age-s", age]
        if rng.random() < 0.3:
            flags += ["--schedule-max-wait-s", rng.choice(["0.1", "2.0"])]
        if rng.random() < 0.3:
            flags += ["--tp-size", "8", "--cp-size", "8", "--enable-cp-shared-kv", "true"]
            flags += ["--enable-cp-shared-kv-prefill-bs-gt1", "true"]
        out.append((f"sampled-{i}", flags))
    return out


#: Runs every case in one process (cli.run in-process, one output folder each) and
#: prints, per case, the exit status, what it wrote to stderr and the digest of every
#: file it wrote.
_DRIVER = """
import contextlib, hashlib, io, json, sys, time
from pathlib import Path
import prefillkit
from prefillkit.cli import run
pkg = str(Path(prefillkit.__file__).parent).encode()
cases = json.loads(sys.stdin.read())
for name, args in cases:
    out = Path("out") / name
    t0 = time.process_time()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run(["replay", *args, "--out", str(out), "--quiet", "--json"])
    print(f"{name}: {time.process_time() - t0:.2f} CPU-s", file=sys.stderr)
    files = {"stderr": err.getvalue()}
    for f in sorted(out.glob("*")) if out.exists() else []:
        data = f.read_bytes()
        if f.name == "summary.json":
            doc = json.loads(data)
            doc.pop("timing", None)
            data = json.dumps(doc, sort_keys=True).encode().replace(pkg, b"<package>")
        files[f.name] = hashlib.sha256(data).hexdigest()
    print(json.dumps([name, code, files]))
"""


def _run_all(cases: list[tuple[str, list[str]]], source: bool, cwd: Path) -> list[object]:
    cwd.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        input=json.dumps(cases),
        env=_env(source),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stderr)  # per-case CPU seconds (pytest -s shows them)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]


def test_compiled_build_writes_the_same_bytes(builds: None, tmp_path: Path) -> None:
    cases = [*CASES, *_sampled_flags(24)]
    if MOONCAKE.exists():
        cases.append(("readme-mooncake", ["--trace", str(MOONCAKE), *README_FLAGS]))
    got = _run_all(cases, False, tmp_path / "installed")
    want = _run_all(cases, True, tmp_path / "source")
    assert len(want) == len(cases)
    for a, b in zip(got, want, strict=True):
        assert a == b, f"{a[0]}: the compiled and the source build differ"
    codes = {name: code for name, code, _ in want}
    assert codes.pop("bad-pool") == codes.pop("bad-wait") == 2
    assert all(code == 0 for code in codes.values()), codes
    assert all("requests.csv" in files for name, _, files in want if name in codes)


def test_compiled_says_which_build_runs() -> None:
    import prefillkit
    import prefillkit.sched.scheduler
    from conftest import is_compiled

    assert prefillkit.compiled() == is_compiled(prefillkit.sched.scheduler)
    proc = subprocess.run(
        [sys.executable, "-m", "prefillkit", "--version"], capture_output=True, text=True
    )
    assert proc.stdout == f"prefillkit {prefillkit.__version__} ({prefillkit.build()})\n"
