"""Every prefillkit knob, declared once: :class:`Knobs`, the fields of
:class:`~prefillkit.app.settings.Config`.

Each field is a knob: its name (spelled like SGLang's ``ServerArgs`` where SGLang has the
flag, so ``chunked_prefill_size`` is ``--chunked-prefill-size``), its type, its default,
and ``help`` and ``group`` metadata (the CLI makes one option per field from them, the
knob table one row). A scheduler knob's default is :class:`SchedulerConfig`'s
(``_sched``): declared there, once. :class:`Knobs` only declares;
:class:`~prefillkit.app.settings.Config` adds the normalisation and the validation, and
the readers of the knobs' sources (:mod:`prefillkit.app.config_file`,
:mod:`prefillkit.app.flags`) type their values from these declarations
(:mod:`prefillkit.app.knob_types`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from prefillkit.models import MODELS
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sim.routers.config import RouterConfig

__all__ = ["GROUPS", "Knobs"]

#: Field groups, in the order a CLI/README should present them.
GROUPS: tuple[str, ...] = (
    "memory",
    "scheduler",
    "priority",
    "hicache",
    "cp",
    "affinity",
    "deployment",
    "fleet",
)


#: The scheduler's own defaults (sched/config.py): a scheduler knob's default is declared
#: there, once.
_SCHED_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(SchedulerConfig)}


def _sched(name: str, help: str, group: str) -> Any:
    """A knob of the scheduler's :class:`SchedulerConfig`: its default is the config's."""
    return _knob(_SCHED_DEFAULTS[name], help, group)


#: The router's own defaults (sim/routers/config.py): a ``router_*`` knob's default is there.
_ROUTER_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(RouterConfig)}


def _router(name: str, help: str) -> Any:
    """A ``router_<name>`` knob: the default is :class:`RouterConfig`'s ``name``'s."""
    return _knob(_ROUTER_DEFAULTS[name], help, "fleet")


def _knob(default: Any, help: str, group: str) -> Any:
    if group not in GROUPS:  # pragma: no cover - programming error
        raise AssertionError(f"unknown group {group!r}")
    return field(default=default, metadata={"help": help, "group": group})


@dataclass(frozen=True, slots=True)
class Knobs:
    """Every prefillkit knob, declared (name, type, default, help, group); not checked:
    :class:`~prefillkit.app.settings.Config` is the validated one."""

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
        0.88,
        "Fraction of GPU memory for weights + KV pool, in (0, 1]. A launch line without it "
        "gets SGLang's GPU-dependent default (GPU memory less its activation and CUDA-graph "
        "reserve: 0.878 for DeepSeek-V3 at TP 8 on H200).",
        "memory",
    )
    device_memory_gb: float | None = _knob(
        None, "Memory per GPU in GB; unset = the GPU preset's.", "memory"
    )

    # ----------------------------------------------------------------- scheduler core
    scheduler: str = _knob(
        "prefillkit",
        "Which admission the replay runs: prefillkit (this package's scheduler), sglang "
        "(SGLang 0.5.23's own admission pass, PrefillAdder, radix tree and pools, on CPU; "
        "needs the sglang extra; pd-prefill only) or sglang+prefillkit (the same with "
        "prefillkit's plugin adder in SGLang). docs/sglang_replay.md.",
        "scheduler",
    )
    max_prefill_tokens: int = _sched(
        "max_prefill_tokens",
        "Legacy input-token budget of one prefill batch (rem_input_tokens).",
        "scheduler",
    )
    chunked_prefill_size: int | None = _sched(
        "chunked_prefill_size",
        "Chunk budget per prefill batch (rem_chunk_tokens); -1 or none disables chunking. "
        "A launch line without it gets SGLang's GPU-dependent default (16384 from 160 GiB "
        "of GPU memory, 8192 from 60 GiB, less below).",
        "scheduler",
    )
    max_running_requests: int | None = _sched(
        "max_running_requests",
        "Slot limit: requests holding KV at once; unset = min(4096, pool tokens / 2).",
        "scheduler",
    )
    schedule_policy: str = _sched(
        "schedule_policy",
        "Waiting-queue order: fcfs, lpm, dfs-weight, lof, random; the zoo (docs/policies.md): "
        "residual-sjf, waiting-qos, session-affinity, loadback-aware, cost-aware.",
        "scheduler",
    )
    lpm_fallback_queue_len: int | None = _sched(
        "lpm_fallback_queue_len",
        "LPM falls back to FCFS when the waiting queue is longer than this (upstream: 128); "
        "-1 or none = never (default: matching is cheap, see benchmarks/RESULTS.md).",
        "scheduler",
    )
    lpm_aging_tokens_per_pass: int = _sched(
        "lpm_aging_tokens_per_pass",
        "LPM's aging term (SGLang #31954): key -(matched prefix + N x passes waited); 0 = off.",
        "scheduler",
    )
    residual_sjf_max_wait_s: float = _sched(
        "residual_sjf_max_wait_s",
        "residual-sjf (vLLM #51375): requests this old go first, in arrival order.",
        "scheduler",
    )
    waiting_qos_window: int = _sched(
        "waiting_qos_window",
        "waiting-qos (vLLM #53277): the first N waiting requests are reordered by cost.",
        "scheduler",
    )
    session_affinity_window: int = _sched(
        "session_affinity_window",
        "session-affinity (vLLM #51384): a continuation among the first N may be promoted.",
        "scheduler",
    )
    session_affinity_min_cached_tokens: int = _sched(
        "session_affinity_min_cached_tokens",
        "session-affinity: the promoted request's device hit is at least this many tokens.",
        "scheduler",
    )
    session_affinity_max_head_wait_s: float = _sched(
        "session_affinity_max_head_wait_s",
        "session-affinity: nothing is promoted once the queue head waited this long.",
        "scheduler",
    )
    session_affinity_ttl_s: float = _sched(
        "session_affinity_ttl_s",
        "session-affinity: a session counts as recent this long after it was scheduled.",
        "scheduler",
    )
    loadback_idle_delay_s: float = _sched(
        "loadback_idle_delay_s",
        "loadback-aware (SGLang #38358): a load-back-only prefill waits this long after "
        "decode stops.",
        "scheduler",
    )
    loadback_age_limit_s: float = _sched(
        "loadback_age_limit_s",
        "loadback-aware: a request this old is no longer deferred.",
        "scheduler",
    )
    cost_aware_slack: float = _sched(
        "cost_aware_slack",
        "cost-aware: a request's deadline is its arrival plus this many times its own "
        "forward; earliest deadline first, never skipped past it (0 = FCFS order).",
        "scheduler",
    )
    cost_aware_max_wait_s: float = _sched(
        "cost_aware_max_wait_s",
        "cost-aware: a deadline lies at most this long after arrival (its starvation "
        "bound; replaces --schedule-max-wait-s).",
        "scheduler",
    )
    schedule_max_wait_s: float | None = _sched(
        "schedule_max_wait_s",
        "Wait bound of lpm, dfs-weight, lof and random: a request waiting this many seconds "
        "goes ahead of the policy's order, oldest first (prefillkit extension; -1 or none = "
        "off, upstream). With affinity on, min(this, --affinity-max-age-s) is used.",
        "scheduler",
    )
    schedule_conservativeness: float = _sched(
        "schedule_conservativeness",
        "Scales the initial new-token ratio (higher = reserve more decode room).",
        "scheduler",
    )
    init_new_token_ratio: float = _sched(
        "init_new_token_ratio",
        "Initial new-token ratio (times --schedule-conservativeness, capped at 1).",
        "scheduler",
    )
    min_new_token_ratio_factor: float = _sched(
        "min_new_token_ratio_factor",
        "Floor of the new-token ratio as a fraction of its initial value.",
        "scheduler",
    )
    new_token_ratio_decay_steps: int = _sched(
        "new_token_ratio_decay_steps",
        "Decode steps for the new-token ratio to decay from initial to floor.",
        "scheduler",
    )
    clip_max_new_tokens: int = _sched(
        "clip_max_new_tokens",
        "Output tokens reserved per request are clipped to this.",
        "scheduler",
    )

    # ----------------------------------------------------------------- priority
    enable_priority_scheduling: bool = _sched(
        "enable_priority_scheduling",
        "Order the queue by request priority (needs fcfs or lof).",
        "priority",
    )
    schedule_low_priority_values_first: bool = _sched(
        "schedule_low_priority_values_first",
        "Lower priority values are more important.",
        "priority",
    )
    enable_priority_aging: bool = _sched(
        "enable_priority_aging",
        "Apply --schedule-max-wait-s under priority scheduling too (aged requests go ahead "
        "of every class); off = strict classes, upstream.",
        "priority",
    )
    priority_scheduling_preemption_threshold: int = _sched(
        "priority_scheduling_preemption_threshold",
        "Preempt only victims whose priority differs by more than this.",
        "priority",
    )
    enable_priority_preemption: bool = _sched(
        "enable_priority_preemption",
        "Preempt lower-priority running requests when the slot limit blocks a higher one.",
        "priority",
    )
    enable_preempt_on_no_token: bool = _sched(
        "enable_preempt_on_no_token",
        "prefillkit extension: also preempt when memory (NO_TOKEN) blocks a higher-priority "
        "request.",
        "priority",
    )
    enable_ignore_eos_admission: bool = _sched(
        "enable_ignore_eos_admission",
        "Upstream's add_one_req_ignore_eos test for ignore_eos requests: the whole output "
        "(not clipped, ratio 1.0) of every running and admitted request must fit the "
        "current free + evictable tokens as requests finish (upstream takes this path only "
        "with the radix cache disabled; here it is added to the normal test).",
        "scheduler",
    )

    # ----------------------------------------------------------------- hicache
    enable_hierarchical_cache: bool = _sched(
        "enable_hierarchical_cache", "Enable the host (L2) KV cache tier (HiCache).", "hicache"
    )
    hicache_ratio: float = _knob(
        2.0,
        "Host pool size as a multiple of the device pool (used when --hicache-size is 0).",
        "hicache",
    )
    hicache_size: int = _knob(
        0, "Host pool size in GB per GPU; 0 = use --hicache-ratio.", "hicache"
    )
    hicache_write_policy: str = _sched(
        "hicache_write_policy",
        "Host backup policy: write_through, write_through_selective or write_back.",
        "hicache",
    )
    hicache_write_through_threshold: int = _sched(
        "hicache_write_through_threshold",
        "Hits (requests caching the prefix) before a write_through_selective backup.",
        "hicache",
    )
    hicache_load_back_threshold: int = _sched(
        "hicache_load_back_threshold",
        "Host hits shorter than this many tokens are not loaded back.",
        "hicache",
    )

    # ----------------------------------------------------------------- context parallel
    tp_size: int = _knob(1, "Tensor-parallel degree (GPUs per instance).", "cp")
    cp_size: int = _sched("cp_size", "Context-parallel degree; must divide --tp-size.", "cp")
    enable_cp_shared_kv: bool = _sched(
        "enable_cp_shared_kv",
        "CP shared-KV: the KV pool is sharded over cp_size owner lanes.",
        "cp",
    )
    enable_cp_shared_kv_prefill_bs_gt1: bool = _sched(
        "enable_cp_shared_kv_prefill_bs_gt1",
        "Allow several requests per CP shared-KV prefill batch.",
        "cp",
    )
    cp_shared_kv_prefill_max_requests: int | None = _sched(
        "cp_shared_kv_prefill_max_requests",
        "CP bs>1: most requests per prefill batch; unset = unlimited.",
        "cp",
    )
    cp_shared_kv_prefill_max_total_extend_tokens: int | None = _sched(
        "cp_shared_kv_prefill_max_total_extend_tokens",
        "CP bs>1: most extend tokens per batch (page-aligned); capped by the chunk budget.",
        "cp",
    )
    cp_shared_kv_prefill_max_cached_tokens: int | None = _sched(
        "cp_shared_kv_prefill_max_cached_tokens",
        "CP bs>1: most cached (L1 + loaded L2) tokens per batch; unset = unlimited.",
        "cp",
    )
    cp_shared_kv_prefill_max_buffer_size: int | None = _sched(
        "cp_shared_kv_prefill_max_buffer_size",
        "CP bs>1: most estimated temporary-buffer bytes per batch; unset = unlimited.",
        "cp",
    )
    cp_prefill_mix_chunked: bool = _sched(
        "cp_prefill_mix_chunked",
        "Experimental: admit followers after a tail chunk in a CP bs>1 batch.",
        "cp",
    )
    cp_symm_staging_pages: int | None = _sched(
        "cp_symm_staging_pages",
        "Symmetric staging capacity in pages; must equal extend-cap pages + max requests "
        "(unset = derived).",
        "cp",
    )

    # ----------------------------------------------------------------- affinity
    enable_affinity: bool = _sched(
        "enable_affinity",
        "Warm/cold cache-affinity admission (cold skipped behind a warm lead).",
        "affinity",
    )
    affinity_warm_floor_tokens: int = _sched(
        "affinity_warm_floor_tokens",
        "A candidate is warm if device prefix + host hit reaches this many tokens.",
        "affinity",
    )
    affinity_skip_window: int = _sched(
        "affinity_skip_window",
        "Most cold skips per admission pass (W) before the scan stops.",
        "affinity",
    )
    affinity_max_head_defers: int = _sched(
        "affinity_max_head_defers",
        "Passes a cold request may be skipped (K) before the scan stops at it.",
        "affinity",
    )
    affinity_max_age_s: float = _sched(
        "affinity_max_age_s",
        "Cold requests waiting this long (T, seconds) stop the scan instead.",
        "affinity",
    )

    affinity_hold: bool = _sched(
        "affinity_hold",
        "Affinity variant: warm requests are scanned before cold ones, so a deferred cold "
        "request leads no batch while warm work waits (until T or K releases it).",
        "affinity",
    )
    affinity_classify: str = _sched(
        "affinity_classify",
        "Affinity variant: floor (cold = cached prefix under the warm floor) or cost (cold = "
        "adds more than --affinity-heavy-ratio x the forward it joins).",
        "affinity",
    )
    affinity_heavy_ratio: float = _sched(
        "affinity_heavy_ratio",
        "With --affinity-classify cost: the marginal forward time, as a share of the "
        "batch's, from which a candidate is cold.",
        "affinity",
    )

    # ----------------------------------------------------------------- deployment / simulator
    model: str = _knob("glm-5", f"Model preset: {', '.join(MODELS)}.", "deployment")
    model_path: str | None = _knob(
        None,
        "SGLang's --model-path: a Hugging Face id of a preset selects it "
        "(deepseek-ai/DeepSeek-V3 -> deepseek-v3, ...); a local config.json, or a folder "
        "holding one, is read; any other id needs --model-config.",
        "deployment",
    )
    model_config: str | None = _knob(
        None,
        "A Hugging Face config.json (or a folder holding one) to build the model from "
        "(layers, heads, KV/latent dims, experts, DSA indexer, dtype); wins over --model "
        "and --model-path's preset.",
        "deployment",
    )
    gpu: str = _knob("h200", "GPU preset name (validated by the simulator).", "deployment")
    mode: str = _knob(
        "pd-prefill", "pd-prefill (prefill instance of a PD pair) or colocated.", "deployment"
    )
    engine_style: str = _knob(
        "sglang",
        "How the engine runs steps: sglang (prefill batches alone, decode between them) or "
        "vllm (every prefill forward carries the decode tokens; colocated; docs/vllm.md).",
        "deployment",
    )
    ep_size: int = _knob(
        1,
        "Expert-parallel degree of the MoE layers: 1 (MoE tensor-parallel over --tp-size) "
        "or --tp-size (all-to-all dispatch/combine), as SGLang's --ep-size.",
        "deployment",
    )
    enable_dp_attention: bool = _knob(
        False,
        "DP attention inside the instance: --dp-size schedulers, each over its own KV pool, "
        "prefix cache and queue, in lockstep forwards (SGLang's flag; --attn-dp-size N is "
        "the same). docs/dp_attention.md.",
        "deployment",
    )
    dp_size: int = _knob(
        1,
        "DP attention ranks with --enable-dp-attention (SGLang's --dp-size, --dp, "
        "--data-parallel-size); must divide --tp-size / --cp-size. Without it, N > 1 "
        "(replicas) is refused: use --instances N.",
        "deployment",
    )
    load_balance_method: str = _knob(
        "auto",
        "How the DP controller picks a request's DP rank: auto (follow_bootstrap_room on a "
        "PD prefill server, else round_robin), round_robin, follow_bootstrap_room (a hash "
        "of the request id here), total_requests or total_tokens.",
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
    cost_model: str = _knob(
        "roofline",
        "What times a simulated forward: roofline (per-rank roofline, the default) or aic "
        "(NVIDIA AIConfigurator's measured kernel tables per GPU and engine version, the "
        "roofline for what they lack; needs the aic extra).",
        "deployment",
    )
    small_gemm: str = _knob(
        "tiles",
        "The roofline's small-GEMM assumption: tiles (tile padding and wave quantisation "
        "from the GPU's SM count), sqrt-h100 (prefillkit 0.2's H100 curve) or ideal (no "
        "small-GEMM loss).",
        "deployment",
    )
    open_loop: bool = _knob(
        False,
        "Send every turn of an agent session at its trace time (open-loop) instead of "
        "after the previous turn's answer + think time (closed-loop, the default).",
        "deployment",
    )
    session_decode_tokens_per_s: float | None = _knob(
        None,
        "Decode speed that times a session turn's answer from its first token; unset = "
        "the simulated decode (colocated) or this deployment's batch-1 decode step "
        "(pd-prefill). A stated --agentic-decode-tokens-per-s sets it too.",
        "deployment",
    )
    seed: int = _sched("seed", "Random seed.", "deployment")
    debug_check_invariants: bool = _knob(
        False, "Check scheduler/cache invariants after every step (slow).", "deployment"
    )
    # ----------------------------------------------------------------- fleet and router
    instances: int = _knob(
        1,
        "Instances in the fleet, each this deployment, behind --router (1: one instance, "
        "no router). docs/fleet.md.",
        "fleet",
    )
    fleet: str | None = _knob(
        None,
        "A fleet file (TOML: [router] and [[instance]] tables, each instance this run's "
        "settings with its own on top). docs/fleet.md.",
        "fleet",
    )
    router: str = _router(
        "name",
        "How a fleet routes each request: round-robin, least-load, power-of-two, "
        "cache-aware (sglang-router), kv-cost (Dynamo's KV router) or weighted (llm-d's "
        "scorers). docs/routers.md.",
    )
    router_prefix_source: str | None = _router(
        "prefix_source",
        "What the router knows of each instance's cache: exact (KV events) or "
        "approximate (its own routing history); unset = the router's own.",
    )
    router_cache_threshold: float = _router(
        "cache_threshold", "cache-aware: the prefix match rate above which it follows the match."
    )
    router_balance_abs_threshold: int = _router(
        "balance_abs_threshold", "cache-aware: load gap (requests) that counts as imbalanced."
    )
    router_balance_rel_threshold: float = _router(
        "balance_rel_threshold", "cache-aware: load ratio that counts as imbalanced."
    )
    router_max_tree_size: int = _router(
        "max_tree_size", "cache-aware (approximate): tokens each instance's tree keeps."
    )
    router_eviction_interval_s: float = _router(
        "eviction_interval_s", "cache-aware (approximate): seconds between tree evictions."
    )
    router_overlap_score_weight: float = _router(
        "overlap_score_weight", "kv-cost: weight of the blocks to prefill against decode blocks."
    )
    router_temperature: float = _router(
        "temperature", "kv-cost: softmax temperature (0: the lowest cost)."
    )
    router_prefix_weight: float = _router("prefix_weight", "weighted: prefix scorer weight.")
    router_queue_weight: float = _router("queue_weight", "weighted: queue scorer weight.")
    router_kv_usage_weight: float = _router(
        "kv_usage_weight", "weighted: KV-cache utilisation scorer weight."
    )
