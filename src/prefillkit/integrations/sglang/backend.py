"""SGLang's own admission behind prefillkit's scheduler interface: ``replay --scheduler
sglang`` (and ``sglang+prefillkit``, the same with the plugin's adder installed).

:class:`SglangScheduler` implements :class:`~prefillkit.sched.interface.SchedulerInterface`
over an SGLang 0.5.23 ``Scheduler`` built on CPU (``harness.py``): every admission pass is
SGLang's ``Scheduler._get_new_batch_prefill_raw`` (its ``SchedulePolicy.calc_priority``,
``PrefillAdder``, ``RadixCache``, KV allocator and request-slot pool), and the request
lifecycle is what SGLang's disaggregated prefill server does around it
(``disaggregation/prefill.py``):

- arrival: the request's synthetic tokens (``tokens.py``) as an SGLang ``Req`` appended to
  ``waiting_queue``, its ``time_stats.wait_queue_entry_time`` the simulated arrival plus
  :data:`CLOCK_OFFSET_S` (SGLang reads 0.0 as "unset");
- a pass (:meth:`SglangScheduler.schedule`): the chunked request is checkpointed first
  (``stash_chunked_request``: ``checkpoint_kv_cache`` when it computed a chunk), then the
  pass; the batch's requests keep their KV row and KV pages;
- forward done: each request whose prompt is complete is checkpointed into the tree
  (``checkpoint_disagg_prefill``) and returned, still holding its row (its KV is sent);
- transfer done (:meth:`SglangScheduler.finish`): ``FINISH_LENGTH`` and
  ``release_kv_cache(checkpoint=True)``, as the inflight queue does on ``KVPoll.Success``.

The simulator times each batch with its cost model, so a trace runs the same under stock
SGLang, prefillkit inside SGLang and prefillkit alone. Only prefill-only deployments are
mirrored (``replay_limits.py`` lists what is refused). Stop reasons: :func:`stop_reason`.

Imports SGLang (``require_sglang`` first).
"""

from __future__ import annotations

import functools
import random
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from prefillkit.cache.events import KVListener
from prefillkit.cache.pages import Pending
from prefillkit.cost.deployment import SimSettings
from prefillkit.integrations.sglang import require_sglang
from prefillkit.integrations.sglang.replay_limits import (
    max_req_input_len,
    refusal,
    resolved_max_running_requests,
)
from prefillkit.integrations.sglang.tokens import prompt_tokens
from prefillkit.request import ReqStatus, Request
from prefillkit.sched.interface import (
    AdmissionObserver,
    BatchLead,
    CloseReason,
    ScheduledReq,
    StepOutput,
)
from prefillkit.sim.sizing import Deployment, SimConfigError

require_sglang()

from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH  # noqa: E402
from sglang.srt.managers.schedule_policy import (  # noqa: E402
    CLIP_MAX_NEW_TOKENS,
    AddReqResult,
)
from sglang.srt.managers.scheduler_components.pool_stats_observer import (  # noqa: E402
    kv_private_tokens,
)
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402

from prefillkit.integrations.sglang.harness import (  # noqa: E402
    HarnessConfig,
    build_scheduler,
    make_req,
)

__all__ = [
    "CLOCK_OFFSET_S",
    "SglangScheduler",
    "harness_config",
    "scheduler_factory",
    "stop_reason",
]

#: Added to simulated times before SGLang sees them (its queue-entry stamps, the
#: plugin's clock): SGLang treats a time of 0.0 as "not set".
CLOCK_OFFSET_S = 1.0
#: The first width of the request-slot table (tokens per row); it grows to the longest
#: prompt seen (doubling, at most the pool).
_FIRST_WIDTH = 4096
#: A step's page structures: none (nothing on the simulated path reads them).
_NO_PAGES: Pending = ([array("q")], [0], [0])


def harness_config(settings: SimSettings, dep: Deployment) -> HarnessConfig:
    """SGLang's server settings for prefillkit's config and deployment: the KV pool is
    ``dep.total_pages × page_size`` tokens; the decode reservation ratio SGLang starts
    with is ``min(init_new_token_ratio × schedule_conservativeness, 1)``. The slot table is
    built one token wide: :class:`SglangScheduler` replaces it (:meth:`_grow_rows`)."""
    cfg = settings.scheduler
    pool = dep.total_pages * cfg.page_size
    return HarnessConfig(
        page_size=cfg.page_size,
        pool_tokens=pool,
        max_running_requests=resolved_max_running_requests(cfg.max_running_requests, pool),
        max_context_len=1,
        schedule_policy=cfg.schedule_policy,
        chunked_prefill_size=cfg.chunked_prefill_size,
        max_prefill_tokens=cfg.max_prefill_tokens,
        new_token_ratio=min(cfg.init_new_token_ratio * cfg.schedule_conservativeness, 1.0),
        enable_priority_scheduling=cfg.enable_priority_scheduling,
        schedule_low_priority_values_first=cfg.schedule_low_priority_values_first,
        priority_scheduling_preemption_threshold=cfg.priority_scheduling_preemption_threshold,
    )


def _lazy_zeros(rows: int, width: int) -> Any:
    """An int32 tensor of zeros whose pages are committed only when written (numpy's
    zeros map fresh pages; ``torch.zeros`` writes every one): the slot table is
    ``rows × width × 4`` bytes, of which a replay touches only the rows it uses."""
    return torch.from_numpy(np.zeros((rows, width), dtype=np.int32))


def _budget_reason(adder: Any) -> CloseReason:
    """The budget that closed SGLang's pass (its ``budget_state`` order)."""
    if adder.rem_input_tokens <= 0 or adder.rem_chunk_tokens is None:
        return CloseReason.MAX_PREFILL_TOKENS
    return CloseReason.CHUNK_BUDGET


def stop_reason(
    adder: Any,
    last: Any,
    calls: int,
    queue_len: int,
    slots_full: bool,
    chunk_stalled: bool,
) -> CloseReason:
    """Why SGLang's pass stopped, in prefillkit's terms.

    ``adder``: the pass's adder (None: the pass returned before building one: an empty
    queue, else every request slot taken); ``last``: the last ``add_one_req`` verdict;
    ``calls``: candidates scanned; ``queue_len``: the queue at the pass's start;
    ``slots_full``: SGLang set ``running_batch.batch_is_full``; ``chunk_stalled``: the
    chunked request was not continued. The mapping:

    - no adder: ``queue_empty`` or ``max_running_requests``;
    - last verdict ``NO_TOKEN``: ``memory``; ``OTHER``: the plugin's close reason when it
      gave one (affinity stop, CP limits), else ``max_prefill_tokens`` when the input
      budget is spent (or chunking is off), else ``chunk_budget``;
    - the scan stopped before a candidate: ``max_running_requests`` when the slots were
      full, else the spent budget as above;
    - the scan ran out: ``memory`` when a chunked continuation did not fit, else
      ``queue_empty``.
    """
    if adder is None:
        return CloseReason.QUEUE_EMPTY if queue_len == 0 else CloseReason.MAX_RUNNING_REQUESTS
    if last is AddReqResult.NO_TOKEN:
        return CloseReason.MEMORY
    if last is AddReqResult.OTHER:
        state = getattr(adder, "pk_state", None)
        close = None if state is None else state.last_close
        return close if close is not None else _budget_reason(adder)
    if calls < queue_len:
        return CloseReason.MAX_RUNNING_REQUESTS if slots_full else _budget_reason(adder)
    return CloseReason.MEMORY if chunk_stalled else CloseReason.QUEUE_EMPTY


def _scheduled(sreq: Any, is_chunk: bool, page_size: int) -> ScheduledReq:
    """The step's view of one admitted SGLang request: its prefix and extend range (no
    page ids: nothing on the simulated path reads them; no host tier, nothing loaded)."""
    return ScheduledReq(
        rid=sreq.rid,
        prefix_len=sreq.prefix_len,
        loaded_tokens=0,
        extend_start=sreq.prefix_len,
        extend_end=sreq.extend_end,
        prefix_path=(),
        prefix_node_pages=0,
        prefix_owned=(),
        new_start_page=sreq.prefix_len // page_size,
        pending=_NO_PAGES,
        load_back=(),
        is_chunk=is_chunk,
    )


class _PassWatch:
    """What one SGLang pass's adder did: the adder itself, its verdicts (each
    ``add_one_req`` call's result) and how many candidates it scanned."""

    def __init__(self) -> None:
        self.adder: Any = None
        self.last: Any = None
        self.calls = 0

    def attach(self, adder: Any) -> None:
        """Watch ``adder`` (a fresh pass's): wraps its ``add_one_req`` on the instance."""
        self.adder, self.last, self.calls = adder, None, 0
        state = getattr(adder, "pk_state", None)
        if state is not None:
            state.last_close = None
        add = adder.add_one_req

        def add_one_req(req: Any, *args: Any, **kwargs: Any) -> Any:
            res = add(req, *args, **kwargs)
            self.last = res
            self.calls += 1
            return res

        adder.add_one_req = add_one_req


class SglangScheduler:
    """prefillkit's scheduler interface over SGLang's real scheduler (module docstring).

    ``plugin``: install prefillkit's adder and ordering (``plugin.install_on``) with the
    settings of prefillkit's config (``settings_from_scheduler_config``). Raises
    :class:`~prefillkit.sim.sizing.SimConfigError` (one line) for a setting it cannot
    mirror."""

    def __init__(self, settings: SimSettings, dep: Deployment, *, plugin: bool = False) -> None:
        name = "sglang+prefillkit" if plugin else "sglang"
        reason = refusal(settings, name)
        if reason is not None:
            raise SimConfigError(reason)
        self.cfg = settings.scheduler
        self.hc = harness_config(settings, dep)
        self.page_size = self.hc.page_size
        self.pool_tokens = self.hc.pool_tokens
        self.max_input_len = max_req_input_len(self.pool_tokens)
        random.seed(self.cfg.seed)  # NOTE: SGLang's random policy shuffles with it
        # NOTE: SGLang's tensors here are short index lists: torch's worker threads only
        # contend (a replay ran 3.5x slower with two), the more so beside other workers.
        torch.set_num_threads(1)
        self.sched: Any = build_scheduler(self.hc)
        self.sched.req_to_token_pool.req_to_token = _lazy_zeros(
            self.sched.req_to_token_pool.req_to_token.shape[0], 1
        )
        self.now = 0.0
        self.live: dict[str, tuple[Request, Any]] = {}
        self.in_flight: dict[int, list[tuple[Request, Any, bool]]] = {}
        self.step_seq = 0
        self.watch = _PassWatch()
        self.stats: dict[str, int] = {"passes": 0, "log_input": 0, "log_hit": 0, "evicted": 0}
        self.empty_passes: dict[str, int] = {}
        self.affinity = {"skip_passes": 0, "max_skips": 0, "max_deferred": 0}
        self.deferred: set[str] = set()
        if plugin:
            self._install_plugin()
        self._watch_passes()
        self._count_evictions()

    # ------------------------------------------------------------------ set-up
    def _install_plugin(self) -> None:
        from prefillkit.integrations.sglang.plugin import install_on
        from prefillkit.integrations.sglang.settings import settings_from_scheduler_config

        install_on(
            self.sched,
            settings_from_scheduler_config(self.cfg),
            clock=lambda: self.now + CLOCK_OFFSET_S,
        )

    def _watch_passes(self) -> None:
        """Every adder SGLang builds (stock or the plugin's) is watched (:class:`_PassWatch`)."""
        make = self.sched.get_prefill_adder_class
        watch = self.watch

        def get_prefill_adder_class() -> Callable[..., Any]:
            cls = make()

            def build(*args: Any, **kwargs: Any) -> Any:
                adder = cls(*args, **kwargs)
                watch.attach(adder)
                return adder

            return build

        self.sched.get_prefill_adder_class = get_prefill_adder_class

    def _count_evictions(self) -> None:
        tree = self.sched.tree_cache
        evict = tree.evict
        stats = self.stats

        def counted(params: Any) -> Any:
            res = evict(params)
            stats["evicted"] += int(res.num_tokens_evicted)
            return res

        tree.evict = counted

    def _grow_rows(self, tokens: int) -> None:
        """Widen the slot table to hold ``tokens`` tokens a row (the held rows keep
        their contents)."""
        pool = self.sched.req_to_token_pool
        old = pool.req_to_token
        width = int(old.shape[1])
        if tokens <= width:
            return
        new_width = min(max(tokens, 2 * width, _FIRST_WIDTH), self.pool_tokens)
        table = _lazy_zeros(int(old.shape[0]), new_width)
        for _, sreq in self.live.values():
            if sreq.kv.holds_kv:
                row = sreq.kv.req_pool_idx
                table[row, :width] = old[row]
        pool.req_to_token = table
        pool.max_context_len = new_width

    # ------------------------------------------------------------------ arrival
    def never_fits_reason(self, req: Request) -> str | None:
        """Why ``req`` can never be admitted: SGLang's input-length check
        (``validate_input_length``), or prefillkit's pd-prefill rule (``sched/waiting.py``:
        the memory test fails even on an empty pool)."""
        if req.prompt_len >= self.max_input_len:
            return (
                f"prompt of {req.prompt_len} tokens is not below SGLang's max_req_input_len "
                f"{self.max_input_len} (KV pool {self.pool_tokens} tokens - 6)"
            )
        p = self.page_size
        reserved = min(req.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        need = req.prompt_len + reserved + p
        if need >= self.pool_tokens:
            return (
                f"prompt + reserved output ({reserved}, clipped at {CLIP_MAX_NEW_TOKENS}) + one "
                f"page = {need} tokens is not below the KV pool ({self.pool_tokens} tokens): "
                "the admission memory test can never pass, even on an empty pool"
            )
        return None

    def add_request(self, req: Request) -> str | None:
        """Queue ``req`` as an SGLang ``Req`` (see the module docstring), or reject it."""
        reason = self.never_fits_reason(req)
        if reason is not None:
            req.state.status = ReqStatus.REJECTED
            req.metrics.reject_reason = reason
            return reason
        tokens = prompt_tokens(req)
        self._grow_rows(len(tokens))
        sreq = make_req(
            req.rid,
            tokens,
            req.max_new_tokens,
            priority=req.priority if self.cfg.enable_priority_scheduling else None,
            queue_entry_time=req.arrival_time + CLOCK_OFFSET_S,
        )
        self.sched.waiting_queue.append(sreq)
        self.live[req.rid] = (req, sreq)
        req.state.status = ReqStatus.WAITING
        return None

    @property
    def has_work(self) -> bool:
        return bool(self.sched.waiting_queue) or self.sched.chunked_req is not None

    def num_pending(self) -> int:
        s = self.sched
        return len(s.waiting_queue) + (1 if s.chunked_req is not None else 0)

    # ------------------------------------------------------------------ the pass
    def schedule(self, now: float) -> StepOutput:
        """One SGLang admission pass at ``now`` (its chunked request checkpointed first)."""
        self.now = now
        s = self.sched
        chunk = s.chunked_req
        if chunk is not None and chunk.extend_end > chunk.prefix_len:
            checkpoint_kv_cache(chunk, s.tree_cache)
        queue_len = len(s.waiting_queue)
        self.watch.adder = None
        batch, s.running_batch = s._get_new_batch_prefill_raw(None, s.running_batch)
        self.stats["passes"] += 1
        reqs = [] if batch is None else list(batch.reqs)
        adder = self.watch.adder
        stalled = chunk is not None and not any(r is chunk for r in reqs)
        reason = stop_reason(
            adder,
            self.watch.last,
            self.watch.calls,
            queue_len,
            bool(s.running_batch.batch_is_full),
            stalled,
        )
        self._count_pass(adder, reqs)
        if not reqs:
            key = reason.value
            self.empty_passes[key] = self.empty_passes.get(key, 0) + 1
            return StepOutput(0, (), reason, waiting_len=len(s.waiting_queue))
        return self._step(reqs, chunk, adder, reason)

    def _count_pass(self, adder: Any, reqs: list[Any]) -> None:
        """SGLang's batch tallies (``log_input_tokens`` / ``log_hit_tokens``) and the
        plugin's affinity skips of the pass."""
        if adder is None:
            return
        if reqs:
            self.stats["log_input"] += int(adder.log_input_tokens)
            self.stats["log_hit"] += int(adder.log_hit_tokens)
        skips = int(getattr(adder, "pk_skips", 0))
        if skips:
            self.affinity["skip_passes"] += 1
            self.affinity["max_skips"] = max(self.affinity["max_skips"], skips)
            for sreq, n in adder.pk_state.defers.items():
                self.deferred.add(sreq.rid)
                self.affinity["max_deferred"] = max(self.affinity["max_deferred"], n)

    def _step(self, reqs: list[Any], chunk: Any, adder: Any, reason: CloseReason) -> StepOutput:
        """The step of a pass that admitted ``reqs`` (kept in flight under its id)."""
        p = self.page_size
        out: list[ScheduledReq] = []
        flight: list[tuple[Request, Any, bool]] = []
        for sreq in reqs:
            req = self.live[sreq.rid][0]
            is_chunk = sreq.extend_end < req.prompt_len
            self._note_admitted(req, sreq)
            flight.append((req, sreq, is_chunk))
            out.append(_scheduled(sreq, is_chunk, p))
        self.step_seq += 1
        self.in_flight[self.step_seq] = flight
        return StepOutput(
            step_id=self.step_seq,
            reqs=tuple(out),
            stop_reason=reason,
            extend_tokens=sum(-(-s.extend_len // p) * p for s in out),
            cached_tokens=sum(s.prefix_len for s in out),
            lead_class=self._lead(reqs, chunk, adder),
            has_chunked=any(s.is_chunk for s in out) or any(r is chunk for r in reqs),
            waiting_len=len(self.sched.waiting_queue),
            skips=int(getattr(adder, "pk_skips", 0)),
            stops=int(reason is CloseReason.AFFINITY_STOP),
        )

    def _lead(self, reqs: list[Any], chunk: Any, adder: Any) -> BatchLead:
        """The batch's lead class: the plugin adder's when it keeps one, else as
        prefillkit's pass classifies its first request (a continuation is warm)."""
        lead = getattr(adder, "pk_lead", BatchLead.EMPTY)
        if lead is not BatchLead.EMPTY:
            return lead  # type: ignore[no-any-return]
        first = reqs[0]
        if first is chunk or first.prefix_len >= self.cfg.affinity_warm_floor_tokens:
            return BatchLead.WARM
        return BatchLead.COLD

    def _note_admitted(self, req: Request, sreq: Any) -> None:
        """prefillkit's view of an admitted request: status, first scheduling, chunks."""
        st, m = req.state, req.metrics
        if st.status is ReqStatus.WAITING:
            st.status = ReqStatus.PREFILLING
            m.first_scheduled_time = self.now
            m.device_hit_tokens = int(sreq.prefix_len)
        st.prefix_len = int(sreq.prefix_len)
        st.extend_input_len = int(sreq.extend_end - sreq.prefix_len)
        m.num_chunks += 1

    # ------------------------------------------------------------------ after the forward
    def forward_done(self, step: StepOutput, now: float) -> list[Request]:
        """The step's forward finished: each request whose prompt is complete is
        checkpointed into SGLang's tree (as its disaggregated prefill server does before
        sending the KV) and returned, still holding its KV; a chunk waits for the next
        pass (which checkpoints it)."""
        if step.step_id == 0:
            return []
        flight = self.in_flight.pop(step.step_id, None)
        if flight is None:
            raise ValueError(f"step {step.step_id} is not in flight")
        done: list[Request] = []
        for req, sreq, is_chunk in flight:
            req.state.computed_tokens = int(sreq.extend_end)
            if is_chunk:  # NOTE: as SGLang's result processing counts a middle chunk done
                sreq.inflight_middle_chunks -= 1
                continue
            checkpoint_kv_cache(sreq, self.sched.tree_cache)
            req.metrics.first_token_time = now
            req.state.output_len = 1 if req.max_new_tokens > 0 else 0
            done.append(req)
        return done

    def begin_transfer(self, req: Request) -> None:
        req.state.status = ReqStatus.TRANSFERRING

    def finish(self, req: Request, now: float) -> None:
        """The KV was sent: SGLang's ``release_kv_cache(checkpoint=True)`` (the row and
        the pages the tree does not keep are freed, the prefix unlocked)."""
        _, sreq = self.live.pop(req.rid)
        sreq.finished_reason = FINISH_LENGTH(length=0)
        release_kv_cache(sreq, self.sched.tree_cache, checkpoint=True)
        req.state.status = ReqStatus.FINISHED
        req.metrics.finish_time = now

    def abort(self, req: Request, now: float) -> None:
        """Drop ``req``: out of the queue, or its KV released (nothing kept)."""
        entry = self.live.pop(req.rid, None)
        if entry is not None:
            s, sreq = self.sched, entry[1]
            s.waiting_queue = [r for r in s.waiting_queue if r is not sreq]
            if s.chunked_req is sreq:
                s.chunked_req = None
            if sreq.kv.holds_kv:
                sreq.finished_reason = FINISH_ABORT("aborted")
                release_kv_cache(sreq, s.tree_cache, checkpoint=False)
        req.state.status = ReqStatus.ABORTED
        req.metrics.finish_time = now

    # ------------------------------------------------------------------ not mirrored
    def page_table(self, req: Request) -> list[int]:
        raise NotImplementedError("--scheduler sglang hands out no page tables (no executor)")

    def start_decode(self, req: Request) -> None:
        raise NotImplementedError("--scheduler sglang replays pd-prefill only")

    def decode_load(self) -> tuple[int, int]:
        return 0, 0

    def decode_step(self, now: float) -> tuple[list[Request], list[Request]]:
        return [], []

    def set_admission_observer(self, obs: AdmissionObserver | None) -> None:
        if obs is not None:
            raise NotImplementedError("--scheduler sglang reports no admission events")

    def set_kv_listener(self, listener: KVListener | None) -> None:
        if listener is not None:
            raise NotImplementedError("--scheduler sglang reports no KV events")

    # ------------------------------------------------------------------ records
    def counters(self) -> dict[str, Any]:
        """The run's counters under prefillkit's names (affinity ones from the plugin;
        preemptions and retractions never happen on a prefill-only server)."""
        st = getattr(self.watch.adder, "pk_state", None)
        pk = {} if st is None else st.counters
        a = self.affinity
        return {
            "affinity_skips": pk.get("affinity_skips", 0),
            "affinity_defers": pk.get("affinity_skips", 0),
            "affinity_deferred_requests": len(self.deferred),
            "affinity_skip_passes": a["skip_passes"],
            "affinity_max_skips_in_pass": a["max_skips"],
            "affinity_max_deferred_passes": a["max_deferred"],
            **{k: pk.get(k, 0) for k in _STOP_COUNTERS},
            "preemptions": 0,
            "retractions": 0,
            "admission_passes": self.stats["passes"],
            "empty_passes": sum(self.empty_passes.values()),
            **{f"empty_passes_{k}": self.empty_passes[k] for k in sorted(self.empty_passes)},
            "upstream_log_input_tokens": self.stats["log_input"],
            "upstream_log_hit_tokens": self.stats["log_hit"],
            "evicted_pages": self.stats["evicted"] // self.page_size,
        }

    def check(self) -> None:
        """SGLang's own accounting (``SchedulerInvariantChecker``'s): every request slot
        is free or held by a live request, and the KV pool is exactly available +
        evictable + protected (tree) + the tokens live requests hold privately."""
        s = self.sched
        held = [sreq for _, sreq in self.live.values() if sreq.kv.holds_kv]
        rows = s.req_to_token_pool
        if rows.available_size() + len(held) != rows.size:
            raise AssertionError(
                f"request slots: {rows.available_size()} free + {len(held)} held != {rows.size}"
            )
        tree = s.tree_cache
        private = sum(kv_private_tokens(r.kv, self.page_size) for r in held)
        free = s.token_to_kv_pool_allocator.available_size()
        total = free + tree.evictable_size() + tree.protected_size() + private
        if total != self.pool_tokens:
            raise AssertionError(
                f"KV pool: {free} available + {tree.evictable_size()} evictable + "
                f"{tree.protected_size()} protected + {private} private != {self.pool_tokens}"
            )


_STOP_COUNTERS = ("affinity_stops", "affinity_stops_w", "affinity_stops_k", "affinity_stops_t")


def scheduler_factory(plugin: bool) -> Callable[[SimSettings, Deployment], SglangScheduler]:
    """The engine's scheduler factory (``Engine(scheduler_factory=...)``): stock SGLang,
    or with prefillkit's plugin (``plugin``)."""
    return functools.partial(SglangScheduler, plugin=plugin)
