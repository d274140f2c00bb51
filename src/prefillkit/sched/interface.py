# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""What an engine calls: the scheduler's typed interface, its factory and its step result.

An engine (the simulator's loop in ``prefillkit.sim.engine``, ``examples/embed_engine.py``,
or a real serving engine) builds a scheduler with :func:`build_scheduler` and drives it
through :class:`SchedulerInterface` only; ``tests/test_interface.py`` checks that the
simulator's loop touches nothing else and that the scheduler's public calls are exactly
these. Each call's docstring says what it mutates. A step returns one immutable
:class:`StepOutput` of ids, ints, enums and page-id arrays (vLLM's ``SchedulerOutput`` is
the model): everything the engine needs to run the forward -- per request its id, its
prefix pages, its new page ids per owner lane, the extend range and the load-back
copies -- and why the admission pass stopped; the scheduler keeps its own record of the
batch under ``StepOutput.step_id``.
The result types live in ``sched/step.py`` and are re-exported here: this module is the
one an engine imports.

Page ids: lane-local ids are held as ``array('q')`` per owner lane (``cache/pages.py``);
the engine-facing id of lane-local page ``k`` of lane ``i`` is ``k * cp_size + i``, and
:meth:`ScheduledReq.page_ids` / :meth:`ScheduledReq.prefix_page_ids` give them in sequence
order. Sequence page ``j`` of a request lives on lane ``j mod cp_size``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from prefillkit.sched.buffer import BufferEstimatorContext
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.policy_view import ForwardEstimate
from prefillkit.sched.scheduler import Scheduler
from prefillkit.sched.step import (
    AdmissionEvent,
    AdmissionEventKind,
    AdmissionObserver,
    AffinityBound,
    BatchLead,
    PrefixSegment,
    ScheduledReq,
    StepOutput,
    limit_of,
)
from prefillkit.sched.verdicts import CloseReason, CpMode

if TYPE_CHECKING:
    from prefillkit.cache.events import KVListener
    from prefillkit.request import Request

__all__ = [
    "AdmissionEvent",
    "AdmissionEventKind",
    "AdmissionObserver",
    "AffinityBound",
    "BatchLead",
    "CloseReason",
    "CpMode",
    "PrefixSegment",
    "ScheduledReq",
    "SchedulerInterface",
    "StepOutput",
    "build_scheduler",
    "limit_of",
]


class SchedulerInterface(Protocol):
    """The calls an engine makes. Nothing else of the scheduler is the engine's to touch."""

    def add_request(self, req: Request) -> str | None:
        """A request arrived. Mutates: the waiting queue and ``req`` (status WAITING and
        its cached match), or marks ``req`` REJECTED and returns why it can never fit."""
        ...

    @property
    def has_work(self) -> bool:
        """Whether a step could admit anything (waiting requests or a chunked
        continuation). Mutates nothing."""
        ...

    def schedule(self, now: float) -> StepOutput:
        """Run one admission pass at time ``now``. Mutates: the waiting queue, the
        admitted requests (status PREFILLING, pages allocated), the cache (locks,
        load-backs, evictions for the new pages), the running set, the counters; may
        preempt decoding requests (``StepOutput.preempted``: their ids, back in the
        queue); a non-empty step's batch is kept in flight under ``step.step_id``."""
        ...

    def forward_done(self, step: StepOutput, now: float) -> list[Request]:
        """The step's forward finished (each non-empty step exactly once, in any order;
        an empty step is a no-op; a step not in flight raises ValueError). Mutates:
        the in-flight record, finishes its load-backs, caches the
        computed pages (moving them from the requests to the cache) and moves each
        request's lock; returns the requests whose prompt is complete (first token at
        ``now``), still holding their KV. A request's pages that duplicate pages another
        request cached first are freed, and its page table names the cached ones from
        now on (as SGLang's ``cache_unfinished_req`` rewrites ``req_to_token``): read
        :meth:`page_table` again after this call."""
        ...

    def page_table(self, req: Request) -> list[int]:
        """Engine-facing page ids of ``req``'s sequence pages, in order: its cached
        prefix, the pages it owns and the step in flight's (O(pages)). Pure."""
        ...

    def begin_transfer(self, req: Request) -> None:
        """pd-prefill: ``req``'s KV is being sent to decode. Mutates: its status."""
        ...

    def start_decode(self, req: Request) -> None:
        """colocated: ``req`` joins the decode batch. Mutates: its status, the decode set."""
        ...

    def decode_load(self) -> tuple[int, int]:
        """(decoding requests, their context tokens) for the decode step's cost. Pure."""
        ...

    def decode_step(self, now: float) -> tuple[list[Request], list[Request]]:
        """One decode step: every decoding request gains a token (a page when it needs
        one). Mutates: page tables, the cache (evictions), the decode set; returns
        (finished and released, retracted back to the queue). A retracted request whose
        re-prefill (prompt + kept output) could never be admitted is not queued but
        rejected: status REJECTED, ``reject_reason`` "requeued with N output tokens
        kept: ...". The same holds for ``StepOutput.preempted``."""
        ...

    def finish(self, req: Request, now: float) -> None:
        """``req`` no longer needs its KV. Mutates: frees its owned pages to the free
        lists, unlocks its prefix, status FINISHED."""
        ...

    def abort(self, req: Request, now: float) -> None:
        """Drop ``req`` wherever it is (queue, chunk, running, decode). Mutates: as
        :meth:`finish`, and removes it from the queue / decode set; status ABORTED."""
        ...

    def set_admission_observer(self, obs: AdmissionObserver | None) -> None:
        """Call ``obs`` with every admission decision; None (the default) turns it off."""
        ...

    def set_kv_listener(self, listener: KVListener | None) -> None:
        """Call ``listener`` with every KV-cache event (cache/events.py); None: off."""
        ...

    def counters(self) -> dict[str, Any]:
        """Run-long counters (admission, affinity, preemption, eviction). Pure."""
        ...

    def num_pending(self) -> int:
        """Requests still waiting or mid-chunk. Pure."""
        ...

    def check(self) -> None:
        """Verify every invariant (page-level ownership included). Pure."""
        ...


def build_scheduler(
    cfg: SchedulerConfig,
    total_pages: int,
    key_tokens: int,
    *,
    host_pages: int = 0,
    buffer_ctx: BufferEstimatorContext | None = None,
    reserve_decode: bool = True,
    forward_estimate: ForwardEstimate | None = None,
) -> SchedulerInterface:
    """A scheduler over a KV pool of ``total_pages`` pages (``cfg.page_size`` tokens
    each) whose prefix cache keys ``key_tokens`` tokens a unit (a multiple of the page).

    ``host_pages``: the HiCache host tier's pages (with ``enable_hierarchical_cache``);
    ``buffer_ctx``: the CP buffer estimator's model context (``cp_shared_kv_prefill_
    max_buffer_size``); ``reserve_decode``: admission reserves decode room for decoding
    requests (colocated; a pd-prefill engine hands requests off and passes False);
    ``forward_estimate``: the marginal-cost service of the policies that use one
    (seconds of a prefill forward over a list of ``ReqShape``; None: they count tokens,
    sched/policy_view.py)."""
    return Scheduler(
        cfg,
        total_pages,
        key_tokens,
        host_pages=host_pages,
        buffer_ctx=buffer_ctx,
        reserve_decode=reserve_decode,
        forward_estimate=forward_estimate,
    )
