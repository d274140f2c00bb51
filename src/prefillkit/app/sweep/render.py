"""Reading a sweep: the summary table (rich), the Pareto front, knob effects, the HTML page.

Everything here reads the store (:class:`~prefillkit.app.sweep.store.Store`): the manifest
names the points and their labels, the point files hold the metrics, so
``prefillkit sweep --show DIR`` renders exactly what a finished run printed. The points
as read (:class:`~prefillkit.app.sweep.view.View`) and what is computed from them are
:mod:`.view`'s; the figures are :mod:`.figures`'.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.figures import effects_png, gpus_png, pareto_png
from prefillkit.app.sweep.store import Store, atomic_write_bytes
from prefillkit.app.sweep.view import (
    DEFAULT_SLOS,
    View,
    best_per_slo,
    label_text,
    load_view,
    num,
    pareto_ids,
)

__all__ = [
    "render_store",
    "summary_table",
    "write_html",
]

MAX_TABLE_ROWS = 60


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
        cells = [str(i + 1)] + [label_text(labels.get(n, "")) for n in view.varied]
        cells += _metric_cells(e, row, front)
        table.add_row(*cells)
    if len(view.entries) > MAX_TABLE_ROWS:
        table.caption = f"first {MAX_TABLE_ROWS} of {len(view.entries)} points (all in the store)"
    else:
        table.caption = "front: on the p99 TTFT / input throughput Pareto front of its workload"
    return table


def _metric_cells(entry: Mapping[str, Any], row: Mapping[str, Any], front: set[str]) -> list[str]:
    """A point's cells after its labels: its metrics and whether it is on the front, or
    (not finished) its status and error."""
    if row.get("status") == "ok":
        thr = num(row, "input_throughput_tok_s")
        hit = num(row, "cache_hit_rate")
        bs = num(row, "mean_batch_size")
        return [
            _s(num(row, "ttft_p50_s")),
            _s(num(row, "ttft_p99_s")),
            f"{thr:,.0f}" if thr is not None else "-",
            f"{hit:.1%}" if hit is not None else "-",
            f"{bs:.2f}" if bs is not None else "-",
            "yes" if row.get("overloaded") else "no",
            "*" if entry["id"] in front else "",
        ]
    status = row.get("status") or entry.get("status") or "pending"
    error = str(row.get("error") or entry.get("error") or "")
    return [
        status,
        (error[:60] + "...") if len(error) > 60 else error,
        "",
        "",
        "",
        "",
        "",
    ]


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
            f"{k}={label_text(v)}" for k, v in e.get("labels", {}).items() if k in view.varied
        )
        thr = num(row, "input_throughput_tok_s") or 0.0
        table.add_row(w, _s(bound), str(i + 1), knobs, _s(num(row, "ttft_p99_s")), f"{thr:,.0f}")
    return table


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
