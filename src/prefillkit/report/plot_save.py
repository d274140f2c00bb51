"""Writing a finished report figure as a PNG file, the same bytes on every run.

The figure is rendered at :data:`~prefillkit.report.plot_base.DPI` without matplotlib's
"Software" metadata entry, closed, and written atomically
(:func:`~prefillkit.outfile.write_bytes`).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from prefillkit.outfile import write_bytes
from prefillkit.report.plot_base import DPI

__all__ = ["save_figure"]


def save_figure(fig: Figure, out_path: str | Path) -> Path:
    """Write ``fig`` to ``out_path`` (its folder made if missing) as a PNG; close it."""
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, bbox_inches="tight", format="png", metadata={"Software": None})
    plt.close(fig)
    write_bytes(path, buf.getvalue())
    return path
