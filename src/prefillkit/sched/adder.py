# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""PrefillAdder: one admission pass's budgets and the per-request admission rules.

Upstream names are kept (``rem_total_tokens``, ``cur_rem_tokens``, ``rem_input_tokens``,
``rem_chunk_tokens``, ``add_one_req``, ``add_chunked_req``, ``budget_state``) so SGLang
users recognise them; see ``docs/design.md`` (upstream) for the formulas this follows.

Beyond upstream:
- CP shared-KV prefill: bs=1 gate, or with ``enable_cp_shared_kv_prefill_bs_gt1`` the four
  batch limits (requests, page-aligned extend tokens, cached tokens after load-back
  planning, estimated temporary-buffer bytes). Each stops only *additional* requests, so
  a single oversized request still runs alone (no deadlock).
- HiCache load-back is gated on free + evictable device pages per owner lane (upstream
  passes no quota), planned before any CP limit is checked, and executed only once the
  candidate is certain to be admitted: a rejected candidate leaves no trace.
- A chunked continuation seeds every tally with its *true prefix*.
- Per-lane feasibility: the pages admitted requests will allocate after the pass are
  checked per owner lane, so allocation after the pass cannot fail.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefillkit.cache.node import Node
from prefillkit.cache.pool import lane_split
from prefillkit.cache.prefix import LoadBack, MatchResult, PrefixCache
from prefillkit.request import Request
from prefillkit.sched.buffer import BufferEstimatorContext, BufferReqShape, estimate_buffer_bytes
from prefillkit.sched.verdicts import (
    AddReqResult,
    CloseReason,
    CpMode,
    cp_extend_limit,
    cp_pre_admission_reason,
    cp_token_limit_reason,
)


def ignore_eos_fits(
    cur_rem_tokens: float, states: list[tuple[float, int]], reserve_tokens: int = 1
) -> bool:
    """Upstream's ``add_one_req_ignore_eos`` memory rule, a pure function.

    ``cur_rem_tokens``: current free + evictable tokens minus this pass's admissions
    (the candidate's ``ceil_page(extend) + page`` included); ``states``: per request
    (the candidate, the running ones, the admitted ones) ``(tokens_left, tokens_occupied)``
    with ``tokens_left = max_new x ratio - output`` (ratio 1.0 for ignore_eos; whole,
    not clipped) and ``tokens_occupied = input + output``. Requests finish in order of
    tokens left; before the i-th finishes, the ``bs`` still running each need
    ``tokens_left_i`` more tokens: ``cur_rem + freed - tokens_left_i x bs`` must stay
    above ``reserve_tokens x bs`` (upstream ``IGNORE_EOS_RESERVE_TOKENS`` = 1).
    """
    live = sorted((s for s in states if s[0] > 0), key=lambda s: s[0])
    freed = 0
    n = len(live)
    for i, (left, occupied) in enumerate(live):
        bs = n - i
        if cur_rem_tokens + freed - left * bs <= reserve_tokens * bs:
            return False
        freed += occupied
    return True


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """Per-deployment admission settings, resolved once from the config."""

    page_size: int
    max_prefill_tokens: int
    chunked_prefill_size: int | None
    clip_max_new_tokens: int = 4096
    # CP shared-KV: OFF (no CP gate), BS1 (one request per batch), BS_GT1.
    cp_mode: CpMode = CpMode.OFF
    cp_max_requests: int | None = None
    cp_max_total_extend_tokens: int | None = None
    cp_max_cached_tokens: int | None = None
    cp_max_buffer_size: int | None = None
    cp_prefill_mix_chunked: bool = False
    # ignore_eos requests also pass upstream's add_one_req_ignore_eos rule.
    ignore_eos_admission: bool = False
    # Host hits shorter than this are not loaded back (upstream: 10 tokens).
    load_back_threshold: int = 10
    buffer_ctx: BufferEstimatorContext | None = None
    # (extend cap pages, request slack pages, staging pages) when mix_chunked is on.
    staging_identity: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cp_mode, CpMode):
            raise TypeError(f"cp_mode must be a CpMode, not {self.cp_mode!r}")
        if self.cp_max_buffer_size is not None and self.buffer_ctx is None:
            raise ValueError("cp_max_buffer_size needs a buffer estimator context")
        if self.cp_prefill_mix_chunked:
            self._assert_staging_identity()

    def _assert_staging_identity(self) -> None:
        """The symm staging capacity identity the mixed-chunk design relies on:
        ``extend cap pages + request slack pages == staging pages``, where the extend cap
        and the slack are the ones these limits enforce. An explicit raise (not an
        ``assert`` statement) so that ``python -O`` cannot strip it."""
        ident = self.staging_identity
        caps = [
            v for v in (self.cp_max_total_extend_tokens, self.chunked_prefill_size) if v is not None
        ]
        cap_pages = -(-min(caps) // self.page_size) if caps else 0
        slack_pages = self.cp_max_requests or 0
        if (
            ident is None
            or ident[0] + ident[1] != ident[2]
            or (ident[0], ident[1]) != (cap_pages, slack_pages)
        ):
            raise AssertionError(
                f"cp_prefill_mix_chunked: extend cap + request slack != staging pages {ident} "
                f"(these limits enforce an extend cap of {cap_pages} pages and a slack of "
                f"{slack_pages} pages)"
            )


class PrefillAdder:
    """Budgets of one admission pass. Create one per pass.

    NOTE: a candidate's matched device prefix is locked while it is considered; a
    rejected candidate is unlocked before ``add_one_req`` returns, so it leaves no lock,
    allocation or budget change behind.
    """

    def __init__(
        self,
        cache: PrefixCache,
        limits: AdmissionLimits,
        running: list[Request],
        new_token_ratio: float,
    ) -> None:
        self.cache = cache
        self.pool = cache.pool
        self.limits = limits
        self.page_size = limits.page_size
        self.new_token_ratio = new_token_ratio
        self.running = running
        # NOTE: the per-batch budgets are derived, not decremented: rem_input_tokens =
        # input_budget - batch_extend_tokens, rem_chunk_tokens = chunk_budget -
        # batch_extend_tokens, cur_rem_token_offset = batch_extend_tokens + page per
        # admitted request (every admission adds its page-ceiled extend to all three).
        self.input_budget: int = limits.max_prefill_tokens
        self.chunk_budget: int | None = limits.chunked_prefill_size
        self.cp_off = limits.cp_mode is CpMode.OFF
        clip = limits.clip_max_new_tokens
        # Decode room reserved for the running requests (summed in order, as upstream).
        offset: float = 0.0
        for r in running:
            left = r.max_new_tokens - r.state.output_len
            if left > clip:
                left = clip
            offset += left * (1.0 if r.ignore_eos else new_token_ratio)
        self.rem_total_token_offset: float = offset
        self.cp_extend_limit: int | None = None
        if limits.cp_mode is CpMode.BS_GT1:
            self.cp_extend_limit = cp_extend_limit(
                limits.cp_max_total_extend_tokens, self.chunk_budget
            )
            if self.cp_extend_limit is not None:
                # NOTE: on this path only, the legacy input budget must not stop batching
                # before the CP extend limit does. Allocator budgets stay unchanged.
                self.input_budget = max(self.input_budget, self.cp_extend_limit)
        self.can_run_list: list[Request] = []
        self.new_chunked_req: Request | None = None
        # NOTE: always updated together (see _set_chunked_in_batch).
        self.chunked_req_in_batch: Request | None = None
        self.has_chunked_req_in_batch = False
        self.load_backs: list[LoadBack] = []
        self.planned_lanes = [0] * self.pool.cp_size
        self.batch_extend_tokens = 0  # page-ceiled, as the CP extend limit counts
        self.batch_cached_tokens = 0  # prefix_len after load-back planning
        self.batch_load_back_tokens = 0
        # Upstream's counters, as upstream counts them (prefillkit's own tallies above
        # differ): raw (not page-ceiled) extends, and prefixes of requests admitted by
        # add_one_req only -- a chunked continuation adds 0 (upstream passes prefix 0).
        self.log_input_tokens = 0
        self.log_hit_tokens = 0
        self.closed_by: CloseReason | None = None

    # ------------------------------------------------------------------ budgets
    def _available_tokens(self) -> int:
        """Allocator free + evictable tokens (upstream ``available_size + evictable_size``).

        NOTE: read live: locking a prefix moves it from evictable to protected."""
        return (self.pool.free_total + self.cache.evictable_pages) * self.page_size

    @property
    def rem_input_tokens(self) -> int:
        return self.input_budget - self.batch_extend_tokens

    @property
    def rem_chunk_tokens(self) -> int | None:
        chunk = self.chunk_budget
        return None if chunk is None else chunk - self.batch_extend_tokens

    @property
    def cur_rem_token_offset(self) -> int:
        return self.batch_extend_tokens + self.page_size * len(self.can_run_list)

    @property
    def rem_total_tokens(self) -> float:
        return self._available_tokens() - self.rem_total_token_offset

    @property
    def cur_rem_tokens(self) -> float:
        return self._available_tokens() - self.cur_rem_token_offset

    def budget_state(self) -> AddReqResult:
        avail = (self.pool.free_total + self.cache.evictable_pages) * self.page_size
        if avail - self.rem_total_token_offset <= 0 or avail - self.cur_rem_token_offset <= 0:
            return self._close(AddReqResult.NO_TOKEN, CloseReason.MEMORY)
        if self.rem_input_tokens <= 0:
            return self._close(AddReqResult.OTHER, CloseReason.MAX_PREFILL_TOKENS)
        if self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0:
            return self._close(AddReqResult.OTHER, CloseReason.CHUNK_BUDGET)
        return AddReqResult.CONTINUE

    def _close(self, result: AddReqResult, reason: CloseReason) -> AddReqResult:
        if result is not AddReqResult.CONTINUE:
            self.closed_by = reason
        return result

    def _update_prefill_budget(self, prefix_len: int, extend_len: int, max_new: int) -> None:
        """Charge an admitted request (already in ``can_run_list``) to the budgets."""
        p = self.page_size
        ext = -(-extend_len // p) * p
        self.rem_total_token_offset += ext + p + max_new
        self.batch_extend_tokens += ext
        self.batch_cached_tokens += prefix_len

    def _set_chunked_in_batch(self, req: Request) -> None:
        self.chunked_req_in_batch = req
        self.has_chunked_req_in_batch = True

    def _extend_lanes(self, prefix_len: int, extend_len: int) -> list[int]:
        """Owner-lane pages a request will allocate for ``extend_len`` tokens after
        ``prefix_len`` (the pages past the ones it already holds)."""
        p = self.page_size
        first = -(-prefix_len // p)
        last = -(-(prefix_len + extend_len) // p)
        return lane_split(first, last - first, self.pool.cp_size)

    @property
    def batch_shapes(self) -> list[BufferReqShape]:
        """Per-request shapes of the batch admitted so far (buffer-estimator input)."""
        return [
            BufferReqShape(r.state.prefix_len, r.state.extend_input_len, r.state.loaded_tokens)
            for r in self.can_run_list
        ]

    def batch_buffer_bytes(self) -> int:
        """Estimated temporary-buffer bytes of the batch admitted so far (0 without a model)."""
        ctx = self.limits.buffer_ctx
        return estimate_buffer_bytes(self.batch_shapes, ctx) if ctx is not None else 0

    def _fits_lanes(self, lanes: list[int], more: list[int] | None = None) -> bool:
        """Whether pages already planned this pass plus ``lanes`` (+ ``more``) fit the
        free + evictable pages of every owner lane."""
        free = self.pool.free
        ev = self.cache.evictable_lanes
        planned = self.planned_lanes
        if len(planned) == 1:  # no CP lanes: one comparison
            need = planned[0] + lanes[0] + (more[0] if more else 0)
            return need <= free[0] + ev[0]
        for i in range(len(planned)):
            need = planned[i] + lanes[i] + (more[i] if more else 0)
            if need > free[i] + ev[i]:
                return False
        return True

    def _plan(self, lanes: list[int]) -> None:
        """Add an admitted request's extend pages to the pages planned per owner lane."""
        planned = self.planned_lanes
        for i, n in enumerate(lanes):
            planned[i] += n

    # ------------------------------------------------------------------ chunked
    def add_chunked_req(self, req: Request) -> Request | None:
        """Admit the next chunk of the in-flight chunked request (always first).

        Budgets are seeded with its true prefix (tokens already computed). Returns the
        request if it is still unfinished after this chunk, else None.
        """
        p = self.page_size
        prefix_len = req.state.computed_tokens
        rem_chunk = (
            self.rem_chunk_tokens if self.rem_chunk_tokens is not None else req.state.input_len
        )
        raw = min(rem_chunk, int(self.rem_total_tokens))
        if raw <= 0:
            rem = rem_chunk  # NOTE: a chunked request must always make progress
        else:
            # Page-aligned down, but never below one page: a memory budget that is
            # positive yet under a page must not jump to the whole chunk budget.
            rem = max(raw // p * p, min(p, rem_chunk))
        # Physical room: the chunk cannot exceed what the lanes can still hold.
        cap = self._max_allocatable_extend(prefix_len)
        rem = min(rem, cap)
        need = req.state.input_len - prefix_len
        if rem <= 0:
            # No page can be allocated now (memory held by in-flight requests): the
            # chunk waits; it stays first in line for the next pass.
            self.closed_by = CloseReason.MEMORY
            return req
        truncated = need > rem
        extend = rem if truncated else need
        req.state.prefix_len = prefix_len
        req.state.extend_input_len = extend
        req.state.loaded_tokens = 0
        self.can_run_list.append(req)
        self._set_chunked_in_batch(req)
        self._plan(self._extend_lanes(prefix_len, extend))
        max_new = 0 if truncated else min(req.max_new_tokens, self.limits.clip_max_new_tokens)
        self._update_prefill_budget(prefix_len, extend, max_new)
        self.log_input_tokens += extend  # log_hit_tokens: + 0 (upstream)
        return req if truncated else None

    def _max_allocatable_extend(self, prefix_len: int) -> int:
        """Largest page-aligned extend (tokens) whose pages fit free + evictable per lane."""
        p = self.page_size
        r = self.pool.cp_size
        free = self.pool.free
        ev = self.cache.evictable_lanes
        room = [free[i] + ev[i] - self.planned_lanes[i] for i in range(r)]
        if min(room) < 0:  # pragma: no cover - planned pages always fit (checked on admission)
            return 0
        first = -(-prefix_len // p)
        # Pages are taken round-robin starting at lane first % r. Lane i first receives
        # page number (i - first) % r of the run, then one page every r pages, so n pages
        # fit lane i iff n <= (i - first) % r + room[i] * r. Exact (not just a bound).
        n = min((i - first) % r + room[i] * r for i in range(r))
        # The cut must land on a page boundary of the sequence.
        return max(0, (first + n) * p - prefix_len)

    def chunk_allows_followers(self) -> bool:
        """Whether requests may follow the chunked request admitted first in this pass.

        Chunked requests stay solo in CP batches; the experimental mixed-chunk mode lets
        the CP caps bound the batch, except after a non-page-aligned chunked prefix.
        """
        req = self.chunked_req_in_batch
        if req is None or self.limits.cp_mode is CpMode.OFF:
            return True
        if not self.limits.cp_prefill_mix_chunked:
            return False
        # NOTE: only the carried prefix must be page-aligned (the CP split fails fast
        # otherwise). A tail chunk ends at the prompt's end, which is normally not
        # page-aligned, exactly like any follower's extend.
        return req.state.prefix_len % self.page_size == 0

    # ------------------------------------------------------------------ one request
    def add_one_req(self, req: Request, match: MatchResult | None = None) -> AddReqResult:
        """Try to admit ``req`` (possibly truncated into the chunked request).

        ``match`` is the in-scan match (computed by the caller for classification);
        it is recomputed when not given.

        NOTE: the admission hot path: the budget, lane and plan helpers are inlined
        (``_extend_lanes``, ``_fits_lanes``, ``_plan``, ``_update_prefill_budget``,
        ``budget_state`` keep the reference versions used elsewhere).
        """
        limits = self.limits
        rs = req.state
        cache = self.cache
        pool = self.pool
        can_run = self.can_run_list
        if can_run and not self.cp_off:
            reason = cp_pre_admission_reason(
                limits.cp_mode,
                len(can_run),
                self.has_chunked_req_in_batch and not self.chunk_allows_followers(),
                limits.cp_max_requests,
            )
            if reason is not None:
                return self._close(AddReqResult.OTHER, reason)
        if match is None:
            match = cache.match(req.keys, rs.max_match_units)
        kt = cache.key_tokens
        device_units = match.device_units
        device_prefix = device_units * kt
        host_hit = match.units * kt - device_prefix
        rs.device_prefix_len = device_prefix
        rs.host_hit_len = host_hit
        # The memory test counts what is left to generate (output kept across a requeue).
        max_new = req.max_new_tokens - rs.output_len
        if max_new > limits.clip_max_new_tokens:
            max_new = limits.clip_max_new_tokens
        p = self.page_size
        input_len = rs.input_len
        total_tokens = (input_len - device_prefix) + max_new + p
        # NOTE: upstream's form (total >= rem_total_tokens), kept for float exactness.
        if total_tokens >= (pool.free_total + cache.evictable_pages) * p - (
            self.rem_total_token_offset
        ):
            return self._close(AddReqResult.NO_TOKEN, CloseReason.MEMORY)
        rem_input = self.input_budget - self.batch_extend_tokens
        chunk = self.chunk_budget
        # NOTE: upstream applies the input budget to a non-first candidate only with
        # chunking off; with chunking on, rem_chunk_tokens admits or truncates it.
        if (
            chunk is None
            and can_run
            and -(-(input_len - device_prefix - host_hit) // p) * p >= rem_input
        ):
            return self._close(AddReqResult.OTHER, CloseReason.MAX_PREFILL_TOKENS)

        node = cache.lock(match.device_node, device_units)
        # NOTE: re-tested under the lock: locking the prefix may shrink evictable.
        if total_tokens >= (pool.free_total + cache.evictable_pages) * p - (
            self.rem_total_token_offset
        ):
            return self._reject(node, AddReqResult.NO_TOKEN, CloseReason.MEMORY)

        # HiCache load-back planning: quota = free + evictable device pages per lane.
        host_lanes: list[int] | None = None
        loaded = 0
        if host_hit and host_hit >= limits.load_back_threshold and cache.host is not None:
            u = cache.unit_pages
            host_lanes = lane_split(device_units * u, match.host_units * u, pool.cp_size)
            if self._fits_lanes(host_lanes):
                loaded = host_hit
            else:
                host_lanes = None  # quota gate failed: recompute the host hit
        prefix_len = device_prefix + loaded
        extend = input_len - prefix_len
        ext = -(-extend // p) * p  # page-ceiled extend, as every budget counts it
        if chunk is None and can_run and ext >= rem_input:
            return self._reject(node, AddReqResult.OTHER, CloseReason.MAX_PREFILL_TOKENS)
        if req.ignore_eos and limits.ignore_eos_admission and not self._ignore_eos_ok(req, ext):
            return self._reject(node, AddReqResult.NO_TOKEN, CloseReason.MEMORY)
        truncated = False
        if chunk is not None and ext > chunk - self.batch_extend_tokens:
            extend = ext = (chunk - self.batch_extend_tokens) // p * p
            if ext <= 0:
                return self._reject(node, AddReqResult.OTHER, CloseReason.CHUNK_BUDGET)
            truncated = True
        if can_run and not self.cp_off and limits.cp_mode is CpMode.BS_GT1:
            reason = self._cp_limit_reason(prefix_len, extend, ext, loaded)
            if reason is not None:
                return self._reject(node, AddReqResult.OTHER, reason)
        # Owner-lane pages this request allocates after the pass (_extend_lanes); the
        # prefix is page aligned (a key-unit multiple), so they start at its end.
        first = prefix_len // p
        n_pages = ext // p
        planned = self.planned_lanes
        if len(planned) == 1:  # no CP lanes: one comparison (_fits_lanes)
            if (
                planned[0] + n_pages + (host_lanes[0] if host_lanes is not None else 0)
                > pool.free[0] + cache.evictable_lanes[0]
            ):
                return self._reject(node, AddReqResult.NO_TOKEN, CloseReason.MEMORY)
            planned[0] += n_pages  # _plan
        else:
            ext_lanes = lane_split(first, n_pages, pool.cp_size)
            if not self._fits_lanes(ext_lanes, host_lanes):
                return self._reject(node, AddReqResult.NO_TOKEN, CloseReason.MEMORY)
            self._plan(ext_lanes)

        # Certain to be admitted: execute the planned load-back.
        if host_lanes is not None:
            lb = cache.load_back(node, match.node, match.units)
            if lb is None:  # pragma: no cover - guarded by the quota gate above
                raise AssertionError("load-back failed after its quota gate passed")
            node = lb.deepest
            self.load_backs.append(lb)
            self.batch_load_back_tokens += loaded
        rs.locked_node = node
        rs.prefix_len = prefix_len
        rs.loaded_tokens = loaded
        rs.extend_input_len = extend
        can_run.append(req)
        if truncated:
            self.new_chunked_req = req
            self._set_chunked_in_batch(req)
            max_new = 0
        else:
            # NOTE: upstream's reservation (_select_prefill_admission) is the whole clipped
            # max_new_tokens, even for a requeued request that has already produced
            # output; only the memory test above uses what is left to generate.
            max_new = req.max_new_tokens
            if max_new > limits.clip_max_new_tokens:
                max_new = limits.clip_max_new_tokens
        # _update_prefill_budget (the other budgets are derived from these two)
        rem_total_offset = self.rem_total_token_offset = (
            self.rem_total_token_offset + ext + p + max_new
        )
        used = self.batch_extend_tokens = self.batch_extend_tokens + ext
        self.batch_cached_tokens += prefix_len
        self.log_input_tokens += extend
        self.log_hit_tokens += prefix_len
        if cache.host is not None:
            cache.record_hit(node)
        # budget_state, inlined (x - y <= 0 iff y >= x, also in floating point).
        avail = (pool.free_total + cache.evictable_pages) * p
        if rem_total_offset >= avail or used + p * len(can_run) >= avail:
            return self._close(AddReqResult.NO_TOKEN, CloseReason.MEMORY)
        if used >= self.input_budget:
            return self._close(AddReqResult.OTHER, CloseReason.MAX_PREFILL_TOKENS)
        if chunk is not None and used >= chunk:
            return self._close(AddReqResult.OTHER, CloseReason.CHUNK_BUDGET)
        return AddReqResult.CONTINUE

    def _ignore_eos_ok(self, req: Request, ext: int) -> bool:
        """``ignore_eos_fits`` for candidate ``req`` (page-ceiled extend ``ext``)."""
        ratio = self.new_token_ratio

        def state(r: Request) -> tuple[float, int]:
            left = r.max_new_tokens * (1.0 if r.ignore_eos else ratio) - r.state.output_len
            return (left, r.prompt_len + r.state.output_len)

        states = [state(req), *map(state, self.running), *map(state, self.can_run_list)]
        return ignore_eos_fits(self.cur_rem_tokens - ext - self.page_size, states)

    def _reject(self, node: Node, result: AddReqResult, reason: CloseReason) -> AddReqResult:
        """Reject the candidate whose prefix ``node`` is locked: unlock, close the batch."""
        self.cache.unlock(node)
        return self._close(result, reason)

    def _cp_limit_reason(
        self, prefix_len: int, extend: int, ext: int, loaded: int
    ) -> CloseReason | None:
        """Which CP shared-KV batch limit (bs > 1) an additional request would break."""
        limits = self.limits
        reason = cp_token_limit_reason(
            self.batch_extend_tokens,
            self.batch_cached_tokens,
            prefix_len,
            ext,
            self.cp_extend_limit,
            limits.cp_max_cached_tokens,
        )
        if reason is not None:
            return reason
        if limits.cp_max_buffer_size is not None:
            assert limits.buffer_ctx is not None
            shapes = [*self.batch_shapes, BufferReqShape(prefix_len, extend, loaded)]
            if estimate_buffer_bytes(shapes, limits.buffer_ctx) > limits.cp_max_buffer_size:
                return CloseReason.CP_MAX_BUFFER
        return None
