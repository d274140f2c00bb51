"""What the vLLM scheduler class does to vLLM's waiting queue, without vLLM: its settings
(``PREFILLKIT_VLLM_*`` environment variables) and the order of the plain waiting requests
as a pure function of their :class:`~prefillkit.sched.policy_view.CandidateView`.

The policies are prefillkit's (``sched/policy_orders.py``, docs/policies.md) on what
vLLM knows: the cached prefix is vLLM's device prefix cache (no host tier, so
``host_tokens`` is 0), and there is no marginal-cost service in vLLM's scheduler, so the
cost-based orders count tokens (``ServiceCost(None)``, the documented degraded mode).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prefillkit.sched.affinity import (
    AffinityBounds,
    AffinityDecision,
    BatchLead,
    ReqClass,
    classify,
    decide,
)
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.policy_orders import (
    cost_aware_deadline,
    order_cost_aware,
    order_lpm_aging,
    order_residual_sjf,
    order_session_affinity,
    order_waiting_qos,
    split_by_age,
)
from prefillkit.sched.policy_view import CandidateView, ServiceCost

__all__ = [
    "POLICIES",
    "VllmPolicySettings",
    "affinity_gate",
    "order_views",
    "settings_from_env",
]

#: ``fcfs`` is vLLM's own order: the class then changes nothing.
POLICIES: tuple[str, ...] = (
    "fcfs",
    "lpm",
    "residual-sjf",
    "waiting-qos",
    "session-affinity",
    "cost-aware",
)


class SettingError(ValueError):
    """A bad ``PREFILLKIT_VLLM_*`` value; ``str(err)`` names the variable."""


@dataclass(frozen=True, slots=True)
class VllmPolicySettings:
    """The class's settings (docs/vllm.md):

    - ``policy`` (``PREFILLKIT_VLLM_POLICY``): one of :data:`POLICIES`, default ``fcfs``;
    - ``window`` (``PREFILLKIT_VLLM_WINDOW``): reorder only the first N waiting requests
      (0, the default: the whole queue);
    - ``max_wait_s`` (``PREFILLKIT_VLLM_MAX_WAIT_S``): lpm's and waiting-qos's wait bound
      (default 5 s, prefillkit's; -1: off);
    - ``lpm_aging_tokens_per_pass`` (``PREFILLKIT_VLLM_LPM_AGING_TOKENS``): lpm's aging
      term (SGLang #31954; default 0);
    - ``affinity`` (``PREFILLKIT_VLLM_AFFINITY=1``): the warm/cold affinity gate (S4,
      :func:`affinity_gate`) with prefillkit's default bounds.

    The other parameters are prefillkit's defaults (``SchedulerConfig``)."""

    policy: str = "fcfs"
    window: int = 0
    max_wait_s: float | None = 5.0
    lpm_aging_tokens_per_pass: int = 0
    affinity: bool = False
    zoo: SchedulerConfig = field(default_factory=SchedulerConfig)

    @property
    def active(self) -> bool:
        """Whether the class changes vLLM's order or gates it at all."""
        return self.policy != "fcfs" or self.affinity


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise SettingError(f"{name}: must be {kind}, got {raw!r}") from None
    if not math.isfinite(value):
        raise SettingError(f"{name}: must be finite, got {raw!r}")
    return value


def settings_from_env(env: Mapping[str, str]) -> VllmPolicySettings:
    """The settings from ``env`` (``os.environ``); a bad value raises
    :class:`SettingError` naming its variable."""
    policy = env.get("PREFILLKIT_VLLM_POLICY", "fcfs") or "fcfs"
    if policy not in POLICIES:
        raise SettingError(
            f"PREFILLKIT_VLLM_POLICY: must be one of {', '.join(POLICIES)}, got {policy!r}"
        )
    window = int(_number(env, "PREFILLKIT_VLLM_WINDOW", 0, integer=True))
    if window < 0:
        raise SettingError(f"PREFILLKIT_VLLM_WINDOW: must be >= 0, got {window}")
    wait = _number(env, "PREFILLKIT_VLLM_MAX_WAIT_S", 5.0, integer=False)
    if wait < 0 and wait != -1:
        raise SettingError(f"PREFILLKIT_VLLM_MAX_WAIT_S: must be >= 0 or -1 (off), got {wait}")
    aging = int(_number(env, "PREFILLKIT_VLLM_LPM_AGING_TOKENS", 0, integer=True))
    if aging < 0:
        raise SettingError(f"PREFILLKIT_VLLM_LPM_AGING_TOKENS: must be >= 0, got {aging}")
    gate = env.get("PREFILLKIT_VLLM_AFFINITY", "0") or "0"
    if gate not in ("0", "1"):
        raise SettingError(f"PREFILLKIT_VLLM_AFFINITY: must be 0 or 1, got {gate!r}")
    return VllmPolicySettings(policy, window, None if wait == -1 else wait, aging, gate == "1")


def order_views(
    views: Sequence[CandidateView],
    s: VllmPolicySettings,
    now: float,
    last_scheduled: Mapping[str, float],
    block_size: int,
) -> list[int]:
    """The policy's order of ``views`` (positions), ``views[i].position == i``. Pure."""
    z = s.zoo
    if s.policy == "lpm" or s.policy == "waiting-qos":
        aged, rest = split_by_age(views, s.max_wait_s)
        if s.policy == "lpm":
            pos = order_lpm_aging(renumber(rest), s.lpm_aging_tokens_per_pass)
        else:
            pos = order_waiting_qos(renumber(rest), z.waiting_qos_window, ServiceCost(None).solo)
        return [v.position for v in aged] + [rest[i].position for i in pos]
    if s.policy == "residual-sjf":
        return order_residual_sjf(views, z.residual_sjf_max_wait_s, block_size)
    if s.policy == "session-affinity":
        return order_session_affinity(
            views,
            now,
            last_scheduled,
            window=z.session_affinity_window,
            min_cached_tokens=z.session_affinity_min_cached_tokens,
            max_head_wait_s=z.session_affinity_max_head_wait_s,
            session_ttl_s=z.session_affinity_ttl_s,
        )
    if s.policy == "cost-aware":
        svc = ServiceCost(None)
        slack, cap = z.cost_aware_slack, z.cost_aware_max_wait_s
        return order_cost_aware(
            views, lambda v: cost_aware_deadline(v, svc.solo_seconds(v), slack, cap)
        )
    return [v.position for v in views]


def affinity_gate(
    views: Sequence[CandidateView], defers: Mapping[str, int], bounds: AffinityBounds
) -> list[int]:
    """S4 on vLLM's queue: the positions of ``views`` (in the order vLLM will scan them)
    to withhold from this step. The first request leads; a cold one behind a warm lead
    is skipped (``affinity.decide``, with the step's skips so far, its own ``defers`` and
    its age), and a STOP withholds it and every request after it (the scan ends there;
    it leads a later step). It assumes vLLM admits the requests it is not denied, in
    order, which is what it does until a budget runs out (then it admits none of the
    rest either). Pure."""
    lead = BatchLead.EMPTY
    skips = 0
    out: list[int] = []
    for i, v in enumerate(views):
        cls = classify(v.device_tokens, v.host_tokens, bounds.warm_floor_tokens)
        d = decide(cls, lead, skips, defers.get(v.rid, 0), v.age_s, bounds)
        if d is AffinityDecision.SKIP:
            out.append(v.position)
            skips += 1
        elif d is AffinityDecision.STOP:
            out.extend(w.position for w in views[i:])
            break
        elif lead is BatchLead.EMPTY:
            lead = BatchLead.WARM if cls is ReqClass.WARM else BatchLead.COLD
    return out


def renumber(views: Sequence[CandidateView]) -> list[CandidateView]:
    """``views`` with positions 0, 1, ... in their order (an order function's input)."""
    from dataclasses import replace

    return [replace(v, position=i) for i, v in enumerate(views)]
