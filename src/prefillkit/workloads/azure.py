"""Streaming loader for the Azure LLM inference trace 2023 (Splitwise) CSV files.

CSV with a header row ``TIMESTAMP,ContextTokens,GeneratedTokens`` (columns may come in
any order; extra columns are ignored)::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,374,44

- ``TIMESTAMP``: wall-clock time ``YYYY-MM-DD HH:MM:SS[.fffffff]`` (up to 9 fractional
  digits, no time zone). Arrivals are seconds relative to the first good row, computed in
  integer nanoseconds so the 7 fractional digits are kept exactly.
- ``ContextTokens``: prompt tokens (> 0); ``GeneratedTokens``: output tokens (>= 0).
- ``ignore_eos`` (optional column, not in the published files): ``true``/``false`` (or
  ``1``/``0``, any case; an empty cell is false) -- generate exactly ``GeneratedTokens``,
  as upstream's ``ignore_eos`` sampling parameter.

The trace has no prefix information: every request shares nothing (no hash ids, no
tokens). Request ids are ``"L<line number>"`` (the header is line 1).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from datetime import datetime

from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.json_row import RowError
from prefillkit.workloads.jsonl import PathLike, SkipList, stream_records
from prefillkit.workloads.record import TraceRecord

__all__ = ["AZURE_COLUMNS", "iter_azure", "parse_azure_timestamp_ns"]

AZURE_COLUMNS: tuple[str, str, str] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
IGNORE_EOS_COLUMN = "ignore_eos"
_BOOLS = {"true": True, "1": True, "false": False, "0": False, "": False}

_TS = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?", re.ASCII)
_UINT = re.compile(r"\d+", re.ASCII)
_EPOCH = datetime(1970, 1, 1)


def parse_azure_timestamp_ns(text: str) -> int:
    """Nanoseconds since 1970-01-01 (naive) for ``2023-11-16 18:15:46.6805900``."""
    m = _TS.fullmatch(text.strip())
    if m is None:
        raise RowError(
            f"column 'TIMESTAMP': expected 'YYYY-MM-DD HH:MM:SS.fffffff', got {text[:40]!r}"
        )
    y, mo, d, h, mi, s, frac = m.groups()
    try:
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s))
    except ValueError as e:
        raise RowError(f"column 'TIMESTAMP': {e} in {text[:40]!r}") from None
    delta = dt - _EPOCH
    whole_s = delta.days * 86_400 + delta.seconds
    frac_ns = int((frac or "0").ljust(9, "0"))
    return whole_s * 1_000_000_000 + frac_ns


def _count(col: str, text: str, min_value: int) -> int:
    t = text.strip()
    what = "a positive" if min_value == 1 else "a non-negative"
    if not _UINT.fullmatch(t):
        raise RowError(f"column '{col}': expected {what} integer, got {text[:40]!r}")
    # At most 64 bits, as the JSON readers: a longer count is a mistake, not a request
    # (and past 4,300 digits int() itself refuses it).
    if len(t) > 19 or int(t) >= 2**63:
        shown = t if len(t) <= 24 else t[:21] + "..."
        raise RowError(f"column '{col}': number too large, got {shown}")
    if int(t) < min_value:
        raise RowError(f"column '{col}': expected {what} integer, got {text[:40]!r}")
    return int(t)


def _flag(col: str, text: str) -> bool:
    v = _BOOLS.get(text.strip().lower())
    if v is None:
        raise RowError(f"column '{col}': expected true, false, 1 or 0, got {text[:40]!r}")
    return v


class _AzureParser:
    def __init__(self, path: PathLike) -> None:
        self.path = path
        self.index: tuple[int, int, int] | None = None
        self.ignore_eos_index: int | None = None
        self.width = 0
        self.first_ns: int | None = None

    def header(self, lineno: int, cells: list[str]) -> None:
        names = [c.strip() for c in cells]
        expected = ",".join(AZURE_COLUMNS)
        if names and _TS.fullmatch(names[0]):
            raise WorkloadError(
                self.path, lineno, f"missing CSV header: expected columns {expected}"
            )
        missing = [c for c in AZURE_COLUMNS if c not in names]
        if missing:
            got = repr(",".join(names))
            raise WorkloadError(
                self.path,
                lineno,
                f"wrong CSV columns {got if len(got) <= 80 else got[:77] + '...'}: expected "
                f"columns {expected} (missing {', '.join(missing)})",
            )
        ts, ctx, gen = (names.index(c) for c in AZURE_COLUMNS)
        self.index = (ts, ctx, gen)
        if IGNORE_EOS_COLUMN in names:
            self.ignore_eos_index = names.index(IGNORE_EOS_COLUMN)
        self.width = len(names)

    def __call__(self, lineno: int, text: str) -> TraceRecord | None:
        if not text.strip():
            return None
        try:
            cells = next(csv.reader([text], strict=True))  # an unclosed quote is an error
        except csv.Error as e:
            raise RowError(f"bad CSV: {e}") from None
        if self.index is None:
            self.header(lineno, cells)
            return None
        if len(cells) != self.width:
            raise RowError(f"expected {self.width} CSV fields, got {len(cells)}")
        ts_i, ctx_i, gen_i = self.index
        ns = parse_azure_timestamp_ns(cells[ts_i])
        input_len = _count(AZURE_COLUMNS[1], cells[ctx_i], 1)
        output_len = _count(AZURE_COLUMNS[2], cells[gen_i], 0)
        ie_i = self.ignore_eos_index
        ignore_eos = False if ie_i is None else _flag(IGNORE_EOS_COLUMN, cells[ie_i])
        if self.first_ns is None:
            self.first_ns = ns
        return TraceRecord(
            rid=f"L{lineno}",
            arrival_s=(ns - self.first_ns) / 1e9,
            input_len=input_len,
            output_len=output_len,
            hash_ids=None,
            block_size=None,
            tokens=None,
            ignore_eos=ignore_eos,
        )


def iter_azure(path: PathLike, *, skipped: SkipList | None = None) -> Iterator[TraceRecord]:
    """Stream ``TraceRecord`` s from an Azure LLM trace CSV, line by line.

    A missing or wrong header always raises ``WorkloadError`` (line 1); bad data rows
    raise, or with ``skipped`` given are appended to it as ``(line, reason)``.
    """
    return stream_records(path, _AzureParser(path), skipped=skipped)
