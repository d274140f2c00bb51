"""Agent sessions in the event loop: closed-loop arrivals and the early-turn count.

A request may be a turn of an agent session (``prefillkit.request.SessionTurn`` in its
``extra``). A real agent sends turn ``k + 1`` only once turn ``k`` has answered, then
thinks: so in a **closed-loop** replay (the default) a session's first turn arrives at
its scheduled time and each later turn at its predecessor's answer + its ``think_s``;
its scheduled time is ignored. An **open-loop** replay (``--open-loop``) sends every turn
at its scheduled time, as a trace replayer without sessions does.

Either way the gate counts the later turns that arrive before their predecessor has
answered (``early_turns``: 0 closed-loop by construction). When a turn has "answered" is
the engine's call (sim/engine.py): the simulated finish of a colocated run, else its
first token plus its output at the decode rate.

:class:`SessionGate` sits between the workload's request stream (sorted by scheduled
arrival) and the loop. It iterates the requests that arrive at their scheduled time
(first turns; every request open-loop) and parks the later turns it reads until their
predecessor answers (:meth:`SessionGate.answered` returns the successor, its
``arrival_time`` set). A successor not read yet when its predecessor answers is read
ahead for; the first turns met on the way wait in order.

Memory: per live session (begun, last turn not yet answered) its latest answer and the
later turns read before they could be sent (the stream runs ahead of a slow deployment
by at most the turns scheduled meanwhile). A turn whose ``last`` is unknown (None) keeps
its session live, and its answer reads ahead for a successor to the stream's end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from prefillkit.request import Request, session_of

__all__ = ["SessionGate"]


class _Live:
    """A session begun in this replay: its first turn read, its latest answer."""

    __slots__ = ("answered_at", "answered_turn", "first_turn")

    def __init__(self, first_turn: int) -> None:
        self.first_turn = first_turn
        self.answered_turn = -1
        self.answered_at = float("inf")


class SessionGate:
    """The arrivals of a replay whose requests may be session turns (see the module
    docstring). Iterating it yields the requests that arrive at their own
    ``arrival_time``, in order."""

    def __init__(self, source: Iterator[Request], *, closed_loop: bool) -> None:
        self._source = source
        self.closed_loop = closed_loop
        # First turns read while looking for a successor: they arrive in order.
        self._ahead: deque[Request] = deque()
        # Closed-loop: later turns read before their predecessor answered.
        self._parked: dict[str, deque[Request]] = {}
        # Sessions whose first turn was read and whose last turn has not answered.
        self._live: dict[str, _Live] = {}
        self.sessions = 0  # sessions begun (first turns arrived)
        self.later_turns = 0  # later turns arrived
        self.early_turns = 0  # ... before their predecessor's answer

    # ---------------------------------------------------------------- arrivals
    def __iter__(self) -> Iterator[Request]:
        return self

    def __next__(self) -> Request:
        """The next request to arrive at its own scheduled time. Mutates: parks the
        later turns it reads (closed-loop)."""
        if self._ahead:
            return self._ahead.popleft()
        while True:
            req = next(self._source)
            if self._at_schedule(req):
                return req

    def _at_schedule(self, req: Request) -> bool:
        """Whether ``req`` arrives at its scheduled time (a first turn, or open-loop);
        else (a closed-loop later turn) it is parked with its session. Mutates: a first
        turn begins its session."""
        st = session_of(req)
        if st is None:
            return True
        if st.session_id not in self._live:
            self._live[st.session_id] = _Live(st.turn)
            return True
        if not self.closed_loop:
            return True
        self._parked.setdefault(st.session_id, deque()).append(req)
        return False

    def arrived(self, req: Request) -> None:
        """Count ``req``'s arrival (at its ``arrival_time``). Mutates: the counts."""
        st = session_of(req)
        if st is None:
            return
        live = self._live.get(st.session_id)
        if live is None or live.first_turn == st.turn:
            self.sessions += 1
            return
        self.later_turns += 1
        if live.answered_turn != st.turn - 1 or live.answered_at > req.arrival_time:
            self.early_turns += 1

    def answered(self, req: Request, t: float) -> Request | None:
        """``req`` has answered at ``t``: closed-loop, its session's next turn with its
        ``arrival_time`` set to ``t`` + its think time (None: no next turn, or
        open-loop). Mutates: the session's entry (dropped after its last turn)."""
        st = session_of(req)
        if st is None:
            return None
        sid = st.session_id
        live = self._live.get(sid)
        if live is None or st.turn <= live.answered_turn:
            return None  # its session is over, or this turn answered already (requeued)
        if st.last:
            del self._live[sid]
            self._parked.pop(sid, None)
            return None
        live.answered_turn, live.answered_at = st.turn, t
        if not self.closed_loop:
            return None
        parked = self._parked.get(sid)
        if parked:
            succ: Request | None = parked.popleft()
            if not parked:
                del self._parked[sid]
        else:
            succ = self._read_ahead_for(sid)
        if succ is None:
            del self._live[sid]  # cut by the window or the cap: it ends here
            return None
        nxt = session_of(succ)
        assert nxt is not None
        # NOTE: the one write to a request's own fields after construction: a turn's
        # arrival is its predecessor's answer + think time, set before it arrives.
        succ.arrival_time = t + nxt.think_s
        return succ

    def metrics(self, answer_rate: float | None, at_finish: bool) -> dict[str, object]:
        """The summary's session counts and how answers were timed (``answer_rate``: the
        stated rate; ``at_finish``: the simulated decode finish); nothing for a workload
        without sessions."""
        if not self.sessions:
            return {}
        if answer_rate is not None:
            answer = f"first token + output at {answer_rate:g} tokens/s"
        elif at_finish:
            answer = "simulated decode finish"
        else:
            answer = "first token + output at the batch-1 decode step"
        return {
            "session_loop": "closed" if self.closed_loop else "open",
            "session_answer": answer,
            "sessions": self.sessions,
            "later_turns": self.later_turns,
            "early_turns": self.early_turns,
        }

    def _read_ahead_for(self, sid: str) -> Request | None:
        """Read the stream until the next turn of ``sid`` (None: the stream ended);
        the first turns met wait in order, other later turns are parked."""
        for req in self._source:
            st = session_of(req)
            if st is not None and st.session_id == sid:
                return req
            if self._at_schedule(req):
                self._ahead.append(req)
        return None
