"""The figures of a sweep's page (matplotlib, PNG): the Pareto front, p99 TTFT vs GPUs and
the knob effects (small multiples), each drawn from a :class:`~prefillkit.app.sweep.view.View`.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from prefillkit.app.sweep.view import View, knob_effect, label_text, num, pareto_ids

__all__ = ["LABEL_OFFSETS", "effects_png", "gpus_png", "pareto_figure", "pareto_png"]


def _fig_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


#: Offsets (points) tried for a front point's label, nearest first: above left, above
#: right, below left, below right, then the same rows further out.
LABEL_OFFSETS: tuple[tuple[float, float, str, str], ...] = tuple(
    offset
    for ring in range(12)
    for offset in (
        (-6.0, 7.0 + 10.0 * ring, "right", "bottom"),
        (6.0, 7.0 + 10.0 * ring, "left", "bottom"),
        (-6.0, -7.0 - 10.0 * ring, "right", "top"),
        (6.0, -7.0 - 10.0 * ring, "left", "top"),
    )
)
_FRONT_MARKER_S = 90.0  # scatter size (points^2) of the rings around the front's points


def _label_front(ax: Any, points: Sequence[tuple[float, float, str]]) -> None:
    """Annotate ``(x, y, text)`` points so no two labels overlap, nor a label a point's
    ring: each takes the first of :data:`LABEL_OFFSETS` clear of those placed before it
    (close points, as a capacity search's probes near the limit, get labels further out)."""
    from matplotlib.transforms import Bbox

    if not points:
        return
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits the offsets hang on
    r = math.sqrt(_FRONT_MARKER_S) / 2 * fig.dpi / 72  # ring radius, pixels
    taken = [
        Bbox.from_bounds(px - r, py - r, 2 * r, 2 * r)
        for px, py in ax.transData.transform([(x, y) for x, y, _ in points])
    ]
    last = len(LABEL_OFFSETS) - 1
    for x, y, text in points:
        for k, (dx, dy, ha, va) in enumerate(LABEL_OFFSETS):
            ann = ax.annotate(
                text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=8, ha=ha, va=va
            )
            box = ann.get_window_extent(renderer).padded(1.5)
            if k == last or not any(box.overlaps(other) for other in taken):
                taken.append(box)  # the last offset stays even if crowded
                break
            ann.remove()


def pareto_png(view: View, x_key: str = "input_throughput_tok_s") -> bytes | None:
    """Scatter of p99 TTFT vs ``x_key`` per workload, the front joined and its points
    numbered as in the table (:func:`pareto_figure`)."""
    fig = pareto_figure(view, x_key)
    return None if fig is None else _fig_png(fig)


#: One point of the Pareto figure: ``(id, x, p99 TTFT, colour tag)``.
_Point = tuple[str, float, float, str]


def pareto_figure(view: View, x_key: str = "input_throughput_tok_s") -> Any:
    """The figure of :func:`pareto_png` (None without a finished point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = pareto_ids(view)
    index = {e["id"]: i + 1 for i, e in enumerate(view.entries)}
    knobs = [n for n in view.varied if n not in ("workload", "seed", "rate", "time_scale")]
    color_by = knobs[0] if knobs else None
    groups = _pareto_groups(view, x_key, color_by)
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(6.4 * len(groups), 4.4), squeeze=False)
    for ax, (w, pts) in zip(axes[0], groups.items(), strict=True):
        fp = _pareto_panel(ax, w, pts, front, color_by, x_key)
        _label_front(ax, [(x, y, f"#{index[pid]}") for pid, x, y, _ in fp])
    return fig


def _pareto_groups(view: View, x_key: str, color_by: str | None) -> dict[str, list[_Point]]:
    """Workload -> its finished points with both values, tagged with their ``color_by``
    label (``"points"`` without one)."""
    groups: dict[str, list[_Point]] = {}
    for e, row in view.ok():
        p99, x = num(row, "ttft_p99_s"), num(row, x_key)
        if p99 is None or x is None:
            continue
        tag = label_text(e.get("labels", {}).get(color_by, "")) if color_by else "points"
        groups.setdefault(str(row.get("workload")), []).append((e["id"], x, p99, tag))
    return groups


def _pareto_panel(
    ax: Any, w: str, pts: Sequence[_Point], front: set[str], color_by: str | None, x_key: str
) -> list[_Point]:
    """Draw workload ``w``'s points (a colour per tag) and its front on ``ax``; the front's
    points, by x."""
    tags = list(dict.fromkeys(p[3] for p in pts))
    for k, tag in enumerate(tags):
        mine = [p for p in pts if p[3] == tag]
        ax.scatter(
            [p[1] for p in mine],
            [p[2] for p in mine],
            s=26,
            color=f"C{k % 10}",
            label=f"{color_by} = {tag}" if color_by else tag,
            zorder=3,
        )
    fp = sorted((p for p in pts if p[0] in front), key=lambda p: p[1])
    ax.plot(
        [p[1] for p in fp],
        [p[2] for p in fp],
        "-",
        color="0.25",
        lw=1.2,
        label="Pareto front",
        zorder=2,
    )
    ax.scatter(
        [p[1] for p in fp],
        [p[2] for p in fp],
        s=_FRONT_MARKER_S,
        facecolors="none",
        edgecolors="0.25",
        zorder=4,
    )
    ax.set_xlabel("input throughput (tok/s)" if x_key.startswith("input") else x_key)
    ax.set_ylabel("TTFT p99 (s)")
    ax.set_title(f"{w}: p99 TTFT vs input throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fp


def gpus_png(view: View) -> bytes | None:
    """p99 TTFT vs GPUs (``tp_size``) when the grid varies it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [(r.get("cfg_tp_size"), num(r, "ttft_p99_s")) for _, r in view.ok()]
    pts2 = [(float(g), y) for g, y in pts if isinstance(g, int) and y is not None]
    if len({g for g, _ in pts2}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.scatter([g for g, _ in pts2], [y for _, y in pts2], s=22)
    ax.set_xlabel("GPUs (tp_size)")
    ax.set_ylabel("TTFT p99 (s)")
    ax.set_title("p99 TTFT vs GPUs")
    ax.grid(alpha=0.3)
    return _fig_png(fig)


def effects_png(view: View) -> bytes | None:
    """Small multiples: p99 TTFT at each value of each varied label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in view.varied if n != "workload"]
    if not names:
        return None
    cols = min(3, len(names))
    rows_n = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False)
    for k, name in enumerate(names):
        _effect_panel(axes[k // cols][k % cols], view, name)
    for k in range(len(names), rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    return _fig_png(fig)


def _label_values(view: View, name: str) -> list[object]:
    """The values label ``name`` takes on the finished points, once each, sorted when they
    compare."""
    values: list[object] = []
    for e, _ in view.ok():
        v = e.get("labels", {}).get(name)
        if v not in values:
            values.append(v)
    try:
        values.sort()  # type: ignore[type-var]
    except TypeError:
        pass
    return values


def _effect_panel(ax: Any, view: View, name: str) -> None:
    """One small multiple on ``ax``: every point's p99 TTFT at each value of label
    ``name``, the medians joined by a line."""
    values = _label_values(view, name)
    xs, ys, med = [], [], []
    for j, (here, median) in enumerate(knob_effect(view, name, values)):
        xs += [j] * len(here)
        ys += here
        med.append(median)
    ax.scatter(xs, ys, s=14, color="0.6")
    ax.plot(range(len(values)), med, "o-", color="C0")
    ax.set_xticks(range(len(values)), [label_text(v) for v in values], rotation=30)
    ax.set_title(name, fontsize=10)
    ax.set_ylabel("TTFT p99 (s)")
    ax.grid(alpha=0.3)
