"""The CP-aware cost model: the page-aligned split, each term by hand, overlap, validation.

Every term is checked against a hand computation from its formula in the
``prefillkit.cost.roofline`` docstring; the published figures and the seed scenario are
checked as the validation table in ``benchmarks/RESULTS.md`` states them.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from prefillkit.cost.gpus import get_gpu
from prefillkit.cost.roofline import (
    BREAKDOWN_KEYS,
    HOPPER,
    ParallelLayout,
    ReqShape,
    RooflineCostModel,
    activation_bytes_per_token_layer,
)
from prefillkit.cost.validation import (
    SEED_DEPLOYMENT,
    seed_cost_model,
    seed_scenario,
    seed_settings,
)
from prefillkit.models import get_model, token_local_gemms
from prefillkit.sched.buffer import (
    BufferEstimatorContext,
    BufferReqShape,
    estimate_buffer_breakdown,
)
from prefillkit.sched.cp_split import add_lane_rows, add_lane_span

GLM5 = get_model("glm-5")
H20 = get_gpu("h20-141g")


def cp8(**kw: object) -> RooflineCostModel:
    layout = ParallelLayout(8, cp_size=8, ep_size=8, **kw)  # type: ignore[arg-type]
    return RooflineCostModel(GLM5, H20, 8, layout=layout, page_size=64)


# --- the split ----------------------------------------------------------------------------


def brute(start: int, end: int, page: int, r: int) -> tuple[list[int], list[int]]:
    rows, keys = [0] * r, [0] * r
    for x in range(start, end):
        lane = (x // page) % r
        rows[lane] += 1
        keys[lane] += x + 1
    return rows, keys


@pytest.mark.parametrize("r,page", list(itertools.product([1, 2, 3, 8], [1, 4, 64])))
def test_lane_span_matches_brute_force(r: int, page: int) -> None:
    rng = random.Random(r * 100 + page)
    for _ in range(300):
        start = rng.randrange(0, 2000)
        end = start + rng.randrange(0, 2000)
        rows, keys = [0] * r, [0] * r
        add_lane_span(rows, keys, start, end, page)
        assert (rows, keys) == brute(start, end, page, r)
        only_rows = [0] * r
        add_lane_rows(only_rows, start, end - start, page)
        assert only_rows == rows


def test_short_extends_pile_onto_one_rank() -> None:
    # Eight one-page extends whose prefixes end on a multiple of 8 pages all start on
    # lane 0: the busiest rank holds all eight pages, not one.
    rows = [0] * 8
    for _ in range(8):
        add_lane_rows(rows, 64 * 8 * 10, 64, 64)
    assert rows == [512, 0, 0, 0, 0, 0, 0, 0]


def test_buffer_estimator_and_cost_model_share_the_split() -> None:
    batch = [(640, 64), (1280 + 64, 128), (0, 300)]
    ctx = BufferEstimatorContext(model=GLM5, cp_size=8, page_size=64)
    est = estimate_buffer_breakdown([BufferReqShape(p, e) for p, e in batch], ctx)
    rows, _, _ = cp8().rank_work([ReqShape(p, e) for p, e in batch])
    # topk_indices = 4 bytes x busiest-rank rows x index_topk.
    assert est.buffers["topk_indices"] == 4 * max(rows) * GLM5.index_topk


# --- each term by hand -------------------------------------------------------------------


def test_terms_by_hand_one_cold_request() -> None:
    cm = cp8()
    e = 8 * 64 * 32  # 16,384 tokens: 32 pages per rank; 512 tokens per expert
    bd = cm.breakdown([ReqShape(0, e)])
    rows = e // 8
    # linear: every token-local GEMM of GLM-5 at 2,048 rows per rank (attention TP 1), each
    # timed by the tile model; one GEMM by hand: q_b_proj (2048 -> 64 x 256 = 16,384) has
    # 16 x 128 = 2,048 output tiles of 128 x 128, 27 waves over H20's 78 SMs, each wave
    # one tile's 2 x 128 x 128 x 2048 FLOPs at a 78th of 296 TFLOPS x 0.65.
    timer = cm._timer
    q_b = 27 * 2 * 128 * 128 * 2048 / (296e12 * 0.65 / 78)
    assert timer.time(rows, 16_384, 2048) == pytest.approx(q_b, rel=1e-12)
    assert q_b == pytest.approx(734.6e-6, rel=1e-3)
    linear = sum(g.layers * timer.time(rows, g.n, g.k) for g in token_local_gemms(GLM5))
    assert bd["linear"] == pytest.approx(linear)
    # The busiest rank is rank 7 (pages 7, 15, ...: the latest positions, the most keys).
    # attention: keys min(x + 1, 2048) per row, absorbed MLA under CP: QK over 512 + 64,
    # PV over 512.
    keys = sum(min(x + 1, 2048) for x in range(e) if (x // 64) % 8 == 7)
    coef = 2 * 78 * 64 * (512 + 64 + 512)
    assert bd["attention"] == pytest.approx(coef * keys / (H20.peak_flops_bf16 * 0.5))
    # indexer: the context exceeds 2048, every row scans x + 1 keys.
    idx_keys = sum(x + 1 for x in range(e) if (x // 64) % 8 == 7)
    idx = 2 * 78 * 32 * 128 * idx_keys / (H20.peak_flops_fp8 * 0.3)
    assert bd["indexer"] == pytest.approx(idx)
    elem = rows * 78 * activation_bytes_per_token_layer(GLM5) / (H20.hbm_bandwidth * 0.8)
    assert bd["elementwise"] == pytest.approx(elem)
    # routed experts: 16,384 x 8 / 256 = 512 rows per expert on average, x the imbalance
    # 1.25 x (1 + sqrt(2 ln 8 x 7/8 / 16,384)); each expert's rows padded to 128-row tiles
    # (E[ceil] = 1 - e^-r + r/128 - 0.5), 32 local experts, gate/up 32 column tiles and
    # down 48, in waves over 78 SMs; 75 MoE layers.
    r = 512 * 1.25 * (1 + math.sqrt(2 * math.log(8) * 7 / 8 / 16_384))
    row_tiles = 32 * (1 - math.exp(-r) + r / 128 - 0.5)
    wave = 2 * 128 * 128 / (296e12 * 0.65 / 78)
    per_layer = math.ceil(row_tiles * 32 / 78) * wave * 6144
    per_layer += math.ceil(row_tiles * 48 / 78) * wave * 2048
    assert bd["moe_experts"] == pytest.approx(75 * per_layer)
    # EP inside one node, no TBO: all of dispatch (fp8 + scales) + combine (bf16) adds.
    a2a = rows * 8 * 7 / 8 * (6144 * (1 + 4 / 128) + 2 * 6144) * 75 / (450e9 * 0.8)
    assert bd["moe_comm_exposed"] == pytest.approx(a2a)
    # CP gather: 7/8 of every context row's KV over NVLink.
    gather = e * 7 / 8 * GLM5.kv_bytes_per_token_bf16 / (450e9 * 0.8)
    assert bd["cp_kv_gather"] == pytest.approx(gather)
    assert bd["tp_comm"] == 0.0
    assert bd["per_request"] == pytest.approx(1e-4)
    assert bd["total"] == pytest.approx(sum(bd[k] for k in BREAKDOWN_KEYS if k != "total"))


def test_busiest_rank_sets_the_time() -> None:
    cm = cp8()
    piled = [ReqShape(64 * 8 * (i + 1), 64) for i in range(8)]  # all on lane 0
    spread = [ReqShape(64 * (8 * (i + 1) + i), 64) for i in range(8)]  # one per lane
    rows_piled, _, _ = cm.rank_work(piled)
    rows_spread, _, _ = cm.rank_work(spread)
    assert max(rows_piled) == 512 and max(rows_spread) == 64
    assert cm.breakdown(piled)["attention"] > 5 * cm.breakdown(spread)["attention"]
    assert cm.forward_time(piled) > cm.forward_time(spread)


def test_cached_prefix_costs_gather_and_indexer_but_no_gemm() -> None:
    cm = cp8()
    short = cm.breakdown([ReqShape(1024, 512)])
    long = cm.breakdown([ReqShape(131_072, 512)])
    assert long["linear"] == short["linear"]
    assert long["cp_kv_gather"] > 50 * short["cp_kv_gather"]
    assert long["indexer"] > 50 * short["indexer"]


def test_tp_all_reduce_by_hand() -> None:
    layout = ParallelLayout(8, cp_size=2, ep_size=8)  # attention TP 4 inside each CP rank
    cm = RooflineCostModel(GLM5, H20, 8, layout=layout, page_size=64)
    bd = cm.breakdown([ReqShape(0, 4096)])
    rows = 2048
    expected = 2 * 3 / 4 * rows * 6144 * 2 * 78 / (450e9 * 0.8)
    assert bd["tp_comm"] == pytest.approx(expected)


def test_ep_across_nodes_is_bounded_by_the_nic() -> None:
    layout = ParallelLayout(32, dp_size=32, ep_size=32)
    cm = RooflineCostModel(get_model("deepseek-v3"), get_gpu("h800"), 32, layout=layout)
    rows = 16384
    copies = 3 * (1 - (3 / 4) ** 8)  # distinct remote nodes of 8 experts over 4 nodes
    per_copy = 7168 * (1 + 4 / 128) + 2 * 7168
    net = rows * copies * per_copy / (50e9 * 0.9)
    nvl = rows * 8 * 31 / 32 * per_copy / (200e9 * 0.8)
    assert cm.moe_comm_time(rows, rows * 32) == pytest.approx(max(net, nvl) * 58)


def test_two_batch_overlap_rule() -> None:
    plain, tbo = cp8(), cp8(two_batch_overlap=True)
    batch = [ReqShape(0, 16384)]
    a, b = plain.breakdown(batch), tbo.breakdown(batch)
    compute = sum(a[k] for k in ("linear", "attention", "indexer", "elementwise", "moe_experts"))
    comm = plain.moe_comm_time(2048, 16384)
    assert a["moe_comm_exposed"] == pytest.approx(comm)
    f = HOPPER.comm_sms / H20.num_sms
    assert b["moe_comm_exposed"] == pytest.approx(max(compute / (1 - f), comm) - compute)


def test_loadback_is_sharded_over_cp_lanes_and_hidden_under_compute() -> None:
    cm = cp8()
    assert cm.loadback_time(80_000) == pytest.approx(
        80_000 * GLM5.kv_bytes_per_token_bf16 / 8 / 50e9
    )
    hidden = cm.breakdown([ReqShape(8192, 8192, loaded_tokens=8192)])
    assert hidden["loadback_exposed"] == 0.0


def test_fixed_costs_separate_bs1_from_bs_gt1() -> None:
    cm = cp8()
    one = cm.breakdown([ReqShape(65_536, 512)])
    four = cm.breakdown([ReqShape(65_536, 128)] * 4)
    assert four["per_request"] == pytest.approx(4 * one["per_request"])
    assert four["per_forward"] == one["per_forward"]


# --- validation and the seed scenario ----------------------------------------------------


def test_seed_scenario_reproduces_the_notes() -> None:
    s = seed_scenario()
    warm = s.warm_breakdown["total"]
    mixed = s.mixed_breakdown["total"]
    assert 1.0 <= warm <= 2.0
    assert 5.0 <= mixed <= 10.0
    # The cold joiner's own GEMM work is what lengthens the forward.
    assert s.mixed_breakdown["moe_experts"] > 4 * s.warm_breakdown["moe_experts"]


def test_seed_settings_are_the_seed_deployment_flags() -> None:
    # sim/ builds the seed deployment without the app layer; the flags say the same.
    from prefillkit.app.settings import Config, parse_flags

    flags = Config(**parse_flags(list(SEED_DEPLOYMENT)).values)  # type: ignore[arg-type]
    assert seed_settings() == flags.sim_settings()


def test_seed_cost_model_is_the_seed_deployment() -> None:
    cm = seed_cost_model()
    assert cm.gpu.name == "H20 141GB" and cm.layout.cp_size == 8 and cm.layout.ep_size == 8
    assert cm.page_size == 64 and cm.model.name == "glm-5"


# --- the command line ------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--nvlink-bandwidth-gbps", "0"], "--nvlink-bandwidth-gbps"),
        (["--net-bandwidth-gbps", "-5"], "--net-bandwidth-gbps"),
        (["--tp-size", "8", "--ep-size", "4"], "--ep-size"),
        (["--gpu", "h30"], "--gpu"),
        (["--nvlink-bandwidth-gbps", "fast"], "--nvlink-bandwidth-gbps"),
    ],
)
def test_bad_deployment_flags_are_one_line_exit_2(flags: list[str], needle: str) -> None:
    from tests.test_cli import assert_one_line_error, run_cli

    proc = run_cli("replay", "--agentic-sessions", "2", "-q", *flags)
    assert_one_line_error(proc, needle)


@pytest.mark.interpreted  # the calibrate command (application layer)
def test_calibrate_command_prints_the_tables() -> None:
    import json

    from tests.test_cli import run_cli

    proc = run_cli("calibrate", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    from prefillkit.cost.published import PUBLISHED_FIGURES

    assert len(doc["validation"]) == len(PUBLISHED_FIGURES)
    assert {"roofline", "aic"} <= set(doc["validation"][0])
    seed = doc["seed"]
    assert set(seed["models"]) == {"roofline/tiles", "roofline/sqrt-h100", "roofline/ideal", "aic"}
    tiles = seed["models"]["roofline/tiles"]
    assert tiles["warm_breakdown"] == seed["warm_breakdown"]
    assert set(tiles["terms"]) >= {"linear", "moe_experts"}
    assert 1.0 <= seed["warm_breakdown"]["total"] <= 2.0
    assert 5.0 <= seed["mixed_breakdown"]["total"] <= 10.0
    text = run_cli("calibrate", COLUMNS="160")
    assert (
        text.returncode == 0 and "DeepSeek profile" in text.stdout and "cold alone" in text.stdout
    )


def test_replay_uses_the_interconnect_override() -> None:
    from prefillkit.app.settings import Config
    from prefillkit.cost.forward_models import cost_model_for_config

    cfg = Config(tp_size=8, cp_size=8, enable_cp_shared_kv=True, nvlink_bandwidth_gbps=100.0)
    slow = cost_model_for_config(cfg.sim_settings(), 8)
    fast = cost_model_for_config(
        Config(tp_size=8, cp_size=8, enable_cp_shared_kv=True).sim_settings(), 8
    )
    batch = [ReqShape(65_536, 1024)]
    assert slow.breakdown(batch)["cp_kv_gather"] == pytest.approx(
        4.5 * fast.breakdown(batch)["cp_kv_gather"]
    )


def test_inlined_breakdown_matches_the_helper_methods() -> None:
    # breakdown() inlines linear_time, moe_expert_time and the communication terms through
    # precomputed coefficients; they must agree with the methods for any batch.
    rng = random.Random(7)
    for layout in (
        ParallelLayout(8, cp_size=8, ep_size=8),
        ParallelLayout(8, cp_size=2, ep_size=1),
        ParallelLayout(32, dp_size=32, ep_size=32, two_batch_overlap=True),
    ):
        cm = RooflineCostModel(GLM5, H20, layout.num_gpus, layout=layout, page_size=64)
        for _ in range(200):
            batch = [
                ReqShape(p, rng.randrange(1, 9000))
                for p in (rng.randrange(0, 70_000) for _ in range(rng.randrange(1, 5)))
            ]
            bd = cm.breakdown(batch)
            rows, _, _ = cm.rank_work(batch)
            tokens = sum(r.extend_len for r in batch) * layout.dp_size
            assert bd["moe_experts"] == pytest.approx(cm.moe_expert_time(tokens))
            assert bd["linear"] <= cm.linear_time(max(rows)) * (1 + 1e-12)
            busiest = [x for x in rows if cm.linear_time(x) == pytest.approx(bd["linear"])]
            assert busiest  # lanes may share a GEMM time (whole tiles): one of them led
            tp = bd["tp_comm"]
            assert any(tp == pytest.approx(cm.tp_comm_time(x)) for x in busiest)
            ctx = sum(r.prefix_len + r.extend_len for r in batch)
            assert bd["cp_kv_gather"] == pytest.approx(cm.cp_gather_time(ctx))
