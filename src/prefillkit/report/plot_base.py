"""What every report plot shares: figure size, each variant's colour, marker and label,
the axes helpers, and the styles that keep identical series apart.

Identical series. Two variants often draw the very same line (the same TTFT CDF, queue
or window series, e.g. two policies that never had a choice to make); the later one
would hide the earlier. :func:`twins` finds, for each variant, the first earlier variant
with the same series; :func:`twin_kw` draws such a variant dashed with hollow, larger
markers (the earlier line shows through the gaps, its markers inside the hollow ones),
and :func:`twin_note` adds "identical to X" to its legend entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from prefillkit.report.rundir import RunData

__all__ = [
    "DPI",
    "FIGSIZE",
    "FIGSIZE_TALL",
    "MARKERS",
    "PALETTE",
    "Runs",
    "auto_bins",
    "col",
    "legend",
    "log_seconds",
    "new_figure",
    "no_data",
    "style",
    "twin_kw",
    "twin_note",
    "twins",
    "variant_colors",
    "variant_labels",
    "variant_markers",
    "variants",
]

FIGSIZE: tuple[float, float] = (8.0, 4.5)
FIGSIZE_TALL: tuple[float, float] = (8.0, 6.0)
DPI = 110
# Colour-blind-friendly (Okabe-Ito order, then tab10 for more variants).
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
    "#8c564b",
    "#7f7f7f",
)
# One marker shape per variant (by position, as the colours), so that variants stay
# apart where colours overlap or are printed in grey.
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")

Runs = Sequence[RunData]


def variant_labels(runs: Runs) -> list[str]:
    """Run names, made unique (``name``, ``name #2``, ...) for legends and tick labels."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for run in runs:
        n = seen.get(run.name, 0) + 1
        seen[run.name] = n
        out.append(run.name if n == 1 else f"{run.name} #{n}")
    return out


def variant_colors(runs: Runs) -> list[str]:
    """Colour of each run, by position: the same variant keeps its colour in every plot."""
    return [PALETTE[i % len(PALETTE)] for i in range(len(runs))]


def variant_markers(runs: Runs) -> list[str]:
    """Marker shape of each run, by position (the same in every plot)."""
    return [MARKERS[i % len(MARKERS)] for i in range(len(runs))]


def variants(runs: Runs) -> list[tuple[RunData, str, str, str]]:
    """``(run, label, colour, marker)`` of each run."""
    return list(
        zip(runs, variant_labels(runs), variant_colors(runs), variant_markers(runs), strict=True)
    )


def new_figure(size: tuple[float, float] = FIGSIZE, rows: int = 1) -> tuple[Figure, list[Axes]]:
    fig, axes = plt.subplots(rows, 1, figsize=size, dpi=DPI, sharex=rows > 1, squeeze=False)
    return fig, list(axes[:, 0])


def no_data(ax: Axes, message: str = "no data") -> None:
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=13,
        color="#666666",
    )
    ax.set_xticks([])
    ax.set_yticks([])


def legend(ax: Axes, n_entries: int) -> None:
    """Legend outside the plot area, on the right, so it never hides data."""
    if n_entries == 0:
        return
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        frameon=False,
        fontsize=9,
    )


def col(run: RunData, table: str, name: str) -> np.ndarray:
    cols = run.requests if table == "requests" else run.batches
    arr = cols.get(name)
    if arr is None:
        return np.zeros(0, dtype=float)
    try:
        return np.asarray(arr, dtype=float)
    except (TypeError, ValueError):
        return np.full(len(arr), np.nan)


def log_seconds(axis: Axis) -> None:
    """Log-scaled seconds axis with plain tick labels (0.05, 0.1, 0.2, 0.5, 1, ...)."""
    axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0), numticks=12))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def auto_bins(n_points: int, max_bins: int) -> int:
    """About eight batches per bin, between 5 and ``max_bins`` bins."""
    return int(min(max_bins, max(5, n_points // 8)))


def style(ax: Axes) -> None:
    ax.grid(True, which="major", alpha=0.3)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)


# --------------------------------------------------------------------------- twins

#: Dash patterns of variants drawn over an identical earlier one (the first such
#: variant dashed, the second dotted, the third dash-dotted, ...).
TWIN_DASHES: tuple[tuple[float, tuple[float, ...]], ...] = (
    (0.0, (4.0, 3.0)),
    (0.0, (1.0, 2.0)),
    (0.0, (6.0, 2.0, 1.0, 2.0)),
)


def twins(series: Sequence[Sequence[np.ndarray] | None]) -> list[int | None]:
    """For each variant, the first earlier variant whose series (a tuple of arrays; NaN
    equals NaN) is the same, else ``None``; a ``None`` or empty series has no twin."""
    out: list[int | None] = []
    for i, mine in enumerate(series):
        out.append(next((j for j in range(i) if out[j] is None and _same(series[j], mine)), None))
    return out


def _same(a: Sequence[np.ndarray] | None, b: Sequence[np.ndarray] | None) -> bool:
    if a is None or b is None or len(a) != len(b) or not any(len(x) for x in a):
        return False
    return all(
        np.shape(x) == np.shape(y) and np.array_equal(x, y, equal_nan=True)
        for x, y in zip(a, b, strict=True)
    )


def twin_kw(same: Sequence[int | None], i: int, ms: float) -> dict[str, Any]:
    """Line keywords of variant ``i`` (``same``: :func:`twins`): as it is without a twin;
    with one, dashed (each further copy of the same series another pattern) and with
    hollow markers, larger for each further copy, so that every copy stays visible."""
    twin = same[i]
    if twin is None:
        return {"ms": ms}
    rank = sum(1 for j in range(i) if same[j] == twin)  # earlier copies of the same series
    return {
        "ms": ms * (1.7 + 0.6 * rank),
        "ls": TWIN_DASHES[rank % len(TWIN_DASHES)],
        "markerfacecolor": "none",
        "markeredgewidth": 1.3,
    }


def twin_note(same: Sequence[int | None], i: int, labels: Sequence[str]) -> str:
    """``" (identical to X)"`` for variant ``i`` with a twin, else ``""``."""
    twin = same[i]
    return "" if twin is None else f" (identical to {labels[twin]})"
