"""The TTFT-over-time plot of a report: each finished request's TTFT against its arrival
time, one colour per variant, with the running p90 per time bin on top
(:func:`plot_ttft_over_time`)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes

from prefillkit.report.plot_base import Runs, twin_kw, twin_note, twins, variant_labels
from prefillkit.report.plot_base import auto_bins as _auto_bins
from prefillkit.report.plot_base import col as _col
from prefillkit.report.plot_base import log_seconds as _log_seconds
from prefillkit.report.plot_base import new_figure as _new_figure
from prefillkit.report.plot_base import no_data as _no_data
from prefillkit.report.plot_base import style as _style
from prefillkit.report.plot_base import variants as _variants
from prefillkit.report.plot_save import save_figure as _save
from prefillkit.report.rundir import RunData

__all__ = ["plot_ttft_over_time"]


def plot_ttft_over_time(runs: Runs, out_path: str | Path) -> Path:
    """TTFT of each finished request against its arrival time, one colour per variant."""
    fig, (ax,) = _new_figure()
    ax.set_title("TTFT over arrival time (finished requests)")
    entries = 0
    many = sum(len(r.finished_ttft()) for r in runs) > 5000
    points = [_finished_points(run) for run in runs]
    same, labels = twins(points), variant_labels(runs)
    for i, (_, label, color, marker) in enumerate(_variants(runs)):
        x, y = points[i]
        ok = np.isfinite(x) & np.isfinite(y) & (y > 0)
        if not ok.any():
            continue
        _scatter_points(
            ax, x[ok], y[ok], i, label + twin_note(same, i, labels), color, marker, many
        )
        # The running p90 of the variant on top of the cloud.
        bx, by = _binned_quantile(x[ok], y[ok], _auto_bins(int(ok.sum()), 40), 0.9)
        ax.plot(
            bx,
            by,
            color=color,
            lw=1.6,
            marker=marker,
            zorder=20 + i,
            label=f"{label}: p90 per time bin",
            **twin_kw(same, i, 4),
        )
        entries += 1
    if entries == 0:
        _no_data(ax, "no finished requests")
    else:
        _finish_over_time(ax)
    return _save(fig, out_path)


def _scatter_points(
    ax: Axes,
    x: np.ndarray,
    y: np.ndarray,
    i: int,
    label: str,
    color: str,
    marker: str,
    many: bool,
) -> None:
    """Variant ``i``'s ``(arrival, TTFT)`` points (``many``: smaller, fainter dots)."""
    # The first variant filled, the others hollow with their own marker, so that no
    # variant's points hide another's.
    hollow = i > 0
    ax.scatter(
        x,
        y,
        s=6 if many else 14,
        alpha=0.45 if many else 0.7,
        marker=marker,
        facecolors="none" if hollow else color,
        edgecolors=color if hollow else "none",
        linewidths=0.7,
        label=label,
        rasterized=True,
        zorder=2 + i,
    )


def _finish_over_time(ax: Axes) -> None:
    """Log TTFT axis, labels and the legend (opaque markers) of :func:`plot_ttft_over_time`."""
    ax.set_yscale("log")
    _log_seconds(ax.yaxis)
    ax.set_xlabel("arrival time (s)")
    ax.set_ylabel("TTFT (s, log scale)")
    _style(ax)
    legend = ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        frameon=False,
        fontsize=9,
        markerscale=2.5,
    )
    for handle in legend.legend_handles:  # opaque legend markers
        if handle is not None:
            handle.set_alpha(1.0)


def _finished_points(run: RunData) -> tuple[np.ndarray, np.ndarray]:
    """``(arrival_s, ttft_s)`` of the run's finished requests."""
    if run.num_requests == 0:
        return np.zeros(0), np.zeros(0)
    mask = run.finished_mask()
    return _col(run, "requests", "arrival_s")[mask], _col(run, "requests", "ttft_s")[mask]


def _binned_quantile(
    x: np.ndarray, y: np.ndarray, bins: int, q: float
) -> tuple[np.ndarray, np.ndarray]:
    """The ``q`` quantile of ``y`` in ``bins`` equal-width bins of ``x`` (empty dropped)."""
    if len(x) == 0:
        return np.zeros(0), np.zeros(0)
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return np.array([lo]), np.array([float(np.quantile(y, q))])
    edges = np.linspace(lo, hi, bins + 1)
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    xs, ys = [], []
    for b in range(bins):
        sel = y[idx == b]
        if len(sel):
            xs.append((edges[b] + edges[b + 1]) / 2)
            ys.append(float(np.quantile(sel, q)))
    return np.array(xs), np.array(ys)
