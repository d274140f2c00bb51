"""SGLang 0.5.23's defaults under a launch line: where they differ from the library's.

:data:`SGLANG_DEFAULTS` holds SGLang's launch default where it differs from a
:class:`~prefillkit.app.settings.Config` default; :func:`sglang_gpu_defaults` derives the
GPU-dependent ones SGLang computes for a line that does not set them: the chunk size
(:func:`sglang_chunk_default`) and ``--mem-fraction-static``
(:func:`~prefillkit.app.sglang_memory.sglang_mem_fraction_default`).
:mod:`prefillkit.app.launch` lays them under the line when no preset is the base.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from prefillkit.app.settings import Config, ConfigError, resolve_model
from prefillkit.app.sglang_memory import SGLANG_MAX_PREFILL_TOKENS, sglang_mem_fraction_default
from prefillkit.cost.gpus import get_gpu

__all__ = [
    "SGLANG_CHUNK_BY_GPU_MIB",
    "SGLANG_DEFAULTS",
    "sglang_chunk_default",
    "sglang_gpu_defaults",
]

#: Where SGLang 0.5.23's launch default differs from a :class:`Config` default (the
#: library default, kept for scripts): SGLang serves colocated (``--disaggregation-mode
#: null``). Everything else the line does not say is the Config default, which is
#: SGLang's (TP/CP 1, HiCache off, fcfs, page 1, ...) or a documented prefillkit
#: deviation (docs/deviations.md, "Deviations from upstream SGLang").
SGLANG_DEFAULTS: dict[str, object] = {"mode": "colocated"}

#: SGLang 0.5.23's ``--chunked-prefill-size`` when the line does not give one, by the
#: GPU's memory in MiB (``arg_groups/memory_hook.py``, ``_handle_gpu_memory_settings``):
#: (upper bound exclusive, chunk); 16,384 from 160 GiB up (B200, GB200, MI300).
SGLANG_CHUNK_BY_GPU_MIB: tuple[tuple[float, int], ...] = (
    (20 * 1024, 2048),
    (35 * 1024, 4096),
    (60 * 1024, 4096),
    (90 * 1024, 8192),
    (160 * 1024, 8192),
    (float("inf"), 16384),
)


def sglang_chunk_default(gpu_memory_bytes: float) -> int:
    """SGLang's default chunk for a GPU of ``gpu_memory_bytes`` (its capacity in MiB, as
    ``get_device_memory_capacity`` reports it: H200's 141 GB is 134,467 MiB -> 8,192;
    B200's 180 GB is 171,661 MiB -> 16,384)."""
    mib = gpu_memory_bytes / 2**20
    for bound, chunk in SGLANG_CHUNK_BY_GPU_MIB:
        if mib < bound:
            return chunk
    return SGLANG_CHUNK_BY_GPU_MIB[-1][1]  # an infinite size: the run's own check names it


_CONFIG_DEFAULTS: dict[str, object] = {f.name: f.default for f in dataclasses.fields(Config)}


def _line_memory_bytes(given: Mapping[str, object]) -> float | None:
    """The memory of one of the line's GPUs in bytes: ``--device-memory-gb`` (GB = 1e9
    bytes) if given, else the GPU preset's; None for an unknown GPU."""
    memory = given.get("device_memory_gb")
    if isinstance(memory, (int, float)) and memory > 0:
        return float(memory) * 1e9
    try:
        return get_gpu(str(given.get("gpu", _CONFIG_DEFAULTS["gpu"]))).memory_bytes
    except KeyError:
        return None


def _given(given: Mapping[str, object], name: str) -> object:
    """The line's (or file's) value of ``name``, else the Config default."""
    return given.get(name, _CONFIG_DEFAULTS[name])


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _sglang_fraction(
    given: Mapping[str, object], ignored: Sequence[str], memory: float, chunk: object
) -> float | None:
    """SGLang's default ``--mem-fraction-static`` for the line
    (:func:`~prefillkit.app.sglang_memory.sglang_mem_fraction_default`): its chunk, TP
    (PP 1: not modelled), model (MLA or not), mode and graph settings; None when the model
    does not resolve (the run's own check names it). ``--attn-cp-size > 1`` and two-batch
    overlap turn SGLang's prefill graph off, ``--disable-cuda-graph`` both graphs. DeepEP's
    reserve is never added: ``--moe-a2a-backend`` is accepted and ignored, its value
    dropped (:mod:`~prefillkit.app.launch_flags`)."""
    try:
        model = resolve_model(
            str(_given(given, "model")).strip().lower(),
            _opt_str(given.get("model_path")),
            _opt_str(given.get("model_config")),
        )
    except (ConfigError, KeyError):
        return None
    no_graphs = "--disable-cuda-graph" in ignored
    cp = _optional_int(_given(given, "cp_size")) or 1
    return sglang_mem_fraction_default(
        memory,
        chunked_prefill_size=_optional_int(chunk),
        tp_size=_optional_int(_given(given, "tp_size")) or 1,
        mla=model.attention == "mla",
        pd_prefill=str(given.get("mode", SGLANG_DEFAULTS["mode"])).strip().lower() == "pd-prefill",
        decode_cuda_graph=not no_graphs,
        prefill_cuda_graph=not (no_graphs or cp > 1 or _given(given, "enable_two_batch_overlap")),
        max_running_requests=_optional_int(given.get("max_running_requests")),
        max_prefill_tokens=_optional_int(_given(given, "max_prefill_tokens"))
        or SGLANG_MAX_PREFILL_TOKENS,
        max_total_tokens=_optional_int(given.get("max_total_tokens")),
        model_path=_opt_str(given.get("model_path")) or "",
    )


def sglang_gpu_defaults(
    given: Mapping[str, object], ignored: Sequence[str] = ()
) -> dict[str, object]:
    """The defaults SGLang derives from the GPU for a line that does not set them, with
    the line's GPU (``--device-memory-gb`` if given, else the preset's memory): the chunk
    size (:func:`sglang_chunk_default`) and ``--mem-fraction-static``
    (:func:`_sglang_fraction`, from the line's chunk or that default). Nothing for an
    unknown GPU, no fraction for an infinite memory (``--device-memory-gb 1e300``): the
    run's own checks name them. ``ignored``: the SGLang flags accepted and ignored
    (``--disable-cuda-graph`` changes the fraction). Raises ``ConfigError`` naming
    ``--device-memory-gb`` when that memory is smaller than SGLang's reserve (SGLang's
    fraction would be <= 0)."""
    memory = _line_memory_bytes(given)
    if memory is None:
        return {}
    out: dict[str, object] = {}
    if "chunked_prefill_size" not in given:
        out["chunked_prefill_size"] = sglang_chunk_default(memory)
    chunk = given.get("chunked_prefill_size", out.get("chunked_prefill_size"))
    if "mem_fraction_static" not in given and math.isfinite(memory):
        fraction = _sglang_fraction(given, ignored, memory, chunk)
        if fraction is not None and fraction <= 0:
            raise ConfigError(
                f"--device-memory-gb: {memory / 1e9:g} GB ({memory / 2**20:,.0f} MiB) leaves "
                "nothing after the activation and CUDA-graph memory SGLang reserves for this "
                f"line (its default --mem-fraction-static would be {fraction:g}); give "
                "--mem-fraction-static"
            )
        if fraction is not None:
            out["mem_fraction_static"] = fraction
    return out
