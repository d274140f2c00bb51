# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""What an engine calls: the scheduler's typed interface and its step result.

An engine (the simulator's loop in ``prefillkit.sim.engine``, ``examples/embed_engine.py``,
or a real serving engine) drives :class:`~prefillkit.sched.scheduler.Scheduler` through
:class:`SchedulerInterface` only; ``tests/test_interface.py`` checks that the simulator's
loop touches nothing else. Each call's docstring says what it mutates. A step returns one
immutable :class:`StepOutput` (vLLM's ``SchedulerOutput`` is the model): everything the
engine needs to run the forward -- per request its prefix pages, its new page ids per
owner lane, the extend range and the load-back copies -- and why the admission pass
stopped.

Page ids: lane-local ids are held as ``array('q')`` per owner lane (``cache/pages.py``);
the engine-facing id of lane-local page ``k`` of lane ``i`` is ``k * cp_size + i``, and
:meth:`ScheduledReq.page_ids` / :meth:`ScheduledReq.prefix_page_ids` give them in sequence
order. Sequence page ``j`` of a request lives on lane ``j mod cp_size``.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from prefillkit.cache.pages import Pending, global_ids, pending_table
from prefillkit.sched.adder import CloseReason

if TYPE_CHECKING:
    from prefillkit.cache.events import KVListener
    from prefillkit.cache.node import Node
    from prefillkit.request import Request
    from prefillkit.sched.scheduler import PrefillBatch

__all__ = [
    "AdmissionEvent",
    "AdmissionObserver",
    "ScheduledReq",
    "SchedulerInterface",
    "StepOutput",
    "limit_of",
]

# Close reasons that are not a limit (the queue ran out, or memory / request slots).
_NOT_LIMITS = frozenset(
    {CloseReason.QUEUE_EMPTY, CloseReason.MEMORY, CloseReason.MAX_RUNNING_REQUESTS}
)


def limit_of(reason: CloseReason) -> CloseReason | None:
    """``reason`` when it is a batch limit, None for an empty queue, memory or slots."""
    return None if reason in _NOT_LIMITS else reason


@dataclass(frozen=True, slots=True, init=False)
class ScheduledReq:
    """One request of a step (a snapshot: later steps do not change it).

    The forward computes prompt tokens ``[extend_start, extend_end)``; tokens
    ``[0, prefix_len)`` are cached (``loaded_tokens`` of them loaded back from host by
    ``load_back`` before the forward reads them, the rest on device). The prefix's
    pages are the cached path ending at ``prefix_node`` (its first
    ``prefix_node_pages`` sequence pages, ``unit_pages`` per key unit; ``None``: none)
    followed by ``prefix_owned``, the pages a chunked continuation still owns from
    earlier chunks (a lane table from sequence page ``prefix_node_pages``).
    ``new_pages`` is the lane table of the pages this step allocated, from sequence
    page ``new_start_page`` (``pending``: where they lie in the batch's page blocks).
    ``load_back``: ``(host slot, engine-facing device page)`` copies. ``is_chunk``: the
    prompt is not complete after this forward (a chunked prefill continues later).

    NOTE: the path is read when asked (:meth:`prefix_page_ids`), which is exact while
    the request holds its KV: a locked path's page ids never change (splits keep them).
    """

    req: Request
    rid: str
    prefix_len: int
    loaded_tokens: int
    extend_start: int
    extend_end: int
    prefix_node: Node | None
    prefix_node_pages: int
    unit_pages: int
    prefix_owned: tuple[array[int], ...]
    new_start_page: int
    pending: Pending
    load_back: tuple[tuple[int, int], ...]
    is_chunk: bool

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        req: Request,
        rid: str,
        prefix_len: int,
        loaded_tokens: int,
        extend_start: int,
        extend_end: int,
        prefix_node: Node | None,
        prefix_node_pages: int,
        unit_pages: int,
        prefix_owned: tuple[array[int], ...],
        new_start_page: int,
        pending: Pending,
        load_back: tuple[tuple[int, int], ...],
        is_chunk: bool,
    ) -> None:
        object.__setattr__(self, "req", req)
        object.__setattr__(self, "rid", rid)
        object.__setattr__(self, "prefix_len", prefix_len)
        object.__setattr__(self, "loaded_tokens", loaded_tokens)
        object.__setattr__(self, "extend_start", extend_start)
        object.__setattr__(self, "extend_end", extend_end)
        object.__setattr__(self, "prefix_node", prefix_node)
        object.__setattr__(self, "prefix_node_pages", prefix_node_pages)
        object.__setattr__(self, "unit_pages", unit_pages)
        object.__setattr__(self, "prefix_owned", prefix_owned)
        object.__setattr__(self, "new_start_page", new_start_page)
        object.__setattr__(self, "pending", pending)
        object.__setattr__(self, "load_back", load_back)
        object.__setattr__(self, "is_chunk", is_chunk)

    @property
    def new_pages(self) -> tuple[array[int], ...]:
        """The new pages per owner lane (lane-local ids), from ``pending`` (the batch's
        page blocks, never mutated) when asked: a step that nobody reads costs nothing."""
        return tuple(pending_table(self.pending))

    @property
    def extend_len(self) -> int:
        return self.extend_end - self.extend_start

    def page_ids(self) -> list[int]:
        """Engine-facing ids of the new pages, in sequence order (O(pages))."""
        return global_ids(list(self.new_pages), self.new_start_page)

    def prefix_page_ids(self) -> list[int]:
        """Engine-facing ids of the prefix's pages, in sequence order (O(pages))."""
        parts: list[tuple[int, list[array[int]]]] = []
        node = self.prefix_node
        while node is not None and node.parent is not None:  # NOTE: the root holds none
            parts.append((node.start * self.unit_pages, node.pages))
            node = node.parent
        out: list[int] = []
        for start, table in parts[::-1]:
            out += global_ids(table, start)
        del out[self.prefix_node_pages :]  # NOTE: the lock may have moved deeper since
        out += global_ids(list(self.prefix_owned), self.prefix_node_pages)
        return out


@dataclass(frozen=True, slots=True, init=False)
class StepOutput:
    """The result of one admission pass (empty: ``reqs == ()``).

    ``stop_reason``: why the pass stopped (for an empty pass, why nothing was admitted);
    ``limit``: the same when it is a batch limit (a budget, a CP limit, the chunk, an
    affinity stop), None when the queue ran out or memory / the request-slot limit
    stopped it. The remaining fields describe the batch as the scheduler admitted it
    (``extend_tokens`` page-ceiled, ``cached_tokens`` true prefixes). ``handle`` is the
    scheduler's own record of the batch: pass the step back to
    :meth:`SchedulerInterface.forward_done`; engines need not read it.
    """

    reqs: tuple[ScheduledReq, ...]
    stop_reason: CloseReason
    limit: CloseReason | None
    extend_tokens: int = 0
    cached_tokens: int = 0
    load_back_tokens: int = 0
    buffer_bytes: int = 0
    lead_class: str = "none"
    has_chunked: bool = False
    waiting_len: int = 0
    skips: int = 0
    defers: int = 0
    stops: int = 0
    stop_bound: str | None = None
    preempted: tuple[Request, ...] = ()
    handle: PrefillBatch | None = None

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        reqs: tuple[ScheduledReq, ...],
        stop_reason: CloseReason,
        limit: CloseReason | None,
        extend_tokens: int = 0,
        cached_tokens: int = 0,
        load_back_tokens: int = 0,
        buffer_bytes: int = 0,
        lead_class: str = "none",
        has_chunked: bool = False,
        waiting_len: int = 0,
        skips: int = 0,
        defers: int = 0,
        stops: int = 0,
        stop_bound: str | None = None,
        preempted: tuple[Request, ...] = (),
        handle: PrefillBatch | None = None,
    ) -> None:
        object.__setattr__(self, "reqs", reqs)
        object.__setattr__(self, "stop_reason", stop_reason)
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "extend_tokens", extend_tokens)
        object.__setattr__(self, "cached_tokens", cached_tokens)
        object.__setattr__(self, "load_back_tokens", load_back_tokens)
        object.__setattr__(self, "buffer_bytes", buffer_bytes)
        object.__setattr__(self, "lead_class", lead_class)
        object.__setattr__(self, "has_chunked", has_chunked)
        object.__setattr__(self, "waiting_len", waiting_len)
        object.__setattr__(self, "skips", skips)
        object.__setattr__(self, "defers", defers)
        object.__setattr__(self, "stops", stops)
        object.__setattr__(self, "stop_bound", stop_bound)
        object.__setattr__(self, "preempted", preempted)
        object.__setattr__(self, "handle", handle)

    @property
    def empty(self) -> bool:
        return not self.reqs

    @property
    def closed_by(self) -> str:
        value: str = self.stop_reason._value_  # NOTE: .value is a slow descriptor
        return value


@dataclass(frozen=True, slots=True)
class AdmissionEvent:
    """One admission decision of a pass, for admission observers.

    ``kind``: ``"candidate"`` (the adder tried ``rid``; ``result`` its AddReqResult
    name, ``admitted`` whether it joined the batch), ``"skip"`` (affinity left it
    queued), or ``"stop"`` (the pass stopped: ``reason`` the CloseReason value).
    ``rem_total_tokens`` / ``rem_input_tokens`` / ``rem_chunk_tokens``: the budgets
    after the decision.
    """

    kind: str
    now: float
    rid: str | None
    result: str | None
    admitted: bool
    reason: str | None
    rem_total_tokens: float
    rem_input_tokens: int
    rem_chunk_tokens: int | None


AdmissionObserver = Callable[[AdmissionEvent], None]


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
        preempt decoding requests (``StepOutput.preempted``, back in the queue)."""
        ...

    def forward_done(self, step: StepOutput, now: float) -> list[Request]:
        """The step's forward finished. Mutates: finishes its load-backs, caches the
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
