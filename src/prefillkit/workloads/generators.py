"""Seeded synthetic workload generators (``numpy.random.default_rng(seed)``).

- ``generated_shared_prefix``: SGLang ``bench_serving --dataset-name
  generated-shared-prefix`` semantics, with token ids.
- ``multi_turn_agentic``: agent sessions whose context grows turn by turn, with
  chain-consistent block hash ids.
- ``seed_agentic``: ``multi_turn_agentic`` with :data:`SEED_AGENTIC`, the traffic mix of
  the seed system's production replay (per-session system prompts, 32-128 K contexts,
  10-30 turns, cold first turns of 16.6-32 K tokens).

All return ``TraceRecord`` lists sorted by arrival; the same arguments and seed always
give identical records.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import count
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from prefillkit.request import SessionTurn
from prefillkit.text import lazy_module
from prefillkit.workloads.record import TraceRecord

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = [
    "SEED_AGENTIC",
    "SYSTEM_PROMPT_CHOICE",
    "generated_shared_prefix",
    "iter_generated_shared_prefix",
    "iter_multi_turn_agentic",
    "merge_agentic_args",
    "multi_turn_agentic",
    "seed_agentic",
]


def _draw_len(rng: np.random.Generator, full: int, range_ratio: float) -> int:
    """A length in ``[max(1, floor(full * range_ratio)), full]`` (``full`` if ratio is 1)."""
    if range_ratio >= 1.0:
        return full
    lo = max(1, math.floor(full * range_ratio))
    return int(rng.integers(lo, full + 1))


def _poisson_arrivals(rng: np.random.Generator, n: int, rate: float) -> list[float]:
    """``n`` Poisson arrivals at ``rate`` per second, the first at 0 (inf: all at 0)."""
    return _poisson_array(rng, n, rate).tolist()  # type: ignore[no-any-return]


def _poisson_array(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """:func:`_poisson_arrivals` as a float64 array (8 bytes per arrival)."""
    if math.isinf(rate):
        return np.zeros(n)
    gaps = rng.exponential(1.0 / rate, size=max(n - 1, 0))
    out = np.empty(n)
    if n:
        out[0] = 0.0
        np.cumsum(gaps, out=out[1:])
    return out


def iter_generated_shared_prefix(
    num_groups: int = 64,
    prompts_per_group: int = 16,
    system_prompt_len: int = 2048,
    question_len: int = 128,
    output_len: int = 256,
    range_ratio: float = 1.0,
    request_rate: float = math.inf,
    group_distribution: str = "uniform",
    zipf_alpha: float = 1.1,
    ordered: bool = False,
    num_turns: int = 1,
    seed: int = 0,
    vocab_size: int = 32000,
) -> Iterator[TraceRecord]:
    """Shared-prefix workload in the style of SGLang's ``generated-shared-prefix``,
    yielded lazily (arguments checked at the call).

    Streaming: the conversations' questions are drawn in the eager order (before the
    shuffle), but only the generator state at each conversation's first draw is kept
    (a few bytes each); a conversation's tokens are drawn again from that state when it
    arrives, so the look-ahead is one conversation, not the whole workload.

    Each of ``num_groups`` groups has one random-token system prompt; each request is its
    group's prompt followed by a random-token question. There are
    ``num_groups * prompts_per_group`` conversations: ``prompts_per_group`` per group
    (``"uniform"``), or each assigned to group ``g`` with probability proportional to
    ``1 / (g + 1) ** zipf_alpha`` (``"zipf"``). With ``range_ratio < 1`` the system prompt
    (per group), question and output lengths (per request) are drawn uniformly from
    ``[floor(len * range_ratio), len]``. Conversations are shuffled unless ``ordered``,
    then arrive as a Poisson process at ``request_rate`` (inf: all at t = 0).

    With ``num_turns > 1`` each conversation has that many turns: turn ``k``'s prompt is
    the system prompt, then each earlier question followed by a random-token stand-in for
    its answer (``output_len`` tokens), then question ``k``. All turns of a conversation
    carry its arrival time (listed in turn order) and a :class:`SessionTurn` (no think
    time): a closed-loop replay sends turn ``k`` once turn ``k - 1`` has answered, as
    ``bench_serving`` does; an open-loop one sends them all at once.

    Defaults: 1,024 requests of 2,176 tokens, 64 distinct system prompts.
    """
    if num_groups < 1 or prompts_per_group < 1 or num_turns < 1:
        raise ValueError("num_groups, prompts_per_group and num_turns must be >= 1")
    if system_prompt_len < 0 or question_len < 1 or output_len < 0:
        raise ValueError("need system_prompt_len >= 0, question_len >= 1, output_len >= 0")
    if not 0.0 < range_ratio <= 1.0:
        raise ValueError(f"range_ratio must be in (0, 1], got {range_ratio}")
    if not request_rate > 0:
        raise ValueError(f"request_rate must be > 0, got {request_rate}")
    if group_distribution not in ("uniform", "zipf"):
        raise ValueError(
            f"group_distribution must be 'uniform' or 'zipf', not {group_distribution!r}"
        )
    if vocab_size < 2:
        raise ValueError("vocab_size must be >= 2")

    rng = np.random.default_rng(seed)
    sys_prompts = [
        rng.integers(0, vocab_size, size=_draw_len(rng, system_prompt_len, range_ratio))
        for _ in range(num_groups)
    ]
    total = num_groups * prompts_per_group
    if group_distribution == "uniform":
        groups = np.repeat(np.arange(num_groups), prompts_per_group)
    else:
        w = 1.0 / np.arange(1, num_groups + 1, dtype=np.float64) ** zipf_alpha
        groups = np.sort(rng.choice(num_groups, size=total, p=w / w.sum()))

    # One conversation per (group, index-in-group), in group order: keep the bit
    # generator's state before its draws, draw (to advance the stream) and drop them.
    bitgen = rng.bit_generator
    state0 = bitgen.state
    st_hi = np.empty(total, dtype=np.uint64)
    st_lo = np.empty(total, dtype=np.uint64)
    st_has = np.empty(total, dtype=np.uint8)
    st_u = np.empty(total, dtype=np.uint32)
    group_of = groups.astype(np.int64)
    index_in_group = np.empty(total, dtype=np.int64)
    per_group: dict[int, int] = {}
    mask = (1 << 64) - 1
    for i, g in enumerate(groups.tolist()):
        idx = per_group.get(g, 0)
        per_group[g] = idx + 1
        index_in_group[i] = idx
        st = bitgen.state
        v = st["state"]["state"]
        st_hi[i], st_lo[i] = v >> 64, v & mask
        st_has[i], st_u[i] = st["has_uint32"], st["uinteger"]
        _conv_draws(rng, num_turns, question_len, output_len, range_ratio, vocab_size)
    order = np.arange(total) if ordered else rng.permutation(total)
    arrivals = _poisson_array(rng, total, request_rate)
    return _gsp_stream(
        rng, sys_prompts, order, arrivals, group_of, index_in_group,
        (st_hi, st_lo, st_has, st_u, state0),
        (num_turns, question_len, output_len, range_ratio, vocab_size),
    )  # fmt: skip


def _conv_draws(
    rng: np.random.Generator,
    num_turns: int,
    question_len: int,
    output_len: int,
    range_ratio: float,
    vocab_size: int,
) -> tuple[list[np.ndarray], list[int]]:
    """One conversation's questions and output lengths (the eager draw order)."""
    questions = [
        rng.integers(0, vocab_size, size=_draw_len(rng, question_len, range_ratio))
        for _ in range(num_turns)
    ]
    outs = [_draw_len(rng, output_len, range_ratio) for _ in range(num_turns)]
    return questions, outs


def _gsp_stream(
    rng: np.random.Generator,
    sys_prompts: list[np.ndarray],
    order: np.ndarray,
    arrivals: np.ndarray,
    group_of: np.ndarray,
    index_in_group: np.ndarray,
    states: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Mapping[str, Any]],
    shape: tuple[int, int, int, float, int],
) -> Iterator[TraceRecord]:
    st_hi, st_lo, st_has, st_u, state0 = states
    num_turns, question_len, output_len, range_ratio, vocab_size = shape
    side = np.random.Generator(type(rng.bit_generator)())
    inc = state0["state"]["inc"]
    name = state0["bit_generator"]
    for conv_i, t in zip(order.tolist(), arrivals.tolist(), strict=True):
        side.bit_generator.state = {
            "bit_generator": name,
            "state": {"state": (int(st_hi[conv_i]) << 64) | int(st_lo[conv_i]), "inc": inc},
            "has_uint32": int(st_has[conv_i]),
            "uinteger": int(st_u[conv_i]),
        }
        questions, outs = _conv_draws(
            side, num_turns, question_len, output_len, range_ratio, vocab_size
        )
        g = int(group_of[conv_i])
        rid = f"gsp-g{g}-p{int(index_in_group[conv_i])}"
        parts: list[np.ndarray] = [sys_prompts[g]]
        for turn in range(num_turns):
            parts.append(questions[turn])
            tokens = tuple(np.concatenate(parts).tolist())
            yield TraceRecord(
                rid=rid if num_turns == 1 else f"{rid}-t{turn}",
                arrival_s=float(t),
                input_len=len(tokens),
                output_len=outs[turn],
                hash_ids=None,
                block_size=None,
                tokens=tokens,
                session=(
                    None if num_turns == 1 else SessionTurn(rid, turn, 0.0, turn + 1 == num_turns)
                ),
            )
            if turn + 1 < num_turns:  # the answer becomes part of the next prompt
                parts.append(rng.integers(0, vocab_size, size=outs[turn]))


@functools.wraps(iter_generated_shared_prefix)
def generated_shared_prefix(*args: Any, **kwargs: Any) -> list[TraceRecord]:
    """:func:`iter_generated_shared_prefix` as a list (same arguments, same records)."""
    return list(iter_generated_shared_prefix(*args, **kwargs))


generated_shared_prefix.__doc__ = iter_generated_shared_prefix.__doc__


IntRange = tuple[int, int]
FloatRange = tuple[float, float]


def _check_range(name: str, r: tuple[float, float], low: float) -> None:
    if len(r) != 2 or not (low <= r[0] <= r[1]):
        raise ValueError(f"{name} must be (lo, hi) with {low} <= lo <= hi, got {r}")


def _as_range(value: int | IntRange) -> IntRange:
    """An int ``n`` as the range ``(n, n)``; a range as itself."""
    if isinstance(value, int):
        return (value, value)
    if len(value) != 2:
        raise ValueError(f"system_prompt_len must be an integer or (lo, hi), got {value}")
    return (value[0], value[1])


def _check_positive(name: str, value: float | None, *, strict: bool = True) -> None:
    if value is None:
        return
    ok = value > 0 if strict else value >= 0
    if not ok:
        raise ValueError(f"{name} must be {'> 0' if strict else '>= 0'}, got {value}")


def _check_agentic(
    num_sessions: int,
    ranges: dict[str, tuple[tuple[float, float], float]],
    num_system_prompts: int | None,
    sessions_per_system_prompt: int | None,
    positives: dict[str, float | None],
) -> None:
    """Every argument check of :func:`multi_turn_agentic`; each message starts with the
    parameter's name."""
    if num_sessions < 1:
        raise ValueError(f"num_sessions must be >= 1, got {num_sessions}")
    for name, (r, low) in ranges.items():
        _check_range(name, r, low)
    if num_system_prompts is not None and sessions_per_system_prompt is not None:
        raise ValueError(
            "num_system_prompts and sessions_per_system_prompt: give one of them, not both"
        )
    for name, count_ in (
        ("num_system_prompts", num_system_prompts),
        ("sessions_per_system_prompt", sessions_per_system_prompt),
    ):
        if count_ is not None and count_ < 1:
            raise ValueError(f"{name} must be >= 1, got {count_}")
    for name, value in positives.items():
        _check_positive(name, value)


def _system_prompts(
    rng: np.random.Generator,
    fresh: Iterator[int],
    count_: int,
    length: IntRange,
    block_size: int,
) -> list[tuple[int, list[int]]]:
    """``count_`` system prompts as ``(length, ids of its complete blocks)``.

    A fixed length (``lo == hi``) draws nothing from ``rng``."""
    if length[0] == length[1]:
        lens = [length[0]] * count_
    else:
        lens = rng.integers(length[0], length[1] + 1, size=count_).tolist()
    return [(n, [next(fresh) for _ in range(n // block_size)]) for n in lens]


def _prompt_index(session: int, num_system_prompts: int, per_prompt: int | None) -> int:
    """Which system prompt a session uses: round robin over ``num_system_prompts``, or
    consecutive groups of ``per_prompt`` sessions."""
    return session % num_system_prompts if per_prompt is None else session // per_prompt


@dataclass(frozen=True, slots=True)
class _Turns:
    """Per-session drawing parameters of :func:`multi_turn_agentic`."""

    turns: IntRange
    first_user: IntRange
    append: IntRange
    output: IntRange
    think: FloatRange
    max_prompt_len: int | None
    block_size: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float


def _session(
    rng: np.random.Generator,
    fresh: Iterator[int],
    s: int,
    start: float,
    system: tuple[int, list[int]],
    p: _Turns,
) -> list[TraceRecord]:
    """The turns of session ``s`` (see :func:`multi_turn_agentic`)."""

    def ri(r: IntRange) -> int:
        return int(rng.integers(r[0], r[1] + 1))

    bs = p.block_size
    n_turns = ri(p.turns)
    ctx_len, sys_ids = system
    ctx_ids = list(sys_ids)  # ids of the context's complete blocks (prompt + outputs)
    t = start
    think = 0.0
    new_tokens = ri(p.first_user)
    turns: list[tuple[float, int, int, tuple[int, ...], float]] = []
    for _ in range(n_turns):
        prompt_len = ctx_len + new_tokens
        if turns and p.max_prompt_len is not None and prompt_len > p.max_prompt_len:
            break  # the context window is full: the session ends here
        n_full = prompt_len // bs
        while len(ctx_ids) < n_full:
            ctx_ids.append(next(fresh))
        hash_ids = ctx_ids[:n_full]
        if prompt_len % bs:
            hash_ids = [*hash_ids, next(fresh)]  # partial tail: new content
        out = ri(p.output)
        turns.append((t, prompt_len, out, tuple(hash_ids), think))
        # The output joins the context; the next turn appends more.
        ctx_len = prompt_len + out
        while len(ctx_ids) < ctx_len // bs:
            ctx_ids.append(next(fresh))
        service = new_tokens / p.prefill_tokens_per_s + out / p.decode_tokens_per_s
        think = float(rng.uniform(p.think[0], p.think[1]))
        t += service + think
        new_tokens = ri(p.append)
    sid = f"agent-s{s}"
    out_records = [
        TraceRecord(
            rid=f"{sid}-t{k}",
            arrival_s=float(at),
            input_len=prompt_len,
            output_len=out,
            hash_ids=hash_ids,
            block_size=bs,
            tokens=None,
            session=SessionTurn(sid, k, think_k, k + 1 == len(turns)),
        )
        for k, (at, prompt_len, out, hash_ids, think_k) in enumerate(turns)
    ]
    return out_records


def iter_multi_turn_agentic(
    num_sessions: int = 64,
    turns_per_session: IntRange = (4, 12),
    system_prompt_len: int | IntRange = 8192,
    num_system_prompts: int | None = None,
    first_user_len: IntRange = (256, 2048),
    turn_append_len: IntRange = (128, 1024),
    output_len: IntRange = (64, 512),
    think_time_s: FloatRange = (1.0, 10.0),
    session_arrival_rate: float = 2.0,
    block_size: int = 64,
    seed: int = 0,
    prefill_tokens_per_s: float = 10_000.0,
    decode_tokens_per_s: float = 50.0,
    sessions_per_system_prompt: int | None = None,
    max_prompt_len: int | None = None,
) -> Iterator[TraceRecord]:
    """Agentic multi-turn sessions whose context grows turn by turn, yielded lazily in
    arrival order (the arguments are checked at the call).

    Streaming: sessions are drawn in session order (the draws of the eager version, in
    the same order) and a drawn turn waits in a heap only until the next session's start,
    after which no later session can arrive before it; so the look-ahead is the turns of
    the sessions live at once, not the whole workload.

    Sessions start as a Poisson process at ``session_arrival_rate`` (the first at 0) and
    have a number of turns drawn from ``turns_per_session`` (inclusive). Turn 1's prompt
    is a system prompt plus a user message (``first_user_len``). System prompts: one
    shared by all sessions (the default), ``num_system_prompts`` assigned round robin
    (session ``s`` uses prompt ``s % num_system_prompts``), or, with
    ``sessions_per_system_prompt = g``, one per group of ``g`` consecutive sessions
    (session ``s`` uses prompt ``s // g``; ``g = 1``: every session has its own; give
    this or ``num_system_prompts``, not both). A system prompt has ``system_prompt_len``
    tokens, or, given a range ``(lo, hi)``, a length drawn once per prompt. Turn
    ``k + 1``'s prompt is turn ``k``'s prompt + turn ``k``'s output (``output_len``) + an
    append (``turn_append_len``: tool output or user text), so it has the whole previous
    context as a prefix. With ``max_prompt_len`` a session ends before a later turn whose
    prompt would be longer (its context window is full; turn 1 is always kept), so
    ``turns_per_session`` is then an upper bound. Integer ranges are inclusive and drawn
    uniformly.

    Each record carries a :class:`~prefillkit.request.SessionTurn` (session ``agent-s<s>``,
    the turn, its think time drawn from ``think_time_s``, whether it is the last). Its
    ``arrival_s`` is the open-loop schedule: turn ``k + 1`` at turn ``k``'s arrival + a
    nominal service time (``new prompt tokens / prefill_tokens_per_s + output /
    decode_tokens_per_s``) + its think time. A closed-loop replay (the default) keeps only
    the first turns' times and sends turn ``k + 1`` at turn ``k``'s answer + its think
    time (prefillkit.sim.closed_loop).

    Prompts are described by chain-consistent block hash ids (``block_size`` tokens per
    block): every new block content gets a fresh integer; a session's turn reuses the ids
    of its context's complete blocks, and complete system-prompt blocks are shared by the
    sessions using that prompt. A partial block (the prompt's tail, or a block straddling
    the system prompt and the user message) is new content each time and gets a fresh
    id. Records are sorted by arrival (ties keep session order).

    Hit rate: by the traces README rule (a block hits iff its prefix appeared in an
    earlier request's prompt) turn 1 hits only the complete blocks of its system prompt,
    and only when a session that started earlier uses the same prompt (never when every
    session has its own); each later turn misses the blocks holding the previous output
    and the append, plus the re-opened partial tail block. With the defaults the ideal
    block-level hit rate is about 92 % (about 89 % with a 4,096-token system prompt);
    :data:`SEED_AGENTIC` gives 91.66 % (seed 0).
    """
    sys_range = _as_range(system_prompt_len)
    _check_agentic(
        num_sessions,
        {
            "turns_per_session": (turns_per_session, 1),
            "system_prompt_len": (sys_range, 0),
            "first_user_len": (first_user_len, 1),
            "turn_append_len": (turn_append_len, 1),
            "output_len": (output_len, 0),
            "think_time_s": (think_time_s, 0.0),
        },
        num_system_prompts,
        sessions_per_system_prompt,
        {
            "block_size": block_size,
            "session_arrival_rate": session_arrival_rate,
            "prefill_tokens_per_s": prefill_tokens_per_s,
            "decode_tokens_per_s": decode_tokens_per_s,
            "max_prompt_len": max_prompt_len,
        },
    )
    per_prompt = sessions_per_system_prompt
    if per_prompt is not None:
        n_prompts = -(-num_sessions // per_prompt)
    else:
        n_prompts = 1 if num_system_prompts is None else num_system_prompts
    rng = np.random.default_rng(seed)
    fresh = count()
    systems = _system_prompts(rng, fresh, n_prompts, sys_range, block_size)
    starts = _poisson_array(rng, num_sessions, session_arrival_rate)
    params = _Turns(
        turns=turns_per_session,
        first_user=first_user_len,
        append=turn_append_len,
        output=output_len,
        think=think_time_s,
        max_prompt_len=max_prompt_len,
        block_size=block_size,
        prefill_tokens_per_s=prefill_tokens_per_s,
        decode_tokens_per_s=decode_tokens_per_s,
    )
    return _agentic_stream(rng, fresh, systems, starts, n_prompts, per_prompt, params)


def _agentic_stream(
    rng: np.random.Generator,
    fresh: Iterator[int],
    systems: list[tuple[int, list[int]]],
    starts: np.ndarray,
    n_prompts: int,
    per_prompt: int | None,
    params: _Turns,
) -> Iterator[TraceRecord]:
    """The records of :func:`iter_multi_turn_agentic` sorted by ``(arrival, session,
    turn)``: session ``s`` arrives at ``starts[s]`` or later (starts are non-decreasing),
    so a drawn turn whose key is below ``(starts[s], s)`` precedes every undrawn one."""
    heap: list[tuple[float, int, int, TraceRecord]] = []
    push, pop = heapq.heappush, heapq.heappop
    for s in range(len(starts)):
        start = float(starts[s])
        bound = (start, s)
        while heap and (heap[0][0], heap[0][1]) < bound:
            yield pop(heap)[3]
        system = systems[_prompt_index(s, n_prompts, per_prompt)]
        for k, rec in enumerate(_session(rng, fresh, s, start, system, params)):
            push(heap, (rec.arrival_s, s, k, rec))
    while heap:
        yield pop(heap)[3]


@functools.wraps(iter_multi_turn_agentic)
def multi_turn_agentic(*args: Any, **kwargs: Any) -> list[TraceRecord]:
    """:func:`iter_multi_turn_agentic` as a list (same arguments, same records)."""
    return list(iter_multi_turn_agentic(*args, **kwargs))


multi_turn_agentic.__doc__ = iter_multi_turn_agentic.__doc__


#: The seed system's traffic mix (a production replay at 91.8 % cache hit):
#: ``multi_turn_agentic`` arguments. Every session has its own system prompt of 16-32 K
#: tokens; turn 1 adds 16-48 K user tokens, so cold first turns have 32-80 K tokens and a
#: quarter of them (74 of 300, seed 0) are longer than the seed deployment's 64 K chunk
#: (``--chunked-prefill-size 65536``, ``prefillkit.cost.validation.SEED_DEPLOYMENT``) and
#: are chunked; all are chunked at 16 K. 10-30 turns each add a 128-1,024-token output
#: and a 1-6 K append, until the next prompt would pass 128 K (131,072) tokens.
#: Ideal hit rate (infinite cache; block level 91.66 %, token weighted 91.69 % for seed
#: 0): with 10-30 turns, long first turns and contexts capped at 128 K it cannot go much
#: below 91 %, as each session misses about its whole first context once. 300 sessions
#: at 0.15 sessions/s: 4,878 requests (seed 0), generated in well under a second; set the
#: load with ``session_arrival_rate`` (``--agentic-session-rate``).
SEED_AGENTIC: Mapping[str, Any] = MappingProxyType(
    {
        "num_sessions": 300,
        "turns_per_session": (10, 30),
        "system_prompt_len": (16384, 32768),
        "sessions_per_system_prompt": 1,
        "first_user_len": (16384, 49152),
        "turn_append_len": (1024, 6144),
        "output_len": (128, 1024),
        "think_time_s": (1.0, 10.0),
        "session_arrival_rate": 0.15,
        "max_prompt_len": 131072,
        "block_size": 64,
    }
)

#: Arguments of ``multi_turn_agentic`` that choose the system-prompt sharing together:
#: giving one of them replaces the other from an earlier layer (see
#: :func:`merge_agentic_args`).
SYSTEM_PROMPT_CHOICE: tuple[str, str] = ("num_system_prompts", "sessions_per_system_prompt")


def merge_agentic_args(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` arguments of ``multi_turn_agentic`` with ``overrides`` on top.

    ``num_system_prompts`` and ``sessions_per_system_prompt`` are one choice: an override
    of either drops the other from ``base`` (overrides giving both are left for
    ``multi_turn_agentic`` to refuse).
    """
    merged = dict(base)
    for name in SYSTEM_PROMPT_CHOICE:
        if name in overrides:
            for other in SYSTEM_PROMPT_CHOICE:
                if other not in overrides:
                    merged.pop(other, None)
    merged.update(overrides)
    return merged


def seed_agentic(**overrides: Any) -> list[TraceRecord]:
    """``multi_turn_agentic`` with the seed's traffic mix (:data:`SEED_AGENTIC`), any
    argument overridden (merged by :func:`merge_agentic_args`)."""
    return multi_turn_agentic(**merge_agentic_args(SEED_AGENTIC, overrides))
