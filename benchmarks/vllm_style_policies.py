"""What the admission policies do for a vLLM-style deployment, in prefillkit's simulator.

    python benchmarks/vllm_style_policies.py [--out DIR] [--jobs N]

One ``prefillkit compare`` per workload, FCFS (vLLM's default order) the baseline, on a
vLLM-style deployment (``--engine-style vllm``: every prefill forward carries the decode
tokens, sim/vllm_style.py): Qwen3-32B (``examples/fleets/qwen3-32b.json``) on 2 × H100,
TP 2, colocated, 16-token blocks, ``max_num_batched_tokens`` 8,192 (``--chunked-prefill-size``
and ``--max-prefill-tokens``), ``max_num_seqs`` 256 (``--max-running-requests``). The
workloads: the Mooncake conversation trace slowed 12× (FCFS prefill utilisation 0.30,
p99 37 s: a KV-bound tail) and the built-in agentic sessions at 3 sessions/s. Prints one
Markdown table: TTFT p50 / p90 / p99 / max, the paired p99 difference against FCFS with its
95 % interval, and the cache hit rate.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
VLLM_STYLE = (
    f"--mode colocated --engine-style vllm --model-config {ROOT}/examples/fleets/qwen3-32b.json "
    "--gpu h100 --tp-size 2 --page-size 16 --chunked-prefill-size 8192 "
    "--max-prefill-tokens 8192 --max-running-requests 256"
)
WORKLOADS = {
    "mooncake": f"--trace {TRACE} --time-scale 12",
    "agentic": "--generator agentic --agentic-session-rate 3",
}
POLICIES = {
    "fcfs": "--schedule-policy fcfs",
    "lpm": "--schedule-policy lpm",
    "lpm-aging": "--schedule-policy lpm --lpm-aging-tokens-per-pass 4096 --schedule-max-wait-s -1",
    "residual-sjf": "--schedule-policy residual-sjf",
    "waiting-qos": "--schedule-policy waiting-qos",
    "session-affinity": "--schedule-policy session-affinity",
    "cost-aware": "--schedule-policy cost-aware",
}


def run(workload: str, out: Path, jobs: int) -> list[str]:
    """The workload's table rows (one per policy)."""
    argv = [sys.executable, "-m", "prefillkit", "compare", *shlex.split(WORKLOADS[workload])]
    argv += [*shlex.split(VLLM_STYLE), "--out", str(out), "--quiet", "-j", str(jobs)]
    for name, flags in POLICIES.items():
        argv += ["--variant", f"{name}:{flags}"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads((out / "compare.json").read_text())
    rows = []
    for v in doc["variants"]:
        m = json.loads((out / v["dir"] / "summary.json").read_text())["metrics"]
        p = v.get("paired") or {}
        ci = (
            "baseline"
            if p.get("p99_diff_s") is None
            else f"{p['p99_diff_s']:+.2f} [{p['p99_diff_lo_s']:+.2f}, {p['p99_diff_hi_s']:+.2f}]"
        )
        q = " / ".join(f"{m[f'ttft_{k}_s']:.2f}" for k in ("p50", "p90", "p99", "max"))
        rows.append(f"| {workload} | {v['name']} | {q} | {ci} | {m['cache_hit_rate']:.3f} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--out", help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if not TRACE.is_file():
        print(f"vllm_style_policies.py: error: {TRACE} not found", file=sys.stderr)
        return 2
    base = Path(args.out or tempfile.mkdtemp(prefix="vllm-style-"))
    print(
        "| workload | policy | TTFT p50 / p90 / p99 / max (s) | Δ p99 vs FCFS [95 % CI] (s) | hit |"
    )
    print("| --- | --- | --- | --- | ---: |")
    for workload in WORKLOADS:
        for row in run(workload, base / workload, args.jobs):
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
