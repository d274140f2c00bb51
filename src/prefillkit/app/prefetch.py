"""A streaming replay's requests, read or generated and keyed by a helper process.

Drawing a generated workload (interpreted code, one numpy scalar at a time) and hashing
each request's key chain (xxh3 per page) are about 15 % of an agentic replay's event
loop (benchmarks/RESULTS.md). When helpers are wanted (:mod:`prefillkit.helpers`),
:class:`RequestPrefetcher` forks a child that runs the workload's record iterator, builds
each request there (:func:`prefillkit.workloads.record.to_request`) and sends the
requests' constructor arguments over a pipe, a batch at a time; the parent builds the
same :class:`~prefillkit.request.Request` from them. The requests and their order are
those the loop would build itself; an error the iterator raises (a bad trace row: the
file and line) is raised in the parent when its iteration reaches it, after the requests
before it; the rows a trace reader skipped arrive with the batch they were read with.

The pipe's bounded buffer is the look-ahead: the child blocks once about one batch is
ahead, so memory stays that of a few hundred requests. A run that stops early (Ctrl-C)
kills the child: the requests not yet read are never generated.

The child ends with its parent: SIGKILL when the parent ends (Linux's
``PR_SET_PDEATHSIG``, :func:`prefillkit.helpers.die_with_parent`), and, should that not
come, a write into a pipe nobody reads fails (only the parent holds the read end) and
the parent's process id is checked between batches. Its stdout is ``/dev/null``: it
never holds open a pipe the run writes into (``prefillkit replay | cat``). Signals sent
to all of a run's processes (a terminal's Ctrl-C, ``timeout``'s SIGTERM, a job
scheduler's) are ignored: the parent stops the run and then the child.

NOTE: the child is forked, so it starts in a millisecond with the parent's state as it
is (the trace open, the generator's draws so far) and imports nothing. A fork is only
taken from a single-threaded process (:func:`can_fork`): a child forked from a
multi-threaded one may hang on a lock another thread held.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.util
import os
import pickle
import signal
import sys
import threading
from array import array
from collections.abc import Generator, Iterator
from multiprocessing.connection import Connection
from typing import Any

from prefillkit.helpers import HelperError, die_with_parent
from prefillkit.request import Request
from prefillkit.workloads.record import TraceRecord, to_request

__all__ = ["RequestPrefetcher", "can_fork", "request_args"]

#: Requests per message (about 100 KB pickled for agentic prompts of ~2,500 tokens).
_BATCH = 256
_PICKLE = pickle.HIGHEST_PROTOCOL
#: Signals the child ignores (the parent's: it stops the run, then the child).
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def request_args(req: Request) -> tuple[Any, ...]:
    """The arguments ``Request(*args)`` rebuilds ``req`` from, as it was built (a
    request's other fields are scheduler state, set from these in ``__init__``)."""
    return (req.rid, req.arrival_time, req.state.input_len, req.max_new_tokens, req.keys,
            req.key_tokens, req.priority, req.ignore_eos, req.extra)  # fmt: skip


def can_fork() -> bool:
    """Whether this process can fork a helper safely: Linux (macOS's system libraries are
    not fork-safe once loaded), and only one thread runs (every thread counts, numpy's
    BLAS workers too)."""
    if not sys.platform.startswith("linux"):
        return False
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    if threading.active_count() != 1:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc: only Python's own threads are known
        return True


class RequestPrefetcher:
    """Iterates the requests of ``records`` (keyed for ``page_size``), built in a forked
    child; ``skipped`` (the trace reader's skipped-rows list) fills as they arrive."""

    def __init__(
        self,
        records: Iterator[TraceRecord],
        page_size: int,
        skipped: list[tuple[int, str]],
    ) -> None:
        self.skipped = skipped
        # NOTE: what the parent buffered would be written twice (the child flushes too).
        sys.stdout.flush()
        sys.stderr.flush()
        ctx = multiprocessing.get_context("fork")
        conn, child_conn = ctx.Pipe(duplex=False)
        self._conn: Connection = conn
        self._proc = ctx.Process(
            target=_serve,
            args=(records, page_size, skipped, child_conn, conn, os.getpid()),
            name="prefillkit-workload",
            daemon=True,
        )
        # NOTE: the child starts with SIGINT and SIGTERM blocked, until it ignores them
        # (_serve): a signal to the whole process group (a terminal's Ctrl-C, timeout's
        # SIGTERM) stops the run, which then stops the child (SIGKILL, _stop); killed
        # by it, the child would cut a message in two. The parent gets a signal that
        # came meanwhile once they are unblocked, its stop of the child in place.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            self._proc.start()
            # NOTE: multiprocessing's exit hook terminates (SIGTERM: ignored) and joins
            # daemonic children after the finalizers of priority >= 0: this one kills it.
            self._stop = multiprocessing.util.Finalize(
                self, _stop, args=(self._proc, conn), exitpriority=0
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        child_conn.close()
        # The parent's copy of the iterator is the child's now: close it here.
        close = getattr(records, "close", None)
        if close is not None:
            close()
        self._it: Generator[Request, None, None] = self._requests()

    def __iter__(self) -> Iterator[Request]:
        return self

    def __next__(self) -> Request:
        return next(self._it)

    def _requests(self) -> Generator[Request, None, None]:
        try:
            while True:
                try:
                    message = pickle.loads(self._conn.recv_bytes())
                except (EOFError, OSError):  # OSError: the end came within a message
                    self._proc.join()
                    raise HelperError(
                        f"the workload process exited with code {self._proc.exitcode} "
                        "before the workload's end"
                    ) from None
                kind = message[0]
                if kind == "keyed":
                    self.skipped.extend(message[4])
                    keys = array("Q")
                    keys.frombytes(message[1])
                    offsets = message[2]
                    for i, (rid, at, il, mn, kt, pr, ie, ex) in enumerate(message[3]):
                        ks = keys[offsets[i] : offsets[i + 1]].tolist()
                        yield Request(rid, at, il, mn, ks, kt, pr, ie, ex)
                elif kind == "reqs":
                    self.skipped.extend(message[2])
                    for args in message[1]:
                        yield Request(*args)
                elif kind == "end":
                    self.skipped.extend(message[1])
                    return
                else:
                    self.skipped.extend(message[2])
                    raise message[1]
        finally:
            self._stop()

    def close(self) -> None:
        """Stop the child (if it is still reading ahead) and wait for it."""
        self._it.close()
        self._stop()


def _stop(proc: multiprocessing.process.BaseProcess, conn: Connection) -> None:
    """Kill the child (it ignores SIGTERM; it holds nothing to clean up) and reap it."""
    conn.close()
    if proc.is_alive():
        proc.kill()
    proc.join()


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles back as itself, else a ``ValueError`` (a ``RuntimeError``
    for anything else) with its message."""
    with contextlib.suppress(Exception):
        copy = pickle.loads(pickle.dumps(exc, protocol=_PICKLE))
        if type(copy) is type(exc) and str(copy) == str(exc):
            return exc
    kind = ValueError if isinstance(exc, ValueError) else RuntimeError
    return kind(str(exc))


def _message(batch: list[Request]) -> tuple[Any, ...]:
    """A batch as a message: ``("keyed", key bytes, offsets, other arguments)``, the keys
    of all its requests packed into one array of unsigned 64-bit ints (a pickled Python
    int of 64 bits costs a conversion each way); ``("reqs", arguments)`` if a key does
    not fit in 64 bits."""
    keys = array("Q")
    offsets = [0]
    rest = []
    try:
        for req in batch:
            keys.extend(req.keys)
            offsets.append(len(keys))
            rest.append((req.rid, req.arrival_time, req.state.input_len, req.max_new_tokens,
                         req.key_tokens, req.priority, req.ignore_eos, req.extra))  # fmt: skip
    except (OverflowError, TypeError):
        return ("reqs", [request_args(req) for req in batch])
    return ("keyed", keys.tobytes(), offsets, rest)


def _release_stdout() -> None:
    """Point this process's stdout at ``/dev/null`` (nothing in the child writes to it;
    the parent's stdout may be a pipe whose reader waits for its end)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)


def _serve(
    records: Iterator[TraceRecord],
    page_size: int,
    skipped: list[tuple[int, str]],
    conn: Connection,
    parent_end: Connection,
    parent_pid: int,
) -> None:
    """The child: build the requests, send them a batch at a time, then the end (or the
    error the records raised); stop quietly if the parent has gone."""
    for sig in _STOP_SIGNALS:  # NOTE: the parent's (module docstring)
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    # NOTE: the child dies with its parent (a kill -9 of the run must not leave it
    # blocked in a write, holding the run's stdout and stderr): SIGKILL on the parent's
    # death where Linux offers it, and the read end closed here so that a write to a
    # parent that has gone fails (EPIPE) instead of blocking.
    parent_end.close()
    die_with_parent(parent_pid)
    _release_stdout()
    # NOTE: what the child inherited stays out of its collector's generations: a pass
    # over it would cost time and write to every inherited object's header, copying
    # each page the child shares with the parent.
    gc.freeze()
    sent = len(skipped)  # NOTE: rows skipped before the fork are in the parent's list too
    batch: list[Request] = []

    def new_skipped() -> list[tuple[int, str]]:
        nonlocal sent
        rows = skipped[sent:]
        sent = len(skipped)
        return rows

    def send_batch() -> None:
        if os.getppid() != parent_pid:  # NOTE: the parent is gone (no prctl here)
            raise BrokenPipeError
        conn.send_bytes(pickle.dumps((*_message(batch), new_skipped()), _PICKLE))
        batch.clear()

    try:
        try:
            for rec in records:
                batch.append(to_request(rec, page_size))
                if len(batch) >= _BATCH:
                    send_batch()
            tail: tuple[Any, ...] = ("end", [])
        except Exception as exc:
            tail = ("error", _portable(exc), [])
        if batch:
            send_batch()
        tail = (*tail[:-1], new_skipped())
        conn.send_bytes(pickle.dumps(tail, _PICKLE))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the parent stopped reading (a run stopped early)
    finally:
        conn.close()
