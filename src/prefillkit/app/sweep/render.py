"""Reading a sweep: the summary table (rich), the Pareto front, knob effects, the HTML page.

Everything here reads the store (:class:`~prefillkit.app.sweep.store.Store`): the manifest
names the points and their labels, the point files hold the metrics, so
``prefillkit sweep --show DIR`` renders exactly what a finished run printed.

- Pareto front, per workload: the points no other point beats on both p99 TTFT (lower)
  and input throughput (higher).
- Knob effects: one small panel per varied label (knob, rate or seed): every point's p99
  TTFT at each value of that label, with the median per value joined by a line.
- Best point per SLO: for each p99 TTFT bound, the point with the highest input throughput
  that meets it (ties: the lower p99), per workload.
"""

from __future__ import annotations

import base64
import html
import io
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.store import Store, atomic_write_bytes

__all__ = [
    "DEFAULT_SLOS",
    "View",
    "best_per_slo",
    "load_view",
    "pareto_ids",
    "render_store",
    "summary_table",
    "write_html",
]

DEFAULT_SLOS: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)
MAX_TABLE_ROWS = 60


class View:
    """The current grid's points (manifest order) with their stored rows."""

    def __init__(self, manifest: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]]):
        self.manifest = manifest
        self.entries = [e for e in manifest.get("points", []) if isinstance(e, dict)]
        self.rows = rows
        self.varied: list[str] = list(manifest.get("varied", []))

    def ok(self) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
        out: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
        for e in self.entries:
            row = self.rows.get(e["id"])
            if row is not None and row.get("status") == "ok":
                out.append((e, row))
        return out


def load_view(store: Store) -> View:
    manifest = store.read_manifest()
    ids = [e["id"] for e in manifest.get("points", []) if isinstance(e, dict)]
    return View(manifest, store.read_rows(ids))


def _num(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def pareto_ids(view: View) -> set[str]:
    """Ids on the (p99 TTFT, input throughput) Pareto front of their workload."""
    by_workload: dict[str, list[tuple[str, float, float]]] = {}
    for e, row in view.ok():
        p99, thr = _num(row, "ttft_p99_s"), _num(row, "input_throughput_tok_s")
        if p99 is None or thr is None:
            continue
        by_workload.setdefault(str(row.get("workload")), []).append((e["id"], p99, thr))
    front: set[str] = set()
    for pts in by_workload.values():
        for pid, p99, thr in pts:
            dominated = any(
                (q99 <= p99 and qthr >= thr) and (q99 < p99 or qthr > thr) for _, q99, qthr in pts
            )
            if not dominated:
                front.add(pid)
    return front


def best_per_slo(
    view: View, slos: Sequence[float] = DEFAULT_SLOS
) -> list[tuple[str, float, str | None]]:
    """``(workload, p99 bound, best point id or None)`` for each workload and bound."""
    out: list[tuple[str, float, str | None]] = []
    workloads = list(dict.fromkeys(str(row.get("workload")) for _, row in view.ok()))
    for w in workloads:
        for bound in slos:
            best: tuple[float, float, str] | None = None
            for e, row in view.ok():
                p99, thr = _num(row, "ttft_p99_s"), _num(row, "input_throughput_tok_s")
                if str(row.get("workload")) != w or p99 is None or thr is None or p99 > bound:
                    continue
                key = (thr, -p99, e["id"])
                if best is None or key > best:
                    best = key
            out.append((w, bound, best[2] if best else None))
    return out


def _label_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def summary_table(view: View, title: str) -> Table:
    """One row per point (grid order): varied labels, status, TTFT, throughput, front."""
    front = pareto_ids(view)
    table = Table(title=title)
    table.add_column("#", justify="right")
    for name in view.varied:
        table.add_column(name)
    for col in ("TTFT p50", "TTFT p99", "input tok/s", "hit rate", "mean bs", "overloaded"):
        table.add_column(col, justify="right")
    table.add_column("front")
    for i, e in enumerate(view.entries[:MAX_TABLE_ROWS]):
        row = view.rows.get(e["id"], {})
        labels = e.get("labels", {})
        cells = [str(i + 1)] + [_label_text(labels.get(n, "")) for n in view.varied]
        if row.get("status") == "ok":
            thr = _num(row, "input_throughput_tok_s")
            hit = _num(row, "cache_hit_rate")
            bs = _num(row, "mean_batch_size")
            cells += [
                _s(_num(row, "ttft_p50_s")),
                _s(_num(row, "ttft_p99_s")),
                f"{thr:,.0f}" if thr is not None else "-",
                f"{hit:.1%}" if hit is not None else "-",
                f"{bs:.2f}" if bs is not None else "-",
                "yes" if row.get("overloaded") else "no",
                "*" if e["id"] in front else "",
            ]
        else:
            status = row.get("status") or e.get("status") or "pending"
            error = str(row.get("error") or e.get("error") or "")
            cells += [
                status,
                (error[:60] + "...") if len(error) > 60 else error,
                "",
                "",
                "",
                "",
                "",
            ]
        table.add_row(*cells)
    if len(view.entries) > MAX_TABLE_ROWS:
        table.caption = f"first {MAX_TABLE_ROWS} of {len(view.entries)} points (all in the store)"
    else:
        table.caption = "front: on the p99 TTFT / input throughput Pareto front of its workload"
    return table


def slo_table(view: View, slos: Sequence[float] = DEFAULT_SLOS) -> Table:
    index = {e["id"]: (i, e) for i, e in enumerate(view.entries)}
    table = Table(title="best point per SLO (highest input throughput with p99 TTFT <= bound)")
    for col in ("workload", "p99 TTFT <=", "#", "point", "p99", "input tok/s"):
        table.add_column(col)
    for w, bound, pid in best_per_slo(view, slos):
        if pid is None:
            table.add_row(w, _s(bound), "-", "(none meets it)", "", "")
            continue
        i, e = index[pid]
        row = view.rows[pid]
        knobs = " ".join(
            f"{k}={_label_text(v)}" for k, v in e.get("labels", {}).items() if k in view.varied
        )
        thr = _num(row, "input_throughput_tok_s") or 0.0
        table.add_row(w, _s(bound), str(i + 1), knobs, _s(_num(row, "ttft_p99_s")), f"{thr:,.0f}")
    return table


# --------------------------------------------------------------------------- plots


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


def pareto_figure(view: View, x_key: str = "input_throughput_tok_s") -> Any:
    """The figure of :func:`pareto_png` (None without a finished point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = pareto_ids(view)
    index = {e["id"]: i + 1 for i, e in enumerate(view.entries)}
    knobs = [n for n in view.varied if n not in ("workload", "seed", "rate", "time_scale")]
    color_by = knobs[0] if knobs else None
    groups: dict[str, list[tuple[str, float, float, str]]] = {}
    for e, row in view.ok():
        p99, x = _num(row, "ttft_p99_s"), _num(row, x_key)
        if p99 is None or x is None:
            continue
        tag = _label_text(e.get("labels", {}).get(color_by, "")) if color_by else "points"
        groups.setdefault(str(row.get("workload")), []).append((e["id"], x, p99, tag))
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(6.4 * len(groups), 4.4), squeeze=False)
    for ax, (w, pts) in zip(axes[0], groups.items(), strict=True):
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
        _label_front(ax, [(x, y, f"#{index[pid]}") for pid, x, y, _ in fp])
    return fig


def gpus_png(view: View) -> bytes | None:
    """p99 TTFT vs GPUs (``tp_size``) when the grid varies it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [(r.get("cfg_tp_size"), _num(r, "ttft_p99_s")) for _, r in view.ok()]
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


def knob_effect(view: View, name: str, values: Sequence[object]) -> list[tuple[list[float], float]]:
    """Per value of label ``name``: the finished points' p99 TTFTs and their median
    (``statistics.median``: the mean of the middle two for an even count; NaN for none)."""
    out: list[tuple[list[float], float]] = []
    for v in values:
        here = [
            y
            for e, r in view.ok()
            if e.get("labels", {}).get(name) == v and (y := _num(r, "ttft_p99_s")) is not None
        ]
        out.append((here, statistics.median(here) if here else math.nan))
    return out


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
        ax = axes[k // cols][k % cols]
        values: list[object] = []
        for e, _ in view.ok():
            v = e.get("labels", {}).get(name)
            if v not in values:
                values.append(v)
        try:
            values.sort()  # type: ignore[type-var]
        except TypeError:
            pass
        xs, ys, med = [], [], []
        for j, (here, median) in enumerate(knob_effect(view, name, values)):
            xs += [j] * len(here)
            ys += here
            med.append(median)
        ax.scatter(xs, ys, s=14, color="0.6")
        ax.plot(range(len(values)), med, "o-", color="C0")
        ax.set_xticks(range(len(values)), [_label_text(v) for v in values], rotation=30)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("TTFT p99 (s)")
        ax.grid(alpha=0.3)
    for k in range(len(names), rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    return _fig_png(fig)


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}"></figure>'


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c.header))}</th>" for c in table.columns)
    n = table.row_count
    body = []
    for i in range(n):
        cells = "".join(f"<td>{html.escape(str(c._cells[i]))}</td>" for c in table.columns)
        body.append(f"<tr>{cells}</tr>")
    title = f"<h2>{html.escape(str(table.title))}</h2>" if table.title else ""
    caption = f"<p>{html.escape(str(table.caption))}</p>" if table.caption else ""
    return f"{title}<table><tr>{head}</tr>{''.join(body)}</table>{caption}"


def write_html(
    view: View, path: Path, title: str, extra_tables: Sequence[Table] = ()
) -> bytes | None:
    """Write the page atomically; returns the Pareto PNG (also saved beside it)."""
    pareto = pareto_png(view)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>",
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}",
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}img{max-width:100%}",
        "</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{len(view.entries)} points, {len(view.ok())} finished; store: "
        f"{html.escape(str(path.parent))}</p>",
        "<h2>Pareto front</h2>",
        _img(pareto, "Pareto front"),
        _img(gpus_png(view), "p99 TTFT vs GPUs"),
        "<h2>Knob effects</h2>",
        _img(effects_png(view), "knob effects"),
        _html_table(slo_table(view)),
        *(_html_table(t) for t in extra_tables),
        _html_table(summary_table(view, "points")),
        "</body></html>",
    ]
    atomic_write_bytes(path, "\n".join(parts).encode())
    if pareto is not None:
        atomic_write_bytes(path.with_name("pareto.png"), pareto)
    return pareto


def render_store(root: str | Path, console: Any, *, write_page: bool = True) -> Path | None:
    """Print a store's tables on ``console`` and (re)write its ``report.html``."""
    import json

    from prefillkit.app.sweep.capacity import CAPACITY_FILE, capacity_table

    store = Store.existing(root)
    view = load_view(store)
    name = str(view.manifest.get("name", Path(root).name))
    kind = view.manifest.get("kind", "sweep")
    extra: list[Table] = []
    cap_path = store.root / CAPACITY_FILE
    if kind == "capacity" and cap_path.is_file():
        try:
            result = json.loads(cap_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SweepError(f"{cap_path}: cannot read: {' '.join(str(exc).split())}") from None
        except RecursionError:
            raise SweepError(f"{cap_path}: cannot read: JSON nested too deeply") from None
        try:
            extra.append(capacity_table(result))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise SweepError(f"{cap_path}: not a capacity result ({exc!r:.80})") from None
    else:
        console.print(summary_table(view, f"prefillkit sweep: {name}"))
        console.print(slo_table(view))
    for t in extra:
        console.print(t)
    if not write_page:
        return None
    target = store.root / "report.html"
    write_html(view, target, f"prefillkit {kind}: {name}", extra)
    return target
