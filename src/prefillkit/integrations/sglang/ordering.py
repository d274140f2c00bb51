"""The waiting-queue order with prefillkit's features, around SGLang's
``SchedulePolicy.calc_priority`` (which sorts ``waiting_queue`` in place each pass).

The order is prefillkit's (``sched/policy.py`` ``order_waiting`` and the affinity
promotion of ``sched/prefill_pass.py``): the requests an affinity stop promoted (still
waiting) first, then with the wait bound the requests that have waited ``max_wait_s``
(oldest first: :func:`prefillkit.sched.policy.split_aged`), then SGLang's own policy order
of the rest (SGLang's ``calc_priority`` run on the rest only, as prefillkit's policy
orders only the requests that have not aged). With neither feature on, SGLang's
``calc_priority`` runs alone, unchanged. The list object is SGLang's: it is reordered in
place.

Imports nothing from SGLang itself (it is handed SGLang's objects).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefillkit.integrations.sglang.adder import PluginState, state_of
from prefillkit.integrations.sglang.settings import PluginSettings
from prefillkit.sched.policy import split_aged

__all__ = ["ordered_calc_priority"]


def _arrival_order(st: PluginState, waiting_queue: list[Any]) -> None:
    """Number the requests not seen before, in queue order: new arrivals are appended
    to SGLang's queue in arrival order, so the numbers break arrival-time ties as
    prefillkit's arrival-ordered queue does."""
    for req in waiting_queue:
        if req not in st.arrival_seq:
            st.arrival_seq[req] = st.next_seq
            st.next_seq += 1


def _take_promoted(st: PluginState, waiting: set[int]) -> list[Any]:
    """The promoted requests still waiting: the last pass's promoted requests that were
    not admitted keep the lead, ahead of those promoted since (prefill_pass.py)."""
    held = {id(r) for r in st.promoted}
    kept = [r for r in st.pass_promoted if id(r) in waiting and id(r) not in held]
    promoted = [r for r in kept + st.promoted if id(r) in waiting]
    st.promoted = []
    st.pass_promoted = promoted
    return promoted


def ordered_calc_priority(
    original: Callable[..., Any],
    settings: PluginSettings,
    clock: Callable[[], float],
    policy: Any,
    waiting_queue: list[Any],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Order ``waiting_queue`` in place; ``original`` is SGLang's ``calc_priority``
    (unbound: called with ``policy``)."""
    st = state_of(policy.tree_cache)
    st.priority_scheduling = bool(policy.enable_priority_scheduling)
    wait = settings.max_wait_s
    if st.priority_scheduling:
        wait = None  # NOTE: strict priority classes, as prefillkit without priority aging
    if settings.affinity is None and wait is None:
        return original(policy, waiting_queue, *args, **kwargs)
    _arrival_order(st, waiting_queue)
    promoted = _take_promoted(st, {id(r) for r in waiting_queue}) if settings.affinity else []
    ids = {id(r) for r in promoted}
    queue = [r for r in waiting_queue if id(r) not in ids]
    aged: list[Any] = []
    if wait is not None:
        now = clock()
        order = sorted(range(len(queue)), key=lambda i: st.arrival_seq[queue[i]])
        arrivals = [queue[i].time_stats.wait_queue_entry_time for i in order]
        first, _ = split_aged(arrivals, now, wait)
        aged = [queue[order[i]] for i in first]
        aged_ids = {id(r) for r in aged}
        queue = [r for r in queue if id(r) not in aged_ids]
    result = original(policy, queue, *args, **kwargs)
    waiting_queue[:] = promoted + aged + queue
    return result
