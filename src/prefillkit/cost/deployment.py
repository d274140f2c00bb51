"""The simulated deployment: model, GPUs, parallelism, links and memory sizing.

:class:`SimSettings` holds what the simulator needs beyond the scheduler's own
:class:`~prefillkit.sched.config.SchedulerConfig` (which it carries as ``scheduler``): the
model's shapes, the GPU preset and its link overrides, TP/EP (CP comes from the scheduler
config: it shapes admission), DP attention (``docs/dp_attention.md``), two-batch overlap,
the KV dtype and bytes, the memory sizing
that turns GPU memory into KV pool pages (:meth:`SimSettings.total_pages`,
:meth:`SimSettings.host_pages`) and the debug invariant check. Validated at construction;
errors are one-line :class:`~prefillkit.sched.config.ConfigError` naming the flag.

It imports nothing from the application layer: the command line's flat settings
(``prefillkit.app.settings``) produce one of these; a script can build one directly::

    SimSettings(SchedulerConfig(page_size=64, cp_size=8, enable_cp_shared_kv=True),
                model=get_model("glm-5"), gpu="h200", tp_size=8)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from prefillkit.cost.gemm import SMALL_GEMM_MODELS
from prefillkit.cost.gpus import GpuSpec, get_gpu
from prefillkit.models import ModelSpec, get_model
from prefillkit.sched.config import (
    ConfigError,
    SchedulerConfig,
    check_choice,
    check_non_negative,
    check_positive,
    fail,
)

__all__ = [
    "COST_MODELS",
    "KV_CACHE_DTYPES",
    "LOAD_BALANCE_METHODS",
    "MODES",
    "SMALL_GEMM_MODELS",
    "SimSettings",
]

MODES: tuple[str, ...] = ("pd-prefill", "colocated")
#: How the engine runs steps (sim/vllm_style.py): ``sglang`` (prefill batches alone,
#: decode between them) or ``vllm`` (every prefill forward carries the decode tokens).
ENGINE_STYLES: tuple[str, ...] = ("sglang", "vllm")
#: ``--cost-model``: the roofline (prefillkit.cost.roofline) or AIConfigurator's measured
#: kernel tables (prefillkit.cost.aic, the ``aic`` extra).
COST_MODELS: tuple[str, ...] = ("roofline", "aic")

KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "bf16", "fp8_e4m3", "fp8_e5m2")

#: ``--load-balance-method``: SGLang 0.5.23's choices (``arg_groups/fields/parallel.py``);
#: ``auto`` resolves to ``follow_bootstrap_room`` on a PD prefill server, else
#: ``round_robin`` (``arg_groups/serving_hook.py`` ``handle_load_balance_method``).
LOAD_BALANCE_METHODS: tuple[str, ...] = (
    "auto",
    "round_robin",
    "follow_bootstrap_room",
    "total_requests",
    "total_tokens",
)


def _glm5() -> ModelSpec:
    return get_model("glm-5")


@dataclass(frozen=True, slots=True)
class SimSettings:
    """A deployment the simulator can replay on; validated at construction.

    ``model`` is the architecture itself (a preset of :mod:`prefillkit.models` or one
    built from a Hugging Face ``config.json``); ``gpu`` a preset name of
    :mod:`prefillkit.cost.gpus` (checked when the engine is built). Immutable.
    """

    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    model: ModelSpec = field(default_factory=_glm5)
    gpu: str = "h200"
    mode: str = "pd-prefill"
    tp_size: int = 1
    ep_size: int = 1
    # DP attention (sim/dp_attention.py): dp_size schedulers in one instance.
    enable_dp_attention: bool = False
    dp_size: int = 1
    load_balance_method: str = "auto"
    enable_two_batch_overlap: bool = False
    nvlink_bandwidth_gbps: float | None = None
    net_bandwidth_gbps: float | None = None
    kv_transfer_bandwidth_gbps: float = 50.0
    h2d_bandwidth_gbps: float = 25.0
    # KV bytes and pool sizing.
    kv_cache_dtype: str = "auto"
    kv_bytes_per_token: int | None = None
    mem_fraction_static: float = 0.88
    device_memory_gb: float | None = None
    max_total_tokens: int | None = None
    hicache_ratio: float = 2.0
    hicache_size: int = 0
    # Forward-time model.
    cost_model: str = "roofline"
    small_gemm: str = "tiles"
    # Agent sessions (sim/closed_loop.py): open-loop sends every turn at its trace time;
    # the answer rate times a turn's answer from its first token (None: see engine.py).
    open_loop: bool = False
    # How the engine runs steps: sglang (prefill batches alone) or vllm (decode tokens in
    # every prefill forward; sim/vllm_style.py).
    engine_style: str = "sglang"
    session_decode_tokens_per_s: float | None = None
    debug_check_invariants: bool = False

    def __post_init__(self) -> None:
        check_positive("max_total_tokens", self.max_total_tokens)
        check_positive("kv_bytes_per_token", self.kv_bytes_per_token)
        if not 0.0 < self.mem_fraction_static <= 1.0:
            fail("mem_fraction_static", f"must be in (0, 1], got {self.mem_fraction_static}")
        check_positive("device_memory_gb", self.device_memory_gb)
        if self.hicache_ratio <= 0:
            fail("hicache_ratio", f"must be positive, got {self.hicache_ratio}")
        check_non_negative("hicache_size", self.hicache_size)
        check_positive("tp_size", self.tp_size)
        check_positive("kv_transfer_bandwidth_gbps", self.kv_transfer_bandwidth_gbps)
        check_positive("nvlink_bandwidth_gbps", self.nvlink_bandwidth_gbps)
        check_positive("net_bandwidth_gbps", self.net_bandwidth_gbps)
        if self.ep_size not in (1, self.tp_size):
            fail("ep_size", f"must be 1 or --tp-size {self.tp_size}, got {self.ep_size}")
        check_positive("h2d_bandwidth_gbps", self.h2d_bandwidth_gbps)
        check_positive("session_decode_tokens_per_s", self.session_decode_tokens_per_s)
        check_choice("kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        check_choice("mode", self.mode, MODES)
        check_choice("cost_model", self.cost_model, COST_MODELS)
        check_choice("small_gemm", self.small_gemm, SMALL_GEMM_MODELS)
        self._validate_engine_style()
        if not self.gpu:
            fail("gpu", "must not be empty")
        if (
            self.scheduler.enable_hierarchical_cache
            and self.hicache_size == 0
            and not self.hicache_ratio > 1.0
        ):
            fail(
                "hicache_ratio",
                f"must be > 1 with --enable-hierarchical-cache and --hicache-size 0 "
                f"(the host pool must be larger than the device pool), got {self.hicache_ratio}",
            )
        if self.tp_size % self.cp_size:
            fail("cp_size", f"{self.cp_size} must divide --tp-size {self.tp_size}")
        self._validate_dp()

    def _validate_engine_style(self) -> None:
        """vLLM's engine style mixes decode into prefill forwards: a colocated instance
        without SGLang-only features (CP shared-KV prefill, HiCache, DP attention)."""
        check_choice("engine_style", self.engine_style, ENGINE_STYLES)
        if self.engine_style != "vllm":
            return
        if self.mode != "colocated":
            fail("engine_style", "vllm runs decode in the prefill forwards: needs --mode colocated")
        sched = self.scheduler
        for name, on in (
            ("--cp-size", sched.cp_size > 1),
            ("--enable-hierarchical-cache", sched.enable_hierarchical_cache),
            ("--enable-dp-attention", self.enable_dp_attention),
        ):
            if on:
                fail("engine_style", f"vllm: not with {name} (an SGLang feature)")

    def _validate_dp(self) -> None:
        """DP attention as SGLang 0.5.23 accepts it (``arg_groups/parallel_hook.py``:
        ``handle_data_parallelism``, ``handle_context_parallelism``); ``--dp-size`` without
        it (data-parallel replicas) is a fleet here."""
        check_positive("dp_size", self.dp_size)
        check_choice("load_balance_method", self.load_balance_method, LOAD_BALANCE_METHODS)
        dp = self.dp_size
        if dp > 1 and not self.enable_dp_attention:
            fail(
                "dp_size",
                f"{dp} without --enable-dp-attention is {dp} full replicas behind SGLang's "
                f"DP controller: simulate them as a fleet, --instances {dp} --router "
                "round-robin",
            )
        if dp == 1 or not self.enable_dp_attention:
            return
        if self.tp_size % (dp * self.cp_size):
            fail(
                "dp_size",
                f"{dp} x --cp-size {self.cp_size} must divide --tp-size {self.tp_size} "
                "(SGLang: tp_size must be divisible by attn_dp_size * attn_cp_size)",
            )
        if self.cost_model != "roofline":
            fail(
                "enable_dp_attention",
                f"is priced by the roofline only (its lockstep forward over the DP ranks); "
                f"not with --cost-model {self.cost_model}",
            )
        self.dp_rank_scheduler()

    def dp_rank_scheduler(self) -> SchedulerConfig:
        """The scheduler config of each DP attention rank, as SGLang 0.5.23 adjusts its
        server args under DP attention (``parallel_hook.py`` ``handle_data_parallelism``):
        ``chunked_prefill_size // dp`` (its checks then assert a multiple of the page
        size), ``schedule_conservativeness × 0.3``; ``max_running_requests // dp`` (at least
        1) per rank (``KVCacheConfigurator.resolve_max_num_reqs``). Without DP attention,
        ``scheduler`` itself."""
        sc = self.scheduler
        dp = self.attn_dp_size
        if dp == 1:
            return sc
        chunk = sc.chunked_prefill_size
        if chunk is not None and (chunk // dp < sc.page_size or (chunk // dp) % sc.page_size):
            fail(
                "chunked_prefill_size",
                f"{chunk} // --dp-size {dp} = {chunk // dp} tokens per DP attention rank: "
                f"must be a positive multiple of --page-size {sc.page_size} (SGLang divides "
                "the chunk by the DP size, then asserts it)",
            )
        running = sc.max_running_requests
        return dataclasses.replace(
            sc,
            chunked_prefill_size=None if chunk is None else chunk // dp,
            schedule_conservativeness=sc.schedule_conservativeness * 0.3,
            max_running_requests=None if running is None else max(1, running // dp),
        )

    # ----------------------------------------------------------------- derived values
    @property
    def page_size(self) -> int:
        """The scheduler's page size."""
        return self.scheduler.page_size

    @property
    def cp_size(self) -> int:
        """The scheduler's context-parallel degree."""
        return self.scheduler.cp_size

    @property
    def kv_lanes(self) -> int:
        """Owner lanes of the KV pool (the scheduler's)."""
        return self.scheduler.kv_lanes

    @property
    def attn_dp_size(self) -> int:
        """DP attention ranks: ``dp_size`` with ``enable_dp_attention``, else 1 (SGLang's
        ``handle_deprecated_dp_attention`` turns ``--dp-size N --enable-dp-attention`` into
        ``attn_dp_size = N``)."""
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def attn_tp_size(self) -> int:
        """GPUs that share one attention instance: ``tp / (cp × attn_dp)`` (SGLang's
        ``derive_attn_tp_size``), at least 1."""
        return max(1, self.tp_size // (self.cp_size * self.attn_dp_size))

    @property
    def resolved_load_balance_method(self) -> str:
        """``load_balance_method`` with ``auto`` resolved as SGLang 0.5.23 does:
        ``follow_bootstrap_room`` on a PD prefill server, else ``round_robin``."""
        if self.load_balance_method != "auto":
            return self.load_balance_method
        return "follow_bootstrap_room" if self.mode == "pd-prefill" else "round_robin"

    @property
    def model_spec(self) -> ModelSpec:
        """The model (same as ``model``)."""
        return self.model

    @property
    def resolved_kv_cache_dtype(self) -> str:
        """``auto`` resolves to ``bf16``."""
        return "bf16" if self.kv_cache_dtype == "auto" else self.kv_cache_dtype

    @property
    def resolved_kv_bytes_per_token(self) -> int:
        """``kv_bytes_per_token``, else the model's for the KV dtype."""
        if self.kv_bytes_per_token is not None:
            return self.kv_bytes_per_token
        return self.model.kv_bytes_per_token(self.resolved_kv_cache_dtype)

    @property
    def kv_bytes_per_token_per_rank(self) -> float:
        """KV bytes one GPU holds per token, as SGLang sizes its pool: a GQA model's KV
        heads are split over the attention-TP ranks, ``max(1, kv_heads // attn_tp)`` heads
        each (SGLang's ``ModelConfig.get_num_kv_heads``: replicated when there are fewer
        heads than ranks; ``attn_tp`` is :attr:`attn_tp_size`, DP attention included);
        MLA keeps the whole latent on every rank (shared-KV CP shards it over the owner
        lanes instead, :attr:`kv_lanes`)."""
        full = self.resolved_kv_bytes_per_token
        m = self.model
        if m.attention != "gqa" or m.num_kv_heads <= 0:
            return float(full)
        local = max(1, m.num_kv_heads // self.attn_tp_size)
        return full * local / m.num_kv_heads

    def gpu_spec(self) -> GpuSpec:
        """The GPU preset named by ``gpu`` with the interconnect overrides applied.

        Raises ``KeyError`` for an unknown GPU name.
        """
        gpu = get_gpu(self.gpu)
        if self.nvlink_bandwidth_gbps is not None:
            gpu = dataclasses.replace(gpu, nvlink_bandwidth=self.nvlink_bandwidth_gbps * 1e9)
        if self.net_bandwidth_gbps is not None:
            gpu = dataclasses.replace(gpu, net_bandwidth=self.net_bandwidth_gbps * 1e9)
        return gpu

    def total_pages(
        self, weights_bytes_per_gpu: float, device_memory_gb: float | None = None
    ) -> int:
        """KV pool size in pages, all owner lanes together: one scheduler's pool (with
        DP attention, each DP rank's: SGLang sizes the pool per GPU, and a rank's
        ``attn_tp`` GPUs hold its requests' KV; ``--max-total-tokens`` caps each rank's
        pool, ``KVCacheConfigurator._apply_token_constraints`` in every model runner).

        With ``max_total_tokens`` set: ``max_total_tokens // page_size``. Otherwise per-GPU KV
        bytes = ``device_memory_gb·1e9·mem_fraction_static − weights_bytes_per_gpu``, tokens per
        GPU = that // :attr:`kv_bytes_per_token_per_rank`, pages per lane = tokens // page_size, and
        the pool has ``kv_lanes`` lanes (CP shared-KV shards the pool over ``cp_size`` GPUs;
        otherwise every GPU holds the full KV). ``device_memory_gb`` defaults to the field.
        """
        page = self.page_size
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
        per_rank = self.kv_bytes_per_token_per_rank
        per_gpu_tokens = int(kv_bytes // per_rank) if kv_bytes > 0 else 0
        pages_per_lane = per_gpu_tokens // page
        if pages_per_lane <= 0:
            raise ConfigError(
                "--mem-fraction-static/--device-memory-gb: no memory left for KV after weights "
                f"({mem_gb:g} GB x {self.mem_fraction_static:g} = {budget / 1e9:.2f} GB, "
                f"weights {weights_bytes_per_gpu / 1e9:.2f} GB per GPU of {self.model.name} "
                f"on {self.tp_size} GPUs, {self.resolved_kv_bytes_per_token} KV bytes per "
                f"token, page {page}); check --model-path/--model and --tp-size"
            )
        return pages_per_lane * lanes

    def host_pages(self, device_pages: int) -> int:
        """Host (L2) pool size in pages; 0 when the host cache is off.

        ``hicache_size`` GB per GPU when set (per-lane pages × ``kv_lanes``), else
        ``int(device_pages · hicache_ratio)``.
        """
        if not self.scheduler.enable_hierarchical_cache:
            return 0
        if self.hicache_size > 0:
            per_gpu_tokens = int(self.hicache_size * 1e9 // self.kv_bytes_per_token_per_rank)
            return (per_gpu_tokens // self.page_size) * self.kv_lanes
        pages = device_pages * self.hicache_ratio
        if not math.isfinite(pages):
            raise ConfigError(
                f"--hicache-ratio: {self.hicache_ratio:g} x {device_pages} device pages "
                "is too large a host pool"
            )
        return int(pages)
