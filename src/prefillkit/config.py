"""One validated settings object for the scheduler and the simulator.

Every knob is a field of :class:`Config`, spelled like SGLang's ``ServerArgs`` where SGLang
has the flag, so a field ``chunked_prefill_size`` is the flag ``--chunked-prefill-size``.
Each field carries ``help`` and ``group`` metadata, from which a CLI generates one option per
field and the README prints a knob table (:func:`knob_table`).

A :class:`Config` is validated once, at construction: any impossible combination raises
:class:`ConfigError` with one line that names the offending flag. Normalisations done at
construction (so the stored values are canonical):

- ``page_size`` ``None`` resolves to 64 when ``cp_size > 1`` else 1 (after construction it is
  always an ``int``; note that ``dataclasses.replace`` keeps the resolved value, so pass
  ``page_size=None`` to re-resolve after changing ``cp_size``);
- ``chunked_prefill_size``, ``lpm_fallback_queue_len`` and ``schedule_max_wait_s`` of ``-1``
  become ``None``;
- ``model`` and the enum-like strings are lower-cased, ``kv_cache_dtype`` ``bfloat16`` → ``bf16``;
- ints given for float fields become floats.

``cp_symm_staging_pages`` stays ``None`` when not given; :meth:`Config.staging_identity`
derives it, so ``dataclasses.replace`` on the extend limits never trips a stale value.

Sources: :meth:`Config.from_toml` (keys with ``_`` or ``-``, top level or a ``[prefillkit]``
table), :func:`parse_flags` (SGLang-spelled command-line flags, with a few SGLang aliases and
a list of SGLang launch flags that are accepted and ignored) and :meth:`Config.from_sources`
(file first, flags override).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefillkit.cache.host import WRITE_POLICIES
from prefillkit.models import MODELS, ModelSpec, get_model
from prefillkit.text import one_line as _one_line
from prefillkit.text import suggest as _suggest

__all__ = [
    "GROUPS",
    "KV_CACHE_DTYPES",
    "MODES",
    "SCHEDULE_POLICIES",
    "WRITE_POLICIES",
    "Config",
    "ConfigError",
    "ParsedFlags",
    "blame_config_file",
    "describe",
    "field_flag",
    "knob_table",
    "parse_flags",
]


class ConfigError(ValueError):
    """An impossible or malformed setting. The message is one line naming the flag/key."""


SCHEDULE_POLICIES: tuple[str, ...] = ("fcfs", "lpm", "dfs-weight", "lof", "random")
PRIORITY_POLICIES: tuple[str, ...] = ("fcfs", "lof")
MODES: tuple[str, ...] = ("pd-prefill", "colocated")
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bf16", "fp8_e4m3", "fp8_e5m2")
_KV_DTYPE_ALIASES: dict[str, str] = {"bfloat16": "bf16"}

#: Field groups, in the order a CLI/README should present them.
GROUPS: tuple[str, ...] = (
    "memory",
    "scheduler",
    "priority",
    "hicache",
    "cp",
    "affinity",
    "deployment",
)

_CP_DEFAULT_PAGE_SIZE = 64


def _knob(default: Any, help: str, group: str) -> Any:
    if group not in GROUPS:  # pragma: no cover - programming error
        raise AssertionError(f"unknown group {group!r}")
    return field(default=default, metadata={"help": help, "group": group})


def field_flag(name: str) -> str:
    """Command-line spelling of a field: ``chunked_prefill_size`` → ``--chunked-prefill-size``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True, slots=True)
class Config:
    """Every prefillkit knob; validated at construction. See the module docstring."""

    # ----------------------------------------------------------------- memory / KV pool
    page_size: int | None = _knob(
        None,
        "Tokens per KV page; unset = 64 with context parallelism (cp_size > 1), else 1.",
        "memory",
    )
    max_total_tokens: int | None = _knob(
        None,
        "KV pool capacity in tokens, all CP lanes together; unset = derived from GPU memory.",
        "memory",
    )
    kv_cache_dtype: str = _knob(
        "auto", "KV cache dtype: auto (= bf16), bf16, fp8_e4m3 or fp8_e5m2.", "memory"
    )
    kv_bytes_per_token: int | None = _knob(
        None, "KV bytes per token; unset = from the model preset and --kv-cache-dtype.", "memory"
    )
    mem_fraction_static: float = _knob(
        0.88, "Fraction of GPU memory for weights + KV pool, in (0, 1].", "memory"
    )
    device_memory_gb: float | None = _knob(
        None, "Memory per GPU in GB; unset = the GPU preset's.", "memory"
    )

    # ----------------------------------------------------------------- scheduler core
    max_prefill_tokens: int = _knob(
        16384, "Legacy input-token budget of one prefill batch (rem_input_tokens).", "scheduler"
    )
    chunked_prefill_size: int | None = _knob(
        8192,
        "Chunk budget per prefill batch (rem_chunk_tokens); -1 or none disables chunking.",
        "scheduler",
    )
    max_running_requests: int | None = _knob(
        None,
        "Slot limit: requests holding KV at once; unset = min(4096, pool tokens / 2).",
        "scheduler",
    )
    schedule_policy: str = _knob(
        "fcfs", "Waiting-queue order: fcfs, lpm, dfs-weight or lof.", "scheduler"
    )
    lpm_fallback_queue_len: int | None = _knob(
        None,
        "LPM falls back to FCFS when the waiting queue is longer than this (upstream: 128); "
        "-1 or none = never (default: matching is cheap, see benchmarks/RESULTS.md).",
        "scheduler",
    )
    schedule_max_wait_s: float | None = _knob(
        5.0,
        "Wait bound of lpm, dfs-weight, lof and random: a request waiting this many seconds "
        "goes ahead of the policy's order, oldest first (prefillkit extension; -1 or none = "
        "off, upstream). With affinity on, min(this, --affinity-max-age-s) is used.",
        "scheduler",
    )
    schedule_conservativeness: float = _knob(
        1.0, "Scales the initial new-token ratio (higher = reserve more decode room).", "scheduler"
    )
    init_new_token_ratio: float = _knob(
        0.7,
        "Initial new-token ratio (times --schedule-conservativeness, capped at 1).",
        "scheduler",
    )
    min_new_token_ratio_factor: float = _knob(
        0.14, "Floor of the new-token ratio as a fraction of its initial value.", "scheduler"
    )
    new_token_ratio_decay_steps: int = _knob(
        600, "Decode steps for the new-token ratio to decay from initial to floor.", "scheduler"
    )
    clip_max_new_tokens: int = _knob(
        4096, "Output tokens reserved per request are clipped to this.", "scheduler"
    )

    # ----------------------------------------------------------------- priority
    enable_priority_scheduling: bool = _knob(
        False, "Order the queue by request priority (needs fcfs or lof).", "priority"
    )
    schedule_low_priority_values_first: bool = _knob(
        False, "Lower priority values are more important.", "priority"
    )
    enable_priority_aging: bool = _knob(
        False,
        "Apply --schedule-max-wait-s under priority scheduling too (aged requests go ahead "
        "of every class); off = strict classes, upstream.",
        "priority",
    )
    priority_scheduling_preemption_threshold: int = _knob(
        10, "Preempt only victims whose priority differs by more than this.", "priority"
    )
    enable_priority_preemption: bool = _knob(
        True,
        "Preempt lower-priority running requests when the slot limit blocks a higher one.",
        "priority",
    )
    enable_preempt_on_no_token: bool = _knob(
        False,
        "prefillkit extension: also preempt when memory (NO_TOKEN) blocks a higher-priority "
        "request.",
        "priority",
    )
    enable_ignore_eos_admission: bool = _knob(
        False,
        "Upstream's add_one_req_ignore_eos test for ignore_eos requests: the whole output "
        "(not clipped, ratio 1.0) of every running and admitted request must fit the "
        "current free + evictable tokens as requests finish (upstream takes this path only "
        "with the radix cache disabled; here it is added to the normal test).",
        "scheduler",
    )

    # ----------------------------------------------------------------- hicache
    enable_hierarchical_cache: bool = _knob(
        False, "Enable the host (L2) KV cache tier (HiCache).", "hicache"
    )
    hicache_ratio: float = _knob(
        2.0,
        "Host pool size as a multiple of the device pool (used when --hicache-size is 0).",
        "hicache",
    )
    hicache_size: int = _knob(
        0, "Host pool size in GB per GPU; 0 = use --hicache-ratio.", "hicache"
    )
    hicache_write_policy: str = _knob(
        "write_through",
        "Host backup policy: write_through, write_through_selective or write_back.",
        "hicache",
    )
    hicache_write_through_threshold: int = _knob(
        2, "Hits (requests caching the prefix) before a write_through_selective backup.", "hicache"
    )
    hicache_load_back_threshold: int = _knob(
        10, "Host hits shorter than this many tokens are not loaded back.", "hicache"
    )

    # ----------------------------------------------------------------- context parallel
    tp_size: int = _knob(1, "Tensor-parallel degree (GPUs per instance).", "cp")
    cp_size: int = _knob(1, "Context-parallel degree; must divide --tp-size.", "cp")
    enable_cp_shared_kv: bool = _knob(
        False, "CP shared-KV: the KV pool is sharded over cp_size owner lanes.", "cp"
    )
    enable_cp_shared_kv_prefill_bs_gt1: bool = _knob(
        False, "Allow several requests per CP shared-KV prefill batch.", "cp"
    )
    cp_shared_kv_prefill_max_requests: int | None = _knob(
        None, "CP bs>1: most requests per prefill batch; unset = unlimited.", "cp"
    )
    cp_shared_kv_prefill_max_total_extend_tokens: int | None = _knob(
        None,
        "CP bs>1: most extend tokens per batch (page-aligned); capped by the chunk budget.",
        "cp",
    )
    cp_shared_kv_prefill_max_cached_tokens: int | None = _knob(
        None, "CP bs>1: most cached (L1 + loaded L2) tokens per batch; unset = unlimited.", "cp"
    )
    cp_shared_kv_prefill_max_buffer_size: int | None = _knob(
        None, "CP bs>1: most estimated temporary-buffer bytes per batch; unset = unlimited.", "cp"
    )
    cp_prefill_mix_chunked: bool = _knob(
        False, "Experimental: admit followers after a tail chunk in a CP bs>1 batch.", "cp"
    )
    cp_symm_staging_pages: int | None = _knob(
        None,
        "Symmetric staging capacity in pages; must equal extend-cap pages + max requests "
        "(unset = derived).",
        "cp",
    )

    # ----------------------------------------------------------------- affinity
    enable_affinity: bool = _knob(
        False, "Warm/cold cache-affinity admission (cold skipped behind a warm lead).", "affinity"
    )
    affinity_warm_floor_tokens: int = _knob(
        64, "A candidate is warm if device prefix + host hit reaches this many tokens.", "affinity"
    )
    affinity_skip_window: int = _knob(
        16, "Most cold skips per admission pass (W) before the scan stops.", "affinity"
    )
    affinity_max_head_defers: int = _knob(
        3, "Passes a cold request may be skipped (K) before the scan stops at it.", "affinity"
    )
    affinity_max_age_s: float = _knob(
        5.0, "Cold requests waiting this long (T, seconds) stop the scan instead.", "affinity"
    )

    # ----------------------------------------------------------------- deployment / simulator
    model: str = _knob("glm-5", f"Model preset: {', '.join(MODELS)}.", "deployment")
    gpu: str = _knob("h200", "GPU preset name (validated by the simulator).", "deployment")
    mode: str = _knob(
        "pd-prefill", "pd-prefill (prefill instance of a PD pair) or colocated.", "deployment"
    )
    ep_size: int = _knob(
        1,
        "Expert-parallel degree of the MoE layers: 1 (MoE tensor-parallel over --tp-size) "
        "or --tp-size (all-to-all dispatch/combine), as SGLang's --ep-size.",
        "deployment",
    )
    enable_two_batch_overlap: bool = _knob(
        False,
        "Two-batch overlap: MoE communication hides under compute (SGLang's flag).",
        "deployment",
    )
    nvlink_bandwidth_gbps: float | None = _knob(
        None,
        "Scale-up (NVLink) bandwidth per GPU per direction in GB/s; unset = the GPU preset's.",
        "deployment",
    )
    net_bandwidth_gbps: float | None = _knob(
        None,
        "Scale-out NIC bandwidth per GPU in GB/s (IB/RoCE); unset = the GPU preset's.",
        "deployment",
    )
    kv_transfer_bandwidth_gbps: float = _knob(
        50.0, "KV send-out bandwidth per GPU in GB/s (pd-prefill).", "deployment"
    )
    h2d_bandwidth_gbps: float = _knob(
        25.0, "Host-to-device load-back bandwidth per GPU in GB/s.", "deployment"
    )
    seed: int = _knob(0, "Random seed.", "deployment")
    debug_check_invariants: bool = _knob(
        False, "Check scheduler/cache invariants after every step (slow).", "deployment"
    )

    # ----------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            checked = _check_type(f.name, value)
            if checked is not value:
                object.__setattr__(self, f.name, checked)
        self._normalise()
        self._validate()

    def _normalise(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        if self.page_size is None:
            put("page_size", _CP_DEFAULT_PAGE_SIZE if self.cp_size > 1 else 1)
        if self.chunked_prefill_size == -1:
            put("chunked_prefill_size", None)
        if self.lpm_fallback_queue_len == -1:
            put("lpm_fallback_queue_len", None)
        if self.schedule_max_wait_s == -1:
            put("schedule_max_wait_s", None)
        dtype = self.kv_cache_dtype.strip().lower()
        put("kv_cache_dtype", _KV_DTYPE_ALIASES.get(dtype, dtype))
        for name in ("model", "gpu", "mode", "schedule_policy", "hicache_write_policy"):
            put(name, getattr(self, name).strip().lower())

    def _validate(self) -> None:
        page = self.page_size
        assert page is not None

        # Sizes and ranges.
        _positive("page_size", page)
        _positive("max_total_tokens", self.max_total_tokens)
        _positive("kv_bytes_per_token", self.kv_bytes_per_token)
        if not 0.0 < self.mem_fraction_static <= 1.0:
            _fail("mem_fraction_static", f"must be in (0, 1], got {self.mem_fraction_static}")
        _positive("device_memory_gb", self.device_memory_gb)
        _positive("max_prefill_tokens", self.max_prefill_tokens)
        if self.chunked_prefill_size is not None:
            if self.chunked_prefill_size <= 0:
                _fail(
                    "chunked_prefill_size",
                    f"must be positive, or -1 to disable chunking, got {self.chunked_prefill_size}",
                )
            if self.chunked_prefill_size % page:
                _fail(
                    "chunked_prefill_size",
                    f"must be a multiple of --page-size {page}, got {self.chunked_prefill_size}",
                )
        _positive("max_running_requests", self.max_running_requests)
        if self.lpm_fallback_queue_len is not None and self.lpm_fallback_queue_len < 0:
            _fail(
                "lpm_fallback_queue_len",
                f"must be >= 0, or -1 for never, got {self.lpm_fallback_queue_len}",
            )
        if self.schedule_max_wait_s is not None and not (
            0.0 <= self.schedule_max_wait_s < math.inf
        ):
            _fail(
                "schedule_max_wait_s",
                f"must be >= 0 seconds, or -1 for off, got {self.schedule_max_wait_s}",
            )
        _positive("schedule_conservativeness", self.schedule_conservativeness)
        if not 0.0 < self.init_new_token_ratio <= 1.0:
            _fail("init_new_token_ratio", f"must be in (0, 1], got {self.init_new_token_ratio}")
        if not 0.0 <= self.min_new_token_ratio_factor <= 1.0:
            _fail(
                "min_new_token_ratio_factor",
                f"must be in [0, 1], got {self.min_new_token_ratio_factor}",
            )
        _positive("new_token_ratio_decay_steps", self.new_token_ratio_decay_steps)
        _positive("clip_max_new_tokens", self.clip_max_new_tokens)
        _non_negative(
            "priority_scheduling_preemption_threshold",
            self.priority_scheduling_preemption_threshold,
        )
        if self.hicache_ratio <= 0:
            _fail("hicache_ratio", f"must be positive, got {self.hicache_ratio}")
        _non_negative("hicache_size", self.hicache_size)
        _positive("hicache_write_through_threshold", self.hicache_write_through_threshold)
        _non_negative("hicache_load_back_threshold", self.hicache_load_back_threshold)
        _positive("tp_size", self.tp_size)
        _positive("cp_size", self.cp_size)
        _positive("cp_shared_kv_prefill_max_requests", self.cp_shared_kv_prefill_max_requests)
        _positive(
            "cp_shared_kv_prefill_max_total_extend_tokens",
            self.cp_shared_kv_prefill_max_total_extend_tokens,
        )
        _positive(
            "cp_shared_kv_prefill_max_cached_tokens", self.cp_shared_kv_prefill_max_cached_tokens
        )
        _positive("cp_shared_kv_prefill_max_buffer_size", self.cp_shared_kv_prefill_max_buffer_size)
        _positive("cp_symm_staging_pages", self.cp_symm_staging_pages)
        _positive("affinity_warm_floor_tokens", self.affinity_warm_floor_tokens)
        _positive("affinity_skip_window", self.affinity_skip_window)
        _non_negative("affinity_max_head_defers", self.affinity_max_head_defers)
        _non_negative("affinity_max_age_s", self.affinity_max_age_s)
        _positive("kv_transfer_bandwidth_gbps", self.kv_transfer_bandwidth_gbps)
        _positive("nvlink_bandwidth_gbps", self.nvlink_bandwidth_gbps)
        _positive("net_bandwidth_gbps", self.net_bandwidth_gbps)
        if self.ep_size not in (1, self.tp_size):
            _fail("ep_size", f"must be 1 or --tp-size {self.tp_size}, got {self.ep_size}")
        _positive("h2d_bandwidth_gbps", self.h2d_bandwidth_gbps)
        _non_negative("seed", self.seed)

        # Enumerations.
        _choice("kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        _choice("schedule_policy", self.schedule_policy, SCHEDULE_POLICIES)
        _choice("hicache_write_policy", self.hicache_write_policy, WRITE_POLICIES)
        _choice("mode", self.mode, MODES)
        _choice("model", self.model, tuple(MODELS))
        if not self.gpu:
            _fail("gpu", "must not be empty")

        # Combinations.
        if self.enable_priority_scheduling and self.schedule_policy not in PRIORITY_POLICIES:
            _fail(
                "enable_priority_scheduling",
                f"requires --schedule-policy fcfs or lof, got {self.schedule_policy}",
            )
        if self.enable_preempt_on_no_token and not self.enable_priority_scheduling:
            _fail("enable_preempt_on_no_token", "requires --enable-priority-scheduling")
        if self.enable_preempt_on_no_token and not self.enable_priority_preemption:
            _fail(
                "enable_preempt_on_no_token",
                "requires priority preemption (--enable-priority-preemption)",
            )
        if (
            self.enable_hierarchical_cache
            and self.hicache_size == 0
            and not self.hicache_ratio > 1.0
        ):
            _fail(
                "hicache_ratio",
                f"must be > 1 with --enable-hierarchical-cache and --hicache-size 0 "
                f"(the host pool must be larger than the device pool), got {self.hicache_ratio}",
            )
        if self.tp_size % self.cp_size:
            _fail("cp_size", f"{self.cp_size} must divide --tp-size {self.tp_size}")
        if self.enable_cp_shared_kv and self.cp_size <= 1:
            _fail("enable_cp_shared_kv", "requires --cp-size > 1 (context parallelism)")
        if self.enable_cp_shared_kv_prefill_bs_gt1 and not self.enable_cp_shared_kv:
            _fail(
                "enable_cp_shared_kv_prefill_bs_gt1",
                "requires --enable-cp-shared-kv (CP shared-KV prefill)",
            )
        extend = self.cp_shared_kv_prefill_max_total_extend_tokens
        if extend is not None and extend % page:
            _fail(
                "cp_shared_kv_prefill_max_total_extend_tokens",
                f"must be a multiple of --page-size {page}, got {extend}",
            )
        if self.cp_prefill_mix_chunked:
            if not self.enable_cp_shared_kv_prefill_bs_gt1:
                _fail("cp_prefill_mix_chunked", "requires --enable-cp-shared-kv-prefill-bs-gt1")
            if self.cp_extend_cap is None:
                _fail(
                    "cp_prefill_mix_chunked",
                    "requires an extend cap: --cp-shared-kv-prefill-max-total-extend-tokens "
                    "or --chunked-prefill-size",
                )
            if self.cp_shared_kv_prefill_max_requests is None:
                _fail(
                    "cp_prefill_mix_chunked",
                    "requires --cp-shared-kv-prefill-max-requests "
                    "(one staging page of tail slack per request)",
                )
            cap_pages, slack_pages, _ = self.staging_identity()
            given = self.cp_symm_staging_pages
            if given is not None and given != cap_pages + slack_pages:
                _fail(
                    "cp_symm_staging_pages",
                    f"{given} breaks the staging identity with --cp-prefill-mix-chunked: "
                    f"extend cap {cap_pages} pages + request slack {slack_pages} pages "
                    f"= {cap_pages + slack_pages}",
                )

    # ----------------------------------------------------------------- derived values
    @property
    def resolved_page_size(self) -> int:
        """The page size (always resolved at construction; kept for readability)."""
        assert self.page_size is not None
        return self.page_size

    @property
    def chunking_enabled(self) -> bool:
        return self.chunked_prefill_size is not None

    @property
    def host_cache_enabled(self) -> bool:
        return self.enable_hierarchical_cache

    @property
    def resolved_kv_cache_dtype(self) -> str:
        """``auto`` resolves to ``bf16``."""
        return "bf16" if self.kv_cache_dtype == "auto" else self.kv_cache_dtype

    @property
    def model_spec(self) -> ModelSpec:
        return get_model(self.model)

    @property
    def resolved_kv_bytes_per_token(self) -> int:
        if self.kv_bytes_per_token is not None:
            return self.kv_bytes_per_token
        return self.model_spec.kv_bytes_per_token(self.resolved_kv_cache_dtype)

    @property
    def kv_lanes(self) -> int:
        """Owner lanes of the KV pool: ``cp_size`` with CP shared-KV, else 1."""
        return self.cp_size if self.enable_cp_shared_kv else 1

    @property
    def cp_extend_cap(self) -> int | None:
        """Static CP extend limit: min of the CP extend limit and the chunk size when both set."""
        limits = [
            v
            for v in (self.cp_shared_kv_prefill_max_total_extend_tokens, self.chunked_prefill_size)
            if v is not None
        ]
        return min(limits) if limits else None

    def staging_identity(self) -> tuple[int, int, int]:
        """``(extend_cap_pages, slack_pages, staging_pages)``.

        ``extend_cap_pages = ceil(cp_extend_cap / page_size)`` (0 without any cap),
        ``slack_pages = cp_shared_kv_prefill_max_requests`` (0 when unset) and
        ``staging_pages`` = the given ``cp_symm_staging_pages`` or, when unset, their sum.
        With ``cp_prefill_mix_chunked`` on, construction guarantees
        ``extend_cap_pages + slack_pages == staging_pages``.
        """
        page = self.resolved_page_size
        cap = self.cp_extend_cap
        cap_pages = 0 if cap is None else -(-cap // page)
        slack = self.cp_shared_kv_prefill_max_requests or 0
        staging = self.cp_symm_staging_pages
        return cap_pages, slack, cap_pages + slack if staging is None else staging

    def total_pages(
        self, weights_bytes_per_gpu: float, device_memory_gb: float | None = None
    ) -> int:
        """KV pool size in pages, all owner lanes together.

        With ``max_total_tokens`` set: ``max_total_tokens // page_size``. Otherwise per-GPU KV
        bytes = ``device_memory_gb·1e9·mem_fraction_static − weights_bytes_per_gpu``, tokens per
        GPU = that // ``resolved_kv_bytes_per_token``, pages per lane = tokens // page_size, and
        the pool has ``kv_lanes`` lanes (CP shared-KV shards the pool over ``cp_size`` GPUs;
        otherwise every GPU holds the full KV). ``device_memory_gb`` defaults to the field.
        """
        page = self.resolved_page_size
        lanes = self.kv_lanes
        if self.max_total_tokens is not None:
            pages = self.max_total_tokens // page
            if pages // lanes <= 0:
                raise ConfigError(
                    f"--max-total-tokens: {self.max_total_tokens} tokens is less than one page "
                    f"of {page} tokens per KV lane ({lanes} lanes)"
                )
            return pages
        mem_gb = self.device_memory_gb if device_memory_gb is None else device_memory_gb
        if mem_gb is None:
            raise ConfigError("--device-memory-gb: not set and no GPU preset value given")
        if not math.isfinite(mem_gb) or mem_gb <= 0:
            given = mem_gb if self.device_memory_gb is None else self.device_memory_gb
            raise ConfigError(f"--device-memory-gb: {given:g} GB is not a usable memory size")
        budget = mem_gb * 1e9 * self.mem_fraction_static
        kv_bytes = budget - weights_bytes_per_gpu
        per_gpu_tokens = int(kv_bytes // self.resolved_kv_bytes_per_token) if kv_bytes > 0 else 0
        pages_per_lane = per_gpu_tokens // page
        if pages_per_lane <= 0:
            raise ConfigError(
                "--mem-fraction-static/--device-memory-gb: no memory left for KV after weights "
                f"({mem_gb:g} GB x {self.mem_fraction_static:g} = {budget / 1e9:.2f} GB, "
                f"weights {weights_bytes_per_gpu / 1e9:.2f} GB per GPU, "
                f"{self.resolved_kv_bytes_per_token} KV bytes per token, page {page})"
            )
        return pages_per_lane * lanes

    def host_pages(self, device_pages: int) -> int:
        """Host (L2) pool size in pages; 0 when the host cache is off.

        ``hicache_size`` GB per GPU when set (per-lane pages × ``kv_lanes``), else
        ``int(device_pages · hicache_ratio)``.
        """
        if not self.host_cache_enabled:
            return 0
        if self.hicache_size > 0:
            per_gpu_tokens = int(self.hicache_size * 1e9) // self.resolved_kv_bytes_per_token
            return (per_gpu_tokens // self.resolved_page_size) * self.kv_lanes
        pages = device_pages * self.hicache_ratio
        if not math.isfinite(pages):
            raise ConfigError(
                f"--hicache-ratio: {self.hicache_ratio:g} x {device_pages} device pages "
                "is too large a host pool"
            )
        return int(pages)

    # ----------------------------------------------------------------- loading
    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """Load a TOML file (top-level keys or a ``[prefillkit]`` table; ``_`` or ``-``)."""
        values = _load_toml_values(path)
        try:
            return cls(**values)  # type: ignore[arg-type]  # NOTE: values checked in __post_init__
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    @classmethod
    def from_sources(cls, toml_path: str | Path | None, flags: dict[str, object]) -> Config:
        """File settings first (if a path is given), then ``flags`` (field names) override."""
        values: dict[str, object] = {}
        if toml_path is not None:
            values.update(_load_toml_values(toml_path))
        flag_names: set[str] = set()
        for key, value in flags.items():
            name = key.replace("-", "_")
            if name not in _FIELD_NAMES:
                raise ConfigError(f"unknown setting {key!r}{_suggest(name, _FIELD_NAMES)}")
            values[name] = value
            flag_names.add(name)
        try:
            return cls(**values)  # type: ignore[arg-type]  # NOTE: values checked in __post_init__
        except ConfigError as exc:
            raise ConfigError(blame_config_file(str(exc), toml_path, flag_names)) from None


def blame_config_file(
    message: str, toml_path: str | Path | None, flag_names: typing.Iterable[str]
) -> str:
    """``message`` prefixed with ``"{toml_path}: "`` when the setting it starts with
    (``--flag ...``) comes from that TOML file rather than from a command-line flag
    (``flag_names``: field names given as flags), so the error names its source."""
    if toml_path is None or message.startswith(f"{toml_path}:"):
        return message
    m = re.match(r"--([a-z0-9-]+)", message)
    if m is None:
        return message
    name = m.group(1).replace("-", "_")
    if name not in _FIELD_NAMES or name in set(flag_names):
        return message
    try:
        in_file = name in _load_toml_values(toml_path)
    except ConfigError:
        return message
    return f"{toml_path}: {message}" if in_file else message


# --------------------------------------------------------------------- type checking

_TypeSpec = tuple[type, bool]  # (base type, nullable)


def _field_types() -> dict[str, _TypeSpec]:
    hints = typing.get_type_hints(Config)
    specs: dict[str, _TypeSpec] = {}
    for f in dataclasses.fields(Config):
        hint = hints[f.name]
        args = typing.get_args(hint)
        if args:
            bases = [a for a in args if a is not type(None)]
            assert len(bases) == 1, f.name
            specs[f.name] = (bases[0], True)
        else:
            specs[f.name] = (hint, False)
    return specs


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config))
_FIELD_TYPES: dict[str, _TypeSpec] = _field_types()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TYPE_WORDS: dict[type, str] = {
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    str: "a string",
}


def _type_error(name: str, value: object, prefix: str = "") -> ConfigError:
    base, nullable = _FIELD_TYPES[name]
    want = _TYPE_WORDS[base] + (" or none" if nullable else "")
    shown = _one_line(repr(value))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    where = prefix or field_flag(name)
    return ConfigError(f"{where}: expected {want}, got {type(value).__name__} {shown}")


def _check_type(name: str, value: object, prefix: str = "") -> object:
    """Return ``value`` (floats normalised) if it fits the field's type, else raise."""
    base, nullable = _FIELD_TYPES[name]
    if value is None:
        if nullable:
            return None
        raise _type_error(name, value, prefix)
    if base is bool:
        if isinstance(value, bool):
            return value
    elif base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64_MIN <= value <= _INT64_MAX:
                where = prefix or field_flag(name)
                digits = len(str(abs(value)))
                raise ConfigError(
                    f"{where}: must fit in a 64-bit integer, got a {digits}-digit number"
                )
            return value
    elif base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            as_float = float(value)
            if not math.isfinite(as_float):
                where = prefix or field_flag(name)
                raise ConfigError(f"{where}: must be a finite number, got {value}")
            return as_float
    elif base is str:
        if isinstance(value, str):
            return value
    raise _type_error(name, value, prefix)


def _fail(name: str, message: str) -> typing.NoReturn:
    raise ConfigError(_one_line(f"{field_flag(name)} {message}"))


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        _fail(name, f"must be positive, got {value}")


def _non_negative(name: str, value: float | None) -> None:
    if value is not None and value < 0:
        _fail(name, f"must be >= 0, got {value}")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        _fail(name, f"must be one of {', '.join(choices)}, got {value!r}{_suggest(value, choices)}")


# --------------------------------------------------------------------- TOML

_NULL_WORDS = frozenset({"none", "null"})


def _load_toml_values(path: str | Path) -> dict[str, object]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer over Python's digit limit
        raise ConfigError(f"{path}: invalid TOML: {_one_line(str(exc))}") from None

    table: dict[str, Any] = data
    if "prefillkit" in data:
        section = data["prefillkit"]
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: 'prefillkit' must be a table ([prefillkit])")
        for key, value in data.items():
            if key != "prefillkit" and not isinstance(value, dict):
                raise ConfigError(
                    f"{path}: setting {key!r} is outside the [prefillkit] table; "
                    "put every setting in the table"
                )
        table = section

    values: dict[str, object] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in _FIELD_NAMES:
            raise ConfigError(f"{path}: unknown setting {key!r}{_suggest(name, _FIELD_NAMES)}")
        if name in values:
            raise ConfigError(f"{path}: setting {key!r} given twice (as '-' and '_' spellings)")
        _, nullable = _FIELD_TYPES[name]
        if nullable and isinstance(value, str) and value.strip().lower() in _NULL_WORDS:
            value = None
        values[name] = _check_type(name, value, prefix=f"{path}: setting {key!r}")
    return values


# --------------------------------------------------------------------- flags


@dataclass(slots=True)
class ParsedFlags:
    """Result of :func:`parse_flags`: typed field values and the ignored SGLang flags."""

    values: dict[str, object] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


_FLAG_TO_FIELD: dict[str, str] = {field_flag(name): name for name in _FIELD_NAMES}

#: SGLang spellings that map onto a field.
_ALIASES: dict[str, str] = {
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--ep": "ep_size",
    "--expert-parallel-size": "ep_size",
    "--attn-cp-size": "cp_size",
}

#: SGLang launch flags accepted and ignored (they do not affect admission): flag → takes value.
_IGNORED_FLAGS: dict[str, bool] = {
    "--model-path": True,
    "--tokenizer-path": True,
    "--host": True,
    "--port": True,
    "--trust-remote-code": False,
    "--served-model-name": True,
    "--dist-init-addr": True,
    "--nnodes": True,
    "--node-rank": True,
    "--log-level": True,
    "--disable-cuda-graph": False,
    "--cuda-graph-max-bs": True,
    "--dp-size": True,
    "--dp": True,
    "--enable-dp-attention": False,
    "--moe-a2a-backend": True,
    "--attention-backend": True,
    "--speculative-algorithm": True,
    "--speculative-num-steps": True,
    "--speculative-eagle-topk": True,
    "--speculative-num-draft-tokens": True,
    "--disaggregation-transfer-backend": True,
    "--disaggregation-ib-device": True,
    "--watchdog-timeout": True,
    "--context-length": True,
    "--quantization": True,
}

_SPECIAL_FLAGS: tuple[str, ...] = ("--disaggregation-mode", "--disable-priority-preemption")
_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def _known_flags() -> list[str]:
    return [*_FLAG_TO_FIELD, *_ALIASES, *_IGNORED_FLAGS, *_SPECIAL_FLAGS]


def _parse_bool(flag: str, text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ConfigError(f"{flag}: expected true or false, got {text!r}")


def _parse_value(flag: str, name: str, text: str) -> object:
    base, nullable = _FIELD_TYPES[name]
    word = text.strip()
    if nullable and word.lower() in _NULL_WORDS:
        return None
    if base is bool:
        return _parse_bool(flag, word)
    if base is int:
        try:
            return int(word, 10)
        except ValueError:
            raise ConfigError(f"{flag}: expected an integer, got {text!r}") from None
    if base is float:
        try:
            value = float(word)
        except ValueError:
            raise ConfigError(f"{flag}: expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"{flag}: must be a finite number, got {text!r}")
        return value
    return word


def parse_flags(argv: list[str], *, allow_repeats: bool = False) -> ParsedFlags:
    """Parse SGLang-spelled flags into ``{field: typed value}`` plus the ignored flags.

    Forms: ``--flag value``, ``--flag=value``; booleans bare (``--flag``), ``--flag=false``,
    ``--flag true|false`` or ``--no-flag``. ``none``/``null`` sets an optional field to None.
    Aliases: ``--tp``/``--tensor-parallel-size`` → tp_size, ``--attn-cp-size`` → cp_size,
    ``--disaggregation-mode prefill`` → mode pd-prefill (``null`` leaves mode alone),
    ``--disable-priority-preemption`` → enable_priority_preemption false. Values are typed
    but not range-checked (``Config`` does that). A setting given twice, by the same flag
    or by two spellings of it (``--tp 4 --tp-size 8``), is refused naming both, unless
    ``allow_repeats`` (layered flags, e.g. a compare variant's on top of the shared ones:
    then the last occurrence wins).
    """
    result = ParsedFlags()
    given: dict[str, str] = {}

    def put(name: str, flag: str, value: object) -> None:
        if not allow_repeats and name in given:
            first = given[name]
            also = "" if first == flag else f" (also given as {first})"
            raise ConfigError(f"{flag}: given twice{also}; give each setting once")
        given[name] = flag
        result.values[name] = value

    i = 0
    n = len(argv)
    while i < n:
        token = argv[i]
        i += 1
        if not token.startswith("--") or token == "--":
            raise ConfigError(f"unexpected argument {token!r} (expected a --flag)")
        flag, eq, inline = token.partition("=")
        flag = flag.replace("_", "-")
        has_inline = bool(eq)

        def take_value(
            flag: str = flag, has_inline: bool = has_inline, inline: str = inline
        ) -> str:
            nonlocal i
            if has_inline:
                return inline
            if i >= n or argv[i].startswith("--"):
                raise ConfigError(f"{flag}: missing value")
            value = argv[i]
            i += 1
            return value

        def bool_value(
            flag: str = flag, has_inline: bool = has_inline, inline: str = inline
        ) -> bool:
            nonlocal i
            if has_inline:
                return _parse_bool(flag, inline)
            if i < n and argv[i].strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
                i += 1
                return _parse_bool(flag, argv[i - 1])
            return True

        name = _FLAG_TO_FIELD.get(flag) or _ALIASES.get(flag)
        if name is not None:
            if _FIELD_TYPES[name][0] is bool:
                put(name, flag, bool_value())
            else:
                put(name, flag, _parse_value(flag, name, take_value()))
            continue
        if flag.startswith("--no-") and _FLAG_TO_FIELD.get("--" + flag[5:]) is not None:
            neg = _FLAG_TO_FIELD["--" + flag[5:]]
            if _FIELD_TYPES[neg][0] is bool:
                if has_inline:
                    raise ConfigError(f"{flag}: takes no value")
                put(neg, flag, False)
                continue
        if flag == "--disable-priority-preemption":
            put("enable_priority_preemption", flag, not bool_value())
            continue
        if flag == "--disaggregation-mode":
            mode = take_value().strip().lower()
            if mode == "prefill":
                put("mode", flag, "pd-prefill")
            elif mode not in _NULL_WORDS:
                raise ConfigError(
                    f"--disaggregation-mode: {mode!r} is not supported "
                    "(prefillkit models the prefill side: use prefill or null)"
                )
            continue
        if flag in _IGNORED_FLAGS:
            if _IGNORED_FLAGS[flag]:
                take_value()
            elif has_inline:
                raise ConfigError(f"{flag}: takes no value")
            result.ignored.append(flag)
            continue
        raise ConfigError(f"unknown flag {flag!r}{_suggest(flag, _known_flags())}")
    return result


# --------------------------------------------------------------------- reporting


def _format_default(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def knob_table() -> list[tuple[str, str, str]]:
    """``(flag, default, meaning)`` for every field, in declaration order."""
    return [
        (field_flag(f.name), _format_default(f.default), str(f.metadata["help"]))
        for f in dataclasses.fields(Config)
    ]


def describe(cfg: Config) -> dict[str, object]:
    """Every field with its resolved value (JSON-serialisable; ``Config(**describe(c))`` works).

    Resolved: ``page_size``, ``kv_cache_dtype`` (auto → bf16), ``kv_bytes_per_token`` (from
    the model preset) and ``cp_symm_staging_pages`` (derived when ``cp_prefill_mix_chunked``).
    """
    out: dict[str, object] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    out["page_size"] = cfg.resolved_page_size
    out["kv_cache_dtype"] = cfg.resolved_kv_cache_dtype
    out["kv_bytes_per_token"] = cfg.resolved_kv_bytes_per_token
    if cfg.cp_prefill_mix_chunked:
        out["cp_symm_staging_pages"] = cfg.staging_identity()[2]
    return out
