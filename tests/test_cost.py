"""Tests for the roofline cost model and GPU presets."""

from __future__ import annotations

import itertools
import math

import pytest

from prefillkit.models import MODELS, get_model
from prefillkit.sim.cost import (
    BREAKDOWN_KEYS,
    HOPPER,
    ReqShape,
    RooflineCostModel,
    default_cost_model,
)
from prefillkit.sim.gpus import GPUS, GpuSpec, get_gpu


@pytest.fixture(scope="module")
def dsv32() -> RooflineCostModel:
    return default_cost_model("deepseek-v3.2", "h800", 8)


@pytest.fixture(scope="module")
def llama() -> RooflineCostModel:
    return default_cost_model("llama-3.1-8b", "h100", 1)


# --- published figures ------------------------------------------------------------------


def test_llama_linear_term_matches_analytic_value(llama: RooflineCostModel) -> None:
    # The dense bf16 linear term by hand: 2 x token-local params (active params less the
    # embedding and LM head) x tokens / (peak_bf16 x 0.7) once the batch has >= 512 rows.
    model = get_model("llama-3.1-8b")
    gpu = get_gpu("h100")
    assert llama.gemm_dtype == "bf16"
    assert llama.eff_gemm == HOPPER.gemm_bf16 == 0.7
    local = model.active_params - 2 * 128_256 * 4096
    for tokens in (512, 4096, 16_384):
        expected = 2 * local * tokens / (gpu.peak_flops_bf16 * 0.7)
        batch = [ReqShape(0, tokens)]
        assert llama.breakdown(batch)["linear"] == pytest.approx(expected, rel=1e-12)
        # Compute-bound at these sizes: the weight-read term is smaller.
        weights_s = model.weight_bytes / (gpu.hbm_bandwidth * HOPPER.mem)
        assert expected > weights_s


def test_gemm_efficiency_ramp_below_512_tokens(llama: RooflineCostModel) -> None:
    assert llama.gemm_efficiency(512) == pytest.approx(0.7)
    assert llama.gemm_efficiency(10_000) == pytest.approx(0.7)
    assert llama.gemm_efficiency(128) == pytest.approx(0.7 * 0.5)
    # Tiny batches sit on the memory roofline (all weights read once).
    model = get_model("llama-3.1-8b")
    gpu = get_gpu("h100")
    weights_s = model.weight_bytes / (gpu.hbm_bandwidth * HOPPER.mem)
    assert llama.linear_time(1) == pytest.approx(weights_s)
    # Compute time still grows with tokens through the ramp.
    times = [llama.linear_time(t) for t in (1, 64, 128, 256, 511, 512, 1024)]
    assert times == sorted(times)


def test_fp8_moe_defaults(dsv32: RooflineCostModel) -> None:
    assert dsv32.gemm_dtype == "fp8"
    assert dsv32.eff_gemm == HOPPER.gemm_fp8 == 0.65


# --- monotonicity -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dsv32", "llama"])
@pytest.mark.parametrize("prefix", [0, 1024, 16_384])
def test_more_extend_costs_more(name: str, prefix: int, request: pytest.FixtureRequest) -> None:
    cm: RooflineCostModel = request.getfixturevalue(name)
    extends = [1, 64, 512, 1024, 2048, 2049, 4096, 8192, 32_768]
    times = [cm.forward_time([ReqShape(prefix, e)]) for e in extends]
    assert all(b > a for a, b in itertools.pairwise(times)), times


def test_more_requests_cost_more(dsv32: RooflineCostModel) -> None:
    one = dsv32.forward_time([ReqShape(0, 4096)])
    two = dsv32.forward_time([ReqShape(0, 4096)] * 2)
    assert two > one


def test_cached_prefix_still_costs_indexer_time_on_sparse_model(
    dsv32: RooflineCostModel,
) -> None:
    cold = dsv32.breakdown([ReqShape(0, 512)])
    warm_8k = dsv32.breakdown([ReqShape(8192, 512)])
    warm_64k = dsv32.breakdown([ReqShape(65_536, 512)])
    assert cold["indexer"] == 0.0  # 512-token context: dense path, no indexer
    assert 0.0 < warm_8k["indexer"] < warm_64k["indexer"]
    # The indexer scans the whole context: sum of (x + 1) over the extend positions.
    assert warm_64k["indexer"] / warm_8k["indexer"] == pytest.approx(
        (65_536 + 256.5) / (8192 + 256.5), rel=1e-9
    )
    # Sparse attention itself is capped by top-k: same for both warm prefixes.
    assert warm_64k["attention"] == pytest.approx(warm_8k["attention"])
    assert warm_8k["total"] < warm_64k["total"]


def test_dense_model_prefix_costs_attention(llama: RooflineCostModel) -> None:
    short = llama.breakdown([ReqShape(1024, 512)])
    long = llama.breakdown([ReqShape(32_768, 512)])
    assert long["attention"] > short["attention"]
    assert long["indexer"] == short["indexer"] == 0.0


def test_sparse_attention_continuous_at_threshold(dsv32: RooflineCostModel) -> None:
    at = dsv32.breakdown([ReqShape(0, 2048)])
    above = dsv32.breakdown([ReqShape(0, 2049)])
    assert above["attention"] == pytest.approx(at["attention"], rel=2e-3)
    assert at["indexer"] == 0.0 < above["indexer"]


def test_cold_8k_request_lengthens_warm_batch(dsv32: RooflineCostModel) -> None:
    warm = [ReqShape(prefix_len=8192, extend_len=512)] * 8
    base = dsv32.forward_time(warm)
    mixed = dsv32.forward_time([*warm, ReqShape(prefix_len=0, extend_len=8192)])
    # 4,096 warm extend tokens + 8,192 cold ones: the forward takes ~2.8x as long.
    assert mixed / base >= 2.5


# --- load-back overlap ----------------------------------------------------------------------


def test_small_loadback_is_hidden(dsv32: RooflineCostModel) -> None:
    plain = dsv32.breakdown([ReqShape(4096, 4096)])
    loaded = dsv32.breakdown([ReqShape(4096, 4096, loaded_tokens=4096)])
    assert loaded["loadback_exposed"] == 0.0
    assert loaded["total"] == plain["total"]


def test_large_loadback_exposed_beyond_compute(dsv32: RooflineCostModel) -> None:
    req = ReqShape(prefix_len=262_144, extend_len=64, loaded_tokens=262_144)
    bd = dsv32.breakdown([req])
    core = sum(
        bd[k]
        for k in (
            "linear",
            "attention",
            "indexer",
            "elementwise",
            "moe_experts",
            "moe_comm_exposed",
        )
    )
    load = 262_144 * dsv32.kv_bytes_per_token / dsv32.h2d_bandwidth
    assert load > core
    assert bd["loadback_exposed"] == pytest.approx(load - core)
    fixed = bd["per_forward"] + bd["per_request"] + bd["tp_comm"] + bd["cp_kv_gather"]
    assert bd["total"] == pytest.approx(load + fixed)


def test_mla_loadback_not_divided_by_gpus() -> None:
    one = default_cost_model("deepseek-v3.2", "h800", 1)
    eight = default_cost_model("deepseek-v3.2", "h800", 8)
    assert one.loadback_time(10_000) == pytest.approx(eight.loadback_time(10_000))
    gqa1 = default_cost_model("llama-3.1-8b", "h100", 1)
    gqa8 = default_cost_model("llama-3.1-8b", "h100", 8)
    assert gqa8.loadback_time(10_000) == pytest.approx(gqa1.loadback_time(10_000) / 8)


# --- edge cases -----------------------------------------------------------------------------


def test_empty_batch_is_zero(dsv32: RooflineCostModel) -> None:
    assert dsv32.forward_time([]) == 0.0
    bd = dsv32.breakdown([])
    assert tuple(bd) == BREAKDOWN_KEYS
    assert all(v == 0.0 for v in bd.values())
    assert dsv32.decode_step_time(0, 0) == 0.0
    assert dsv32.kv_transfer_time(0) == 0.0


@pytest.mark.parametrize(
    "args",
    [(-1, 10, 0), (0, -1, 0), (10, 10, -1), (10, 10, 11)],
)
def test_invalid_req_shape_raises(dsv32: RooflineCostModel, args: tuple[int, int, int]) -> None:
    # ReqShape is the core's plain record (shared with the buffer estimator); the cost
    # model refuses a bad one, as the estimator does.
    with pytest.raises(ValueError):
        dsv32.breakdown([ReqShape(*args)])


def test_negative_inputs_raise(dsv32: RooflineCostModel) -> None:
    with pytest.raises(ValueError):
        dsv32.decode_step_time(-1, 100)
    with pytest.raises(ValueError):
        dsv32.decode_step_time(1, -100)
    with pytest.raises(ValueError):
        dsv32.kv_transfer_time(-1)


def test_invalid_constructor_args() -> None:
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    with pytest.raises(ValueError):
        RooflineCostModel(model, gpu, 0)
    with pytest.raises(ValueError):
        RooflineCostModel(model, gpu, 1, eff_attn=0.0)
    with pytest.raises(ValueError):
        RooflineCostModel(model, gpu, 1, eff_gemm=1.5)
    with pytest.raises(ValueError):
        RooflineCostModel(model, gpu, 1, h2d_bandwidth=0.0)
    with pytest.raises(ValueError):
        RooflineCostModel(model, gpu, 1, gemm_dtype="int4")


def test_breakdown_total_is_sum_of_parts(dsv32: RooflineCostModel) -> None:
    batch = [ReqShape(8192, 512, loaded_tokens=4096), ReqShape(0, 3000)]
    bd = dsv32.breakdown(batch)
    parts = sum(bd[k] for k in BREAKDOWN_KEYS if k != "total")
    assert bd["total"] == pytest.approx(parts)
    assert dsv32.forward_time(batch) == bd["total"]


# --- decode and transfer --------------------------------------------------------------------


def test_decode_memory_bound_formula(llama: RooflineCostModel) -> None:
    model = get_model("llama-3.1-8b")
    gpu = get_gpu("h100")
    ctx = 32 * 2000
    expected = (model.weight_bytes + ctx * model.kv_bytes_per_token_bf16) / (
        gpu.hbm_bandwidth * HOPPER.mem
    ) + llama.per_forward_s
    assert llama.decode_step_time(32, ctx) == pytest.approx(expected)


def test_decode_monotone(dsv32: RooflineCostModel) -> None:
    by_ctx = [dsv32.decode_step_time(64, c) for c in (0, 10_000, 100_000, 1_000_000)]
    assert by_ctx == sorted(by_ctx) and by_ctx[0] < by_ctx[-1]
    by_bs = [dsv32.decode_step_time(b, 100_000) for b in (1, 4, 16, 64, 256)]
    assert by_bs == sorted(by_bs)


def test_kv_transfer_time(dsv32: RooflineCostModel) -> None:
    expected = 4096 * dsv32.kv_bytes_per_token / dsv32.kv_transfer_bandwidth
    assert dsv32.kv_transfer_time(4096) == pytest.approx(expected)


def test_factory_units_and_kv_bytes() -> None:
    cm = default_cost_model(
        "deepseek-v3.2", "h800", 8, kv_bytes_per_token=48_068, h2d_gbps=25, kv_transfer_gbps=10
    )
    assert cm.h2d_bandwidth == 25e9
    assert cm.kv_transfer_bandwidth == 10e9
    assert cm.kv_bytes_per_token == 48_068
    assert default_cost_model("glm-5", "h200").kv_bytes_per_token == (
        get_model("glm-5").kv_bytes_per_token_bf16
    )


# --- presets --------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu_name", sorted(GPUS))
@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("num_gpus", [1, 8])
def test_every_preset_pair_gives_finite_positive_times(
    gpu_name: str, model_name: str, num_gpus: int
) -> None:
    cm = default_cost_model(model_name, gpu_name, num_gpus)
    # NOTE: CostModel is a static Protocol (no runtime_checkable: the compiled build
    # turns it into a trait), so the structure is checked by hand.
    for method in ("breakdown", "forward_time", "decode_step_time", "kv_transfer_time"):
        assert callable(getattr(cm, method)), method
    assert isinstance(cm.breakdown_keys, tuple)
    batches = [
        [ReqShape(0, 1)],
        [ReqShape(0, 4096)] * 4,
        [ReqShape(65_536, 512, loaded_tokens=32_768), ReqShape(0, 8192)],
    ]
    for batch in batches:
        t = cm.forward_time(batch)
        assert math.isfinite(t) and t > 0.0
        assert all(math.isfinite(v) and v >= 0.0 for v in cm.breakdown(batch).values())
    for bs, ctx in ((1, 100), (64, 64 * 4096)):
        d = cm.decode_step_time(bs, ctx)
        assert math.isfinite(d) and d > 0.0
    x = cm.kv_transfer_time(4096)
    assert math.isfinite(x) and x > 0.0


def test_gpu_presets() -> None:
    expected = {
        "h200": (989e12, 1979e12, 4.8e12, 141e9),
        "h100": (989e12, 1979e12, 3.35e12, 80e9),
        "h800": (989e12, 1979e12, 3.35e12, 80e9),
        "h20": (148e12, 296e12, 4.0e12, 96e9),
        "h20-141g": (148e12, 296e12, 4.8e12, 141e9),
        "b200": (2250e12, 4500e12, 8.0e12, 180e9),
        "gb200": (2500e12, 5000e12, 8.0e12, 186e9),
        "a100": (312e12, 312e12, 2.0e12, 80e9),
    }
    assert set(GPUS) == set(expected)
    for key, (bf16, fp8, bw, mem) in expected.items():
        gpu = GPUS[key]
        assert isinstance(gpu, GpuSpec)
        assert (gpu.peak_flops_bf16, gpu.peak_flops_fp8) == pytest.approx((bf16, fp8))
        assert (gpu.hbm_bandwidth, gpu.memory_bytes) == pytest.approx((bw, mem))


def test_get_gpu_lookup() -> None:
    assert get_gpu("H800") is GPUS["h800"]
    assert get_gpu("A100_SXM") is GPUS["a100"]
    with pytest.raises(KeyError, match="known: a100, b200, gb200, h100, h20, h20-141g, h200, h800"):
        get_gpu("tpu-v5e")
