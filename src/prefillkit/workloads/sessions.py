"""Session fields of a JSONL trace: parsed, checked for consistency, last turns found.

A row that is a turn of an agent session carries ``session_id`` (a non-empty string),
``turn`` (an integer >= 0, counting from 0 in each session) and optionally ``think_s``
(seconds >= 0 the agent thinks between the previous turn's answer and this turn;
default 0). A session's turns must appear in the file in turn order with none missing:
turn 0 first, then 1, 2, ... (rows are sorted by arrival, so each turn's scheduled
arrival is at or after its predecessor's). A row that breaks this is a bad row naming
the session and the turns.

A closed-loop replay needs to know a session's last turn (it then stops waiting for
another): :func:`scan_last_turns` reads the file once before the replay, with the same
checks, and the reader marks each session's last turn from it (``SessionTurn.last``).
The scan runs only for a file with session fields (a byte search for ``"session_id"``
first), so other traces are read once, as before.

Memory: one entry per session seen (its last turn number), dropped when the replay
reads that session's last turn.
"""

from __future__ import annotations

import math
from typing import Any

from prefillkit.request import SessionTurn

__all__ = ["SessionCheck", "file_has_sessions", "parse_session"]

_KEYS = ("session_id", "turn", "think_s")


def _short(value: object) -> str:
    """``repr(value)`` cut to 40 characters for a message (a session id may be long)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_session(obj: dict[str, Any], errors: type[ValueError]) -> SessionTurn | None:
    """The row's session fields as a :class:`SessionTurn` (``last`` None: not known), or
    None when it has none; ``errors`` is the exception class for a bad field."""
    if all(obj.get(k) is None for k in _KEYS):
        return None
    sid = obj.get("session_id")
    if not isinstance(sid, str) or not sid:
        if sid is None:
            raise errors("field 'turn'/'think_s' needs a 'session_id'")
        raise errors(f"field 'session_id': expected a non-empty string, got {_short(sid)}")
    turn = obj.get("turn")
    if turn is None:
        raise errors(f"session {_short(sid)}: missing field 'turn' (0 for the session's first)")
    if type(turn) is float and turn.is_integer():
        turn = int(turn)
    if type(turn) is int and turn >= 2**63:
        raise errors(f"field 'turn': number too large, got {_short(turn)}")
    if type(turn) is not int or turn < 0:
        raise errors(f"field 'turn': expected an integer >= 0, got {_short(turn)}")
    think = obj.get("think_s", 0.0)
    if think is None:
        think = 0.0
    try:  # NOTE: math.isfinite of an integer beyond a float's range raises OverflowError
        bad = type(think) not in (int, float) or not math.isfinite(think) or think < 0
    except OverflowError:
        bad = True
    if bad:
        raise errors(f"field 'think_s': expected a number >= 0, got {_short(think)}")
    return SessionTurn(sid, turn, float(think), None)


class SessionCheck:
    """Checks that each session's turns come in order, none missing.

    :meth:`check` raises for a row that breaks the order (before the row is accepted);
    :meth:`accept` records an accepted row. ``last_turns`` (from :func:`scan_last_turns`)
    marks each session's last turn: :meth:`mark` returns the turn with ``last`` set.
    """

    __slots__ = ("_last_seen", "last_turns")

    def __init__(self, last_turns: dict[str, int] | None = None) -> None:
        self._last_seen: dict[str, int] = {}
        self.last_turns = last_turns

    def check(self, session: SessionTurn, errors: type[ValueError]) -> None:
        """Raise ``errors`` if ``session`` is not the next turn of its session."""
        sid, turn = session.session_id, session.turn
        prev = self._last_seen.get(sid)
        if prev is None:
            if turn != 0:
                raise errors(
                    f"session {_short(sid)} starts at turn {turn}: turn 0 is missing "
                    "(turns count from 0, in file order)"
                )
        elif turn <= prev:
            raise errors(f"turn {turn} of session {_short(sid)} comes after its turn {prev}")
        elif turn != prev + 1:
            raise errors(
                f"turn {turn} of session {_short(sid)} follows its turn {prev}: turn "
                f"{prev + 1} is missing"
            )

    def accept(self, session: SessionTurn) -> None:
        """Record ``session`` as its session's latest turn; a marked last turn ends the
        session (its entries are dropped: nothing of it follows)."""
        sid = session.session_id
        if session.last:
            self._last_seen.pop(sid, None)
            if self.last_turns is not None:
                self.last_turns.pop(sid, None)
        else:
            self._last_seen[sid] = session.turn

    def mark(self, session: SessionTurn) -> SessionTurn:
        """``session`` with ``last`` set from ``last_turns`` (unchanged without them)."""
        if self.last_turns is None:
            return session
        return session._replace(
            last=self.last_turns.get(session.session_id, session.turn) == session.turn
        )

    @property
    def last_seen(self) -> dict[str, int]:
        """Session -> its last accepted turn (a scan's result)."""
        return self._last_seen


def file_has_sessions(path: str, chunk: int = 1 << 20) -> bool:
    """Whether the file mentions ``"session_id"`` anywhere (a byte search, no parsing)."""
    needle = b'"session_id"'
    tail = b""
    try:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                if needle in tail + block[: len(needle)] or needle in block:
                    return True
                tail = block[-len(needle) :]
    except OSError:
        return False  # the reader opens it again and names the problem
    return False
