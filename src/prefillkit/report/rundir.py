"""Read a simulator run directory into memory.

A run directory holds ``summary.json``, ``requests.csv`` and ``batches.csv`` (written by
the simulator). :func:`load_run` parses them into a :class:`RunData`: the summary as a
plain dict and each CSV as a dict of numpy column arrays. Numeric columns become float
arrays with ``NaN`` for empty cells (for example the TTFT of a rejected request), text
columns (``rid``, ``status``, ...) become string arrays. Columns the reader does not know
are kept; known columns missing from a file are filled with ``NaN`` / empty strings so
that consumers can index them unconditionally.

Problems are reported as one-line :class:`ValueError` messages naming the offending file.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prefillkit.records.metrics import BATCH_COLUMNS, REQUEST_COLUMNS
from prefillkit.text import one_line

__all__ = [
    "BATCH_COLUMNS",
    "REQUEST_COLUMNS",
    "RunData",
    "load_run",
]

SUMMARY_FILE = "summary.json"
REQUESTS_FILE = "requests.csv"
BATCHES_FILE = "batches.csv"

# NOTE: the column sets are the simulator's (one definition, in records.metrics).

# Columns that are always text, even when every value happens to look like a number.
_TEXT_COLUMNS = frozenset(
    {
        "rid",
        "status",
        "reject_reason",
        "lead_class",
        "closed_by",
        "cache_class",
        "batch_ids",
        "rids",
    }
)
# Columns a requests.csv must have for the report to mean anything.
_REQUIRED_REQUEST_COLUMNS = ("rid", "arrival_s", "ttft_s", "status")
_REQUIRED_BATCH_COLUMNS = ("start_s", "size")
_BOOL_WORDS = {"true": 1.0, "false": 0.0, "yes": 1.0, "no": 0.0}

Columns = dict[str, np.ndarray]


@dataclass
class RunData:
    """One simulator run: summary dict plus column arrays of its two CSV files."""

    name: str
    summary: dict[str, Any]
    requests: Columns
    batches: Columns
    path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> dict[str, Any]:
        cfg = self.summary.get("config")
        return cfg if isinstance(cfg, dict) else {}

    @property
    def workload(self) -> dict[str, Any]:
        wl = self.summary.get("workload")
        return wl if isinstance(wl, dict) else {}

    @property
    def metrics(self) -> dict[str, Any]:
        m = self.summary.get("metrics")
        return m if isinstance(m, dict) else {}

    @property
    def partial(self) -> bool:
        return bool(self.summary.get("partial", False))

    @property
    def num_requests(self) -> int:
        return _num_rows(self.requests)

    @property
    def num_batches(self) -> int:
        return _num_rows(self.batches)

    def metric(self, key: str) -> float | None:
        """A summary metric as a finite float, or ``None`` when absent, null or not numeric."""
        return as_float(self.metrics.get(key))

    def finished_mask(self) -> np.ndarray:
        """Boolean mask of requests with status ``finished`` and a finite TTFT."""
        status = self.requests.get("status")
        ttft = self.requests.get("ttft_s")
        if status is None or ttft is None or len(status) == 0:
            return np.zeros(0, dtype=bool)
        return (status == "finished") & np.isfinite(ttft)

    def finished_ttft(self) -> np.ndarray:
        """TTFT (seconds) of the finished requests, in file order."""
        if self.num_requests == 0:
            return np.zeros(0, dtype=float)
        return self.requests["ttft_s"][self.finished_mask()]


def as_float(value: Any) -> float | None:
    """``value`` as a finite float; ``None`` for null, booleans-as-text, NaN or non-numbers."""
    if value is None or isinstance(value, str):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _num_rows(cols: Columns) -> int:
    for arr in cols.values():
        return len(arr)
    return 0


def load_run(path: str | Path) -> RunData:
    """Load the run directory at ``path``; raises a one-line ``ValueError`` on any problem."""
    root = Path(path)
    if not root.exists():
        raise ValueError(f"run directory not found: {root}")
    if not root.is_dir():
        raise ValueError(f"not a run directory (expected a folder): {root}")
    summary = _read_summary(root / SUMMARY_FILE)
    _check_manifest(root, summary)
    requests = _read_csv(root / REQUESTS_FILE, REQUEST_COLUMNS, _REQUIRED_REQUEST_COLUMNS)
    batches = _read_csv(root / BATCHES_FILE, BATCH_COLUMNS, _REQUIRED_BATCH_COLUMNS)
    raw_name = summary.get("name")
    name = str(raw_name) if raw_name not in (None, "") else root.name
    return RunData(name=name, summary=summary, requests=requests, batches=batches, path=root)


def _check_manifest(root: Path, summary: dict[str, Any]) -> None:
    """The CSVs must be the ones ``summary.json``'s manifest names (``"files"``: byte size
    and SHA-256, written last by :func:`prefillkit.records.output.write_run`); a folder whose
    files do not match was interrupted while being written. Older run folders without a
    manifest are accepted as they are."""
    files = summary.get("files")
    if files is None:
        return
    if not isinstance(files, dict):
        raise ValueError(f"corrupt {SUMMARY_FILE} ('files' must be an object): {root}")
    for name, entry in files.items():
        path = root / str(name)
        if not isinstance(entry, dict) or "sha256" not in entry:
            raise ValueError(f"corrupt {SUMMARY_FILE} (bad manifest entry {name!r}): {root}")
        try:
            data = path.read_bytes()
        except OSError:
            raise ValueError(
                f"incomplete run directory (missing {name}, named by {SUMMARY_FILE}): {root}"
            ) from None
        if len(data) != entry.get("bytes") or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ValueError(
                f"incomplete run directory ({name} does not match {SUMMARY_FILE}: the run was "
                f"interrupted while writing or the file was changed): {path}"
            )


def _read_summary(file: Path) -> dict[str, Any]:
    if not file.is_file():
        raise ValueError(f"missing {file.name}: {file}")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {file}: {_one_line(exc)}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"corrupt {file.name} (invalid JSON at line {exc.lineno}, column {exc.colno}): {file}"
        ) from None
    except RecursionError:
        raise ValueError(f"corrupt {file.name} (JSON nested too deeply): {file}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"corrupt {file.name} (expected a JSON object, got {type(data).__name__}): {file}"
        )
    for key in ("config", "workload", "metrics"):
        value = data.get(key)
        if value is not None and not isinstance(value, dict):
            raise ValueError(
                f"corrupt {file.name} ('{key}' must be an object, got "
                f"{type(value).__name__}): {file}"
            )
    return data


def _read_csv(file: Path, known: tuple[str, ...], required: tuple[str, ...]) -> Columns:
    if not file.is_file():
        raise ValueError(f"missing {file.name}: {file}")
    try:
        with file.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"cannot read {file}: {_one_line(exc)}") from None
    numbered = [(i, r) for i, r in enumerate(rows, start=1) if any(c.strip() for c in r)]
    if not numbered:
        raise ValueError(f"corrupt {file.name} (empty file, no header row): {file}")
    header = [h.strip() for h in numbered[0][1]]
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError(f"corrupt {file.name} (missing column(s) {', '.join(missing)}): {file}")
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise ValueError(f"corrupt {file.name} (duplicate column(s) {', '.join(dupes)}): {file}")
    body = [row for _, row in numbered[1:]]
    width = len(header)
    for lineno, row in numbered[1:]:
        if len(row) != width:
            raise ValueError(
                f"corrupt {file.name} (line {lineno} has {len(row)} fields, "
                f"header has {width}): {file}"
            )
    cols: Columns = {}
    for j, name in enumerate(header):
        cells = [row[j].strip() for row in body]
        try:
            cols[name] = _convert_column(name, cells, strict=name in known)
        except ValueError as exc:
            raise ValueError(f"corrupt {file.name} (column {name}: {exc}): {file}") from None
    n = len(body)
    for name in known:
        if name not in cols:
            cols[name] = (
                np.full(n, "", dtype=object) if name in _TEXT_COLUMNS else np.full(n, np.nan)
            )
    return cols


def _convert_column(name: str, cells: list[str], *, strict: bool) -> np.ndarray:
    """Text column -> str array; otherwise numbers (empty -> NaN) or true/false -> 1.0/0.0.

    A known numeric column (``strict``) with a value that is not a number is an error; an
    unknown column falls back to text.
    """
    if name in _TEXT_COLUMNS:
        return np.array(cells, dtype=object)
    out = np.empty(len(cells), dtype=float)
    for i, cell in enumerate(cells):
        if cell == "":
            out[i] = np.nan
            continue
        try:
            out[i] = float(cell)
        except ValueError:
            word = _BOOL_WORDS.get(cell.lower())
            if word is None:
                if strict:
                    raise ValueError(f"data row {i + 1}: not a number: {cell[:40]!r}") from None
                return np.array(cells, dtype=object)
            out[i] = word
    return out


def _one_line(exc: BaseException) -> str:
    return one_line(exc) or type(exc).__name__
