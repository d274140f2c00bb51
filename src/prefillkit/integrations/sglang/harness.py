"""SGLang's real scheduler objects, built on CPU: the radix tree, the token-to-KV allocator,
the request-slot pool, ``SchedulePolicy`` and a ``Scheduler`` whose admission pass
(``_get_new_batch_prefill_raw``) runs unmodified.

Built the way SGLang's own unit tests build them: the pools and the tree from their
constructors (``sglang/test/kits/unified_radix_cache/fixtures.py`` does the same for its
tree tests), the ``Scheduler`` with ``Scheduler.__new__`` plus the attributes its prefill
pass reads (``sglang.srt.managers.scheduler``, ``_get_new_batch_prefill_raw`` in 0.5.23).
The attributes set here turn off what a plain SGLang server leaves off (grammar, LoRA,
HiCache storage, the prefill delayer, mixed chunks, speculative decoding, overlap); the
rest are the server's sizes. KV tensors are one element per token (head 1, dim 1, one
layer): admission reads sizes and indices, never KV values.

Imports SGLang (``require_sglang`` first).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from prefillkit.integrations.sglang import require_sglang

require_sglang()

import torch  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.managers.schedule_policy import SchedulePolicy  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.mem_cache.allocator import (  # noqa: E402
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import (  # noqa: E402
    ServerArgs,
    set_global_server_args_for_scheduler,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

__all__ = ["HarnessConfig", "Req", "ScheduleBatch", "Scheduler", "build_scheduler", "make_req"]


@dataclass(frozen=True)
class HarnessConfig:
    """The server settings one SGLang scheduler is built with (SGLang's flag names).

    ``pool_tokens``: the KV pool (``max_total_num_tokens``); ``max_running_requests``
    also sizes the request-slot pool; ``chunked_prefill_size`` None turns chunking off
    (SGLang's -1); ``new_token_ratio``: the decode reservation ratio of the pass
    (SGLang's initial value ``min(0.7 × schedule_conservativeness, 1)``).
    """

    page_size: int = 1
    pool_tokens: int = 65_536
    max_running_requests: int = 256
    max_context_len: int = 262_144
    schedule_policy: str = "fcfs"
    chunked_prefill_size: int | None = 8192
    max_prefill_tokens: int = 16_384
    new_token_ratio: float = 0.7
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    priority_scheduling_preemption_threshold: int = 10


def _server_args(cfg: HarnessConfig) -> Any:
    args = ServerArgs(
        model_path="dummy",
        page_size=cfg.page_size,
        schedule_policy=cfg.schedule_policy,
        chunked_prefill_size=cfg.chunked_prefill_size or -1,
        max_prefill_tokens=cfg.max_prefill_tokens,
        max_running_requests=cfg.max_running_requests,
    )
    # NOTE: resolved by ServerArgs' post-init from the device in a server; one
    # micro-batch (no pipeline parallelism) holds every running request.
    args.pp_max_micro_batch_size = cfg.max_running_requests
    return args


def _pools(cfg: HarnessConfig) -> tuple[Any, Any, Any]:
    """(request-slot pool, KV allocator, radix tree) on CPU."""
    # NOTE: size = max_running_requests, as SGLang's kv_cache_configurator
    # (_build_default_req_pool) passes it; the pool adds its padding row itself.
    req_to_token = ReqToTokenPool(
        size=cfg.max_running_requests,
        max_context_len=cfg.max_context_len,
        device="cpu",
        enable_memory_saver=False,
    )
    kv = MHATokenToKVPool(
        size=cfg.pool_tokens,
        page_size=cfg.page_size,
        dtype=torch.float16,
        head_num=1,
        head_dim=1,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
    )
    common = dict(size=cfg.pool_tokens, dtype=torch.float16, device="cpu", kvcache=kv)
    if cfg.page_size > 1:
        allocator = PagedTokenToKVPoolAllocator(page_size=cfg.page_size, need_sort=False, **common)
    else:
        allocator = TokenToKVPoolAllocator(need_sort=False, **common)
    tree = RadixCache(
        CacheInitParams(
            disable=False,
            req_to_token_pool=req_to_token,
            token_to_kv_pool_allocator=allocator,
            page_size=cfg.page_size,
        )
    )
    return req_to_token, allocator, tree


def build_scheduler(cfg: HarnessConfig) -> Any:
    """An SGLang ``Scheduler`` whose prefill pass runs on CPU over fresh, empty pools.

    ``sched.running_batch`` is an empty ``ScheduleBatch``; ``sched.waiting_queue`` is
    empty. Sets SGLang's process-global server args (as a scheduler process does)."""
    set_global_server_args_for_scheduler(_server_args(cfg))
    req_to_token, allocator, tree = _pools(cfg)
    s = Scheduler.__new__(Scheduler)
    s.page_size = cfg.page_size
    s.tree_cache, s.token_to_kv_pool_allocator, s.req_to_token_pool = tree, allocator, req_to_token
    s.policy = SchedulePolicy(
        cfg.schedule_policy,
        tree,
        False,
        cfg.enable_priority_scheduling,
        cfg.schedule_low_priority_values_first,
    )
    s.waiting_queue = []
    s.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)
    s.chunked_req = None
    s.chunked_prefill_size = cfg.chunked_prefill_size
    s.max_prefill_tokens = cfg.max_prefill_tokens
    s.max_running_requests = cfg.max_running_requests
    s.new_token_ratio_tracker = SimpleNamespace(current=cfg.new_token_ratio)
    s.enable_priority_scheduling = cfg.enable_priority_scheduling
    s.enable_priority_preemption = False
    s.priority_scheduling_preemption_threshold = cfg.priority_scheduling_preemption_threshold
    _switch_off_extras(s)
    return s


def _switch_off_extras(s: Any) -> None:
    """What a plain server leaves off, and the stand-ins for the GPU worker's answers."""
    s.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False)
    s.beam_coordinator = SimpleNamespace(pending_member_rows=lambda batch: 0)
    s.load_inquirer = SimpleNamespace(_get_num_pending_tokens=lambda chunk_deduct=0: 0)
    # NOTE: BLOCK_M only sizes the tile budget, which is off (no Triton backend); SGLang
    # falls back to 64 for a backend without ``extend_attention_block_m``.
    s.tp_worker = SimpleNamespace(
        model_runner=SimpleNamespace(attn_backend=object(), prefill_aware_swa=False)
    )
    s.model_config = SimpleNamespace(
        vocab_size=32_000, is_encoder_decoder=False, hf_config=SimpleNamespace()
    )
    s.device = "cpu"
    s.spec_algorithm = SpeculativeAlgorithm.NONE
    s.processed_tokens_counter = 0
    s.max_prefill_bs = 0
    s.prefill_delayer = None
    s.min_free_slots_delayer = None
    s.dynamic_chunk_sizer = None
    s.dllm_config = None
    s.truncation_align_size = None
    s.hisparse_coordinator = None
    for flag in (
        "is_hybrid_swa",
        "is_mixed_chunk",
        "enable_lora",
        "enable_hicache_storage",
        "enable_lmcache",
        "enable_hierarchical_cache",
        "enable_unified_cache_external_linker",
        "enable_overlap",
    ):
        setattr(s, flag, False)


def make_req(
    rid: str,
    tokens: list[int] | array[int],
    max_new_tokens: int,
    *,
    priority: int | None = None,
    queue_entry_time: float | None = None,
) -> Any:
    """An SGLang ``Req`` as the tokenizer manager hands it to the scheduler (its
    ``fill_ids`` set, as ``_add_request_to_queue``'s caller leaves them)."""
    req = Req(
        rid,
        "",
        array("q", tokens),
        SamplingParams(max_new_tokens=max_new_tokens),
        priority=priority,
    )
    req.refresh_fill_ids()
    if queue_entry_time is not None:
        req.time_stats.wait_queue_entry_time = queue_entry_time
    return req
