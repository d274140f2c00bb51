# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The scheduler: a thin facade implementing
:class:`~prefillkit.sched.interface.SchedulerInterface` over one
:class:`~prefillkit.sched.state.SchedulerState` and the modules by concern:

- ``sched/waiting.py``: arrivals, rejection, the queue;
- ``sched/prefill_pass.py``: the admission pass (the hot path);
- ``sched/launch.py``: a batch's pages, the step the engine runs, what its forward
  computed;
- ``sched/decode.py``: decode steps, retraction, release and abort;
- ``sched/preempt.py``: priority preemption.

Its public calls are exactly the interface's (``tests/test_interface.py`` checks it);
``state`` is there to be inspected (tests, ``sched/seeding.py``, benchmarks), not driven.
An engine builds one with ``prefillkit.sched.interface.build_scheduler``. It imports
nothing from the simulator: an engine can embed it.
"""

from __future__ import annotations

from typing import Any

from prefillkit.cache.events import KVListener
from prefillkit.cache.invariants import check_invariants
from prefillkit.request import ReqStatus, Request
from prefillkit.sched import decode, launch, waiting
from prefillkit.sched.buffer import BufferEstimatorContext
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.policy_view import ForwardEstimate
from prefillkit.sched.prefill_pass import run_pass
from prefillkit.sched.state import SchedulerState, counters
from prefillkit.sched.step import AdmissionObserver, StepOutput


class Scheduler:
    """Cache-aware prefill admission over a KV pool of ``total_pages`` pages whose prefix
    cache keys ``key_tokens`` tokens a unit. ``host_pages``: the HiCache host tier (with
    ``enable_hierarchical_cache``); ``buffer_ctx``: the CP buffer estimator's context;
    ``reserve_decode``: passes reserve decode room for decoding requests (colocated)."""

    def __init__(
        self,
        cfg: SchedulerConfig,
        total_pages: int,
        key_tokens: int,
        *,
        host_pages: int = 0,
        buffer_ctx: BufferEstimatorContext | None = None,
        reserve_decode: bool = True,
        forward_estimate: ForwardEstimate | None = None,
    ) -> None:
        self.state = SchedulerState(
            cfg, total_pages, key_tokens, host_pages, buffer_ctx, reserve_decode
        )
        if self.state.policy is not None:
            self.state.policy.set_estimate(forward_estimate)

    # ------------------------------------------------------------------ arrival
    def add_request(self, req: Request) -> str | None:
        """A request arrived: queued, or REJECTED with the reason it can never fit."""
        return waiting.add_request(self.state, req)

    @property
    def has_work(self) -> bool:
        """Whether a step could admit anything (waiting requests or a chunk)."""
        st = self.state
        return bool(st.waiting) or st.chunked_req is not None

    def num_pending(self) -> int:
        """Requests waiting or mid-chunk."""
        st = self.state
        return len(st.waiting) + (1 if st.chunked_req is not None else 0)

    # ------------------------------------------------------------------ prefill
    def schedule(self, now: float) -> StepOutput:
        """One admission pass as an immutable :class:`StepOutput` (see interface.py)."""
        st = self.state
        return launch.step_output(st, run_pass(st, now))

    def forward_done(self, step: StepOutput, now: float) -> list[Request]:
        """The step's forward finished: its pages are cached; returns the requests
        whose prompt is complete (they still hold their KV)."""
        if step.step_id == 0:  # NOTE: an empty step
            return []
        batch = self.state.in_flight.pop(step.step_id, None)
        if batch is None:
            raise ValueError(f"step {step.step_id} is not in flight")
        return launch.prefill_done(self.state, batch, now)

    def page_table(self, req: Request) -> list[int]:
        """Engine-facing page ids of ``req``'s sequence pages (see interface.py)."""
        return launch.page_table(self.state, req)

    def begin_transfer(self, req: Request) -> None:
        """pd-prefill: the request's KV is being sent out; it keeps its pages."""
        req.state.status = ReqStatus.TRANSFERRING

    # ------------------------------------------------------------------ decode
    def start_decode(self, req: Request) -> None:
        """colocated: ``req`` joins the decode batch."""
        decode.start_decode(self.state, req)

    def decode_load(self) -> tuple[int, int]:
        """(decoding requests, their context tokens)."""
        return decode.decode_load(self.state)

    def decode_step(self, now: float) -> tuple[list[Request], list[Request]]:
        """One decode step; returns (finished and released, retracted)."""
        return decode.decode_step(self.state, now)

    # ------------------------------------------------------------------ the end
    def finish(self, req: Request, now: float) -> None:
        """The request no longer needs its KV: pages freed, prefix unlocked."""
        decode.release(self.state, req, now)

    def abort(self, req: Request, now: float) -> None:
        """Drop ``req`` wherever it is: queue, chunk, running, decode set."""
        st = self.state
        waiting.remove(st, req)
        decode.abort(st, req, now)

    # ------------------------------------------------------------------ hooks
    def set_admission_observer(self, obs: AdmissionObserver | None) -> None:
        """Call ``obs`` with every admission decision (see AdmissionEvent); None: off."""
        self.state.admission_observer = obs

    def set_kv_listener(self, listener: KVListener | None) -> None:
        """Call ``listener`` with every KV-cache event (see cache/events.py); None: off."""
        self.state.cache.kv_listener = listener

    def counters(self) -> dict[str, Any]:
        """Run-long counters, as the simulator's summary reports them."""
        return counters(self.state)

    def check(self) -> None:
        """Invariant check over cache, pool and every live request's pages (and the
        kept LPM order against a full re-sort)."""
        st = self.state
        if st.lpm is not None:
            st.lpm.check(list(st.waiting))
        running = st.running.values()
        check_invariants(
            st.cache,
            [(r.state.owned_start_page, r.state.owned_end_page) for r in running],
            [
                (r.rid, r.state.owned_start_page, launch.owned_ids(r), r.state.locked_node)
                for r in running
            ],
        )
