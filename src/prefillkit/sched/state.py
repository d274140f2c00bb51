# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The scheduler's state: one object every concern module reads and mutates.

:class:`SchedulerState` holds the pool, the prefix cache, the waiting queue, the running
and decoding requests, the decode reservation ratio, the affinity and wait bounds and
the run-long counters. The modules that change it say what they mutate:
``sched/waiting.py`` (arrivals and the queue), ``sched/prefill_pass.py`` (the admission
pass), ``sched/launch.py`` (a batch's pages and the step the engine runs, then what its
forward computed), ``sched/decode.py`` (decode, retraction, release) and
``sched/preempt.py`` (priority preemption). :class:`~prefillkit.sched.scheduler.Scheduler`
is the facade an engine calls; it owns one state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from random import Random
from typing import Any

from prefillkit.cache.host import HostTier
from prefillkit.cache.pool import KVPool
from prefillkit.cache.prefix import PrefixCache
from prefillkit.request import Request
from prefillkit.sched.adder import AdmissionLimits
from prefillkit.sched.affinity import AffinityBounds
from prefillkit.sched.batch import PrefillBatch
from prefillkit.sched.buffer import BufferEstimatorContext
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.lpm_order import LpmOrder
from prefillkit.sched.policy_pass import PolicyRuntime, runtime_for
from prefillkit.sched.step import AdmissionObserver, StepOutput
from prefillkit.sched.verdicts import CloseReason, CpMode


@dataclass(slots=True)
class SchedulerStats:
    """Run-long counters. Affinity counters name what they count:

    - ``affinity_skips``: skip decisions (a cold request left queued behind a warm lead),
      which are also the request-passes deferred (a request is skipped at most once a
      pass); ``affinity_deferred_requests``: distinct requests deferred at least once;
    - W: ``affinity_skip_passes`` (passes with a skip), ``affinity_max_skips_in_pass``;
    - K: ``affinity_max_deferred_passes`` (most passes any one request was deferred);
    - ``affinity_stops`` and, by the bound that tripped, ``affinity_stops_w`` /
      ``_k`` / ``_t`` (W checked first, then K, then T).

    ``empty_passes``: passes that admitted nothing, by :class:`CloseReason` value (an
    empty queue, memory, the request-slot limit, or the limit that closed the pass).
    ``log_input_tokens`` / ``log_hit_tokens``: upstream's counters summed over batches.
    """

    passes: int = 0
    affinity_skips: int = 0
    affinity_deferred_requests: int = 0
    affinity_skip_passes: int = 0
    affinity_max_skips_in_pass: int = 0
    affinity_max_deferred_passes: int = 0
    affinity_stops: int = 0
    affinity_stops_w: int = 0
    affinity_stops_k: int = 0
    affinity_stops_t: int = 0
    preemptions: int = 0
    retractions: int = 0
    rejected: int = 0
    policy_skips: int = 0
    policy_stops: int = 0
    empty_passes: dict[str, int] = field(default_factory=dict)
    log_input_tokens: int = 0
    log_hit_tokens: int = 0


def build_limits(
    cfg: SchedulerConfig, buffer_ctx: BufferEstimatorContext | None
) -> AdmissionLimits:
    """The adder's per-pass limits from the scheduler's settings."""
    if cfg.cp_size > 1:
        cp_mode = CpMode.BS_GT1 if cfg.enable_cp_shared_kv_prefill_bs_gt1 else CpMode.BS1
    else:
        cp_mode = CpMode.OFF
    return AdmissionLimits(
        page_size=cfg.page_size,
        max_prefill_tokens=cfg.max_prefill_tokens,
        chunked_prefill_size=cfg.chunked_prefill_size,
        clip_max_new_tokens=cfg.clip_max_new_tokens,
        cp_mode=cp_mode,
        cp_max_requests=cfg.cp_shared_kv_prefill_max_requests,
        cp_max_total_extend_tokens=cfg.cp_shared_kv_prefill_max_total_extend_tokens,
        cp_max_cached_tokens=cfg.cp_shared_kv_prefill_max_cached_tokens,
        cp_max_buffer_size=cfg.cp_shared_kv_prefill_max_buffer_size,
        cp_prefill_mix_chunked=cfg.cp_prefill_mix_chunked,
        ignore_eos_admission=cfg.enable_ignore_eos_admission,
        load_back_threshold=cfg.hicache_load_back_threshold,
        buffer_ctx=buffer_ctx,
        staging_identity=cfg.staging_identity() if cfg.cp_prefill_mix_chunked else None,
    )


def wait_bound(cfg: SchedulerConfig, affinity_on: bool) -> float | None:
    """The wait bound (policy.order_waiting): requests this old go first, oldest first.
    With affinity on, its age bound T is a wait bound too: a cold request T old is at the
    front of any ordering, where no warm lead can skip it."""
    max_wait = cfg.schedule_max_wait_s
    if affinity_on:
        t = cfg.affinity_max_age_s
        if max_wait is None or t < max_wait:
            max_wait = t
    return max_wait


def build_cache(
    cfg: SchedulerConfig, total_pages: int, key_tokens: int, host_pages: int
) -> PrefixCache:
    """The prefix cache over a pool of ``total_pages`` pages (one owner lane per CP rank
    with shared KV) and, with HiCache, a host tier of ``host_pages`` pages."""
    lanes = cfg.cp_size if cfg.enable_cp_shared_kv else 1
    host = (
        HostTier(host_pages, cfg.hicache_write_policy, cfg.hicache_write_through_threshold)
        if cfg.enable_hierarchical_cache
        else None
    )
    return PrefixCache(KVPool(total_pages, cfg.page_size, lanes), key_tokens, host)


def new_token_ratios(cfg: SchedulerConfig) -> tuple[float, float, float]:
    """Upstream's decode reservation ratio: (initial, floor, decay per decode step)."""
    init = min(cfg.init_new_token_ratio * cfg.schedule_conservativeness, 1.0)
    floor = init * cfg.min_new_token_ratio_factor
    return init, floor, (init - floor) / cfg.new_token_ratio_decay_steps


class SchedulerState:
    """Everything one scheduler holds. Built once; the concern modules mutate it."""

    def __init__(
        self,
        cfg: SchedulerConfig,
        total_pages: int,
        key_tokens: int,
        host_pages: int,
        buffer_ctx: BufferEstimatorContext | None,
        reserve_decode: bool,
    ) -> None:
        self.cfg = cfg
        self.page_size = cfg.page_size
        self.cache = build_cache(cfg, total_pages, key_tokens, host_pages)
        self.pool = self.cache.pool
        self.limits = build_limits(cfg, buffer_ctx)
        # Whether passes reserve decode room for decoding requests (colocated).
        self.reserve_decode = reserve_decode
        # The waiting queue. NOTE: insertion-ordered = arrival order; O(1) removal of
        # admitted requests.
        self.waiting: dict[Request, None] = {}
        self.last_arrival = float("-inf")
        self.chunked_req: Request | None = None
        self.running: dict[str, Request] = {}  # every request holding KV
        self.decoding: list[Request] = []
        self.max_running_requests = cfg.max_running_requests or max(
            1, min(4096, total_pages * cfg.page_size // 2)
        )
        ratios = new_token_ratios(cfg)
        self.init_new_token_ratio, self.min_new_token_ratio, self.new_token_ratio_decay = ratios
        self.new_token_ratio = self.init_new_token_ratio
        self.affinity_on = cfg.enable_affinity and not cfg.enable_priority_scheduling
        self.affinity_bounds = AffinityBounds(
            cfg.affinity_warm_floor_tokens,
            cfg.affinity_skip_window,
            cfg.affinity_max_head_defers,
            cfg.affinity_max_age_s,
        )
        # Requests that tripped an affinity bound lead the next pass.
        self.affinity_promoted: list[Request] = []
        # Passes skipped because every request slot is taken (prefill_pass.run_pass).
        self.idle_passes_skipped = 0
        self.max_wait_s = wait_bound(cfg, self.affinity_on)
        # The policy zoo's runtime (sched/policy_pass.py); None: no zoo feature is on.
        self.policy: PolicyRuntime | None = runtime_for(cfg, self.cache)
        # LPM without priority keeps its order across passes (sched/lpm_order.py).
        self.lpm: LpmOrder | None = (
            LpmOrder(self.cache, aging=self.max_wait_s is not None)
            if cfg.schedule_policy == "lpm"
            and not cfg.enable_priority_scheduling
            and cfg.lpm_aging_tokens_per_pass == 0
            else None
        )
        # The random policy's generator: a run's shuffles are a function of its seed.
        self.rng = Random(cfg.seed)
        self.stats = SchedulerStats()
        # Empty StepOutputs by (stop reason, queue length), reused (launch.step_output).
        self.empty_steps: dict[tuple[CloseReason, int], StepOutput] = {}
        # Batches whose forward is in flight, by step id (StepOutput.step_id: 1, 2, ...).
        self.in_flight: dict[int, PrefillBatch] = {}
        self.step_seq = 0
        # Why the last admission pass stopped (for an empty pass: why nothing was admitted).
        self.last_pass_reason: CloseReason | None = None
        # Called with every admission decision; NOTE: None costs one test per candidate.
        self.admission_observer: AdmissionObserver | None = None


def counters(st: SchedulerState) -> dict[str, Any]:
    """Run-long counters, as the simulator's summary reports them. Pure."""
    s = st.stats
    return {
        "affinity_skips": s.affinity_skips,
        # Request-passes deferred: the skips (a request is skipped at most once a pass).
        "affinity_defers": s.affinity_skips,
        "affinity_deferred_requests": s.affinity_deferred_requests,
        "affinity_skip_passes": s.affinity_skip_passes,
        "affinity_max_skips_in_pass": s.affinity_max_skips_in_pass,
        "affinity_max_deferred_passes": s.affinity_max_deferred_passes,
        "affinity_stops": s.affinity_stops,
        "affinity_stops_w": s.affinity_stops_w,
        "affinity_stops_k": s.affinity_stops_k,
        "affinity_stops_t": s.affinity_stops_t,
        "preemptions": s.preemptions,
        "retractions": s.retractions,
        "admission_passes": s.passes,
        # Passes that admitted nothing, in total and by why (CloseReason values).
        "empty_passes": sum(s.empty_passes.values()),
        **{f"empty_passes_{k}": s.empty_passes[k] for k in sorted(s.empty_passes)},
        # Upstream's log_input_tokens (raw extends) / log_hit_tokens (0 for a chunked
        # continuation), beside prefillkit's own page-ceiled/true-prefix batch tallies.
        "upstream_log_input_tokens": s.log_input_tokens,
        "upstream_log_hit_tokens": s.log_hit_tokens,
        "evicted_pages": st.cache.device_evicted_pages,
        # The policy zoo's own skips and stops (only when a zoo feature is on).
        **(
            {"policy_skips": s.policy_skips, "policy_stops": s.policy_stops}
            if st.policy is not None
            else {}
        ),
    }
