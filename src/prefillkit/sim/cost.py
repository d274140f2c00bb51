"""Forward-time cost model: what the simulator uses in place of a GPU.

One small interface, :class:`CostModel`, and one implementation,
:class:`RooflineCostModel`: per-rank roofline terms over a :class:`ModelSpec`, a
:class:`GpuSpec` and a :class:`ParallelLayout`, plus the communication the layout
implies. A forward waits for its **busiest rank**; nothing is split "perfectly evenly"
unless the layout really splits it that way.

Layout (``num_gpus = attn_tp × cp_size × dp_size``):

- attention runs context-parallel over ``cp_size`` ranks with the **page-aligned split**
  of :mod:`prefillkit.sched.cp_split` (page ``j`` of a sequence on rank ``j mod R``, the
  same function the buffer estimator uses), data-parallel over ``dp_size`` ranks (each
  runs its own batch; the simulator drives one scheduler, so ``dp_size > 1`` assumes
  every DP rank runs a batch of the same shape, as the published benchmarks do), and
  head-parallel over the remaining ``attn_tp`` ranks;
- the routed experts run expert-parallel over ``ep_size`` GPUs (``ep_size == 1``: tensor
  parallel over all ``num_gpus``).

Per prefill forward, for each attention rank ``r`` (query rows ``rows_r``, causal keys
``keys_r``; sums over the batch):

- ``linear``: token-local GEMMs (attention projections, indexer projections, shared
  expert, dense-FFN layers: :attr:`ModelSpec.token_local_params`, the vocabulary matrices
  excluded) = ``max(2 × params × rows_r / attn_tp / (gemm_peak × eff_gemm(rows_r)),
  local weight bytes / attn_tp / (hbm × eff_mem))``. ``eff_gemm(m) = eff ×
  clamp(sqrt(m / 512), 0.05, 1)`` ramps small GEMMs down onto the memory roofline.
- ``attention``: ``layers × 2 × heads × (d_qk + d_v) × keys_r / attn_tp`` at ``eff_attn``
  of the bf16 peak. A query at position ``x`` attends ``x + 1`` keys (dense) or
  ``min(x + 1, index_topk)`` (DSA/NSA sparse models).
- ``indexer`` (sparse models, requests whose context exceeds ``sparse_dense_threshold``):
  ``layers × 2 × index_heads × index_head_dim × (x + 1)`` per query at ``eff_indexer`` of
  the fp8 peak: it scans the whole context, so a cached prefix still costs.
- ``elementwise``: norms, rope, activations, quantisation and residual traffic,
  ``rows_r × layers × activation bytes per token-layer / (hbm × eff_mem)``; the bytes
  are :func:`activation_bytes_per_token_layer` (an assumption stated there).

The forward's compute is ``max_r(rank time)`` plus ``moe_experts``: the busiest GPU's
routed-expert GEMMs, ``2 × expert_params × pairs`` over the MoE layers with ``pairs =
T × k / ep_size × moe_imbalance`` (``T`` = extend tokens of the whole instance), its
expert weights read once (expected coverage ``1 - (1 - k/E)^T``), the same GEMM ramp
on the tokens per expert.

Communication (per forward, all layers), each on its own link:

- ``moe_comm``: EP dispatch (fp8 activations + scales for FP8 checkpoints, else bf16)
  and combine (bf16) of the busiest rank's tokens, ``k`` copies each. Inside one NVLink
  domain: ``rows × k × (ep-1)/ep × bytes`` over NVLink. Across ``N`` nodes, DeepEP-style
  hierarchical dispatch sends a token once per distinct remote node, ``(N-1) ×
  (1 - (1 - 1/N)^k)`` copies, over the NIC, and the NVLink share as above; the slower
  link bounds. Without EP (``ep_size == 1``, ``num_gpus > 1``): an all-gather before and
  a reduce-scatter after the MoE of ``T`` tokens' bf16 hidden state, ``2 × (n-1)/n ×
  T × hidden × 2`` bytes per GPU per MoE layer.
- ``tp_comm`` (``attn_tp > 1``): ring all-reduce of the attention output, ``2 ×
  (t-1)/t × rows × hidden × 2`` bytes per layer.
- ``cp_kv_gather`` (``cp_size > 1``): shared-KV keeps page ``j``'s KV on lane ``j mod R``
  only, and the CP attention/indexer kernels read the context densely (the buffer
  estimator's ``kv_materialize`` + ``index_k_materialize``), so every rank reads the
  ``(R-1)/R`` remote share of **every context row** of the batch (prefix and extend)
  once per layer: ``Σ (prefix + extend) × (R-1)/R × kv_bytes_per_token`` over NVLink.
  *Assumption*: no DSA top-k-only gather.

Overlap rule (what hides and what does not):

- ``moe_comm`` hides under compute only with two-batch overlap (``two_batch_overlap``,
  SGLang ``--enable-two-batch-overlap``). Then the MoE time is ``max(compute / (1 - f),
  moe_comm)``: the communication kernels hold ``f = comm_sms / num_sms`` of the SMs while
  they run (DeepSeek-V3 report, section 3.2.2: 20 of 132 SMs). Without it, it adds.
  The breakdown reports the exposed part, ``moe_comm_exposed``.
- ``tp_comm`` and ``cp_kv_gather`` are on the critical path (each layer's attention needs
  them first) unless ``cp_kv_prefetch`` (the bs>1 L1 prefetch of the spec): then the
  gather hides under compute and only ``max(0, gather - compute)`` is exposed.
- host **load-back** is layer-wise H2D under compute: ``max(0, load - compute)``.
  ``loaded × kv_bytes_per_token / kv_shards / h2d_bandwidth`` per GPU; shared-KV CP
  shards the latent over the ``R`` lanes, MLA otherwise keeps the full latent on every
  GPU, GQA shards KV heads over ``min(num_gpus, kv_heads)``.
- fixed costs: ``per_forward`` (batch set-up, launch, sampling sync) and ``per_request``
  (page table, owner-lane remap, positions and first-token sampling per request).

``total`` is the sum of every other breakdown term (``linear + attention + indexer +
elementwise`` of the busiest rank, ``moe_experts``, the exposed communication terms,
``loadback_exposed`` and the fixed costs).

Efficiencies are per GPU **family** (:data:`FAMILY_EFFICIENCIES`), chosen once from
kernel measurements and never fitted to a throughput figure; ``benchmarks/RESULTS.md``
("Cost-model validation") compares the model with every published prefill throughput
we use, including the ones it misses.

NOT modelled: MoE imbalance beyond one factor, kernel tail effects, power throttling,
the KV write of new tokens (a few MB per layer), PD KV send-out beyond one bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prefillkit.models import ModelSpec, get_model, token_local_gemms
from prefillkit.sched.buffer import ReqShape
from prefillkit.sched.config import ConfigError
from prefillkit.sched.cp_split import add_lane_span
from prefillkit.sim.gemm import SMALL_GEMM_MODELS, GemmTimer
from prefillkit.sim.gpus import GpuSpec, get_gpu

if TYPE_CHECKING:
    from prefillkit.sim.settings import SimSettings

GEMM_SATURATION_TOKENS: int = 512
GEMM_EFF_FLOOR: float = 0.05  # lowest fraction of eff_gemm (only below ~1.3 tokens)
# SGLang 0.5.23 runs MLA prefill in the MHA form ("forward_normal", K and V decompressed
# per key) or the absorbed form (QK over the latent + rope, PV over the latent):
# DSA/NSA models take MHA only when every sequence of the batch is at most
# SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD = 2048 keys and CP prefill is off
# (dsa_backend.set_dsa_prefill_impl); dense MLA (FA3/FlashInfer/FlashMLA) takes MHA when
# the batch has no cached prefix or at least SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD = 8192
# prefix tokens, and absorbed MLA in between (attention_backend_handler); under CP it is
# always absorbed ("Strategy CP gathers latent KV in the backend's absorbed MLA path").
CHUNKED_PREFIX_CACHE_THRESHOLD: int = 8192
# PCIe Gen5 x16 host->device, achievable (64 GB/s theoretical per direction).
DEFAULT_H2D_BANDWIDTH: float = 50e9
# Aggregate send-out bandwidth of a prefill instance for PD disaggregation.
DEFAULT_KV_TRANSFER_BANDWIDTH: float = 50e9
# Assumption: batch set-up, kernel launches not hidden behind the first kernels, and the
# first-token sampling sync of one forward (SGLang runs prefill without CUDA graphs).
DEFAULT_PER_FORWARD_S: float = 0.003
# Assumption: host-side work per request in a batch (page-table row, owner-lane remap,
# positions, sampling); the same order as this repository's measured upstream admission
# cost per request (60-85 us, benchmarks/RESULTS.md).
DEFAULT_PER_REQUEST_S: float = 0.0001

BREAKDOWN_KEYS: tuple[str, ...] = (
    "linear",
    "attention",
    "indexer",
    "elementwise",
    "moe_experts",
    "moe_comm_exposed",
    "tp_comm",
    "cp_kv_gather",
    "loadback_exposed",
    "per_request",
    "per_forward",
    "total",
)


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


def _check_positive(name: str, value: float) -> None:
    if not value > 0.0 or not math.isfinite(value):
        raise ValueError(f"{name} must be finite and > 0, got {value}")


@dataclass(frozen=True, slots=True)
class Efficiencies:
    """Achieved fractions of peak for one GPU family (see :data:`FAMILY_EFFICIENCIES`)."""

    gemm_fp8: float
    gemm_bf16: float
    attn: float
    indexer: float
    mem: float
    nvlink: float
    net: float
    moe_imbalance: float  # busiest GPU's routed load / mean (after EPLB)
    comm_sms: int  # SMs a communication kernel holds while it overlaps compute

    def __post_init__(self) -> None:
        for name in ("gemm_fp8", "gemm_bf16", "attn", "indexer", "mem", "nvlink", "net"):
            _check_fraction(name, getattr(self, name))
        if not self.moe_imbalance >= 1.0:
            raise ValueError(f"moe_imbalance must be >= 1, got {self.moe_imbalance}")
        if self.comm_sms < 0:
            raise ValueError(f"comm_sms must be >= 0, got {self.comm_sms}")


#: One set for the Hopper family, chosen once:
#: - gemm_fp8 0.65: DeepGEMM's README (2025-02) reports 1,100-1,550 TFLOPS for
#:   DeepSeek-V3's dense and grouped (MoE, contiguous layout) FP8 GEMM shapes on H800,
#:   56-78 % of the 1,979 TFLOPS dense peak;
#: - gemm_bf16 0.70: cuBLAS bf16 GEMMs of LLM shapes on H100 reach ~700 TFLOPS;
#: - attn 0.5: FlashAttention-3 (Shah et al., 2024) reaches 610-740 TFLOPS (62-75 %)
#:   on H100 for head dim 128/256; MLA prefill's 192/128 heads and causal masking are
#:   taken at 0.5;
#: - indexer 0.3: assumption (fp8 MQA logits at ~0.6 of peak, halved for the top-k
#:   selection and ReLU-weighted head reduction that follow);
#: - mem 0.8: STREAM-like copies reach ~80 % of HBM bandwidth;
#: - nvlink 0.8: DeepEP's README measures 153-158 GB/s intranode dispatch/combine on
#:   H800's 200 GB/s NVLink; NCCL all-gather bus bandwidth on H100 is ~360 of 450 GB/s;
#: - net 0.9: DeepEP internode dispatch/combine at 43-58 GB/s on 400 Gb/s CX7;
#: - moe_imbalance 1.25: assumption, the residual max/mean GPU load after EPLB (SGLang's
#:   large-scale-EP blog: EPLB speeds prefill up 1.49x, i.e. the unbalanced load was
#:   ~1.5-1.9x of the mean);
#: - comm_sms 20: DeepSeek-V3 report, section 3.2.2 (20 of 132 SMs for communication).
HOPPER = Efficiencies(
    gemm_fp8=0.65,
    gemm_bf16=0.70,
    attn=0.5,
    indexer=0.3,
    mem=0.8,
    nvlink=0.8,
    net=0.9,
    moe_imbalance=1.25,
    comm_sms=20,
)

#: Blackwell and Ampere reuse Hopper's fractions: we found no published kernel
#: efficiencies for them that we trust more, and the GB200 prefill figure in the
#: validation table is a check of exactly that choice, not a fit.
FAMILY_EFFICIENCIES: dict[str, Efficiencies] = {
    "ampere": HOPPER,
    "hopper": HOPPER,
    "blackwell": HOPPER,
}


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """How one instance's ``num_gpus`` GPUs split a forward (module docstring)."""

    num_gpus: int
    cp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    two_batch_overlap: bool = False
    cp_kv_prefetch: bool = False
    shared_kv: bool = True  # CP KV sharded over owner lanes (shared-KV); else replicated

    def __post_init__(self) -> None:
        for name in ("num_gpus", "cp_size", "dp_size", "ep_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_gpus % (self.cp_size * self.dp_size):
            raise ValueError(
                f"cp_size x dp_size ({self.cp_size} x {self.dp_size}) must divide "
                f"num_gpus {self.num_gpus}"
            )
        if self.ep_size not in (1, self.num_gpus):
            raise ValueError(f"ep_size must be 1 or num_gpus ({self.num_gpus}), got {self.ep_size}")

    @property
    def attn_tp(self) -> int:
        return self.num_gpus // (self.cp_size * self.dp_size)


class CostModel(Protocol):
    breakdown_keys: tuple[str, ...]

    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        """Seconds per term of one prefill forward; ``"total"`` is the forward time."""
        ...

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        """Seconds for one prefill forward over ``batch`` (0.0 for an empty batch)."""
        ...

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        """Seconds for one decode step of ``batch_size`` requests."""
        ...

    def kv_transfer_time(self, tokens: int) -> float:
        """Seconds to send ``tokens`` tokens of KV out (PD prefill send-out)."""
        ...


def activation_bytes_per_token_layer(model: ModelSpec) -> float:
    """Elementwise HBM traffic of one token through one layer, in bytes (assumption).

    bf16 (2 bytes) reads and writes of: ten hidden-width vectors (two RMSNorms, two
    residual adds, the FP8 quantisation of the GEMM inputs), the attention's q, k and v
    (``heads × (2 d_qk + d_v)``) and, per FFN, six intermediate-width vectors (gate and
    up written and read, the activation written and read) for each expert the token
    visits (``k + shared`` for MoE models, the dense width otherwise). MoE models add the
    token permutation into the grouped-GEMM contiguous layout and back (DeepGEMM's
    contiguous layout, as SGLang's EP path uses): per routed copy the fp8 input written
    and read and the bf16 output written and read, ``k × hidden × 6`` bytes.
    """
    ffn = (
        (model.experts_per_token + model.num_shared_experts) * model.moe_intermediate_size
        if model.num_experts > 0
        else model.intermediate_size
    )
    heads = model.num_heads * (2 * model.head_dim_qk + model.head_dim_v)
    permute = 6.0 * model.experts_per_token * model.hidden_size if model.num_experts else 0.0
    return 2.0 * (10 * model.hidden_size + heads + 6 * ffn) + permute


class RooflineCostModel:
    """Per-rank roofline + communication cost model; see the module docstring."""

    breakdown_keys: tuple[str, ...] = BREAKDOWN_KEYS
    name: str = "roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        num_gpus: int,
        *,
        layout: ParallelLayout | None = None,
        page_size: int = 64,
        eff: Efficiencies | None = None,
        eff_gemm: float | None = None,
        eff_attn: float | None = None,
        per_forward_s: float = DEFAULT_PER_FORWARD_S,
        per_request_s: float = DEFAULT_PER_REQUEST_S,
        h2d_bandwidth: float = DEFAULT_H2D_BANDWIDTH,
        kv_transfer_bandwidth: float = DEFAULT_KV_TRANSFER_BANDWIDTH,
        kv_bytes_per_token: int | None = None,
        gemm_dtype: str | None = None,
        small_gemm: str = "tiles",
    ) -> None:
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
        if small_gemm not in SMALL_GEMM_MODELS:
            raise ValueError(
                f"small_gemm must be one of {', '.join(SMALL_GEMM_MODELS)}, got {small_gemm!r}"
            )
        eff = eff or FAMILY_EFFICIENCIES[gpu.family]
        if eff_gemm is None:
            eff_gemm = eff.gemm_fp8 if gemm_dtype == "fp8" else eff.gemm_bf16
        if eff_attn is None:
            eff_attn = eff.attn
        if kv_bytes_per_token is None:
            kv_bytes_per_token = model.kv_bytes_per_token_bf16
        _check_fraction("eff_gemm", eff_gemm)
        _check_fraction("eff_attn", eff_attn)
        _check_positive("h2d_bandwidth", h2d_bandwidth)
        _check_positive("kv_transfer_bandwidth", kv_transfer_bandwidth)
        for name, value in (("per_forward_s", per_forward_s), ("per_request_s", per_request_s)):
            if value < 0.0 or not math.isfinite(value):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if kv_bytes_per_token <= 0:
            raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")

        self.model = model
        self.gpu = gpu
        self.num_gpus = num_gpus
        self.layout = layout
        self.page_size = page_size
        self.eff = eff
        self.eff_gemm = eff_gemm
        self.eff_attn = eff_attn
        self.per_forward_s = per_forward_s
        self.per_request_s = per_request_s
        self.h2d_bandwidth = h2d_bandwidth
        self.kv_transfer_bandwidth = kv_transfer_bandwidth
        self.kv_bytes_per_token = kv_bytes_per_token
        self.gemm_dtype = gemm_dtype

        m = model
        tp = layout.attn_tp
        self.small_gemm = small_gemm
        self._gemm_peak = gpu.peak_flops_fp8 if gemm_dtype == "fp8" else gpu.peak_flops_bf16
        self._mem_bw = gpu.hbm_bandwidth * eff.mem
        # Attention FLOPs per (query, key) pair, all layers, one attention-TP rank: the MHA
        # form 2 H (d_qk + d_v); the absorbed MLA form 2 H (2 kv_lora + rope) (QK over the
        # latent and rope dims, PV over the latent; CHUNKED_PREFIX_CACHE_THRESHOLD's note).
        self._attn_coef = 2.0 * m.num_layers * m.num_heads * (m.head_dim_qk + m.head_dim_v) / tp
        absorbed = 2 * m.kv_lora_rank + m.qk_rope_head_dim
        self._absorbed_coef = 2.0 * m.num_layers * m.num_heads * absorbed / tp
        self._attn_rate = gpu.peak_flops_bf16 * eff_attn
        self._idx_coef = 2.0 * m.num_layers * m.index_n_heads * m.index_head_dim / tp
        self._idx_rate = gpu.peak_flops_fp8 * eff.indexer
        self._topk = m.index_topk if m.is_sparse else 0
        self._mla = m.attention == "mla" and m.kv_lora_rank > 0
        self._gemms = token_local_gemms(m)
        self._local_flops_per_row = 2.0 * max(m.token_local_params, 0.0) / tp
        act_bytes = 1.0 if gemm_dtype == "fp8" else 2.0
        self._timer = GemmTimer(
            gpu,
            peak=self._gemm_peak,
            eff=eff_gemm,
            mem_bw=self._mem_bw,
            weight_bytes=m.weight_bytes_per_param,
            act_bytes=act_bytes,
            small_gemm=small_gemm,
        )
        self._linear_memo: dict[int, float] = {}
        self._moe_memo: dict[int, float] = {}
        self._elem_s_per_row = activation_bytes_per_token_layer(m) * m.num_layers / self._mem_bw
        # Routed experts on the busiest GPU: its local experts (EP: E / ep whole experts;
        # MoE TP: a 1 / num_gpus slice of every expert's width).
        self._ep = layout.ep_size
        if m.num_experts and 0 < m.experts_per_token < m.num_experts:
            k, e = m.experts_per_token, m.num_experts
            self._k_over_e = k / e
            self._local_experts = e / self._ep if self._ep > 1 else float(e)
            self._expert_width = (
                m.moe_intermediate_size if self._ep > 1 else -(-m.moe_intermediate_size // num_gpus)
            )
        else:
            self._k_over_e = 0.0
            self._local_experts = 0.0
            self._expert_width = 0
        # Links.
        self._nvl_bw = gpu.nvlink_bandwidth * eff.nvlink
        self._net_bw = gpu.net_bandwidth * eff.net
        self._sm_frac = min(eff.comm_sms / gpu.num_sms, 0.9)
        disp = (
            m.hidden_size * (1.0 + 4.0 / 128)
            if m.weight_bytes_per_param <= 1.0
            else (2.0 * m.hidden_size)
        )
        self._a2a_bytes_per_copy = disp + 2.0 * m.hidden_size  # dispatch + bf16 combine
        # Host load-back shards.
        if layout.cp_size > 1 and layout.shared_kv:
            self._kv_shards = layout.cp_size
        elif m.attention == "mla":
            self._kv_shards = 1
        else:
            self._kv_shards = max(1, min(num_gpus, m.num_kv_heads))
        # Hot-path coefficients (breakdown): every term below is linear in its input.
        self._a_attn = self._attn_coef / self._attn_rate
        self._a_absorbed = self._absorbed_coef / self._attn_rate
        self._b_idx = self._idx_coef / self._idx_rate
        self._dp = layout.dp_size
        self._tbo = layout.two_batch_overlap
        self._prefetch = layout.cp_kv_prefetch
        self._comm_per_rank_row = self.moe_comm_time(1.0, 0)
        self._comm_per_token = self.moe_comm_time(0.0, 1)
        self._tp_per_rank_row = self.tp_comm_time(1.0)
        self._gather_per_token = self.cp_gather_time(1)
        self._load_per_token = self.loadback_time(1)
        # decode_step_time's batch-size terms (NOTE: the model's settings are fixed once
        # built, as the per-row constants above assume).
        self._decode_terms: dict[int, tuple[float, float]] = {}

    # --- building blocks -------------------------------------------------------------
    def gemm_efficiency(self, tokens: float) -> float:
        """Achieved fraction of the GEMM peak for a token-local GEMM over ``tokens`` rows,
        under the small-GEMM assumption (:mod:`prefillkit.sim.gemm`), before the memory
        roofline: ``tiles``: the padding of the rows to the tile; ``sqrt-h100``: the
        0.2 ramp; ``ideal``: the family's efficiency."""
        if tokens <= 0:
            return 0.0
        if self.small_gemm == "tiles":
            tile = 64 if tokens <= 64 else 128
            return self.eff_gemm * tokens / (math.ceil(tokens / tile) * tile)
        if self.small_gemm == "sqrt-h100":
            ramp = math.sqrt(tokens / GEMM_SATURATION_TOKENS)
            return self.eff_gemm * min(1.0, max(GEMM_EFF_FLOOR, ramp))
        return self.eff_gemm

    @property
    def mha_attention_coefficient(self) -> float:
        """Seconds per attention (query, key) pair on one rank in the MHA form."""
        return self._a_attn

    def attention_coefficient(self, batch: Sequence[ReqShape]) -> float:
        """Seconds per attention (query, key) pair on one rank: the absorbed MLA form or
        the MHA form, as SGLang 0.5.23 picks it for this batch (see
        :data:`CHUNKED_PREFIX_CACHE_THRESHOLD`'s note); GQA models: the MHA form."""
        if not self._mla:
            return self._a_attn
        if self.layout.cp_size > 1:
            return self._a_absorbed
        if self._topk:
            longest = max((r.prefix_len + r.extend_len for r in batch), default=0)
            return self._a_absorbed if longest > self.model.sparse_dense_threshold else self._a_attn
        prefix = sum(r.prefix_len for r in batch)
        if prefix == 0 or prefix >= CHUNKED_PREFIX_CACHE_THRESHOLD:
            return self._a_attn
        return self._a_absorbed

    def linear_time(self, rows: float) -> float:
        """Token-local GEMM time of one rank computing ``rows`` query rows: every GEMM of
        :func:`~prefillkit.models.token_local_gemms` at ``rows`` rows, split by attention
        TP, each timed by :class:`~prefillkit.sim.gemm.GemmTimer` (memoised per row count)."""
        if rows <= 0:
            return 0.0
        key = int(rows)
        if key == rows:
            hit = self._linear_memo.get(key)
            if hit is not None:
                return hit
        t = self._timer.gemm_list_time(rows, self._gemms, self.layout.attn_tp)
        if key == rows:
            self._linear_memo[key] = t
        return t

    def moe_imbalance(self, tokens: float) -> float:
        """Busiest EP rank's routed (token, expert) pairs over the mean.

        ``skew × (1 + sqrt(2 ln(ep) (1 - 1/ep) / μ))`` with ``μ = tokens × k / ep`` the mean
        pairs per rank: the expected maximum of ``ep`` near-binomial loads (the extreme-
        value approximation ``μ + σ sqrt(2 ln ep)``: small batches are less even), times
        ``skew``, the family's residual systematic imbalance after EPLB
        (:attr:`Efficiencies.moe_imbalance`, an assumption stated there). 1.0 without EP.
        """
        if self._ep <= 1 or tokens <= 0:
            return 1.0 if self._ep <= 1 else self.eff.moe_imbalance
        ep = self._ep
        mean = tokens * self.model.experts_per_token / ep
        spread = math.sqrt(2.0 * math.log(ep) * (1.0 - 1.0 / ep) / mean)
        return self.eff.moe_imbalance * (1.0 + spread)

    def moe_expert_time(self, tokens: int) -> float:
        """Busiest GPU's routed-expert GEMM time when the instance runs ``tokens`` tokens.

        EP: its ``E / ep_size`` experts with ``tokens × k / E × moe_imbalance(tokens)``
        rows each on average; MoE TP: a ``1 / num_gpus`` slice of every expert's width
        with ``tokens × k / E`` rows each. Timed by
        :meth:`~prefillkit.sim.gemm.GemmTimer.grouped_expert_time` (tile padding per
        expert, waves, at least the local experts' weights read). Memoised per ``tokens``.
        """
        if tokens <= 0 or self._local_experts == 0.0:
            return 0.0
        hit = self._moe_memo.get(tokens)
        if hit is not None:
            return hit
        rows = tokens * self._k_over_e * self.moe_imbalance(tokens)
        m = self.model
        t = self._timer.grouped_expert_time(
            self._local_experts, rows, m.hidden_size, self._expert_width, m.moe_layers
        )
        self._moe_memo[tokens] = t
        return t

    def moe_comm_time(self, rank_rows: float, tokens: int) -> float:
        """Raw MoE communication time per forward (EP all-to-all or TP collectives)."""
        m = self.model
        lay = self.layout
        if m.num_experts == 0 and lay.num_gpus == 1:
            return 0.0
        if self._ep > 1:
            rows = rank_rows / lay.attn_tp
            k = m.experts_per_token
            nodes = -(-self._ep // self.gpu.nvlink_domain)
            nvl = rows * k * (self._ep - 1) / self._ep * self._a2a_bytes_per_copy
            per_layer = nvl / self._nvl_bw
            if nodes > 1:
                remote = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** k)
                per_layer = max(per_layer, rows * remote * self._a2a_bytes_per_copy / self._net_bw)
            return per_layer * m.moe_layers
        n = lay.num_gpus
        if n == 1:
            return 0.0
        layers = m.moe_layers if m.num_experts else m.num_layers
        if lay.cp_size == 1 and lay.dp_size == 1:
            return 0.0  # pure TP: the FFN all-reduce is counted with the attention one
        volume = 2.0 * (n - 1) / n * tokens * m.hidden_size * 2.0
        bw = self._nvl_bw if n <= self.gpu.nvlink_domain else self._net_bw
        return volume / bw * layers

    def tp_comm_time(self, rank_rows: float) -> float:
        """Attention all-reduce time of one rank's rows (``attn_tp > 1``)."""
        t = self.layout.attn_tp
        if t == 1:
            return 0.0
        m = self.model
        per_layer = 2.0 * (t - 1) / t * rank_rows * m.hidden_size * 2.0
        if self.layout.cp_size == 1 and self.layout.dp_size == 1:
            per_layer *= 2.0  # pure TP: the FFN output is all-reduced too
        bw = self._nvl_bw if t <= self.gpu.nvlink_domain else self._net_bw
        return per_layer * self.model.num_layers / bw

    def cp_gather_time(self, context_tokens: int) -> float:
        """Shared-KV CP read of the remote share of every context row, all layers."""
        r = self.layout.cp_size
        if r == 1:
            return 0.0
        return context_tokens * (r - 1) / r * self.kv_bytes_per_token / self._nvl_bw

    def loadback_time(self, loaded_tokens: int) -> float:
        """Raw host->device load time for ``loaded_tokens`` tokens (before overlap)."""
        per_gpu = loaded_tokens * self.kv_bytes_per_token / self._kv_shards
        return per_gpu / self.h2d_bandwidth

    def rank_work(self, batch: Sequence[ReqShape]) -> tuple[list[int], list[int], list[int]]:
        """Per attention rank: query rows, attention keys and indexer keys of ``batch``.

        One :func:`add_lane_span` per request, two when a sparse model's extend straddles
        ``index_topk``: rows below the cap attend their causal keys, rows at or above it
        attend exactly ``index_topk``; the indexer scans every row's causal keys in
        requests whose context exceeds ``sparse_dense_threshold``.
        """
        r = self.layout.cp_size
        page = self.page_size if r > 1 else 1
        topk = self._topk
        threshold = self.model.sparse_dense_threshold
        if not topk:
            rows = [0] * r
            attn = [0] * r
            for req in batch:
                p, e = req.prefix_len, req.extend_len
                if p < 0 or e < 0:
                    raise ValueError(f"negative ReqShape field: {req}")
                add_lane_span(rows, attn, p, p + e, page)
            return rows, attn, [0] * r
        if len(batch) == 1:  # the common bs = 1 forward: one span, lanes derived from it
            req = batch[0]
            p, e = req.prefix_len, req.extend_len
            end = p + e
            if e > 0 and (p >= topk or end <= topk):
                rq = [0] * r
                kq = [0] * r
                add_lane_span(rq, kq, p, end, page)
                attn = [topk * x for x in rq] if p >= topk else kq
                return rq, attn, (kq if end > threshold else [0] * r)
        low_rows = [0] * r  # rows below the top-k cap, requests without the indexer
        low_keys = [0] * r
        low_rows_i = [0] * r  # rows below the cap, requests with the indexer
        low_keys_i = [0] * r
        high_rows = [0] * r  # rows at or above the cap, requests with the indexer
        high_keys = [0] * r
        high_rows_n = [0] * r  # rows at or above the cap, without (threshold > topk)
        for req in batch:
            p, e = req.prefix_len, req.extend_len
            if p < 0 or e < 0:
                raise ValueError(f"negative ReqShape field: {req}")
            if e == 0:
                continue
            end = p + e
            indexer = end > threshold
            if p < topk:
                if indexer:
                    add_lane_span(low_rows_i, low_keys_i, p, min(end, topk), page)
                else:
                    add_lane_span(low_rows, low_keys, p, min(end, topk), page)
            if end > topk:
                if indexer:
                    add_lane_span(high_rows, high_keys, max(p, topk), end, page)
                else:
                    add_lane_span(high_rows_n, None, max(p, topk), end, page)
        lanes = range(r)
        rows = [low_rows[i] + low_rows_i[i] + high_rows[i] + high_rows_n[i] for i in lanes]
        attn = [low_keys[i] + low_keys_i[i] + topk * (high_rows[i] + high_rows_n[i]) for i in lanes]
        idx = [low_keys_i[i] + high_keys[i] for i in lanes]
        return rows, attn, idx

    # --- CostModel --------------------------------------------------------------------
    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        """Seconds per term of one forward; keys are :data:`BREAKDOWN_KEYS`."""
        tokens = 0
        loaded = 0
        context = 0
        n_req = 0
        for req in batch:
            p, e, ld = req.prefix_len, req.extend_len, req.loaded_tokens
            if p < 0 or e < 0 or ld < 0 or ld > p:
                raise ValueError(f"bad request shape (fields >= 0, loads in the prefix): {req}")
            tokens += e
            loaded += ld
            context += p + e
            n_req += 1
        if tokens == 0 and loaded == 0:
            return dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        rows, attn_keys, idx_keys = self.rank_work(batch)
        # NOTE: hot path. The communication terms are inlined through coefficients
        # precomputed from their helper methods (each is linear in its argument); the
        # GEMM terms come from linear_time / moe_expert_time, memoised per row count
        # (tests check both give the same terms). The busiest rank: every lane's time is
        # linear(rows) + a * attention keys + b * indexer keys + c * rows.
        a = self.attention_coefficient(batch)
        b = self._b_idx
        c = self._elem_s_per_row
        best_t = -1.0
        best = 0
        best_lin = 0.0
        memo = self._linear_memo
        for lane, lane_rows in enumerate(rows):
            lin = memo.get(lane_rows) if lane_rows else 0.0
            if lin is None:
                lin = self.linear_time(lane_rows)
            t = a * attn_keys[lane] + b * idx_keys[lane] + c * lane_rows + lin
            if t > best_t:
                best_t = t
                best = lane
                best_lin = lin
        busiest_rows = rows[best]
        instance_tokens = tokens * self._dp
        experts = self.moe_expert_time(instance_tokens) if instance_tokens > 0 else 0.0
        compute = best_t + experts
        comm = self._comm_per_rank_row * busiest_rows + self._comm_per_token * instance_tokens
        if self._tbo and comm > 0.0:
            core = compute / (1.0 - self._sm_frac)
            if comm > core:
                core = comm
        else:
            core = compute + comm
        gather = self._gather_per_token * context
        if self._prefetch:
            gather = max(0.0, gather - compute)
        exposed = self._load_per_token * loaded - core
        parts = {
            "linear": best_lin,
            "attention": a * attn_keys[best],
            "indexer": b * idx_keys[best],
            "elementwise": c * busiest_rows,
            "moe_experts": experts,
            "moe_comm_exposed": core - compute,
            "tp_comm": self._tp_per_rank_row * busiest_rows,
            "cp_kv_gather": gather,
            "loadback_exposed": exposed if exposed > 0.0 else 0.0,
            "per_request": self.per_request_s * n_req,
            "per_forward": self.per_forward_s,
        }
        parts["total"] = sum(parts.values())
        return parts

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        return self.breakdown(batch)["total"]

    def provenance(self) -> dict[str, str]:
        """Where each breakdown term comes from: this roofline, for every term."""
        note = f"roofline (small GEMMs: {self.small_gemm})"
        terms = {k: note for k in BREAKDOWN_KEYS if k != "total"}
        for key in ("per_request", "per_forward"):
            terms[key] = "roofline (fixed cost, assumption)"
        return terms

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        """One decode step: ``max(memory, compute) + per_forward_s``.

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
        terms = self._decode_terms.get(batch_size)
        if terms is None:
            terms = self._decode_terms[batch_size] = self._decode_batch_terms(batch_size)
        weights, compute = terms
        memory = (weights + kv) / (self.num_gpus * self._mem_bw)
        return max(memory, compute) + self.per_forward_s

    def _decode_batch_terms(self, batch_size: int) -> tuple[float, float]:
        """The parts of :meth:`decode_step_time` that depend on the batch size alone: the
        weight bytes the step reads and its compute time (kept per batch size: a decode
        run asks for the same few sizes millions of times)."""
        m = self.model
        if m.num_experts:
            frac = 1.0 - (1.0 - m.experts_per_token / m.num_experts) ** batch_size
            routed = m.expert_params * m.num_experts * m.moe_layers
            weights = (m.total_params - routed + routed * frac) * m.weight_bytes_per_param
        else:
            weights = m.total_params * m.weight_bytes_per_param
        compute = (2.0 * m.active_params * batch_size) / (
            self.num_gpus * self._gemm_peak * self.gemm_efficiency(batch_size)
        )
        return weights, compute

    def kv_transfer_time(self, tokens: int) -> float:
        """``tokens × kv_bytes_per_token / kv_transfer_bandwidth`` (no fixed latency)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        return tokens * self.kv_bytes_per_token / self.kv_transfer_bandwidth

    def __repr__(self) -> str:
        return (
            f"RooflineCostModel(model={self.model.name!r}, gpu={self.gpu.name!r}, "
            f"layout={self.layout!r}, gemm_dtype={self.gemm_dtype!r}, "
            f"eff_gemm={self.eff_gemm}, eff_attn={self.eff_attn})"
        )


def default_cost_model(
    model_name: str,
    gpu_name: str,
    num_gpus: int = 8,
    kv_bytes_per_token: int | None = None,
    h2d_gbps: float = DEFAULT_H2D_BANDWIDTH / 1e9,
    kv_transfer_gbps: float = DEFAULT_KV_TRANSFER_BANDWIDTH / 1e9,
    *,
    cp_size: int = 1,
    ep_size: int = 1,
    page_size: int = 64,
    two_batch_overlap: bool = False,
    shared_kv: bool = True,
) -> RooflineCostModel:
    """:class:`RooflineCostModel` for preset names and a layout.

    ``h2d_gbps`` and ``kv_transfer_gbps`` are in GB/s (1e9 *bytes*/s, not Gbit/s).
    ``kv_bytes_per_token`` defaults to the model's bf16 KV size.
    """
    layout = ParallelLayout(
        num_gpus,
        cp_size=cp_size,
        ep_size=ep_size,
        two_batch_overlap=two_batch_overlap,
        shared_kv=shared_kv,
    )
    return RooflineCostModel(
        get_model(model_name),
        get_gpu(gpu_name),
        num_gpus,
        layout=layout,
        page_size=page_size,
        kv_bytes_per_token=kv_bytes_per_token,
        h2d_bandwidth=h2d_gbps * 1e9,
        kv_transfer_bandwidth=kv_transfer_gbps * 1e9,
    )


def cost_model_record(cost: CostModel) -> dict[str, object]:
    """What timed a run's forwards, for ``summary.json`` (``deployment.cost_model``) and the
    deployment panel: the model's ``name``, its ``small_gemm`` assumption where it has one,
    and per breakdown term where the number came from (``provenance()``: measured table,
    derived table or roofline); a model without ``provenance`` (a fitted preset) gives
    its class name and no terms."""
    prov = getattr(cost, "provenance", None)
    record: dict[str, object] = {
        "name": str(getattr(cost, "name", type(cost).__name__)),
        "terms": dict(prov()) if callable(prov) else {},
    }
    small = getattr(cost, "small_gemm", None)
    if isinstance(small, str):
        record["small_gemm"] = small
    return record


def roofline_for_config(cfg: SimSettings, num_gpus: int) -> RooflineCostModel:
    """The roofline cost model of the deployment ``cfg`` describes on ``num_gpus`` GPUs.

    CP runs over ``cfg.cp_size`` ranks (shared-KV when the scheduler's
    ``enable_cp_shared_kv``), the routed experts over ``cfg.ep_size``, attention TP over
    the rest; the page size, KV bytes, bandwidths, two-batch overlap and the small-GEMM
    assumption come from ``cfg``. Raises ``KeyError`` for an unknown GPU name.
    """
    layout = ParallelLayout(
        num_gpus,
        cp_size=cfg.cp_size,
        ep_size=cfg.ep_size if cfg.ep_size == num_gpus else 1,
        two_batch_overlap=cfg.enable_two_batch_overlap,
        shared_kv=cfg.scheduler.enable_cp_shared_kv,
    )
    return RooflineCostModel(
        cfg.model,
        cfg.gpu_spec(),
        num_gpus,
        layout=layout,
        page_size=cfg.page_size,
        kv_bytes_per_token=cfg.resolved_kv_bytes_per_token,
        h2d_bandwidth=cfg.h2d_bandwidth_gbps * 1e9,
        kv_transfer_bandwidth=cfg.kv_transfer_bandwidth_gbps * 1e9,
        small_gemm=cfg.small_gemm,
    )


def cost_model_for_config(cfg: SimSettings, num_gpus: int) -> CostModel:
    """The cost model ``cfg.cost_model`` names for the deployment ``cfg`` describes:
    :func:`roofline_for_config`, or (``aic``) AIConfigurator's measured tables over it
    (:mod:`prefillkit.sim.aic_cost`, imported only here). Raises ``KeyError`` for an
    unknown GPU name, :class:`~prefillkit.sched.config.ConfigError` (one line naming the
    extra) when the ``aic`` extra is missing."""
    roofline = roofline_for_config(cfg, num_gpus)
    if cfg.cost_model != "aic":
        return roofline
    from prefillkit.sim.aic_cost import AicCostModel, AicUnavailableError

    try:
        return AicCostModel(roofline)
    except AicUnavailableError as exc:
        raise ConfigError(str(exc)) from None
