"""The model presets (:data:`MODELS`: GLM-5, DeepSeek-V3.2, DeepSeek-V3, Kimi K2,
Qwen3-235B-A22B, Llama-3.1-8B, Qwen2.5-7B, each from its ``config.json``) and the
Hugging Face ids that name them (:data:`HF_MODEL_IDS`)."""

from __future__ import annotations

from prefillkit.models.architecture import ModelSpec, gqa_kv_bytes, mla_sparse_kv_bytes

__all__ = ["HF_MODEL_IDS", "MODELS", "get_model", "preset_for_model_id"]

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
        kv_bytes_per_token_bf16=mla_sparse_kv_bytes(78, 128, fp8=False),  # 100,152
        kv_bytes_per_token_fp8=mla_sparse_kv_bytes(78, 128, fp8=True),  # 61,464
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
        kv_bytes_per_token_bf16=mla_sparse_kv_bytes(61, 128, fp8=False),  # 78,324
        kv_bytes_per_token_fp8=mla_sparse_kv_bytes(61, 128, fp8=True),  # 48,068
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
        kv_bytes_per_token_bf16=gqa_kv_bytes(94, 4, 128, 2),  # 192,512
        kv_bytes_per_token_fp8=gqa_kv_bytes(94, 4, 128, 1),
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
        kv_bytes_per_token_bf16=gqa_kv_bytes(32, 8, 128, 2),  # 131,072
        kv_bytes_per_token_fp8=gqa_kv_bytes(32, 8, 128, 1),
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
        kv_bytes_per_token_bf16=gqa_kv_bytes(28, 4, 128, 2),  # 57,344
        kv_bytes_per_token_fp8=gqa_kv_bytes(28, 4, 128, 1),
        intermediate_size=18944,
        vocab_size=152064,
    ),
}


def get_model(name: str) -> ModelSpec:
    key = name.lower()
    if key not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[key]


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
