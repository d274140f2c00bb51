"""The policy interface: what an ordering or admission policy may read, and the one
service an engine may offer it.

A policy decision is a pure function over typed views (docs/policies.md):

- :class:`CandidateView`: one waiting request as the pass sees it (its match split into
  device and host tokens, what is left to compute, its age, the passes it has waited,
  its session and priority);
- :class:`BatchView`: the batch the pass has built so far (the admitted requests'
  shapes, the lead's class, the skips so far, the estimated forward time);
- :class:`PassView`: the pass itself (the time, the decoding requests, the queue length);
- :class:`ServiceCost`: the *marginal-cost service*. An engine passes a
  :data:`ForwardEstimate` (seconds of one prefill forward over a list of
  :class:`~prefillkit.sched.buffer.ReqShape`); the simulator passes its cost model's
  ``forward_time``. The core never imports a cost model. Without an estimate the service
  counts tokens (:data:`FALLBACK_FORWARD_TOKENS`), the documented degraded mode.

Standard library only: an engine embeds this with the rest of the core.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prefillkit.sched.affinity import BatchLead
from prefillkit.sched.buffer import ReqShape

__all__ = [
    "FALLBACK_FORWARD_TOKENS",
    "FALLBACK_TOKENS_PER_S",
    "BatchView",
    "CandidateView",
    "ForwardEstimate",
    "PassView",
    "ServiceCost",
]

#: Seconds of one prefill forward over the given requests (0.0 for none).
ForwardEstimate = Callable[[Sequence[ReqShape]], float]

#: Without a forward estimate the service prices a forward in tokens: the tokens it
#: computes plus this fixed cost of running a forward at all. ASSUMPTION: a forward's
#: fixed part (weights read once, launch and communication latency) is worth 2,048
#: tokens of compute; on the seed deployment's roofline a 1-page forward takes about as
#: long as 2-4 K computed tokens add to a large one (tests/test_policy_view.py pins the
#: unit, not this figure: it only ranks candidates against each other).
FALLBACK_FORWARD_TOKENS = 2048

#: Without a forward estimate, a token count is turned into seconds at this rate where a
#: policy needs seconds (cost-aware's deadlines). ASSUMPTION: 8,192 tokens a second, the
#: order of one 8-GPU node's prefill of a large model (the seed deployment's roofline
#: gives 7-40 K tokens/s from cold to cached prompts); a policy without an estimate is
#: the degraded mode (docs/policies.md).
FALLBACK_TOKENS_PER_S = 8192.0


@dataclass(frozen=True, slots=True)
class CandidateView:
    """One waiting request as a policy sees it. Lengths in tokens.

    ``position``: its place in the arrival-ordered queue (0 = oldest), the tie-break of
    every order. ``device_tokens`` / ``host_tokens``: its cached prefix on the device and
    on the host tier (to be loaded back). ``waiting_passes``: admission passes that saw
    it and did not admit it. ``in_batch_head``: the key of upstream LPM's in-batch
    prefix check (None: it takes no part). ``recovering``: it was retracted or preempted
    and waits to be recomputed."""

    position: int
    rid: str
    arrival_time: float
    age_s: float
    input_tokens: int
    device_tokens: int
    host_tokens: int
    max_new_tokens: int = 0
    waiting_passes: int = 0
    priority: int = 0
    session: str | None = None
    in_batch_head: object = None
    recovering: bool = False

    @property
    def matched_tokens(self) -> int:
        """Cached prefix, device + host (upstream LPM's matched prefix)."""
        return self.device_tokens + self.host_tokens

    @property
    def uncached_tokens(self) -> int:
        """Tokens the forward must compute (neither on device nor on host)."""
        return max(0, self.input_tokens - self.device_tokens - self.host_tokens)

    @property
    def device_miss_tokens(self) -> int:
        """Tokens not on the device: computed or loaded back (vLLM's remaining prefill)."""
        return max(0, self.input_tokens - self.device_tokens)

    def shape(self) -> ReqShape:
        """The request as a forward would run it if it were admitted whole now."""
        return ReqShape(self.matched_tokens, self.uncached_tokens, self.host_tokens)


@dataclass(frozen=True, slots=True)
class BatchView:
    """The batch an admission pass has built so far. ``forward_s``: the service's
    estimate of its forward (0.0 when empty; token units without an estimate)."""

    shapes: tuple[ReqShape, ...] = ()
    lead: BatchLead = BatchLead.EMPTY
    skips: int = 0
    forward_s: float = 0.0

    @property
    def size(self) -> int:
        return len(self.shapes)


@dataclass(frozen=True, slots=True)
class PassView:
    """The admission pass: the time, the requests decoding meanwhile, when a pass last saw
    a request decoding (``now`` while some are; -inf: never), the queue length."""

    now: float
    decoding: int = 0
    decode_seen_at: float = -math.inf
    queue_len: int = 0


class ServiceCost:
    """The marginal-cost service over an optional :data:`ForwardEstimate`.

    ``forward(shapes)``: seconds of one forward over ``shapes`` (the estimate), or its
    token count plus :data:`FALLBACK_FORWARD_TOKENS` without one (``estimated`` says
    which unit). ``solo(c)``: the forward of ``c`` alone. ``marginal(batch, c)``: what
    adding ``c`` to ``batch`` adds to its forward. Solo forwards are memoised by shape
    (the queue's candidates repeat from pass to pass); the memo is dropped past
    ``memo_limit`` entries, so memory stays bounded on any run.
    """

    __slots__ = ("estimate", "memo", "memo_limit")

    def __init__(self, estimate: ForwardEstimate | None, memo_limit: int = 65536) -> None:
        self.estimate = estimate
        self.memo: dict[tuple[int, int, int], float] = {}
        self.memo_limit = memo_limit

    @property
    def estimated(self) -> bool:
        """Whether the figures are seconds (an estimate was given) or token units."""
        return self.estimate is not None

    def forward(self, shapes: Sequence[ReqShape]) -> float:
        if not shapes:
            return 0.0
        if self.estimate is not None:
            return self.estimate(shapes)
        return float(sum(s.extend_len for s in shapes) + FALLBACK_FORWARD_TOKENS)

    def solo(self, c: CandidateView) -> float:
        key = (c.matched_tokens, c.uncached_tokens, c.host_tokens)
        got = self.memo.get(key)
        if got is None:
            if len(self.memo) >= self.memo_limit:
                self.memo.clear()
            got = self.memo[key] = self.forward((c.shape(),))
        return got

    def solo_seconds(self, c: CandidateView) -> float:
        """:meth:`solo` in seconds (token units converted at
        :data:`FALLBACK_TOKENS_PER_S` without an estimate)."""
        got = self.solo(c)
        return got if self.estimate is not None else got / FALLBACK_TOKENS_PER_S

    def marginal(self, batch: BatchView, c: CandidateView) -> float:
        if not batch.shapes:
            return self.solo(c)
        return self.forward((*batch.shapes, c.shape())) - batch.forward_s
