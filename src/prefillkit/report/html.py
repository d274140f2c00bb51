"""One self-contained static HTML report for one or more runs.

The page needs nothing but itself: plots are PNGs embedded as base64 ``data:`` URIs, the
style sheet is inline, and nothing is fetched from the network. A tiny inline script
marks ``<body data-images-loaded="N">`` with the number of images that decoded (used by
the headless-browser test; the page reads fine without scripts). All text taken from the
runs is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefillkit.outfile import write_text
from prefillkit.report.deployment import deployment_panel
from prefillkit.report.fleet_panel import fleet_section
from prefillkit.report.html_parts import PAGE_CSS as _CSS
from prefillkit.report.html_parts import PAGE_SCRIPT as _SCRIPT
from prefillkit.report.html_parts import escape as _e
from prefillkit.report.html_parts import metric_cell as _metric_cell
from prefillkit.report.html_parts import num as _num
from prefillkit.report.html_parts import num_td as _num_td
from prefillkit.report.html_parts import run_header_cells as _run_header_cells
from prefillkit.report.html_parts import sub_cell as _sub_cell
from prefillkit.report.html_parts import table as _table
from prefillkit.report.html_parts import value_text as _value_text
from prefillkit.report.paired import (
    IMPROVED_BELOW,
    KEY_METRICS,
    WORSE_ABOVE,
    comparison_rows,
    format_metric,
    headline_rows,
    metric_label,
)
from prefillkit.report.plots import PLOTS, variant_colors, variant_labels
from prefillkit.report.rundir import RunData
from prefillkit.report.verdicts import N_RULE, comparison_notes

__all__ = ["write_report"]

# --------------------------------------------------------------------------- sections


def _runs_section(runs: Sequence[RunData]) -> str:
    head = "<tr><th>run</th><th>workload</th><th>requests</th><th>status</th><th>folder</th></tr>"
    rows = []
    for run, label, color in zip(runs, variant_labels(runs), variant_colors(runs), strict=True):
        wl = run.workload
        source = wl.get("source", "-")
        n_req = wl.get("requests", run.metric("requests"))
        status = "partial (stopped early)" if run.partial else "complete"
        folder = run.path.name if run.path is not None else "-"
        rows.append(
            f'<tr><td><span class="swatch" style="background:{_e(color)}"></span>{_e(label)}'
            f'</td><td class="val">{_e(_value_text(source))}</td>'
            f'<td class="num">{_e(format_metric("requests", _num(n_req)))}</td>'
            f'<td>{_e(status)}</td><td class="key">{_e(folder)}</td></tr>'
        )
    out = "<h2>Runs</h2>" + _table("runs", head, rows)
    partial = [label for run, label in zip(runs, variant_labels(runs), strict=True) if run.partial]
    if partial:
        out += (
            f'<p class="warn">Partial run(s): {_e(", ".join(partial))}. Their metrics cover only '
            "the part of the trace that was simulated.</p>"
        )
    return out


def _config_section(runs: Sequence[RunData]) -> str:
    parts = ["<h2>Configuration</h2>", _config_diff(runs)]
    for run, label in zip(runs, variant_labels(runs), strict=True):
        parts.append(_full_config(run, label))
    return "".join(parts)


def _config_diff(runs: Sequence[RunData]) -> str:
    """The flags that differ between the runs (a table), or a note saying there are none."""
    keys: list[str] = []
    for run in runs:
        keys.extend(k for k in run.config if k not in keys)
    differing = [
        k for k in keys if len({(k in r.config, _value_text(r.config.get(k))) for r in runs}) > 1
    ]
    if len(runs) < 2:
        return '<p class="note">Single run: see its full configuration below.</p>'
    if not differing:
        return '<p class="note">All runs share the same configuration flags.</p>'
    head = f"<tr><th>flag (differs between runs)</th>{_run_header_cells(runs)}</tr>"
    rows = []
    for k in differing:
        cells = "".join(
            f'<td class="val">{_e(_value_text(r.config[k]))}</td>'
            if k in r.config
            else '<td class="val"><em>(unset)</em></td>'
            for r in runs
        )
        rows.append(f'<tr><td class="key">{_e(k)}</td>{cells}</tr>')
    return _table("config-diff", head, rows)


def _full_config(run: RunData, label: str) -> str:
    """One run's every flag and its workload, in a ``<details>``."""
    parts = [
        f"<details><summary>Full configuration: {_e(label)} ({len(run.config)} flags)</summary>"
    ]
    rows = [
        f'<tr><td class="key">{_e(k)}</td><td class="val">{_e(_value_text(v))}</td></tr>'
        for k, v in run.config.items()
    ]
    if rows:
        parts.append(_table("", "<tr><th>flag</th><th>value</th></tr>", rows))
    else:
        parts.append('<p class="note">No configuration recorded.</p>')
    if run.workload:
        wl_rows = [
            f'<tr><td class="key">{_e(k)}</td><td class="val">{_e(_value_text(v))}</td></tr>'
            for k, v in run.workload.items()
        ]
        parts.append(_table("", "<tr><th>workload</th><th>value</th></tr>", wl_rows))
    parts.append("</details>")
    return "".join(parts)


def _deployment_section(runs: Sequence[RunData]) -> str:
    """The deployment panel: one row per setting, a value (and its source) per run."""
    panels = [deployment_panel(run.summary) for run in runs]
    labels = [label for label, _, _ in panels[0]]
    for panel in panels[1:]:
        labels += [label for label, _, _ in panel if label not in labels]
    by_run = [{label: (value, source) for label, value, source in p} for p in panels]
    head = f"<tr><th>setting</th>{_run_header_cells(runs)}</tr>"
    rows = []
    for label in labels:
        cells = []
        for table in by_run:
            value, source = table.get(label, ("-", "-"))
            sub = f'<span class="sub">{_e(source)}</span>' if source != "-" else ""
            cells.append(f"<td>{_e(value)}{sub}</td>")
        rows.append(f"<tr><td>{_e(label)}</td>{''.join(cells)}</tr>")
    return (
        "<h2>Deployment</h2>"
        '<p class="meta">What was simulated; under each value, where it came from (the launch '
        "line, a config file, a preset or a default).</p>" + _table("deployment", head, rows)
    )


def _headline_section(cmp: dict[str, Any]) -> str:
    """The comparison's lead table: variants side by side, paired CIs, a verdict per row."""
    header, rows = headline_rows(cmp)
    ci = float(cmp.get("ci", 0.95))
    head = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>"
    body = [
        f"<tr><td>{_e(r[0])}</td>{''.join(_sub_cell(c) for c in r[1:-1])}<td>{_e(r[-1])}</td></tr>"
        for r in rows
    ]
    return (
        f"<h2>Verdict vs baseline {_e(cmp.get('baseline', ''))}</h2>"
        f'<p class="meta">Under each value: the difference from the baseline; for the TTFT '
        f"statistics with its paired {ci * 100:.0f}% bootstrap interval over the requests "
        f"finished in both runs ({_e(cmp.get('n_boot', '?'))} resamples). Verdict: "
        "<em>better</em> / <em>worse</em> when the interval excludes 0 (metrics without an "
        "interval: when the value moved by more than 1%), <em>no clear change</em> when it "
        "holds 0.</p>"
        + _table("headline", head, body)
        + f'<p class="note">{_e(N_RULE)}</p>'
        + "".join(f'<p class="warn">{_e(note)}</p>' for note in comparison_notes(cmp))
    )


def _summary_section(runs: Sequence[RunData]) -> str:
    keys = [k for k, _, _ in KEY_METRICS]
    extra: list[str] = []
    for run in runs:
        extra.extend(k for k in run.metrics if k not in keys and k not in extra)
    rows = []
    for k in keys + extra:
        values = [run.metrics.get(k) for run in runs]
        if all(v is None or isinstance(v, (list, dict)) for v in values):
            continue  # nothing, or per-window lists (plotted instead)
        cells = "".join(f'<td class="num">{_e(_metric_cell(k, v))}</td>' for v in values)
        rows.append(f"<tr><td>{_e(metric_label(k))}</td>{cells}</tr>")
    head = f"<tr><th>metric</th>{_run_header_cells(runs)}</tr>"
    if not rows:
        return '<h2>Summary</h2><p class="note">No metrics recorded.</p>'
    return "<h2>Summary</h2>" + _table("summary", head, rows)


def _fleet_section(runs: Sequence[RunData]) -> str:
    fleets = [
        (r.name, r.summary["fleet"]) for r in runs if isinstance(r.summary.get("fleet"), dict)
    ]
    return fleet_section(fleets)


def _comparison_section(runs: Sequence[RunData], cmp: dict[str, Any]) -> str:
    header, rows, paired = comparison_rows(cmp)
    ci = float(cmp.get("ci", 0.95))
    head = _comparison_head(runs, cmp, header[0])
    # "value (delta, ×ratio)" -> value on the first line, delta/ratio underneath.
    body = [f"<tr><td>{_e(r[0])}</td>{''.join(_sub_cell(c) for c in r[1:])}</tr>" for r in rows]
    parts = [
        "<h2>Comparison</h2>",
        f'<p class="meta">Baseline: <strong>{_e(cmp.get("baseline", ""))}</strong>. Each cell '
        "shows the value, then the difference and the ratio against the baseline.</p>",
        _table("comparison", head, body),
    ]
    if paired:
        parts.append(_paired_part(cmp, ci, head, paired))
    return "".join(parts)


def _comparison_head(runs: Sequence[RunData], cmp: dict[str, Any], first: str) -> str:
    """The comparison tables' header row: ``first``, then each variant (baseline marked)."""
    # compare_runs keeps the order of the runs, so variant i is runs[i] (same colour).
    colors = variant_colors(runs)
    head_cells = [f"<th>{_e(first)}</th>"]
    for i, v in enumerate(cmp.get("variants", [])):
        color = colors[i] if i < len(colors) else "#999999"
        badge = '<span class="badge base">baseline</span>' if v.get("is_baseline") else ""
        head_cells.append(
            f'<th><span class="swatch" style="background:{_e(color)}"></span>'
            f"{_e(v.get('name', ''))}{badge}</th>"
        )
    return f"<tr>{''.join(head_cells)}</tr>"


def _paired_part(cmp: dict[str, Any], ci: float, head: str, paired: list[list[str]]) -> str:
    """The paired per-request statistics: heading, what they are (``ci``: the interval's
    level), and their table."""
    p_body = [f"<tr><td>{_e(r[0])}</td>{''.join(_num_td(c) for c in r[1:])}</tr>" for r in paired]
    return (
        "<h3>Paired per-request statistics</h3>"
        f'<p class="meta">Requests are matched by id across runs (finished in both). '
        f"TTFT ratio = variant / baseline per request; faster / slower = ratio below "
        f"{IMPROVED_BELOW} / above {WORSE_ABOVE}. Δ TTFT p99 = variant − baseline, with a "
        f"{ci * 100:.0f}% paired bootstrap interval ({_e(cmp.get('n_boot', '?'))} "
        f"resamples of request ids).</p>" + _table("paired", head, p_body)
    )


def _plots_section(runs: Sequence[RunData]) -> str:
    parts = ["<h2>Plots</h2>"]
    with tempfile.TemporaryDirectory(prefix="prefillkit-report-") as tmp:
        for spec in PLOTS:
            path = spec.func(runs, Path(tmp) / f"{spec.key}.png")
            parts.append(f'<h3 id="plot-{_e(spec.key)}">{_e(spec.title)}</h3>')
            if path is None:
                parts.append(f'<p class="note">{_e(spec.skipped_note or "Plot omitted.")}</p>')
                continue
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{_e(spec.title)}">'
                f"<figcaption>{_e(spec.caption)}</figcaption></figure>"
            )
    return "".join(parts)


# --------------------------------------------------------------------------- page


def write_report(
    runs: Sequence[RunData],
    out_path: str | Path,
    *,
    title: str = "prefillkit report",
    comparison: dict[str, Any] | None = None,
) -> Path:
    """Write one self-contained HTML page about ``runs`` to ``out_path``; returns its path.

    One run: the deployment panel, runs, summary metrics, plots, configuration. With
    ``comparison`` (the output of :func:`prefillkit.report.paired.compare_runs`): the
    verdict table first (variants side by side, paired CIs, a verdict per metric), then
    the plots, the deployment panel and runs, and the full comparison and summaries in
    ``<details>``, then the configuration (flags that differ, each full config).
    """
    if not runs:
        raise ValueError("write_report needs at least one run")
    out = Path(out_path)
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{len(runs)} run(s): {_e(", ".join(variant_labels(runs)))}.</p>',
        *_sections(runs, comparison),
    ]
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n"
        f"<body><main>{''.join(body)}</main><script>{_SCRIPT}</script></body></html>\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, page)
    return out


def _sections(runs: Sequence[RunData], comparison: dict[str, Any] | None) -> list[str]:
    """The page's sections after its title, in the order :func:`write_report` gives."""
    if comparison is None:
        return [
            _deployment_section(runs),
            _runs_section(runs),
            _summary_section(runs),
            _fleet_section(runs),
            _plots_section(runs),
            _config_section(runs),
        ]
    # One table first (the verdict), then the plots; the details after them.
    return [
        _headline_section(comparison),
        _plots_section(runs),
        _deployment_section(runs),
        _runs_section(runs),
        "<details><summary>Every metric, with differences and ratios</summary>",
        _comparison_section(runs, comparison),
        "</details>",
        "<details><summary>Summary of each run</summary>",
        _summary_section(runs),
        "</details>",
        _fleet_section(runs),
        _config_section(runs),
    ]
