# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""prefillkit's own JSONL workload format, plus the line reader all JSONL loaders share.

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
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.record import TraceRecord
from prefillkit.workloads.sessions import SessionCheck, file_has_sessions, parse_session

__all__ = [
    "RowError",
    "iter_jsonl",
    "record_to_json",
    "scan_last_turns",
    "stream_records",
    "write_jsonl",
]

PathLike = str | os.PathLike[str]
SkipList = list[tuple[int, str]]

_TOKEN_LIMIT = 2**32
_INT64 = 2**63


class RowError(ValueError):
    """One row of a trace is bad; the reader turns it into a ``WorkloadError`` or a skip."""


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


def _reject_constant(name: str) -> Any:
    raise RowError(f"non-finite number {name}")


#: ``json.loads(text, parse_constant=_reject_constant)`` builds this decoder per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)

#: Deepest nesting of lists and objects a row may have (a valid row has 2: the object and
#: its ``hash_ids`` or ``tokens`` list). Deeper rows are refused before decoding: the
#: decoder recurses once per level and a row nested 100,000 deep would overflow it.
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")
_TOO_DEEP = f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels of lists and objects)"


def json_too_deep(text: str) -> bool:
    """Whether ``text`` nests ``[`` / ``{`` deeper than :data:`MAX_JSON_DEPTH` (brackets
    inside strings left out)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # the common case: no scan
        return False
    steps = (1 if b in "[{" else -1 for b in _JSON_BRACKET.findall(_JSON_STRING.sub("", text)))
    return max(itertools.accumulate(steps, initial=0)) > MAX_JSON_DEPTH


def parse_json_object(text: str) -> dict[str, Any] | None:
    """Parse one JSONL line; None for a blank line. Rejects NaN/Infinity, non-objects and
    rows nested deeper than :data:`MAX_JSON_DEPTH`."""
    if not text.strip():
        return None
    # The line's own terminator is not part of the row: with it, an error at the end of a
    # truncated row would be placed at column 1 of a line after it.
    text = text.rstrip("\r\n")
    if json_too_deep(text):
        raise RowError(_TOO_DEEP)
    try:
        if text.startswith("\ufeff"):  # what json.loads checks before decoding
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        obj = _DECODER.decode(text)
    except json.JSONDecodeError as e:
        # Columns count characters from 1 (the row is one line: pos + 1 is its column).
        reason = e.msg.removesuffix(" at")
        reason = reason[:1].lower() + reason[1:]
        raise RowError(f"invalid JSON ({reason} at column {e.pos + 1})") from None
    except RowError:
        raise
    except RecursionError:
        raise RowError(_TOO_DEEP) from None
    except ValueError as e:  # an integer longer than Python's digit limit
        reason = str(e).split(":", 1)[0]
        raise RowError(f"invalid JSON: number too large ({reason})") from None
    if not isinstance(obj, dict):
        raise RowError(f"expected a JSON object, got {_json_type(obj)}")
    return obj


# --------------------------------------------------------------------------- fields


def _json_type(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def show(v: object) -> str:
    """A JSON value for a message: its JSON text, cut to 40 characters."""
    s = json.dumps(v) if not isinstance(v, float) or math.isfinite(v) else repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def as_int(key: str, v: object) -> int:
    """``v`` as an int: a JSON integer or an integral finite float; never a bool.
    At most 64 bits: lengths and timestamps beyond that are mistakes, not requests."""
    if type(v) is int or (type(v) is float and math.isfinite(v) and v.is_integer()):
        if not -_INT64 <= v < _INT64:
            raise RowError(f"field '{key}': number too large, got {show(v)}")
        return int(v)
    if type(v) is float and not math.isfinite(v):
        raise RowError(f"field '{key}': non-finite number {v!r}")
    raise RowError(f"field '{key}': expected an integer, got {_json_type(v)} {show(v)}")


def as_number(key: str, v: object) -> float:
    """``v`` as a finite float (int or float; never a bool)."""
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            raise RowError(f"field '{key}': number too large, got {show(v)}") from None
    if type(v) is float:
        if not math.isfinite(v):
            raise RowError(f"field '{key}': non-finite number {v!r}")
        return v
    raise RowError(f"field '{key}': expected a number, got {_json_type(v)} {show(v)}")


def pick(obj: dict[str, Any], *keys: str) -> tuple[str, Any] | None:
    """The first of ``keys`` present in ``obj`` as ``(key, value)``, else None."""
    for k in keys:
        if k in obj:
            return k, obj[k]
    return None


def need(obj: dict[str, Any], *keys: str) -> tuple[str, Any]:
    """Like ``pick`` but a missing field is a bad row."""
    got = pick(obj, *keys)
    if got is None:
        names = " or ".join(f"'{k}'" for k in keys)
        raise RowError(f"missing field {names}")
    return got


def get_int(obj: dict[str, Any], *keys: str, min_value: int | None = None) -> int:
    """A required integer field (first of ``keys`` present), at least ``min_value``."""
    key, v = need(obj, *keys)
    n = as_int(key, v)
    if min_value is not None and n < min_value:
        what = "positive" if min_value == 1 else f">= {min_value}"
        raise RowError(f"field '{key}': must be {what}, got {n}")
    return n


def get_opt_int(obj: dict[str, Any], key: str, default: int) -> int:
    """An optional integer field (``null`` counts as absent)."""
    v = obj.get(key)
    return default if v is None else as_int(key, v)


def get_opt_bool(obj: dict[str, Any], key: str) -> bool:
    """An optional JSON boolean field (``null`` counts as absent, i.e. false); ``0``/``1``
    or ``"true"`` are bad rows, not booleans."""
    v = obj.get(key)
    if v is None:
        return False
    if type(v) is bool:
        return v
    raise RowError(f"field '{key}': expected true or false, got {_json_type(v)} {show(v)}")


def get_seconds(obj: dict[str, Any], *keys: str, scale: float = 1.0) -> float:
    """A required non-negative finite time field, times ``scale``."""
    key, v = need(obj, *keys)
    t = as_number(key, v)
    if t < 0:
        raise RowError(f"field '{key}': must be >= 0, got {show(v)}")
    return t * scale


def get_int_list(obj: dict[str, Any], key: str) -> tuple[int, ...]:
    """A required list of integers."""
    v = obj.get(key)
    if v is None:
        raise RowError(f"missing field '{key}'")
    if not isinstance(v, list):
        raise RowError(f"field '{key}': expected a list of integers, got {_json_type(v)}")
    if all(type(x) is int for x in v):
        return tuple(v)
    out: list[int] = []
    for i, x in enumerate(v):
        try:
            out.append(as_int(key, x))
        except RowError:
            raise RowError(
                f"field '{key}': item {i} is {_json_type(x)} {show(x)}, not an integer"
            ) from None
    return tuple(out)


def check_hash_len(hash_ids: tuple[int, ...], input_len: int, block_size: int) -> None:
    """``len(hash_ids)`` must be ``ceil(input_len / block_size)``."""
    want = -(-input_len // block_size)
    if len(hash_ids) != want:
        raise RowError(
            f"{len(hash_ids)} hash ids for input length {input_len}: expected "
            f"ceil({input_len} / {block_size}) = {want}"
        )


# --------------------------------------------------------------------------- own format


def _parse_own(
    lineno: int, text: str, seen: set[str], sessions: SessionCheck
) -> TraceRecord | None:
    obj = parse_json_object(text)
    if obj is None:
        return None
    rid_v = obj.get("rid")
    if rid_v is None:
        rid = f"L{lineno}"
    elif isinstance(rid_v, str) and rid_v:
        rid = rid_v
    else:
        raise RowError(f"field 'rid': expected a non-empty string, got {show(rid_v)}")
    if rid in seen:
        raise RowError(f"duplicate rid {rid[:40]!r}" + ("..." if len(rid) > 40 else ""))
    arrival = get_seconds(obj, "arrival_s")
    output_len = get_int(obj, "output_len", min_value=0)
    priority = get_opt_int(obj, "priority", 0)
    ignore_eos = get_opt_bool(obj, "ignore_eos")
    has_tokens = "tokens" in obj
    hash_keys = [k for k in ("hash_ids", "block_size") if k in obj]
    if has_tokens and hash_keys:
        raise RowError("give either 'tokens' or 'hash_ids'/'block_size'/'input_len', not both")
    hash_ids: tuple[int, ...] | None = None
    block_size: int | None = None
    tokens: tuple[int, ...] | None = None
    if has_tokens:
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
    elif hash_keys:
        hash_ids = get_int_list(obj, "hash_ids")
        block_size = get_int(obj, "block_size", min_value=1)
        input_len = get_int(obj, "input_len", min_value=1)
        check_hash_len(hash_ids, input_len, block_size)
    else:
        if "input_len" not in obj:
            raise RowError(
                "missing prompt: give 'tokens', or 'hash_ids' + 'block_size' + "
                "'input_len', or 'input_len'"
            )
        input_len = get_int(obj, "input_len", min_value=1)
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
