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
from collections.abc import Sequence
from dataclasses import dataclass, field
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


@dataclass(slots=True, eq=False, init=False)
class Request:
    """One prefill request plus its per-pass admission state.

    Lengths are in tokens unless the name says pages or units.
    """

    rid: str
    arrival_time: float
    # Tokens to prefill: the prompt, plus the kept output after a retraction or
    # preemption (upstream refills origin_input_ids + output_ids). ``prompt_len`` is
    # the prompt alone.
    input_len: int
    max_new_tokens: int
    keys: list[int]
    key_tokens: int
    priority: int = 0
    ignore_eos: bool = False

    # ---- admission state (owned by the scheduler) ----
    status: ReqStatus = field(init=False, default=ReqStatus.WAITING)
    # Tokens already computed or cached for this request: its *true prefix*.
    computed_tokens: int = field(init=False, default=0)
    # Result of the last in-scan match.
    device_prefix_len: int = field(init=False, default=0)
    host_hit_len: int = field(init=False, default=0)
    # prefix_len after load-back planning (device prefix + loaded host tokens).
    prefix_len: int = field(init=False, default=0)
    loaded_tokens: int = field(init=False, default=0)
    extend_input_len: int = field(init=False, default=0)
    # Node whose root path this request holds a device lock on (None: no lock).
    locked_node: Node | None = field(init=False, default=None)
    # Pages [owned_start_page, owned_end_page) are allocated to the request and not
    # (yet) in the cache. NOTE: owned_start_page is always key-unit aligned.
    owned_start_page: int = field(init=False, default=0)
    owned_end_page: int = field(init=False, default=0)
    # The page ids of those owned pages: a lane table (cache/pages.py) of sequence pages
    # [owned_start_page, owned_end_page). The pages before owned_start_page are those of
    # the locked prefix (locked_node's path): the two together are the request's page
    # table (the engine's req_to_token row). NOTE: empty ([]) while it owns no pages.
    owned_pages: list[array[int]] = field(init=False, default_factory=list)
    # The pages the step in flight allocated (cache/pages.py ``Pending``): they join
    # owned_pages when its forward is done. NOTE: None outside a forward.
    pending_pages: Pending | None = field(init=False, default=None)
    # Output tokens produced so far (colocated decode); kept across a requeue.
    output_len: int = field(init=False, default=0)
    # Passes in which affinity skipped (deferred) this request, at any queue position;
    # the K bound (affinity_max_head_defers: "head" in the knob's name is historical)
    # compares it.
    affinity_skips: int = field(init=False, default=0)
    # Last match length in units and the node holding its last unit (the root when
    # nothing matched): the next pass confirms the match from the node alone (see
    # sched/matching.py). NOTE: match_node is a node of the cache of the scheduler the
    # request was added to (add_request sets both).
    match_hint: int = field(init=False, default=0)
    match_node: Node | None = field(init=False, default=None)

    # ---- metrics ----
    first_scheduled_time: float | None = field(init=False, default=None)
    first_token_time: float | None = field(init=False, default=None)
    finish_time: float | None = field(init=False, default=None)
    num_chunks: int = field(init=False, default=0)
    device_hit_tokens: int = field(init=False, default=0)
    host_hit_tokens: int = field(init=False, default=0)
    reject_reason: str | None = field(init=False, default=None)
    # Priority preemptions and decode retractions of this request (each requeues it).
    preemptions: int = field(init=False, default=0)
    retractions: int = field(init=False, default=0)
    # Tokens prefilled again after a requeue (prompt and kept output; chunks summed).
    requeue_recomputed_tokens: int = field(init=False, default=0)
    # Seconds from each requeue until its re-prefill completed (decoding resumes),
    # summed; requeued_time is the pending requeue's time (None: none pending).
    requeue_lost_s: float = field(init=False, default=0.0)
    requeued_time: float | None = field(init=False, default=None)
    extra: dict[str, object] = field(default_factory=dict)
    # Units a match may cover: at least one prompt token is always computed.
    # NOTE: derived in __init__ and again on a requeue (input_len grows then).
    max_match_units: int = field(init=False, default=0)
    # The prompt's length (input_len on arrival; never changes).
    prompt_len: int = field(init=False, default=0)

    # NOTE: written out so that the compiled build compiles it (the generated one stays
    # interpreted; see sched/buffer.py ReqShape). The constructor takes what a request
    # is; every state and metrics field starts at its value below.
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
        self.rid = rid
        self.arrival_time = arrival_time
        self.input_len = input_len
        self.max_new_tokens = max_new_tokens
        self.keys = keys
        self.key_tokens = key_tokens
        self.priority = priority
        self.ignore_eos = ignore_eos
        self.status = ReqStatus.WAITING
        self.computed_tokens = 0
        self.device_prefix_len = 0
        self.host_hit_len = 0
        self.prefix_len = 0
        self.loaded_tokens = 0
        self.extend_input_len = 0
        self.locked_node = None
        self.owned_start_page = 0
        self.owned_end_page = 0
        self.owned_pages = []
        self.pending_pages = None
        self.output_len = 0
        self.affinity_skips = 0
        self.match_hint = 0
        self.match_node = None
        self.first_scheduled_time = None
        self.first_token_time = None
        self.finish_time = None
        self.num_chunks = 0
        self.device_hit_tokens = 0
        self.host_hit_tokens = 0
        self.reject_reason = None
        self.preemptions = 0
        self.retractions = 0
        self.requeue_recomputed_tokens = 0
        self.requeue_lost_s = 0.0
        self.requeued_time = None
        self.extra = {} if extra is None else extra
        self.max_match_units = min(len(keys), (input_len - 1) // key_tokens)
        self.prompt_len = input_len

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

    @property
    def remaining_tokens(self) -> int:
        """Prompt tokens not yet computed."""
        return self.input_len - self.computed_tokens

    def reset_for_requeue(self, now: float | None = None) -> None:
        """Forget admission state (after preemption or retraction), keeping the output.

        As upstream keeps ``output_ids``: the re-prefill covers the prompt plus every
        output token so far (``input_len = prompt_len + output_len``) and then yields
        the next token; ``output_len`` does not go back. ``now``: the requeue time, from
        which ``requeue_lost_s`` counts until the re-prefill completes.
        """
        self.status = ReqStatus.WAITING
        self.computed_tokens = 0
        self.device_prefix_len = 0
        self.host_hit_len = 0
        self.prefix_len = 0
        self.loaded_tokens = 0
        self.extend_input_len = 0
        self.input_len = self.prompt_len + self.output_len
        self.max_match_units = min(len(self.keys), (self.input_len - 1) // self.key_tokens)
        self.owned_start_page = 0
        self.owned_end_page = 0
        self.owned_pages = []
        self.pending_pages = None
        if now is not None and self.requeued_time is None:
            self.requeued_time = now
