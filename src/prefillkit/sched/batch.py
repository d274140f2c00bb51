# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""The scheduler's own record of one admitted prefill batch.

Its own module so that the step result (``sched/step.py``) and the modules that build
and complete a batch import it without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefillkit.cache.prefix import LoadBack
from prefillkit.request import Request
from prefillkit.sched.affinity import AffinityBound, BatchLead


@dataclass(slots=True, init=False)
class PrefillBatch:
    """One admitted prefill batch. Per-request shapes are on the requests
    (``prefix_len``, ``extend_input_len``, ``loaded_tokens``) until its forward is done
    (``launch.prefill_done``). Why the pass stopped is the step's ``stop_reason``."""

    reqs: list[Request]
    load_backs: list[LoadBack]
    extend_tokens: int
    cached_tokens: int
    load_back_tokens: int
    buffer_bytes: int
    lead_class: BatchLead
    has_chunked: bool
    waiting_len: int
    policy_used: str
    # Affinity, this pass: cold requests skipped (W counts them; a request is skipped at
    # most once per pass, so this is also the requests it deferred); ``stops``: 0 or 1,
    # ``stop_bound`` the bound that tripped.
    skips: int = 0
    stops: int = 0
    stop_bound: AffinityBound | None = None
    preempted: list[Request] = field(default_factory=list)
    # Upstream's counters as upstream counts them (see PrefillAdder): raw extends, and
    # prefixes of newly admitted requests (0 for a chunked continuation). prefillkit's
    # own: ``extend_tokens`` (page-ceiled) and ``cached_tokens`` (true prefixes).
    log_input_tokens: int = 0
    log_hit_tokens: int = 0

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        reqs: list[Request],
        load_backs: list[LoadBack],
        extend_tokens: int,
        cached_tokens: int,
        load_back_tokens: int,
        buffer_bytes: int,
        lead_class: BatchLead,
        has_chunked: bool,
        waiting_len: int,
        policy_used: str,
        skips: int = 0,
        stops: int = 0,
        stop_bound: AffinityBound | None = None,
        preempted: list[Request] | None = None,
        log_input_tokens: int = 0,
        log_hit_tokens: int = 0,
    ) -> None:
        self.reqs = reqs
        self.load_backs = load_backs
        self.extend_tokens = extend_tokens
        self.cached_tokens = cached_tokens
        self.load_back_tokens = load_back_tokens
        self.buffer_bytes = buffer_bytes
        self.lead_class = lead_class
        self.has_chunked = has_chunked
        self.waiting_len = waiting_len
        self.policy_used = policy_used
        self.skips = skips
        self.stops = stops
        self.stop_bound = stop_bound
        self.preempted = [] if preempted is None else preempted
        self.log_input_tokens = log_input_tokens
        self.log_hit_tokens = log_hit_tokens
