"""GPU and interconnect presets for the forward-time cost model.

All figures are per GPU, *dense* (no 2:4 structured-sparsity doubling), in base SI
units: FLOP/s, bytes/s and bytes (``1 GB = 1e9 bytes``, as the vendors quote them).

- ``nvlink_bandwidth`` is the scale-up bandwidth **per direction** (NVIDIA quotes the
  bidirectional sum: "900 GB/s" NVLink 4 is 450 GB/s each way).
- ``nvlink_domain`` is how many GPUs share that NVLink fabric (8 in an HGX board, 72 in
  a GB200 NVL72 rack); traffic between domains goes over the scale-out network.
- ``net_bandwidth`` is the scale-out NIC per GPU (one 400 Gb/s ConnectX-7 per GPU in
  DGX/HGX H100-class systems = 50 GB/s).
- ``num_sms``: streaming multiprocessors; communication kernels that occupy SMs (DeepEP,
  NCCL) slow the compute they overlap by the fraction of SMs they take.
- ``family`` selects the achieved-efficiency set in :mod:`prefillkit.cost.roofline`
  (one set per GPU family, never per preset).

A GPU without FP8 tensor cores (A100) reports its bf16 peak as ``peak_flops_fp8``: an
FP8 checkpoint runs there as weight-only FP8 with bf16 math.
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9

FAMILIES: tuple[str, ...] = ("ampere", "hopper", "blackwell")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    peak_flops_bf16: float  # dense bf16 tensor-core FLOP/s
    peak_flops_fp8: float  # dense fp8 tensor-core FLOP/s (bf16 peak where no fp8)
    hbm_bandwidth: float  # bytes/s
    memory_bytes: float  # HBM capacity, bytes
    nvlink_bandwidth: float  # scale-up bytes/s per direction
    net_bandwidth: float  # scale-out NIC bytes/s per GPU
    num_sms: int
    family: str
    nvlink_domain: int = 8

    def __post_init__(self) -> None:
        for field_name in (
            "peak_flops_bf16",
            "peak_flops_fp8",
            "hbm_bandwidth",
            "memory_bytes",
            "nvlink_bandwidth",
            "net_bandwidth",
            "num_sms",
            "nvlink_domain",
        ):
            value = getattr(self, field_name)
            if not value > 0:
                raise ValueError(f"GpuSpec {self.name!r}: {field_name} must be > 0, got {value}")
        if self.family not in FAMILIES:
            raise ValueError(f"GpuSpec {self.name!r}: unknown family {self.family!r}")


# ConnectX-7 NDR InfiniBand / RoCE, 400 Gb/s per GPU (NVIDIA DGX H100 user guide: eight
# single-port ConnectX-7 for the compute fabric).
_CX7 = 400e9 / 8

GPUS: dict[str, GpuSpec] = {
    # NVIDIA H200 SXM datasheet: 989 TFLOPS bf16 / 1,979 TFLOPS fp8 (dense; the
    # datasheet's 1,979 / 3,958 figures are with sparsity), 4.8 TB/s HBM3e, 141 GB,
    # NVLink 900 GB/s (bidirectional), 132 SMs (same GH100 die as H100 SXM).
    "h200": GpuSpec(
        name="H200",
        peak_flops_bf16=989 * TERA,
        peak_flops_fp8=1979 * TERA,
        hbm_bandwidth=4.8e12,
        memory_bytes=141 * GIGA,
        nvlink_bandwidth=450 * GIGA,
        net_bandwidth=_CX7,
        num_sms=132,
        family="hopper",
    ),
    # NVIDIA H100 SXM5 datasheet: 989 TFLOPS bf16 / 1,979 TFLOPS fp8 dense,
    # 3.35 TB/s HBM3, 80 GB, NVLink 900 GB/s, 132 SMs.
    "h100": GpuSpec(
        name="H100 SXM",
        peak_flops_bf16=989 * TERA,
        peak_flops_fp8=1979 * TERA,
        hbm_bandwidth=3.35e12,
        memory_bytes=80 * GIGA,
        nvlink_bandwidth=450 * GIGA,
        net_bandwidth=_CX7,
        num_sms=132,
        family="hopper",
    ),
    # NVIDIA H800 SXM (China export variant of H100 SXM): same SMs/clocks, hence the
    # same tensor-core peaks and 3.35 TB/s / 80 GB; NVLink cut to 400 GB/s bidirectional
    # (DeepSeek-V3 technical report, section 3.2.2: "NVLink ... 160 GB/s" achieved, IB
    # 50 GB/s per GPU). DeepSeek's inference system runs on these.
    "h800": GpuSpec(
        name="H800",
        peak_flops_bf16=989 * TERA,
        peak_flops_fp8=1979 * TERA,
        hbm_bandwidth=3.35e12,
        memory_bytes=80 * GIGA,
        nvlink_bandwidth=200 * GIGA,
        net_bandwidth=_CX7,
        num_sms=132,
        family="hopper",
    ),
    # NVIDIA H20 (China export Hopper) product brief: 148 TFLOPS bf16 / 296 TFLOPS fp8
    # dense, 4.0 TB/s HBM3, 96 GB, NVLink 900 GB/s, 78 SMs.
    "h20": GpuSpec(
        name="H20",
        peak_flops_bf16=148 * TERA,
        peak_flops_fp8=296 * TERA,
        hbm_bandwidth=4.0e12,
        memory_bytes=96 * GIGA,
        nvlink_bandwidth=450 * GIGA,
        net_bandwidth=_CX7,
        num_sms=78,
        family="hopper",
    ),
    # H20 with 141 GB HBM3e (the 2024 refresh of the H20, same compute; vendor listings
    # give 4.8 TB/s). The only H20 on which GLM-5's 744 GB FP8 weights fit in one node
    # with room for KV (8 x 96 GB = 768 GB does not).
    "h20-141g": GpuSpec(
        name="H20 141GB",
        peak_flops_bf16=148 * TERA,
        peak_flops_fp8=296 * TERA,
        hbm_bandwidth=4.8e12,
        memory_bytes=141 * GIGA,
        nvlink_bandwidth=450 * GIGA,
        net_bandwidth=_CX7,
        num_sms=78,
        family="hopper",
    ),
    # NVIDIA HGX B200 datasheet (per GPU): 2.25 PFLOPS bf16 / 4.5 PFLOPS fp8 dense,
    # 8 TB/s HBM3e, 180 GB, NVLink 5 1.8 TB/s bidirectional, 148 SMs.
    "b200": GpuSpec(
        name="B200",
        peak_flops_bf16=2250 * TERA,
        peak_flops_fp8=4500 * TERA,
        hbm_bandwidth=8.0e12,
        memory_bytes=180 * GIGA,
        nvlink_bandwidth=900 * GIGA,
        net_bandwidth=_CX7,
        num_sms=148,
        family="blackwell",
    ),
    # NVIDIA GB200 NVL72 datasheet (per GPU: 180 PFLOPS fp8 dense / 72 = 2.5 PF bf16,
    # 5 PF fp8), 186 GB HBM3e at 8 TB/s, 72 GPUs on one NVLink 5 domain (1.8 TB/s
    # bidirectional per GPU), 148 SMs.
    "gb200": GpuSpec(
        name="GB200",
        peak_flops_bf16=2500 * TERA,
        peak_flops_fp8=5000 * TERA,
        hbm_bandwidth=8.0e12,
        memory_bytes=186 * GIGA,
        nvlink_bandwidth=900 * GIGA,
        net_bandwidth=_CX7,
        num_sms=148,
        family="blackwell",
        nvlink_domain=72,
    ),
    # NVIDIA GB300 NVL72 (Blackwell Ultra; "Inside NVIDIA Blackwell Ultra", NVIDIA
    # developer blog 2025-08, and the GB300 NVL72 datasheet): per GPU 2.5 PF bf16 / 5 PF
    # fp8 dense (15 PF dense NVFP4, not modelled), 288 GB HBM3e at 8 TB/s, NVLink 5 1.8 TB/s
    # bidirectional in a 72-GPU domain, ConnectX-8 800 Gb/s per GPU, 160 SMs (the full
    # chip; the count enabled on shipping parts is not published: assumption).
    "gb300": GpuSpec(
        name="GB300",
        peak_flops_bf16=2500 * TERA,
        peak_flops_fp8=5000 * TERA,
        hbm_bandwidth=8.0e12,
        memory_bytes=288 * GIGA,
        nvlink_bandwidth=900 * GIGA,
        net_bandwidth=800e9 / 8,
        num_sms=160,
        family="blackwell",
        nvlink_domain=72,
    ),
    # NVIDIA A100 SXM4 80GB datasheet: 312 TFLOPS bf16 dense, no FP8 tensor cores
    # (fp8 peak := bf16 peak), 2.0 TB/s HBM2e (2,039 GB/s), 80 GB, NVLink 3 600 GB/s
    # bidirectional, 108 SMs; DGX A100 has one 200 Gb/s HDR NIC per GPU.
    "a100": GpuSpec(
        name="A100 SXM 80GB",
        peak_flops_bf16=312 * TERA,
        peak_flops_fp8=312 * TERA,
        hbm_bandwidth=2.0e12,
        memory_bytes=80 * GIGA,
        nvlink_bandwidth=300 * GIGA,
        net_bandwidth=200e9 / 8,
        num_sms=108,
        family="ampere",
    ),
}

# Alternative spellings accepted by get_gpu (all map onto a GPUS key).
_ALIASES: dict[str, str] = {
    "h200-sxm": "h200",
    "h100-sxm": "h100",
    "h100-sxm5": "h100",
    "h800-sxm": "h800",
    "h20-141gb": "h20-141g",
    "b200-sxm": "b200",
    "gb200-nvl72": "gb200",
    "gb300-nvl72": "gb300",
    "a100-sxm": "a100",
    "a100-80gb": "a100",
    "a100-sxm-80gb": "a100",
}


def get_gpu(name: str) -> GpuSpec:
    """Look up a GPU preset by name (case-insensitive; ``_``/spaces read as ``-``)."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in GPUS:
        raise KeyError(f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}")
    return GPUS[key]
