"""Forward-time cost model: what the simulator uses in place of a GPU.

One small interface, :class:`CostModel`, and one implementation,
:class:`RooflineCostModel`: an analytic roofline over a :class:`ModelSpec` and a
:class:`GpuSpec`. Every term is ``work / (num_gpus × peak × efficiency)``; CP/TP are
assumed to split compute evenly across ``num_gpus``.

Per prefill forward (a batch of :class:`ReqShape`, ``T = Σ extend``):

- **linear layers**: ``max(2 × active_params × T / (gpus × gemm_peak × eff_gemm(T)),
  weight_bytes_read(T) / (gpus × hbm_bw × eff_mem))``. ``gemm_peak`` is the fp8 peak for
  FP8 checkpoints (``weight_bytes_per_param <= 1``), else the bf16 peak.
  ``eff_gemm(T) = eff_gemm × clamp(sqrt(T / 512), 0.05, 1)``: full efficiency from 512
  tokens in the batch, a smooth ramp below (compute time then grows as ``sqrt(T)``, so
  it stays monotone and small batches fall onto the memory roofline). Weights read:
  a dense model reads all weights; an MoE model reads its non-expert weights plus the
  expected share of routed experts touched when ``T`` tokens each pick ``k`` of ``E``
  experts uniformly, ``1 - (1 - k/E)^T`` (~64 % at ``T = E/k``, ~all at ``T >= 5E/k``).
- **dense attention** (GQA models; sparse models at context ``<= sparse_dense_threshold``):
  ``layers × 2 × heads × (d_qk + d_v) × extend × (prefix + extend/2)`` FLOPs per request,
  at ``eff_attn`` of the bf16 peak.
- **DSA/NSA sparse attention** (sparse models, context ``prefix + extend`` above the
  threshold): each query attends to ``min(its causal position, index_topk)`` keys, i.e.
  ``layers × 2 × heads × (d_qk + d_v) × ∫ min(x, topk) dx`` over the extend positions.
  That is exactly ``extend × min(context, topk)`` once ``prefix >= topk`` (the warm
  case) and is continuous with the dense formula at the threshold. Plus the lightning
  **indexer**, ``layers × 2 × index_heads × index_head_dim × extend × (prefix + extend/2)``
  at ``eff_indexer`` of the fp8 peak: it scans the whole context, so a cached prefix
  still costs indexer time.
- **host load-back**: ``Σ loaded_tokens × kv_bytes_per_token / h2d_bandwidth`` per GPU.
  MLA keeps the full latent on every GPU (no division by ``num_gpus``); GQA KV is
  head-sharded over ``min(num_gpus, num_kv_heads)`` GPUs. The load is pipelined layer by
  layer under compute, so only ``max(0, load − compute)`` is added.
- a fixed per-forward **overhead** (scheduling, launches, sampling of the first token).

Calibration (DeepSeek-V3.2 on 8 × H800, batches of 4 × 4,096-token prompts, no cache
hits; ``tokens/s = Σ extend / forward_time``): DeepSeek's inference-system overview
(2025-02-28, "Day 6" of Open Source Week) reports 73.7k input tokens/s per H800 node
*including* cache hits; the reference we reproduce is **62,713 prefill tokens/s per
node at 4K-token prompts**. ``eff_gemm = 0.35`` (FP8 MoE GEMMs, the given default) leaves
~45 ms of the 261 ms forward for attention, indexer and overhead; ``eff_attn = 0.5``,
``eff_indexer = 0.25`` (logits plus top-k selection) and ``overhead_s = 3 ms`` give
~63.1k tokens/s (+0.6 %). Dense bf16 GEMMs use ``eff_gemm = 0.7``.

Dense bf16 check: no trustworthy *prefill-only* Llama-3.1-8B figure with a stated GPU
was found. SGLang PR #2134 (``bench_one_batch``, 128 × 128-token prompts, Triton
attention) reports 43,925 prefill tokens/s without naming the GPU (this model gives
~42k on one H100); SGLang PR #1060 reports 27,670 input tokens/s on an H100-era serving
run (random prompts up to 8K, 8 output tokens, old Triton backend), which mixes decode
and queueing. The tests therefore assert that the linear term at 0.7 efficiency equals
its analytic value instead of a published throughput.

NOT modelled: CP/TP/EP communication (all-reduce, all-to-all dispatch/combine, CP KV
exchange) and its overlap; MoE load imbalance across experts/GPUs; kernel launch
detail, CUDA graphs, stream bubbles and tail effects; norms, activations, rope and
other elementwise work; embedding/LM-head specifics (all ``active_params`` count as
GEMM work per token, ~13 % pessimistic for an 8B dense model, <2 % for DeepSeek);
the KV write of newly computed tokens; power/clock throttling. Efficiencies absorb
these on average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from prefillkit.models import ModelSpec, get_model
from prefillkit.sim.gpus import GpuSpec, get_gpu

# --- defaults -------------------------------------------------------------------------
EFF_GEMM_FP8: float = 0.35  # FP8 (MoE) GEMMs at >= GEMM_SATURATION_TOKENS tokens
EFF_GEMM_BF16: float = 0.7  # dense bf16 GEMMs at >= GEMM_SATURATION_TOKENS tokens
GEMM_SATURATION_TOKENS: int = 512
GEMM_EFF_FLOOR: float = 0.05  # lowest fraction of eff_gemm (only below ~1.3 tokens)
DEFAULT_EFF_ATTN: float = 0.5
DEFAULT_EFF_INDEXER: float = 0.25
DEFAULT_EFF_MEM: float = 0.8
DEFAULT_OVERHEAD_S: float = 0.003
# PCIe Gen5 x16 host->device, achievable (64 GB/s theoretical per direction).
DEFAULT_H2D_BANDWIDTH: float = 50e9
# Aggregate send-out bandwidth of a prefill instance for PD disaggregation.
DEFAULT_KV_TRANSFER_BANDWIDTH: float = 50e9

BREAKDOWN_KEYS: tuple[str, ...] = (
    "linear",
    "attention",
    "indexer",
    "loadback_exposed",
    "overhead",
    "total",
)


@dataclass(frozen=True, slots=True)
class ReqShape:
    """One request's part of a prefill forward.

    ``prefix_len`` counts every token already in KV when the forward runs: the device
    prefix plus the ``loaded_tokens`` brought back from host, so
    ``loaded_tokens <= prefix_len``.
    """

    prefix_len: int  # tokens already in KV (device prefix + loaded host tokens)
    extend_len: int  # tokens computed in this forward
    loaded_tokens: int = 0  # host->device load-back tokens for this request

    def __post_init__(self) -> None:
        if self.prefix_len < 0 or self.extend_len < 0 or self.loaded_tokens < 0:
            raise ValueError(f"ReqShape fields must be >= 0: {self}")
        if self.loaded_tokens > self.prefix_len:
            raise ValueError(
                f"loaded_tokens ({self.loaded_tokens}) exceeds prefix_len "
                f"({self.prefix_len}); the prefix includes loaded tokens"
            )


@runtime_checkable
class CostModel(Protocol):
    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        """Seconds for one prefill forward over ``batch`` (0.0 for an empty batch)."""
        ...

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        """Seconds for one decode step of ``batch_size`` requests."""
        ...

    def kv_transfer_time(self, tokens: int) -> float:
        """Seconds to send ``tokens`` tokens of KV out (PD prefill send-out)."""
        ...


def _causal_min_span(prefix: int, extend: int, cap: int) -> float:
    """``∫_{prefix}^{prefix+extend} min(x, cap) dx``: keys attended, summed over queries."""
    end = prefix + extend
    if prefix >= cap:
        return float(extend * cap)
    if end <= cap:
        return extend * (prefix + extend / 2.0)
    return (cap * cap - prefix * prefix) / 2.0 + float((end - cap) * cap)


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


def _check_positive(name: str, value: float) -> None:
    if not value > 0.0 or not math.isfinite(value):
        raise ValueError(f"{name} must be finite and > 0, got {value}")


class RooflineCostModel:
    """Analytic roofline cost model; see the module docstring for every formula."""

    __slots__ = (
        "_attn_coef",
        "_attn_rate",
        "_dense_params",
        "_expert_params",
        "_gemm_rate",
        "_idx_coef",
        "_idx_rate",
        "_kv_shards",
        "_mem_rate",
        "eff_attn",
        "eff_gemm",
        "eff_indexer",
        "eff_mem",
        "gemm_dtype",
        "gpu",
        "h2d_bandwidth",
        "kv_bytes_per_token",
        "kv_transfer_bandwidth",
        "model",
        "num_gpus",
        "overhead_s",
    )

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        num_gpus: int,
        *,
        eff_gemm: float | None = None,
        eff_attn: float = DEFAULT_EFF_ATTN,
        eff_mem: float = DEFAULT_EFF_MEM,
        eff_indexer: float = DEFAULT_EFF_INDEXER,
        overhead_s: float = DEFAULT_OVERHEAD_S,
        h2d_bandwidth: float = DEFAULT_H2D_BANDWIDTH,
        kv_transfer_bandwidth: float = DEFAULT_KV_TRANSFER_BANDWIDTH,
        kv_bytes_per_token: int | None = None,
        gemm_dtype: str | None = None,
    ) -> None:
        if num_gpus < 1:
            raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
        if gemm_dtype is None:
            gemm_dtype = "fp8" if model.weight_bytes_per_param <= 1.0 else "bf16"
        if gemm_dtype not in ("fp8", "bf16"):
            raise ValueError(f"gemm_dtype must be 'fp8' or 'bf16', got {gemm_dtype!r}")
        if eff_gemm is None:
            eff_gemm = EFF_GEMM_FP8 if gemm_dtype == "fp8" else EFF_GEMM_BF16
        if kv_bytes_per_token is None:
            kv_bytes_per_token = model.kv_bytes_per_token_bf16
        _check_fraction("eff_gemm", eff_gemm)
        _check_fraction("eff_attn", eff_attn)
        _check_fraction("eff_mem", eff_mem)
        _check_fraction("eff_indexer", eff_indexer)
        _check_positive("h2d_bandwidth", h2d_bandwidth)
        _check_positive("kv_transfer_bandwidth", kv_transfer_bandwidth)
        if overhead_s < 0.0 or not math.isfinite(overhead_s):
            raise ValueError(f"overhead_s must be finite and >= 0, got {overhead_s}")
        if kv_bytes_per_token <= 0:
            raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")

        self.model = model
        self.gpu = gpu
        self.num_gpus = num_gpus
        self.eff_gemm = eff_gemm
        self.eff_attn = eff_attn
        self.eff_mem = eff_mem
        self.eff_indexer = eff_indexer
        self.overhead_s = overhead_s
        self.h2d_bandwidth = h2d_bandwidth
        self.kv_transfer_bandwidth = kv_transfer_bandwidth
        self.kv_bytes_per_token = kv_bytes_per_token
        self.gemm_dtype = gemm_dtype

        gemm_peak = gpu.peak_flops_fp8 if gemm_dtype == "fp8" else gpu.peak_flops_bf16
        self._gemm_rate = num_gpus * gemm_peak  # FLOP/s before efficiency
        self._attn_rate = num_gpus * gpu.peak_flops_bf16 * eff_attn
        self._idx_rate = num_gpus * gpu.peak_flops_fp8 * eff_indexer
        self._mem_rate = num_gpus * gpu.hbm_bandwidth * eff_mem
        self._attn_coef = (
            2.0 * model.num_layers * model.num_heads * (model.head_dim_qk + model.head_dim_v)
        )
        self._idx_coef = 2.0 * model.num_layers * model.index_n_heads * model.index_head_dim
        # MLA: every GPU holds the whole latent; GQA: KV heads shard over TP ranks.
        self._kv_shards = (
            1 if model.attention == "mla" else max(1, min(num_gpus, model.num_kv_heads))
        )
        # MoE split: per routed expert params (all layers) and always-read params.
        e, k = model.num_experts, model.experts_per_token
        if e > 0 and 0 < k < e and model.total_params > model.active_params:
            per_expert = (model.total_params - model.active_params) / (e - k)
            self._expert_params = per_expert * e
            self._dense_params = model.total_params - self._expert_params
        else:
            self._expert_params = 0.0
            self._dense_params = model.total_params

    # --- building blocks -------------------------------------------------------------
    def gemm_efficiency(self, tokens: int) -> float:
        """Effective GEMM efficiency for ``tokens`` tokens in the forward."""
        ramp = math.sqrt(tokens / GEMM_SATURATION_TOKENS) if tokens > 0 else 0.0
        return self.eff_gemm * min(1.0, max(GEMM_EFF_FLOOR, ramp))

    def weight_bytes_read(self, tokens: int) -> float:
        """Weight bytes one forward over ``tokens`` tokens reads (whole model, all GPUs)."""
        m = self.model
        if self._expert_params <= 0.0:
            return m.total_params * m.weight_bytes_per_param
        frac = 1.0 - (1.0 - m.experts_per_token / m.num_experts) ** max(tokens, 0)
        return (self._dense_params + self._expert_params * frac) * m.weight_bytes_per_param

    def linear_time(self, tokens: int) -> float:
        """Linear-layer roofline time for ``tokens`` tokens (0.0 for no tokens)."""
        if tokens <= 0:
            return 0.0
        flops = 2.0 * self.model.active_params * tokens
        compute = flops / (self._gemm_rate * self.gemm_efficiency(tokens))
        memory = self.weight_bytes_read(tokens) / self._mem_rate
        return max(compute, memory)

    def attention_flops(self, req: ReqShape) -> tuple[float, float]:
        """(attention FLOPs, indexer FLOPs) of one request's part of a forward."""
        m = self.model
        prefix, extend = req.prefix_len, req.extend_len
        dense_span = extend * (prefix + extend / 2.0)
        if m.is_sparse and prefix + extend > m.sparse_dense_threshold:
            attn = self._attn_coef * _causal_min_span(prefix, extend, m.index_topk)
            return attn, self._idx_coef * dense_span
        return self._attn_coef * dense_span, 0.0

    def loadback_time(self, loaded_tokens: int) -> float:
        """Raw host->device load time for ``loaded_tokens`` tokens (before overlap)."""
        per_gpu = loaded_tokens * self.kv_bytes_per_token / self._kv_shards
        return per_gpu / self.h2d_bandwidth

    # --- CostModel --------------------------------------------------------------------
    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        """Seconds per component of one forward; keys are :data:`BREAKDOWN_KEYS`."""
        tokens = 0
        loaded = 0
        attn_flops = 0.0
        idx_flops = 0.0
        for req in batch:
            if req.prefix_len < 0 or req.extend_len < 0 or req.loaded_tokens < 0:
                raise ValueError(f"negative ReqShape field: {req}")
            tokens += req.extend_len
            loaded += req.loaded_tokens
            a, i = self.attention_flops(req)
            attn_flops += a
            idx_flops += i
        if tokens == 0 and loaded == 0:
            return dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        linear = self.linear_time(tokens)
        attention = attn_flops / self._attn_rate
        indexer = idx_flops / self._idx_rate
        compute = linear + attention + indexer
        exposed = max(0.0, self.loadback_time(loaded) - compute)
        overhead = self.overhead_s
        return {
            "linear": linear,
            "attention": attention,
            "indexer": indexer,
            "loadback_exposed": exposed,
            "overhead": overhead,
            "total": compute + exposed + overhead,
        }

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        return self.breakdown(batch)["total"]

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        """One decode step: ``max(memory, compute) + overhead_s``.

        Memory: the weights the step touches (all for dense models, the expected
        expert coverage of ``batch_size`` tokens for MoE) plus the KV it reads, over
        ``num_gpus × hbm_bandwidth × eff_mem``. KV read is ``total_context ×
        kv_bytes_per_token``; a sparse model reads indexer keys for the whole context
        but latents only for ``min(total_context, batch_size × index_topk)`` tokens.
        KV is assumed spread evenly over the GPUs (DP attention / head sharding).
        Compute: ``2 × active_params × batch_size`` at the ramped GEMM efficiency;
        attention math is ignored (decode attention is memory-bound).
        """
        if batch_size < 0 or total_context < 0:
            raise ValueError(
                f"batch_size and total_context must be >= 0, got {batch_size}, {total_context}"
            )
        if batch_size == 0:
            return 0.0
        m = self.model
        if m.is_sparse:
            idx_bytes = min(float(self.kv_bytes_per_token), m.num_layers * (m.index_head_dim + 4.0))
            latent_bytes = self.kv_bytes_per_token - idx_bytes
            latent_tokens = min(total_context, batch_size * m.index_topk)
            kv = total_context * idx_bytes + latent_tokens * latent_bytes
        else:
            kv = float(total_context) * self.kv_bytes_per_token
        memory = (self.weight_bytes_read(batch_size) + kv) / self._mem_rate
        compute = (2.0 * m.active_params * batch_size) / (
            self._gemm_rate * self.gemm_efficiency(batch_size)
        )
        return max(memory, compute) + self.overhead_s

    def kv_transfer_time(self, tokens: int) -> float:
        """``tokens × kv_bytes_per_token / kv_transfer_bandwidth`` (no fixed latency)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        return tokens * self.kv_bytes_per_token / self.kv_transfer_bandwidth

    def __repr__(self) -> str:
        return (
            f"RooflineCostModel(model={self.model.name!r}, gpu={self.gpu.name!r}, "
            f"num_gpus={self.num_gpus}, gemm_dtype={self.gemm_dtype!r}, "
            f"eff_gemm={self.eff_gemm}, eff_attn={self.eff_attn}, eff_mem={self.eff_mem}, "
            f"eff_indexer={self.eff_indexer}, overhead_s={self.overhead_s})"
        )


def default_cost_model(
    model_name: str,
    gpu_name: str,
    num_gpus: int = 8,
    kv_bytes_per_token: int | None = None,
    h2d_gbps: float = DEFAULT_H2D_BANDWIDTH / 1e9,
    kv_transfer_gbps: float = DEFAULT_KV_TRANSFER_BANDWIDTH / 1e9,
) -> RooflineCostModel:
    """Calibrated :class:`RooflineCostModel` for preset names.

    ``h2d_gbps`` and ``kv_transfer_gbps`` are in GB/s (1e9 *bytes*/s, not Gbit/s).
    ``kv_bytes_per_token`` defaults to the model's bf16 KV size.
    """
    return RooflineCostModel(
        get_model(model_name),
        get_gpu(gpu_name),
        num_gpus,
        kv_bytes_per_token=kv_bytes_per_token,
        h2d_bandwidth=h2d_gbps * 1e9,
        kv_transfer_bandwidth=kv_transfer_gbps * 1e9,
    )
