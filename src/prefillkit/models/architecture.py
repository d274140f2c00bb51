"""Model architecture shapes: pure data shared by the buffer estimator and the cost model.

Nothing here knows about GPUs or time. KV bytes per token come from the architecture:
MLA keeps one compressed latent (``kv_lora_rank`` + ``qk_rope_head_dim``) per layer, plus
the DSA/NSA lightning-indexer key (``index_head_dim`` fp8 + a 4-byte scale) per layer.
FP8 MLA (FlashMLA layout) is 512 fp8 + 16 B scales + 64 bf16 rope = 656 B per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Gemm", "ModelSpec", "gqa_kv_bytes", "mla_sparse_kv_bytes", "token_local_gemms"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    # "mla" (DeepSeek/GLM latent attention) or "gqa" (Llama/Qwen).
    attention: str
    head_dim_qk: int  # per-head q/k dim used by attention math (MLA: nope + rope)
    head_dim_v: int
    num_kv_heads: int  # GQA only; MLA keeps one latent
    kv_lora_rank: int  # MLA latent width (0 for GQA)
    qk_rope_head_dim: int  # MLA rope part (0 for GQA)
    total_params: float
    active_params: float
    weight_bytes_per_param: float  # 1.0 for FP8 checkpoints, 2.0 for bf16
    kv_bytes_per_token_bf16: int
    kv_bytes_per_token_fp8: int
    # DSA/NSA sparse attention (0 heads: dense attention only).
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # Requests at most this long use dense attention even on a sparse model.
    sparse_dense_threshold: int = 2048
    num_experts: int = 0
    experts_per_token: int = 0
    # MoE layout (config.json): routed expert FFN width, shared experts per MoE layer and
    # the leading dense-FFN layers (``first_k_dense_replace``); dense FFN width.
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    intermediate_size: int = 0
    vocab_size: int = 0
    # MLA query compression (config.json ``q_lora_rank``; 0: one hidden -> heads projection).
    q_lora_rank: int = 0

    @property
    def moe_layers(self) -> int:
        """Layers with a routed-expert FFN (0 for a dense model)."""
        return self.num_layers - self.first_dense_layers if self.num_experts > 0 else 0

    @property
    def expert_params(self) -> float:
        """Parameters of one routed expert in one layer (gate, up, down projections)."""
        return 3.0 * self.hidden_size * self.moe_intermediate_size

    @property
    def routed_active_params(self) -> float:
        """Routed-expert parameters one token touches, all MoE layers."""
        return self.experts_per_token * self.expert_params * self.moe_layers

    @property
    def token_local_params(self) -> float:
        """Parameters a prefill token runs through on its own rank: every token-local GEMM of
        :func:`token_local_gemms` (attention and indexer projections, shared experts, the
        router, dense-FFN layers), counted from the architecture's shapes, not from a
        rounded "active" figure. The routed experts, the embedding (a lookup) and the LM
        head (one position per request, not per prompt token) are left out."""
        return float(sum(g.n * g.k * g.layers for g in token_local_gemms(self)))

    @property
    def is_sparse(self) -> bool:
        return self.index_n_heads > 0 and self.index_topk > 0

    def kv_bytes_per_token(self, kv_cache_dtype: str) -> int:
        """KV bytes per token for ``bf16`` / ``fp8`` (``auto`` = bf16)."""
        if kv_cache_dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
            return self.kv_bytes_per_token_fp8
        return self.kv_bytes_per_token_bf16

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.weight_bytes_per_param


@dataclass(frozen=True, slots=True)
class Gemm:
    """One token-local GEMM of a layer: ``(rows, k) x (k, n)`` per token row.

    ``split`` says how attention tensor parallelism divides it: ``col`` (output columns
    over the TP ranks: ``n / tp``), ``row`` (reduction dimension: ``k / tp``) or ``rep``
    (replicated: every rank runs the whole GEMM, as SGLang's ``ReplicatedLinear``).
    ``layers`` is how many layers run it.
    """

    name: str
    n: int
    k: int
    layers: int
    split: str = "col"


def token_local_gemms(m: ModelSpec) -> tuple[Gemm, ...]:
    """The GEMMs every prompt token runs on its attention rank, from the shapes.

    MLA (DeepSeek-V3 ``DeepseekV2AttentionMLA`` in SGLang): ``q_a_proj`` and
    ``kv_a_proj_with_mqa`` (one replicated ``fused_qkv_a_proj_with_mqa`` GEMM in SGLang
    when the model has a q latent), ``q_b_proj`` and ``kv_b_proj``
    (column-parallel; the absorbed path runs ``kv_b_proj``'s two halves as per-token
    batched GEMMs of the same size), ``o_proj`` (row-parallel); the DSA indexer's
    ``wq_b`` (from the q latent), ``wk`` and ``weights_proj`` (replicated). GQA: fused
    ``qkv_proj`` and ``o_proj``. FFN: ``gate_up_proj`` (column) and ``down_proj`` (row)
    of the dense layers and of each MoE layer's shared experts, plus the MoE router
    ``gate`` (replicated). The routed experts are timed separately.
    """
    if m.attention == "mla":
        attention = _mla_gemms(m)
    else:
        h, layers = m.hidden_size, m.num_layers
        qkv = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim_qk
        attention = [
            Gemm("qkv_proj", qkv, h, layers),
            Gemm("o_proj", h, m.num_heads * m.head_dim_v, layers, "row"),
        ]
    return (*attention, *_ffn_gemms(m))


def _mla_gemms(m: ModelSpec) -> list[Gemm]:
    """:func:`token_local_gemms`' MLA projections, the DSA indexer's included."""
    h, layers = m.hidden_size, m.num_layers
    out: list[Gemm] = []
    nope = m.head_dim_qk - m.qk_rope_head_dim
    q_out = m.num_heads * m.head_dim_qk
    kv_a = m.kv_lora_rank + m.qk_rope_head_dim
    if m.q_lora_rank:
        out.append(Gemm("fused_qkv_a_proj", m.q_lora_rank + kv_a, h, layers, "rep"))
        out.append(Gemm("q_b_proj", q_out, m.q_lora_rank, layers))
    else:
        out.append(Gemm("q_proj", q_out, h, layers))
        out.append(Gemm("kv_a_proj", kv_a, h, layers, "rep"))
    kv_b = m.num_heads * (nope + m.head_dim_v)
    out.append(Gemm("kv_b_proj", kv_b, m.kv_lora_rank, layers))
    out.append(Gemm("o_proj", h, m.num_heads * m.head_dim_v, layers, "row"))
    if m.index_n_heads and m.index_head_dim:
        q_in = m.q_lora_rank or h
        idx_q = m.index_n_heads * m.index_head_dim
        out.append(Gemm("indexer_wq_b", idx_q, q_in, layers, "rep"))
        out.append(Gemm("indexer_wk", m.index_head_dim, h, layers, "rep"))
        out.append(Gemm("indexer_weights", m.index_n_heads, h, layers, "rep"))
    return out


def _ffn_gemms(m: ModelSpec) -> list[Gemm]:
    """:func:`token_local_gemms`' FFN GEMMs: dense layers, shared experts, router."""
    h = m.hidden_size
    out: list[Gemm] = []
    dense = m.first_dense_layers if m.num_experts else m.num_layers
    if dense and m.intermediate_size:
        out.append(Gemm("dense_gate_up", 2 * m.intermediate_size, h, dense))
        out.append(Gemm("dense_down", h, m.intermediate_size, dense, "row"))
    if m.num_experts and m.moe_layers:
        if m.num_shared_experts:
            width = m.num_shared_experts * m.moe_intermediate_size
            out.append(Gemm("shared_gate_up", 2 * width, h, m.moe_layers))
            out.append(Gemm("shared_down", h, width, m.moe_layers, "row"))
        out.append(Gemm("router_gate", m.num_experts, h, m.moe_layers, "rep"))
    return out


def mla_sparse_kv_bytes(num_layers: int, index_head_dim: int, fp8: bool) -> int:
    """KV bytes per token of a DSA/NSA MLA model (512-wide latent, 64 rope dims)."""
    latent = 656 if fp8 else (512 + 64) * 2
    indexer = index_head_dim + 4  # fp8 key + fp32 scale
    return num_layers * (latent + indexer)


def gqa_kv_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """KV bytes per token of a GQA model (K and V of every KV head, every layer)."""
    return num_layers * 2 * num_kv_heads * head_dim * dtype_bytes
