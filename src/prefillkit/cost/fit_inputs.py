"""The measured batches :mod:`prefillkit.cost.fit` fits the cost model to, read from files
(:func:`load_batches`; ``prefillkit calibrate FILE...``).

Input formats (detected per file from its first non-blank line that is not a ``#``
comment):

**Batch CSV** — a header row naming at least the columns ``batch_id, prefix_len,
extend_len, loaded_tokens, seconds`` (any order, extra columns ignored), then one row per
request of a batch: ``batch_id`` any non-empty string (rows of one batch need not be
adjacent), ``prefix_len`` the cached context the forward reads (device prefix + loaded
tokens, or a chunk's true prefix), ``extend_len`` the tokens computed, ``loaded_tokens``
the part of ``prefix_len`` loaded back from the host tier in this forward (``0 <=
loaded_tokens <= prefix_len``), all integers ``>= 0``; ``seconds`` the batch's measured
forward time (finite, ``> 0``, the same on every row of the batch). Blank lines and lines
starting with ``#`` are skipped. prefillkit's own ``batches.csv`` holds per-batch totals
only and is not accepted.

**SGLang server log** — lines ``[YYYY-MM-DD HH:MM:SS(.fff) <scheduler>] Prefill batch.
#new-seq: N, #new-token: T, #cached-token: C, ...`` (``<scheduler>`` e.g. ``TP0`` or
``DP0 TP0``; lines without a bracketed timestamp, such as tracebacks, are ignored). Each
line becomes one batch of ``N`` requests sharing ``T`` and ``C`` evenly (remainders to
the first requests), no load-back (the line does not say). **Approximation**: the
forward time is the gap to the next timestamped line of the same scheduler (any line:
the next prefill, a decode batch, ...), which includes scheduling and whatever else the
scheduler did in between; the last prefill line of each scheduler has no successor and
is dropped, and so is a zero gap. SGLang's default timestamps have one-second
resolution, which makes the gaps meaningless for short forwards: log with milliseconds.

Errors are :class:`FitInputError` (a ``ValueError``), one line naming the file and line.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from prefillkit.sched.buffer import ReqShape

__all__ = [
    "CSV_COLUMNS",
    "FitInputError",
    "MeasuredBatch",
    "load_batches",
    "parse_batch_csv",
    "parse_sglang_log",
]

CSV_COLUMNS: tuple[str, ...] = ("batch_id", "prefix_len", "extend_len", "loaded_tokens", "seconds")


class FitInputError(ValueError):
    """Bad calibration input: one line, naming the file and line."""


@dataclass(frozen=True, slots=True)
class MeasuredBatch:
    """One measured forward: its requests' shapes and the seconds it took."""

    shapes: tuple[ReqShape, ...]
    seconds: float
    source: str  # "file:line" of its (first) row


def _int_field(value: str, name: str, where: str) -> int:
    try:
        out = int(value.strip())
    except ValueError:
        raise FitInputError(f"{where}: {name} must be an integer >= 0, got {value!r}") from None
    if out < 0:
        raise FitInputError(f"{where}: {name} must be an integer >= 0, got {value!r}")
    return out


def _csv_header(path: Path, lines: list[tuple[int, str]]) -> tuple[int, dict[str, int]]:
    """The header's field count and the column of each of :data:`CSV_COLUMNS`."""
    if not lines:
        raise FitInputError(f"{path}: empty batch CSV")
    header_no, header_line = lines[0]
    header = [h.strip() for h in next(csv.reader([header_line]))]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise FitInputError(
            f"{path}:{header_no}: batch CSV header lacks {', '.join(missing)} "
            f"(needs {', '.join(CSV_COLUMNS)})"
        )
    return len(header), {c: header.index(c) for c in CSV_COLUMNS}


def _csv_row(
    cells: list[str], n_fields: int, col: dict[str, int], where: str
) -> tuple[str, ReqShape, float]:
    """One request row of a batch CSV: its batch id, its shape and its batch's seconds."""
    if len(cells) != n_fields:
        raise FitInputError(f"{where}: expected {n_fields} fields, got {len(cells)}")
    bid = cells[col["batch_id"]].strip()
    if not bid:
        raise FitInputError(f"{where}: empty batch_id")
    p = _int_field(cells[col["prefix_len"]], "prefix_len", where)
    e = _int_field(cells[col["extend_len"]], "extend_len", where)
    ld = _int_field(cells[col["loaded_tokens"]], "loaded_tokens", where)
    if ld > p:
        raise FitInputError(f"{where}: loaded_tokens {ld} exceeds prefix_len {p}")
    raw = cells[col["seconds"]].strip()
    try:
        sec = float(raw)
    except ValueError:
        sec = math.nan
    if not (math.isfinite(sec) and sec > 0.0):
        raise FitInputError(f"{where}: seconds must be a finite number > 0, got {raw!r}")
    return bid, ReqShape(p, e, ld), sec


def parse_batch_csv(path: Path) -> list[MeasuredBatch]:
    """Batches of a batch CSV (module docstring); :class:`FitInputError` on bad rows."""
    shapes: dict[str, list[ReqShape]] = {}
    seconds: dict[str, float] = {}
    first: dict[str, str] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        lines = [(i, ln) for i, ln in enumerate(fh, 1) if ln.strip() and not ln.startswith("#")]
    n_fields, col = _csv_header(path, lines)
    for line_no, line in lines[1:]:
        where = f"{path}:{line_no}"
        bid, shape, sec = _csv_row(next(csv.reader([line])), n_fields, col, where)
        if bid in seconds and seconds[bid] != sec:
            raise FitInputError(
                f"{where}: batch {bid!r} has seconds {sec} here but {seconds[bid]} at {first[bid]}"
            )
        shapes.setdefault(bid, []).append(shape)
        seconds[bid] = sec
        first.setdefault(bid, where)
    if not shapes:
        raise FitInputError(f"{path}: batch CSV has a header but no rows")
    return [MeasuredBatch(tuple(shapes[b]), seconds[b], first[b]) for b in shapes]


_LOG_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?)(?P<who>[^\]]*)\]\s?(?P<msg>.*)$"
)
_PREFILL = re.compile(
    r"Prefill batch[^.]*\.\s*#new-seq:\s*(?P<n>\d+),\s*#new-token:\s*(?P<t>\d+),"
    r"\s*#cached-token:\s*(?P<c>\d+)"
)


def _split(total: int, n: int) -> list[int]:
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def _prefill_shapes(msg: str, where: str) -> tuple[ReqShape, ...]:
    """The requests of one ``Prefill batch`` log message: ``N`` requests sharing the new
    and the cached tokens evenly (remainders to the first requests)."""
    pm = _PREFILL.search(msg)
    if pm is None:
        raise FitInputError(
            f"{where}: unknown Prefill batch format (expected '#new-seq: N, "
            "#new-token: T, #cached-token: C')"
        )
    n, t, c = int(pm["n"]), int(pm["t"]), int(pm["c"])
    if n < 1:
        raise FitInputError(f"{where}: #new-seq must be >= 1, got {n}")
    return tuple(ReqShape(p, e) for p, e in zip(_split(c, n), _split(t, n), strict=True))


def parse_sglang_log(path: Path) -> list[MeasuredBatch]:
    """Batches of an SGLang server log (module docstring: the gap approximation)."""
    pending: dict[str, tuple[datetime, tuple[ReqShape, ...], str]] = {}
    out: list[MeasuredBatch] = []
    seen = False
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line_no, raw in enumerate(fh, 1):
            m = _LOG_PREFIX.match(raw.rstrip("\n"))
            if m is None:
                if "Prefill batch" in raw:
                    raise FitInputError(
                        f"{path}:{line_no}: 'Prefill batch' line without a "
                        "'[YYYY-MM-DD HH:MM:SS scheduler]' prefix"
                    )
                continue
            seen = True
            where = f"{path}:{line_no}"
            ts = datetime.fromisoformat(m["ts"].replace(",", "."))
            who = m["who"].strip()
            prev = pending.pop(who, None)
            if prev is not None:
                gap = (ts - prev[0]).total_seconds()
                if gap > 0.0:
                    out.append(MeasuredBatch(prev[1], gap, prev[2]))
            msg = m["msg"]
            if "Prefill batch" in msg:
                pending[who] = (ts, _prefill_shapes(msg, where), where)
    if not seen:
        raise FitInputError(f"{path}:1: no timestamped SGLang log lines")
    return out


def load_batches(path: Path) -> list[MeasuredBatch]:
    """Batches of one file, its format detected from its first meaningful line."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = next(
            ((i, ln) for i, ln in enumerate(fh, 1) if ln.strip() and not ln.startswith("#")),
            None,
        )
    if first is None:
        raise FitInputError(f"{path}:1: empty file")
    line_no, line = first
    cols = {c.strip() for c in line.split(",")}
    if "batch_id" in cols:
        return parse_batch_csv(path)
    if _LOG_PREFIX.match(line.rstrip("\n")):
        return parse_sglang_log(path)
    if {"forward_s", "batch"} & cols or "extend_tokens" in cols:
        raise FitInputError(
            f"{path}:{line_no}: looks like prefillkit's batches.csv (per-batch totals only); "
            f"give a batch CSV with columns {', '.join(CSV_COLUMNS)}"
        )
    raise FitInputError(
        f"{path}:{line_no}: unknown format: expected a batch CSV header "
        f"({', '.join(CSV_COLUMNS)}) or SGLang log lines '[YYYY-MM-DD HH:MM:SS TP0] ...'"
    )
