"""The policy zoo's report (``benchmarks/policy_zoo.py``): the Markdown table, the
policy × workload p99 matrix the README shows, the per-workload verdicts and starvation
checks, and the plot. Pure functions of the results dict ``policy_zoo.run_all`` builds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Every compare's baseline (the paired CIs are against it) and the policy under test.
BASELINE = "s4"
OURS = "cost-aware"


# -- the table and the verdicts --------------------------------------------------------


def fmt_s(value: float | None) -> str:
    """Seconds: two decimals under 10 s, one above, "-" for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def fmt_signed(value: float) -> str:
    return ("+" if value >= 0 else "−") + fmt_s(abs(value))


def fmt_ci(row: Mapping[str, Any], is_baseline: bool) -> str:
    if row.get("p99_diff_s") is None:
        return "baseline" if is_baseline else "-"
    lo, hi = row["p99_diff_lo_s"], row["p99_diff_hi_s"]
    return f"{fmt_signed(row['p99_diff_s'])} [{fmt_signed(lo)}, {fmt_signed(hi)}]"


def quad(row: Mapping[str, Any], cls: str) -> str:
    return " / ".join(fmt_s(row.get(f"{cls}_ttft_{q}_s")) for q in ("p50", "p90", "p99", "max"))


HEADER = (
    "| workload | policy | warm p50 / p90 / p99 / max (s) | cold p50 / p90 / p99 / max (s) "
    "| all p99 (s) | cold max (s) | input tok/s | Δ p99 vs S4 [95 % CI] (s) | p99 / FCFS |\n"
    "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: |"
)


def table_row(workload: str, name: str, row: Mapping[str, Any]) -> str:
    ratio = row.get("p99_ratio_vs_fcfs")
    tput = row.get("input_throughput_tok_s")
    cells = [
        workload,
        name,
        quad(row, "warm"),
        quad(row, "cold"),
        fmt_s(row.get("ttft_p99_s")),
        fmt_s(row.get("cold_ttft_max_s")),
        "-" if tput is None else f"{tput:,.0f}",
        fmt_ci(row, name == BASELINE),
        "-" if ratio is None else f"{ratio:.2f}",
    ]
    return "| " + " | ".join(cells) + " |"


def not_run_row(workload: str, name: str) -> str:
    return f"| {workload} | {name} | not run (see below) |" + " - |" * 6


def table(results: Mapping[str, Any], order: Sequence[str]) -> str:
    """The Markdown table: one row per (workload, policy) in ``order``."""
    lines = [HEADER]
    for workload, res in results["workloads"].items():
        rows = res["policies"]
        for name in order:
            if name in rows:
                lines.append(table_row(workload, name, rows[name]))
            elif name in results.get("not_run", {}):
                lines.append(not_run_row(workload, name))
    return "\n".join(lines)


def _p99(row: Mapping[str, Any]) -> float:
    value = row.get("ttft_p99_s")
    return math.inf if value is None else float(value)


def _ours_vs_s4(workload: str, ours: Mapping[str, Any], s4: Mapping[str, Any]) -> str:
    x, y = _p99(ours), _p99(s4)
    text = f"cost-aware p99 = {fmt_s(x)} s, S4 = {fmt_s(y)} s (S4/cost-aware = {y / x:.2f}×"
    if workload.startswith("seed"):
        text += f"; target ≥ 1.5× on seed: {'met' if y / x >= 1.5 else 'missed'}"
    return text + ")"


def _cold_bound(ours: Mapping[str, Any], fcfs: Mapping[str, Any] | None) -> str:
    mine = ours.get("cold_ttft_max_s")
    if fcfs is None or mine is None or fcfs.get("cold_ttft_max_s") is None:
        return "cost-aware cold max = - (no cold requests or no FCFS run)"
    bound = 2 * fcfs["cold_ttft_max_s"] + 1
    met = "met" if mine <= bound else "missed"
    return (
        f"cost-aware cold max = {fmt_s(mine)} s vs 2×FCFS cold max + 1 s = {fmt_s(bound)} s ({met})"
    )


def verdict(workload: str, rows: Mapping[str, Mapping[str, Any]]) -> str:
    """The workload's one-line verdict, computed from its rows."""
    s4, ours, fcfs = rows[BASELINE], rows.get(OURS), rows.get("fcfs")
    zoo = {n: r for n, r in rows.items() if n != OURS}
    best = min(zoo, key=lambda n: _p99(zoo[n]))
    best_text = f"best zoo policy = {best} at {fmt_s(_p99(zoo[best]))} s"
    if ours is None:
        return f"{workload}: cost-aware not run; S4 p99 = {fmt_s(_p99(s4))} s; {best_text}"
    tput = ours["input_throughput_tok_s"] / s4["input_throughput_tok_s"]
    parts = [
        _ours_vs_s4(workload, ours, s4),
        best_text,
        _cold_bound(ours, fcfs),
        f"throughput cost-aware / S4 = {tput:.3f}",
    ]
    return f"{workload}: " + "; ".join(parts)


def starvation(workload: str, res: Mapping[str, Any]) -> str:
    """cost-aware's starvation check: everything finished, and its longest TTFT within
    2 × FCFS's + 1 s; with the worst per-request TTFT increase against FCFS."""
    rows = res["policies"]
    ours, fcfs = rows.get(OURS), rows.get("fcfs")
    if ours is None or fcfs is None:
        return f"{workload}: starvation check: needs cost-aware and fcfs runs"
    done, total = ours["completed"], ours["requests"]
    bound = 2 * fcfs["ttft_max_s"] + 1
    ok = done == total and ours["ttft_max_s"] <= bound
    text = (
        f"{workload}: starvation check (cost-aware): {done:,}/{total:,} finished; "
        f"max TTFT {fmt_s(ours['ttft_max_s'])} s vs 2×FCFS max + 1 s = {fmt_s(bound)} s; "
        f"max queueing {fmt_s(ours['queueing_max_s'])} s (FCFS {fmt_s(fcfs['queueing_max_s'])} s)"
    )
    worst = res.get("worst_increase")
    grew = None if worst is None else worst["ttft_s"] - worst["fcfs_ttft_s"]
    if worst is not None and grew is not None and grew <= 0:
        text += "; no request slower than under FCFS"
    elif worst is not None and grew is not None:
        text += (
            f"; worst per-request TTFT increase vs FCFS {fmt_signed(grew)} s "
            f"({worst['rid']}, {worst['cache_class']}: {fmt_s(worst['fcfs_ttft_s'])} → "
            f"{fmt_s(worst['ttft_s'])} s)"
        )
    return text + (": ok" if ok else ": STARVATION")


def matrix(results: Mapping[str, Any], order: Sequence[str]) -> str:
    """The README's table: all-request TTFT p99 (s) per policy and workload, each with
    its paired Δ vs S4 when its 95 % interval excludes 0 (``*``), and the geometric mean
    over the workloads of the p99 ratio to S4 (below 1: better than S4)."""
    names = list(results["workloads"])
    lines = [
        "| policy | " + " | ".join(names) + " | p99 / S4 (geo-mean) |",
        "| --- |" + " ---: |" * (len(names) + 1),
    ]
    for policy in order:
        cells, logs = [], []
        for w in names:
            rows = results["workloads"][w]["policies"]
            row, base = rows.get(policy), rows.get(BASELINE)
            if row is None or base is None:
                cells.append("-")
                continue
            p99, ref = _p99(row), _p99(base)
            lo, hi = row.get("p99_diff_lo_s"), row.get("p99_diff_hi_s")
            sure = policy != BASELINE and lo is not None and hi is not None and lo * hi > 0
            cells.append(f"{fmt_s(p99)}{'*' if sure else ''}")
            if math.isfinite(p99) and math.isfinite(ref) and p99 > 0 and ref > 0:
                logs.append(math.log(p99 / ref))
        geo = f"{math.exp(sum(logs) / len(logs)):.2f}" if logs else "-"
        lines.append(f"| {policy} | " + " | ".join(cells) + f" | {geo} |")
    return "\n".join(lines)


def batches_matrix(results: Mapping[str, Any], order: Sequence[str]) -> str:
    """What the batches say, per policy and workload: the share of forwards a full KV
    pool closed, the mean batch size and the host-hit share of the cache hits."""
    names = list(results["workloads"])
    lines = [
        "| policy (closed by memory / mean bs / host-hit share) | " + " | ".join(names) + " |",
        "| --- |" + " ---: |" * len(names),
    ]
    for policy in order:
        cells = []
        for w in names:
            row = results["workloads"][w]["policies"].get(policy)
            mem = None if row is None else row.get("memory_closed_share")
            if row is None or mem is None:
                cells.append("-")
                continue
            bs, host = row.get("mean_batch_size") or 0.0, row.get("host_hit_rate") or 0.0
            cells.append(f"{100 * mem:.0f} % / {bs:.2f} / {100 * host:.0f} %")
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: Mapping[str, Any], order: Sequence[str]) -> str:
    """The whole Markdown output: loads, table, verdicts, starvation checks, notes."""
    lines = [
        "| workload | load | requests (cold) | FCFS utilisation | FCFS hit rate |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, res in results["workloads"].items():
        base = res["policies"][BASELINE]
        fcfs = res["policies"].get("fcfs", {})
        util, hit = fcfs.get("executor_utilization"), fcfs.get("cache_hit_rate")
        lines.append(
            f"| {name} | {res['load']} | {base['requests']:,} ({base['cold_requests']:,}) | "
            f"{'-' if util is None else f'{util:.2f}'} | {'-' if hit is None else f'{hit:.3f}'} |"
        )
    lines += ["", matrix(results, order), "", table(results, order), ""]
    lines += [batches_matrix(results, order), ""]
    for name, res in results["workloads"].items():
        lines.append(f"- {verdict(name, res['policies'])}")
    for name, res in results["workloads"].items():
        lines.append(f"- {starvation(name, res)}")
    notes = [f"{w}: {why}" for w, why in results.get("skipped", {}).items()]
    notes += [f"{w}: {why}" for w, why in results.get("failed", {}).items()]
    notes += [f"{p}: not run: {why}" for p, why in results.get("not_run", {}).items()]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines)


# -- the plot --------------------------------------------------------------------------


def _log_if_wide(ax: Any, bars: Sequence[float | None], marks: Sequence[float]) -> None:
    """A log y axis when a value passes 30x the lowest bar (one starving policy would
    flatten every other bar)."""
    low = [v for v in bars if v is not None and v > 0]
    high = [v for v in [*bars, *marks] if v is not None]
    if low and max(high) / min(low) > 30:
        ax.set_yscale("log")


def _plot_workload(ax: Any, name: str, res: Mapping[str, Any], order: Sequence[str]) -> None:
    """One workload's panel: p99 bars and cold-max markers per policy."""
    names = [n for n in order if n in res["policies"]]
    rows = [res["policies"][n] for n in names]
    xs = list(range(len(names)))
    ax.bar(xs, [r["ttft_p99_s"] or 0.0 for r in rows], color="tab:blue", label="p99 (all)")
    cold = [(x, r["cold_ttft_max_s"]) for x, r in zip(xs, rows, strict=True)]
    cold = [(x, v) for x, v in cold if v is not None]
    if cold:
        ax.scatter(*zip(*cold, strict=True), marker="D", color="tab:red", label="cold max")
    ax.set_xticks(xs, names, rotation=35, ha="right", fontsize=8)
    ax.set_title(f"{name}: {res['load']}", fontsize=9)
    _log_if_wide(ax, [r["ttft_p99_s"] for r in rows], [v for _, v in cold])
    ax.set_ylabel("TTFT (s)")
    ax.grid(axis="y", alpha=0.3)


def plot(results: Mapping[str, Any], order: Sequence[str], path: Path) -> None:
    """Per workload: each policy's all-request p99 as a bar, its cold max as a marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = list(results["workloads"].items())
    if not items:
        return
    cols = min(2, len(items))
    nrows = math.ceil(len(items) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols, 3.8 * nrows), squeeze=False)
    for ax, (name, res) in zip(axes.flat, items, strict=False):
        _plot_workload(ax, name, res, order)
    for ax in list(axes.flat)[len(items) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Admission policies on the seed deployment (tiles, CP bs > 1, mix-chunked)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
