"""Model architecture shapes: pure data shared by the buffer estimator and the cost model.

Nothing here knows about GPUs or time. KV bytes per token come from the architecture:
MLA keeps one compressed latent (``kv_lora_rank`` + ``qk_rope_head_dim``) per layer, plus
the DSA/NSA lightning-indexer key (``index_head_dim`` fp8 + a 4-byte scale) per layer.
FP8 MLA (FlashMLA layout) is 512 fp8 + 16 B scales + 64 bf16 rope = 656 B per layer.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    h, layers = m.hidden_size, m.num_layers
    out: list[Gemm] = []
    if m.attention == "mla":
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
    else:
        qkv = (m.num_heads + 2 * m.num_kv_heads) * m.head_dim_qk
        out.append(Gemm("qkv_proj", qkv, h, layers))
        out.append(Gemm("o_proj", h, m.num_heads * m.head_dim_v, layers, "row"))
    dense = m.first_dense_layers if m.num_experts else layers
    if dense and m.intermediate_size:
        out.append(Gemm("dense_gate_up", 2 * m.intermediate_size, h, dense))
        out.append(Gemm("dense_down", h, m.intermediate_size, dense, "row"))
    if m.num_experts and m.moe_layers:
        if m.num_shared_experts:
            width = m.num_shared_experts * m.moe_intermediate_size
            out.append(Gemm("shared_gate_up", 2 * width, h, m.moe_layers))
            out.append(Gemm("shared_down", h, width, m.moe_layers, "row"))
        out.append(Gemm("router_gate", m.num_experts, h, m.moe_layers, "rep"))
    return tuple(out)


def _mla_sparse_kv_bytes(num_layers: int, index_head_dim: int, fp8: bool) -> int:
    latent = 656 if fp8 else (512 + 64) * 2
    indexer = index_head_dim + 4  # fp8 key + fp32 scale
    return num_layers * (latent + indexer)


def _gqa_kv_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    return num_layers * 2 * num_kv_heads * head_dim * dtype_bytes


MODELS: dict[str, ModelSpec] = {
    # GLM-5 (zai-org/GLM-5 config.json): 78 layers, hidden 6144, 64 heads, kv_lora 512,
    # qk_nope 192 + rope 64, v 256, 256 routed experts top-8 + 1 shared, ~744 B total /
    # ~40 B active, DSA indexer 32 x 128 with top-k 2048, 3 dense layers (FFN 12288) + 75
    # MoE layers (experts 2048 wide), vocabulary 154,880. FP8 checkpoint.
    "glm-5": ModelSpec(
        name="glm-5",
        num_layers=78,
        hidden_size=6144,
        num_heads=64,
        attention="mla",
        head_dim_qk=192 + 64,
        head_dim_v=256,
        num_kv_heads=1,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        total_params=744e9,
        active_params=40e9,
        weight_bytes_per_param=1.0,
        kv_bytes_per_token_bf16=_mla_sparse_kv_bytes(78, 128, fp8=False),  # 100,152
        kv_bytes_per_token_fp8=_mla_sparse_kv_bytes(78, 128, fp8=True),  # 61,464
        index_n_heads=32,
        index_head_dim=128,
        index_topk=2048,
        num_experts=256,
        experts_per_token=8,
        moe_intermediate_size=2048,
        num_shared_experts=1,
        first_dense_layers=3,
        intermediate_size=12288,
        vocab_size=154880,
        q_lora_rank=2048,
    ),
    # DeepSeek-V3.2-Exp (deepseek-ai config.json): 61 layers, hidden 7168, 128 heads,
    # kv_lora 512, qk_nope 128 + rope 64, v 128, 671 B total / ~36.6 B active,
    # DSA indexer 64 x 128, top-k 2048, 3 dense + 58 MoE layers, vocabulary 129,280.
    # FP8 checkpoint.
    "deepseek-v3.2": ModelSpec(
        name="deepseek-v3.2",
        num_layers=61,
        hidden_size=7168,
        num_heads=128,
        attention="mla",
        head_dim_qk=128 + 64,
        head_dim_v=128,
        num_kv_heads=1,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        total_params=671e9,
        active_params=36.6e9,
        weight_bytes_per_param=1.0,
        kv_bytes_per_token_bf16=_mla_sparse_kv_bytes(61, 128, fp8=False),  # 78,324
        kv_bytes_per_token_fp8=_mla_sparse_kv_bytes(61, 128, fp8=True),  # 48,068
        index_n_heads=64,
        index_head_dim=128,
        index_topk=2048,
        num_experts=256,
        experts_per_token=8,
        moe_intermediate_size=2048,
        num_shared_experts=1,
        first_dense_layers=3,
        intermediate_size=18432,
        vocab_size=129280,
        q_lora_rank=1536,
    ),
    # DeepSeek-V3 / R1 (deepseek-ai config.json): the same body as V3.2 with dense MLA
    # attention (no indexer): 61 layers (3 dense + 58 MoE), hidden 7168, 128 heads,
    # qk 128 + 64 rope, v 128, 256 routed experts (2048 wide) top-8 + 1 shared, 671 B /
    # ~37 B active, vocabulary 129,280. FP8 checkpoint. DeepSeek's and SGLang's published
    # prefill throughputs (benchmarks/RESULTS.md, validation table) are for this model.
    "deepseek-v3": ModelSpec(
        name="deepseek-v3",
        num_layers=61,
        hidden_size=7168,
        num_heads=128,
        attention="mla",
        head_dim_qk=128 + 64,
        head_dim_v=128,
        num_kv_heads=1,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        total_params=671e9,
        active_params=37e9,
        weight_bytes_per_param=1.0,
        kv_bytes_per_token_bf16=61 * (512 + 64) * 2,  # 70,272
        kv_bytes_per_token_fp8=61 * 656,  # 40,016
        num_experts=256,
        experts_per_token=8,
        moe_intermediate_size=2048,
        num_shared_experts=1,
        first_dense_layers=3,
        intermediate_size=18432,
        vocab_size=129280,
        q_lora_rank=1536,
    ),
    # Kimi K2 (moonshotai/Kimi-K2-Instruct config.json): DeepSeek-V3's body with 64 heads,
    # 384 routed experts (2048 wide) top-8 + 1 shared, 1 dense layer (FFN 18,432) + 60
    # MoE layers, q latent 1536, vocabulary 163,840; ~1.03 T total / ~32.7 B active
    # (counted from the shapes by model_from_hf_config). FP8 block-scaled checkpoint.
    "kimi-k2": ModelSpec(
        name="kimi-k2",
        num_layers=61,
        hidden_size=7168,
        num_heads=64,
        attention="mla",
        head_dim_qk=128 + 64,
        head_dim_v=128,
        num_kv_heads=1,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        total_params=1026.4e9,
        active_params=32.7e9,
        weight_bytes_per_param=1.0,
        kv_bytes_per_token_bf16=61 * (512 + 64) * 2,  # 70,272
        kv_bytes_per_token_fp8=61 * 656,  # 40,016
        num_experts=384,
        experts_per_token=8,
        moe_intermediate_size=2048,
        num_shared_experts=1,
        first_dense_layers=1,
        intermediate_size=18432,
        vocab_size=163840,
        q_lora_rank=1536,
    ),
    # Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B-FP8 config.json): 94 layers, hidden 4096, GQA
    # 64 q / 4 kv heads x 128, 128 routed experts (1536 wide) top-8, no shared expert, no
    # dense layer, vocabulary 151,936; 235 B total / 22.1 B active. FP8 block-scaled.
    "qwen3-235b-a22b": ModelSpec(
        name="qwen3-235b-a22b",
        num_layers=94,
        hidden_size=4096,
        num_heads=64,
        attention="gqa",
        head_dim_qk=128,
        head_dim_v=128,
        num_kv_heads=4,
        kv_lora_rank=0,
        qk_rope_head_dim=0,
        total_params=235.1e9,
        active_params=22.1e9,
        weight_bytes_per_param=1.0,
        kv_bytes_per_token_bf16=_gqa_kv_bytes(94, 4, 128, 2),  # 192,512
        kv_bytes_per_token_fp8=_gqa_kv_bytes(94, 4, 128, 1),
        num_experts=128,
        experts_per_token=8,
        moe_intermediate_size=1536,
        intermediate_size=12288,
        vocab_size=151936,
    ),
    # Llama-3.1-8B (meta-llama config.json): 32 layers, hidden 4096, 32 q / 8 kv heads x 128.
    "llama-3.1-8b": ModelSpec(
        name="llama-3.1-8b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        attention="gqa",
        head_dim_qk=128,
        head_dim_v=128,
        num_kv_heads=8,
        kv_lora_rank=0,
        qk_rope_head_dim=0,
        total_params=8.03e9,
        active_params=8.03e9,
        weight_bytes_per_param=2.0,
        kv_bytes_per_token_bf16=_gqa_kv_bytes(32, 8, 128, 2),  # 131,072
        kv_bytes_per_token_fp8=_gqa_kv_bytes(32, 8, 128, 1),
        intermediate_size=14336,
        vocab_size=128256,
    ),
    # Qwen2.5-7B (Qwen config.json): 28 layers, hidden 3584, 28 q / 4 kv heads x 128.
    "qwen2.5-7b": ModelSpec(
        name="qwen2.5-7b",
        num_layers=28,
        hidden_size=3584,
        num_heads=28,
        attention="gqa",
        head_dim_qk=128,
        head_dim_v=128,
        num_kv_heads=4,
        kv_lora_rank=0,
        qk_rope_head_dim=0,
        total_params=7.62e9,
        active_params=7.62e9,
        weight_bytes_per_param=2.0,
        kv_bytes_per_token_bf16=_gqa_kv_bytes(28, 4, 128, 2),  # 57,344
        kv_bytes_per_token_fp8=_gqa_kv_bytes(28, 4, 128, 1),
        intermediate_size=18944,
        vocab_size=152064,
    ),
}


def get_model(name: str) -> ModelSpec:
    key = name.lower()
    if key not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[key]


# --------------------------------------------------------------------- Hugging Face ids

#: Hugging Face model ids (lower case) of the presets, as ``--model-path`` names them.
HF_MODEL_IDS: dict[str, str] = {
    "zai-org/glm-5": "glm-5",
    "zai-org/glm-5-fp8": "glm-5",
    "deepseek-ai/deepseek-v3.2-exp": "deepseek-v3.2",
    "deepseek-ai/deepseek-v3.2": "deepseek-v3.2",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v3-0324": "deepseek-v3",
    "deepseek-ai/deepseek-v3-base": "deepseek-v3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-r1-0528": "deepseek-v3",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "moonshotai/kimi-k2-instruct": "kimi-k2",
    "moonshotai/kimi-k2-instruct-0905": "kimi-k2",
    "qwen/qwen3-235b-a22b": "qwen3-235b-a22b",
    "qwen/qwen3-235b-a22b-fp8": "qwen3-235b-a22b",
    "deepseek-ai/deepseek-v3.1": "deepseek-v3",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
    "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
}


def preset_for_model_id(model_id: str) -> str | None:
    """The preset name of a Hugging Face id (``deepseek-ai/DeepSeek-V3`` → ``deepseek-v3``;
    case-insensitive, a trailing ``/`` ignored), or None."""
    return HF_MODEL_IDS.get(model_id.strip().rstrip("/").lower())


# --------------------------------------------------------------------- config.json


class ModelConfigError(ValueError):
    """A Hugging Face ``config.json`` the model spec cannot be built from (one line)."""


def _num(cfg: dict[str, object], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if value is None:
            raise ModelConfigError(f"missing {key!r}")
        raise ModelConfigError(f"{key!r} must be a non-negative integer, got {value!r}")
    return value


def _weight_bytes_per_param(cfg: dict[str, object]) -> float:
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "")).lower()
        if "fp8" in method or str(quant.get("fmt", "")).lower().startswith("e4m3"):
            return 1.0
    dtype = str(cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))).lower()
    return 4.0 if dtype in ("float32", "fp32") else 2.0


def model_from_hf_config(raw: dict[str, object], name: str) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` (already parsed).

    Read: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``num_key_value_heads``, ``head_dim``; MLA (``kv_lora_rank``, ``q_lora_rank``,
    ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``); MoE (``n_routed_experts``
    / ``num_experts`` / ``num_local_experts``, ``num_experts_per_tok``,
    ``moe_intermediate_size``, ``n_shared_experts``, ``first_k_dense_replace``); the DSA
    indexer (``index_n_heads``, ``index_head_dim``, ``index_topk``); ``intermediate_size``,
    ``vocab_size``, ``tie_word_embeddings``; the weight dtype (``quantization_config``
    fp8 → 1 byte, else ``torch_dtype``). Parameter counts are computed from these shapes
    (embeddings, attention, dense and expert FFNs; norms, biases and MTP layers left
    out). A multimodal config's ``text_config`` is read when present. Raises
    :class:`ModelConfigError` naming the key.
    """
    cfg: dict[str, object] = raw
    text = raw.get("text_config")
    if isinstance(text, dict):
        cfg = {**raw, **text}
    layers = _num(cfg, "num_hidden_layers")
    hidden = _num(cfg, "hidden_size")
    heads = _num(cfg, "num_attention_heads")
    vocab = _num(cfg, "vocab_size", 0)
    inter = _num(cfg, "intermediate_size", 0)
    if layers == 0 or hidden == 0 or heads == 0:
        raise ModelConfigError("num_hidden_layers, hidden_size and num_attention_heads must be > 0")
    experts = 0
    for key in ("n_routed_experts", "num_experts", "num_local_experts"):
        if cfg.get(key) is not None:
            experts = _num(cfg, key)
            break
    topk = _num(cfg, "num_experts_per_tok", 0) if experts else 0
    moe_inter = _num(cfg, "moe_intermediate_size", inter) if experts else 0
    shared = _num(cfg, "n_shared_experts", 0) if experts else 0
    if experts and shared == 0 and cfg.get("shared_expert_intermediate_size"):
        shared_width = _num(cfg, "shared_expert_intermediate_size")
        shared = -(-shared_width // moe_inter) if moe_inter else 0
    dense_layers = _num(cfg, "first_k_dense_replace", 0) if experts else layers
    dense_layers = min(dense_layers, layers)
    index_heads = _num(cfg, "index_n_heads", 0)
    index_dim = _num(cfg, "index_head_dim", 0)
    index_topk = _num(cfg, "index_topk", 0)

    mla = cfg.get("kv_lora_rank") is not None
    q_lora = 0
    if mla:
        kv_lora = _num(cfg, "kv_lora_rank")
        rope = _num(cfg, "qk_rope_head_dim")
        nope = _num(cfg, "qk_nope_head_dim")
        v_dim = _num(cfg, "v_head_dim")
        q_lora = _num(cfg, "q_lora_rank", 0) if cfg.get("q_lora_rank") is not None else 0
        q_params = (
            (hidden * q_lora + q_lora * heads * (nope + rope))
            if q_lora
            else (hidden * heads * (nope + rope))
        )
        attn = q_params + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim)
        attn += heads * v_dim * hidden
        if index_heads:
            attn += (q_lora or hidden) * index_heads * index_dim + hidden * index_dim
            attn += hidden * index_heads
        head_qk, head_v, kv_heads = nope + rope, v_dim, 1
        if index_heads and index_dim:
            kv_bf16 = layers * ((kv_lora + rope) * 2 + index_dim + 4)
            kv_fp8 = layers * (kv_lora + kv_lora // 128 * 4 + rope * 2 + index_dim + 4)
        else:
            kv_bf16 = layers * (kv_lora + rope) * 2
            kv_fp8 = layers * (kv_lora + kv_lora // 128 * 4 + rope * 2)
        attention = "mla"
    else:
        kv_lora = rope = 0
        kv_heads = _num(cfg, "num_key_value_heads", heads)
        head_dim = _num(cfg, "head_dim", hidden // heads)
        head_qk = head_v = head_dim
        attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
        kv_bf16 = _gqa_kv_bytes(layers, kv_heads, head_dim, 2)
        kv_fp8 = _gqa_kv_bytes(layers, kv_heads, head_dim, 1)
        attention = "gqa"

    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") is True else 2)
    moe_layers = layers - dense_layers if experts else 0
    ffn = 3 * hidden * inter
    expert = 3 * hidden * moe_inter
    total = embed + layers * attn + dense_layers * ffn
    total += moe_layers * (experts * expert + shared * expert + hidden * experts)
    active = embed + layers * attn + dense_layers * ffn + moe_layers * (topk + shared) * expert
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        attention=attention,
        head_dim_qk=head_qk,
        head_dim_v=head_v,
        num_kv_heads=kv_heads,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope,
        total_params=float(total),
        active_params=float(active),
        weight_bytes_per_param=_weight_bytes_per_param(cfg),
        kv_bytes_per_token_bf16=kv_bf16,
        kv_bytes_per_token_fp8=kv_fp8,
        index_n_heads=index_heads,
        index_head_dim=index_dim,
        index_topk=index_topk,
        num_experts=experts,
        experts_per_token=topk,
        moe_intermediate_size=moe_inter,
        num_shared_experts=shared,
        first_dense_layers=dense_layers if experts else 0,
        intermediate_size=inter,
        vocab_size=vocab,
        q_lora_rank=q_lora if mla else 0,
    )
