# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""One row of a JSON trace: decoded (:func:`parse_json_object`), then read field by field.

Shared by every JSONL loader. Each field reader reads one field of a parsed row (a
``dict``) as the format wants it, or raises :class:`RowError` with a one-line reason
naming the field; the line reader (:func:`prefillkit.workloads.jsonl.stream_records`)
turns that into a ``WorkloadError`` or a skipped row.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

__all__ = [
    "MAX_JSON_DEPTH",
    "RowError",
    "as_int",
    "as_number",
    "check_hash_len",
    "get_int",
    "get_int_list",
    "get_opt_bool",
    "get_opt_int",
    "get_seconds",
    "json_too_deep",
    "need",
    "parse_json_object",
    "pick",
    "show",
]

_INT64 = 2**63


class RowError(ValueError):
    """One row of a trace is bad; the reader turns it into a ``WorkloadError`` or a skip."""


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
    except ValueError as big:  # an integer longer than Python's digit limit
        reason = str(big).split(":", 1)[0]
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
