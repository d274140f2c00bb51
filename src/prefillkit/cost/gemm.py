"""GEMM time on one GPU: tile padding, wave quantisation and the memory roofline.

A prefill forward's token-local GEMMs and routed-expert GEMMs run with few rows when a
batch is small (one 1,024-token turn split over 8 CP ranks is 128 rows per rank), so how
a GPU loses efficiency on small GEMMs decides the bs = 1 vs bs > 1 verdict. Three
assumptions are offered (``--small-gemm``), so a reader can see whether a verdict rests
on this one choice:

- ``tiles`` (default): the kernel's own losses. A GEMM ``(m, k) x (k, n)`` runs as
  ``ceil(m / BM) × ceil(n / BN)`` output tiles over the GPU's SMs in
  ``ceil(tiles / num_sms)`` waves; each wave costs one tile's ``2 × BM × BN × k`` FLOPs
  at ``eff`` of one SM's share of the peak. Rows are padded to the tile
  (``BM = 64`` for ``m <= 64``, else 128; ``BN = 128``: *assumption*, the block shapes
  DeepGEMM and CUTLASS's Hopper FP8 kernels use for these widths, DeepGEMM README
  2025-02). The time is at least the memory roofline: activations in, weights in, bf16
  out over ``hbm × eff_mem``. On a GPU with a low ridge point (H20: 296 TFLOPS fp8 over
  4 TB/s = 74 FLOP/B) a 128-row GEMM is already compute-bound; on H100 (590 FLOP/B) it
  is memory-bound.
- ``sqrt-h100``: the curve prefillkit 0.2 applied to every GPU,
  ``eff × clamp(sqrt(m / 512), 0.05, 1)``, fitted on H100 small-GEMM behaviour, with the
  layer's weights read at least once.
- ``ideal``: no small-GEMM loss: ``max(2 m n k / (peak × eff), memory roofline)``.

NOTE: ``eff`` is the family's large-GEMM efficiency, itself measured on large shapes
that include some wave quantisation; the ``tiles`` model charges waves again, which
over-counts by at most a few per cent at large ``m`` (*assumption*, stated here).

Routed experts (:meth:`GemmTimer.grouped_expert_time`): DeepGEMM's contiguous grouped
layout pads each expert's rows to the tile (``BM`` = 128), so an expert that receives
``X`` rows costs ``ceil(X / BM)`` row tiles. With ``λ = T × k / E`` pairs per expert on
average and Poisson arrivals, ``E[ceil(X / BM)]`` is taken as ``(1 - e^-λ) + max(0,
λ / BM - 0.5)`` (exact to ~2 % for the Poisson at ``λ ≥ BM / 2``; *approximation*).
"""

from __future__ import annotations

import math

from prefillkit.cost.gpus import GpuSpec
from prefillkit.models import Gemm

__all__ = ["SMALL_GEMM_MODELS", "GemmTimer", "expected_row_tiles"]

#: ``--small-gemm`` choices (module docstring).
SMALL_GEMM_MODELS: tuple[str, ...] = ("tiles", "sqrt-h100", "ideal")

TILE_N = 128
TILE_M_SMALL = 64
TILE_M = 128
SQRT_SATURATION_ROWS = 512
SQRT_FLOOR = 0.05


def _sqrt_ramp(m: float) -> float:
    """prefillkit 0.2's H100 small-GEMM curve: ``clamp(sqrt(m / 512), 0.05, 1)``."""
    return min(1.0, max(SQRT_FLOOR, math.sqrt(m / SQRT_SATURATION_ROWS)))


def expected_row_tiles(mean_rows: float, tile_m: int = TILE_M) -> float:
    """``E[ceil(X / tile_m)]`` for ``X`` ~ Poisson(``mean_rows``) (module docstring)."""
    if mean_rows <= 0.0:
        return 0.0
    return -math.expm1(-mean_rows) + max(0.0, mean_rows / tile_m - 0.5)


class GemmTimer:
    """Seconds of one GEMM on ``gpu`` under a small-GEMM assumption (module docstring).

    ``peak`` is the tensor-core peak of the GEMM's dtype, ``eff`` the family's large-GEMM
    efficiency, ``mem_bw`` the achieved HBM bandwidth, ``weight_bytes`` and ``act_bytes``
    the bytes per weight and per input activation element (outputs are bf16).
    """

    def __init__(
        self,
        gpu: GpuSpec,
        *,
        peak: float,
        eff: float,
        mem_bw: float,
        weight_bytes: float,
        act_bytes: float,
        small_gemm: str = "tiles",
    ) -> None:
        if small_gemm not in SMALL_GEMM_MODELS:
            raise ValueError(
                f"small_gemm must be one of {', '.join(SMALL_GEMM_MODELS)}, got {small_gemm!r}"
            )
        self.sms = gpu.num_sms
        self.peak = peak
        self.rate = peak * eff
        self.sm_rate = self.rate / gpu.num_sms
        self.mem_bw = mem_bw
        self.weight_bytes = weight_bytes
        self.act_bytes = act_bytes
        self.small_gemm = small_gemm

    def efficiency(self, m: float) -> float:
        """Achieved fraction of the peak for a GEMM over ``m`` rows before the memory
        roofline: ``tiles``: the rows' share of their padded tiles; ``sqrt-h100``: the
        ramp; ``ideal``: the large-GEMM efficiency."""
        if m <= 0:
            return 0.0
        eff = self.rate / self.peak
        if self.small_gemm == "tiles":
            tile_m = TILE_M_SMALL if m <= TILE_M_SMALL else TILE_M
            return eff * m / (math.ceil(m / tile_m) * tile_m)
        if self.small_gemm == "sqrt-h100":
            return eff * _sqrt_ramp(m)
        return eff

    def memory_time(self, m: float, n: int, k: int) -> float:
        """Activations in, weights in, bf16 out over the achieved HBM bandwidth."""
        return (m * k * self.act_bytes + n * k * self.weight_bytes + m * n * 2.0) / self.mem_bw

    def time(self, m: float, n: int, k: int) -> float:
        """Seconds for ``(m, k) x (k, n)``; 0 for no rows."""
        if m <= 0:
            return 0.0
        mem = self.memory_time(m, n, k)
        if self.small_gemm == "tiles":
            tile_m = TILE_M_SMALL if m <= TILE_M_SMALL else TILE_M
            tiles = math.ceil(m / tile_m) * math.ceil(n / TILE_N)
            waves = math.ceil(tiles / self.sms)
            compute = waves * 2.0 * tile_m * TILE_N * k / self.sm_rate
        elif self.small_gemm == "sqrt-h100":
            compute = 2.0 * m * n * k / (self.rate * _sqrt_ramp(m))
        else:
            compute = 2.0 * m * n * k / self.rate
        return max(compute, mem)

    def gemm_list_time(self, rows: float, gemms: tuple[Gemm, ...], tp: int) -> float:
        """Seconds for ``rows`` token rows through every GEMM of ``gemms`` on one rank of
        an attention-TP group of ``tp`` (``col``: ``n / tp``, ``row``: ``k / tp``)."""
        total = 0.0
        for g in gemms:
            n = -(-g.n // tp) if g.split == "col" else g.n
            k = -(-g.k // tp) if g.split == "row" else g.k
            total += g.layers * self.time(rows, n, k)
        return total

    def grouped_expert_time(
        self, experts: float, mean_rows: float, hidden: int, width: int, layers: int
    ) -> float:
        """One GPU's routed experts for ``layers`` MoE layers: ``experts`` local experts,
        ``mean_rows`` token rows each on average, gate/up (``hidden -> 2 × width``) then
        down (``width -> hidden``).

        ``tiles``: each expert's rows padded to ``BM`` (:func:`expected_row_tiles`) and the
        local experts' tiles spread over the SMs in waves; ``sqrt-h100``/``ideal``: the
        curve or no loss on ``mean_rows``. Never below reading the local experts' weights.
        """
        if experts <= 0 or mean_rows <= 0:
            return 0.0
        rows = experts * mean_rows
        weights = experts * 3.0 * hidden * width * self.weight_bytes
        acts = rows * (hidden * self.act_bytes * 2.0 + 2.0 * width * 2.0 + hidden * 2.0)
        memory = (weights + acts) / self.mem_bw
        flops_per_row = 2.0 * 3.0 * hidden * width
        if self.small_gemm == "tiles":
            row_tiles = experts * expected_row_tiles(mean_rows)
            compute = 0.0
            for n, k in ((2 * width, hidden), (hidden, width)):
                tiles = row_tiles * math.ceil(n / TILE_N)
                waves = math.ceil(tiles / self.sms - 1e-9)
                compute += waves * 2.0 * TILE_M * TILE_N * k / self.sm_rate
        elif self.small_gemm == "sqrt-h100":
            compute = flops_per_row * rows / (self.rate * _sqrt_ramp(mean_rows))
        else:
            compute = flops_per_row * rows / self.rate
        return layers * max(compute, memory)
