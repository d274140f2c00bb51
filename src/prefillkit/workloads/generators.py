"""Seeded synthetic workload generators (``numpy.random.default_rng(seed)``).

- ``generated_shared_prefix``: SGLang ``bench_serving --dataset-name
  generated-shared-prefix`` semantics, with token ids.
- ``multi_turn_agentic``: agent sessions whose context grows turn by turn, with
  chain-consistent block hash ids.
- ``seed_agentic``: ``multi_turn_agentic`` with :data:`SEED_AGENTIC`, the traffic mix of
  the seed system's production replay (per-session system prompts, 32-128 K contexts,
  10-30 turns, cold first turns of 16.6-32 K tokens).

All return ``TraceRecord`` lists sorted by arrival; the same arguments and seed always
give identical records. ``multi_turn_agentic`` is defined in
:mod:`prefillkit.workloads.agentic`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from prefillkit.request import SessionTurn
from prefillkit.text import lazy_module
from prefillkit.workloads.agentic import multi_turn_agentic
from prefillkit.workloads.arrivals import poisson_array
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
    "merge_agentic_args",
    "seed_agentic",
]


def _draw_len(rng: np.random.Generator, full: int, range_ratio: float) -> int:
    """A length in ``[max(1, floor(full * range_ratio)), full]`` (``full`` if ratio is 1)."""
    if range_ratio >= 1.0:
        return full
    lo = max(1, math.floor(full * range_ratio))
    return int(rng.integers(lo, full + 1))


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
    shape = (num_turns, question_len, output_len, range_ratio, vocab_size)
    _check_gsp(
        num_groups, prompts_per_group, system_prompt_len, request_rate, group_distribution, shape
    )
    rng = np.random.default_rng(seed)
    sys_prompts = [
        rng.integers(0, vocab_size, size=_draw_len(rng, system_prompt_len, range_ratio))
        for _ in range(num_groups)
    ]
    total = num_groups * prompts_per_group
    groups = _draw_groups(rng, num_groups, prompts_per_group, group_distribution, zipf_alpha)
    group_of = groups.astype(np.int64)
    index_in_group, states = _conversation_states(rng, groups, shape)
    order = np.arange(total) if ordered else rng.permutation(total)
    arrivals = poisson_array(rng, total, request_rate)
    return _gsp_stream(rng, sys_prompts, order, arrivals, group_of, index_in_group, states, shape)


def _check_gsp(
    num_groups: int,
    prompts_per_group: int,
    system_prompt_len: int,
    request_rate: float,
    group_distribution: str,
    shape: tuple[int, int, int, float, int],
) -> None:
    """Every argument check of :func:`generated_shared_prefix` (``shape`` is
    ``(num_turns, question_len, output_len, range_ratio, vocab_size)``)."""
    num_turns, question_len, output_len, range_ratio, vocab_size = shape
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


def _draw_groups(
    rng: np.random.Generator,
    num_groups: int,
    prompts_per_group: int,
    group_distribution: str,
    zipf_alpha: float,
) -> np.ndarray:
    """Each conversation's group, in group order (``"zipf"`` draws them from ``rng``)."""
    total = num_groups * prompts_per_group
    if group_distribution == "uniform":
        groups = np.repeat(np.arange(num_groups), prompts_per_group)
    else:
        w = 1.0 / np.arange(1, num_groups + 1, dtype=np.float64) ** zipf_alpha
        groups = np.sort(rng.choice(num_groups, size=total, p=w / w.sum()))
    return groups


def _conversation_states(
    rng: np.random.Generator, groups: np.ndarray, shape: tuple[int, int, int, float, int]
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Mapping[str, Any]]]:
    """Each conversation's index in its group and the generator state before its draws:
    ``(st_hi, st_lo, st_has, st_u, state0)``, the state's high and low 64 bits,
    ``has_uint32`` and ``uinteger`` per conversation, and the state before the first.

    Streaming: the conversations' questions are drawn in the eager order (before the
    shuffle), but only the generator state at each conversation's first draw is kept
    (a few bytes each); a conversation's tokens are drawn again from that state when it
    arrives, so the look-ahead is one conversation, not the whole workload."""
    total = len(groups)
    # One conversation per (group, index-in-group), in group order: keep the bit
    # generator's state before its draws, draw (to advance the stream) and drop them.
    bitgen = rng.bit_generator
    state0 = bitgen.state
    st_hi = np.empty(total, dtype=np.uint64)
    st_lo = np.empty(total, dtype=np.uint64)
    st_has = np.empty(total, dtype=np.uint8)
    st_u = np.empty(total, dtype=np.uint32)
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
        _conv_draws(rng, *shape)
    return index_in_group, (st_hi, st_lo, st_has, st_u, state0)


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
