# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""CPU-only estimate of the temporary device buffers of one CP shared-KV prefill forward.

The ``cp_shared_kv_prefill_max_buffer_size`` admission gate (docs/design.md §4, §6)
compares this estimate against a byte limit before a request joins a non-empty batch.
It runs on the admission hot path: one pass over the batch, integer arithmetic only,
standard library only, no device access.

What is estimated is the per-GPU peak of *temporary* buffers of the shared-KV path: the
buffers whose size depends on the batch shape. Weights, the KV pool and ordinary
activations are outside it (they are reserved by the memory-fraction budget). Temporary
buffers are reused from one layer to the next, so one layer's working set is the
forward's working set.

Shapes. With CP degree ``R = cp_size`` the extend rows are split page-aligned: page
``j`` of a sequence belongs to rank ``j mod R`` (its owner lane), and a rank computes the
query rows of the pages it owns, while keys span the whole context
``c_i = prefix_i + extend_i`` on every rank (shared KV). The estimate takes the busiest
rank, so a short extend (one page lands on one rank) or requests whose pages fall on the
same ranks are not underestimated as ``ceil(extend / R)`` would. Sums run over the batch::

    Q = max_r sum_i rows of request i's extend in pages owned by rank r
                                        query (extend) rows on the busiest rank
    C = sum_i (prefix_i + extend_i)     context (key) rows, all ranks alike
    E = sum_i extend_i
    P = sum_i prefix_i                  prefix includes the chunk's carried true prefix
    G = sum_i ceil(c_i / page_size)     context pages
    L = sum_i loaded_i                  host tokens loaded back (part of prefix_i)
    D = sum_i ceil(loaded_i / page_size)

Row widths per token for one layer, in the KV cache dtype (``kv_cache_dtype``), taken
from the model's KV bytes so that this matches the KV pool's own layout exactly::

    kv_layer  = ceil(model.kv_bytes_per_token(dtype) / num_layers)
    index_row = index_head_dim + 4 on sparse (DSA/NSA) models (fp8 key + fp32 scale), else 0
    kv_row    = kv_layer - index_row
                MLA: the latent, kv_lora_rank + rope (bf16: (512+64)*2 = 1152 B,
                fp8 FlashMLA layout: 656 B); GQA: K and V of all KV heads.

Indexer path. On a sparse model the indexer runs for the batch when some request's
context exceeds ``sparse_dense_threshold`` (``indexer_on``). Otherwise the batch takes
the dense path, where top-k indices come from a dummy score matrix of width
``index_topk`` and no indexer keys are gathered.

Buffers (bytes, one rank):

``kv_materialize``
    Dense gather of the context's KV for attention: ``C * kv_row``.
``index_k_materialize``
    Dense gather of the indexer keys and scales: ``C * index_row`` if ``indexer_on``, else 0.
``remap_metadata``
    int32 page-table entry plus int32 owner-lane remap entry for every context page,
    plus an int32 position for every extend token (the split plan and KV write locations
    are built the same way on every rank): ``8 * G + 4 * E``.
``indexer_logits``
    fp32 ``mqa_logits`` of the ragged batch after the head reduction. Upstream computes
    one ``[sum q rows, sum k rows]`` matrix over the concatenated batch, so the carried
    prefix of a chunked request counts in the key rows: ``4 * Q * C`` if ``indexer_on``.
    On the dense path it is the dummy ``4 * Q * index_topk``. 0 on dense models. The
    estimate counts the matrix whole. Upstream's fallback that splits it into row chunks
    when free memory is short is ignored, because this gate exists so that the fallback
    is not needed.
``topk_indices``
    int32 ``[Q, index_topk]`` selected indices, written by the indexer and read by
    attention: ``4 * Q * index_topk`` on sparse models, else 0.
``transfer_descriptors``
    Load-back page descriptors, built once for all layers (the layer is a stride):
    ``32 * D``.
``load_staging``
    Staging buffer for one layer of loaded pages (the H2D copy is layer-wise):
    ``L * kv_layer``.
``l1_prefetch``
    Only when ``bs_gt1_l1_prefetch_enabled``: dense buffers holding the next layer's
    prefix rows, prefetched while this layer's attention runs:
    ``P * (kv_row + index_row if indexer_on else kv_row)``.

Streams and windows. The forward runs as three sequential phases. Buffers live in the
same phase add up, including buffers on different streams. The estimate is the peak
over the phases, not the sum of all buffers:

``load``
    The prologue. The copy stream moves layer 0's host hits while metadata is already
    built: ``remap_metadata + transfer_descriptors + load_staging``.
``indexer``
    The compute stream gathers the indexer keys, computes the logits and selects the
    top-k. Meanwhile the copy stream stages the next layer (layer-wise H2D overlaps the
    forward): ``load + index_k_materialize + indexer_logits + topk_indices``.
``attention``
    The compute stream gathers the context's KV and runs sparse or dense attention on
    the top-k indices, with the optional L1 prefetch live beside it. The copy stream is
    still staging: ``load + kv_materialize + topk_indices + l1_prefetch``.

The indexer keys and logits are freed before attention gathers the KV, which is why
the peak is lower than the plain sum. The ``load`` window never exceeds the others. It
is reported so that the breakdown shows the copy-stream footprint by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prefillkit.models import ModelSpec
from prefillkit.sched.cp_split import add_lane_rows

__all__ = [
    "BUFFER_NAMES",
    "POSITION_BYTES",
    "REMAP_ENTRY_BYTES",
    "TRANSFER_DESCRIPTOR_BYTES",
    "WINDOW_NAMES",
    "BufferEstimate",
    "BufferEstimatorContext",
    "BufferReqShape",
    "ReqShape",
    "check_buffer_limit_fits",
    "estimate_buffer_breakdown",
    "estimate_buffer_bytes",
]

#: int32 page-table entry + int32 owner-lane remap entry, per context page.
REMAP_ENTRY_BYTES = 8
#: int32 position per extend token.
POSITION_BYTES = 4
#: One load-back page descriptor (source, destination, length, layer stride).
TRANSFER_DESCRIPTOR_BYTES = 32
#: Bytes of an fp32 logit.
_F32 = 4
#: Bytes of an int32 top-k index.
_I32 = 4
#: Bytes of the per-token fp32 scale that accompanies an fp8 indexer key.
_INDEX_SCALE_BYTES = 4

BUFFER_NAMES: tuple[str, ...] = (
    "kv_materialize",
    "index_k_materialize",
    "remap_metadata",
    "indexer_logits",
    "topk_indices",
    "transfer_descriptors",
    "load_staging",
    "l1_prefetch",
)
WINDOW_NAMES: tuple[str, ...] = ("load", "indexer", "attention")


@dataclass(frozen=True, slots=True, init=False)
class ReqShape:
    """One request of a candidate batch or a forward, after load-back planning.

    ``prefix_len`` is the cached context the forward reads: device prefix plus loaded
    host tokens, or the true prefix of a chunked continuation. ``loaded_tokens`` is the
    part of ``prefix_len`` that is loaded back from the host tier in this forward.
    """

    prefix_len: int
    extend_len: int
    loaded_tokens: int = 0

    # NOTE: a written __init__ (init=False), here and in the other classes built per
    # request or per forward: the compiled build compiles it, where the one dataclass
    # generates stays interpreted (5-10x slower). test_dataclass_inits checks that its
    # parameters are the fields, in order, with their defaults. object.__setattr__ is
    # how a frozen class sets its fields (mypyc turns it into a plain store).
    def __init__(self, prefix_len: int, extend_len: int, loaded_tokens: int = 0) -> None:
        object.__setattr__(self, "prefix_len", prefix_len)
        object.__setattr__(self, "extend_len", extend_len)
        object.__setattr__(self, "loaded_tokens", loaded_tokens)


#: The name the estimator's callers used before the cost model shared the type.
BufferReqShape = ReqShape


@dataclass(frozen=True, slots=True)
class BufferEstimatorContext:
    """Static inputs of the estimator: model, KV dtype and the CP layout."""

    model: ModelSpec
    kv_cache_dtype: str = "bf16"
    cp_size: int = 1
    page_size: int = 64
    bs_gt1_l1_prefetch_enabled: bool = False

    def __post_init__(self) -> None:
        if self.cp_size < 1:
            raise ValueError(f"cp_size must be >= 1, got {self.cp_size}")
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        if self.model.num_layers < 1:
            raise ValueError(f"model {self.model.name!r} has no layers")


@dataclass(frozen=True, slots=True)
class BufferEstimate:
    """Per-buffer and per-window bytes of one estimate.

    ``peak_bytes`` is ``max(windows.values())``. ``peak_window`` names that window
    (the earliest phase wins a tie) and is ``""`` for an empty batch.
    """

    buffers: dict[str, int]
    windows: dict[str, int]
    peak_window: str
    peak_bytes: int

    @property
    def total_bytes(self) -> int:
        """Plain sum of every buffer, which is an upper bound of ``peak_bytes``."""
        return sum(self.buffers.values())


def _buffer_terms(
    batch: Sequence[ReqShape], ctx: BufferEstimatorContext
) -> tuple[int, int, int, int, int, int, int, int]:
    """The eight buffers in ``BUFFER_NAMES`` order. One pass, integer math only."""
    cp = ctx.cp_size
    page = ctx.page_size
    q_rows = ctx_rows = ext_rows = prefix_rows = ctx_pages = loaded = load_pages = 0
    lane_rows = [0] * cp  # extend rows per rank (owner lane)
    max_ctx = 0
    for req in batch:
        p = req.prefix_len
        e = req.extend_len
        ld = req.loaded_tokens
        if p < 0 or e < 0 or ld < 0:
            raise ValueError(f"negative request shape: {req!r}")
        if ld > p:
            raise ValueError(f"loaded_tokens exceeds prefix_len (loads are part of it): {req!r}")
        c = p + e
        if e:
            add_lane_rows(lane_rows, p, e, page)
        ctx_rows += c
        ext_rows += e
        prefix_rows += p
        ctx_pages += -(-c // page)
        loaded += ld
        load_pages += -(-ld // page)
        if c > max_ctx:
            max_ctx = c

    q_rows = max(lane_rows)
    model = ctx.model
    kv_layer = -(-model.kv_bytes_per_token(ctx.kv_cache_dtype) // model.num_layers)
    sparse = model.is_sparse
    index_row = model.index_head_dim + _INDEX_SCALE_BYTES if sparse else 0
    kv_row = max(kv_layer - index_row, 0)
    indexer_on = sparse and max_ctx > model.sparse_dense_threshold

    kv_mat = ctx_rows * kv_row
    index_k = ctx_rows * index_row if indexer_on else 0
    metadata = REMAP_ENTRY_BYTES * ctx_pages + POSITION_BYTES * ext_rows
    if indexer_on:
        logits = _F32 * q_rows * ctx_rows
    elif sparse:
        logits = _F32 * q_rows * model.index_topk
    else:
        logits = 0
    topk = _I32 * q_rows * model.index_topk if sparse else 0
    descriptors = TRANSFER_DESCRIPTOR_BYTES * load_pages
    staging = loaded * kv_layer
    if ctx.bs_gt1_l1_prefetch_enabled:
        prefetch = prefix_rows * (kv_row + index_row if indexer_on else kv_row)
    else:
        prefetch = 0
    return kv_mat, index_k, metadata, logits, topk, descriptors, staging, prefetch


def _windows(terms: tuple[int, int, int, int, int, int, int, int]) -> tuple[int, int, int]:
    kv_mat, index_k, metadata, logits, topk, descriptors, staging, prefetch = terms
    load = metadata + descriptors + staging
    indexer = load + index_k + logits + topk
    attention = load + kv_mat + topk + prefetch
    return load, indexer, attention


def estimate_buffer_bytes(batch: Sequence[ReqShape], ctx: BufferEstimatorContext) -> int:
    """Peak bytes of temporary device buffers, on one GPU, for one forward of ``batch``.

    Returns 0 for an empty batch. Raises ``ValueError`` on a negative length or on
    ``loaded_tokens > prefix_len``. The terms and windows are in the module docstring.
    """
    if not batch:
        return 0
    return max(_windows(_buffer_terms(batch, ctx)))


def estimate_buffer_breakdown(
    batch: Sequence[ReqShape], ctx: BufferEstimatorContext
) -> BufferEstimate:
    """Same estimate as ``estimate_buffer_bytes``, with every buffer and window itemized."""
    terms = _buffer_terms(batch, ctx)
    windows = _windows(terms)
    peak = max(windows)
    peak_window = "" if not batch else WINDOW_NAMES[windows.index(peak)]
    return BufferEstimate(
        buffers=dict(zip(BUFFER_NAMES, terms, strict=True)),
        windows=dict(zip(WINDOW_NAMES, windows, strict=True)),
        peak_window=peak_window,
        peak_bytes=peak,
    )


def check_buffer_limit_fits(limit_bytes: int, device_free_bytes: int) -> None:
    """Startup check: does the configured buffer limit fit the memory the device has left?

    ``device_free_bytes`` is what is left on the device after the weights and the KV
    pool. Raises ``ValueError`` with a one-line message when the limit is not positive
    or is larger than that. The engine calls this once at startup, only when
    ``cp_shared_kv_prefill_max_buffer_size`` is set. An engine on a real device should
    also try one allocation of ``limit_bytes`` (and free it) at startup, because free
    memory is fragmented and the allocator has overheads that this arithmetic does not
    see. Admission itself never touches the device.
    """
    if limit_bytes <= 0:
        raise ValueError(
            f"cp_shared_kv_prefill_max_buffer_size must be positive, got {limit_bytes}"
        )
    if limit_bytes > device_free_bytes:
        raise ValueError(
            f"cp_shared_kv_prefill_max_buffer_size={limit_bytes} B "
            f"({limit_bytes / 2**30:.2f} GiB) does not fit the "
            f"{max(device_free_bytes, 0)} B ({max(device_free_bytes, 0) / 2**30:.2f} GiB) "
            "left on the device after weights and KV cache; lower the limit or the KV pool size"
        )
