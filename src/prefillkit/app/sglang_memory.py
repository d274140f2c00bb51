"""SGLang 0.5.23's default ``--mem-fraction-static``, as its own arithmetic.

A launch line that does not set ``--mem-fraction-static`` gets the fraction SGLang derives
from the GPU's memory in ``sglang/srt/arg_groups/memory_hook.py``,
``handle_gpu_memory_settings`` (lines 281-343 of the 0.5.23 wheel), with the CUDA-graph
reserve of ``reserve_for_graph_mb`` (lines 357-399) and the DeepEP reserve of
``reserve_for_deepep_a2a_mb`` (lines 402-414)::

    reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8 * 1024 + graph reserve
    reserved = max(reserved, 10 * 1024)        if gpu_mem > 60 * 1024
    reserved += 2 * 1024                       with --moe-a2a-backend deepep
    mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)

Units: SGLang counts everything here in MiB (2**20 bytes). ``gpu_mem`` is
``get_device_memory_capacity`` (``sglang/srt/utils/common.py``): on CUDA the smallest
``nvidia-smi --query-gpu=memory.total`` value, which nvidia-smi reports in MiB.
prefillkit holds memory in bytes (``GpuSpec.memory_bytes``; ``--device-memory-gb`` is
``GB * 1e9`` bytes), so ``gpu_mem = bytes / 2**20`` here: the GPU preset's datasheet
capacity (H200: 141e9 bytes = 134,468.1 MiB), not a measured ``memory.total`` (an H200
board reports more, about 143,771 MiB).

Not modelled (prefillkit's settings cannot express them, or they do not apply to its
models): the post-capture KV sizing path (off unless ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``
is set; never for MLA), DP attention (refused by prefillkit), the decode role of a PD pair,
the multimodal reduction (``adjust_mem_fraction_for_vlm``), the XPU reserve, an explicit
``--cuda-graph-max-bs-decode`` / ``--cuda-graph-bs-*``, and AMD's aiter scaling
(``attention_hook.py``: x0.85 for contexts over 8,192 tokens).
"""

from __future__ import annotations

__all__ = [
    "sglang_decode_graph_max_bs",
    "sglang_mem_fraction_default",
    "sglang_prefill_graph_buckets",
    "sglang_reserved_mib",
]

MIB = 2**20  # SGLang's unit for gpu_mem and every reserve below

#: memory_hook.py:89-170: decode CUDA-graph ``max_bs`` by the GPU's memory in MiB:
#: (upper bound exclusive, max_bs at tp < 4, max_bs at tp >= 4).
DECODE_MAX_BS_BY_GPU_MIB: tuple[tuple[float, int, int], ...] = (
    (20 * 1024, 8, 8),  # :90-100  T4, 4080
    (35 * 1024, 48, 160),  # :101-117 A10, 4090, 5090
    (60 * 1024, 32, 160),  # :118-131 A100 40GB, L40
    (90 * 1024, 256, 512),  # :132-145 H100, A100 80GB
    (160 * 1024, 256, 512),  # :146-159 H20, H200
    (float("inf"), 512, 512),  # :160-170 B200, MI300
)
SMALL_TP_BELOW = 4  # memory_hook.py:114, :128, :142, :156: `if cfg.tp_size < 4`

CONSTANT_RESERVE_MIB = 512  # memory_hook.py:309 `reserved_mem = 512`
ACTIVATION_MIB_PER_TOKEN = 1.5  # memory_hook.py:310 `activation_tokens * 1.5`
ACTIVATION_FLOOR_TOKENS = 2048  # memory_hook.py:305 `max(cfg.chunked_prefill_size, 2048)`
PARALLEL_MIB_PER_8_GPUS = 1024  # memory_hook.py:312 `cfg.tp_size * cfg.pp_size / 8 * 1024`
LARGE_GPU_MIB = 60 * 1024  # memory_hook.py:314 `gpu_mem > 60 * 1024`
LARGE_GPU_FLOOR_MIB = 10 * 1024  # memory_hook.py:315 `max(reserved_mem, 10 * 1024)`
DEEPEP_A2A_MIB = 2 * 1024  # memory_hook.py:413 (reserve_for_deepep_a2a_mb)
DECODE_GRAPH_MIB_PER_BS = 2  # memory_hook.py:368 `decode_cuda_graph_config.max_bs * 2`
PREFILL_GRAPH_MIB_PER_BUCKET = 8  # memory_hook.py:386 `len(prefill_cuda_graph_config.bs) * 8`
MLA_PREFILL_GRAPH_MIB = 1.5 * 1024  # memory_hook.py:389 (MLA backend, any bucket count)
BCG_DEEPEP_MIB = 1 * 1024  # memory_hook.py:391-397 (breakable prefill graph + DeepEP)
LLAMA2_PREFILL_GRAPH_MAX_BS = 4096  # memory_hook.py:258-263 (`"llama-2" in model_path`)
FRACTION_DIGITS = 3  # memory_hook.py:325 `round((gpu_mem - reserved_mem) / gpu_mem, 3)`
SGLANG_MAX_PREFILL_TOKENS = 16384  # arg_groups/fields/schedule.py: max_prefill_tokens default


def sglang_decode_graph_max_bs(
    gpu_mib: float, tp_size: int, max_running_requests: int | None = None
) -> int:
    """The decode CUDA graph's ``max_bs`` SGLang 0.5.23 picks by default
    (``memory_hook.py:89-188``): by GPU memory and TP, capped by
    ``--max-running-requests``."""
    max_bs = DECODE_MAX_BS_BY_GPU_MIB[-1][2]
    for bound, small_tp, large_tp in DECODE_MAX_BS_BY_GPU_MIB:
        if gpu_mib < bound:
            max_bs = small_tp if tp_size < SMALL_TP_BELOW else large_tp
            break
    if max_running_requests is not None and max_bs > max_running_requests:
        max_bs = max_running_requests  # memory_hook.py:182-188
    return max_bs


def sglang_prefill_graph_buckets(max_bs: int) -> int:
    """How many token buckets SGLang 0.5.23 captures for a prefill CUDA graph of
    ``max_bs`` tokens (``cuda_graph_hook.py``, ``generate_prefill_cuda_graph_batch_sizes``,
    lines 480-497): 4..32 by 4, 48..256 by 16, 288..512 by 32, 576..1024 by 64,
    1280..4096 by 256, then 4608 up by 512, each at most ``max_bs``."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1024 + 1, 64),
        *range(1280, 4096 + 1, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return sum(1 for s in sizes if s <= max_bs)


def _prefill_graph_mib(
    chunk: int | None, mla: bool, max_total_tokens: int | None, model_path: str
) -> float:
    """``reserve_for_graph_mb``'s prefill term (memory_hook.py:380-389; the graph's
    ``max_bs`` from :233-263: the chunk, capped by ``--max-total-tokens`` and for
    Llama-2)."""
    if mla:
        return MLA_PREFILL_GRAPH_MIB
    max_bs = chunk if chunk is not None else -1  # SGLang's -1: chunking off, no bucket
    if max_total_tokens is not None:
        max_bs = min(max_bs, max_total_tokens)
    if "llama-2" in model_path.lower():
        max_bs = min(max_bs, LLAMA2_PREFILL_GRAPH_MAX_BS)
    return sglang_prefill_graph_buckets(max_bs) * PREFILL_GRAPH_MIB_PER_BUCKET


def sglang_reserved_mib(
    gpu_mib: float,
    *,
    chunked_prefill_size: int | None,
    tp_size: int,
    mla: bool,
    pp_size: int = 1,
    pd_prefill: bool = False,
    decode_cuda_graph: bool = True,
    prefill_cuda_graph: bool = True,
    max_running_requests: int | None = None,
    max_prefill_tokens: int = SGLANG_MAX_PREFILL_TOKENS,
    max_total_tokens: int | None = None,
    deepep: bool = False,
    model_path: str = "",
) -> float:
    """The memory SGLang 0.5.23 keeps out of the static budget, in MiB
    (``memory_hook.py:298-322``, ``handle_gpu_memory_settings``). Arguments as
    :func:`sglang_mem_fraction_default`."""
    chunk = chunked_prefill_size if chunked_prefill_size and chunked_prefill_size > 0 else None
    tokens = max(chunk if chunk is not None else max_prefill_tokens, ACTIVATION_FLOOR_TOKENS)
    reserved = CONSTANT_RESERVE_MIB + tokens * ACTIVATION_MIB_PER_TOKEN
    reserved += tp_size * pp_size / 8 * PARALLEL_MIB_PER_8_GPUS
    decode_graph = decode_cuda_graph and not pd_prefill  # cuda_graph_hook.py:557-567
    if decode_graph:  # memory_hook.py:364-368
        max_bs = sglang_decode_graph_max_bs(gpu_mib, tp_size, max_running_requests)
        reserved += max_bs * DECODE_GRAPH_MIB_PER_BS
    if prefill_cuda_graph:
        reserved += _prefill_graph_mib(chunk, mla, max_total_tokens, model_path)
        reserved += BCG_DEEPEP_MIB if deepep else 0
    if gpu_mib > LARGE_GPU_MIB:
        reserved = max(reserved, LARGE_GPU_FLOOR_MIB)
    if deepep and decode_graph:  # memory_hook.py:317 and :402-414
        reserved += DEEPEP_A2A_MIB
    return reserved


def sglang_mem_fraction_default(
    gpu_memory_bytes: float,
    *,
    chunked_prefill_size: int | None,
    tp_size: int,
    mla: bool,
    pp_size: int = 1,
    pd_prefill: bool = False,
    decode_cuda_graph: bool = True,
    prefill_cuda_graph: bool = True,
    max_running_requests: int | None = None,
    max_prefill_tokens: int = SGLANG_MAX_PREFILL_TOKENS,
    max_total_tokens: int | None = None,
    deepep: bool = False,
    model_path: str = "",
) -> float:
    """SGLang 0.5.23's ``mem_fraction_static`` when the line does not set it
    (``sglang/srt/arg_groups/memory_hook.py``, ``handle_gpu_memory_settings``, lines
    281-343): ``round((gpu_mem - reserved) / gpu_mem, 3)``, ``gpu_mem`` the GPU's memory
    in MiB (``gpu_memory_bytes / 2**20``) and ``reserved`` :func:`sglang_reserved_mib`.

    ``chunked_prefill_size``: the chunk in force (the line's, else SGLang's GPU default);
    None or <= 0 when chunking is off (then ``max_prefill_tokens`` sizes the activations).
    ``mla``: the model runs MLA attention (DeepSeek-V3, GLM-5: a flat prefill-graph
    reserve). ``pd_prefill``: ``--disaggregation-mode prefill`` (no decode graph, so no
    decode-graph or DeepEP reserve). ``decode_cuda_graph`` / ``prefill_cuda_graph``:
    whether each graph is captured (SGLang's defaults on CUDA: both; the prefill graph is
    off with ``--attn-cp-size > 1`` or two-batch overlap, ``cuda_graph_hook.py:204-221``).
    ``deepep``: ``--moe-a2a-backend deepep``. ``model_path``: SGLang's ``--model-path``
    (only a Llama-2 path changes anything). The post-capture sizing path and the VLM
    adjustment are not modelled (module docstring).
    """
    gpu_mib = gpu_memory_bytes / MIB
    reserved = sglang_reserved_mib(
        gpu_mib,
        chunked_prefill_size=chunked_prefill_size,
        tp_size=tp_size,
        mla=mla,
        pp_size=pp_size,
        pd_prefill=pd_prefill,
        decode_cuda_graph=decode_cuda_graph,
        prefill_cuda_graph=prefill_cuda_graph,
        max_running_requests=max_running_requests,
        max_prefill_tokens=max_prefill_tokens,
        max_total_tokens=max_total_tokens,
        deepep=deepep,
        model_path=model_path,
    )
    return round((gpu_mib - reserved) / gpu_mib, FRACTION_DIGITS)
