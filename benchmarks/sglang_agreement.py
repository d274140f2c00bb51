"""Per-pass decision agreement: SGLang's own admission (``replay --scheduler sglang``)
against prefillkit standalone with every deliberate deviation that has a switch off.

Each workload is replayed twice on the same simulated deployment and cost model: once
through SGLang 0.5.23's real ``Scheduler._get_new_batch_prefill_raw`` on CPU
(``prefillkit.integrations.sglang.backend``), once through prefillkit's scheduler with
``--schedule-max-wait-s none`` (upstream has no wait bound) and
``--lpm-fallback-queue-len 128`` (upstream's LPM fallback); affinity, HiCache, CP and the
ignore-eos rule are off, as they are by default (docs/deviations.md lists every
deviation; the others have no switch). Every admission pass of each run is recorded as
its admitted ``(rid, prefix_len, extend_end)`` list, and the runs are compared:

- ``same before 1st div.``: passes identical, aligned pass by pass, up to the first
  divergence (and that as a share of SGLang's passes);
- ``aligned same``: the share of aligned pass indices with identical lists over the whole
  run (after a divergence the runs' states differ, so this falls);
- ``same at the same time``: the share of SGLang's passes that prefillkit's run also made
  at the same simulated time with the same list (the runs fall back into step when the
  queue drains: the next pass starts at an arrival);
- ``same plan``: the share of requests whose whole chunk plan (every ``(prefix_len,
  extend_end)`` they were admitted with, in order) is the same in both runs: robust to
  the timing shifts a divergence causes;
- causes: each aligned pass from the first divergence on, classified by
  :func:`cause` (the first ``--show`` are printed in full).

Workloads (the default run takes about 2 min on 2 cores): the Mooncake conversation trace
(``/work/shared/traces/mooncake_fast25/conversation_trace.jsonl``, all 12,031 requests,
``--max-requests`` for a slice; arrivals slowed ``--time-scale`` 2x so that one GPU keeps
up: 3.4 req/s of 12 K-token prompts saturate it) on the deployment's own KV pool (824 K
tokens), and the generated agentic workload (``prefillkit generate``'s ``agentic``: 300
sessions starting at 8/s, seed 0, closed-loop turns) on a 400 K-token pool so that its
cache evicts; llama-3.1-8b on one H200, pd-prefill, page 1, SGLang's default budgets
(chunks of 8,192, 16,384 input tokens a batch), policies fcfs and lpm.

Run: ``/tmp/sglv/bin/python benchmarks/sglang_agreement.py [--policy fcfs lpm]
[--workload mooncake agentic] [--max-requests N] [--time-scale X] [--show K]`` (SGLang
on CPU: docs/sglang.md). Prints one table; the figures go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefillkit.app.replay import WorkloadSpec, load_requests, make_replay_options
from prefillkit.app.settings import Config
from prefillkit.request import Request
from prefillkit.sched.interface import StepOutput
from prefillkit.sim.engine import Engine

MOONCAKE = "/work/shared/traces/mooncake_fast25/conversation_trace.jsonl"

Admitted = tuple[tuple[str, int, int], ...]


@dataclass
class Recorder:
    """Wraps a scheduler: every pass's admitted list, stop reason and time."""

    inner: Any
    passes: list[Admitted] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def schedule(self, now: float) -> StepOutput:
        step: StepOutput = self.inner.schedule(now)
        self.passes.append(tuple((s.rid, s.prefix_len, s.extend_end) for s in step.reqs))
        self.reasons.append(step.stop_reason.value)
        self.times.append(now)
        return step

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class Run:
    rec: Recorder
    summary: dict[str, Any]
    wall_s: float
    key_tokens: int


def replay(cfg: Config, requests: list[Request], factory: Any) -> Run:
    t0 = time.perf_counter()
    engine = Engine(cfg.sim_settings(), requests, scheduler_factory=factory)
    rec = Recorder(engine.sched)
    engine.sched = rec  # type: ignore[assignment]
    result = engine.run()
    return Run(rec, result.summary, time.perf_counter() - t0, engine.dep.key_tokens)


def cause(
    a: Admitted, b: Admitted, seen_a: set[str], seen_b: set[str], unit: int, fcfs: bool
) -> str:
    """Why SGLang's pass ``a`` and prefillkit's ``b`` differ, read at the first position
    where they differ. ``seen_*``: the requests each run admitted before this pass (a
    continuation's prefix is its own earlier chunks); ``unit``: the key unit (prefillkit
    matches whole units, SGLang tokens); ``fcfs``: the queue order is arrival order."""
    if sorted(a) == sorted(b):
        return "same requests, other order (ties)"
    k = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if k is None:
        return f"{'SGLang' if len(a) > len(b) else 'prefillkit'} admits more (budget/memory)"
    (ra, pa, _), (rb, pb, _) = a[k], b[k]
    if ra in seen_a or rb in seen_b:
        return "cascade: an earlier decision differed (a continuation's chunk)"
    if ra == rb:
        if pa != pb:
            return _prefix_cause(pa, pb, unit)
        return "chunk cut differs (same prefix)"
    if fcfs:
        return "cascade: queues already differ"
    if pa == pb:
        return "order differs at equal prefixes (ties)"
    return f"order differs: {_prefix_cause(pa, pb, unit)}"


def _prefix_cause(sg: int, pk: int, unit: int) -> str:
    if sg % unit or pk % unit:
        return "new prefix: match granularity (token vs key unit)"
    return f"new prefix: cache contents differ ({'SGLang' if sg > pk else 'prefillkit'} kept more)"


def compare(sg: Run, pk: Run, show: int, fcfs: bool) -> dict[str, Any]:
    a, b = sg.rec.passes, pk.rec.passes
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), n)
    seen_a: set[str] = set()
    seen_b: set[str] = set()
    causes: Counter[str] = Counter()
    details = []
    for i in range(n):
        if a[i] != b[i]:
            why = cause(a[i], b[i], seen_a, seen_b, sg.key_tokens, fcfs)
            causes[why] += 1
            if len(details) < show:
                details.append(
                    f"  pass {i} at {sg.rec.times[i]:.3f}/{pk.rec.times[i]:.3f} s: {why}\n"
                    f"    sglang     ({sg.rec.reasons[i]}): {_short(a[i])}\n"
                    f"    prefillkit ({pk.rec.reasons[i]}): {_short(b[i])}"
                )
        seen_a.update(r for r, _, _ in a[i])
        seen_b.update(r for r, _, _ in b[i])
    at_b = set(zip(pk.rec.times, b, strict=True))
    timed = sum((t, p) in at_b for t, p in zip(sg.rec.times, a, strict=True))
    plan_a, plan_b = _plans(a), _plans(b)
    rids = plan_a.keys() | plan_b.keys()
    return {
        "passes": (len(a), len(b)),
        "first": first,
        "aligned_same": sum(a[i] == b[i] for i in range(n)) / max(n, 1),
        "timed_same": timed / max(len(a), 1),
        "same_plan": sum(plan_a.get(r) == plan_b.get(r) for r in rids) / max(len(rids), 1),
        "causes": causes,
        "details": details,
    }


def _plans(passes: list[Admitted]) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for p in passes:
        for rid, prefix, end in p:
            out.setdefault(rid, []).append((prefix, end))
    return out


def _short(p: Admitted, limit: int = 6) -> str:
    body = ", ".join(f"{r} {pre}->{end}" for r, pre, end in p[:limit])
    return f"[{body}{', ...' if len(p) > limit else ''}] ({len(p)} reqs)"


Workloads = dict[str, tuple[Callable[[], list[Request]], int | None]]


def workloads(args: argparse.Namespace) -> Workloads:
    """name -> (fresh requests, KV pool tokens: None is the deployment's)."""
    out: Workloads = {}
    page = args.page_size
    if "mooncake" in args.workload:
        opts = make_replay_options(max_requests=args.max_requests, time_scale=args.time_scale)
        mc = load_requests(WorkloadSpec(trace=args.trace, replay=opts), page_size=page)
        name = f"mooncake[:{args.max_requests}] x{args.time_scale:g}"
        out[name] = (lambda: mc.fresh_requests(page), args.max_total_tokens)
    if "agentic" in args.workload:
        gen = {"num_sessions": args.sessions, "session_arrival_rate": args.session_rate}
        ag = load_requests(WorkloadSpec(generator="agentic", generator_args=gen), page_size=page)
        name = f"agentic {args.sessions} sessions at {args.session_rate:g}/s"
        out[name] = (lambda: ag.fresh_requests(page), args.agentic_pool_tokens)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", nargs="+", default=["mooncake", "agentic"])
    ap.add_argument("--policy", nargs="+", default=["fcfs", "lpm"])
    ap.add_argument("--trace", default=MOONCAKE)
    ap.add_argument("--max-requests", type=int, default=12031)
    ap.add_argument("--time-scale", type=float, default=2.0)
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--session-rate", type=float, default=8.0)
    ap.add_argument("--max-total-tokens", type=int, default=None, help="Mooncake's KV pool")
    ap.add_argument("--agentic-pool-tokens", type=int, default=400_000)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--page-size", type=int, default=1)
    ap.add_argument("--show", type=int, default=3)
    ap.add_argument(
        "--no-waiting-prefix-refresh",
        action="store_true",
        help="SGLANG_ENABLE_WAITING_PREFIX_REFRESH=0: SGLang's fcfs no longer refreshes the "
        "LRU of the first 128 waiting requests' prefixes every 32 passes",
    )
    args = ap.parse_args()
    if args.no_waiting_prefix_refresh:
        os.environ["SGLANG_ENABLE_WAITING_PREFIX_REFRESH"] = "0"
    warnings.filterwarnings("ignore")
    from prefillkit.integrations.sglang.backend import scheduler_factory

    rows, notes = [], []
    for wname, (make, pool) in workloads(args).items():
        for policy in args.policy:
            cfg = Config(
                model=args.model,
                mode="pd-prefill",
                schedule_policy=policy,
                schedule_max_wait_s=None,
                lpm_fallback_queue_len=128,
                max_total_tokens=pool,
                page_size=args.page_size,
            )
            sg = replay(cfg, make(), scheduler_factory(plugin=False))
            pk = replay(cfg, make(), None)
            r = compare(sg, pk, args.show, policy == "fcfs")
            rows.append((wname, policy, sg, pk, r))
            notes.append(f"{wname}, {policy}:\n" + ("\n".join(r["details"]) or "  none"))
    _print(rows)
    print("\nFirst divergent passes (SGLang / prefillkit):")
    print("\n".join(notes))


def _print(rows: list[tuple[str, str, Run, Run, dict[str, Any]]]) -> None:
    head = (
        "workload", "policy", "passes sg/pk", "same before 1st div.", "aligned same",
        "same at the same time", "same plan", "hit sg/pk", "TTFT p50 sg/pk", "wall sg/pk",
        "causes after the 1st div.",
    )  # fmt: skip
    print(" | ".join(head))
    for wname, policy, sg, pk, r in rows:
        npass = r["passes"][0]
        cells = (
            wname,
            policy,
            f"{r['passes'][0]}/{r['passes'][1]}",
            f"{r['first']} ({r['first'] / max(npass, 1):.1%})",
            f"{r['aligned_same']:.1%}",
            f"{r['timed_same']:.1%}",
            f"{r['same_plan']:.1%}",
            f"{sg.summary['device_hit_rate']:.2%}/{pk.summary['device_hit_rate']:.2%}",
            f"{sg.summary['ttft_p50_s']:.2f}/{pk.summary['ttft_p50_s']:.2f} s",
            f"{sg.wall_s:.0f}/{pk.wall_s:.0f} s",
            "; ".join(f"{k}: {v}" for k, v in r["causes"].most_common()) or "-",
        )
        print(" | ".join(cells))


if __name__ == "__main__":
    main()
