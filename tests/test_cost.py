"""Tests for the roofline cost model and GPU presets."""

from __future__ import annotations

import itertools
import math

import pytest

from prefillkit.cost.forward_models import default_cost_model
from prefillkit.cost.gpus import GPUS, GpuSpec, get_gpu
from prefillkit.cost.roofline import BREAKDOWN_KEYS, HOPPER, ReqShape, RooflineCostModel
from prefillkit.cost.roofline_setup import sparse_kernel_heads
from prefillkit.models import MODELS, get_model


@pytest.fixture(scope="module")
def dsv32() -> RooflineCostModel:
    return default_cost_model("deepseek-v3.2", "h800", 8)


@pytest.fixture(scope="module")
def llama() -> RooflineCostModel:
    return default_cost_model("llama-3.1-8b", "h100", 1)


# --- published figures ------------------------------------------------------------------


def test_llama_linear_term_matches_analytic_value(llama: RooflineCostModel) -> None:
    # The dense bf16 linear term by hand at 4,096 rows on H100 (132 SMs, 989 TFLOPS bf16 x
    # 0.7), tile model: qkv_proj (4096 -> 48 x 128) has 32 x 48 = 1,536 tiles = 12 waves;
    # o_proj (4096 -> 4096): 32 x 32 = 1,024 tiles = 8 waves; gate_up (4096 -> 28,672):
    # 32 x 224 = 7,168 tiles = 55 waves; down (14,336 -> 4096): 1,024 tiles = 8 waves.
    # Every wave is one 128 x 128 tile's 2 x 128 x 128 x k FLOPs on one SM; 32 layers.
    assert llama.gemm_dtype == "bf16"
    assert llama.eff_gemm == HOPPER.gemm_bf16 == 0.7
    sm_rate = 989e12 * 0.7 / 132
    wave = 2 * 128 * 128 / sm_rate
    per_layer = (12 + 8 + 55) * wave * 4096 + 8 * wave * 14_336
    assert llama.breakdown([ReqShape(0, 4096)])["linear"] == pytest.approx(
        32 * per_layer, rel=1e-12
    )
    # Against the ideal 2 x params x rows / (peak x eff): waves lose 5-9 % here.
    model = get_model("llama-3.1-8b")
    ideal = 2 * model.token_local_params * 4096 / (989e12 * 0.7)
    assert 1.0 < 32 * per_layer / ideal < 1.1
    assert model.token_local_params == pytest.approx(8.03e9 - 2 * 128_256 * 4096, rel=1e-3)


@pytest.mark.parametrize(
    ("small_gemm", "eff_128", "eff_100"),
    [
        ("tiles", 0.7, 0.7 * 100 / 128),
        ("sqrt-h100", 0.7 * 0.5, 0.7 * math.sqrt(100 / 512)),
        ("ideal", 0.7, 0.7),
    ],
)
def test_gemm_efficiency_per_small_gemm_assumption(
    small_gemm: str, eff_128: float, eff_100: float
) -> None:
    cm = RooflineCostModel(get_model("llama-3.1-8b"), get_gpu("h100"), 1, small_gemm=small_gemm)
    assert cm.gemm_efficiency(128) == pytest.approx(eff_128)
    assert cm.gemm_efficiency(100) == pytest.approx(eff_100)
    padded = 0.7 * 10_000 / 10_112  # 79 tiles of 128 rows
    assert cm.gemm_efficiency(10_000) == pytest.approx(padded if small_gemm == "tiles" else 0.7)
    # One row sits on the memory roofline: every weight read once (+ tiny activations; under
    # the tile model o_proj's padded 64-row tile costs slightly more than its weights).
    model = get_model("llama-3.1-8b")
    weights_s = model.token_local_params * 2 / (get_gpu("h100").hbm_bandwidth * HOPPER.mem)
    assert weights_s <= cm.linear_time(1) <= weights_s * 1.01
    times = [cm.linear_time(t) for t in (1, 64, 128, 256, 511, 512, 1024)]
    assert times == sorted(times)


def test_unknown_small_gemm_assumption_is_refused() -> None:
    with pytest.raises(ValueError, match="small_gemm must be one of tiles, sqrt-h100, ideal"):
        RooflineCostModel(get_model("llama-3.1-8b"), get_gpu("h100"), 1, small_gemm="cubic")


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


def test_attention_form_switches_as_sglang_decides(dsv32: RooflineCostModel) -> None:
    # DSA without CP: MHA one-shot while every sequence is <= 2,048 keys, 2 H (d_qk + d_v)
    # = 2 x 128 x (192 + 128) FLOPs per pair per layer over attention TP 8; absorbed MLA
    # above it, 2 x (512 + 64 + 512) per head, the rank's 16 heads zero-padded to the 64
    # FlashMLA's sparse kernel needs on Hopper; 61 layers, bf16 x 0.5 on H800.
    rate = 989e12 * 0.5
    mha = 2 * 61 * 128 * (192 + 128) / 8 / rate
    absorbed = 2 * 61 * 64 * (512 + 64 + 512) / rate
    at = [ReqShape(0, 2048)]
    above = [ReqShape(0, 2049)]
    assert dsv32.attention_coefficient(at) == pytest.approx(mha, rel=1e-12)
    assert dsv32.attention_coefficient(above) == pytest.approx(absorbed, rel=1e-12)
    keys = 2048 * 2049 // 2
    assert dsv32.breakdown(at)["attention"] == pytest.approx(mha * keys, rel=1e-12)
    assert dsv32.breakdown(at)["indexer"] == 0.0 < dsv32.breakdown(above)["indexer"]
    # One long request makes the whole batch take the absorbed path.
    assert dsv32.attention_coefficient([*at, ReqShape(4096, 16)]) == pytest.approx(absorbed)


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "heads"),
    [
        ("glm-5", "h20-141g", 1, 64),  # the seed: CP 8, attention TP 1: 64 heads, no pad
        ("glm-5", "b200", 1, 128),  # Blackwell's sparse kernel takes 128 heads
        ("glm-5", "h200", 8, 64),  # 8 heads run in a 64-head kernel
        ("deepseek-v3.2", "h800", 1, 128),  # 128 heads: a multiple of 64
        ("deepseek-v3", "h200", 8, 16),  # dense MLA: no padding
    ],
)
def test_sparse_kernel_heads_pad_to_flashmla(model: str, gpu: str, tp: int, heads: int) -> None:
    assert sparse_kernel_heads(get_model(model), get_gpu(gpu), tp) == heads


def test_dense_mla_form_follows_the_chunked_prefix_threshold() -> None:
    cm = default_cost_model("deepseek-v3", "h200", 8)
    mha = cm.attention_coefficient([ReqShape(0, 4096)])
    assert cm.attention_coefficient([ReqShape(4096, 512)]) == pytest.approx(mha * 1088 / 320)
    assert cm.attention_coefficient([ReqShape(8192, 512)]) == mha  # MHA chunked-KV
    cp = default_cost_model("deepseek-v3", "h200", 8, cp_size=8, page_size=64)
    assert cp.attention_coefficient([ReqShape(0, 4096)]) == pytest.approx(
        8 * mha * 1088 / 320  # absorbed under CP, and attention TP 1 instead of 8
    )


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


def test_sparse_decode_kv_read_at_one_hand_computed_point(dsv32: RooflineCostModel) -> None:
    """DeepSeek-V3.2 (61 layers, indexer keys of 128 fp8 bytes + a 4-byte scale per layer,
    top-k 2048) on 8 x H800, one request of 100,000 context tokens: the step reads the
    indexer keys of every token, 61 x 132 = 8,052 B, and the MLA latents (61 x 576 x 2 =
    70,272 B) of the 2,048 tokens the indexer picks: 100,000 x 8,052 + 2,048 x 70,272 =
    949,117,056 B over 8 GPUs x 3.35 TB/s x 0.8. The weights term is the same at context
    0, and the step is memory-bound (compute 0.46 ms < weights 1.75 ms)."""
    assert dsv32.kv_bytes_per_token == 8_052 + 70_272
    kv_seconds = 949_117_056 / (8 * 3.35e12 * 0.8)
    step = dsv32.decode_step_time(1, 100_000) - dsv32.decode_step_time(1, 0)
    assert step == pytest.approx(kv_seconds, rel=1e-12)


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
        "gb300": (2500e12, 5000e12, 8.0e12, 288e9),
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
    with pytest.raises(
        KeyError, match="known: a100, b200, gb200, gb300, h100, h20, h20-141g, h200, h800"
    ):
        get_gpu("tpu-v5e")
