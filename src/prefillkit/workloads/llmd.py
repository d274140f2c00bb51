"""The llm-d "KV-cache wins you can see" workload (``--generator llmd``): customers'
shared contexts under a stepped Poisson load, as llm-d's published fleet experiment.

:func:`iter_llmd_prefix` yields the records lazily in arrival order; :func:`llmd_prefix`
is the same as a list. The same arguments and seed always give identical records
(``numpy.random.default_rng(seed)``).

Sources (every default below comes from one of them):

- [blog] llm-d, "KV-Cache Wins You Can See" (2025-09-24),
  https://llm-d.ai/blog/kvcache-wins-you-can-see, Appendix A.2: 150 customers (groups),
  each with a 6,000-token context, 5 users per customer asking 1,200-token questions,
  Poisson load from 3 to 60 QPS; 8 vLLM pods (Qwen3-32B, 2 H100 each, 307,328 KV tokens
  a pod). Published TTFT p90: 0.542 s precise, 31.083 s approximate, 94.865 s load-only.
- [report] the run's harness config, which the blog links:
  https://github.com/llm-d/llm-d-kv-cache-manager/blob/main/benchmarking/73-capacity/README.md
  (commit d070ea6, 2025-09-21). inference-perf ``data.type: shared_prefix`` with
  ``num_groups: 150``, ``num_prompts_per_group: 5``, ``system_prompt_len: 6000``,
  ``question_len: 1200``, ``output_len: 1000`` and ``server.ignore_eos: true``;
  ``load.type: poisson``: a warm-up stage of 15 QPS for 50 s, then the 16 stages of
  :data:`QPS_STEPS` for :data:`STEP_S` seconds.
- [harness] kubernetes-sigs/inference-perf at 5b1da4d (2025-09-18, the last commit before
  the report): ``SharedPrefixDataGenerator`` draws one random-token system prompt per
  group and ``num_prompts_per_group`` random-token questions per group once (the same
  750 prompts are sent again and again), shuffles them once, and request ``n`` of a
  stage sends prompt ``n mod 750`` (``n`` restarts at 0 each stage). ``PoissonLoadTimer``
  draws a Poisson(``rate``) count for each one-second window and spreads it over the
  window by normalised exponential gaps; a stage sends ``int(rate * duration)``
  requests, waits until all have finished, sleeps ``load.interval`` (1 s) and starts the
  next stage 1 s after setting it up.
- [guide] llm-d's precise-prefix-cache-aware guide runs vLLM with ``--block-size 64``
  and the report's precise scorer hashes 64-token blocks (``blockSize: 64``).

Assumptions (where the sources are silent, or a simulator must differ):

- Open loop: the harness's wait for a stage's requests to finish depends on the server,
  so here stage ``k + 1`` starts ``step_gap_s`` after stage ``k``'s last arrival (default
  2 s: the 1 s interval plus the 1 s set-up, with no drain time). A replay therefore
  carries a backlog from one stage into the next, which the real harness did not. The
  first request arrives at 0 (as the other generators'; the trace readers start there).
- Exact lengths: every prompt is ``context_tokens + query_tokens`` tokens. The harness
  decoded random token ids to text and the server re-tokenised it, so the served
  lengths were near, not exactly, 6,000 + 1,200 (inference-perf fixed this later, #383).
- Fixed questions (``fresh_queries=False``, as the harness): a repeated prompt is the
  same prompt, so its question blocks hit too. ``fresh_queries=True`` draws a new
  question for every request (only the context is shared).
- ``pick="cycle"`` replays the harness's order (one seeded shuffle of the prompts,
  request ``k`` of a stage sends prompt ``k mod prompts``); ``pick="uniform"`` draws
  each request's (customer, user) uniformly at random instead.

Block hash ids (``block_size`` tokens a block): customer ``g``'s complete context blocks
have the same ids in every prompt of ``g`` and in no other; the block that straddles
the context and the question (6,000 = 93 x 64 + 48) and the question's blocks belong to
one (customer, user) prompt (fresh for every request with ``fresh_queries``). Prompts
share nothing across customers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

from prefillkit.text import lazy_module
from prefillkit.workloads.record import TraceRecord

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = ["PICKS", "QPS_STEPS", "STEP_S", "iter_llmd_prefix", "llmd_prefix"]

#: [report] the main ladder's request rates (QPS), in order.
QPS_STEPS: tuple[float, ...] = (3, 10, 15, 20, 22, 25, 30, 35, 40, 43, 46, 49, 52, 55, 57, 60)
#: [report] seconds of each step of :data:`QPS_STEPS`.
STEP_S: tuple[float, ...] = (20, 20, 20, 38, 34, 30, 25, 21, 38, 36, 33, 30, 29, 27, 26, 25)
#: How a request chooses its prompt: the harness's shuffled cycle, or uniformly at random.
PICKS: tuple[str, ...] = ("cycle", "uniform")

FloatSeq = float | Sequence[float]


@dataclass(frozen=True, slots=True)
class _Shape:
    """What every prompt looks like (see :func:`iter_llmd_prefix`)."""

    customers: int
    users: int
    context: int
    query: int
    output: int
    block_size: int
    fresh_queries: bool

    @property
    def ctx_blocks(self) -> int:
        """Complete blocks of the context: shared by a customer's prompts."""
        return self.context // self.block_size

    @property
    def tail_blocks(self) -> int:
        """Blocks after those: the straddling one and the question's."""
        return -(-(self.context + self.query) // self.block_size) - self.ctx_blocks


@dataclass(frozen=True, slots=True)
class _Stage:
    """One load stage: its rid label, rate (QPS) and length (s)."""

    label: str
    qps: float
    seconds: float

    @property
    def requests(self) -> int:
        """[harness] ``int(rate * duration)`` requests a stage."""
        return int(self.qps * self.seconds)


def _floats(name: str, value: FloatSeq) -> tuple[float, ...]:
    """``value`` (one number or a sequence) as a tuple, each finite and > 0."""
    items = (value,) if isinstance(value, (int, float)) else tuple(value)
    if not items:
        raise ValueError(f"{name} must have at least one value")
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError(f"{name} must be finite numbers, got {x!r}")
        if x <= 0:
            raise ValueError(f"{name} must be > 0, got {x:g}")
    return tuple(float(x) for x in items)


def _check_shape(s: _Shape) -> None:
    """The prompt arguments' checks; each message starts with the parameter's name."""
    lows = {
        "customers": (s.customers, 1),
        "users_per_customer": (s.users, 1),
        "context_tokens": (s.context, 0),
        "query_tokens": (s.query, 1),
        "output_tokens": (s.output, 0),
        "block_size": (s.block_size, 1),
    }
    for name, (value, low) in lows.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")


def _stages(qps_steps: FloatSeq, step_s: FloatSeq, warmup: tuple[float, float]) -> list[_Stage]:
    """The warm-up stage (if any; label ``w``) and the steps (``s0``, ``s1``, ...)."""
    rates = _floats("qps_steps", qps_steps)
    lengths = _floats("step_s", step_s)
    if len(lengths) == 1:
        lengths = lengths * len(rates)
    if len(lengths) != len(rates):
        raise ValueError(
            f"step_s has {len(lengths)} values for {len(rates)} qps_steps: give one, "
            "or one per step"
        )
    for name, value in zip(("warmup_qps", "warmup_s"), warmup, strict=True):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be finite and >= 0, got {value}")
    stages = [_Stage(f"s{j}", q, t) for j, (q, t) in enumerate(zip(rates, lengths, strict=True))]
    if warmup[0] > 0 and warmup[1] > 0:
        stages.insert(0, _Stage("w", warmup[0], warmup[1]))
    if not any(st.requests for st in stages):
        raise ValueError("qps_steps x step_s gives no requests (int(qps x seconds) is 0)")
    return stages


def _stage_arrivals(rng: np.random.Generator, rate: float, n: int, start: float) -> np.ndarray:
    """[harness] ``PoissonLoadTimer``: ``n`` arrival times from ``start``, one-second
    windows each holding a Poisson(``rate``) count spread by normalised exponential gaps
    (an empty window just passes)."""
    out = np.empty(n)
    filled = 0
    t = start
    while filled < n:
        c = int(rng.poisson(rate))
        if c < 1:
            t += 1.0
            continue
        gaps = rng.exponential(1.0 / c, size=c)
        times = t + np.cumsum(gaps / gaps.sum())
        take = min(c, n - filled)
        out[filled : filled + take] = times[:take]
        filled += take
        t = float(times[-1])
    return out


def _fixed_ids(s: _Shape) -> int:
    """How many ids the fixed prompts use (fresh ids start here)."""
    return s.customers * s.ctx_blocks + s.customers * s.users * s.tail_blocks


def _hash_ids(s: _Shape, prompt: int, fresh: Iterator[int]) -> tuple[int, ...]:
    """Prompt ``prompt`` (``customer * users + user``)'s block ids: its customer's
    context blocks, then its own tail (fresh ones with ``fresh_queries``)."""
    g = prompt // s.users
    ctx = range(g * s.ctx_blocks, (g + 1) * s.ctx_blocks)
    if s.fresh_queries:
        return (*ctx, *(next(fresh) for _ in range(s.tail_blocks)))
    base = s.customers * s.ctx_blocks + prompt * s.tail_blocks
    return (*ctx, *range(base, base + s.tail_blocks))


def _picks(rng: np.random.Generator, order: np.ndarray, n: int, pick: str) -> list[int]:
    """The prompt of each of a stage's ``n`` requests."""
    if pick == "cycle":
        return order[np.arange(n) % len(order)].tolist()  # type: ignore[no-any-return]
    return rng.integers(0, len(order), size=n).tolist()  # type: ignore[no-any-return]


def _stream(
    seed: int, s: _Shape, stages: list[_Stage], gap: float, pick: str
) -> Iterator[TraceRecord]:
    """The records, stage by stage (one stage's arrivals drawn at a time)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(s.customers * s.users)  # [harness] one shuffle of the prompts
    fresh = count(_fixed_ids(s))
    known: dict[int, tuple[int, ...]] = {}  # fixed prompts' ids, shared by their records
    start = 0.0
    first = next(st for st in stages if st.requests)
    for st in stages:
        n = st.requests
        if n == 0:
            continue
        times = _stage_arrivals(rng, st.qps, n, start)
        if st is first:
            times -= times[0]  # the first request at 0, like the other generators
        for k, (t, p) in enumerate(zip(times.tolist(), _picks(rng, order, n, pick), strict=True)):
            ids = known.get(p) if not s.fresh_queries else None
            if ids is None:
                ids = _hash_ids(s, p, fresh)
                if not s.fresh_queries:
                    known[p] = ids
            g, u = divmod(p, s.users)
            yield TraceRecord(
                rid=f"llmd-{st.label}-{k}-c{g}-u{u}",
                arrival_s=t,
                input_len=s.context + s.query,
                output_len=s.output,
                hash_ids=ids,
                block_size=s.block_size,
                tokens=None,
                ignore_eos=True,  # [report] server.ignore_eos: true
            )
        start = float(times[-1]) + gap


def iter_llmd_prefix(
    customers: int = 150,
    users_per_customer: int = 5,
    context_tokens: int = 6000,
    query_tokens: int = 1200,
    output_tokens: int = 1000,
    qps_steps: FloatSeq = QPS_STEPS,
    step_s: FloatSeq = STEP_S,
    warmup_qps: float = 15.0,
    warmup_s: float = 50.0,
    step_gap_s: float = 2.0,
    pick: str = "cycle",
    fresh_queries: bool = False,
    block_size: int = 64,
    seed: int = 0,
) -> Iterator[TraceRecord]:
    """llm-d's shared-prefix fleet workload, yielded lazily in arrival order (the
    arguments are checked at the call).

    ``customers`` each have a ``context_tokens`` context and ``users_per_customer`` users
    with a ``query_tokens`` question each; a prompt is a customer's context followed by
    one user's question, and asks for exactly ``output_tokens`` tokens (``ignore_eos``).
    The load is a warm-up stage (``warmup_qps`` for ``warmup_s`` seconds; 0 for none) and
    then one stage per rate of ``qps_steps`` for ``step_s`` seconds (one number for all
    steps, or one per step); a stage of ``qps`` for ``t`` seconds sends ``int(qps * t)``
    requests at Poisson times, and the next stage starts ``step_gap_s`` after its last
    arrival. Which prompt a request sends: ``pick`` (``"cycle"``, the harness's order, or
    ``"uniform"``); ``fresh_queries``: a new question for every request.

    Request ids are ``llmd-<stage>-<k>-c<customer>-u<user>`` (stage ``w`` is the
    warm-up, ``s0``, ``s1``, ... the steps). Sources and assumptions: see
    :mod:`prefillkit.workloads.llmd`. The defaults send 17,084 requests (750 warm-up,
    16,334 in the steps), the last at 529.5 s (seed 0).
    """
    shape = _Shape(
        customers=customers,
        users=users_per_customer,
        context=context_tokens,
        query=query_tokens,
        output=output_tokens,
        block_size=block_size,
        fresh_queries=bool(fresh_queries),
    )
    _check_shape(shape)
    stages = _stages(qps_steps, step_s, (float(warmup_qps), float(warmup_s)))
    if not (math.isfinite(step_gap_s) and step_gap_s >= 0):
        raise ValueError(f"step_gap_s must be finite and >= 0, got {step_gap_s}")
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {', '.join(PICKS)}, got {pick!r}")
    return _stream(seed, shape, stages, float(step_gap_s), pick)


@functools.wraps(iter_llmd_prefix)
def llmd_prefix(*args: Any, **kwargs: Any) -> list[TraceRecord]:
    """:func:`iter_llmd_prefix` as a list (same arguments, same records)."""
    return list(iter_llmd_prefix(*args, **kwargs))


llmd_prefix.__doc__ = iter_llmd_prefix.__doc__
