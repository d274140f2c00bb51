"""A :class:`~prefillkit.models.architecture.ModelSpec` from a Hugging Face ``config.json``
(:func:`model_from_hf_config`; ``--model-config`` and a local ``--model-path``)."""

from __future__ import annotations

from typing import NamedTuple

from prefillkit.models.architecture import ModelSpec, gqa_kv_bytes

__all__ = ["ModelConfigError", "model_from_hf_config"]


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


def _text_config(raw: dict[str, object]) -> dict[str, object]:
    """The config to read: a multimodal config's ``text_config`` over its top level."""
    cfg: dict[str, object] = raw
    text = raw.get("text_config")
    if isinstance(text, dict):
        cfg = {**raw, **text}
    return cfg


def _indexer_shape(cfg: dict[str, object]) -> tuple[int, int, int]:
    """The DSA indexer's heads, head dim and top-k (zeros: dense attention only)."""
    index_heads = _num(cfg, "index_n_heads", 0)
    index_dim = _num(cfg, "index_head_dim", 0)
    index_topk = _num(cfg, "index_topk", 0)
    return index_heads, index_dim, index_topk


class _Moe(NamedTuple):
    """The MoE layout of a config (all zeros but ``dense_layers`` for a dense model)."""

    experts: int
    topk: int
    moe_inter: int
    shared: int
    dense_layers: int


class _Attention(NamedTuple):
    """The attention shapes of a config, its parameters per layer and its KV bytes."""

    attention: str
    params: int
    head_qk: int
    head_v: int
    kv_heads: int
    kv_lora: int
    rope: int
    q_lora: int
    kv_bf16: int
    kv_fp8: int


def _moe_layout(cfg: dict[str, object], layers: int, inter: int) -> _Moe:
    """Routed experts, top-k, expert width, shared experts and leading dense layers."""
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
    return _Moe(experts, topk, moe_inter, shared, dense_layers)


def _mla_attention(
    cfg: dict[str, object], layers: int, hidden: int, heads: int, index_heads: int, index_dim: int
) -> _Attention:
    """MLA (DeepSeek/GLM latent attention), with the DSA indexer's projections and keys."""
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
    return _Attention(
        "mla", attn, head_qk, head_v, kv_heads, kv_lora, rope, q_lora, kv_bf16, kv_fp8
    )


def _gqa_attention(cfg: dict[str, object], layers: int, hidden: int, heads: int) -> _Attention:
    """GQA (Llama/Qwen): ``num_key_value_heads`` KV heads of ``head_dim``."""
    kv_lora = rope = 0
    kv_heads = _num(cfg, "num_key_value_heads", heads)
    head_dim = _num(cfg, "head_dim", hidden // heads)
    head_qk = head_v = head_dim
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    kv_bf16 = gqa_kv_bytes(layers, kv_heads, head_dim, 2)
    kv_fp8 = gqa_kv_bytes(layers, kv_heads, head_dim, 1)
    return _Attention("gqa", attn, head_qk, head_v, kv_heads, kv_lora, rope, 0, kv_bf16, kv_fp8)


def _param_counts(
    cfg: dict[str, object], layers: int, hidden: int, vocab: int, inter: int, moe: _Moe, attn: int
) -> tuple[int, int]:
    """Total and active parameters: embeddings, attention, dense and expert FFNs."""
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") is True else 2)
    moe_layers = layers - moe.dense_layers if moe.experts else 0
    ffn = 3 * hidden * inter
    expert = 3 * hidden * moe.moe_inter
    total = embed + layers * attn + moe.dense_layers * ffn
    total += moe_layers * (moe.experts * expert + moe.shared * expert + hidden * moe.experts)
    active = embed + layers * attn + moe.dense_layers * ffn
    active += moe_layers * (moe.topk + moe.shared) * expert
    return total, active


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
    cfg = _text_config(raw)
    layers = _num(cfg, "num_hidden_layers")
    hidden = _num(cfg, "hidden_size")
    heads = _num(cfg, "num_attention_heads")
    vocab = _num(cfg, "vocab_size", 0)
    inter = _num(cfg, "intermediate_size", 0)
    if layers == 0 or hidden == 0 or heads == 0:
        raise ModelConfigError("num_hidden_layers, hidden_size and num_attention_heads must be > 0")
    moe = _moe_layout(cfg, layers, inter)
    index_heads, index_dim, index_topk = _indexer_shape(cfg)
    if cfg.get("kv_lora_rank") is not None:
        att = _mla_attention(cfg, layers, hidden, heads, index_heads, index_dim)
    else:
        att = _gqa_attention(cfg, layers, hidden, heads)
    total, active = _param_counts(cfg, layers, hidden, vocab, inter, moe, att.params)
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        attention=att.attention,
        head_dim_qk=att.head_qk,
        head_dim_v=att.head_v,
        num_kv_heads=att.kv_heads,
        kv_lora_rank=att.kv_lora,
        qk_rope_head_dim=att.rope,
        total_params=float(total),
        active_params=float(active),
        weight_bytes_per_param=_weight_bytes_per_param(cfg),
        kv_bytes_per_token_bf16=att.kv_bf16,
        kv_bytes_per_token_fp8=att.kv_fp8,
        index_n_heads=index_heads,
        index_head_dim=index_dim,
        index_topk=index_topk,
        num_experts=moe.experts,
        experts_per_token=moe.topk,
        moe_intermediate_size=moe.moe_inter,
        num_shared_experts=moe.shared,
        first_dense_layers=moe.dense_layers if moe.experts else 0,
        intermediate_size=inter,
        vocab_size=vocab,
        q_lora_rank=att.q_lora,
    )
