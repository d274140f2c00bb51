"""Report plots: each function writes one PNG and returns its path.

Matplotlib runs on the non-interactive Agg backend (no display needed). Every variant
keeps the same colour in every plot (its position in the ``runs`` list picks it from
:data:`PALETTE`). A variant whose series is identical to an earlier one's is drawn
dashed with hollow, larger markers and "identical to X" in its legend entry, so that
neither hides the other (:mod:`prefillkit.report.plot_base`). Empty inputs give a plot
with a "no data" note rather than an error.
:func:`plot_affinity` is the one exception to "always a PNG": when every skip/defer count
is zero it writes nothing and returns ``None`` (the report shows a note instead).

This module draws the TTFT distribution, queue and window plots and lists every plot of
a report (:data:`PLOTS`); the TTFT-over-time plot is
:mod:`prefillkit.report.plot_ttft_time`'s, the batches plot is
:mod:`prefillkit.report.plot_batches`'s, the cache plots are
:mod:`prefillkit.report.plot_cache`'s (these two importable from here too), and
:mod:`prefillkit.report.plot_save` writes the PNG files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes

from prefillkit.report.plot_base import (
    DPI,
    FIGSIZE,
    FIGSIZE_TALL,
    PALETTE,
    Runs,
    twin_kw,
    twin_note,
    twins,
    variant_colors,
    variant_labels,
    variant_markers,
)
from prefillkit.report.plot_base import col as _col
from prefillkit.report.plot_base import legend as _legend
from prefillkit.report.plot_base import log_seconds as _log_seconds
from prefillkit.report.plot_base import new_figure as _new_figure
from prefillkit.report.plot_base import no_data as _no_data
from prefillkit.report.plot_base import style as _style
from prefillkit.report.plot_base import variants as _variants
from prefillkit.report.plot_batches import plot_batches as plot_batches
from prefillkit.report.plot_cache import affinity_counts as affinity_counts
from prefillkit.report.plot_cache import cache_split as cache_split
from prefillkit.report.plot_cache import plot_affinity as plot_affinity
from prefillkit.report.plot_cache import plot_cache_split as plot_cache_split
from prefillkit.report.plot_save import save_figure as _save
from prefillkit.report.plot_ttft_time import plot_ttft_over_time
from prefillkit.report.rundir import RunData

__all__ = [
    "DPI",
    "FIGSIZE",
    "PALETTE",
    "PLOTS",
    "PlotSpec",
    "plot_affinity",
    "plot_batches",
    "plot_cache_split",
    "plot_queue_length",
    "plot_ttft_cdf",
    "plot_windows",
    "render_plots",
    "variant_colors",
    "variant_labels",
    "variant_markers",
    "window_series",
]

# --------------------------------------------------------------------------- plots


def plot_ttft_cdf(runs: Runs, out_path: str | Path) -> Path:
    """Empirical CDF of TTFT per variant (finished requests), log-scaled seconds."""
    fig, (ax,) = _new_figure()
    ax.set_title("TTFT distribution (finished requests)")
    entries = 0
    ttfts = [np.sort(t[t > 0]) for t in (r.finished_ttft() for r in runs)]
    same, labels = twins([(t,) for t in ttfts]), variant_labels(runs)
    for i, (_, label, color, marker) in enumerate(_variants(runs)):
        t = ttfts[i]
        if len(t) == 0:
            continue
        y = np.arange(1, len(t) + 1) / len(t)
        p99 = float(np.quantile(t, 0.99))
        # Markers at fixed quantiles (the same y for every variant), not every point.
        marks = [int(q * (len(t) - 1)) for q in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)]
        ax.step(
            t,
            y,
            where="post",
            color=color,
            lw=1.8,
            marker=marker,
            markevery=marks,
            label=f"{label} (p99 {_sec(p99)}){twin_note(same, i, labels)}",
            **twin_kw(same, i, 5),
        )
        entries += 1
    if entries == 0:
        _no_data(ax, "no finished requests")
    else:
        _finish_cdf(ax, entries)
    return _save(fig, out_path)


def _finish_cdf(ax: Axes, entries: int) -> None:
    """Log TTFT axis, the p50/p90/p99 lines, labels and legend of :func:`plot_ttft_cdf`."""
    ax.set_xscale("log")
    _log_seconds(ax.xaxis)
    for q in (0.5, 0.9, 0.99):
        ax.axhline(q, color="#999999", lw=0.8, ls=":")
        ax.text(
            1.0,
            q,
            f" p{q * 100:g}",
            transform=ax.get_yaxis_transform(),
            va="center",
            fontsize=8,
            color="#666666",
        )
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("TTFT (s, log scale)")
    ax.set_ylabel("fraction of requests")
    _style(ax)
    _legend_right_of_labels(ax, entries)


def _legend_right_of_labels(ax: Axes, n_entries: int) -> None:
    # Leave room for the p50/p90/p99 tags drawn just right of the axes.
    if n_entries:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.08, 1.0),
            borderaxespad=0.0,
            frameon=False,
            fontsize=9,
        )


def queue_length_series(run: RunData) -> tuple[np.ndarray, np.ndarray]:
    """Waiting-queue length as a step function ``(times, lengths)`` from requests.csv.

    A request waits from ``arrival_s`` until ``first_scheduled_s``. Rejected requests never
    wait; a request that was never scheduled (unfinished) waits until the end of the data.
    Events at the same instant are merged, so the series never dips below zero.
    """
    if run.num_requests == 0:
        return np.zeros(0), np.zeros(0)
    arrival = _col(run, "requests", "arrival_s")
    sched = _col(run, "requests", "first_scheduled_s")
    status = run.requests.get("status")
    keep = np.isfinite(arrival)
    if status is not None:
        keep &= status != "rejected"
    arrival, sched = arrival[keep], sched[keep]
    if len(arrival) == 0:
        return np.zeros(0), np.zeros(0)
    done = np.isfinite(sched) & (sched >= arrival)
    times = np.concatenate([arrival, sched[done]])
    deltas = np.concatenate([np.ones(len(arrival)), -np.ones(int(done.sum()))])
    uniq, inv = np.unique(times, return_inverse=True)
    length = np.cumsum(np.bincount(inv, weights=deltas, minlength=len(uniq)))
    return uniq, np.maximum(length, 0.0)


def plot_queue_length(runs: Runs, out_path: str | Path) -> Path:
    """Waiting-queue length over time (arrival → first scheduled), step function per variant."""
    fig, (ax,) = _new_figure()
    ax.set_title("Waiting queue length over time")
    entries = 0
    queues = [queue_length_series(run) for run in runs]
    same, labels = twins(queues), variant_labels(runs)
    for i, (_, label, color, marker) in enumerate(_variants(runs)):
        t, q = queues[i]
        if len(t) == 0:
            continue
        t = np.concatenate([[t[0]], t])
        q = np.concatenate([[0.0], q])
        ax.step(
            t,
            q,
            where="post",
            color=color,
            lw=1.4,
            marker=marker,
            markevery=max(1, len(t) // 12),
            label=f"{label} (max {q.max():.0f}){twin_note(same, i, labels)}",
            **twin_kw(same, i, 4),
        )
        entries += 1
    if entries == 0:
        _no_data(ax, "no request arrivals")
    else:
        ax.set_xlabel("time (s)")
        ax.set_ylabel("waiting requests")
        ax.set_ylim(bottom=0)
        _style(ax)
        _legend(ax, entries)
    return _save(fig, out_path)


def window_series(run: RunData) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(mid_s, ttft_p99_s, utilization, saturated)`` per window of the run's summary.

    From ``metrics.windows`` (see :mod:`prefillkit.records.steady`); missing values are NaN,
    and a run without windows gives empty arrays.
    """
    windows = run.metrics.get("windows")
    if not isinstance(windows, list):
        windows = []
    rows = [w for w in windows if isinstance(w, dict)]

    def get(w: dict[str, object], key: str) -> float:
        value = w.get(key)
        return float(value) if isinstance(value, (int, float)) else np.nan

    mid = np.array([(get(w, "start_s") + get(w, "end_s")) / 2 for w in rows], dtype=float)
    p99 = np.array([get(w, "ttft_p99_s") for w in rows], dtype=float)
    util = np.array([get(w, "utilization") for w in rows], dtype=float)
    sat = np.array([w.get("saturated") is True for w in rows], dtype=bool)
    return mid, p99, util, sat


def plot_windows(runs: Runs, out_path: str | Path) -> Path:
    """TTFT p99 (top, log) and executor utilisation (bottom) per arrival window.

    Saturated windows (busy >= 98 % with a growing backlog) are marked with a cross on
    the utilisation line.
    """
    fig, (ax_p99, ax_util) = _new_figure(FIGSIZE_TALL, rows=2)
    ax_p99.set_title("TTFT p99 and executor utilisation per arrival window")
    entries = 0
    series = [window_series(run) for run in runs]
    same, labels = twins([s[:3] for s in series]), variant_labels(runs)
    for i, (_, label, color, marker) in enumerate(_variants(runs)):
        mid, p99, util, sat = series[i]
        if len(mid) == 0:
            continue
        ok = np.isfinite(p99) & (p99 > 0)
        kw: dict[str, Any] = {
            "color": color,
            "lw": 1.6,
            "marker": marker,
            "label": label + twin_note(same, i, labels),
        }
        ax_p99.plot(mid[ok], p99[ok], **kw, **twin_kw(same, i, 4))
        ax_util.plot(mid, util * 100, **kw, **twin_kw(same, i, 3))
        if sat.any():
            ax_util.scatter(mid[sat], util[sat] * 100, marker="x", s=36, color=color)
        entries += 1
    if entries == 0:
        _no_data(ax_p99, "no windows in the summary")
        _no_data(ax_util, "no windows in the summary")
        return _save(fig, out_path)
    _finish_windows(ax_p99, ax_util, entries)
    return _save(fig, out_path)


def _finish_windows(ax_p99: Axes, ax_util: Axes, entries: int) -> None:
    """Axes, labels and legends of :func:`plot_windows`' two panels."""
    ax_p99.set_yscale("log")
    _log_seconds(ax_p99.yaxis)
    ax_p99.set_ylabel("TTFT p99 (s, log scale)")
    _style(ax_p99)
    _legend(ax_p99, entries)
    ax_util.axhline(98, color="#999999", lw=0.8, ls=":")
    ax_util.set_ylim(0, 105)
    ax_util.set_ylabel("executor busy (%)")
    ax_util.set_xlabel("window (arrival time, s); x: saturated window")
    ax_util.tick_params(labelbottom=True)
    _style(ax_util)
    _legend(ax_util, entries)


# --------------------------------------------------------------------------- all plots


@dataclass(frozen=True)
class PlotSpec:
    """One report plot: file stem, heading, caption, and the function drawing it."""

    key: str
    title: str
    caption: str
    func: Callable[[Runs, Path], Path | None]
    skipped_note: str = ""


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec(
        "ttft_cdf",
        "TTFT distribution",
        "Empirical CDF of time to first token over finished requests (log x axis).",
        plot_ttft_cdf,
    ),
    PlotSpec(
        "ttft_over_time",
        "TTFT over arrival time",
        "Each point is one finished request: its TTFT against its arrival time.",
        plot_ttft_over_time,
    ),
    PlotSpec(
        "windows",
        "TTFT p99 and utilisation per window",
        "Per arrival window (--window-s): TTFT p99 of the requests arriving in it, and the "
        "fraction of the window the executor was busy (crosses: saturated windows).",
        plot_windows,
    ),
    PlotSpec(
        "queue_length",
        "Waiting queue length",
        "Requests waiting between arrival and first scheduling (from requests.csv).",
        plot_queue_length,
    ),
    PlotSpec(
        "batches",
        "Batches over time",
        "Batch size, and per batch the extend tokens, the cache hits (device + host) and the "
        "carried prefix of chunk continuations (from batches.csv; their sum with the hits is "
        "the forward's cached_tokens).",
        plot_batches,
    ),
    PlotSpec(
        "cache_split",
        "Cache-hit split",
        "Prompt tokens served from the device cache, loaded back from host, or recomputed.",
        plot_cache_split,
    ),
    PlotSpec(
        "affinity",
        "Affinity skips and defers",
        "How often the cache-affinity policy skipped, deferred or stopped admission.",
        plot_affinity,
        skipped_note="All affinity skip / defer / stop counts are zero: plot omitted.",
    ),
)


def render_plots(runs: Runs, out_dir: str | Path) -> dict[str, Path | None]:
    """Draw every plot of :data:`PLOTS` into ``out_dir``; ``None`` marks a skipped plot."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {spec.key: spec.func(runs, out / f"{spec.key}.png") for spec in PLOTS}


def _sec(value: float) -> str:
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
