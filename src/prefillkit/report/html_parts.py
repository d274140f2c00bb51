"""The pieces the sections of the HTML report (:mod:`prefillkit.report.html`) are built
from: the inline style sheet and script, escaping, config values as text, and tables,
header and value cells.

All text taken from the runs is escaped with :func:`html.escape` (:func:`escape`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from prefillkit.report.paired import format_metric
from prefillkit.report.plot_base import variant_colors, variant_labels
from prefillkit.report.rundir import RunData

__all__ = [
    "PAGE_CSS",
    "PAGE_SCRIPT",
    "escape",
    "metric_cell",
    "num",
    "num_td",
    "run_header_cells",
    "sub_cell",
    "table",
    "value_text",
]

PAGE_CSS = """
:root { color-scheme: light; }
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  margin: 0; background: #f6f7f9; color: #1d2330; line-height: 1.45; font-size: 15px; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 48px; background: #fff;
  min-height: 100vh; box-shadow: 0 0 12px rgba(0,0,0,.06); }
h1 { font-size: 1.7em; margin: 0 0 4px; }
h2 { font-size: 1.3em; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #e3e6ec; }
h3 { font-size: 1.08em; margin: 26px 0 6px; }
p.meta, p.note, figcaption { color: #5a6272; font-size: .92em; margin: 4px 0 10px; }
p.warn { background: #fff4e0; border-left: 4px solid #e69f00; padding: 6px 10px; }
.table-wrap { overflow-x: auto; margin: 8px 0 14px; }
table { border-collapse: collapse; font-size: .9em; }
th, td { border: 1px solid #dde1e8; padding: 4px 9px; vertical-align: top; }
th { background: #eef1f5; text-align: left; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.key { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  white-space: nowrap; }
td.val { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  word-break: break-all; }
tr:nth-child(even) td { background: #fafbfc; }
tr.section td { background: #eef1f5; font-weight: 600; }
.sub { display: block; color: #5a6272; font-size: .86em; }
.swatch { display: inline-block; width: .8em; height: .8em; border-radius: 2px;
  margin-right: 5px; vertical-align: -1px; }
.badge { display: inline-block; font-size: .78em; padding: 0 6px; border-radius: 8px;
  background: #fde2c4; color: #7a4100; margin-left: 6px; }
.badge.base { background: #dbe8f7; color: #17406b; }
details { margin: 6px 0; border: 1px solid #e3e6ec; border-radius: 4px; padding: 4px 10px; }
details > summary { cursor: pointer; font-weight: 600; padding: 2px 0; }
figure { margin: 8px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid #eceff3; display: block; }
"""

PAGE_SCRIPT = """
(function () {
  function mark() {
    var imgs = document.images, n = 0;
    for (var i = 0; i < imgs.length; i++) {
      if (imgs[i].complete && imgs[i].naturalWidth > 0) { n++; }
    }
    document.body.dataset.imagesLoaded = String(n);
    document.body.dataset.imagesTotal = String(imgs.length);
  }
  if (document.readyState === "complete") { mark(); }
  else { window.addEventListener("load", mark); }
})();
"""


def escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def value_text(value: Any) -> str:
    """Config value as compact text: strings as-is, everything else as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def run_header_cells(runs: Sequence[RunData]) -> str:
    cells = []
    for run, label, color in zip(runs, variant_labels(runs), variant_colors(runs), strict=True):
        badge = '<span class="badge">partial</span>' if run.partial else ""
        cells.append(
            f'<th><span class="swatch" style="background:{escape(color)}"></span>{escape(label)}'
            f"{badge}</th>"
        )
    return "".join(cells)


def table(table_id: str, head: str, body_rows: list[str]) -> str:
    return (
        f'<div class="table-wrap"><table id="{escape(table_id)}"><thead>{head}</thead>'
        f"<tbody>{''.join(body_rows)}</tbody></table></div>"
    )


def num_td(text: str) -> str:
    return f'<td class="num">{escape(text)}</td>'


def sub_cell(text: str) -> str:
    """A number cell; "value (delta, ×ratio)" -> value on the first line, delta/ratio
    underneath."""
    if text.endswith(")") and " (" in text:
        value, rest = text.split(" (", 1)
        return f'<td class="num">{escape(value)}<span class="sub">{escape(rest[:-1])}</span></td>'
    return f'<td class="num">{escape(text)}</td>'


def num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def metric_cell(key: str, value: Any) -> str:
    if value is None or isinstance(value, (list, dict)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    number = num(value)
    if number is None:
        return value_text(value)
    return format_metric(key, number)
