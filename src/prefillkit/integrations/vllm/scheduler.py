"""``CacheAwareScheduler``: vLLM v1's ``AsyncScheduler`` with prefillkit's queue order.

Enable it in vLLM with ``--scheduler-cls
prefillkit.integrations.vllm.scheduler.CacheAwareScheduler`` (or
``SchedulerConfig(scheduler_cls=...)``) and choose the policy with
``PREFILLKIT_VLLM_POLICY`` (docs/vllm.md). It subclasses ``AsyncScheduler``, not
``Scheduler``: vLLM's guidance (PR #43724) is that a custom class keeps async scheduling.

Each step, before vLLM's own ``schedule``:

1. the first ``PREFILLKIT_VLLM_WINDOW`` waiting requests (all by default) are read; only
   the *plain* ones (status WAITING, nothing computed yet) may move, so a preempted or
   partly computed request, or one waiting for remote KV, keeps its exact place, as
   vLLM's own cache-aware window (``_reorder_waiting_by_cached_prefix``) keeps them;
2. each plain request's cached prefix is probed with vLLM's
   ``KVCacheManager.get_num_cached_tokens`` (no references taken, no blocks allocated, no
   events emitted: vLLM keeps the one cache, prefillkit keeps none);
3. ``order.order_views`` orders them, and the queue is rebuilt in that order;
4. with ``PREFILLKIT_VLLM_AFFINITY=1``, ``order.affinity_gate`` (S4) withholds the cold
   requests a warm lead would skip: they leave the queue for vLLM's step and go back to
   their places after it.

Everything else (budgets, chunked prefill, preemption, the ``SchedulerOutput``) is vLLM's.
With the policy ``fcfs`` (the default) nothing is read or moved: the outputs are stock
vLLM's, step for step (tests/engine_vllm).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from prefillkit.integrations.vllm import require_vllm
from prefillkit.integrations.vllm.order import affinity_gate, order_views, settings_from_env
from prefillkit.sched.affinity import AffinityBounds
from prefillkit.sched.policy_view import CandidateView

require_vllm()

from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.output import SchedulerOutput  # noqa: E402
from vllm.v1.core.sched.request_queue import SchedulingPolicy  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

__all__ = ["CacheAwareScheduler"]


class CacheAwareScheduler(AsyncScheduler):  # type: ignore[misc]
    """vLLM's ``AsyncScheduler`` whose waiting queue prefillkit orders (module docstring).

    Attributes it adds: ``prefillkit`` (the settings), ``prefillkit_clock`` (the time
    source of ages, ``time.time`` as vLLM's arrival times; tests replace it),
    ``prefillkit_last_order`` (the request ids of the last reorder, for tests and logs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefillkit = settings_from_env(os.environ)
        self.prefillkit_clock: Callable[[], float] = time.time
        self.prefillkit_last_order: list[str] = []
        self._prefillkit_passes: dict[str, int] = {}
        self._prefillkit_sessions: dict[str, float] = {}
        self._prefillkit_defers: dict[str, int] = {}
        self.prefillkit_last_withheld: list[str] = []
        z = self.prefillkit.zoo
        self._prefillkit_bounds = AffinityBounds(
            z.affinity_warm_floor_tokens,
            z.affinity_skip_window,
            z.affinity_max_head_defers,
            z.affinity_max_age_s,
        )
        # NOTE: reordering by position needs vLLM's FCFS queue (a priority queue orders
        # itself); under --scheduling-policy priority the class changes nothing.
        self._prefillkit_on = self.prefillkit.active and self.policy == SchedulingPolicy.FCFS

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        if not self._prefillkit_on:
            return super().schedule(throttle_prefills)  # type: ignore[no-any-return]
        plain, views = self._prefillkit_reorder()
        withheld: list[Request] = []
        if self.prefillkit.affinity and views:
            gate = affinity_gate(views, self._prefillkit_defers, self._prefillkit_bounds)
            withheld = [plain[k] for k in gate]
        before = list(self.waiting) if withheld else []
        if withheld:
            self.waiting.remove_requests(withheld)
        out: SchedulerOutput = super().schedule(throttle_prefills)
        if withheld:
            self._prefillkit_restore(before, withheld, bool(out.scheduled_new_reqs))
        self._prefillkit_after(out)
        return out

    # ------------------------------------------------------------------ the reorder
    def _prefillkit_reorder(self) -> tuple[list[Request], list[CandidateView]]:
        """Reorder the plain waiting requests of the window (module docstring); returns
        them in their new order with their views (positions renumbered to it)."""
        waiting = self.waiting
        self.prefillkit_last_order = []
        if not waiting:
            return [], []
        window = self.prefillkit.window or len(waiting)
        head: list[Request] = list(itertools.islice(waiting, window))
        slots = [i for i, r in enumerate(head) if _plain(r)]
        if not slots:
            return [], []
        plain = [head[i] for i in slots]
        now = self.prefillkit_clock()
        views = [self._prefillkit_view(r, k, now) for k, r in enumerate(plain)]
        if self.prefillkit.policy == "fcfs" or len(plain) < 2:
            return plain, views
        order = order_views(views, self.prefillkit, now, self._prefillkit_sessions, self.block_size)
        self.prefillkit_last_order = [plain[k].request_id for k in order]
        ordered = [plain[k] for k in order]
        # NOTE: the gate reads the views in scan order; built only when it is on
        new_views = (
            [replace(views[k], position=i) for i, k in enumerate(order)]
            if self.prefillkit.affinity
            else []
        )
        if order == list(range(len(plain))):
            return ordered, new_views
        reordered = list(head)
        for slot, req in zip(slots, ordered, strict=True):
            reordered[slot] = req
        waiting.remove_requests(head)
        for req in reversed(reordered):
            waiting.prepend_request(req)
        return ordered, new_views

    def _prefillkit_restore(
        self, before: list[Request], withheld: list[Request], admitted: bool
    ) -> None:
        """Put the requests the affinity gate withheld back where they were: every
        request keeps its place from before the step, and the ones vLLM put in front
        during it (preempted ones) stay in front. A withheld request counts a defer when
        the step admitted a new request (S4 counts a skip in a pass that launched)."""
        rank = {id(r): i for i, r in enumerate(before)}
        after = list(self.waiting)
        front = [r for r in after if id(r) not in rank]
        rest = sorted([r for r in after if id(r) in rank] + withheld, key=lambda r: rank[id(r)])
        self.waiting.remove_requests(after)
        for req in reversed(front + rest):
            self.waiting.prepend_request(req)
        self.prefillkit_last_withheld = [r.request_id for r in withheld]
        if admitted:
            defers = self._prefillkit_defers
            for req in withheld:
                defers[req.request_id] = defers.get(req.request_id, 0) + 1

    def _prefillkit_view(self, req: Request, position: int, now: float) -> CandidateView:
        """``req`` as prefillkit's policies see it: its cached prefix from vLLM's cache."""
        passes = self._prefillkit_passes
        rid = req.request_id
        passes[rid] = passes.get(rid, 0) + 1
        return CandidateView(
            position=position,
            rid=rid,
            arrival_time=req.arrival_time,
            age_s=now - req.arrival_time,
            input_tokens=req.num_prompt_tokens,
            device_tokens=self.kv_cache_manager.get_num_cached_tokens(req),
            host_tokens=0,
            max_new_tokens=req.max_tokens,
            waiting_passes=passes[rid],
            priority=req.priority,
            session=getattr(req, "session_id", None),
        )

    def _prefillkit_after(self, out: SchedulerOutput) -> None:
        """After vLLM's step: the newly scheduled requests' sessions were scheduled now
        (session-affinity), and they no longer count passes."""
        now = self.prefillkit_clock()
        passes, sessions = self._prefillkit_passes, self._prefillkit_sessions
        for new in out.scheduled_new_reqs:
            passes.pop(new.req_id, None)
            self._prefillkit_defers.pop(new.req_id, None)
            req = self.requests.get(new.req_id)
            sid = None if req is None else getattr(req, "session_id", None)
            if sid is not None:
                sessions[sid] = now
        if len(passes) > 4 * len(self.waiting) + 1024:  # NOTE: drop finished/aborted ids
            live = {r.request_id for r in self.waiting}
            for rid in [r for r in passes if r not in live]:
                del passes[rid]
            for rid in [r for r in self._prefillkit_defers if r not in live]:
                del self._prefillkit_defers[rid]


def _plain(req: Request) -> bool:
    """A request the reorder may move: waiting, nothing computed (vLLM's own rule)."""
    return bool(req.status == RequestStatus.WAITING and not req.num_computed_tokens)
