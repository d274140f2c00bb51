"""The batches plot of a report: batch size, and per batch the extend, cache-hit and
carried-prefix tokens, over time, one colour per variant (:func:`plot_batches`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import EngFormatter

from prefillkit.report.plot_base import (
    FIGSIZE_TALL,
    Runs,
    twin_kw,
    twin_note,
    twins,
    variant_labels,
)
from prefillkit.report.plot_base import auto_bins as _auto_bins
from prefillkit.report.plot_base import col as _col
from prefillkit.report.plot_base import legend as _legend
from prefillkit.report.plot_base import new_figure as _new_figure
from prefillkit.report.plot_base import no_data as _no_data
from prefillkit.report.plot_base import style as _style
from prefillkit.report.plot_base import variants as _variants
from prefillkit.report.plot_save import save_figure as _save
from prefillkit.report.rundir import RunData

__all__ = ["plot_batches"]


def _binned_mean(x: np.ndarray, y: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of ``y`` in ``bins`` equal-width bins of ``x`` (empty bins dropped)."""
    if len(x) == 0:
        return np.zeros(0), np.zeros(0)
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        return np.array([lo]), np.array([float(y.mean())])
    edges = np.linspace(lo, hi, bins + 1)
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    sums = np.bincount(idx, weights=y, minlength=bins)
    centers = (edges[:-1] + edges[1:]) / 2
    ok = counts > 0
    return centers[ok], sums[ok] / counts[ok]


def plot_batches(runs: Runs, out_path: str | Path, *, max_bins: int = 60) -> Path:
    """Batch size (top) and extend / cache-hit / carried-prefix tokens per batch (bottom).

    The cached tokens of a batch are split as in ``batches.csv`` (``cost/cached.py``):
    cache hits (device + host) of first chunks, and the carried prefix of chunk
    continuations (a run written before the split shows its plain ``cached_tokens``).

    Points are the individual batches; lines are means over equal time bins (about eight
    batches per bin, at most ``max_bins``) so that variants stay comparable when there are
    thousands of batches.
    """
    n_max = max((r.num_batches for r in runs), default=0)
    bins = _auto_bins(n_max, max_bins)
    fig, (ax_size, ax_tok) = _new_figure(FIGSIZE_TALL, rows=2)
    ax_size.set_title("Batches over time")
    entries = 0
    tok_entries = 0
    sizes = [(_col(run, "batches", "start_s"), _col(run, "batches", "size")) for run in runs]
    same, labels = twins(sizes), variant_labels(runs)
    for i, variant in enumerate(_variants(runs)):
        _, label, color, marker = variant
        start, size = sizes[i]
        ok = np.isfinite(start) & np.isfinite(size)
        if not ok.any():
            continue
        x, s = start[ok], size[ok]
        ax_size.scatter(x, s, s=8, alpha=0.3, color=color, edgecolors="none", rasterized=True)
        bx, bs = _binned_mean(x, s, bins)
        note, kw = twin_note(same, i, labels), twin_kw(same, i, 4)
        ax_size.plot(bx, bs, color=color, lw=1.6, marker=marker, label=label + note, **kw)
        entries += 1
        tok_entries += _plot_tokens(ax_tok, variant, start, bins, note, twin_kw(same, i, 3))
    _finish(ax_size, ax_tok, entries, tok_entries, bins)
    return _save(fig, out_path)


def _plot_tokens(
    ax: Axes,
    variant: tuple[RunData, str, str, str],
    start: np.ndarray,
    bins: int,
    note: str,
    kw: dict[str, Any],
) -> int:
    """The token lines of one variant (``(run, label, colour, marker)``; ``note``, ``kw``:
    its twin note and line keywords) on the token panel; returns how many were drawn."""
    run, label, color, marker = variant
    drawn = 0
    for what, ls, v in _token_lines(run):
        if len(v) != len(start):
            continue
        okv = np.isfinite(start) & np.isfinite(v)
        if not okv.any():
            continue
        tx, tv = _binned_mean(start[okv], v[okv], bins)
        ax.plot(
            tx,
            tv,
            color=color,
            lw=1.5,
            marker=marker,
            label=f"{label}: {what}{note}",
            **{**kw, "ls": ls},  # NOTE: the style tells the tokens
        )
        drawn += 1
    return drawn


def _finish(ax_size: Axes, ax_tok: Axes, entries: int, tok_entries: int, bins: int) -> None:
    """Axes labels, limits and legends of both panels (or their "no data" notes)."""
    if entries == 0:
        _no_data(ax_size, "no batches")
        _no_data(ax_tok, "no batches")
        return
    ax_size.set_ylabel("batch size (requests)")
    ax_size.set_ylim(bottom=0)
    _style(ax_size)
    _legend(ax_size, entries)
    if tok_entries == 0:
        _no_data(ax_tok, "no token counts")
    else:
        ax_tok.set_ylabel("tokens per batch")
        ax_tok.set_ylim(bottom=0)
        ax_tok.yaxis.set_major_formatter(EngFormatter(sep=""))
        _style(ax_tok)
        _legend(ax_tok, tok_entries)
    ax_tok.set_xlabel(f"batch start time (s); lines: mean over {bins} time bins")
    ax_tok.tick_params(labelbottom=True)


def _token_lines(run: RunData) -> list[tuple[str, str, np.ndarray]]:
    """``(what, line style, tokens per batch)`` of the token panel of :func:`plot_batches`."""
    extend = _col(run, "batches", "raw_extend_tokens")
    dev = _col(run, "batches", "device_hit_tokens")
    host = _col(run, "batches", "host_hit_tokens")
    carried = _col(run, "batches", "carried_prefix_tokens")
    if len(dev) and len(host) and len(carried):
        return [
            ("extend", "-", extend),
            ("cache hits (device + host)", "--", dev + host),
            ("carried prefix (chunks)", ":", carried),
        ]
    return [
        ("extend", "-", extend),
        ("cached (hits + carried)", "--", _col(run, "batches", "cached_tokens")),
    ]
