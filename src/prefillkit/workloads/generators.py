"""Seeded synthetic workload generators (``numpy.random.default_rng(seed)``).

- ``generated_shared_prefix``: SGLang ``bench_serving --dataset-name
  generated-shared-prefix`` semantics, with token ids.
- ``multi_turn_agentic``: agent sessions whose context grows turn by turn, with
  chain-consistent block hash ids.

Both return ``TraceRecord`` lists sorted by arrival; the same arguments and seed always
give identical records.
"""

from __future__ import annotations

import math
from itertools import count

import numpy as np

from prefillkit.workloads.record import TraceRecord

__all__ = ["generated_shared_prefix", "multi_turn_agentic"]


def _draw_len(rng: np.random.Generator, full: int, range_ratio: float) -> int:
    """A length in ``[max(1, floor(full * range_ratio)), full]`` (``full`` if ratio is 1)."""
    if range_ratio >= 1.0:
        return full
    lo = max(1, math.floor(full * range_ratio))
    return int(rng.integers(lo, full + 1))


def _poisson_arrivals(rng: np.random.Generator, n: int, rate: float) -> list[float]:
    """``n`` Poisson arrivals at ``rate`` per second, the first at 0 (inf: all at 0)."""
    if math.isinf(rate):
        return [0.0] * n
    gaps = rng.exponential(1.0 / rate, size=max(n - 1, 0))
    return [0.0, *np.cumsum(gaps).tolist()][:n]


def generated_shared_prefix(
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
) -> list[TraceRecord]:
    """Shared-prefix workload in the style of SGLang's ``generated-shared-prefix``.

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
    carry its arrival time (listed in turn order); a replayer that needs turn ``k`` to
    wait for turn ``k - 1`` has to enforce that itself.

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

    # One conversation per (group, index-in-group), in group order.
    convs: list[tuple[str, int, list[np.ndarray], list[int]]] = []
    per_group: dict[int, int] = {}
    for g in groups.tolist():
        idx = per_group.get(g, 0)
        per_group[g] = idx + 1
        questions = [
            rng.integers(0, vocab_size, size=_draw_len(rng, question_len, range_ratio))
            for _ in range(num_turns)
        ]
        outs = [_draw_len(rng, output_len, range_ratio) for _ in range(num_turns)]
        convs.append((f"gsp-g{g}-p{idx}", g, questions, outs))
    order = np.arange(total) if ordered else rng.permutation(total)
    arrivals = _poisson_arrivals(rng, total, request_rate)

    records: list[TraceRecord] = []
    for conv_i, t in zip(order.tolist(), arrivals, strict=True):
        rid, g, questions, outs = convs[conv_i]
        parts: list[np.ndarray] = [sys_prompts[g]]
        for turn in range(num_turns):
            parts.append(questions[turn])
            tokens = tuple(np.concatenate(parts).tolist())
            records.append(
                TraceRecord(
                    rid=rid if num_turns == 1 else f"{rid}-t{turn}",
                    arrival_s=float(t),
                    input_len=len(tokens),
                    output_len=outs[turn],
                    hash_ids=None,
                    block_size=None,
                    tokens=tokens,
                )
            )
            if turn + 1 < num_turns:  # the answer becomes part of the next prompt
                parts.append(rng.integers(0, vocab_size, size=outs[turn]))
    return records


def _check_range(name: str, r: tuple[float, float], low: float) -> None:
    if len(r) != 2 or not (low <= r[0] <= r[1]):
        raise ValueError(f"{name} must be (lo, hi) with {low} <= lo <= hi, got {r}")


def multi_turn_agentic(
    num_sessions: int = 64,
    turns_per_session: tuple[int, int] = (4, 12),
    system_prompt_len: int = 8192,
    num_system_prompts: int = 1,
    first_user_len: tuple[int, int] = (256, 2048),
    turn_append_len: tuple[int, int] = (128, 1024),
    output_len: tuple[int, int] = (64, 512),
    think_time_s: tuple[float, float] = (1.0, 10.0),
    session_arrival_rate: float = 2.0,
    block_size: int = 64,
    seed: int = 0,
    prefill_tokens_per_s: float = 10_000.0,
    decode_tokens_per_s: float = 50.0,
) -> list[TraceRecord]:
    """Agentic multi-turn sessions whose context grows turn by turn.

    Sessions start as a Poisson process at ``session_arrival_rate`` (the first at 0) and
    have a number of turns drawn from ``turns_per_session`` (inclusive). Turn 1's prompt
    is a system prompt (``system_prompt_len`` tokens, shared by all sessions, or by
    ``num_system_prompts`` groups assigned round robin) plus a user message
    (``first_user_len``). Turn ``k + 1``'s prompt is turn ``k``'s prompt + turn ``k``'s
    output (``output_len``) + an append (``turn_append_len``: tool output or user text),
    so it has the whole previous context as a prefix. Integer ranges are inclusive and
    drawn uniformly.

    Turn ``k + 1`` arrives at turn ``k``'s arrival + a nominal service time
    (``new prompt tokens / prefill_tokens_per_s + output / decode_tokens_per_s``) + a think
    time drawn from ``think_time_s``.

    Prompts are described by chain-consistent block hash ids (``block_size`` tokens per
    block): every new block content gets a fresh integer; a session's turn reuses the ids
    of its context's complete blocks, and complete system-prompt blocks are shared. A
    partial block (the prompt's tail, or a block straddling the system prompt and the
    user message) is new content each time and gets a fresh id. Records are sorted by
    arrival (ties keep session order).

    Hit rate: by the traces README rule (a block hits iff its prefix appeared in an
    earlier request's prompt) each later turn misses the blocks holding the previous
    output and the append, plus the re-opened partial tail block. With the defaults the
    ideal block-level hit rate is about 92 % (about 89 % with a 4,096-token system
    prompt).
    """
    if num_sessions < 1:
        raise ValueError("num_sessions must be >= 1")
    _check_range("turns_per_session", turns_per_session, 1)
    _check_range("first_user_len", first_user_len, 1)
    _check_range("turn_append_len", turn_append_len, 1)
    _check_range("output_len", output_len, 0)
    _check_range("think_time_s", think_time_s, 0.0)
    if system_prompt_len < 0 or num_system_prompts < 1 or block_size < 1:
        raise ValueError("need system_prompt_len >= 0, num_system_prompts >= 1, block_size >= 1")
    if not session_arrival_rate > 0 or not prefill_tokens_per_s > 0:
        raise ValueError("session_arrival_rate and prefill_tokens_per_s must be > 0")
    if not decode_tokens_per_s > 0:
        raise ValueError("decode_tokens_per_s must be > 0")

    rng = np.random.default_rng(seed)
    fresh = count()
    n_sys_blocks = system_prompt_len // block_size
    sys_ids = [[next(fresh) for _ in range(n_sys_blocks)] for _ in range(num_system_prompts)]
    starts = _poisson_arrivals(rng, num_sessions, session_arrival_rate)

    def ri(r: tuple[int, int]) -> int:
        return int(rng.integers(r[0], r[1] + 1))

    rows: list[tuple[float, int, int, TraceRecord]] = []
    for s in range(num_sessions):
        n_turns = ri(turns_per_session)
        # Ids of the complete blocks of the session's context (prompt + outputs so far).
        ctx_ids = list(sys_ids[s % num_system_prompts])
        ctx_len = system_prompt_len
        t = starts[s]
        new_tokens = ri(first_user_len)
        for k in range(n_turns):
            prompt_len = ctx_len + new_tokens
            n_full = prompt_len // block_size
            while len(ctx_ids) < n_full:
                ctx_ids.append(next(fresh))
            hash_ids = ctx_ids[:n_full]
            if prompt_len % block_size:
                hash_ids = [*hash_ids, next(fresh)]  # partial tail: new content
            out = ri(output_len)
            rec = TraceRecord(
                rid=f"agent-s{s}-t{k}",
                arrival_s=float(t),
                input_len=prompt_len,
                output_len=out,
                hash_ids=tuple(hash_ids),
                block_size=block_size,
                tokens=None,
            )
            rows.append((rec.arrival_s, s, k, rec))
            # The output joins the context; the next turn appends more.
            ctx_len = prompt_len + out
            while len(ctx_ids) < ctx_len // block_size:
                ctx_ids.append(next(fresh))
            service = new_tokens / prefill_tokens_per_s + out / decode_tokens_per_s
            t += service + float(rng.uniform(think_time_s[0], think_time_s[1]))
            new_tokens = ri(turn_append_len)
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return [r[3] for r in rows]
