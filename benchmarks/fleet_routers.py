"""The six routers on one fleet, with paired per-request CIs (issue 36 item 4): the
Mooncake conversation trace and the seed-like agentic workload on 4 instances of the
demo deployment (GLM-5, 8 x H200, CP 8 shared-KV, HiCache, pd-prefill), each workload
sped up 4x so that each instance sees the load one instance sees at 1x (the seed workload
at 4 x 0.03675 sessions/s, the rate where one instance shows the seed's p99: README).

Each workload is one ``prefillkit compare`` (round-robin the baseline; every other router
a variant with its defaults), so its table carries the paired bootstrap CIs of TTFT p99
and mean against round-robin.

    python benchmarks/fleet_routers.py            # both workloads (~6 min on 2 cores)
    python benchmarks/fleet_routers.py --only seed
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared/traces/mooncake_fast25/conversation_trace.jsonl"

FLEET = ["--preset", "demo", "--instances", "4"]
#: Routers after the baseline (round-robin), each at its defaults.
VARIANTS = (
    ("round-robin", "--router round-robin"),
    ("least-load", "--router least-load"),
    ("power-of-two", "--router power-of-two"),
    ("cache-aware", "--router cache-aware"),
    ("kv-cost", "--router kv-cost"),
    ("weighted", "--router weighted"),
)
WORKLOADS = {
    "mooncake": ["--trace", str(TRACE), "--spread-buckets", "--time-scale", "0.25"],
    "seed": ["--generator", "seed", "--agentic-sessions", "300", "--agentic-session-rate", "0.147"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(WORKLOADS), default=None)
    parser.add_argument("--out", type=Path, default=None, help="keep the compare folders here")
    args = parser.parse_args()
    for name, workload in WORKLOADS.items():
        if args.only not in (None, name):
            continue
        cmd = [sys.executable, "-m", "prefillkit.cli", "compare", *FLEET, *workload]
        for label, flags in VARIANTS:
            cmd += ["--variant", f"{label}:{flags}"]
        if args.out is not None:
            cmd += ["--out", str(args.out / name)]
        print(f"## {name}: {' '.join(cmd[3:])}", flush=True)
        subprocess.run(cmd, check=True, env={**os.environ, "COLUMNS": "200"})


if __name__ == "__main__":
    main()
