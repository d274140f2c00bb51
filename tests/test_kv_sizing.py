"""The KV pool as SGLang sizes it: per-rank KV bytes (a GQA model's KV heads split over the
attention-TP ranks, MLA's latent whole on every rank), checked against SGLang's own
arithmetic for the same launch line (``ModelConfig.get_num_kv_heads`` and the pool's cell
size ``layers x 2 x local_kv_heads x head_dim x dtype bytes``)."""

from __future__ import annotations

import pytest

from prefillkit.cost.deployment import SimSettings
from prefillkit.models import get_model
from prefillkit.sched.config import SchedulerConfig

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

H200_GB = 141.0
FRACTION = 0.88


def sglang_tokens(model: str, tp: int, mem_gb: float = H200_GB) -> int:
    """SGLang's pool size in tokens per rank for a bf16 KV cache, by hand."""
    m = get_model(model)
    weights = m.weight_bytes / tp
    rest = mem_gb * 1e9 * FRACTION - weights
    if m.attention == "mla":
        cell = m.kv_bytes_per_token_bf16  # the latent (+ indexer key), whole on every rank
    else:
        local_kv_heads = max(1, m.num_kv_heads // tp)  # get_num_kv_heads(tp)
        cell = m.num_layers * 2 * local_kv_heads * m.head_dim_qk * 2
    return int(rest // cell)


def prefillkit_tokens(model: str, tp: int, mem_gb: float = H200_GB) -> int:
    m = get_model(model)
    cfg = SimSettings(SchedulerConfig(page_size=1), model=m, tp_size=tp)
    return cfg.total_pages(m.weight_bytes / tp, mem_gb)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-7b", "glm-5", "deepseek-v3"])
def test_pool_matches_sglang_arithmetic(model: str, tp: int) -> None:
    m = get_model(model)
    if m.weight_bytes / tp > H200_GB * 1e9 * FRACTION:
        pytest.skip(f"{model} does not fit {tp} x H200")
    assert prefillkit_tokens(model, tp) == sglang_tokens(model, tp)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_qwen3_235b_gqa_pool_by_hand(tp: int) -> None:
    # 94 layers, 4 KV heads of 128: at TP 4 one head per rank, 94 x 2 x 1 x 128 x 2 =
    # 48,128 bytes per token (not the whole model's 192,512); at TP 8 the head is
    # replicated (max(1, 4 // 8) = 1): the same per-rank size.
    assert prefillkit_tokens("qwen3-235b-a22b", tp) == sglang_tokens("qwen3-235b-a22b", tp)
    rest = H200_GB * 1e9 * FRACTION - 235.1e9 / tp
    per_token = {2: 94 * 2 * 2 * 128 * 2, 4: 48_128, 8: 48_128}[tp]
    assert prefillkit_tokens("qwen3-235b-a22b", tp) == int(rest // per_token)


def test_llama_tp8_holds_eight_times_the_tokens_of_the_whole_kv() -> None:
    # The figure: 931 K tokens with the whole KV per GPU, ~7.4 M as SGLang sizes it.
    whole = int((H200_GB * 1e9 * FRACTION - 8.03e9 * 2 / 8) // 131_072)
    assert whole == pytest.approx(931_000, rel=0.01)
    assert prefillkit_tokens("llama-3.1-8b", 8) == int(
        (H200_GB * 1e9 * FRACTION - 8.03e9 * 2 / 8) // 16_384
    )
    assert prefillkit_tokens("llama-3.1-8b", 8) == pytest.approx(7.45e6, rel=0.01)


def test_mla_pool_is_unchanged_by_tp() -> None:
    # GLM-5's latent is whole on every rank: per-GPU tokens depend on TP only through the
    # weights each GPU holds.
    m = get_model("glm-5")
    cfg = SimSettings(SchedulerConfig(page_size=1), model=m, tp_size=8)
    assert cfg.kv_bytes_per_token_per_rank == m.kv_bytes_per_token_bf16
