"""``prefillkit calibrate``: the cost model's validation table and the seed scenario.

Both come straight from :mod:`prefillkit.sim.validation`; this module only lays them
out (a rich table for the terminal, a dict for ``--json``, Markdown for RESULTS.md).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from prefillkit.sim.cost import BREAKDOWN_KEYS, ReqShape
from prefillkit.sim.validation import (
    PUBLISHED,
    SEED_DEPLOYMENT,
    TOLERANCE,
    modelled_throughput,
    seed_scenario,
)

__all__ = ["calibration_document", "calibration_markdown", "calibration_tables"]


def _shape(r: ReqShape) -> dict[str, int]:
    return {"prefix_len": r.prefix_len, "extend_len": r.extend_len, "loaded": r.loaded_tokens}


def calibration_document() -> dict[str, Any]:
    """The validation rows and the seed scenario, JSON-ready."""
    rows = []
    for fig in PUBLISHED:
        modelled = modelled_throughput(fig)
        error = modelled / fig.published - 1.0
        rows.append(
            {
                "name": fig.name,
                "gpu": fig.gpu,
                "model": fig.model,
                "shape": (
                    f"{fig.num_gpus} GPUs, DP-attn + EP {fig.num_gpus}, "
                    f"{fig.prompt_len}-token prompts, {fig.tokens_per_gpu} tokens/GPU"
                    + (", two-batch overlap" if fig.two_batch_overlap else "")
                ),
                "unit": f"tok/s per {fig.unit}",
                "published": fig.published,
                "modelled": modelled,
                "error": error,
                "within": abs(error) <= TOLERANCE,
                "source": fig.source,
                "miss_reason": fig.miss_reason,
            }
        )
    s = seed_scenario()
    return {
        "tolerance": TOLERANCE,
        "validation": rows,
        "seed": {
            "deployment": " ".join(SEED_DEPLOYMENT),
            "warm": [_shape(r) for r in s.warm],
            "cold": _shape(s.cold),
            "warm_breakdown": s.warm_breakdown,
            "mixed_breakdown": s.mixed_breakdown,
            "cold_alone_breakdown": s.cold_alone_breakdown,
        },
    }


def calibration_tables(doc: dict[str, Any]) -> tuple[Table, Table]:
    """(validation table, seed scenario breakdown table)."""
    val = Table(title=f"Cost model vs published prefill throughput (bound ±{doc['tolerance']:.0%})")
    for col in ("figure", "GPU", "unit", "published", "modelled", "error", "within"):
        val.add_column(
            col, justify="right" if col in ("published", "modelled", "error") else "left"
        )
    for row in doc["validation"]:
        val.add_row(
            row["name"],
            row["gpu"],
            row["unit"],
            f"{row['published']:,.0f}",
            f"{row['modelled']:,.0f}",
            f"{row['error']:+.1%}",
            "yes" if row["within"] else "NO (see RESULTS.md)",
        )
    seed = doc["seed"]
    tab = Table(title="Seed scenario: warm batch, + one cold joiner (seconds per term)")
    tab.add_column("term")
    for col in ("warm batch", "warm + cold", "cold alone"):
        tab.add_column(col, justify="right")
    for key in BREAKDOWN_KEYS:
        tab.add_row(
            key,
            f"{seed['warm_breakdown'][key]:.3f}",
            f"{seed['mixed_breakdown'][key]:.3f}",
            f"{seed['cold_alone_breakdown'][key]:.3f}",
        )
    return val, tab


def calibration_markdown(doc: dict[str, Any]) -> str:
    """The validation table as Markdown (what benchmarks/RESULTS.md records)."""
    lines = [
        "| figure | GPU | shape | published | modelled | error | within ±15 % |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for row in doc["validation"]:
        lines.append(
            f"| {row['name']} | {row['gpu']} | {row['shape']} | {row['published']:,.0f} "
            f"{row['unit']} | {row['modelled']:,.0f} | {row['error']:+.1%} | "
            f"{'yes' if row['within'] else 'no'} |"
        )
    return "\n".join(lines)
