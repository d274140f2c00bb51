"""The fleet panel of a run's summary (a run with a ``fleet`` block: ``--instances`` /
``--fleet``): the router, the routing imbalance, how often the router's prefix view was
wrong, and one row per instance. On the console (:func:`fleet_table`) and in the HTML
report (:func:`fleet_section`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prefillkit.report.html_parts import escape, table

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["FLEET_COLUMNS", "fleet_lines", "fleet_section", "fleet_table"]

#: Per-instance columns: (row key, header, format).
FLEET_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("instance", "instance", "d"),
    ("requests", "requests", ","),
    ("hit_rate", "hit rate", "%"),
    ("utilization", "utilisation", "%"),
    ("ttft_p50_s", "TTFT p50", "s"),
    ("ttft_p90_s", "TTFT p90", "s"),
    ("ttft_p99_s", "TTFT p99", "s"),
    ("ttft_max_s", "TTFT max", "s"),
    ("max_waiting", "max waiting", ","),
    ("view_wrong", "view wrong", ","),
)


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "%":
        return f"{100.0 * float(value):.1f} %"
    if kind == "s":
        return f"{float(value):.3f} s"
    if kind == ",":
        return f"{int(value):,}"
    return str(value)


def fleet_lines(fleet: Mapping[str, Any]) -> list[str]:
    """The fleet's headline: router, imbalance, view check."""
    lines = [f"router: {fleet.get('router', '-')} (prefix source: {fleet.get('prefix_source')})"]
    imb = fleet.get("imbalance", {}).get("requests", {})
    busy = fleet.get("imbalance", {}).get("busy", {})
    if imb.get("max_over_mean") is not None:
        text = f"routing imbalance: busiest instance {imb['max_over_mean']:.2f}x the mean requests"
        if busy.get("max_over_mean") is not None:
            text += f", {busy['max_over_mean']:.2f}x the mean busy time"
        lines.append(text)
    view = fleet.get("view", {})
    if view.get("checked"):
        lines.append(
            f"router's prefix view wrong on {100.0 * view['wrong_share']:.1f} % of "
            f"{view['checked']:,} decisions (over by {view['over_tokens_mean']:.0f}, under by "
            f"{view['under_tokens_mean']:.0f} tokens a decision on average)"
        )
    return lines


def fleet_table(fleet: Mapping[str, Any]) -> Table:
    """The per-instance table (rich)."""
    from rich.table import Table

    out = Table(title=f"fleet: {len(fleet.get('instances', []))} instances", header_style="bold")
    for _, header, kind in FLEET_COLUMNS:
        out.add_column(header, justify="left" if kind == "d" else "right", no_wrap=True)
    for row in fleet.get("instances", []):
        out.add_row(*(_cell(row.get(key), kind) for key, _, kind in FLEET_COLUMNS))
    return out


def fleet_section(runs: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """The HTML report's fleet section: per run with a fleet block, its headline and its
    per-instance table ("" when no run has one)."""
    parts: list[str] = []
    for name, fleet in runs:
        head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for _, h, _ in FLEET_COLUMNS) + "</tr>"
        rows = [
            "<tr>"
            + "".join(
                f'<td class="num">{escape(_cell(r.get(k), kind))}</td>'
                for k, _, kind in FLEET_COLUMNS
            )
            + "</tr>"
            for r in fleet.get("instances", [])
        ]
        notes = "".join(f'<p class="note">{escape(line)}</p>' for line in fleet_lines(fleet))
        parts.append(f"<h3>{escape(name)}</h3>{notes}" + table(f"fleet-{len(parts)}", head, rows))
    if not parts:
        return ""
    return "<h2>Fleet</h2>" + "".join(parts)
