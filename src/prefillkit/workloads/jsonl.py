# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""prefillkit's own JSONL workload format, plus the line reader all JSONL loaders share
(a row's decoding and field readers: :mod:`prefillkit.workloads.json_row`).

Format
------
One JSON object per line, UTF-8, rows sorted by arrival (non-decreasing ``arrival_s``).
Blank lines are ignored. Fields:

============== ============== ========= ===============================================
field          type           required  meaning
============== ============== ========= ===============================================
``rid``        string         no        request id, unique in the file
                                        (default: ``"L<line number>"``)
``arrival_s``  number >= 0    yes       arrival time in seconds
``output_len`` integer >= 0   yes       tokens to generate
``priority``   integer        no        scheduling priority (default 0)
``ignore_eos`` boolean        no        generate exactly ``output_len`` tokens, as
                                        upstream's ``ignore_eos`` (default false)
``session_id`` string         no        the agent session this row is a turn of
``turn``       integer >= 0   with      the turn's number in its session, from 0;
                              session   a session's turns in file order, none missing
``think_s``    number >= 0    no        seconds between the previous turn's answer and
                                        this turn (default 0)
============== ============== ========= ===============================================

Rows with session fields replay closed-loop by default: a session's first turn arrives at
its ``arrival_s``, each later turn at its predecessor's answer + ``think_s`` (its
``arrival_s`` is then only the open-loop schedule, used with ``--open-loop``; see
``prefillkit.sim.closed_loop``).

and the prompt, given in exactly one of these forms:

- **tokens**: ``"tokens": [int, ...]`` -- the prompt's token ids (non-empty, each in
  ``[0, 2**32)``). The prompt length is ``len(tokens)``; an ``input_len`` field, if
  present, must equal it. Requests are hashed page by page on load.
- **block hashes**: ``"hash_ids": [int, ...]``, ``"block_size": int > 0`` and
  ``"input_len": int > 0`` -- per-block hash ids, as in the Mooncake and Bailian
  traces. Two prompts share a prefix through block ``i`` when their ids agree at every
  position up to ``i`` (keys are chained on load), so ids may be chain-consistent or
  hashes of each block's content alone. ``len(hash_ids)`` must equal
  ``ceil(input_len / block_size)``; the last block may be partial.
- **length only**: just ``"input_len": int > 0`` -- a prompt that shares nothing with
  any other request (for example converted from the Azure trace).

Integers are JSON integers (``true``/``false`` are not integers; ``2.0`` is accepted,
``2.5`` is not). ``NaN`` and ``Infinity`` are rejected, and so is a row (of any JSONL
trace format) nesting lists and objects more than 64 deep. Example::

    {"rid": "a", "arrival_s": 0.0, "output_len": 64, "tokens": [1, 2, 3, 4]}
    {"arrival_s": 0.5, "output_len": 8, "hash_ids": [0, 1, 2], "block_size": 512, "input_len": 1300}
    {"arrival_s": 1.25, "output_len": 32, "input_len": 900, "priority": 1}
    {"arrival_s": 1.5, "output_len": 256, "input_len": 300, "ignore_eos": true}

``write_jsonl`` writes records in this format; ``iter_jsonl`` reads it back.
"""

from __future__ import annotations

import codecs
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.json_row import (
    RowError,
    as_int,
    check_hash_len,
    get_int,
    get_int_list,
    get_opt_bool,
    get_opt_int,
    get_seconds,
    parse_json_object,
    show,
)
from prefillkit.workloads.record import TraceRecord
from prefillkit.workloads.sessions import SessionCheck, file_has_sessions, parse_session

#: A row's own decoding and field readers (``RowError``, ``parse_json_object``, ``get_int``,
#: ...) are :mod:`prefillkit.workloads.json_row`'s: the loaders import them from there.
__all__ = [
    "iter_jsonl",
    "record_to_json",
    "scan_last_turns",
    "stream_records",
    "write_jsonl",
]

PathLike = str | os.PathLike[str]
SkipList = list[tuple[int, str]]

_TOKEN_LIMIT = 2**32


# --------------------------------------------------------------------------- reading


def open_binary(path: PathLike) -> IO[bytes]:
    """Open ``path`` for binary reading, mapping OS errors to ``WorkloadError``."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise WorkloadError(path, None, "file not found") from None
    except IsADirectoryError:
        raise WorkloadError(path, None, "is a directory, not a trace file") from None
    except OSError as e:
        raise WorkloadError(path, None, f"cannot open: {e.strerror or e}") from None


def decode_lines(f: IO[bytes]) -> Iterator[tuple[int, str | RowError]]:
    """Yield ``(line number, text)`` per line, or a ``RowError`` for bad UTF-8."""
    for lineno, raw in enumerate(f, 1):
        if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield (
                lineno,
                RowError(f"invalid UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1}"),
            )


def stream_records(
    path: PathLike,
    parse_line: Callable[[int, str], TraceRecord | None],
    *,
    skipped: SkipList | None = None,
    on_accept: Callable[[TraceRecord], None] | None = None,
) -> Iterator[TraceRecord]:
    """Read ``path`` line by line and yield the records ``parse_line`` makes.

    ``parse_line(lineno, text)`` returns a record, None for a line that is not a request
    (blank line, CSV header), or raises ``RowError`` (or ``ValueError``) for a bad row.
    Rows whose arrival is earlier than the previous good row's are bad. With ``skipped``
    None the first bad row raises ``WorkloadError``; otherwise ``(line, reason)`` is
    appended to ``skipped`` and reading goes on. A file with no good row raises
    ``WorkloadError(path, None, "no requests ...")`` once it is exhausted. ``on_accept``
    sees each good record before it is yielded (a bad row never reaches it).
    """
    n_good = 0
    n_bad = 0
    prev = -math.inf
    with open_binary(path) as f:
        for lineno, text in decode_lines(f):
            try:
                if isinstance(text, RowError):
                    raise text
                rec = parse_line(lineno, text)
                if rec is None:
                    continue
                if rec.arrival_s < prev:
                    raise RowError(
                        f"time goes backwards: arrival {rec.arrival_s:g} s is before the "
                        f"previous row's {prev:g} s"
                    )
            except WorkloadError:
                raise
            except ValueError as e:
                if skipped is None:
                    raise WorkloadError(path, lineno, str(e)) from None
                skipped.append((lineno, " ".join(str(e).split())))
                n_bad += 1
                continue
            prev = rec.arrival_s
            n_good += 1
            if on_accept is not None:
                on_accept(rec)
            yield rec
    if n_good == 0:
        more = f" ({n_bad} bad rows skipped)" if n_bad else ""
        raise WorkloadError(path, None, f"no requests{more}")


# --------------------------------------------------------------------------- own format


def _parse_own(
    lineno: int, text: str, seen: set[str], sessions: SessionCheck
) -> TraceRecord | None:
    obj = parse_json_object(text)
    if obj is None:
        return None
    rid = _own_rid(obj, lineno, seen)
    arrival = get_seconds(obj, "arrival_s")
    output_len = get_int(obj, "output_len", min_value=0)
    priority = get_opt_int(obj, "priority", 0)
    ignore_eos = get_opt_bool(obj, "ignore_eos")
    input_len, hash_ids, block_size, tokens = _own_prompt(obj)
    session = parse_session(obj, RowError)
    if session is not None:
        sessions.check(session, RowError)
        session = sessions.mark(session)
    seen.add(rid)
    return TraceRecord(
        rid=rid,
        arrival_s=arrival,
        input_len=input_len,
        output_len=output_len,
        hash_ids=hash_ids,
        block_size=block_size,
        tokens=tokens,
        priority=priority,
        ignore_eos=ignore_eos,
        session=session,
    )


def _own_rid(obj: dict[str, Any], lineno: int, seen: set[str]) -> str:
    """The row's ``rid`` (default ``L<line number>``), not one of the ``seen`` ones."""
    rid_v = obj.get("rid")
    if rid_v is None:
        rid = f"L{lineno}"
    elif isinstance(rid_v, str) and rid_v:
        rid = rid_v
    else:
        raise RowError(f"field 'rid': expected a non-empty string, got {show(rid_v)}")
    if rid in seen:
        raise RowError(f"duplicate rid {rid[:40]!r}" + ("..." if len(rid) > 40 else ""))
    return rid


def _own_prompt(
    obj: dict[str, Any],
) -> tuple[int, tuple[int, ...] | None, int | None, tuple[int, ...] | None]:
    """The row's prompt as ``(input_len, hash_ids, block_size, tokens)``, from whichever of
    the three forms it gives (tokens, block hashes or length only)."""
    has_tokens = "tokens" in obj
    hash_keys = [k for k in ("hash_ids", "block_size") if k in obj]
    if has_tokens and hash_keys:
        raise RowError("give either 'tokens' or 'hash_ids'/'block_size'/'input_len', not both")
    if has_tokens:
        tokens = _own_tokens(obj)
        return len(tokens), None, None, tokens
    if hash_keys:
        hash_ids = get_int_list(obj, "hash_ids")
        block_size = get_int(obj, "block_size", min_value=1)
        input_len = get_int(obj, "input_len", min_value=1)
        check_hash_len(hash_ids, input_len, block_size)
        return input_len, hash_ids, block_size, None
    if "input_len" not in obj:
        raise RowError(
            "missing prompt: give 'tokens', or 'hash_ids' + 'block_size' + "
            "'input_len', or 'input_len'"
        )
    return get_int(obj, "input_len", min_value=1), None, None, None


def _own_tokens(obj: dict[str, Any]) -> tuple[int, ...]:
    """The row's ``tokens``: non-empty, each in ``[0, 2**32)``, as many as a stated
    ``input_len``."""
    tokens = get_int_list(obj, "tokens")
    if not tokens:
        raise RowError("field 'tokens': must not be empty")
    if min(tokens) < 0 or max(tokens) >= _TOKEN_LIMIT:
        raise RowError(f"field 'tokens': token ids must be in [0, {_TOKEN_LIMIT})")
    input_len = len(tokens)
    if obj.get("input_len") is not None:
        stated = as_int("input_len", obj["input_len"])
        if stated != input_len:
            raise RowError(f"field 'input_len' is {stated} but there are {input_len} tokens")
    return tokens


def iter_jsonl(path: PathLike, *, skipped: SkipList | None = None) -> Iterator[TraceRecord]:
    """Stream records from a file in prefillkit's JSONL format (see the module docstring).

    A file with session fields is read once first (:func:`scan_last_turns`: the same
    checks, so a bad row or an inconsistent session fails before any record is
    yielded) to mark each session's last turn."""
    last_turns = None
    if file_has_sessions(os.fspath(path)):
        last_turns = scan_last_turns(path, skipped=None if skipped is None else [])
    return _stream_own(path, SessionCheck(last_turns), skipped)


def _stream_own(
    path: PathLike, sessions: SessionCheck, skipped: SkipList | None
) -> Iterator[TraceRecord]:
    seen: set[str] = set()

    def accept(rec: TraceRecord) -> None:
        if rec.session is not None:
            sessions.accept(rec.session)

    return stream_records(
        path, lambda n, t: _parse_own(n, t, seen, sessions), skipped=skipped, on_accept=accept
    )


def scan_last_turns(path: PathLike, *, skipped: SkipList | None = None) -> dict[str, int]:
    """Read the file through (every row checked as :func:`iter_jsonl` checks it): each
    session's last turn. Raises ``WorkloadError`` on the first bad row unless
    ``skipped`` collects them."""
    sessions = SessionCheck()
    for _ in _stream_own(path, sessions, skipped):
        pass
    return sessions.last_seen


def record_to_json(rec: TraceRecord) -> dict[str, Any]:
    """The JSON object for ``rec`` in prefillkit's JSONL format."""
    obj: dict[str, Any] = {"rid": rec.rid, "arrival_s": rec.arrival_s, "output_len": rec.output_len}
    if rec.priority:
        obj["priority"] = rec.priority
    if rec.ignore_eos:
        obj["ignore_eos"] = True
    if rec.session is not None:
        obj["session_id"] = rec.session.session_id
        obj["turn"] = rec.session.turn
        obj["think_s"] = rec.session.think_s
    if rec.tokens is not None:
        obj["tokens"] = list(rec.tokens)
    elif rec.hash_ids is not None:
        obj["hash_ids"] = list(rec.hash_ids)
        obj["block_size"] = rec.block_size
        obj["input_len"] = rec.input_len
    else:
        obj["input_len"] = rec.input_len
    return obj


def write_jsonl(records: Iterable[TraceRecord], path: PathLike) -> int:
    """Write ``records`` to ``path`` in prefillkit's JSONL format; returns the row count."""
    from prefillkit.outfile import open_output

    n = 0
    with open_output(path) as f:
        for rec in records:
            f.write(json.dumps(record_to_json(rec), separators=(",", ":")))
            f.write("\n")
            n += 1
    return n
