# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""A request and its prompt key chain.

The prompt is summarised once, on arrival, as a chain of *cache keys*: one key per
*key unit* of ``key_tokens`` tokens (a multiple of ``page_size``). Equal key at
position ``i`` means equal prompt prefix through unit ``i``, so the prefix cache can
match with dict lookups and never re-hashes on an admission pass.

- From token ids: ``key_tokens == page_size`` and key ``i`` is xxh3-64 of unit ``i``'s
  token bytes seeded with key ``i - 1`` (a chained hash).
- From a trace's block hash ids (Mooncake: 512-token blocks, Bailian: 16-token blocks):
  ``key_tokens = lcm(page_size, block_size)`` and key ``i`` is xxh3-64 of unit ``i``'s
  block ids seeded with key ``i - 1``, so a key names its whole prefix whatever the
  trace's ids mean (chain-consistent ids or per-block content hashes).

NOTE: only *complete* units get a key. A partial last page or block is never shared.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

import xxhash

if TYPE_CHECKING:
    from prefillkit.cache.node import Node
    from prefillkit.cache.pages import Pending


class ReqStatus(Enum):
    WAITING = "waiting"
    PREFILLING = "prefilling"  # admitted, forward in flight (or mid-chunk)
    TRANSFERRING = "transferring"  # pd-prefill: KV being sent to decode
    DECODING = "decoding"  # colocated: in the decode batch
    FINISHED = "finished"
    REJECTED = "rejected"  # can never fit; recorded with a reason
    ABORTED = "aborted"  # dropped by the engine (Scheduler.abort)


def token_key_chain(tokens: Sequence[int], page_size: int) -> list[int]:
    """Chained xxh3-64 keys, one per complete page of ``tokens``."""
    n_units = len(tokens) // page_size
    if n_units == 0:
        return []
    return _chain(array("I", tokens[: n_units * page_size]).tobytes(), page_size * 4)


def _chain(raw: bytes, step: int) -> list[int]:
    """xxh3-64 of each ``step``-byte unit of ``raw``, seeded with the previous key."""
    keys: list[int] = []
    prev = 0
    h = xxhash.xxh3_64_intdigest
    for off in range(0, len(raw), step):
        prev = h(raw[off : off + step], prev)
        keys.append(prev)
    return keys


def block_key_chain(
    hash_ids: Sequence[int], input_len: int, block_size: int, key_tokens: int
) -> list[int]:
    """Chained keys for units of ``key_tokens`` tokens from a trace's per-block ids.

    ``key_tokens`` must be a multiple of ``block_size``. Key ``i`` is xxh3-64 of unit
    ``i``'s block ids seeded with key ``i - 1``; only units whose tokens are all inside
    ``input_len`` get a key. NOTE: chaining makes equal keys mean equal whole prefixes
    even for ids that name only a block's own content; for chain-consistent ids
    (Mooncake) it changes nothing: equal id chains give equal keys.
    """
    per = key_tokens // block_size
    n_units = min(input_len // key_tokens, len(hash_ids) // per)
    if n_units == 0:
        return []
    return _chain(_u64_bytes(hash_ids[: n_units * per]), per * 8)


def _u64_bytes(ids: Sequence[int]) -> bytes:
    """``ids`` as unsigned 64-bit integers (each taken mod 2**64), native byte order."""
    try:
        # NOTE: the common case, ids in [0, 2**64): the same bytes as the masked path.
        return array("Q", ids).tobytes()
    except (OverflowError, TypeError):
        mask = 0xFFFF_FFFF_FFFF_FFFF
        return array("Q", [int(x) & mask for x in ids]).tobytes()


def key_tokens_for_blocks(page_size: int, block_size: int) -> int:
    """Key-unit size for a block-hashed trace: the smallest multiple of both sizes."""
    return math.lcm(page_size, block_size)


#: Upstream's in-batch deprioritise threshold (tokens): LPM deprioritises a waiting
#: request that shares at least this many leading tokens with another waiting one.
IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD = 32

IN_BATCH_HEAD = "in_batch_head"
"""``Request.extra`` key of a prompt's in-batch head: :func:`in_batch_head_from_tokens`
or :func:`in_batch_head_from_blocks` of its first 32 tokens (absent: shorter prompt).
Set by :meth:`Request.from_tokens` and :meth:`Request.from_block_hashes`."""


class SessionTurn(NamedTuple):
    """Where a request sits in an agent session (a workload's, not the scheduler's).

    ``turn`` counts from 0 within ``session_id``; ``think_s`` is the time the agent
    spends between the previous turn's answer and this turn (0 for a first turn);
    ``last``: no later turn of the session follows (None: not known). A closed-loop
    replay sends turn ``k + 1`` only once turn ``k`` has answered (prefillkit.sim.closed_loop).
    """

    session_id: str
    turn: int
    think_s: float
    last: bool | None


SESSION = "session"
"""``Request.extra`` key of the request's :class:`SessionTurn` (absent: no session)."""


def session_of(req: Request) -> SessionTurn | None:
    """The request's :class:`SessionTurn`, or None."""
    turn = req.extra.get(SESSION)
    return turn if isinstance(turn, SessionTurn) else None


def in_batch_head_from_tokens(tokens: Sequence[int]) -> int | None:
    """Hash of the first 32 tokens (upstream's deprioritise threshold), or None."""
    t = IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD
    if len(tokens) < t:
        return None
    return xxhash.xxh3_64_intdigest(array("I", tokens[:t]).tobytes())


def in_batch_head_from_blocks(
    hash_ids: Sequence[int], input_len: int, block_size: int
) -> int | None:
    """Head of a block-hashed prompt: the ids of the blocks holding its first 32 tokens.

    NOTE: a block id names the block's whole content, so two prompts share their first
    32 tokens iff these ids are equal (blocks of >= 32 tokens: the first id)."""
    t = IN_BATCH_PREFIX_DEPRIORITIZE_THRESHOLD
    n = -(-t // block_size)
    if input_len < t or len(hash_ids) < n:
        return None
    return xxhash.xxh3_64_intdigest(_u64_bytes(hash_ids[:n]))


def _head_extra(head: int | None) -> dict[str, object]:
    return {} if head is None else {IN_BATCH_HEAD: head}


class ReqState:
    """The scheduler's state of one request (sched/ writes it; others only read it).

    Lengths are in tokens unless the name says pages or units.
    """

    __slots__ = (
        "affinity_skips",
        "computed_tokens",
        "device_prefix_len",
        "extend_input_len",
        "host_hit_len",
        "input_len",
        "loaded_tokens",
        "locked_node",
        "match_hint",
        "match_node",
        "max_match_units",
        "output_len",
        "owned_end_page",
        "owned_pages",
        "owned_start_page",
        "pending_pages",
        "prefix_len",
        "status",
        "waiting_passes",
    )

    def __init__(self, input_len: int, max_match_units: int) -> None:
        self.status: ReqStatus = ReqStatus.WAITING
        # Admission passes that ordered it while it waited (the policy zoo's LPM aging).
        self.waiting_passes: int = 0
        # Tokens to prefill: the prompt, plus the kept output after a retraction or
        # preemption (upstream refills origin_input_ids + output_ids).
        self.input_len: int = input_len
        # Units a match may cover: at least one prompt token is always computed.
        # NOTE: derived from input_len, again on a requeue (input_len grows then).
        self.max_match_units: int = max_match_units
        # Tokens already computed or cached for this request: its *true prefix*.
        self.computed_tokens: int = 0
        # Result of the last in-scan match.
        self.device_prefix_len: int = 0
        self.host_hit_len: int = 0
        # prefix_len after load-back planning (device prefix + loaded host tokens).
        self.prefix_len: int = 0
        self.loaded_tokens: int = 0
        self.extend_input_len: int = 0
        # Node whose root path this request holds a device lock on (None: no lock).
        self.locked_node: Node | None = None
        # Pages [owned_start_page, owned_end_page) are allocated to the request and not
        # (yet) in the cache. NOTE: owned_start_page is always key-unit aligned.
        self.owned_start_page: int = 0
        self.owned_end_page: int = 0
        # The page ids of those owned pages: a lane table (cache/pages.py) of sequence
        # pages [owned_start_page, owned_end_page). The pages before owned_start_page are
        # those of the locked prefix (locked_node's path): the two together are the
        # request's page table (the engine's req_to_token row). NOTE: empty ([]) while it
        # owns no pages.
        self.owned_pages: list[array[int]] = []
        # The pages the step in flight allocated (cache/pages.py ``Pending``): they join
        # owned_pages when its forward is done. NOTE: None outside a forward.
        self.pending_pages: Pending | None = None
        # Output tokens produced so far (colocated decode); kept across a requeue.
        self.output_len: int = 0
        # Passes in which affinity skipped (deferred) this request, at any queue
        # position; the K bound (affinity_max_head_defers: "head" in the knob's name is
        # historical) compares it.
        self.affinity_skips: int = 0
        # Last match length in units and the node holding its last unit (the root when
        # nothing matched): the next pass confirms the match from the node alone (see
        # sched/matching.py). NOTE: match_node is a node of the cache of the scheduler
        # the request was added to (add_request sets both).
        self.match_hint: int = 0
        self.match_node: Node | None = None

    @property
    def remaining_tokens(self) -> int:
        """Prompt tokens not yet computed."""
        return self.input_len - self.computed_tokens


class ReqMetrics:
    """What happened to one request, for the records (the scheduler notes each event as
    it happens; the collector and the summaries read them)."""

    __slots__ = (
        "device_hit_tokens",
        "finish_time",
        "first_scheduled_time",
        "first_token_time",
        "host_hit_tokens",
        "num_chunks",
        "preemptions",
        "reject_reason",
        "requeue_lost_s",
        "requeue_recomputed_tokens",
        "requeued_time",
        "retractions",
    )

    def __init__(self) -> None:
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.num_chunks: int = 0
        # Hits of the first scheduling (a requeued request's re-prefill does not move
        # them).
        self.device_hit_tokens: int = 0
        self.host_hit_tokens: int = 0
        self.reject_reason: str | None = None
        # Priority preemptions and decode retractions of this request (each requeues it).
        self.preemptions: int = 0
        self.retractions: int = 0
        # Tokens prefilled again after a requeue (prompt and kept output; chunks summed).
        self.requeue_recomputed_tokens: int = 0
        # Seconds from each requeue until its re-prefill completed (decoding resumes),
        # summed; requeued_time is the pending requeue's time (None: none pending).
        self.requeue_lost_s: float = 0.0
        self.requeued_time: float | None = None


class Request:
    """One request: what it is (set once, never changed: its id, arrival, prompt length
    and key chain, output budget, priority), plus ``state`` (the scheduler's,
    :class:`ReqState`) and ``metrics`` (the records', :class:`ReqMetrics`).

    NOTE: only ``state`` and ``metrics`` change after construction, and a closed-loop
    session turn's ``arrival_time`` before it arrives (sim/closed_loop.py);
    tests/test_request_parts.py checks that nothing else assigns these fields.
    """

    __slots__ = (
        "arrival_time",
        "extra",
        "ignore_eos",
        "key_tokens",
        "keys",
        "max_new_tokens",
        "metrics",
        "priority",
        "prompt_len",
        "rid",
        "state",
    )

    # NOTE: the constructor takes what a request is; ``input_len`` is the prompt's
    # length (``prompt_len``; the scheduler's ``state.input_len`` starts there).
    def __init__(
        self,
        rid: str,
        arrival_time: float,
        input_len: int,
        max_new_tokens: int,
        keys: list[int],
        key_tokens: int,
        priority: int = 0,
        ignore_eos: bool = False,
        extra: dict[str, object] | None = None,
    ) -> None:
        self.rid: str = rid
        self.arrival_time: float = arrival_time
        self.prompt_len: int = input_len
        self.max_new_tokens: int = max_new_tokens
        self.keys: list[int] = keys
        self.key_tokens: int = key_tokens
        self.priority: int = priority
        self.ignore_eos: bool = ignore_eos
        self.extra: dict[str, object] = {} if extra is None else extra
        self.state: ReqState = ReqState(input_len, min(len(keys), (input_len - 1) // key_tokens))
        self.metrics: ReqMetrics = ReqMetrics()

    def __repr__(self) -> str:
        return (
            f"Request({self.rid!r}, t={self.arrival_time:g}, prompt={self.prompt_len}, "
            f"{self.state.status._value_})"
        )

    @classmethod
    def from_tokens(
        cls,
        rid: str,
        tokens: Sequence[int],
        *,
        page_size: int,
        arrival_time: float = 0.0,
        max_new_tokens: int = 128,
        priority: int = 0,
        ignore_eos: bool = False,
    ) -> Request:
        """Build a request from token ids: one chained key per complete page, and the
        in-batch head (``extra[IN_BATCH_HEAD]``)."""
        return cls(
            rid=rid,
            arrival_time=arrival_time,
            input_len=len(tokens),
            max_new_tokens=max_new_tokens,
            keys=token_key_chain(tokens, page_size),
            key_tokens=page_size,
            priority=priority,
            ignore_eos=ignore_eos,
            extra=_head_extra(in_batch_head_from_tokens(tokens)),
        )

    @classmethod
    def from_block_hashes(
        cls,
        rid: str,
        hash_ids: Sequence[int],
        *,
        input_len: int,
        block_size: int,
        page_size: int,
        arrival_time: float = 0.0,
        max_new_tokens: int = 128,
        priority: int = 0,
        ignore_eos: bool = False,
    ) -> Request:
        """Build a request from a trace's per-block hash ids (chained into keys), and the
        in-batch head (``extra[IN_BATCH_HEAD]``)."""
        key_tokens = key_tokens_for_blocks(page_size, block_size)
        return cls(
            rid=rid,
            arrival_time=arrival_time,
            input_len=input_len,
            max_new_tokens=max_new_tokens,
            keys=block_key_chain(hash_ids, input_len, block_size, key_tokens),
            key_tokens=key_tokens,
            priority=priority,
            ignore_eos=ignore_eos,
            extra=_head_extra(in_batch_head_from_blocks(hash_ids, input_len, block_size)),
        )

    def reset_for_requeue(self, now: float | None = None) -> None:
        """Forget admission state (after preemption or retraction), keeping the output.

        As upstream keeps ``output_ids``: the re-prefill covers the prompt plus every
        output token so far (``input_len = prompt_len + output_len``) and then yields
        the next token; ``output_len`` does not go back. ``now``: the requeue time, from
        which ``metrics.requeue_lost_s`` counts until the re-prefill completes.
        """
        st = self.state
        st.status = ReqStatus.WAITING
        st.computed_tokens = 0
        st.device_prefix_len = 0
        st.host_hit_len = 0
        st.prefix_len = 0
        st.loaded_tokens = 0
        st.extend_input_len = 0
        st.input_len = self.prompt_len + st.output_len
        st.max_match_units = min(len(self.keys), (st.input_len - 1) // self.key_tokens)
        st.owned_start_page = 0
        st.owned_end_page = 0
        st.owned_pages = []
        st.pending_pages = None
        if now is not None and self.metrics.requeued_time is None:
            self.metrics.requeued_time = now


# --------------------------------------------------------------------------- key units
# NOTE: the scheduler's cache keys one unit of tokens, so every keyed request of a run
# has the same ``key_tokens``: the rule, for a list at once or a stream request by
# request; its callers say where the requests came from (a trace file, the engine).


class KeyUnitError(ValueError):
    """A keyed request whose key unit differs from the run's (one line)."""


class KeyUnitCheck:
    """The key unit of the keyed requests seen so far: the first one's, or ``expected``
    (the unit a run was built with, before any keyed request was seen)."""

    __slots__ = ("first", "unit")

    def __init__(self, expected: int | None = None) -> None:
        self.first: Request | None = None
        self.unit: int | None = expected

    def check(self, req: Request) -> None:
        """Note ``req``; ``KeyUnitError`` if it has keys of another unit."""
        if not req.keys:
            return
        if self.unit is None:
            self.first, self.unit = req, req.key_tokens
        elif req.key_tokens != self.unit:
            had = (
                f"request {self.first.rid!r} has {self.unit}"
                if self.first is not None
                else f"the run's key unit is {self.unit}"
            )
            raise KeyUnitError(
                f"request {req.rid!r} has key units of {req.key_tokens} tokens but {had}"
            )

    def check_all(self, requests: Iterable[Request]) -> KeyUnitCheck:
        """:meth:`check` each of ``requests``; ``self``."""
        for req in requests:
            self.check(req)
        return self
