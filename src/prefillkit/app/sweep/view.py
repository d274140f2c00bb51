"""A sweep store's points as read back, and what the page and tables make of them.

:class:`View` is the current grid's points (manifest order) with their stored rows; on it:

- :func:`pareto_ids`, per workload: the points no other point beats on both p99 TTFT
  (lower) and input throughput (higher);
- :func:`best_per_slo`: for each p99 TTFT bound, the point with the highest input
  throughput that meets it (ties: the lower p99), per workload;
- :func:`knob_effect`: every point's p99 TTFT at each value of a label, and the median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from prefillkit.app.sweep.store import Store

__all__ = [
    "DEFAULT_SLOS",
    "View",
    "best_per_slo",
    "knob_effect",
    "label_text",
    "load_view",
    "num",
    "pareto_ids",
]

DEFAULT_SLOS: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)


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


def num(row: Mapping[str, Any], key: str) -> float | None:
    """``row[key]`` as a float; None when missing, not a number or not finite."""
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def pareto_ids(view: View) -> set[str]:
    """Ids on the (p99 TTFT, input throughput) Pareto front of their workload."""
    by_workload: dict[str, list[tuple[str, float, float]]] = {}
    for e, row in view.ok():
        p99, thr = num(row, "ttft_p99_s"), num(row, "input_throughput_tok_s")
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
                p99, thr = num(row, "ttft_p99_s"), num(row, "input_throughput_tok_s")
                if str(row.get("workload")) != w or p99 is None or thr is None or p99 > bound:
                    continue
                key = (thr, -p99, e["id"])
                if best is None or key > best:
                    best = key
            out.append((w, bound, best[2] if best else None))
    return out


def label_text(value: object) -> str:
    """A label's value as the tables and figures show it (``true``, ``0.5``, ``lpm``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def knob_effect(view: View, name: str, values: Sequence[object]) -> list[tuple[list[float], float]]:
    """Per value of label ``name``: the finished points' p99 TTFTs and their median
    (``statistics.median``: the mean of the middle two for an even count; NaN for none)."""
    out: list[tuple[list[float], float]] = []
    for v in values:
        here = [
            y
            for e, r in view.ok()
            if e.get("labels", {}).get(name) == v and (y := num(r, "ttft_p99_s")) is not None
        ]
        out.append((here, statistics.median(here) if here else math.nan))
    return out
