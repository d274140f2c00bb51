"""prefillkit's admission rules on SGLang's own ``PrefillAdder``: a subclass SGLang
instantiates every admission pass (``Scheduler.get_prefill_adder_class()``).

It acts on SGLang's objects only (its ``Req``, tree cache, allocator, running batch) and
keeps no copy of their state; its decisions are the core's pure functions:

- affinity (``sched/affinity.py`` ``classify`` / ``decide`` / ``tripped_bound``): a cold
  candidate behind a warm-led batch is skipped (``add_one_req`` returns CONTINUE without
  admitting it: SGLang's scan goes on) or, once a bound trips, stops the scan (OTHER) and
  is promoted to the head of the next pass's order (``ordering.py``);
- CP shared-KV batches (``sched/verdicts.py``): one request per batch, or with bs>1 the
  request, extend-token, cached-token and temporary-buffer limits, checked on the
  admission SGLang itself
  selected (after its memory test and chunk cut); a chunked continuation leads alone and
  seeds the tallies with its true prefix; the input budget is raised to the extend limit.

With every feature off each override is one attribute test and a call to SGLang's own
method: the decisions are SGLang's (``tests/engine_sglang/test_sglang_differential.py``).

Imports SGLang.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prefillkit.integrations.sglang import require_sglang
from prefillkit.integrations.sglang.settings import PluginSettings
from prefillkit.sched.affinity import (
    AffinityBound,
    AffinityDecision,
    BatchLead,
    ReqClass,
    classify,
    decide,
    tripped_bound,
)
from prefillkit.sched.buffer import BufferEstimatorContext, BufferReqShape, estimate_buffer_bytes
from prefillkit.sched.verdicts import (
    CloseReason,
    CpMode,
    cp_extend_limit,
    cp_pre_admission_reason,
    cp_token_limit_reason,
)

require_sglang()

from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder  # noqa: E402

__all__ = ["PluginState", "PrefillkitAdder", "make_adder_class", "state_of"]


@dataclass
class PluginState:
    """What outlives one pass, per SGLang scheduler (keyed by its tree cache): the
    requests an affinity stop promoted, each request's defer count and arrival order,
    and run-long counters. ``pass_promoted``: the promoted requests the last pass's order
    began with (a promoted request keeps the lead until it is admitted)."""

    promoted: list[Any] = field(default_factory=list)
    pass_promoted: list[Any] = field(default_factory=list)
    defers: weakref.WeakKeyDictionary[Any, int] = field(default_factory=weakref.WeakKeyDictionary)
    arrival_seq: weakref.WeakKeyDictionary[Any, int] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    next_seq: int = 0
    priority_scheduling: bool = False
    counters: dict[str, int] = field(default_factory=dict)
    last_close: CloseReason | None = None

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


_STATES: weakref.WeakKeyDictionary[Any, PluginState] = weakref.WeakKeyDictionary()


def state_of(tree_cache: Any) -> PluginState:
    """The plugin state of the scheduler that owns ``tree_cache`` (created on first use)."""
    st = _STATES.get(tree_cache)
    if st is None:
        st = _STATES[tree_cache] = PluginState()
    return st


def _cp_mode(settings: PluginSettings, cp_size: int) -> CpMode:
    if settings.cp is None or cp_size <= 1:
        return CpMode.OFF
    return CpMode.BS_GT1 if settings.cp.bs_gt1 else CpMode.BS1


class PrefillkitAdder(PrefillAdder):  # type: ignore[misc]
    """SGLang's ``PrefillAdder`` with prefillkit's features (class attributes set by
    :func:`make_adder_class`: the settings, the clock SGLang's queue times are read
    against, and SGLang's prefill context-parallel size, 1 without prefill CP)."""

    pk_settings: PluginSettings = PluginSettings()
    pk_clock: Callable[[], float] = staticmethod(lambda: 0.0)
    pk_cp_size: int = 1
    rem_input_tokens: int  # SGLang's (declared for the type checker)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        s = self.pk_settings
        self.pk_state = state_of(self.tree_cache)
        self.pk_affinity = s.affinity if not self.pk_state.priority_scheduling else None
        self.pk_cp_mode = _cp_mode(s, self.pk_cp_size)
        self.pk_now = self.pk_clock() if self.pk_affinity is not None else 0.0
        self.pk_lead = BatchLead.EMPTY
        self.pk_skips = 0
        self.pk_chunk_led = False
        self.pk_batch_extend = 0
        self.pk_batch_cached = 0
        self.pk_extend_limit: int | None = None
        self.pk_shapes: list[BufferReqShape] = []  # the batch's, for the buffer estimate
        self.pk_candidate: BufferReqShape | None = None
        self.pk_buffer_ctx: BufferEstimatorContext | None = None
        if self.pk_cp_mode is CpMode.BS_GT1 and s.cp is not None:
            if s.cp.max_buffer_bytes is not None and s.cp.buffer_model is not None:
                self.pk_buffer_ctx = BufferEstimatorContext(
                    model=s.cp.buffer_model,
                    kv_cache_dtype=s.cp.kv_cache_dtype,
                    cp_size=self.pk_cp_size,
                    page_size=self.page_size,
                )
            self.pk_extend_limit = cp_extend_limit(
                s.cp.max_total_extend_tokens, self.rem_chunk_tokens
            )
            if self.pk_extend_limit is not None:
                # NOTE: as prefillkit's adder: on this path only the input budget must not
                # stop batching before the CP extend limit does.
                self.rem_input_tokens = max(self.rem_input_tokens, self.pk_extend_limit)

    # ------------------------------------------------------------------ chunked request
    def add_chunked_req(self, req: Any) -> Any:
        if self.pk_affinity is None and self.pk_cp_mode is CpMode.OFF:
            return super().add_chunked_req(req)
        n = len(self.can_run_list)
        out = super().add_chunked_req(req)
        if len(self.can_run_list) > n:
            self.pk_lead = BatchLead.WARM  # NOTE: a continuation carries its true prefix
            self.pk_chunk_led = True
            # NOTE: true-prefix seeding: the chunk's carried prefix counts as cached.
            self._pk_tally(req.prefix_len, req.extend_end - req.prefix_len, 0)
        return out

    # ------------------------------------------------------------------ one request
    def add_one_req(
        self, req: Any, has_chunked_req: bool, truncation_align_size: int | None
    ) -> Any:
        if self.pk_affinity is None and self.pk_cp_mode is CpMode.OFF:
            return super().add_one_req(req, has_chunked_req, truncation_align_size)
        cls = classify(req.prefix_len, req.host_hit_length, self._pk_floor())
        if self.pk_affinity is not None:
            verdict = self._pk_affinity(req, cls)
            if verdict is not None:
                return verdict
        reason = cp_pre_admission_reason(
            self.pk_cp_mode,
            len(self.can_run_list),
            self.pk_chunk_led,
            self.pk_settings.cp.max_requests if self.pk_settings.cp is not None else None,
        )
        if reason is not None:
            return self._pk_close(reason)
        n = len(self.can_run_list)
        res = super().add_one_req(req, has_chunked_req, truncation_align_size)
        if len(self.can_run_list) > n and self.pk_lead is BatchLead.EMPTY:
            self.pk_lead = BatchLead.WARM if cls is ReqClass.WARM else BatchLead.COLD
        return res

    def _pk_floor(self) -> int:
        a = self.pk_affinity
        return a.warm_floor_tokens if a is not None else 1

    def _pk_affinity(self, req: Any, cls: ReqClass) -> Any | None:
        """SKIP → CONTINUE (not admitted, the scan goes on), STOP → OTHER, else None."""
        bounds = self.pk_affinity
        assert bounds is not None
        st = self.pk_state
        defers = st.defers.get(req, 0)
        age = self.pk_now - req.time_stats.wait_queue_entry_time
        decision = decide(cls, self.pk_lead, self.pk_skips, defers, age, bounds)
        if decision is AffinityDecision.SKIP:
            self.pk_skips += 1
            st.defers[req] = defers + 1  # NOTE: a request is scanned once a pass
            st.count("affinity_skips")
            return AddReqResult.CONTINUE
        if decision is AffinityDecision.STOP:
            bound = tripped_bound(self.pk_skips, defers, age, bounds)
            st.promoted.append(req)
            st.count("affinity_stops")
            st.count(f"affinity_stops_{(bound or AffinityBound.WINDOW).value.lower()}")
            return self._pk_close(CloseReason.AFFINITY_STOP)
        return None

    def _pk_close(self, reason: CloseReason) -> Any:
        self.pk_state.last_close = reason
        self.pk_state.count(f"close_{reason.value}")
        return AddReqResult.OTHER

    # ------------------------------------------------------------------ CP token limits
    def _select_prefill_admission(self, req: Any, **kwargs: Any) -> Any:
        admission = super()._select_prefill_admission(req, **kwargs)
        if self.pk_cp_mode is not CpMode.BS_GT1 or isinstance(admission, AddReqResult):
            return admission
        if not self.can_run_list:
            return admission
        cp = self.pk_settings.cp
        assert cp is not None
        reason = cp_token_limit_reason(
            self.pk_batch_extend,
            self.pk_batch_cached,
            admission.prefix_len,
            self.ceil_paged_tokens(admission.extend_len),
            self.pk_extend_limit,
            cp.max_cached_tokens,
        )
        if reason is None:
            reason = self._pk_buffer_reason(admission, kwargs.get("host_hit_length", 0))
        if reason is not None:
            return self._pk_close(reason)
        return admission

    def _pk_buffer_reason(self, admission: Any, loaded: int) -> CloseReason | None:
        """CP_MAX_BUFFER when the batch with this admission would estimate more temporary
        device bytes than the limit (sched/buffer.py, the same shapes as prefillkit's)."""
        ctx, cp = self.pk_buffer_ctx, self.pk_settings.cp
        shape = BufferReqShape(admission.prefix_len, admission.extend_len, loaded)
        self.pk_candidate = shape
        if ctx is None or cp is None or cp.max_buffer_bytes is None:
            return None
        if estimate_buffer_bytes([*self.pk_shapes, shape], ctx) > cp.max_buffer_bytes:
            return CloseReason.CP_MAX_BUFFER
        return None

    def _commit_prefill_admission(self, req: Any, admission: Any, *args: Any) -> None:
        super()._commit_prefill_admission(req, admission, *args)
        if self.pk_cp_mode is CpMode.BS_GT1:
            loaded = int(getattr(req, "host_loaded_length", 0) or 0)
            self._pk_tally(admission.prefix_len, admission.extend_len, loaded)

    def _pk_tally(self, prefix_len: int, extend_len: int, loaded: int) -> None:
        self.pk_batch_extend += int(self.ceil_paged_tokens(extend_len))
        self.pk_batch_cached += prefix_len
        self.pk_shapes.append(BufferReqShape(prefix_len, extend_len, loaded))


def make_adder_class(
    settings: PluginSettings, clock: Callable[[], float], cp_size: int
) -> type[PrefillkitAdder]:
    """A ``PrefillkitAdder`` subclass bound to ``settings``; ``clock`` gives the time
    SGLang's ``time_stats.wait_queue_entry_time`` is stamped against (a server: its
    ``time.perf_counter``); ``cp_size``: SGLang's prefill context-parallel size (1: no
    prefill CP, the CP rules do nothing)."""
    return type(
        "PrefillkitAdder",
        (PrefillkitAdder,),
        {
            "pk_settings": settings,
            "pk_clock": staticmethod(clock),
            "pk_cp_size": cp_size,
        },
    )
