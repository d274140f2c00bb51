"""Replay at scale (issue 17 item 4): wall time, simulated requests/s and peak RSS.

Runs each case as its own ``python -m prefillkit.cli replay --out DIR -q --json``
process (so peak RSS is that run's alone, from ``os.wait4``) and prints one row per case:

- ``mooncake``: the README's Mooncake conversation replay (12,031 requests, GLM-5 on
  8xH200, CP 8 shared-KV, HiCache, pd-prefill);
- ``agentic-N``: the built-in agentic generator with short prompts (:data:`AGENTIC_FLAGS`)
  on the default replay's deployment, ``N / 6`` sessions at the default 2 sessions/s,
  capped at ``N`` requests: a fixed live load, so memory should not grow with ``N``.

CPU seconds (user + system of the process and of its helper processes, README "Helper
processes") are printed beside the wall time: on a shared machine the wall time includes
waiting for a core. The peak RSS is the largest of those processes' (``wait4`` reports
the maximum); the replay's own process is the largest. ``PREFILLKIT_HELPERS=inline``
measures the one-process replay.

Then the exponents between consecutive sizes: time ``log(t2/t1) / log(n2/n1)`` (1 =
linear) and memory ``log(rss2/rss1) / log(n2/n1)`` (0 = flat).

    python benchmarks/bench_replay.py                    # mooncake, 10K, 100K, 1M
    python benchmarks/bench_replay.py --sizes 10000 100000 --no-mooncake
    python benchmarks/bench_replay.py --src /path/to/other/src   # another tree (before)
    python benchmarks/bench_replay.py --no-mooncake --sizes 1000000 --instances 16 \
        --router cache-aware                               # a fleet (issue 36 item 5)
    pip install . && python benchmarks/bench_replay.py --installed   # the compiled build

A fleet (``--instances N --router R``) replays the agentic case at N times the session
rate (2N sessions/s), so each instance sees the one-instance case's load; the sessions
stay the same (N / 6 of them for N requests).

Targets (issue 17, 2-core machine): Mooncake >= 20,000 simulated requests/s; 1 M
requests <= 60 s wall and <= 500 MB peak RSS; memory exponent <= 0.1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared/traces/mooncake_fast25/conversation_trace.jsonl"
MOONCAKE_FLAGS = (
    "--spread-buckets --model-path zai-org/GLM-5-FP8 --tp 8 --trust-remote-code "
    "--page-size 64 --cp-size 8 --enable-cp-shared-kv --chunked-prefill-size 16384 "
    "--max-prefill-tokens 16384 --enable-hierarchical-cache --hicache-ratio 2 "
    "--hicache-write-policy write_through --schedule-policy fcfs "
    "--mem-fraction-static 0.88 --disaggregation-mode prefill"
).split()


#: The generated case: agentic sessions with short prompts (a 2,048-token shared system
#: prompt, 64-512 user tokens, 64-256 appended and 16-128 output tokens per turn, 4-12
#: turns) at the default 2 sessions/s: about 16 requests/s, few live at once.
AGENTIC_FLAGS = (
    "--agentic-system-prompt-len 2048 --agentic-first-user-len 64,512 "
    "--agentic-turn-append-len 64,256 --agentic-output-len 16,128"
).split()


def agentic_args(n: int, instances: int = 1, router: str | None = None) -> list[str]:
    args = [*AGENTIC_FLAGS, "--agentic-sessions", str(math.ceil(n / 6)), "--max-requests", str(n)]
    if instances > 1:
        rate = str(2.0 * instances)  # NOTE: the agentic generator's default is 2 sessions/s
        args += ["--instances", str(instances), "--agentic-session-rate", rate]
        args += ["--router", router or "round-robin"]
    return args


def _env(src: Path | None) -> dict[str, str]:
    """The environment of a replay process: ``src`` first on the path, or (None) only
    what is installed (``pip install .`` installs the compiled build, see setup.py)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def which_build(src: Path | None) -> str:
    """``prefillkit.build()`` of the tree a replay process imports, and where it is."""
    code = "import prefillkit; print(prefillkit.build(), prefillkit.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(src), cwd=tempfile.gettempdir(),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def run_case(src: Path | None, args: list[str]) -> dict[str, float]:
    """One replay process: wall seconds, engine-loop seconds, requests, peak RSS (MB)."""
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as out:
        cmd = [sys.executable, "-m", "prefillkit.cli", "replay", "-q", "--json", "--out", out]
        env = _env(src)
        t0 = time.perf_counter()
        with tempfile.TemporaryFile() as stdout:
            proc = subprocess.Popen(
                [*cmd, *args], env=env, stdout=stdout, cwd=tempfile.gettempdir()
            )
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            if status != 0:
                raise SystemExit(f"replay failed ({status}): {' '.join(args)}")
            stdout.seek(0)
            doc = json.loads(stdout.read())
    n = int(doc["metrics"]["requests"])
    return {
        "requests": n,
        "wall_s": wall,
        "loop_s": float(doc["timing"]["wall_time_s"]),
        "rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
        "cpu_s": usage.ru_utime + usage.ru_stime,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--no-mooncake", action="store_true")
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the tree to run")
    ap.add_argument(
        "--installed", action="store_true", help="run the installed build instead of --src"
    )
    ap.add_argument("--instances", type=int, default=1, help="a fleet of N instances")
    ap.add_argument("--router", default=None, help="the fleet's router")
    ap.add_argument("--fleet-flags", default="", help="more flags for the fleet's router")
    a = ap.parse_args()
    src = None if a.installed else a.src.resolve()
    print(f"build: {which_build(src)}", flush=True)
    rows: list[tuple[str, dict[str, float]]] = []
    if not a.no_mooncake:
        rows.append(("mooncake", run_case(src, ["--trace", str(TRACE), *MOONCAKE_FLAGS])))
        print_row(*rows[-1])
    sized: list[dict[str, float]] = []
    for n in a.sizes:
        r = run_case(src, [*agentic_args(n, a.instances, a.router), *a.fleet_flags.split()])
        sized.append(r)
        rows.append((f"agentic-{n}", r))
        print_row(*rows[-1])
    for r1, r2 in itertools.pairwise(sized):
        k = math.log(r2["requests"] / r1["requests"])
        print(
            f"exponents {r1['requests']:,} -> {r2['requests']:,}: "
            f"time {math.log(r2['wall_s'] / r1['wall_s']) / k:.3f} "
            f"(CPU {math.log(r2['cpu_s'] / r1['cpu_s']) / k:.3f}), "
            f"memory {math.log(r2['rss_mb'] / r1['rss_mb']) / k:.3f}"
        )


def print_row(name: str, r: dict[str, float]) -> None:
    print(
        f"{name:>16}: {int(r['requests']):>9,} requests, wall {r['wall_s']:8.2f} s "
        f"({r['requests'] / r['wall_s']:>8,.0f} req/s), CPU {r['cpu_s']:8.2f} s "
        f"({r['requests'] / r['cpu_s']:>8,.0f} req/CPU-s), engine loop {r['loop_s']:8.2f} s "
        f"({r['requests'] / r['loop_s']:>8,.0f} req/s), peak RSS {r['rss_mb']:7.1f} MB",
        flush=True,
    )


if __name__ == "__main__":
    main()
