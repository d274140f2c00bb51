# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""An admission pass's verdicts, and the CP shared-KV batch rules as pure functions.

The CP rules are here, not in the adder, so that an engine's own adder (SGLang's, through
``prefillkit.integrations.sglang``) applies the same decisions: ``PrefillAdder`` calls
them on its CP path, the SGLang plugin on SGLang's objects.
"""

from __future__ import annotations

from enum import Enum, StrEnum


class AddReqResult(Enum):
    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


class CpMode(Enum):
    """CP shared-KV prefill admission: no CP gate, one request per batch, or the bs>1
    batch limits (``enable_cp_shared_kv_prefill_bs_gt1``)."""

    OFF = "off"
    BS1 = "bs1"
    BS_GT1 = "bs_gt1"


class CloseReason(StrEnum):
    """Why an admission pass stopped admitting: the limit that closed the batch."""

    QUEUE_EMPTY = "queue_empty"
    MEMORY = "memory"  # NO_TOKEN
    MAX_PREFILL_TOKENS = "max_prefill_tokens"  # rem_input_tokens
    CHUNK_BUDGET = "chunk_budget"  # rem_chunk_tokens
    MAX_RUNNING_REQUESTS = "max_running_requests"
    CP_BS1 = "cp_bs1"
    CHUNKED_SOLO = "chunked_solo"
    CP_MAX_REQUESTS = "cp_max_requests"
    CP_MAX_EXTEND = "cp_max_total_extend_tokens"
    CP_MAX_CACHED = "cp_max_cached_tokens"
    CP_MAX_BUFFER = "cp_max_buffer_size"
    AFFINITY_STOP = "affinity_stop"
    POLICY_STOP = "policy_stop"  # a zoo policy's admission decision (sched/policy_admit.py)


def cp_extend_limit(user_limit: int | None, chunk_budget: int | None) -> int | None:
    """The CP bs>1 batch's extend-token limit: ``min(user limit, chunk budget)``; the
    chunk budget when no limit is given (with chunking on), None when neither is set.
    Exactly: an omitted limit under chunking is the current chunk budget, a given one is
    capped by it (docs/design.md section 4)."""
    if user_limit is not None and chunk_budget is not None:
        return min(user_limit, chunk_budget)
    return user_limit if user_limit is not None else chunk_budget


def cp_pre_admission_reason(
    cp_mode: CpMode, admitted: int, chunk_blocks_followers: bool, max_requests: int | None
) -> CloseReason | None:
    """Whether a CP batch that already holds ``admitted`` requests closes before the next
    candidate is even matched. Decision table:

    ============ ========= ====================== =================== ==================
    cp_mode      admitted  chunk_blocks_followers admitted vs max      result
    ============ ========= ====================== =================== ==================
    any          0         any                    any                 None (admit test)
    OFF          any       any                    any                 None
    BS1          >= 1      any                    any                 CP_BS1
    BS_GT1       >= 1      True                   any                 CHUNKED_SOLO
    BS_GT1       >= 1      False                  >= max_requests     CP_MAX_REQUESTS
    BS_GT1       >= 1      False                  below / no max      None
    ============ ========= ====================== =================== ==================

    ``chunk_blocks_followers``: a chunked continuation leads the batch and may not take
    followers (``PrefillAdder.chunk_allows_followers``). A single request always runs.
    """
    if admitted == 0 or cp_mode is CpMode.OFF:
        return None
    if cp_mode is CpMode.BS1:
        return CloseReason.CP_BS1
    if chunk_blocks_followers:
        return CloseReason.CHUNKED_SOLO
    if max_requests is not None and admitted >= max_requests:
        return CloseReason.CP_MAX_REQUESTS
    return None


def cp_token_limit_reason(
    batch_extend_tokens: int,
    batch_cached_tokens: int,
    prefix_len: int,
    extend_tokens: int,
    extend_limit: int | None,
    cached_limit: int | None,
) -> CloseReason | None:
    """Which CP bs>1 token limit one more request (``prefix_len`` cached tokens after
    load-back planning, ``extend_tokens`` page-ceiled) would break in a non-empty batch,
    extend first: ``batch_extend + extend > extend_limit`` → CP_MAX_EXTEND, then
    ``batch_cached + prefix > cached_limit`` → CP_MAX_CACHED; None when both hold. A
    chunked continuation's tallies count its true prefix (the tokens its earlier chunks
    computed)."""
    if extend_limit is not None and batch_extend_tokens + extend_tokens > extend_limit:
        return CloseReason.CP_MAX_EXTEND
    if cached_limit is not None and batch_cached_tokens + prefix_len > cached_limit:
        return CloseReason.CP_MAX_CACHED
    return None
