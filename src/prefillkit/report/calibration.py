"""``prefillkit calibrate``: the cost model's validation table and the seed scenario.

Both come straight from :mod:`prefillkit.cost.validation`; this module only lays them
out (a rich table for the terminal, a dict for ``--json``, Markdown for RESULTS.md).
Every published row is modelled by both forward models (the roofline and, with the
``aic`` extra, AIConfigurator's measured tables); the seed scenario is printed under
every forward model (the roofline under each small-GEMM assumption, and ``aic``), with
the breakdown per term and where each term came from.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from prefillkit.cost.forward_models import cost_model_record
from prefillkit.cost.roofline import BREAKDOWN_KEYS, ReqShape
from prefillkit.cost.validation import (
    BACKENDS,
    MISS_REASONS,
    PUBLISHED_FIGURES,
    SEED_DEPLOYMENT,
    TOLERANCE,
    modelled_figure,
    seed_forward_models,
    seed_scenario,
)

__all__ = ["calibration_document", "calibration_markdown", "calibration_tables"]


def _shape(r: ReqShape) -> dict[str, int]:
    return {"prefix_len": r.prefix_len, "extend_len": r.extend_len, "loaded": r.loaded_tokens}


def _shape_text(fig: Any) -> str:
    par = f"TP {fig.tp_size} x DP-attn {fig.dp_attention}, EP {fig.ep_size}"
    if fig.cp_size > 1:
        par += f", CP {fig.cp_size}"
    if fig.pp_size > 1:
        par += f", PP {fig.pp_size}"
    tbo = ", two-batch overlap" if fig.two_batch_overlap else ""
    return f"{fig.num_gpus} GPUs, {par}, {fig.prompt_len:,}-token prompts{tbo}; {fig.precision}"


def _validation_rows() -> list[dict[str, Any]]:
    rows = []
    for fig in PUBLISHED_FIGURES:
        row: dict[str, Any] = {
            "name": fig.name,
            "gpu": fig.gpu,
            "model": fig.model,
            "shape": _shape_text(fig),
            "balancing": fig.balancing,
            "unit": fig.metric,
            "published": fig.published,
            "source": fig.source,
            "assumptions": fig.assumptions,
        }
        for backend in BACKENDS:
            m = modelled_figure(fig, backend)
            row[backend] = {
                "modelled": m.modelled,
                "error": m.error,
                "within": m.within,
                "note": m.note,
                "miss_reason": MISS_REASONS.get((fig.name, backend), ""),
            }
        rows.append(row)
    return rows


def _seed_models() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, cm in seed_forward_models().items():
        if isinstance(cm, str):
            out[name] = {"unavailable": cm}
            continue
        s = seed_scenario(cm=cm)
        out[name] = {
            "warm_breakdown": s.warm_breakdown,
            "mixed_breakdown": s.mixed_breakdown,
            "cold_alone_breakdown": s.cold_alone_breakdown,
            "terms": cost_model_record(cm)["terms"],
        }
    return out


def calibration_document() -> dict[str, Any]:
    """The validation rows and the seed scenario under every forward model, JSON-ready."""
    s = seed_scenario()
    models = _seed_models()
    return {
        "tolerance": TOLERANCE,
        "validation": _validation_rows(),
        "seed": {
            "deployment": " ".join(SEED_DEPLOYMENT),
            "warm": [_shape(r) for r in s.warm],
            "cold": _shape(s.cold),
            "warm_breakdown": s.warm_breakdown,
            "mixed_breakdown": s.mixed_breakdown,
            "cold_alone_breakdown": s.cold_alone_breakdown,
            "models": models,
        },
    }


def _cell(result: dict[str, Any]) -> tuple[str, str]:
    if result["modelled"] is None:
        return "-", "not modelled"
    value = result["modelled"]
    text = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return text, f"{result['error']:+.1%}" + ("" if result["within"] else " (miss)")


def calibration_tables(doc: dict[str, Any]) -> tuple[Table, Table, Table]:
    """(validation table, seed scenario per forward model, seed breakdown per term)."""
    val = Table(
        title=f"Cost model vs published prefill figures (bound ±{doc['tolerance']:.0%}; "
        "misses and their reasons: prefillkit calibrate --json, benchmarks/RESULTS.md)"
    )
    for col in ("figure", "GPU", "unit", "published", *(f"{b}" for b in BACKENDS)):
        val.add_column(col, justify="right" if col not in ("figure", "GPU", "unit") else "left")
    for row in doc["validation"]:
        cells = []
        for backend in BACKENDS:
            value, err = _cell(row[backend])
            cells.append(f"{value} {err}" if value != "-" else err)
        pub = row["published"]
        val.add_row(
            row["name"], row["gpu"], row["unit"], f"{pub:,.0f}" if pub >= 100 else f"{pub}", *cells
        )
    seed = doc["seed"]
    per_model = Table(title="Seed scenario per forward model (seconds per forward)")
    for col in ("forward model", "warm batch", "warm + cold", "cold alone", "warm + cold / warm"):
        per_model.add_column(col, justify="left" if col == "forward model" else "right")
    for name, m in seed["models"].items():
        if "unavailable" in m:
            per_model.add_row(name, "-", "-", "-", m["unavailable"])
            continue
        w, x, c = (
            m[k]["total"] for k in ("warm_breakdown", "mixed_breakdown", "cold_alone_breakdown")
        )
        per_model.add_row(name, f"{w:.3f}", f"{x:.3f}", f"{c:.3f}", f"x{x / w:.2f}")
    tab = Table(title="Seed scenario breakdown: warm batch / warm + cold, per forward model (s)")
    tab.add_column("term")
    names = [n for n, m in seed["models"].items() if "unavailable" not in m]
    for name in names:
        tab.add_column(name, justify="right")
    for key in BREAKDOWN_KEYS:
        tab.add_row(
            key,
            *(
                f"{seed['models'][n]['warm_breakdown'][key]:.3f} / "
                f"{seed['models'][n]['mixed_breakdown'][key]:.3f}"
                for n in names
            ),
        )
    return val, per_model, tab


def calibration_markdown(doc: dict[str, Any]) -> str:
    """The validation table as Markdown (what benchmarks/RESULTS.md records)."""
    head = " | ".join(f"{b} (error)" for b in BACKENDS)
    lines = [
        f"| figure | GPU | shape | published | {head} | within ±15 % |",
        "| --- | --- | --- | ---: |" + " ---: |" * len(BACKENDS) + " --- |",
    ]
    for row in doc["validation"]:
        cells = []
        meets = []
        for backend in BACKENDS:
            value, err = _cell(row[backend])
            cells.append(f"{value} ({err})" if value != "-" else err)
            if row[backend]["within"]:
                meets.append(backend)
        pub = row["published"]
        pub_text = f"{pub:,.0f}" if pub >= 100 else f"{pub}"
        lines.append(
            f"| {row['name']} | {row['gpu']} | {row['shape']} | {pub_text} {row['unit']} | "
            + " | ".join(cells)
            + f" | {', '.join(meets) or 'neither'} |"
        )
    return "\n".join(lines)
