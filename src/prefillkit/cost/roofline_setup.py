"""Setting up a :class:`~prefillkit.cost.roofline.RooflineCostModel`: its settings, checked
and defaulted (:func:`resolve_settings`), and the per-deployment coefficients its
per-forward pricing multiplies out (:func:`attention_coefficients`,
:func:`expert_shares`, :func:`gemm_timer`).

Everything here runs once, when a model is built (:func:`decode_batch_terms`: once per
decode batch size); the per-forward pricing stays in the compiled
:mod:`prefillkit.cost.roofline`.

Per prefill forward, for each attention rank ``r`` (query rows ``rows_r``, causal keys
``keys_r``; sums over the batch):

- ``linear``: every token-local GEMM of :func:`~prefillkit.models.token_local_gemms`
  (attention and indexer projections, shared experts, router, dense-FFN layers; the
  vocabulary matrices excluded) at ``rows_r`` rows with its attention-TP split, each
  timed by :class:`~prefillkit.cost.gemm.GemmTimer` under the small-GEMM assumption
  (``tiles``: tile padding and wave quantisation over the SMs; ``sqrt-h100``; ``ideal``),
  never below its memory roofline.
- ``attention``: ``layers × 2 × heads × f × keys_r`` at ``eff_attn`` of the bf16 peak,
  ``f = d_qk + d_v`` in the MHA form and ``2 kv_lora + rope`` in the absorbed MLA form,
  picked per batch as SGLang does
  (:meth:`~prefillkit.cost.roofline.RooflineCostModel.attention_coefficient`);
  ``heads`` is the rank's ``H / attn_tp``, padded for DSA models to FlashMLA's sparse
  kernel (:func:`sparse_kernel_heads`). A query at position ``x`` attends ``x + 1`` keys
  (dense) or ``min(x + 1, index_topk)`` (DSA/NSA sparse models).
- ``indexer`` (sparse models, requests whose context exceeds ``sparse_dense_threshold``):
  ``layers × 2 × index_heads × index_head_dim × (x + 1)`` per query at ``eff_indexer`` of
  the fp8 peak: it scans the whole context, so a cached prefix still costs.
- ``elementwise``: norms, rope, activations, quantisation and residual traffic,
  ``rows_r × layers × activation bytes per token-layer / (hbm × eff_mem)``; the bytes
  are :func:`~prefillkit.cost.efficiency.activation_bytes_per_token_layer` (an
  assumption stated there).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from prefillkit.cost.efficiency import (
    FAMILY_EFFICIENCIES,
    Efficiencies,
    check_fraction,
    check_positive,
)
from prefillkit.cost.gemm import GemmTimer
from prefillkit.cost.gpus import GpuSpec
from prefillkit.cost.protocol import ParallelLayout
from prefillkit.models import ModelSpec

__all__ = [
    "RooflineSettings",
    "attention_coefficients",
    "decode_batch_terms",
    "expert_shares",
    "gemm_timer",
    "resolve_settings",
    "sparse_kernel_heads",
]


class RooflineSettings(NamedTuple):
    """The settings :func:`resolve_settings` fills in (the others are taken as given)."""

    layout: ParallelLayout
    eff: Efficiencies
    gemm_dtype: str
    eff_gemm: float
    eff_attn: float
    kv_bytes_per_token: int


def resolve_settings(
    model: ModelSpec,
    gpu: GpuSpec,
    num_gpus: int,
    *,
    layout: ParallelLayout | None,
    page_size: int,
    eff: Efficiencies | None,
    eff_gemm: float | None,
    eff_attn: float | None,
    per_forward_s: float,
    per_request_s: float,
    h2d_bandwidth: float,
    kv_transfer_bandwidth: float,
    kv_bytes_per_token: int | None,
    gemm_dtype: str | None,
) -> RooflineSettings:
    """The constructor's arguments checked (ValueError, one line) and its defaults filled
    in: one layout over all GPUs, the GEMM dtype of the checkpoint's weights, the GPU
    family's efficiencies and the model's bf16 KV bytes per token."""
    if num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
    layout = layout or ParallelLayout(num_gpus)
    if layout.num_gpus != num_gpus:
        raise ValueError(f"layout has {layout.num_gpus} GPUs, expected {num_gpus}")
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    if gemm_dtype is None:
        gemm_dtype = "fp8" if model.weight_bytes_per_param <= 1.0 else "bf16"
    if gemm_dtype not in ("fp8", "bf16"):
        raise ValueError(f"gemm_dtype must be 'fp8' or 'bf16', got {gemm_dtype!r}")
    eff = eff or FAMILY_EFFICIENCIES[gpu.family]
    if eff_gemm is None:
        eff_gemm = eff.gemm_fp8 if gemm_dtype == "fp8" else eff.gemm_bf16
    if eff_attn is None:
        eff_attn = eff.attn
    if kv_bytes_per_token is None:
        kv_bytes_per_token = model.kv_bytes_per_token_bf16
    check_fraction("eff_gemm", eff_gemm)
    check_fraction("eff_attn", eff_attn)
    check_positive("h2d_bandwidth", h2d_bandwidth)
    check_positive("kv_transfer_bandwidth", kv_transfer_bandwidth)
    for name, value in (("per_forward_s", per_forward_s), ("per_request_s", per_request_s)):
        if value < 0.0 or not math.isfinite(value):
            raise ValueError(f"{name} must be finite and >= 0, got {value}")
    if kv_bytes_per_token <= 0:
        raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")
    return RooflineSettings(layout, eff, gemm_dtype, eff_gemm, eff_attn, kv_bytes_per_token)


def sparse_kernel_heads(model: ModelSpec, gpu: GpuSpec, attn_tp: int) -> float:
    """Query heads one rank's absorbed-MLA kernel computes: the rank's ``H / attn_tp``,
    padded for DSA/NSA sparse models to the multiple FlashMLA's sparse kernels require,
    64 on Hopper and 128 on Blackwell (SGLang 0.5.23 ``dsa_backend._forward_flashmla_sparse``
    zero-pads q to it; ``flashmla_kv`` likewise): GLM-5's 64 heads at attention TP 8 run 8
    heads' work in a 64-head kernel."""
    local = model.num_heads / attn_tp
    if not model.is_sparse:
        return local
    pad = 128 if gpu.family == "blackwell" else 64
    return float(math.ceil(local / pad) * pad)


def attention_coefficients(
    model: ModelSpec, gpu: GpuSpec, attn_tp: int, eff: Efficiencies, eff_attn: float
) -> tuple[float, float, float]:
    """Seconds per (query, key) pair on one attention-TP rank, all layers: the MHA form,
    the absorbed MLA form and the DSA indexer."""
    m = model
    tp = attn_tp
    # Attention FLOPs per (query, key) pair, all layers, one attention-TP rank: the MHA
    # form 2 H (d_qk + d_v); the absorbed MLA form 2 H (2 kv_lora + rope) (QK over the
    # latent and rope dims, PV over the latent; CHUNKED_PREFIX_CACHE_THRESHOLD's note).
    attn_coef = 2.0 * m.num_layers * m.num_heads * (m.head_dim_qk + m.head_dim_v) / tp
    absorbed = 2 * m.kv_lora_rank + m.qk_rope_head_dim
    absorbed_coef = 2.0 * m.num_layers * sparse_kernel_heads(m, gpu, tp) * absorbed
    attn_rate = gpu.peak_flops_bf16 * eff_attn
    idx_coef = 2.0 * m.num_layers * m.index_n_heads * m.index_head_dim / tp
    idx_rate = gpu.peak_flops_fp8 * eff.indexer
    return attn_coef / attn_rate, absorbed_coef / attn_rate, idx_coef / idx_rate


def expert_shares(model: ModelSpec, ep_size: int, num_gpus: int) -> tuple[float, float, int]:
    """``(k / E, local experts, expert width)`` of the busiest GPU's routed experts: its
    local experts (EP: ``E / ep`` whole experts; MoE TP: a ``1 / num_gpus`` slice of every
    expert's width); zeros for a model without routed experts."""
    m = model
    if m.num_experts and 0 < m.experts_per_token < m.num_experts:
        k, e = m.experts_per_token, m.num_experts
        local = e / ep_size if ep_size > 1 else float(e)
        width = m.moe_intermediate_size if ep_size > 1 else -(-m.moe_intermediate_size // num_gpus)
        return k / e, local, width
    return 0.0, 0.0, 0


def gemm_timer(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    gemm_dtype: str,
    peak: float,
    eff_gemm: float,
    mem_bw: float,
    small_gemm: str,
) -> GemmTimer:
    """The :class:`~prefillkit.cost.gemm.GemmTimer` of the deployment's token-local and
    expert GEMMs (fp8 GEMMs read 1-byte activations, bf16 ones 2)."""
    act_bytes = 1.0 if gemm_dtype == "fp8" else 2.0
    return GemmTimer(
        gpu,
        peak=peak,
        eff=eff_gemm,
        mem_bw=mem_bw,
        weight_bytes=model.weight_bytes_per_param,
        act_bytes=act_bytes,
        small_gemm=small_gemm,
    )


def decode_batch_terms(
    model: ModelSpec, batch_size: int, num_gpus: int, gemm_peak: float, timer: GemmTimer
) -> tuple[float, float]:
    """The parts of :meth:`~prefillkit.cost.roofline.RooflineCostModel.decode_step_time`
    that depend on the batch size alone: the weight bytes the step reads and its compute
    time (kept per batch size: a decode run asks for the same few sizes millions of
    times)."""
    m = model
    if m.num_experts:
        frac = 1.0 - (1.0 - m.experts_per_token / m.num_experts) ** batch_size
        routed = m.expert_params * m.num_experts * m.moe_layers
        weights = (m.total_params - routed + routed * frac) * m.weight_bytes_per_param
    else:
        weights = m.total_params * m.weight_bytes_per_param
    compute = (2.0 * m.active_params * batch_size) / (
        num_gpus * gemm_peak * timer.efficiency(batch_size)
    )
    return weights, compute
