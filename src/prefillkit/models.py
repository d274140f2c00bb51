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
        """Parameters a prefill token runs through on its own rank: everything active but
        the routed experts and the vocabulary matrices (the embedding is a lookup and the
        LM head runs for one position per request, not per prompt token)."""
        return (
            self.active_params
            - self.routed_active_params
            - 2.0 * self.vocab_size * self.hidden_size
        )

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
