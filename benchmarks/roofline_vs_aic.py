"""The roofline's terms against AIConfigurator's measured kernel tables, per op.

    python benchmarks/roofline_vs_aic.py [--markdown]

For every GPU with its own measured tables (H100, H200, B200, GB200), two deployments
(DeepSeek-V3 FP8 on 8 GPUs with attention TP 8 and EP 8; the same with CP 8 shared-KV)
and four batches (one 1,024-, 4,096- and 16,384-token prompt, four 4,096-token prompts),
prints each breakdown term both backends time from a table or the roofline (token-local
GEMMs, dense-MLA attention, routed experts, MoE and TP communication, the CP KV gather):
the roofline's value, the measured one and the roofline's error against it. Nothing is
fitted: this is the check of the roofline's efficiencies the issue asks for; the figures
go to benchmarks/RESULTS.md ("Roofline vs measured kernels"). Needs the ``aic`` extra.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from prefillkit.cost.aic import AicCostModel  # noqa: E402
from prefillkit.cost.gpus import get_gpu  # noqa: E402
from prefillkit.cost.roofline import ParallelLayout, ReqShape, RooflineCostModel  # noqa: E402
from prefillkit.models import get_model  # noqa: E402

GPUS = ("h100", "h200", "b200", "gb200")
LAYOUTS = {
    "TP8 EP8": ParallelLayout(8, ep_size=8),
    "CP8 EP8": ParallelLayout(8, cp_size=8, ep_size=8),
}
BATCHES = {
    "1 x 1K": [ReqShape(0, 1024)],
    "1 x 4K": [ReqShape(0, 4096)],
    "4 x 4K": [ReqShape(0, 4096)] * 4,
    "1 x 16K": [ReqShape(0, 16_384)],
}
TERMS = ("linear", "attention", "moe_experts", "moe_comm_exposed", "tp_comm", "cp_kv_gather")


def rows() -> list[tuple[str, str, str, str, float, float, str]]:
    out = []
    model = get_model("deepseek-v3")
    for gpu_name in GPUS:
        for lay_name, layout in LAYOUTS.items():
            page = 64 if layout.cp_size > 1 else 1
            rf = RooflineCostModel(model, get_gpu(gpu_name), 8, layout=layout, page_size=page)
            aic = AicCostModel(rf)
            prov = aic.provenance()
            for batch_name, batch in BATCHES.items():
                a, b = rf.breakdown(batch), aic.breakdown(batch)
                for term in TERMS:
                    if prov[term].startswith("roofline") or b[term] <= 0.0:
                        continue
                    out.append((gpu_name, lay_name, batch_name, term, a[term], b[term], prov[term]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = ap.parse_args()
    data = rows()
    sep = " | " if args.markdown else "  "
    if args.markdown:
        print("| GPU | layout | batch | term | roofline (ms) | measured (ms) | roofline error |")
        print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    for gpu, lay, batch, term, rf, aic, _ in data:
        cells = (
            gpu,
            lay,
            batch,
            term,
            f"{rf * 1e3:.2f}",
            f"{aic * 1e3:.2f}",
            f"{rf / aic - 1:+.0%}",
        )
        print(("| " + sep.join(cells) + " |") if args.markdown else sep.join(cells))
    print()
    if args.markdown:
        print("| term | rows | median roofline error | range |")
        print("| --- | ---: | ---: | --- |")
    for term in TERMS:
        errs = [rf / aic - 1 for _, _, _, t, rf, aic, _ in data if t == term]
        if not errs:
            continue
        med = statistics.median(errs)
        span = f"{min(errs):+.0%} .. {max(errs):+.0%}"
        line = (term, str(len(errs)), f"{med:+.0%}", span)
        print(("| " + " | ".join(line) + " |") if args.markdown else "  ".join(line))


if __name__ == "__main__":
    main()
