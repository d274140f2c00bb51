# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""What one scheduler step hands the engine: :class:`StepOutput` and its
:class:`ScheduledReq` per request, and the admission observer's :class:`AdmissionEvent`.

An engine imports them from ``prefillkit.sched.interface`` (which re-exports them with the
interface they belong to); they live here so that the scheduler's modules build them
without importing the interface, which imports the scheduler (its factory).

A step holds ids, ints and page-id arrays only (as vLLM's ``SchedulerOutput``): no
request object, no cache node. The scheduler keeps its own record of the batch keyed by
``StepOutput.step_id`` until :meth:`SchedulerInterface.forward_done` gets the step back.

Page ids: lane-local ids are held as ``array('q')`` per owner lane (``cache/pages.py``);
the engine-facing id of lane-local page ``k`` of lane ``i`` is ``k * cp_size + i``, and
:meth:`ScheduledReq.page_ids` / :meth:`ScheduledReq.prefix_page_ids` give them in sequence
order. Sequence page ``j`` of a request lives on lane ``j mod cp_size``.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from prefillkit.cache.pages import Pending, global_ids, pending_table
from prefillkit.sched.affinity import AffinityBound, BatchLead
from prefillkit.sched.verdicts import CloseReason

__all__ = [
    "AdmissionEvent",
    "AdmissionEventKind",
    "AdmissionObserver",
    "AffinityBound",
    "BatchLead",
    "PrefixSegment",
    "ScheduledReq",
    "StepOutput",
    "limit_of",
]

#: One cached node of a request's prefix: its first sequence page and its lane table
#: (``cache/pages.py``). NOTE: a node's table is replaced, never changed in place (a
#: split or merge builds new arrays), so a segment stays exact after the step.
PrefixSegment: TypeAlias = "tuple[int, list[array[int]]]"

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
    pages are the cached path's ``prefix_path`` (one segment per cache node, root first;
    its first ``prefix_node_pages`` sequence pages) followed by ``prefix_owned``, the
    pages a chunked continuation still owns from earlier chunks (a lane table from
    sequence page ``prefix_node_pages``).
    ``new_pages`` is the lane table of the pages this step allocated, from sequence
    page ``new_start_page`` (``pending``: where they lie in the batch's page blocks).
    ``load_back``: ``(host slot, engine-facing device page)`` copies. ``is_chunk``: the
    prompt is not complete after this forward (a chunked prefill continues later).

    NOTE: the path's page ids are those of the step: a locked path's page ids never
    change (splits keep them), so they stay exact while the request holds its KV.
    """

    rid: str
    prefix_len: int
    loaded_tokens: int
    extend_start: int
    extend_end: int
    prefix_path: tuple[PrefixSegment, ...]
    prefix_node_pages: int
    prefix_owned: tuple[array[int], ...]
    new_start_page: int
    pending: Pending
    load_back: tuple[tuple[int, int], ...]
    is_chunk: bool

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        rid: str,
        prefix_len: int,
        loaded_tokens: int,
        extend_start: int,
        extend_end: int,
        prefix_path: tuple[PrefixSegment, ...],
        prefix_node_pages: int,
        prefix_owned: tuple[array[int], ...],
        new_start_page: int,
        pending: Pending,
        load_back: tuple[tuple[int, int], ...],
        is_chunk: bool,
    ) -> None:
        object.__setattr__(self, "rid", rid)
        object.__setattr__(self, "prefix_len", prefix_len)
        object.__setattr__(self, "loaded_tokens", loaded_tokens)
        object.__setattr__(self, "extend_start", extend_start)
        object.__setattr__(self, "extend_end", extend_end)
        object.__setattr__(self, "prefix_path", prefix_path)
        object.__setattr__(self, "prefix_node_pages", prefix_node_pages)
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
        out: list[int] = []
        for start, table in self.prefix_path:
            out += global_ids(table, start)
        del out[self.prefix_node_pages :]  # NOTE: the lock may have moved deeper since
        out += global_ids(list(self.prefix_owned), self.prefix_node_pages)
        return out


@dataclass(frozen=True, slots=True, init=False)
class StepOutput:
    """The result of one admission pass (empty: ``reqs == ()``, ``step_id == 0``).

    ``step_id``: the scheduler's id of the batch (1, 2, ... per non-empty step); pass the
    step back to :meth:`SchedulerInterface.forward_done` when its forward is done.
    ``stop_reason``: why the pass stopped (for an empty pass, why nothing was admitted);
    ``limit``: the same when it is a batch limit (a budget, a CP limit, the chunk, an
    affinity stop), None when the queue ran out or memory / the request-slot limit
    stopped it. The remaining fields describe the batch as the scheduler admitted it
    (``extend_tokens`` page-ceiled, ``cached_tokens`` true prefixes; ``lead_class`` the
    class of its first request; ``skips``: the cold requests affinity skipped, each at
    most once a pass, so also the requests it deferred; ``stops``: 0 or 1,
    ``stop_bound`` the bound that tripped; ``preempted``: the ids of the decoding
    requests this pass preempted, back in the queue or rejected).
    ``dp_rank_sizes``: a step of several DP attention ranks' schedulers run in lockstep
    (``prefillkit.sim.dp_attention``): how many of ``reqs`` each rank contributed, in
    rank order (``reqs`` is their batches one after another); empty for one scheduler.
    ``wake_at``: a pass that deferred work only until a time (a zoo policy's delay,
    docs/policies.md) asks to be run again then if nothing else happens first; None: no
    such request (the next arrival or completion runs the next pass).
    """

    step_id: int
    reqs: tuple[ScheduledReq, ...]
    stop_reason: CloseReason
    extend_tokens: int = 0
    cached_tokens: int = 0
    load_back_tokens: int = 0
    buffer_bytes: int = 0
    lead_class: BatchLead = BatchLead.EMPTY
    has_chunked: bool = False
    waiting_len: int = 0
    skips: int = 0
    stops: int = 0
    stop_bound: AffinityBound | None = None
    preempted: tuple[str, ...] = ()
    dp_rank_sizes: tuple[int, ...] = ()
    wake_at: float | None = None

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        step_id: int,
        reqs: tuple[ScheduledReq, ...],
        stop_reason: CloseReason,
        extend_tokens: int = 0,
        cached_tokens: int = 0,
        load_back_tokens: int = 0,
        buffer_bytes: int = 0,
        lead_class: BatchLead = BatchLead.EMPTY,
        has_chunked: bool = False,
        waiting_len: int = 0,
        skips: int = 0,
        stops: int = 0,
        stop_bound: AffinityBound | None = None,
        preempted: tuple[str, ...] = (),
        dp_rank_sizes: tuple[int, ...] = (),
        wake_at: float | None = None,
    ) -> None:
        object.__setattr__(self, "step_id", step_id)
        object.__setattr__(self, "reqs", reqs)
        object.__setattr__(self, "stop_reason", stop_reason)
        object.__setattr__(self, "extend_tokens", extend_tokens)
        object.__setattr__(self, "cached_tokens", cached_tokens)
        object.__setattr__(self, "load_back_tokens", load_back_tokens)
        object.__setattr__(self, "buffer_bytes", buffer_bytes)
        object.__setattr__(self, "lead_class", lead_class)
        object.__setattr__(self, "has_chunked", has_chunked)
        object.__setattr__(self, "waiting_len", waiting_len)
        object.__setattr__(self, "skips", skips)
        object.__setattr__(self, "stops", stops)
        object.__setattr__(self, "stop_bound", stop_bound)
        object.__setattr__(self, "preempted", preempted)
        object.__setattr__(self, "dp_rank_sizes", dp_rank_sizes)
        object.__setattr__(self, "wake_at", wake_at)

    @property
    def empty(self) -> bool:
        return not self.reqs

    @property
    def limit(self) -> CloseReason | None:
        """``stop_reason`` when it is a batch limit (:func:`limit_of`), else None."""
        return limit_of(self.stop_reason)


class AdmissionEventKind(Enum):
    """What an :class:`AdmissionEvent` reports."""

    CANDIDATE = "candidate"  # the adder tried a request
    SKIP = "skip"  # affinity left a request queued
    STOP = "stop"  # the pass stopped


@dataclass(frozen=True, slots=True)
class AdmissionEvent:
    """One admission decision of a pass, for admission observers.

    ``kind``: ``CANDIDATE`` (the adder tried ``rid``; ``result`` its AddReqResult
    name, ``admitted`` whether it joined the batch), ``SKIP`` (affinity left it
    queued), or ``STOP`` (the pass stopped: ``reason`` the CloseReason value).
    ``rem_total_tokens`` / ``rem_input_tokens`` / ``rem_chunk_tokens``: the budgets
    after the decision.
    """

    kind: AdmissionEventKind
    now: float
    rid: str | None
    result: str | None
    admitted: bool
    reason: str | None
    rem_total_tokens: float
    rem_input_tokens: int
    rem_chunk_tokens: int | None


AdmissionObserver = Callable[[AdmissionEvent], None]
