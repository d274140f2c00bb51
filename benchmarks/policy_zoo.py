"""The policy zoo, measured: one command, one table, one plot.

    python benchmarks/policy_zoo.py [--out DIR] [--workloads a,b,...] [--policies a,b,...]
                                    [--jobs N] [--quick]

Runs ``prefillkit compare`` once per workload, every admission policy of :data:`POLICIES`
as one variant, all on the seed deployment (``prefillkit.cost.validation.SEED_DEPLOYMENT``:
GLM-5 on 8 x H20 141 GB, CP 8 shared-KV, EP 8, HiCache, 64 K chunks) with the tiles
small-GEMM model, the fix chain's CP bs > 1 limits (``fix_chain.LIMITS``) and
``--cp-prefill-mix-chunked``. The workloads (:data:`WORKLOADS`):

1. ``seed``: the seed workload (``--generator seed``) at the fix chain's closed-loop rate;
2. ``mooncake``: the Mooncake FAST'25 conversation trace, slowed down (``--time-scale``);
3. ``azure``: Azure's 2023 LLM conversation trace (lengths only, no prefix sharing);
4. ``agentic-long``: long-context agent sessions (prefix hit ~94 %, mean input ~100 K).

``s4`` (the seed's warm/cold affinity policy) is every compare's baseline, so each
policy's paired p99 difference and its 95 % bootstrap interval (``compare.json``) read
"policy vs S4"; the p99 ratio against ``fcfs`` is the ratio of the two p99s.

Prints one Markdown table (warm and cold TTFT p50/p90/p99/max, all-request p99, cold
max, input throughput, Δ p99 vs S4 [95 % CI], p99 / FCFS), then per workload a verdict
line and a starvation check of ``cost-aware``; writes the table to ``DIR/policy_zoo.md``,
the numbers to ``DIR/policy_zoo.json`` and the plot to ``docs/policy_zoo.png`` (per
workload, each policy's all-request p99 as a bar, its cold max as a marker). Every number
comes from the runs (``DIR/WORKLOAD/POLICY/summary.json``, ``requests.csv`` and
``DIR/WORKLOAD/compare.json``); nothing is edited by hand.

A policy whose flags this prefillkit does not accept yet (checked in-process, as compare
checks its variants, before any run) is left out of the runs and listed as not run.
``--quick`` runs each workload shortened (fewer sessions / ``--max-requests``); its
numbers are a smoke test, not the benchmark. Bad ``--workloads`` / ``--policies`` names:
one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fix_chain import LIMITS  # noqa: E402
from policy_zoo_report import (  # noqa: E402
    BASELINE,
    OURS,
    plot,
    report,
)
from prefillkit.cost.validation import SEED_DEPLOYMENT  # noqa: E402

PROG = "policy_zoo.py"
TRACES = ROOT.parent / "shared" / "traces"

#: Flags every variant of every workload shares: the seed deployment, the tiles forward
#: model, the CP bs > 1 limits and mix-chunked (fix_chain.py's "mix-chunked" step).
SHARED_FLAGS: tuple[str, ...] = (
    *SEED_DEPLOYMENT,
    "--small-gemm",
    "tiles",
    *shlex.split(LIMITS),
    "--cp-prefill-mix-chunked",
)

#: The policies, in table order: (name, flags added to SHARED_FLAGS, source). The first
#: is every compare's baseline (the paired CIs are against it).
POLICIES: tuple[tuple[str, str, str], ...] = (
    ("s4", "--enable-affinity", "the seed's warm/cold affinity policy (baseline)"),
    ("fcfs", "--schedule-policy fcfs", "SGLang's default order"),
    (
        "s4-hold",
        "--enable-affinity --affinity-hold --affinity-max-age-s 20 --affinity-max-head-defers 1000",
        "S4 holding cold requests longer",
    ),
    ("s4-cost", "--enable-affinity --affinity-classify cost", "S4 with a cost classifier"),
    ("lpm", "--schedule-policy lpm", "SGLang's LPM, prefillkit's 5 s wait bound"),
    (
        "lpm-aging",
        "--schedule-policy lpm --lpm-aging-tokens-per-pass 4096 --schedule-max-wait-s -1",
        "SGLang #31954",
    ),
    ("residual-sjf", "--schedule-policy residual-sjf --schedule-max-wait-s -1", "vLLM #51375"),
    ("waiting-qos", "--schedule-policy waiting-qos", "vLLM #53277"),
    (
        "session-affinity",
        "--schedule-policy session-affinity --schedule-max-wait-s -1",
        "vLLM #51384",
    ),
    (
        "loadback-aware",
        "--schedule-policy loadback-aware --schedule-max-wait-s -1",
        "SGLang #38358",
    ),
    ("cost-aware", "--schedule-policy cost-aware", "prefillkit (ours)"),
)
assert POLICIES[0][0] == BASELINE  # NOTE: the paired CIs read "policy vs S4"

# -- The workloads' loads. Rule (mooncake, azure, agentic-long): the FCFS variant's
# prefill utilisation (summary.json ``executor_utilization``) matched to the seed's at its
# rate (0.69), checked free of ``drain`` (the backlog clears within a window of the last
# arrival). summary.json's ``overloaded`` flag cannot be the rule on this colocated
# deployment: its per-window utilisation counts decode steps, so every window with decodes
# reads ~100 % busy and a backlog that grows by one request over two windows trips
# ``compute-bound``; it fires at any load with a tail (azure: still at time-scale 3, 40 %
# prefill utilisation, p99 1.2 s; the seed's own rate trips it too).

#: seed: sessions/s at which FCFS bs = 1 shows the seed's p99 under the tiles model
#: (benchmarks/RESULTS.md, "The fix chain closed-loop"). FCFS here (bs > 1, mix-chunked):
#: p50 3.4 s, p99 38.8 s, max 49.9 s, utilisation 0.69, hit 0.915, 4,878 requests.
SEED_RATE = 0.03675
#: Two rates below it (about 96 % and 93 % of it).
SEED_NEARBY_RATES = (0.0355, 0.034)
#: mooncake: arrival times x 5.6 (a speed-up of 1/5.6 = 0.18: at real time this
#: deployment, ~10 K input tok/s at 22 % hit, needs 4x the trace's span). FCFS: p50 8.7 s,
#: p99 43.9 s, max 69.8 s, utilisation 0.69, drain 28 s; its tail is queueing (requests
#: of 1-8 K tokens wait 34 s). x 4: p99 510 s, overloaded; x 10: p99 33.6 s, utilisation
#: 0.39 (inputs: median 6.9 K, p99 85 K, max 126 K tokens).
MOONCAKE_TIME_SCALE = 5.6
#: azure: arrival times x 1.5 (a speed-up of 0.67). FCFS: p50 0.38 s, p99 2.47 s, max
#: 5.6 s, utilisation 0.69 (x 1.1: p99 39 s; x 4: p99 0.99 s, utilisation 0.31).
AZURE_TIME_SCALE = 1.5
#: agentic-long: sessions/s. The shape below gives hit 0.938, mean input 99.7 K tokens
#: (7,826 requests, 300 cold first turns). Utilisation 0.69 is at 0.026, too close to a
#: KV-capacity cliff at 0.027 (hit falls to 0.67, p99 1,131 s); 0.024 keeps ~11 % below
#: it. FCFS: p50 2.7 s, p99 17.2 s, max 41.7 s, utilisation 0.65, drain 1.5 s.
AGENTIC_LONG_RATE = 0.024
AGENTIC_LONG_SHAPE = (
    "--generator agentic --agentic-turns 20,60 "
    "--agentic-system-prompt-len 16384,32768 --agentic-sessions-per-system-prompt 1 "
    "--agentic-first-user-len 8192,24576 --agentic-turn-append-len 2048,6144 "
    "--agentic-output-len 128,1024 --agentic-think-time 1,10 --agentic-max-prompt-len 163840"
)


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload: its compare flags, its size (full run / ``--quick``) and its load."""

    name: str
    flags: str
    size: str
    quick_size: str
    load: str
    trace: Path | None = None

    def argv(self, quick: bool) -> list[str]:
        """The workload options of the compare command line."""
        trace = ["--trace", str(self.trace)] if self.trace is not None else []
        return [
            *trace,
            *shlex.split(self.flags),
            *shlex.split(self.quick_size if quick else self.size),
        ]


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "seed",
        f"--generator seed --agentic-session-rate {SEED_RATE}",
        "--agentic-sessions 300",
        "--agentic-sessions 60",
        f"{SEED_RATE} sessions/s, closed-loop",
    ),
    # The same workload 3-7 % below the seed's rate: closed-loop at this load the
    # ranking of policies changes with a few per cent of load (RESULTS.md), so one rate
    # cannot rank them.
    *(
        Workload(
            f"seed-{rate}",
            f"--generator seed --agentic-session-rate {rate}",
            "--agentic-sessions 300",
            "--agentic-sessions 60",
            f"{rate} sessions/s, closed-loop",
        )
        for rate in SEED_NEARBY_RATES
    ),
    Workload(
        "mooncake",
        f"--time-scale {MOONCAKE_TIME_SCALE}",
        "",
        "--max-requests 2500",
        f"time-scale {MOONCAKE_TIME_SCALE} (speed-up {1 / MOONCAKE_TIME_SCALE:.3g})",
        TRACES / "mooncake_fast25" / "conversation_trace.jsonl",
    ),
    Workload(
        "azure",
        f"--time-scale {AZURE_TIME_SCALE}",
        "",
        "--max-requests 4000",
        f"time-scale {AZURE_TIME_SCALE} (speed-up {1 / AZURE_TIME_SCALE:.3g})",
        TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv",
    ),
    Workload(
        "agentic-long",
        f"{AGENTIC_LONG_SHAPE} --agentic-session-rate {AGENTIC_LONG_RATE}",
        "--agentic-sessions 300",
        "--agentic-sessions 60",
        f"{AGENTIC_LONG_RATE} sessions/s, closed-loop",
    ),
)


class UsageError(Exception):
    """A bad command-line value: one line on stderr, exit status 2."""


def parse_names(text: str | None, known: Sequence[str], flag: str) -> list[str]:
    """The comma-separated names of ``text`` in ``known``'s order (all when ``None``)."""
    if text is None:
        return list(known)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"{flag}: no names given")
    bad = [n for n in names if n not in known]
    if bad:
        raise UsageError(f"{flag}: unknown name {bad[0]!r} (known: {', '.join(known)})")
    return [n for n in known if n in names]


def select_policies(text: str | None) -> list[tuple[str, str, str]]:
    """``--policies``: the chosen policies, the baseline always first."""
    names = set(parse_names(text, [p[0] for p in POLICIES], "--policies")) | {BASELINE}
    return [p for p in POLICIES if p[0] in names]


def select_workloads(text: str | None) -> list[Workload]:
    """``--workloads``: the chosen workloads, in :data:`WORKLOADS` order."""
    names = parse_names(text, [w.name for w in WORKLOADS], "--workloads")
    return [w for w in WORKLOADS if w.name in names]


def variant_option(name: str, flags: str) -> str:
    return f"--variant={name}:{flags}"


def compare_argv(
    workload: Workload,
    policies: Sequence[tuple[str, str, str]],
    out: Path,
    *,
    quick: bool = False,
    jobs: int | None = None,
) -> list[str]:
    """``prefillkit compare``'s arguments (after ``compare``) for one workload."""
    argv = [
        *workload.argv(quick),
        *SHARED_FLAGS,
        *[variant_option(name, flags) for name, flags, _ in policies],
        "--out",
        str(out),
        "--quiet",
    ]
    return argv + (["--jobs", str(jobs)] if jobs is not None else [])


def unavailable(policies: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """Policies this prefillkit refuses (name -> its one-line reason), checked as compare
    checks its variants, without running anything."""
    from prefillkit.app.compare import Variant, VariantError, prepare_variants

    out: dict[str, str] = {}
    for name, flags, _ in policies:
        variant = Variant(name=name, flags=tuple(shlex.split(flags)))
        try:
            prepare_variants([variant], None, list(SHARED_FLAGS))
        except VariantError as exc:
            out[name] = str(exc).removeprefix(f"variant {name!r}: ")
    return out


def run_compare(argv: Sequence[str]) -> str | None:
    """Run one compare; ``None`` on success, else its last line of stderr."""
    cmd = [sys.executable, "-m", "prefillkit", "compare", *argv]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines() or ["(no message)"]
    return f"exit {done.returncode}: {lines[-1]}"


# -- reading a compare's results -------------------------------------------------------

#: summary.json metrics kept per policy.
METRICS = (
    *(f"{c}ttft_{q}_s" for c in ("warm_", "cold_", "") for q in ("p50", "p90", "p99", "max")),
    "input_throughput_tok_s",
    "queueing_max_s",
    "executor_utilization",
    "cache_hit_rate",
    "host_hit_rate",
    "requests",
    "completed",
    "warm_requests",
    "cold_requests",
    "overloaded",
    "overload_reason",
)
PAIRED = ("p99_diff_s", "p99_diff_lo_s", "p99_diff_hi_s")


def policy_row(run: Path, variant: Mapping[str, Any]) -> dict[str, Any]:
    """One policy's numbers: its summary.json metrics, compare.json's paired CI and what
    its batches say (:func:`batch_facts`)."""
    metrics = json.loads((run / variant["dir"] / "summary.json").read_text())["metrics"]
    row = {k: metrics.get(k) for k in METRICS}
    paired = variant.get("paired") or {}
    row.update({k: paired.get(k) for k in PAIRED})
    row.update(batch_facts(run / variant["dir"] / "batches.csv"))
    return row


def batch_facts(path: Path) -> dict[str, Any]:
    """batches.csv: how many forwards, their mean size and the share a full KV pool
    closed (``closed_by`` memory: the next request did not fit)."""
    sizes, memory = 0, 0
    n = 0
    with path.open(newline="") as f:
        for b in csv.DictReader(f):
            n += 1
            sizes += int(b["size"])
            memory += b["closed_by"] == "memory"
    return {
        "batches": n,
        "mean_batch_size": sizes / n if n else None,
        "memory_closed_share": memory / n if n else None,
    }


def read_ttfts(path: Path) -> dict[str, tuple[float | None, str]]:
    """requests.csv: rid -> (TTFT or None when it never got a first token, cache class)."""
    with path.open(newline="") as f:
        return {
            r["rid"]: (float(r["ttft_s"]) if r["ttft_s"] else None, r["cache_class"])
            for r in csv.DictReader(f)
        }


def worst_increase(ours: Path, fcfs: Path) -> dict[str, Any] | None:
    """The request whose TTFT grew most under ``ours`` against FCFS (paired by rid)."""
    a, b = read_ttfts(ours), read_ttfts(fcfs)
    pairs: list[tuple[float, str, float, float, str]] = []
    for rid, (t, cls) in a.items():
        base = b.get(rid, (None, ""))[0]
        if t is not None and base is not None:
            pairs.append((t - base, rid, t, base, cls))
    if not pairs:
        return None
    _, rid, t, base, cls = max(pairs)
    return {"rid": rid, "cache_class": cls, "ttft_s": t, "fcfs_ttft_s": base}


def collect(run: Path, names: Sequence[str]) -> dict[str, Any]:
    """A finished compare's results: per-policy rows (with the p99 ratio vs FCFS) and,
    with both cost-aware and fcfs, cost-aware's worst per-request TTFT increase."""
    doc = json.loads((run / "compare.json").read_text())
    variants = {v["name"]: v for v in doc["variants"]}
    rows = {n: policy_row(run, variants[n]) for n in names if n in variants}
    fcfs_p99 = rows["fcfs"]["ttft_p99_s"] if "fcfs" in rows else None
    for row in rows.values():
        p99 = row["ttft_p99_s"]
        row["p99_ratio_vs_fcfs"] = p99 / fcfs_p99 if p99 is not None and fcfs_p99 else None
    worst = None
    if OURS in rows and "fcfs" in rows:
        dirs = {n: run / variants[n]["dir"] / "requests.csv" for n in (OURS, "fcfs")}
        worst = worst_increase(dirs[OURS], dirs["fcfs"])
    return {"policies": rows, "worst_increase": worst}


# -- the command -----------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = _Parser(prog=PROG, description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--out", default="policy_zoo_out", help="output folder (one per workload)")
    workloads = ", ".join(w.name for w in WORKLOADS)
    ap.add_argument("--workloads", help=f"comma-separated, of {workloads} [default: all]")
    policies = ", ".join(p[0] for p in POLICIES)
    ap.add_argument("--policies", help=f"comma-separated, of {policies} [default: all; s4 always]")
    ap.add_argument("--jobs", type=int, help="variants run at once (compare's --jobs)")
    ap.add_argument("--quick", action="store_true", help="shortened workloads (a smoke test)")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="read the runs already in --out instead of running them again",
    )
    ap.add_argument(
        "--plot",
        help="plot file [default: docs/policy_zoo.png; with --quick, DIR/policy_zoo.png]",
    )
    args = ap.parse_args(argv)
    if args.plot is None:
        quick_plot = Path(args.out) / "policy_zoo.png"
        args.plot = str(quick_plot if args.quick else ROOT / "docs" / "policy_zoo.png")
    if args.jobs is not None and args.jobs < 1:
        ap.error(f"--jobs: must be at least 1, got {args.jobs}")
    return args


def run_workload(
    workload: Workload,
    policies: Sequence[tuple[str, str, str]],
    out: Path,
    args: argparse.Namespace,
) -> tuple[dict[str, Any] | None, str | None]:
    """One workload's compare and its results, or ``(None, why it failed)``."""
    start = time.monotonic()
    if not args.report_only:
        argv = compare_argv(workload, policies, out, quick=args.quick, jobs=args.jobs)
        failed = run_compare(argv)
        if failed is not None:
            return None, f"compare failed ({failed})"
    elif not (out / "compare.json").is_file():
        return None, f"--report-only: no {out / 'compare.json'}"
    res = collect(out, [p[0] for p in policies])
    res["wall_s"] = round(time.monotonic() - start, 1)
    print(f"{PROG}: {workload.name}: done in {res['wall_s']:.0f} s", file=sys.stderr)
    return res, None


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every chosen workload under every chosen (and accepted) policy."""
    workloads, policies = select_workloads(args.workloads), select_policies(args.policies)
    refused = unavailable(policies)
    if BASELINE in refused:
        raise SystemExit(f"{PROG}: the baseline {BASELINE} is refused: {refused[BASELINE]}")
    runnable = [p for p in policies if p[0] not in refused]
    results: dict[str, Any] = {"workloads": {}, "skipped": {}, "failed": {}, "not_run": refused}
    results["quick"] = bool(args.quick)
    for w in workloads:
        if w.trace is not None and not w.trace.is_file():
            results["skipped"][w.name] = f"skipped: trace {w.trace} not found"
            print(f"{PROG}: {w.name}: skipped: trace {w.trace} not found", file=sys.stderr)
            continue
        res, why = run_workload(w, runnable, Path(args.out) / w.name, args)
        if res is None:
            results["failed"][w.name] = why
            print(f"{PROG}: {w.name}: {why}", file=sys.stderr)
            continue
        res.update(load=w.load, flags=w.argv(args.quick))
        results["workloads"][w.name] = res
    return results


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        select_workloads(args.workloads)
        order = [p[0] for p in select_policies(args.policies)]
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    start = time.monotonic()
    results = run_all(args)
    results["wall_s"] = round(time.monotonic() - start, 1)
    text = report(results, order)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy_zoo.md").write_text(text + "\n")
    (out / "policy_zoo.json").write_text(json.dumps(results, indent=1) + "\n")
    print(text)
    plot(results, order, Path(args.plot))
    print(f"{PROG}: {results['wall_s']:.0f} s; wrote {args.plot} and {out}/", file=sys.stderr)
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
