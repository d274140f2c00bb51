"""AicCostModel: AIConfigurator-table forward times (prefillkit.cost.aic)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("aiconfigurator_core")

from aiconfigurator_core.sdk import common
from aiconfigurator_core.sdk import operations as ops
from aiconfigurator_core.sdk.engine import EngineHandle, build_ops_json
from aiconfigurator_core.sdk.perf_database import get_database

from prefillkit.cost.aic import (
    AicCostModel,
    AicUnavailableError,
    aic_system_for_gpu,
)
from prefillkit.cost.gpus import GpuSpec, get_gpu
from prefillkit.cost.roofline import BREAKDOWN_KEYS, ParallelLayout, RooflineCostModel
from prefillkit.models import get_model
from prefillkit.sched.buffer import ReqShape

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

PROMPT = [ReqShape(0, 4096)]
FP8 = common.GEMMQuantMode.fp8_block
BF16 = common.GEMMQuantMode.bfloat16


def _dsv3(gpu: str = "h200") -> RooflineCostModel:
    return RooflineCostModel(
        get_model("deepseek-v3"), get_gpu(gpu), 8, layout=ParallelLayout(8, ep_size=8), page_size=1
    )


def _glm5(gpu: Any) -> RooflineCostModel:
    layout = ParallelLayout(8, cp_size=8, ep_size=8)
    return RooflineCostModel(get_model("glm-5"), gpu, 8, layout=layout, page_size=64)


@pytest.fixture(scope="module")
def dsv3_h200() -> AicCostModel:
    return AicCostModel(_dsv3())


@pytest.fixture(scope="module")
def handle() -> EngineHandle:
    return EngineHandle.for_database(get_database("h200_sxm", "sglang", "current"))


def _aic_ms(handle: EngineHandle, op: Any, tokens: int) -> float:
    (row,) = handle.evaluate_ops_json(
        build_ops_json([op]), is_context=True, batch_size=1, s=tokens, x=tokens
    )
    assert row[3] == "silicon"
    return float(row[1])


def test_keys_and_total_is_the_sum(dsv3_h200: AicCostModel) -> None:
    for batch in (PROMPT, [ReqShape(2048, 512, 1024), ReqShape(0, 300)]):
        parts = dsv3_h200.breakdown(batch)
        assert tuple(parts) == BREAKDOWN_KEYS
        rest = sum(v for k, v in parts.items() if k != "total")
        assert parts["total"] == pytest.approx(rest, rel=1e-12)
        assert all(v >= 0.0 for v in parts.values())
    assert dsv3_h200.breakdown([]) == dict.fromkeys(BREAKDOWN_KEYS, 0.0)
    assert dsv3_h200.forward_time(PROMPT) == dsv3_h200.breakdown(PROMPT)["total"]


def test_one_gemm_shape_is_the_table_value(handle: EngineHandle) -> None:
    # h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet, fp8_block m=4096 n=2048 k=7168.
    got = _aic_ms(handle, ops.GEMM("g", 1, 2048, 7168, FP8), 4096)
    assert got == pytest.approx(0.11566666762034099, rel=1e-6)


def test_dsv3_linear_and_moe_are_aic_op_evaluations(
    dsv3_h200: AicCostModel, handle: EngineHandle
) -> None:
    # DeepSeek-V3, attention TP 8: q_lora 1536, kv_lora 512, rope 64, 128 heads of
    # 192 (qk) / 128 (v), 3 dense layers (FFN 18432) and 58 MoE layers (shared 2048).
    gemms = [
        (61, 1536 + 512 + 64, 7168, FP8),
        (61, 128 * 192 // 8, 1536, FP8),
        (61, 128 * 256 // 8, 512, FP8),
        (61, 7168, 128 * 128 // 8, FP8),
        (3, 2 * 18432 // 8, 7168, FP8),
        (3, 7168, 18432 // 8, FP8),
        (58, 2 * 2048 // 8, 7168, FP8),
        (58, 7168, 2048 // 8, FP8),
        (58, 256, 7168, BF16),
    ]
    linear = sum(
        _aic_ms(handle, ops.GEMM(f"g{i}", n_layers, n, k, q), 4096)
        for i, (n_layers, n, k, q) in enumerate(gemms)
    )
    # EP 8: SGLang's large-EP kernels (DeepEP + DeepGEMM), AIC's skewed routing.
    moe_op = ops.MoEExpertCompute(
        "moe",
        58,
        hidden_size=7168,
        inter_size=2048,
        topk=8,
        num_experts=256,
        moe_ep_size=8,
        quant_mode=common.MoEQuantMode.fp8_block,
        workload_distribution="power_law_1.01",
        attention_dp_size=1,
        inference_phase="context",
        num_slots=None,
        is_gated=True,
        enable_eplb=False,
    )
    moe = _aic_ms(handle, moe_op, 4096)
    parts = dsv3_h200.breakdown(PROMPT)
    assert parts["linear"] == pytest.approx(linear / 1e3, rel=1e-9)
    assert parts["moe_experts"] == pytest.approx(moe / 1e3, rel=1e-9)
    assert dsv3_h200.fallback_calls == {}


def test_dsv3_attention_is_the_context_mla_table(
    dsv3_h200: AicCostModel, handle: EngineHandle
) -> None:
    mla = ops.ContextMLA(
        "mla", 61, 16, common.KVCacheQuantMode.bfloat16, common.FMHAQuantMode.bfloat16
    )
    (row,) = handle.evaluate_ops_json(build_ops_json([mla]), is_context=True, batch_size=1, s=4096)
    assert dsv3_h200.breakdown(PROMPT)["attention"] == pytest.approx(row[1] / 1e3, rel=1e-9)


def test_provenance_measured_derived_roofline(dsv3_h200: AicCostModel) -> None:
    prov = dsv3_h200.provenance()
    assert set(BREAKDOWN_KEYS) <= set(prov)
    assert prov["linear"] == "measured: sglang 0.5.14 h200_sxm gemm (fp8_block)"
    assert prov["moe_experts"].startswith(
        "measured: sglang 0.5.14 h200_sxm large-EP moe_expert_compute"
    )
    assert prov["per_forward"].startswith("roofline")
    assert prov["decode"].startswith("roofline")
    derived = AicCostModel(_dsv3("h20-141g")).provenance()
    for key in ("linear", "moe_experts"):
        assert derived[key].startswith("derived: sglang 0.5.14 h200_sxm tables scaled to H20 141GB")
    assert derived["per_forward"].startswith("roofline")


def test_derived_gpu_is_rescaled_within_its_peak_ratios(dsv3_h200: AicCostModel) -> None:
    h20 = AicCostModel(_dsv3("h20-141g")).breakdown(PROMPT)
    h200 = dsv3_h200.breakdown(PROMPT)
    # Same HBM bandwidth, fp8 peak 1979 / 296: each op scales by a factor in [1, 6.69].
    for key in ("linear", "moe_experts"):
        assert h200[key] < h20[key] <= h200[key] * 1979 / 296 * (1 + 1e-9)
    assert h20["moe_comm_exposed"] == pytest.approx(h200["moe_comm_exposed"], rel=1e-9)


def test_gpu_without_tables_is_the_roofline() -> None:
    x = GpuSpec(
        name="X",
        peak_flops_bf16=300e12,
        peak_flops_fp8=300e12,
        hbm_bandwidth=2e12,
        memory_bytes=80e9,
        nvlink_bandwidth=300e9,
        net_bandwidth=25e9,
        num_sms=100,
        family="ampere",
    )
    with pytest.raises(KeyError):
        aic_system_for_gpu("X")
    for rf in (_glm5(x), RooflineCostModel(get_model("llama-3.1-8b"), x, 2)):
        aic = AicCostModel(rf)
        prov = aic.provenance()
        assert all(prov[k].startswith("roofline") for k in BREAKDOWN_KEYS if k != "total")
        for batch in (PROMPT, [ReqShape(65536, 1024)] * 3, [ReqShape(4000, 900, 500)]):
            want = rf.breakdown(batch)
            got = aic.breakdown(batch)
            for key in BREAKDOWN_KEYS:
                assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-15), key


def test_gpu_mapping() -> None:
    assert aic_system_for_gpu("h200") == ("h200_sxm", None)
    assert aic_system_for_gpu("H100 SXM") == ("h100_sxm", None)
    assert aic_system_for_gpu("gb200") == ("gb200", None)
    assert aic_system_for_gpu("h20-141g") == ("h200_sxm", "h200")
    assert aic_system_for_gpu("h800") == ("h100_sxm", "h100")


def test_bad_backend_or_version() -> None:
    with pytest.raises(ValueError, match="--aic-backend"):
        AicCostModel(_dsv3(), backend="tensorrt")
    with pytest.raises(ValueError, match="--aic-version"):
        AicCostModel(_dsv3(), version="0.0.1")


def test_missing_package_raises_one_line_error() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["aiconfigurator_core"] = None
        from prefillkit.models import get_model
        from prefillkit.cost.aic import AicCostModel, AicUnavailableError
        from prefillkit.cost.roofline import RooflineCostModel
        from prefillkit.cost.gpus import get_gpu
        rf = RooflineCostModel(get_model("deepseek-v3"), get_gpu("h200"), 8)
        try:
            AicCostModel(rf)
        except AicUnavailableError as exc:
            print("ERR", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "ERR --cost-model aic needs the aic extra: pip install 'prefillkit[aic]'\n"
    assert issubclass(AicUnavailableError, RuntimeError)


def test_glm5_seed_deployment_is_finite() -> None:
    aic = AicCostModel(_glm5(get_gpu("h20-141g")))
    for batch in ([ReqShape(65536, 1024)] * 8, [ReqShape(0, 57344)]):
        parts = aic.breakdown(batch)
        assert math.isfinite(parts["total"]) and parts["total"] > 0.0
        assert parts["linear"] > 0.0 and parts["moe_experts"] > 0.0
    assert aic.provenance()["cp_kv_gather"].startswith("derived")
    assert aic.decode_step_time(16, 100_000) == aic.roofline.decode_step_time(16, 100_000)
    assert aic.kv_transfer_time(1000) == aic.roofline.kv_transfer_time(1000)


def test_dsa_block_without_cp_is_measured_and_taken_apart(handle: EngineHandle) -> None:
    # GLM-5 at attention TP 8 on H200: AIC's DSA block table (projections + indexer +
    # sparse MLA + o_proj) per request, less its projection GEMMs, against the roofline's
    # attention + indexer of the same request; both terms scaled by that ratio.
    rf = RooflineCostModel(
        get_model("glm-5"), get_gpu("h200"), 8, layout=ParallelLayout(8, ep_size=8), page_size=1
    )
    aic = AicCostModel(rf)
    prov = aic.provenance()
    assert prov["attention"].startswith("measured: sglang 0.5.14 h200_sxm context DSA module")
    assert prov["indexer"] == prov["attention"]
    req = ReqShape(0, 4096)
    dsa = ops.ContextDSAModule(
        "dsa",
        78,
        8,
        common.KVCacheQuantMode.bfloat16,
        common.FMHAQuantMode.bfloat16,
        FP8,
        architecture="GlmMoeDsaForCausalLM",
    )
    (row,) = handle.evaluate_ops_json(build_ops_json([dsa]), is_context=True, batch_size=1, s=4096)
    assert row[3] == "silicon"
    # The block's GEMMs: fused q_a + kv_a (2048 + 512 + 64), q_b (64 x 256 / 8), kv_b
    # (64 x (192 + 256) / 8), o_proj (64 x 256 / 8 -> 6144), the indexer's wq_b (32 x 128),
    # wk (128) and head weights (32, bf16); 78 layers.
    gemms = [
        (2048 + 512 + 64, 6144, FP8),
        (64 * 256 // 8, 2048, FP8),
        (64 * 448 // 8, 512, FP8),
        (6144, 64 * 256 // 8, FP8),
        (32 * 128, 2048, FP8),
        (128, 6144, FP8),
        (32, 6144, BF16),
    ]
    proj = sum(
        _aic_ms(handle, ops.GEMM(f"p{i}", 78, n, k, q), 4096) for i, (n, k, q) in enumerate(gemms)
    )
    alone = rf.breakdown([req])
    scale = (row[1] - proj) / 1e3 / (alone["attention"] + alone["indexer"])
    assert aic.dsa_scale([req]) == pytest.approx(scale, rel=1e-9)
    parts = aic.breakdown([req])
    assert parts["attention"] == pytest.approx(alone["attention"] * scale, rel=1e-9)
    assert parts["indexer"] == pytest.approx(alone["indexer"] * scale, rel=1e-9)
    # Under CP AIC only estimates the block: the seed's attention stays on the roofline.
    seed = AicCostModel(
        RooflineCostModel(
            get_model("glm-5"),
            get_gpu("h20-141g"),
            8,
            layout=ParallelLayout(8, cp_size=8, ep_size=8),
            page_size=64,
        )
    )
    assert seed.provenance()["attention"].startswith("roofline")
