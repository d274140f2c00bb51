"""Temporary-buffer estimator for CP shared-KV prefill."""

from __future__ import annotations

import dataclasses

import pytest

from prefillkit.models import ModelSpec, get_model
from prefillkit.sched.buffer import (
    BUFFER_NAMES,
    WINDOW_NAMES,
    BufferEstimatorContext,
    BufferReqShape,
    check_buffer_limit_fits,
    estimate_buffer_breakdown,
    estimate_buffer_bytes,
)

GLM5 = get_model("glm-5")
LLAMA = get_model("llama-3.1-8b")

# Tiny sparse MLA model: 2 layers, latent 16 + rope 8 in bf16 = 48 B, indexer key
# 8 fp8 + 4 B scale = 12 B, so 60 B per layer per token and 120 B per token.
TINY = ModelSpec(
    name="tiny-sparse",
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    attention="mla",
    head_dim_qk=24,
    head_dim_v=16,
    num_kv_heads=1,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    total_params=1e6,
    active_params=1e6,
    weight_bytes_per_param=2.0,
    kv_bytes_per_token_bf16=2 * ((16 + 8) * 2 + 8 + 4),
    kv_bytes_per_token_fp8=2 * (16 + 4 + 8 * 2 + 8 + 4),
    index_n_heads=2,
    index_head_dim=8,
    index_topk=4,
    sparse_dense_threshold=8,
)


def _ctx(model: ModelSpec = GLM5, **kw: object) -> BufferEstimatorContext:
    kw.setdefault("cp_size", 8)
    return BufferEstimatorContext(model=model, **kw)  # type: ignore[arg-type]


def test_empty_batch_is_zero() -> None:
    ctx = _ctx()
    assert estimate_buffer_bytes([], ctx) == 0
    est = estimate_buffer_breakdown([], ctx)
    assert est.peak_bytes == 0
    assert est.peak_window == ""
    assert all(v == 0 for v in est.buffers.values())


@pytest.mark.parametrize(
    "shape",
    [
        BufferReqShape(-1, 10),
        BufferReqShape(0, -1),
        BufferReqShape(10, 10, -1),
        BufferReqShape(64, 10, 128),  # loads are part of the prefix
    ],
)
def test_bad_shape_raises(shape: BufferReqShape) -> None:
    with pytest.raises(ValueError):
        estimate_buffer_bytes([BufferReqShape(0, 64), shape], _ctx())
    with pytest.raises(ValueError):
        estimate_buffer_breakdown([shape], _ctx())


def test_bad_context_raises() -> None:
    with pytest.raises(ValueError):
        BufferEstimatorContext(model=GLM5, cp_size=0)
    with pytest.raises(ValueError):
        BufferEstimatorContext(model=GLM5, page_size=0)


def test_hand_computed_tiny_batch() -> None:
    ctx = BufferEstimatorContext(model=TINY, kv_cache_dtype="bf16", cp_size=2, page_size=16)
    batch = [BufferReqShape(64, 40, 64), BufferReqShape(0, 20)]
    # Context rows C = 104 + 20 = 124 (max 104 > threshold 8: indexer on).
    # Query rows on the busiest rank (page j on rank j % 2): the first request's extend
    # is pages 4, 5, 6 (16 + 16 + 8 rows: rank 0 gets 24, rank 1 16), the second's pages
    # 0, 1 (16 + 4 rows: rank 0 16, rank 1 4), so Q = 24 + 16 = 40, not
    # ceil(40/2) + ceil(20/2) = 30. Extend E = 60. Prefix P = 64.
    # Context pages G = ceil(104/16) + ceil(20/16) = 7 + 2 = 9. Loaded L = 64, D = 4 pages.
    # kv_layer = 120 / 2 = 60, index_row = 12, kv_row = 48.
    est = estimate_buffer_breakdown(batch, ctx)
    assert est.buffers == {
        "kv_materialize": 124 * 48,  # 5952
        "index_k_materialize": 124 * 12,  # 1488
        "remap_metadata": 8 * 9 + 4 * 60,  # 312
        "indexer_logits": 4 * 40 * 124,  # 19840
        "topk_indices": 4 * 40 * 4,  # 640
        "transfer_descriptors": 32 * 4,  # 128
        "load_staging": 64 * 60,  # 3840
        "l1_prefetch": 0,
    }
    assert est.windows == {
        "load": 312 + 128 + 3840,  # 4280
        "indexer": 4280 + 1488 + 19840 + 640,  # 26248
        "attention": 4280 + 5952 + 640,  # 10872
    }
    assert est.peak_window == "indexer"
    assert est.peak_bytes == 26248
    assert estimate_buffer_bytes(batch, ctx) == 26248

    pre = dataclasses.replace(ctx, bs_gt1_l1_prefetch_enabled=True)
    est_pre = estimate_buffer_breakdown(batch, pre)
    assert est_pre.buffers["l1_prefetch"] == 64 * 60  # 3840
    assert est_pre.windows["attention"] == 10872 + 3840
    assert est_pre.peak_bytes == 26248


def test_hand_computed_tiny_dense_path() -> None:
    # Every context <= sparse_dense_threshold (8): dense path, no indexer keys, the
    # top-k comes from a dummy [Q, index_topk] score matrix.
    ctx = BufferEstimatorContext(model=TINY, cp_size=1, page_size=4)
    est = estimate_buffer_breakdown([BufferReqShape(0, 6), BufferReqShape(4, 4)], ctx)
    # C = 14, Q = 10, E = 10, G = 2 + 2 = 4.
    assert est.buffers["index_k_materialize"] == 0
    assert est.buffers["indexer_logits"] == 4 * 10 * 4
    assert est.buffers["topk_indices"] == 4 * 10 * 4
    assert est.buffers["kv_materialize"] == 14 * 48
    assert est.buffers["remap_metadata"] == 8 * 4 + 4 * 10
    assert est.peak_bytes == 72 + 14 * 48 + 160
    assert est.peak_window == "attention"


@pytest.mark.parametrize("model", [GLM5, LLAMA, TINY])
def test_monotone_in_extend(model: ModelSpec) -> None:
    ctx = _ctx(model)
    prev = -1
    for extend in range(0, 20_000, 257):
        cur = estimate_buffer_bytes([BufferReqShape(4096, extend, 1024)], ctx)
        assert cur >= prev
        prev = cur
    small = estimate_buffer_bytes([BufferReqShape(4096, 512)], ctx)
    big = estimate_buffer_bytes([BufferReqShape(4096, 8192)], ctx)
    assert big > small


@pytest.mark.parametrize("model", [GLM5, LLAMA, TINY])
def test_monotone_in_prefix(model: ModelSpec) -> None:
    ctx = _ctx(model)
    prev = -1
    for prefix in range(0, 40_000, 641):
        cur = estimate_buffer_bytes([BufferReqShape(prefix, 512), BufferReqShape(128, 64)], ctx)
        assert cur >= prev
        prev = cur
    assert estimate_buffer_bytes([BufferReqShape(32_768, 512)], ctx) > estimate_buffer_bytes(
        [BufferReqShape(0, 512)], ctx
    )


def test_monotone_in_batch_growth() -> None:
    ctx = _ctx()
    batch: list[BufferReqShape] = []
    prev = 0
    for i in range(16):
        batch.append(BufferReqShape(64 * i, 256 + 64 * i, 64 * (i % 2)))
        cur = estimate_buffer_bytes(batch, ctx)
        assert cur > prev
        prev = cur


def test_carried_prefix_raises_logits_window() -> None:
    ctx = _ctx(cp_size=8)
    chunk = estimate_buffer_breakdown([BufferReqShape(2048, 512)], ctx)
    fresh = estimate_buffer_breakdown([BufferReqShape(0, 512)], ctx)
    assert chunk.buffers["indexer_logits"] > fresh.buffers["indexer_logits"]
    assert chunk.windows["indexer"] > fresh.windows["indexer"]
    assert chunk.peak_bytes > fresh.peak_bytes
    # Key rows include the carried prefix: 64 query rows per rank x 2560 keys, fp32.
    assert chunk.buffers["indexer_logits"] == 4 * 64 * 2560
    # The carried prefix also enlarges the logits when the batch was on the indexer
    # path already.
    long_fresh = estimate_buffer_breakdown([BufferReqShape(0, 4096)], ctx)
    long_chunk = estimate_buffer_breakdown([BufferReqShape(2048, 4096)], ctx)
    assert long_chunk.buffers["indexer_logits"] > long_fresh.buffers["indexer_logits"]


def test_logits_span_the_ragged_batch() -> None:
    # One [sum q rows, sum k rows] matrix: adding a request grows both dimensions.
    ctx = _ctx(cp_size=1)
    a = BufferReqShape(4096, 1024)
    b = BufferReqShape(4096, 1024)
    one = estimate_buffer_breakdown([a], ctx).buffers["indexer_logits"]
    two = estimate_buffer_breakdown([a, b], ctx).buffers["indexer_logits"]
    assert one == 4 * 1024 * 5120
    assert two == 4 * 2048 * 10240


BATCHES = [
    [BufferReqShape(0, 8192)],
    [BufferReqShape(100_000, 64, 50_000)],
    [BufferReqShape(2048, 512), BufferReqShape(0, 4096, 0), BufferReqShape(640, 128, 640)],
    [BufferReqShape(64 * i, 64 * (i + 1), 64 * (i // 2)) for i in range(32)],
    [BufferReqShape(0, 100)],
]


@pytest.mark.parametrize("model", [GLM5, LLAMA, TINY])
@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("batch", BATCHES)
def test_peak_is_max_window_and_at_most_sum(
    model: ModelSpec, prefetch: bool, batch: list[BufferReqShape]
) -> None:
    ctx = _ctx(model, bs_gt1_l1_prefetch_enabled=prefetch, kv_cache_dtype="fp8")
    est = estimate_buffer_breakdown(batch, ctx)
    assert tuple(est.buffers) == BUFFER_NAMES
    assert tuple(est.windows) == WINDOW_NAMES
    assert est.peak_bytes == max(est.windows.values())
    assert est.windows[est.peak_window] == est.peak_bytes
    assert est.peak_bytes <= est.total_bytes
    assert est.peak_bytes == estimate_buffer_bytes(batch, ctx)


def test_peak_below_sum_when_indexer_and_attention_do_not_overlap() -> None:
    est = estimate_buffer_breakdown([BufferReqShape(8192, 4096, 4096)], _ctx())
    assert est.peak_bytes < est.total_bytes


@pytest.mark.parametrize("model", [GLM5, LLAMA])
def test_prefetch_flag_adds_bytes(model: ModelSpec) -> None:
    # Long cached prefix, short extend: attention is the peak window.
    batch = [BufferReqShape(100_000, 64), BufferReqShape(30_000, 128, 30_000)]
    off = _ctx(model)
    on = dataclasses.replace(off, bs_gt1_l1_prefetch_enabled=True)
    est_off = estimate_buffer_breakdown(batch, off)
    est_on = estimate_buffer_breakdown(batch, on)
    assert est_off.buffers["l1_prefetch"] == 0
    assert est_on.buffers["l1_prefetch"] > 0
    assert est_on.windows["attention"] > est_off.windows["attention"]
    assert est_on.peak_bytes > est_off.peak_bytes
    # Nothing to prefetch without a prefix.
    fresh = [BufferReqShape(0, 512)]
    assert estimate_buffer_bytes(fresh, on) == estimate_buffer_bytes(fresh, off)


def test_sparse_vs_dense_model() -> None:
    dense = dataclasses.replace(GLM5, name="glm-5-dense", index_n_heads=0, index_topk=0)
    batch = [BufferReqShape(4096, 2048)]
    sparse_est = estimate_buffer_breakdown(batch, _ctx(GLM5))
    dense_est = estimate_buffer_breakdown(batch, _ctx(dense))
    assert dense_est.buffers["indexer_logits"] == 0
    assert dense_est.buffers["topk_indices"] == 0
    assert dense_est.buffers["index_k_materialize"] == 0
    assert sparse_est.buffers["indexer_logits"] > 0
    assert sparse_est.buffers["index_k_materialize"] > 0
    assert sparse_est.peak_bytes > dense_est.peak_bytes
    # Both materialize the whole context: 6144 rows, 1284 B/layer of which 132 B is the
    # indexer key.
    assert sparse_est.buffers["kv_materialize"] == 6144 * (1284 - 132)
    assert dense_est.buffers["kv_materialize"] == 6144 * 1284


def test_gqa_materializes_k_and_v() -> None:
    est = estimate_buffer_breakdown([BufferReqShape(1000, 24)], _ctx(LLAMA, cp_size=1))
    # 2 (K, V) x 8 kv heads x 128 dims x 2 B per layer.
    assert est.buffers["kv_materialize"] == 1024 * 2 * 8 * 128 * 2
    assert est.peak_window == "attention"


def test_fp8_smaller_than_bf16() -> None:
    batch = [BufferReqShape(50_000, 256, 10_000)]
    bf16 = estimate_buffer_bytes(batch, _ctx(kv_cache_dtype="bf16"))
    fp8 = estimate_buffer_bytes(batch, _ctx(kv_cache_dtype="fp8"))
    assert fp8 < bf16


def test_cp_split_shrinks_query_side() -> None:
    batch = [BufferReqShape(0, 16_384)]
    one = estimate_buffer_breakdown(batch, _ctx(cp_size=1))
    eight = estimate_buffer_breakdown(batch, _ctx(cp_size=8))
    assert eight.buffers["indexer_logits"] * 8 == one.buffers["indexer_logits"]
    # Keys span the whole context on every rank.
    assert eight.buffers["kv_materialize"] == one.buffers["kv_materialize"]


def test_load_back_adds_copy_stream_buffers() -> None:
    ctx = _ctx()
    plain = estimate_buffer_breakdown([BufferReqShape(8192, 512)], ctx)
    loaded = estimate_buffer_breakdown([BufferReqShape(8192, 512, 4096)], ctx)
    assert plain.buffers["transfer_descriptors"] == 0
    assert plain.buffers["load_staging"] == 0
    assert loaded.buffers["transfer_descriptors"] == 32 * (4096 // 64)
    assert loaded.buffers["load_staging"] == 4096 * 1284
    assert loaded.peak_bytes == plain.peak_bytes + 32 * 64 + 4096 * 1284


def test_check_buffer_limit_fits() -> None:
    check_buffer_limit_fits(2**30, 4 * 2**30)
    check_buffer_limit_fits(2**30, 2**30)
    with pytest.raises(ValueError) as err:
        check_buffer_limit_fits(2**30 + 1, 2**30)
    assert "\n" not in str(err.value)
    assert "does not fit" in str(err.value)
    with pytest.raises(ValueError):
        check_buffer_limit_fits(2**30, -5)
    with pytest.raises(ValueError):
        check_buffer_limit_fits(0, 2**30)
    with pytest.raises(ValueError):
        check_buffer_limit_fits(-1, 2**30)


@pytest.mark.parametrize(
    ("shapes", "cp", "page", "busiest"),
    [
        ([(0, 64)], 8, 64, 64),  # one page: all of it on rank 0, not 64 / 8
        ([(0, 65)], 8, 64, 64),  # page 0 (64 rows) on rank 0, page 1 (1 row) on rank 1
        ([(0, 64 * 9)], 8, 64, 128),  # nine pages: rank 0 owns pages 0 and 8
        ([(0, 64 * 16)], 8, 64, 128),  # even split
        ([(64, 64), (64, 64)], 8, 64, 128),  # both on rank 1
        ([(0, 64), (64, 64)], 8, 64, 64),  # rank 0 and rank 1
        ([(8, 24)], 2, 16, 16),  # tokens 8..31: rank 0 gets 8 (page 0 tail), rank 1 16
        ([(8, 8)], 2, 16, 8),  # tokens 8..15: the tail of page 0 only
        ([(0, 0)], 4, 16, 0),  # no extend rows
        ([(0, 100)], 1, 64, 100),  # no CP: every row on the one rank
    ],
)
def test_query_rows_follow_the_page_aligned_split(
    shapes: list[tuple[int, int]], cp: int, page: int, busiest: int
) -> None:
    """Q (the logits' query dimension) is the busiest rank's rows under the page-aligned
    CP split (page j on rank j mod R)."""
    ctx = BufferEstimatorContext(model=TINY, cp_size=cp, page_size=page)
    batch = [BufferReqShape(p, e) for p, e in shapes]
    # TINY's index_topk is 4 and every shape here is a sparse model shape: topk = 4*Q*4.
    assert estimate_buffer_breakdown(batch, ctx).buffers["topk_indices"] == 4 * busiest * 4
