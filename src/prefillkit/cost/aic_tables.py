"""Where AIConfigurator's measured kernel tables are and how prefillkit reaches them.

``aiconfigurator-core`` (NVIDIA AIConfigurator, Apache-2.0; the ``aic`` extra) is
imported here only, lazily: :func:`import_aic` raises :class:`AicUnavailableError` (one
line naming the extra) without it. :data:`GPU_SYSTEMS` maps prefillkit's GPU presets onto
AIC's systems (H20 and H800 have no tables: they are derived from H200's and H100's,
:mod:`prefillkit.cost.aic`); :func:`gemm_shapes` is the roofline's token-local GEMM
list as AIC ops are built from it.
"""

from __future__ import annotations

import importlib
from typing import Any

from prefillkit.cost.gpus import GPUS, get_gpu
from prefillkit.models import ModelSpec, token_local_gemms

__all__ = [
    "AIC_PACKAGE",
    "BACKENDS",
    "DSA_ARCHITECTURES",
    "DSA_BLOCK_GEMMS",
    "GPU_SYSTEMS",
    "INSTALL_HINT",
    "MOE_DISTRIBUTIONS",
    "AicUnavailableError",
    "Family",
    "aic_system_for_gpu",
    "gemm_shapes",
    "import_aic",
    "load_database",
]

AIC_PACKAGE = "aiconfigurator_core"
INSTALL_HINT = "--cost-model aic needs the aic extra: pip install 'prefillkit[aic]'"
BACKENDS: tuple[str, ...] = ("sglang", "trtllm", "vllm")
#: Routed-token distribution of the MoE tables per ``moe_balance``: AIC's default skewed
#: routing (``power_law_1.01``) unless the experts are balanced perfectly.
MOE_DISTRIBUTIONS: dict[str, str] = {
    "default": "power_law_1.01",
    "eplb": "power_law_1.01",
    "perfect": "balanced",
}
#: prefillkit GPU preset -> (AIC system whose tables are read, preset of the source GPU
#: whose peaks the times are rescaled from, or None for the GPU's own tables).
GPU_SYSTEMS: dict[str, tuple[str, str | None]] = {
    "h100": ("h100_sxm", None),
    "h200": ("h200_sxm", None),
    "b200": ("b200_sxm", None),
    "gb200": ("gb200", None),
    "gb300": ("gb300", None),
    "a100": ("a100_sxm", None),
    "h20": ("h200_sxm", "h200"),
    "h20-141g": ("h200_sxm", "h200"),
    "h800": ("h100_sxm", "h100"),
}


class AicUnavailableError(RuntimeError):
    """``aiconfigurator-core`` is not installed (one-line message)."""


def import_aic() -> dict[str, Any]:
    try:
        ops = importlib.import_module(f"{AIC_PACKAGE}.sdk.operations")
        common = importlib.import_module(f"{AIC_PACKAGE}.sdk.common")
        engine = importlib.import_module(f"{AIC_PACKAGE}.sdk.engine")
        pdb = importlib.import_module(f"{AIC_PACKAGE}.sdk.perf_database")
    except ImportError as exc:
        raise AicUnavailableError(INSTALL_HINT) from exc
    return {"ops": ops, "common": common, "engine": engine, "pdb": pdb}


def aic_system_for_gpu(gpu_name: str) -> tuple[str, str | None]:
    """``(AIC system read, source preset rescaled from or None)`` for a GPU preset or
    :attr:`GpuSpec.name`; ``KeyError`` for a GPU without AIC tables or a Hopper source."""
    spec = get_gpu(gpu_name)
    for key, (system, source) in GPU_SYSTEMS.items():
        if GPUS[key] == spec:
            return system, source
    raise KeyError(f"no AIC tables for GPU {gpu_name!r}")


def load_database(aic: dict[str, Any], system: str, backend: str, version: str | None) -> Any:
    if backend not in BACKENDS:
        raise ValueError(f"unknown --aic-backend {backend!r}; known: {', '.join(BACKENDS)}")
    try:
        db = aic["pdb"].get_database(system, backend, version or "current")
    except ValueError as exc:
        raise ValueError(
            f"--aic-version {version!r} is not in AIC's {backend} data for {system}"
        ) from exc
    if db is None:
        raise ValueError(f"AIC has no {backend} {version or 'current'} tables for {system}")
    return db


#: GEMMs AIC times in bf16 whatever the checkpoint (SGLang keeps them unquantised).
_BF16_GEMMS: frozenset[str] = frozenset({"router_gate", "indexer_weights"})


def gemm_shapes(model: ModelSpec, tp: int) -> list[tuple[str, int, int, int, bool]]:
    """Token-local GEMMs of one forward on one attention rank, ``(name, layers, n, k,
    fp8-capable)``: :func:`~prefillkit.models.token_local_gemms` (the roofline's list)
    with its attention-TP split applied; the router and the indexer's head weights are
    bf16 whatever the checkpoint."""
    out: list[tuple[str, int, int, int, bool]] = []
    for g in token_local_gemms(model):
        n = max(g.n // tp, 1) if g.split == "col" else g.n
        k = max(g.k // tp, 1) if g.split == "row" else g.k
        out.append((g.name, g.layers, n, k, g.name not in _BF16_GEMMS))
    return out


#: prefillkit presets whose DSA block AIC has tables for (its ``DSA_MODEL_DIMS``).
DSA_ARCHITECTURES: dict[str, str] = {
    "glm-5": "GlmMoeDsaForCausalLM",
    "deepseek-v3.2": "DeepseekV32ForCausalLM",
}
#: The token-local GEMMs inside AIC's DSA block (its ``ContextDSAModule`` docstring:
#: kv_a (with the indexer's K), q_b, the indexer's wq_b and weights, the absorption BMMs
#: in place of kv_b, o_proj); q_a is fused with kv_a in prefillkit's list.
DSA_BLOCK_GEMMS: frozenset[str] = frozenset(
    {
        "fused_qkv_a_proj",
        "q_proj",
        "kv_a_proj",
        "q_b_proj",
        "kv_b_proj",
        "o_proj",
        "indexer_wq_b",
        "indexer_wk",
        "indexer_weights",
    }
)


class Family:
    """One op list evaluated as a term: the ops' JSON and each op's scaling kind."""

    def __init__(self, engine: Any, ops: list[Any], kinds: list[str], table: str) -> None:
        self.json = engine.build_ops_json(ops)
        self.kinds = kinds
        self.table = table
