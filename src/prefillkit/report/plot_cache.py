"""The cache plots of a report, bars per variant: where the prompt tokens came from
(device hit, host hit, recomputed: :func:`plot_cache_split`) and the cache-affinity
decisions (skips, defers, stops: :func:`plot_affinity`, which draws nothing when every
count is zero)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes

from prefillkit.report.plot_base import Runs, variant_colors, variant_labels
from prefillkit.report.plot_base import col as _col
from prefillkit.report.plot_base import legend as _legend
from prefillkit.report.plot_base import new_figure as _new_figure
from prefillkit.report.plot_base import no_data as _no_data
from prefillkit.report.plot_base import style as _style
from prefillkit.report.plot_save import save_figure as _save
from prefillkit.report.rundir import RunData

__all__ = ["affinity_counts", "cache_split", "plot_affinity", "plot_cache_split"]

# Device / host / recomputed tokens in the cache split.
_SPLIT_COLORS = ("#2a9d8f", "#e9c46a", "#e76f51")


def cache_split(run: RunData) -> tuple[float, float, float]:
    """Total ``(device_hit, host_hit, recomputed)`` tokens over the run's requests."""
    if run.num_requests == 0:
        return 0.0, 0.0, 0.0
    out = []
    for col in ("device_hit_tokens", "host_hit_tokens", "recomputed_tokens"):
        v = _col(run, "requests", col)
        out.append(float(np.nansum(v)) if len(v) else 0.0)
    return out[0], out[1], out[2]


def plot_cache_split(runs: Runs, out_path: str | Path) -> Path:
    """Stacked bars per variant: share of prompt tokens hit on device, on host, recomputed."""
    fig, (ax,) = _new_figure()
    ax.set_title("Prompt tokens by source: device hit / host hit / recomputed")
    labels = variant_labels(runs)
    splits = np.array([cache_split(r) for r in runs], dtype=float).reshape(-1, 3)
    totals = splits.sum(axis=1) if len(splits) else np.zeros(0)
    if len(runs) == 0 or not (totals > 0).any():
        _no_data(ax, "no token counts")
        return _save(fig, out_path)
    shares = (
        np.divide(splits, totals[:, None], out=np.zeros_like(splits), where=totals[:, None] > 0)
        * 100
    )
    x = np.arange(len(runs))
    _stacked_bars(ax, x, shares, 0.6 if len(runs) > 1 else 0.4)
    _label_variants(ax, x, totals, labels, variant_colors(runs))
    ax.set_ylim(0, 110)
    ax.set_yticks([0, 20, 40, 60, 80, 100])
    ax.set_ylabel("share of prompt tokens (%)")
    ax.set_xlabel("variant (total prompt tokens above each bar)")
    _style(ax)
    ax.grid(False, axis="x")
    _legend(ax, 3)
    return _save(fig, out_path)


def _stacked_bars(ax: Axes, x: np.ndarray, shares: np.ndarray, width: float) -> None:
    """One bar per variant at ``x``, its ``shares`` (percent, a column per source)
    stacked, each share of 6 % or more written on it."""
    bottom = np.zeros(len(x))
    names = ("device hit", "host hit", "recomputed")
    for k, (name, color) in enumerate(zip(names, _SPLIT_COLORS, strict=True)):
        bars = ax.bar(
            x,
            shares[:, k],
            width,
            bottom=bottom,
            color=color,
            label=name,
            edgecolor="white",
            linewidth=0.6,
        )
        for rect, share in zip(bars, shares[:, k], strict=True):
            if share >= 6:
                ax.text(
                    rect.get_x() + rect.get_width() / 2,
                    rect.get_y() + rect.get_height() / 2,
                    f"{share:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="#222222",
                )
        bottom += shares[:, k]


def _label_variants(
    ax: Axes, x: np.ndarray, totals: np.ndarray, labels: list[str], colors: Sequence[str]
) -> None:
    """Each bar's total tokens above it, and the variant names (in their colours) below."""
    for xi, total in zip(x, totals, strict=True):
        ax.text(
            float(xi),
            101,
            f"{_tokens(total)} tok",
            ha="center",
            va="bottom",
            fontsize=8,
            color="#444444",
        )
    ax.set_xticks(
        x,
        labels,
        rotation=0 if len(labels) <= 4 else 25,
        ha="center" if len(labels) <= 4 else "right",
    )
    for tick, color in zip(ax.get_xticklabels(), colors, strict=True):
        tick.set_color(color)
        tick.set_fontweight("bold")


def affinity_counts(run: RunData) -> dict[str, float]:
    """Affinity skip / defer / stop counts of a run (summary metrics, else CSV sums)."""
    out: dict[str, float] = {}
    fallback = {
        "affinity_skips": ("batches", "skips"),
        "affinity_defers": ("batches", "defers"),
        "affinity_stops": None,
    }
    for key, src in fallback.items():
        value = run.metric(key)
        if value is None and src is not None:
            v = _col(run, src[0], src[1])
            value = float(np.nansum(v)) if len(v) else None
        out[key] = float(value) if value is not None else 0.0
    return out


def plot_affinity(runs: Runs, out_path: str | Path) -> Path | None:
    """Grouped bars of affinity skip / defer / stop counts per variant.

    Returns ``None`` and writes nothing when every count is zero (nothing to show).
    """
    counts = [affinity_counts(r) for r in runs]
    kinds = [
        ("affinity_skips", "skips"),
        ("affinity_defers", "defers"),
        ("affinity_stops", "stops"),
    ]
    kinds = [(k, n) for k, n in kinds if any(c[k] > 0 for c in counts)]
    if not kinds:
        return None
    fig, (ax,) = _new_figure()
    ax.set_title("Cache-affinity decisions per variant")
    labels = variant_labels(runs)
    colors = variant_colors(runs)
    group = np.arange(len(kinds))
    width = 0.8 / max(1, len(runs))
    ymax = max(c[k] for c in counts for k, _ in kinds)
    for i, (c, label, color) in enumerate(zip(counts, labels, colors, strict=True)):
        vals = [c[k] for k, _ in kinds]
        xs = group - 0.4 + width * (i + 0.5)
        ax.bar(xs, vals, width * 0.92, color=color, label=label)
        for xv, v in zip(xs, vals, strict=True):
            ax.text(xv, v + ymax * 0.01, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(group, [n for _, n in kinds])
    ax.set_ylim(0, ymax * 1.12)
    ax.set_ylabel("count (decisions)")
    ax.set_xlabel("affinity decision")
    _style(ax)
    ax.grid(False, axis="x")
    _legend(ax, len(runs))
    return _save(fig, out_path)


def _tokens(value: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.0f}"
