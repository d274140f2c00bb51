"""GPU presets for the roofline cost model.

All figures are per GPU, *dense* (no 2:4 structured-sparsity doubling), in base SI
units: FLOP/s, bytes/s and bytes (``1 GB = 1e9 bytes``, as the vendors quote them).
A GPU without FP8 tensor cores (A100) reports its bf16 peak as ``peak_flops_fp8``: an
FP8 checkpoint runs there as weight-only FP8 with bf16 math.
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    peak_flops_bf16: float  # dense bf16 tensor-core FLOP/s
    peak_flops_fp8: float  # dense fp8 tensor-core FLOP/s (bf16 peak where no fp8)
    hbm_bandwidth: float  # bytes/s
    memory_bytes: float  # HBM capacity, bytes

    def __post_init__(self) -> None:
        for field_name in ("peak_flops_bf16", "peak_flops_fp8", "hbm_bandwidth", "memory_bytes"):
            value = getattr(self, field_name)
            if not value > 0:
                raise ValueError(f"GpuSpec {self.name!r}: {field_name} must be > 0, got {value}")


GPUS: dict[str, GpuSpec] = {
    # NVIDIA H200 SXM datasheet: 989 TFLOPS bf16 / 1,979 TFLOPS fp8 (dense; the
    # datasheet's 1,979 / 3,958 figures are with sparsity), 4.8 TB/s HBM3e, 141 GB.
    "h200": GpuSpec(
        name="H200",
        peak_flops_bf16=989 * TERA,
        peak_flops_fp8=1979 * TERA,
        hbm_bandwidth=4.8e12,
        memory_bytes=141 * GIGA,
    ),
    # NVIDIA H100 SXM5 datasheet: 989 TFLOPS bf16 / 1,979 TFLOPS fp8 dense,
    # 3.35 TB/s HBM3, 80 GB.
    "h100": GpuSpec(
        name="H100 SXM",
        peak_flops_bf16=989 * TERA,
        peak_flops_fp8=1979 * TERA,
        hbm_bandwidth=3.35e12,
        memory_bytes=80 * GIGA,
    ),
    # NVIDIA H800 SXM (China export variant of H100 SXM): same SMs/clocks, hence the
    # same tensor-core peaks; NVLink cut to 400 GB/s (not modelled); 3.35 TB/s, 80 GB.
    # DeepSeek's inference-system overview (2025-02-28) runs on these.
    "h800": GpuSpec(
        name="H800",
        peak_flops_bf16=989 * TERA,
        peak_flops_fp8=1979 * TERA,
        hbm_bandwidth=3.35e12,
        memory_bytes=80 * GIGA,
    ),
    # NVIDIA H20 (China export Hopper) product brief: 148 TFLOPS bf16 / 296 TFLOPS fp8
    # dense, 4.0 TB/s HBM3, 96 GB.
    "h20": GpuSpec(
        name="H20",
        peak_flops_bf16=148 * TERA,
        peak_flops_fp8=296 * TERA,
        hbm_bandwidth=4.0e12,
        memory_bytes=96 * GIGA,
    ),
    # NVIDIA A100 SXM4 80GB datasheet: 312 TFLOPS bf16 dense, no FP8 tensor cores
    # (fp8 peak := bf16 peak), 2.0 TB/s HBM2e (2,039 GB/s), 80 GB.
    "a100": GpuSpec(
        name="A100 SXM 80GB",
        peak_flops_bf16=312 * TERA,
        peak_flops_fp8=312 * TERA,
        hbm_bandwidth=2.0e12,
        memory_bytes=80 * GIGA,
    ),
}

# Alternative spellings accepted by get_gpu (all map onto a GPUS key).
_ALIASES: dict[str, str] = {
    "h200-sxm": "h200",
    "h100-sxm": "h100",
    "h100-sxm5": "h100",
    "h800-sxm": "h800",
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
