"""The seed's fix chain, measured: one command, one table, one plot.

    python benchmarks/fix_chain.py [--out DIR] [--rate SESSIONS_PER_S] [--jobs N]

Runs ``prefillkit compare`` on the seed workload (``--generator seed``) and the seed
deployment (``prefillkit.cost.validation.SEED_DEPLOYMENT``: GLM-5 on 8 x H20 141 GB,
CP 8 shared-KV, EP 8, HiCache, 64 K chunks) under the fix chain:

1. ``fcfs-bs1``: FCFS, one request per CP forward (the seed's baseline);
2. ``bs-gt1``: several requests per forward, bounded by the four limits (8 requests,
   64 K extend tokens, 512 K cached tokens, 8 GiB of temporary buffers);
3. ``mix-chunked``: + followers after a tail chunk (true-prefix seeding of the
   chunk's budgets is always on in prefillkit: the spec requires it);
4. ``affinity``: + the warm/cold affinity policy;
5. ``lpm``: bs>1 + mix-chunked under LPM instead of FCFS (with prefillkit's default
   wait bound, ``--schedule-max-wait-s 5``);
6. ``lpm-unbounded``: the same with the wait bound off, as upstream's LPM.

The seed workload's sessions replay closed-loop (prefillkit's default, docs/sessions.md):
a session's next turn arrives once the previous one has answered (the seed deployment is
colocated: at its simulated decode finish) plus its think time.

Prints the Markdown table that README.md's first section shows (p50/p90/p99/max TTFT
of warm and cold requests separately, throughput, the paired p99 difference with its
95 % bootstrap interval) and writes ``docs/fix_chain.png``. Every number comes from
the run; nothing is edited by hand.

The verdict rests on the forward model, above all on how small GEMMs lose efficiency
(``prefillkit.cost.gemm``). ``--models`` (default ``tiles,sqrt-h100,ideal``) runs the
same chain once per forward model (``--small-gemm X`` for the roofline, ``aic`` for
``--cost-model aic`` when the extra is installed) and prints the verdict side by side:
"bs > 1: p99 ×a under tiles, ×b under sqrt-h100, ...". The first model's run is the
main table and the plot.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from prefillkit.cost.validation import SEED_DEPLOYMENT  # noqa: E402

LIMITS = (
    "--enable-cp-shared-kv-prefill-bs-gt1 --cp-shared-kv-prefill-max-requests 8 "
    "--cp-shared-kv-prefill-max-total-extend-tokens 65536 "
    "--cp-shared-kv-prefill-max-cached-tokens 524288 "
    "--cp-shared-kv-prefill-max-buffer-size 8589934592"
)
CHAIN: tuple[tuple[str, str], ...] = (
    ("fcfs-bs1", "--schedule-policy fcfs"),
    ("bs-gt1", LIMITS),
    ("mix-chunked", f"{LIMITS} --cp-prefill-mix-chunked"),
    ("affinity", f"{LIMITS} --cp-prefill-mix-chunked --enable-affinity"),
    ("lpm", f"{LIMITS} --cp-prefill-mix-chunked --schedule-policy lpm"),
    (
        "lpm-unbounded",
        f"{LIMITS} --cp-prefill-mix-chunked --schedule-policy lpm --schedule-max-wait-s -1",
    ),
)
#: The seed's load: the source notes' real replay (FCFS, one request per CP forward, 91.8 %
#: hit) showed TTFT p99 49.2 s. ``--rate auto`` (the default) finds, per forward model, the
#: session rate at which the FCFS bs = 1 baseline shows that p99, so every model is
#: compared at the seed's load rather than at one rate that overloads the slower models
#: and idles the faster ones.
TARGET_P99_S = 49.2


def model_flags(model: str) -> list[str]:
    """The flags that select forward model ``model`` (a small-GEMM assumption or aic)."""
    return ["--cost-model", "aic"] if model == "aic" else ["--small-gemm", model]


#: ``--open-loop`` on the command line: every turn at its scheduled time (prefillkit 0.2's
#: replay) instead of closed-loop sessions.
LOOP_FLAGS: list[str] = []


def seed_command(command: str, rate: float, model: str) -> list[str]:
    """``prefillkit COMMAND`` on the seed workload and deployment under forward ``model``."""
    return [
        sys.executable,
        "-m",
        "prefillkit",
        command,
        "--generator",
        "seed",
        "--agentic-session-rate",
        str(rate),
        *SEED_DEPLOYMENT,
        *model_flags(model),
        *LOOP_FLAGS,
        "--quiet",
    ]


def baseline_p99(rate: float, model: str, out: Path) -> float:
    """The TTFT p99 of the FCFS bs = 1 baseline at ``rate`` sessions/s."""
    cmd = [*seed_command("replay", rate, model), *shlex.split(CHAIN[0][1]), "--out", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads((out / "summary.json").read_text())
    return float(doc["metrics"]["ttft_p99_s"])


def find_rate(model: str, out: Path, target: float = TARGET_P99_S) -> float:
    """The session rate at which the baseline's TTFT p99 is ``target`` (geometric
    bisection over 0.002-0.1 sessions/s, to 3 %)."""
    lo, hi = 0.002, 0.1
    below = above = False
    while hi / lo > 1.03:
        mid = math.sqrt(lo * hi)
        if baseline_p99(mid, model, out) < target:
            lo, below = mid, True
        else:
            hi, above = mid, True
    if not (below and above):
        raise SystemExit(
            f"fix_chain.py: {model}: the baseline's p99 stays {'below' if below else 'above'} "
            f"{target:g} s over 0.002-0.1 sessions/s; give --rate"
        )
    return round(math.sqrt(lo * hi), 5)


def run_compare(out: Path, rate: float, jobs: int | None, model: str = "tiles") -> None:
    cmd = [
        *seed_command("compare", rate, model),
        *[f"--variant={name}:{flags}" for name, flags in CHAIN],
        "--out",
        str(out),
    ]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(out: Path) -> tuple[str, list[dict[str, Any]]]:
    doc = json.loads((out / "compare.json").read_text())
    rows: list[dict[str, Any]] = []
    lines = [
        "| variant | warm TTFT p50 / p90 / p99 / max (s) | cold TTFT p50 / p90 / p99 / max (s) "
        "| all p99 (s) | Δ p99 vs baseline [95 % CI] | batches | mean bs | overloaded |",
        "| --- | --- | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for v in doc["variants"]:
        m = json.loads((out / v["name"] / "summary.json").read_text())["metrics"]
        warm = " / ".join(_s(m.get(f"warm_ttft_{q}_s")) for q in ("p50", "p90", "p99", "max"))
        cold = " / ".join(_s(m.get(f"cold_ttft_{q}_s")) for q in ("p50", "p90", "p99", "max"))
        paired = v.get("paired") or {}
        if paired.get("p99_diff_s") is not None:
            est, lo, hi = paired["p99_diff_s"], paired["p99_diff_lo_s"], paired["p99_diff_hi_s"]
            ci = f"{est:+.1f} [{lo:+.1f}, {hi:+.1f}]"
        else:
            ci = "baseline" if v["is_baseline"] else "-"
        lines.append(
            f"| {v['name']} | {warm} | {cold} | {m['ttft_p99_s']:.1f} | {ci} | "
            f"{m['num_batches']:,} | {m['mean_batch_size']:.2f} | "
            f"{'yes' if m.get('overloaded') else 'no'} |"
        )
        rows.append({"name": v["name"], **m})
    return "\n".join(lines), rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, cls in zip(axes, ("warm", "cold"), strict=True):
        width = 0.2
        for i, q in enumerate(("p50", "p90", "p99", "max")):
            ys = [r.get(f"{cls}_ttft_{q}_s") or 0.0 for r in rows]
            ax.bar([x + (i - 1.5) * width for x in range(len(rows))], ys, width, label=q)
        ax.set_xticks(range(len(rows)), names, rotation=20)
        ax.set_title(f"{cls} requests")
        ax.set_ylabel("TTFT (s)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.suptitle("Seed workload on the seed deployment: the fix chain")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def verdict(models: list[str], p99s: dict[str, dict[str, float]], rates: dict[str, float]) -> str:
    """The chain's verdict per forward model: each variant's p99 over the baseline's."""
    lines = [
        "| forward model | sessions/s | fcfs-bs1 p99 (s) | "
        + " | ".join(f"{name} p99 (s, × baseline)" for name, _ in CHAIN[1:])
        + " |",
        "| --- | ---: | ---: |" + " ---: |" * (len(CHAIN) - 1),
    ]
    for model in models:
        row = p99s[model]
        base = row["fcfs-bs1"]
        cells = [f"{row[n]:.1f} (×{row[n] / base:.2f})" for n, _ in CHAIN[1:]]
        label = "aic (measured tables)" if model == "aic" else f"roofline, small GEMMs: {model}"
        lines.append(f"| {label} | {rates[model]:g} | {base:.1f} | " + " | ".join(cells) + " |")
    said = ", ".join(f"×{p99s[m]['bs-gt1'] / p99s[m]['fcfs-bs1']:.2f} under {m}" for m in models)
    return "\n".join(lines) + f"\n\nbs > 1 (p99 over FCFS bs = 1): {said}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="fix_chain_out", help="compare output folder")
    ap.add_argument(
        "--rate",
        default="auto",
        help="sessions per second, or auto: the rate at which FCFS bs = 1 shows the seed's "
        f"p99 ({TARGET_P99_S} s) under each forward model",
    )
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--plot", default=str(ROOT / "docs" / "fix_chain.png"))
    ap.add_argument(
        "--models",
        default="tiles,sqrt-h100,ideal",
        help="forward models, comma-separated: small-GEMM assumptions and/or aic",
    )
    ap.add_argument(
        "--open-loop",
        action="store_true",
        help="send every turn at its scheduled time (prefillkit 0.2's replay)",
    )
    args = ap.parse_args()
    if args.open_loop:
        LOOP_FLAGS.append("--open-loop")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    out = Path(args.out)
    p99s: dict[str, dict[str, float]] = {}
    rates: dict[str, float] = {}
    for i, model in enumerate(models):
        run_out = out if i == 0 else out.with_name(f"{out.name}-{model}")
        probe = out.with_name(f"{out.name}-rate-probe")
        rate = find_rate(model, probe) if args.rate == "auto" else float(args.rate)
        rates[model] = rate
        run_compare(run_out, rate, args.jobs, model)
        text, rows = table(run_out)
        p99s[model] = {r["name"]: float(r["ttft_p99_s"]) for r in rows}
        if i == 0:
            print(f"forward model: {model}, {rate:g} sessions/s\n")
            print(text)
            plot(rows, Path(args.plot))
            print(f"\nwrote {args.plot}; run folders in {out}/", file=sys.stderr)
    print()
    print(verdict(models, p99s, rates))


if __name__ == "__main__":
    main()
