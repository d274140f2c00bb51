"""The roofline's stated assumptions: achieved fractions of peak, one set per GPU family,
chosen once from kernel measurements and never fitted to a throughput figure
(``benchmarks/RESULTS.md``: the roofline against published figures and against
AIConfigurator's measured kernels), and the elementwise HBM traffic per token."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prefillkit.models import ModelSpec

__all__ = [
    "FAMILY_EFFICIENCIES",
    "HOPPER",
    "Efficiencies",
    "activation_bytes_per_token_layer",
    "check_fraction",
    "check_positive",
]


def check_fraction(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


def check_positive(name: str, value: float) -> None:
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
            check_fraction(name, getattr(self, name))
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


def activation_bytes_per_token_layer(model: ModelSpec, attn_tp: int = 1) -> float:
    """Elementwise HBM traffic of one token row through one layer on one rank, in bytes
    (assumption).

    bf16 (2 bytes) reads and writes of: ten hidden-width vectors (two RMSNorms, two
    residual adds, the FP8 quantisation of the GEMM inputs), the attention's q, k and v
    (``heads × (2 d_qk + d_v)``) and, per FFN, six intermediate-width vectors (gate and
    up written and read, the activation written and read) for each expert the token
    visits (``k + shared`` for MoE models, the dense width otherwise). MoE models add the
    token permutation into the grouped-GEMM contiguous layout and back (DeepGEMM's
    contiguous layout, as SGLang's EP path uses): per routed copy the fp8 input written
    and read and the bf16 output written and read, ``k × hidden × 6`` bytes. Under
    attention TP ``attn_tp`` every rank holds every token row but only its share of the
    heads and of the FFN work: the hidden-width vectors are per rank, the rest ``/ attn_tp``.
    """
    ffn = (
        (model.experts_per_token + model.num_shared_experts) * model.moe_intermediate_size
        if model.num_experts > 0
        else model.intermediate_size
    )
    heads = model.num_heads * (2 * model.head_dim_qk + model.head_dim_v)
    permute = 6.0 * model.experts_per_token * model.hidden_size if model.num_experts else 0.0
    return 2.0 * (10 * model.hidden_size + (heads + 6 * ffn) / attn_tp) + permute / attn_tp
