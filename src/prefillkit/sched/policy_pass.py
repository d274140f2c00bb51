"""The policy zoo inside the admission pass: views built from the scheduler's state, the
pure orders and decisions of ``policy_orders`` / ``policy_admit`` applied to them.

:class:`PolicyRuntime` is what a zoo policy keeps across passes (the marginal-cost
service, the sessions' last scheduled times, when decode last ran, the batch so far).
The scheduler holds one only when a zoo feature is on (:func:`runtime_for`); the
existing policies never reach this module, so their passes cost what they did.
Mutates: the runtime, and each ordered request's ``waiting_passes``.
"""

from __future__ import annotations

import math

from prefillkit.cache.lookup import MatchResult
from prefillkit.cache.prefix import PrefixCache
from prefillkit.request import Request, session_of
from prefillkit.sched.affinity import (
    AffinityBounds,
    AffinityDecision,
    BatchLead,
    ReqClass,
    classify,
)
from prefillkit.sched.buffer import ReqShape
from prefillkit.sched.config import ZOO_POLICIES, SchedulerConfig
from prefillkit.sched.matching import refresh_match
from prefillkit.sched.policy import aged_prefix_len, in_batch_head_unit, lpm_match
from prefillkit.sched.policy_admit import (
    admit_cost_aware,
    admit_loadback_aware,
    classify_by_cost,
    loadback_wake,
)
from prefillkit.sched.policy_orders import (
    cost_aware_deadline,
    order_affinity_hold,
    order_cost_aware,
    order_loadback_aware,
    order_lpm_aging,
    order_residual_sjf,
    order_session_affinity,
    order_waiting_qos,
)
from prefillkit.sched.policy_view import (
    BatchView,
    CandidateView,
    ForwardEstimate,
    PassView,
    ServiceCost,
)

__all__ = ["PolicyRuntime", "runtime_for"]

#: Zoo policies with their own starvation rule: the general wait bound
#: (``--schedule-max-wait-s``) does not apply to them.
OWN_BOUND = ("residual-sjf", "loadback-aware", "cost-aware")
#: Zoo policies that decide admission per candidate, not only the order.
ADMITTING = ("loadback-aware", "cost-aware")
#: The scan stops after this many zoo skips in one pass (a bound on the marginal-cost
#: estimates one pass makes; the skipped requests stay queued).
MAX_SKIPS_PER_PASS = 64


def runtime_for(cfg: SchedulerConfig, cache: PrefixCache) -> PolicyRuntime | None:
    """The zoo's runtime when ``cfg`` turns a zoo feature on (it orders or decides),
    else None."""
    rt = PolicyRuntime(cfg, cache)
    return rt if rt.orders or rt.admits else None


class PolicyRuntime:
    """A zoo policy's state across passes (module docstring)."""

    def __init__(
        self, cfg: SchedulerConfig, cache: PrefixCache, estimate: ForwardEstimate | None = None
    ) -> None:
        self.cfg = cfg
        self.cache = cache
        self.policy = cfg.schedule_policy
        self.service = ServiceCost(estimate)
        self.last_scheduled: dict[str, float] = {}
        self.decode_busy_at = -math.inf
        self.wake_at: float | None = None
        self.batch = BatchView()
        self.pass_view = PassView(0.0)
        self.skips = 0
        self.by_cost = cfg.enable_affinity and cfg.affinity_classify == "cost"
        self.hold = cfg.enable_affinity and cfg.affinity_hold
        self.admits = self.policy in ADMITTING or self.by_cost
        # The batch's extend cap (cost-aware's room for riders): the CP extend limit and
        # the chunk, and the legacy input budget.
        cap = cfg.cp_extend_cap if cfg.enable_cp_shared_kv_prefill_bs_gt1 else None
        self.cap = cfg.max_prefill_tokens if cap is None else min(cap, cfg.max_prefill_tokens)
        self.orders = (
            self.policy in ZOO_POLICIES
            or self.hold
            or (self.policy == "lpm" and cfg.lpm_aging_tokens_per_pass > 0)
        )

    def set_estimate(self, estimate: ForwardEstimate | None) -> None:
        """Use ``estimate`` as the marginal-cost service (None: token counts)."""
        self.service = ServiceCost(estimate)

    # ------------------------------------------------------------------ views
    def view(self, req: Request, position: int, now: float) -> CandidateView:
        """``req``'s view with its current match (refreshed)."""
        h = refresh_match(self.cache, req)
        node = req.state.match_node
        assert node is not None  # NOTE: refresh_match sets it
        return self.view_of(req, self.cache.match_node(node, h), position, now)

    def view_of(self, req: Request, match: MatchResult, position: int, now: float) -> CandidateView:
        """``req``'s view with the match the scan made."""
        kt = self.cache.key_tokens
        rs = req.state
        turn = session_of(req)
        return CandidateView(
            position=position,
            rid=req.rid,
            arrival_time=req.arrival_time,
            age_s=now - req.arrival_time,
            input_tokens=rs.input_len,
            device_tokens=match.device_units * kt,
            host_tokens=match.host_units * kt,
            max_new_tokens=req.max_new_tokens,
            waiting_passes=rs.waiting_passes,
            priority=req.priority,
            session=None if turn is None else turn.session_id,
            recovering=rs.output_len > 0,
        )

    # ------------------------------------------------------------------ order
    def order(
        self,
        queue: list[Request],
        base: list[Request],
        used: str,
        now: float,
        max_wait_s: float | None,
        bounds: AffinityBounds,
    ) -> tuple[list[Request], str]:
        """The zoo's order of ``queue`` (the waiting requests in arrival order); ``base``
        is the base policy's order and ``used`` its name (S4's hold reorders it);
        ``max_wait_s`` the wait bound (state.wait_bound), ``bounds`` S4's."""
        if self.hold:
            return self._hold(base, now, max_wait_s, bounds), used
        cfg = self.cfg
        k = 0
        if self.policy not in OWN_BOUND:
            k = aged_prefix_len(queue, now, max_wait_s)
        rest = queue[k:]
        if self.policy == "lpm":
            if cfg.lpm_fallback_queue_len is not None and len(queue) > cfg.lpm_fallback_queue_len:
                return queue, "fcfs"
            views = self._lpm_views(rest, now)
            pos = order_lpm_aging(views, cfg.lpm_aging_tokens_per_pass)
        else:
            views = [self.view(r, i, now) for i, r in enumerate(rest)]
            pos = self._zoo_order(views, now)
        return queue[:k] + [rest[i] for i in pos], self.policy

    def _zoo_order(self, views: list[CandidateView], now: float) -> list[int]:
        cfg = self.cfg
        p = self.policy
        solo = self.service.solo
        if p == "residual-sjf":
            return order_residual_sjf(views, cfg.residual_sjf_max_wait_s, cfg.page_size)
        if p == "waiting-qos":
            return order_waiting_qos(views, cfg.waiting_qos_window, solo)
        if p == "session-affinity":
            return order_session_affinity(
                views,
                now,
                self.last_scheduled,
                window=cfg.session_affinity_window,
                min_cached_tokens=cfg.session_affinity_min_cached_tokens,
                max_head_wait_s=cfg.session_affinity_max_head_wait_s,
                session_ttl_s=cfg.session_affinity_ttl_s,
            )
        if p == "loadback-aware":
            return order_loadback_aware(views, cfg.loadback_age_limit_s)
        return order_cost_aware(views, self.deadline)

    def deadline(self, v: CandidateView) -> float:
        """cost-aware's deadline of ``v`` (policy_orders.cost_aware_deadline)."""
        cfg = self.cfg
        s = self.service.solo_seconds(v)
        return cost_aware_deadline(v, s, cfg.cost_aware_slack, cfg.cost_aware_max_wait_s)

    def _lpm_views(self, rest: list[Request], now: float) -> list[CandidateView]:
        """LPM's views, after counting this pass for every request it orders (SGLang
        #31954 increments the counter at the start of each LPM ordering)."""
        cache = self.cache
        head_unit = in_batch_head_unit(cache.key_tokens)
        out = []
        for i, req in enumerate(rest):
            req.state.waiting_passes += 1
            matched, head = lpm_match(cache, req, head_unit)
            out.append(
                CandidateView(
                    position=i,
                    rid=req.rid,
                    arrival_time=req.arrival_time,
                    age_s=now - req.arrival_time,
                    input_tokens=req.state.input_len,
                    device_tokens=matched,
                    host_tokens=0,
                    waiting_passes=req.state.waiting_passes,
                    in_batch_head=head,
                )
            )
        return out

    def _hold(
        self, base: list[Request], now: float, max_wait_s: float | None, bounds: AffinityBounds
    ) -> list[Request]:
        max_age = bounds.max_age_s if max_wait_s is None else max_wait_s
        views = [self.view(r, i, now) for i, r in enumerate(base)]
        defers = {v.position: base[v.position].state.affinity_skips for v in views}
        pos = order_affinity_hold(
            views,
            lambda v: self.warm(v, bounds.warm_floor_tokens),
            lambda v: v.age_s >= max_age or defers[v.position] >= bounds.max_head_defers,
        )
        return [base[i] for i in pos]

    def warm(self, v: CandidateView, floor: int) -> bool:
        """Whether ``v`` is warm when it would lead: by the floor, or by its cost."""
        if self.by_cost:
            ratio = self.cfg.affinity_heavy_ratio
            return classify_by_cost(v, BatchView(), self.service, ratio) is ReqClass.WARM
        return classify(v.device_tokens, v.host_tokens, floor) is ReqClass.WARM

    # ------------------------------------------------------------------ the scan
    def begin_pass(
        self, decoding: int, queue_len: int, admitted: list[Request], now: float
    ) -> None:
        """A pass starts at ``now`` with ``decoding`` requests decoding, ``queue_len``
        waiting and ``admitted`` already in the batch (a chunked continuation)."""
        if decoding:
            self.decode_busy_at = now
        self.wake_at = None
        self.skips = 0
        self.pass_view = PassView(now, decoding, self.decode_busy_at, queue_len)
        self.batch = BatchView()
        for req in admitted:
            self.admitted(req, BatchLead.WARM)

    def decide(
        self, req: Request, match: MatchResult, now: float
    ) -> tuple[AffinityDecision, ReqClass | None]:
        """The zoo's decision for ``req`` and, with cost classification, its class."""
        c = self.view_of(req, match, 0, now)
        cls = None
        if self.by_cost:
            b = self.batch
            cls = classify_by_cost(c, b, self.service, self.cfg.affinity_heavy_ratio)
        decision = AffinityDecision.ADMIT
        cfg = self.cfg
        if self.policy == "cost-aware":
            deadline = self.deadline(c)
            decision = admit_cost_aware(c, self.batch, self.service, deadline, now, self.cap)
        elif self.policy == "loadback-aware":
            p = self.pass_view
            decision = admit_loadback_aware(
                c, p, cfg.loadback_idle_delay_s, cfg.loadback_age_limit_s
            )
            if decision is AffinityDecision.SKIP:
                wake = loadback_wake(p, cfg.loadback_idle_delay_s)
                if wake is not None and (self.wake_at is None or wake < self.wake_at):
                    self.wake_at = wake
        if decision is AffinityDecision.SKIP:
            self.skips += 1
            if self.skips > MAX_SKIPS_PER_PASS:
                decision = AffinityDecision.STOP
        return decision, cls

    def admitted(self, req: Request, lead: BatchLead) -> None:
        """``req`` joined the batch: the batch view grows by its shape."""
        rs = req.state
        shape = ReqShape(rs.prefix_len, rs.extend_input_len, rs.loaded_tokens)
        shapes = (*self.batch.shapes, shape)
        self.batch = BatchView(shapes, lead, self.skips, self.service.forward(shapes))

    def launched(self, reqs: list[Request], now: float) -> None:
        """A batch launched at ``now``: its sessions were scheduled now."""
        last = self.last_scheduled
        for req in reqs:
            turn = session_of(req)
            if turn is not None:
                last[turn.session_id] = now
        if len(last) > 4096:  # NOTE: bounded: sessions idle past the TTL are forgotten
            ttl = self.cfg.session_affinity_ttl_s
            for sid in [s for s, t in last.items() if now - t > ttl]:
                del last[sid]
