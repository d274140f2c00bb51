# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The scheduler's own settings: the admission knobs and nothing else.

:class:`SchedulerConfig` is what the scheduler (``sched/interface.py``) reads. It
knows no model, GPU, memory sizing or simulator setting: the pool size (pages) and the key
unit are arguments of ``build_scheduler``, given by whoever sized the memory. Field
names are SGLang's ``ServerArgs`` names, so a field ``chunked_prefill_size`` is the flag
``--chunked-prefill-size``; every error names the flag in one line.

An engine builds it from its own values in a few lines::

    from prefillkit.sched.config import SchedulerConfig
    from prefillkit.sched.interface import build_scheduler

    cfg = SchedulerConfig(
        page_size=server_args.page_size,
        chunked_prefill_size=server_args.chunked_prefill_size,  # -1 disables chunking
        max_prefill_tokens=server_args.max_prefill_tokens,
        schedule_policy=server_args.schedule_policy,
        enable_hierarchical_cache=server_args.enable_hierarchical_cache,
    )
    sched = build_scheduler(cfg, pool_tokens // cfg.page_size, key_tokens=cfg.page_size)

Normalisations at construction (the stored values are canonical): ``chunked_prefill_size``,
``lpm_fallback_queue_len`` and ``schedule_max_wait_s`` of ``-1`` become ``None`` (off), as
SGLang spells "off"; ints given for float fields become floats. Nothing else is changed:
strings must already be lower case (the application layer folds case).

Standard library only: this module is part of the embeddable core.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass

from prefillkit.cache.host import WRITE_POLICIES
from prefillkit.text import one_line, suggest

__all__ = [
    "PRIORITY_POLICIES",
    "SCHEDULE_POLICIES",
    "WRITE_POLICIES",
    "ZOO_POLICIES",
    "ConfigError",
    "SchedulerConfig",
    "field_flag",
]


class ConfigError(ValueError):
    """An impossible or malformed setting. The message is one line naming the flag/key."""


#: The policy zoo (sched/policy_orders.py, sched/policy_admit.py; docs/policies.md).
ZOO_POLICIES: tuple[str, ...] = (
    "residual-sjf",
    "waiting-qos",
    "session-affinity",
    "loadback-aware",
    "cost-aware",
)
SCHEDULE_POLICIES: tuple[str, ...] = ("fcfs", "lpm", "dfs-weight", "lof", "random", *ZOO_POLICIES)
AFFINITY_CLASSIFY: tuple[str, ...] = ("floor", "cost")
PRIORITY_POLICIES: tuple[str, ...] = ("fcfs", "lof")

_FLOAT_FIELDS: tuple[str, ...] = (
    "schedule_max_wait_s",
    "schedule_conservativeness",
    "init_new_token_ratio",
    "min_new_token_ratio_factor",
    "affinity_max_age_s",
    "affinity_heavy_ratio",
    "cost_aware_slack",
    "residual_sjf_max_wait_s",
    "session_affinity_max_head_wait_s",
    "session_affinity_ttl_s",
    "loadback_idle_delay_s",
    "loadback_age_limit_s",
    "cost_aware_max_wait_s",
)


def field_flag(name: str) -> str:
    """Command-line spelling of a field: ``chunked_prefill_size`` → ``--chunked-prefill-size``."""
    return "--" + name.replace("_", "-")


def fail(name: str, message: str) -> typing.NoReturn:
    """Raise ``ConfigError("--flag-of-name message")`` on one line."""
    raise ConfigError(one_line(f"{field_flag(name)} {message}"))


# NOTE: ``int | float``, not ``float``: a compiled build (setup.py) would convert an int
# argument to float and name it "-1.0" in the message.
def check_positive(name: str, value: int | float | None) -> None:
    """``value`` is None or > 0, else a ``ConfigError`` naming ``name``'s flag."""
    if value is not None and value <= 0:
        fail(name, f"must be positive, got {value}")


def check_non_negative(name: str, value: int | float | None) -> None:
    """``value`` is None or >= 0, else a ``ConfigError`` naming ``name``'s flag."""
    if value is not None and value < 0:
        fail(name, f"must be >= 0, got {value}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """``value`` is one of ``choices``, else a ``ConfigError`` with a suggestion."""
    if value not in choices:
        fail(name, f"must be one of {', '.join(choices)}, got {value!r}{suggest(value, choices)}")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The admission knobs; validated at construction (see the module docstring).

    Immutable: build a changed copy with ``dataclasses.replace`` (validated again).
    """

    # Memory units and budgets.
    page_size: int = 1
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int | None = 8192
    max_running_requests: int | None = None
    clip_max_new_tokens: int = 4096
    # Queue order.
    schedule_policy: str = "fcfs"
    lpm_fallback_queue_len: int | None = None
    schedule_max_wait_s: float | None = 5.0
    # Decode reservation (new-token ratio).
    schedule_conservativeness: float = 1.0
    init_new_token_ratio: float = 0.7
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    # Priority.
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    enable_priority_aging: bool = False
    priority_scheduling_preemption_threshold: int = 10
    enable_priority_preemption: bool = True
    enable_preempt_on_no_token: bool = False
    enable_ignore_eos_admission: bool = False
    # Host tier (HiCache) admission: whether it exists, how it backs up, what loads back.
    enable_hierarchical_cache: bool = False
    hicache_write_policy: str = "write_through"
    hicache_write_through_threshold: int = 2
    hicache_load_back_threshold: int = 10
    # Context parallelism: owner lanes and the CP shared-KV batch limits.
    cp_size: int = 1
    enable_cp_shared_kv: bool = False
    enable_cp_shared_kv_prefill_bs_gt1: bool = False
    cp_shared_kv_prefill_max_requests: int | None = None
    cp_shared_kv_prefill_max_total_extend_tokens: int | None = None
    cp_shared_kv_prefill_max_cached_tokens: int | None = None
    cp_shared_kv_prefill_max_buffer_size: int | None = None
    cp_prefill_mix_chunked: bool = False
    cp_symm_staging_pages: int | None = None
    # Cache affinity.
    enable_affinity: bool = False
    affinity_warm_floor_tokens: int = 64
    affinity_skip_window: int = 16
    affinity_max_head_defers: int = 3
    affinity_max_age_s: float = 5.0
    # S4 variants: hold cold requests while warm ones wait; call "cold" by marginal cost.
    affinity_hold: bool = False
    affinity_classify: str = "floor"
    affinity_heavy_ratio: float = 1.0
    # The policy zoo's parameters (docs/policies.md cites each).
    lpm_aging_tokens_per_pass: int = 0
    residual_sjf_max_wait_s: float = 10.0
    waiting_qos_window: int = 8
    session_affinity_window: int = 16
    session_affinity_min_cached_tokens: int = 256
    session_affinity_max_head_wait_s: float = 5.0
    session_affinity_ttl_s: float = 60.0
    loadback_idle_delay_s: float = 0.03
    loadback_age_limit_s: float = 5.0
    cost_aware_slack: float = 2.0
    cost_aware_max_wait_s: float = 20.0
    # The random policy's generator.
    seed: int = 0

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        for name in ("chunked_prefill_size", "lpm_fallback_queue_len", "schedule_max_wait_s"):
            if getattr(self, name) == -1:
                put(name, None)
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                put(name, float(value))
        self._validate()

    def _validate(self) -> None:
        """Every field alone, then the combinations (the first failure raises)."""
        self._validate_admission()
        self._validate_cp_affinity()
        self._validate_combinations()
        if self.cp_prefill_mix_chunked:
            self._validate_mix_chunked()

    def _validate_admission(self) -> None:
        page = self.page_size
        check_positive("page_size", page)
        check_positive("max_prefill_tokens", self.max_prefill_tokens)
        if self.chunked_prefill_size is not None:
            if self.chunked_prefill_size <= 0:
                fail(
                    "chunked_prefill_size",
                    f"must be positive, or -1 to disable chunking, got {self.chunked_prefill_size}",
                )
            if self.chunked_prefill_size % page:
                fail(
                    "chunked_prefill_size",
                    f"must be a multiple of --page-size {page}, got {self.chunked_prefill_size}",
                )
        check_positive("max_running_requests", self.max_running_requests)
        if self.lpm_fallback_queue_len is not None and self.lpm_fallback_queue_len < 0:
            fail(
                "lpm_fallback_queue_len",
                f"must be >= 0, or -1 for never, got {self.lpm_fallback_queue_len}",
            )
        if self.schedule_max_wait_s is not None and not (
            0.0 <= self.schedule_max_wait_s < math.inf
        ):
            fail(
                "schedule_max_wait_s",
                f"must be >= 0 seconds, or -1 for off, got {self.schedule_max_wait_s}",
            )
        check_positive("schedule_conservativeness", self.schedule_conservativeness)
        if not 0.0 < self.init_new_token_ratio <= 1.0:
            fail("init_new_token_ratio", f"must be in (0, 1], got {self.init_new_token_ratio}")
        if not 0.0 <= self.min_new_token_ratio_factor <= 1.0:
            fail(
                "min_new_token_ratio_factor",
                f"must be in [0, 1], got {self.min_new_token_ratio_factor}",
            )
        check_positive("new_token_ratio_decay_steps", self.new_token_ratio_decay_steps)
        check_positive("clip_max_new_tokens", self.clip_max_new_tokens)
        check_non_negative(
            "priority_scheduling_preemption_threshold",
            self.priority_scheduling_preemption_threshold,
        )
        check_positive("hicache_write_through_threshold", self.hicache_write_through_threshold)
        check_non_negative("hicache_load_back_threshold", self.hicache_load_back_threshold)

    def _validate_cp_affinity(self) -> None:
        check_positive("cp_size", self.cp_size)
        check_positive("cp_shared_kv_prefill_max_requests", self.cp_shared_kv_prefill_max_requests)
        check_positive(
            "cp_shared_kv_prefill_max_total_extend_tokens",
            self.cp_shared_kv_prefill_max_total_extend_tokens,
        )
        check_positive(
            "cp_shared_kv_prefill_max_cached_tokens", self.cp_shared_kv_prefill_max_cached_tokens
        )
        check_positive(
            "cp_shared_kv_prefill_max_buffer_size", self.cp_shared_kv_prefill_max_buffer_size
        )
        check_positive("cp_symm_staging_pages", self.cp_symm_staging_pages)
        check_positive("affinity_warm_floor_tokens", self.affinity_warm_floor_tokens)
        check_positive("affinity_skip_window", self.affinity_skip_window)
        check_non_negative("affinity_max_head_defers", self.affinity_max_head_defers)
        check_non_negative("affinity_max_age_s", self.affinity_max_age_s)
        check_non_negative("seed", self.seed)
        self._validate_zoo()
        check_choice("schedule_policy", self.schedule_policy, SCHEDULE_POLICIES)
        check_choice("hicache_write_policy", self.hicache_write_policy, WRITE_POLICIES)

    def _validate_zoo(self) -> None:
        check_choice("affinity_classify", self.affinity_classify, AFFINITY_CLASSIFY)
        check_positive("affinity_heavy_ratio", self.affinity_heavy_ratio)
        check_non_negative("lpm_aging_tokens_per_pass", self.lpm_aging_tokens_per_pass)
        check_positive("waiting_qos_window", self.waiting_qos_window)
        check_positive("session_affinity_window", self.session_affinity_window)
        check_non_negative(
            "session_affinity_min_cached_tokens", self.session_affinity_min_cached_tokens
        )
        check_non_negative("cost_aware_slack", self.cost_aware_slack)
        for name in _FLOAT_FIELDS[7:]:  # NOTE: the zoo's seconds
            value = getattr(self, name)
            if not 0.0 <= value < math.inf:
                fail(name, f"must be >= 0 seconds, got {value}")
        if self.lpm_aging_tokens_per_pass and self.schedule_policy != "lpm":
            fail("lpm_aging_tokens_per_pass", "requires --schedule-policy lpm")
        if (self.affinity_hold or self.affinity_classify != "floor") and not self.enable_affinity:
            name = "affinity_hold" if self.affinity_hold else "affinity_classify"
            fail(name, "requires --enable-affinity")

    def _validate_combinations(self) -> None:
        page = self.page_size
        if self.enable_priority_scheduling and self.schedule_policy not in PRIORITY_POLICIES:
            fail(
                "enable_priority_scheduling",
                f"requires --schedule-policy fcfs or lof, got {self.schedule_policy}",
            )
        if self.enable_preempt_on_no_token and not self.enable_priority_scheduling:
            fail("enable_preempt_on_no_token", "requires --enable-priority-scheduling")
        if self.enable_preempt_on_no_token and not self.enable_priority_preemption:
            fail(
                "enable_preempt_on_no_token",
                "requires priority preemption (--enable-priority-preemption)",
            )
        if self.enable_cp_shared_kv and self.cp_size <= 1:
            fail("enable_cp_shared_kv", "requires --cp-size > 1 (context parallelism)")
        if self.enable_cp_shared_kv_prefill_bs_gt1 and not self.enable_cp_shared_kv:
            fail(
                "enable_cp_shared_kv_prefill_bs_gt1",
                "requires --enable-cp-shared-kv (CP shared-KV prefill)",
            )
        extend = self.cp_shared_kv_prefill_max_total_extend_tokens
        if extend is not None and extend % page:
            fail(
                "cp_shared_kv_prefill_max_total_extend_tokens",
                f"must be a multiple of --page-size {page}, got {extend}",
            )

    def _validate_mix_chunked(self) -> None:
        if not self.enable_cp_shared_kv_prefill_bs_gt1:
            fail("cp_prefill_mix_chunked", "requires --enable-cp-shared-kv-prefill-bs-gt1")
        if self.cp_extend_cap is None:
            fail(
                "cp_prefill_mix_chunked",
                "requires an extend cap: --cp-shared-kv-prefill-max-total-extend-tokens "
                "or --chunked-prefill-size",
            )
        if self.cp_shared_kv_prefill_max_requests is None:
            fail(
                "cp_prefill_mix_chunked",
                "requires --cp-shared-kv-prefill-max-requests "
                "(one staging page of tail slack per request)",
            )
        cap_pages, slack_pages, _ = self.staging_identity()
        given = self.cp_symm_staging_pages
        if given is not None and given != cap_pages + slack_pages:
            fail(
                "cp_symm_staging_pages",
                f"{given} breaks the staging identity with --cp-prefill-mix-chunked: "
                f"extend cap {cap_pages} pages + request slack {slack_pages} pages "
                f"= {cap_pages + slack_pages}",
            )

    # ----------------------------------------------------------------- derived values
    @property
    def chunking_enabled(self) -> bool:
        """Chunked prefill is on (``chunked_prefill_size`` set)."""
        return self.chunked_prefill_size is not None

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
        cap = self.cp_extend_cap
        cap_pages = 0 if cap is None else -(-cap // self.page_size)
        slack = self.cp_shared_kv_prefill_max_requests or 0
        staging = self.cp_symm_staging_pages
        return cap_pages, slack, cap_pages + slack if staging is None else staging


#: Field names of :class:`SchedulerConfig`, in declaration order.
SCHEDULER_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SchedulerConfig))
