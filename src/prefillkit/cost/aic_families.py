"""The AIConfigurator op families of one deployment: built (:func:`build_families`),
evaluated on AIC's compiled engine (:class:`AicEvaluator`, rescaled to a GPU without
tables) and probed once (:func:`probe_terms`) for
:class:`~prefillkit.cost.aic.AicCostModel` (its module docstring: what each term
measures, how a derived GPU is rescaled, the fallback rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from prefillkit.cost.aic_tables import (
    DSA_ARCHITECTURES,
    DSA_BLOCK_GEMMS,
    MOE_DISTRIBUTIONS,
    Family,
    gemm_shapes,
)
from prefillkit.cost.gpus import GpuSpec
from prefillkit.cost.roofline import RooflineCostModel

__all__ = ["PROBE_TOKENS", "AicEvaluator", "build_families", "probe_terms"]

PROBE_TOKENS = 4096

#: Seconds of a family at ``s`` tokens after ``prefix`` cached ones (None: not measured).
Measure = Callable[[Family, int, int], float | None]


class AicEvaluator:
    """Evaluates op families on AIC's engine for one database (``handle``); with ``src``
    (the GPU whose tables are read for a ``dst`` without its own), each op is rescaled
    from ``src`` to ``dst`` (:class:`~prefillkit.cost.aic.AicCostModel`'s docstring)."""

    def __init__(self, handle: Any, src: GpuSpec | None, dst: GpuSpec, num_gpus: int) -> None:
        self.handle = handle
        self.src = src
        self.dst = dst
        self.num_gpus = num_gpus

    def measure(self, fam: Family, s: int, prefix: int) -> float | None:
        """Seconds of ``fam`` at ``s`` tokens after ``prefix`` (None: not measured)."""
        kw = {"is_context": True, "batch_size": 1, "s": s, "prefix": prefix}
        try:
            res = self.handle.evaluate_ops_json(fam.json, **kw, x=s)
        except Exception:
            return None
        if not res or any(r[3] != "silicon" for r in res):
            return None
        lat = [float(r[1]) for r in res]
        if self.src is not None:
            try:
                lat = self._derive(fam, lat, kw)
            except Exception:
                return None
        total = sum(lat) / 1e3
        return total if math.isfinite(total) and total >= 0.0 else None

    def _peak_ratio(self, kind: str) -> float:
        """Source over target tensor-core peak for an op computing in ``kind``."""
        src, dst = self.src, self.dst
        assert src is not None
        if kind == "fp8":
            return src.peak_flops_fp8 / dst.peak_flops_fp8
        return src.peak_flops_bf16 / dst.peak_flops_bf16

    def _derive(self, fam: Family, lat: list[float], kw: dict[str, Any]) -> list[float]:
        """Rescale source-GPU times to the target GPU (module docstring)."""
        src, dst = self.src, self.dst
        assert src is not None
        if all(k == "link" for k in fam.kinds):
            # Traffic that leaves the NVLink domain is bound by the NIC, the rest by NVLink.
            if self.num_gpus > dst.nvlink_domain:
                return [x * src.net_bandwidth / dst.net_bandwidth for x in lat]
            return [x * src.nvlink_bandwidth / dst.nvlink_bandwidth for x in lat]
        try:
            sol = self.handle.evaluate_ops_sol_json(fam.json, **kw, x=kw["s"])
        except Exception:  # a family without a SOL decomposition: taken as compute-bound
            return [x * self._peak_ratio(kind) for x, kind in zip(lat, fam.kinds, strict=True)]
        out = []
        for x, kind, (_, _, math_ms, mem_ms) in zip(lat, fam.kinds, sol, strict=True):
            peak = self._peak_ratio(kind)
            before = max(math_ms, mem_ms)
            after = max(math_ms * peak, mem_ms * src.hbm_bandwidth / dst.hbm_bandwidth)
            out.append(x * after / before if before > 0 else x)
        return out


# --- construction ---------------------------------------------------------------------
def build_families(
    aic: dict[str, Any], roofline: RooflineCostModel, moe_balance: str, measure: Measure
) -> dict[str, Family]:
    """The op families of ``roofline``'s deployment, by name: ``linear``, ``attention``
    (``dsa_proj`` too on a DSA model without CP), ``moe_experts``, ``moe_comm``,
    ``tp_comm`` and ``cp_kv_gather``, each where the deployment has the term."""
    ops, common = aic["ops"], aic["common"]
    engine = aic["engine"]
    rf, m, lay = roofline, roofline.model, roofline.layout
    fp8 = m.weight_bytes_per_param <= 1.0
    gq = common.GEMMQuantMode
    quant = gq.fp8_block if fp8 else gq.bfloat16
    families: dict[str, Family] = {}
    gemms, kinds = [], []
    for name, layers, n, k, fp8_ok in gemm_shapes(m, lay.attn_tp):
        q = quant if fp8_ok else gq.bfloat16
        gemms.append(ops.GEMM(name, layers, n, k, q))
        kinds.append("fp8" if q == gq.fp8_block else "bf16")
    table = f"gemm ({'fp8_block' if fp8 else 'bfloat16'})"
    families["linear"] = Family(engine, gemms, kinds, table)
    if m.attention == "mla" and not m.is_sparse:
        kvq = common.KVCacheQuantMode
        kv = kvq.fp8 if rf.kv_bytes_per_token == m.kv_bytes_per_token_fp8 else kvq.bfloat16
        mla = ops.ContextMLA(
            "mla", m.num_layers, m.num_heads // lay.attn_tp, kv, common.FMHAQuantMode.bfloat16
        )
        families["attention"] = Family(engine, [mla], ["bf16"], "context MLA (bf16)")
    arch = DSA_ARCHITECTURES.get(m.name)
    if m.is_sparse and arch is not None and lay.cp_size == 1:
        families.update(_dsa_families(aic, roofline, arch, quant))
    if m.num_experts:
        families["moe_experts"] = _moe_family(aic, roofline, moe_balance, measure)
    families.update(_comm_families(aic, roofline))
    return families


def _dsa_families(
    aic: dict[str, Any], roofline: RooflineCostModel, arch: str, quant: Any
) -> dict[str, Family]:
    """DSA models without CP: SGLang's whole DSA attention block per request (AIC's
    ``ContextDSAModule``: projections, indexer, top-k, sparse MLA, o_proj) and, to
    take it apart, the block's projection GEMMs (``dsa_proj``). Under CP AIC only
    estimates the block (its answer is not ``silicon``), so CP stays on the roofline."""
    ops, common, engine = aic["ops"], aic["common"], aic["engine"]
    rf, m = roofline, roofline.model
    kvq = common.KVCacheQuantMode
    kv = kvq.fp8 if rf.kv_bytes_per_token == m.kv_bytes_per_token_fp8 else kvq.bfloat16
    heads = m.num_heads // rf.layout.attn_tp
    dsa = ops.ContextDSAModule(
        "dsa", m.num_layers, heads, kv, common.FMHAQuantMode.bfloat16, quant, architecture=arch
    )
    attention = Family(engine, [dsa], ["bf16"], "context DSA module")
    gq = common.GEMMQuantMode
    proj = [
        ops.GEMM(name, layers, n, k, quant if fp8_ok else gq.bfloat16)
        for name, layers, n, k, fp8_ok in gemm_shapes(m, rf.layout.attn_tp)
        if name in DSA_BLOCK_GEMMS
    ]
    kinds = ["fp8" if quant == gq.fp8_block else "bf16"] * len(proj)
    return {"attention": attention, "dsa_proj": Family(engine, proj, kinds, "gemm")}


def _moe_family(
    aic: dict[str, Any], roofline: RooflineCostModel, moe_balance: str, measure: Measure
) -> Family:
    """Routed experts: under EP, SGLang's large-EP path (DeepEP dispatch, DeepGEMM
    grouped GEMMs: AIC's ``MoEExpertCompute`` table, AIC's EPLB modelling when
    ``moe_balance`` is ``eplb``), else (or where that table is missing) the fused-MoE
    table (``MoE``: Triton fused MoE, EP or TP inside a node)."""
    ops, common = aic["ops"], aic["common"]
    engine = aic["engine"]
    m, lay = roofline.model, roofline.layout
    fp8 = m.weight_bytes_per_param <= 1.0
    quant = common.MoEQuantMode.fp8_block if fp8 else common.MoEQuantMode.bfloat16
    dist = MOE_DISTRIBUTIONS[moe_balance]
    kind = "fp8" if fp8 else "bf16"
    candidates: list[tuple[Any, str]] = []
    if lay.ep_size > 1:
        large_ep = ops.MoEExpertCompute(
            "moe",
            m.moe_layers,
            hidden_size=m.hidden_size,
            inter_size=m.moe_intermediate_size,
            topk=m.experts_per_token,
            num_experts=m.num_experts,
            moe_ep_size=lay.ep_size,
            quant_mode=quant,
            workload_distribution=dist,
            attention_dp_size=lay.dp_size,
            inference_phase="context",
            num_slots=None,
            is_gated=True,
            enable_eplb=moe_balance == "eplb",
        )
        candidates.append((large_ep, f"large-EP moe_expert_compute ({dist})"))
    ep = lay.ep_size
    par = (1, ep) if ep > 1 else (lay.num_gpus, 1)
    args = (m.hidden_size, m.moe_intermediate_size, m.experts_per_token, m.num_experts)
    fused = ops.MoE("moe", m.moe_layers, *args, *par, quant, dist, lay.dp_size)
    candidates.append((fused, f"fused moe ({dist})"))
    for op, table in candidates:
        fam = Family(engine, [op], [kind], table)
        if measure(fam, PROBE_TOKENS, 0) is not None:
            return fam
    return Family(engine, [fused], [kind], f"fused moe ({dist})")


def _comm_families(aic: dict[str, Any], roofline: RooflineCostModel) -> dict[str, Family]:
    """``moe_comm`` (DeepEP all-to-all under EP; NCCL all-gather + reduce-scatter for MoE
    TP under CP/DP), ``tp_comm`` (custom all-reduce) and ``cp_kv_gather`` (NCCL
    all-gather), each where the layout has it."""
    ops, common = aic["ops"], aic["common"]
    engine = aic["engine"]
    m, lay, gpu = roofline.model, roofline.layout, roofline.gpu
    half, int8 = common.CommQuantMode.half, common.CommQuantMode.int8
    families: dict[str, Family] = {}
    if m.num_experts and lay.ep_size > 1:
        nodes = -(-lay.ep_size // gpu.nvlink_domain)
        a2a = [
            ops.MoEAllToAll(
                f"a2a_{phase}",
                m.moe_layers,
                phase=phase,
                comm_backend="deepep_ht",
                hidden_size=m.hidden_size,
                topk=m.experts_per_token,
                num_experts=m.num_experts,
                moe_ep_size=lay.ep_size,
                node_num=nodes,
            )
            for phase in ("dispatch", "combine")
        ]
        families["moe_comm"] = Family(engine, a2a, ["link"] * 2, "moe a2a (deepep_ht)")
    elif lay.num_gpus > 1 and (lay.cp_size > 1 or lay.dp_size > 1):
        layers = m.moe_layers if m.num_experts else m.num_layers
        coll = [
            ops.NCCL(op, layers, op, m.hidden_size, lay.num_gpus, half)
            for op in ("all_gather", "reduce_scatter")
        ]
        families["moe_comm"] = Family(engine, coll, ["link"] * 2, "nccl")
    if lay.attn_tp > 1:
        times = 2 if lay.cp_size == 1 and lay.dp_size == 1 else 1
        ar = ops.CustomAllReduce("ar", times * m.num_layers, m.hidden_size, lay.attn_tp)
        families["tp_comm"] = Family(engine, [ar], ["link"], "custom all-reduce")
    if lay.cp_size > 1:
        per_layer = round(roofline.kv_bytes_per_token / m.num_layers)
        ag = ops.NCCL("kv_ag", m.num_layers, "all_gather", per_layer, lay.cp_size, int8)
        families["cp_kv_gather"] = Family(engine, [ag], ["link"], "nccl all-gather")
    return families


#: The family each probed term reads, and why a term without one is on the roofline.
_PROBES: dict[str, str] = {
    "linear": "linear",
    "attention": "attention",
    "moe_experts": "moe_experts",
    "moe_comm_exposed": "moe_comm",
    "tp_comm": "tp_comm",
    "cp_kv_gather": "cp_kv_gather",
}
_NO_FAMILY: dict[str, str] = {
    "attention": (
        "roofline: no measured table (DSA under CP: AIC only estimates the block; "
        "GQA: AIC's answer is not silicon)"
    ),
    "moe_experts": "roofline: dense model (no routed experts)",
}


def probe_terms(
    families: dict[str, Family], measure: Measure, label: str, dsa: bool
) -> dict[str, str]:
    """Decide each term's provenance once, at a representative forward: a family whose
    probe is not measured is dropped from ``families`` (its term uses the roofline for
    the whole run). Returns the provenance of each probed term."""
    prov: dict[str, str] = {}
    for key, family in _PROBES.items():
        fam = families.get(family)
        if fam is None:
            prov[key] = _NO_FAMILY.get(key, "roofline: term is zero for this layout")
            continue
        value = measure(fam, PROBE_TOKENS, 0)
        if value is None:
            families.pop(family)
            prov[key] = f"roofline: no silicon {fam.table} table for this shape/quant"
        else:
            prov[key] = f"{label} {fam.table}"
    if dsa and "attention" in families:
        note = "; minus its projection GEMMs, split by the roofline's attention:indexer"
        prov["attention"] += note
        prov["indexer"] = prov["attention"]
    return prov
