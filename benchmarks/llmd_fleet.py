"""llm-d's fleet experiment on prefillkit's physics (issue 36 item 4): precise prefix
routing, approximate prefix routing and load-only routing on the same fleet.

The published run (llm-d blog 2025-09-24 "KV-cache wins you can see", Appendix A; the
harness config ``llm-d/llm-d-kv-cache-manager`` ``benchmarking/73-capacity``): 8 vLLM pods
of Qwen3-32B on 2 H100 each, 307,328 KV tokens a pod, block size 64; 150 customers with a
6,000-token context, 5 users each asking a 1,200-token question, 1,000 output tokens
(``ignore_eos``); a 15 QPS x 50 s warm-up, then 16 Poisson steps from 3 to 60 QPS, each
step closed (the harness waits for its requests to finish). Published TTFT p90: precise
0.542 s, approximate 31.083 s, load-only 94.865 s.

Here: the fleet of ``examples/fleets/llmd.toml`` (8 x Qwen3-32B, TP 2, H100, colocated)
behind llm-d's weighted scorers (``--router weighted``: prefix 3, KV utilisation 2,
queue 2) with the prefix scorer reading the pods' KV events (``exact``: llm-d's precise
mode), its own routing history (``approximate``), or nothing (prefix weight 0: load only).
Each step is its own replay of the warm-up followed by that step (``--llmd-qps-steps Q
--llmd-step-s S``), so no backlog carries from one step to the next, as the closed steps
of the harness had it; the TTFTs of every step's requests (not the warm-up's) are pooled.

    python benchmarks/llmd_fleet.py                 # all 16 steps, 3 routers (~3 min)
    python benchmarks/llmd_fleet.py --steps 3 10 30 # a subset

Prints one table (TTFT p50/p90/p99 over the pooled steps, hit rate, the published p90)
and the per-step p90s.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from prefillkit.workloads.llmd import QPS_STEPS, STEP_S  # noqa: E402

DEPLOYMENT = [
    "--fleet", str(ROOT / "examples/fleets/llmd.toml"),
    "--model-config", str(ROOT / "examples/fleets/qwen3-32b.json"),
    "--gpu", "h100", "--tp", "2", "--mode", "colocated", "--page-size", "64",
    "--max-total-tokens", "307328", "--generator", "llmd", "--llmd-step-gap-s", "900",
]  # fmt: skip

#: (label, router flags, published TTFT p90 s).
ROUTERS: tuple[tuple[str, list[str], float], ...] = (
    ("precise (KV events)", ["--router", "weighted", "--router-prefix-source", "exact"], 0.542),
    (
        "approximate (routing history)",
        ["--router", "weighted", "--router-prefix-source", "approximate"],
        31.083,
    ),
    (
        "load only (queue + KV utilisation)",
        ["--router", "weighted", "--router-prefix-weight", "0"],
        94.865,
    ),
)


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def run_step(router: list[str], qps: float, step_s: float, seed: int) -> dict[str, object]:
    """One replay (warm-up + one step); the step's TTFTs and hit tokens."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "prefillkit.cli", "replay", *DEPLOYMENT, *router,
            "--llmd-qps-steps", f"{qps:g}", "--llmd-step-s", f"{step_s:g}",
            "--seed", str(seed), "--out", tmp, "-q", "--json",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: {proc.stderr.strip()}")
        ttft: list[float] = []
        prompt = hit = 0
        with open(Path(tmp) / "requests.csv", newline="") as f:
            for row in csv.DictReader(f):
                if "-w-" in row["rid"] or not row["ttft_s"]:
                    continue  # the warm-up's requests are not measured
                ttft.append(float(row["ttft_s"]))
                prompt += int(row["input_len"])
                hit += int(row["device_hit_tokens"]) + int(row["host_hit_tokens"])
        summary = json.loads(proc.stdout)["metrics"]
    return {"ttft": ttft, "prompt": prompt, "hit": hit, "imbalance": summary["routing_imbalance"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=float, nargs="*", default=list(QPS_STEPS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    seconds = dict(zip(QPS_STEPS, STEP_S, strict=True))
    jobs = [(r, q) for r in range(len(ROUTERS)) for q in args.steps]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(
            pool.map(
                lambda j: run_step(ROUTERS[j[0]][1], j[1], seconds.get(j[1], 30.0), args.seed),
                jobs,
            )
        )
    print("| router | TTFT p50 | TTFT p90 | TTFT p99 | hit rate | published p90 |")
    print("|---|---|---|---|---|---|")
    per_step: dict[int, list[float]] = {}
    for r, (label, _, published) in enumerate(ROUTERS):
        mine = [res for (rr, _), res in zip(jobs, results, strict=True) if rr == r]
        ttft = [t for res in mine for t in res["ttft"]]  # type: ignore[attr-defined]
        prompt = sum(int(res["prompt"]) for res in mine)  # type: ignore[call-overload]
        hit = sum(int(res["hit"]) for res in mine)  # type: ignore[call-overload]
        per_step[r] = [_quantile(list(res["ttft"]), 0.9) for res in mine]  # type: ignore[call-overload]
        print(
            f"| {label} | {_quantile(ttft, 0.5):.3f} s | {_quantile(ttft, 0.9):.3f} s | "
            f"{_quantile(ttft, 0.99):.3f} s | {hit / prompt:.1%} | {published} s |"
        )
    print()
    print("| QPS | " + " | ".join(label for label, _, _ in ROUTERS) + " |")
    print("|---|" + "---|" * len(ROUTERS))
    for k, q in enumerate(args.steps):
        cells = " | ".join(f"{per_step[r][k]:.3f} s" for r in range(len(ROUTERS)))
        print(f"| {q:g} | {cells} |")


if __name__ == "__main__":
    main()
