# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""One trace request as read from a file or made by a generator, and its ``Request``."""

from __future__ import annotations

from dataclasses import dataclass

from prefillkit.request import SESSION, Request, SessionTurn

__all__ = ["TraceRecord", "to_request"]


@dataclass(frozen=True, slots=True, init=False)
class TraceRecord:
    """A request of a workload, before it becomes a scheduler ``Request``.

    The prompt is described by at most one of:

    - ``hash_ids`` + ``block_size``: chain-consistent per-block hash ids
      (``len(hash_ids) == ceil(input_len / block_size)``; the last block may be partial);
    - ``tokens``: the prompt's token ids (``len(tokens) == input_len``).

    With neither, the request shares nothing with any other request.
    """

    rid: str
    arrival_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] | None
    block_size: int | None
    tokens: tuple[int, ...] | None
    priority: int = 0
    # Generate exactly output_len tokens (upstream's sampling param ignore_eos): the
    # decode reservation counts it at ratio 1.0, and --enable-ignore-eos-admission
    # applies upstream's full-output admission rule to it.
    ignore_eos: bool = False
    # The agent session this request is a turn of (None: not part of one); a
    # closed-loop replay times turn k + 1 from turn k's answer (sim/closed_loop.py).
    session: SessionTurn | None = None

    # NOTE: written out so that the compiled build compiles it (see sched/buffer.py
    # ReqShape).
    def __init__(
        self,
        rid: str,
        arrival_s: float,
        input_len: int,
        output_len: int,
        hash_ids: tuple[int, ...] | None,
        block_size: int | None,
        tokens: tuple[int, ...] | None,
        priority: int = 0,
        ignore_eos: bool = False,
        session: SessionTurn | None = None,
    ) -> None:
        object.__setattr__(self, "rid", rid)
        object.__setattr__(self, "arrival_s", arrival_s)
        object.__setattr__(self, "input_len", input_len)
        object.__setattr__(self, "output_len", output_len)
        object.__setattr__(self, "hash_ids", hash_ids)
        object.__setattr__(self, "block_size", block_size)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "ignore_eos", ignore_eos)
        object.__setattr__(self, "session", session)
        self._check()

    def _check(self) -> None:
        if self.input_len <= 0:
            raise ValueError(f"{self.rid}: input_len must be > 0, got {self.input_len}")
        if self.output_len < 0:
            raise ValueError(f"{self.rid}: output_len must be >= 0, got {self.output_len}")
        if self.hash_ids is not None and self.tokens is not None:
            raise ValueError(f"{self.rid}: give hash_ids or tokens, not both")
        if (self.hash_ids is None) != (self.block_size is None):
            raise ValueError(f"{self.rid}: hash_ids and block_size go together")
        if self.block_size is not None and self.block_size <= 0:
            raise ValueError(f"{self.rid}: block_size must be > 0, got {self.block_size}")
        if self.session is not None:
            _check_session(self.rid, self.session)
        if self.tokens is not None and len(self.tokens) != self.input_len:
            raise ValueError(
                f"{self.rid}: {len(self.tokens)} tokens but input_len is {self.input_len}"
            )

    def at(self, arrival_s: float) -> TraceRecord:
        """This record arriving at ``arrival_s``: ``dataclasses.replace(self,
        arrival_s=...)`` spelled out, which the compiled build compiles."""
        return TraceRecord(
            self.rid,
            arrival_s,
            self.input_len,
            self.output_len,
            self.hash_ids,
            self.block_size,
            self.tokens,
            self.priority,
            self.ignore_eos,
            self.session,
        )

    @property
    def num_blocks(self) -> int | None:
        """Blocks of the prompt (the last may be partial), or None without hash ids."""
        return None if self.hash_ids is None else len(self.hash_ids)


def _check_session(rid: str, session: SessionTurn) -> None:
    if not session.session_id:
        raise ValueError(f"{rid}: session_id must be a non-empty string")
    if session.turn < 0:
        raise ValueError(f"{rid}: turn must be >= 0, got {session.turn}")
    if not (session.think_s >= 0 and session.think_s < float("inf")):
        raise ValueError(f"{rid}: think_s must be finite and >= 0, got {session.think_s}")


def to_request(rec: TraceRecord, page_size: int) -> Request:
    """Build the scheduler ``Request`` for ``rec``; its key chain (and in-batch head) is
    computed here, once; its session turn goes to ``extra[SESSION]``."""
    req = _keyed_request(rec, page_size)
    if rec.session is not None:
        req.extra[SESSION] = rec.session
    return req


def _keyed_request(rec: TraceRecord, page_size: int) -> Request:
    if rec.hash_ids is not None:
        assert rec.block_size is not None
        return Request.from_block_hashes(
            rec.rid,
            rec.hash_ids,
            input_len=rec.input_len,
            block_size=rec.block_size,
            page_size=page_size,
            arrival_time=rec.arrival_s,
            max_new_tokens=rec.output_len,
            priority=rec.priority,
            ignore_eos=rec.ignore_eos,
        )
    if rec.tokens is not None:
        return Request.from_tokens(
            rec.rid,
            rec.tokens,
            page_size=page_size,
            arrival_time=rec.arrival_s,
            max_new_tokens=rec.output_len,
            priority=rec.priority,
            ignore_eos=rec.ignore_eos,
        )
    return Request(
        rid=rec.rid,
        arrival_time=rec.arrival_s,
        input_len=rec.input_len,
        max_new_tokens=rec.output_len,
        keys=[],
        key_tokens=page_size,
        priority=rec.priority,
        ignore_eos=rec.ignore_eos,
    )
