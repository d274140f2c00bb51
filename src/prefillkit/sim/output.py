"""Write a simulator run to a run directory: ``summary.json``, ``requests.csv``, ``batches.csv``.

Layout of ``summary.json`` (read back by :mod:`prefillkit.report.rundir`)::

    {
      "name": "...",            # run label
      "partial": false,         # true when the replay was interrupted (SIGINT)
      "config": {...},          # describe(cfg): every Config field by FIELD name, resolved
      "deployment": {...},      # result.deployment (pool pages, host pages, key unit, GPUs)
      "workload": {...},        # what was replayed (source, request count, options)
      "metrics": {...}          # result.summary, minus wall-clock fields
    }

Determinism: the same input and seed give byte-identical files. Floats are written with
``repr`` (shortest round-trip form) in both JSON and CSV, keys keep a fixed order, and the
wall-clock fields of the summary (:data:`WALL_CLOCK_FIELDS`, i.e. ``wall_time_s``) are
**dropped** from ``summary.json`` -- the CLI prints the wall time on the console instead.
Non-finite floats are not valid JSON: NaN is written as ``null``, infinities as the
strings ``"inf"`` / ``"-inf"``.

CSV cells: ``None`` is an empty cell, booleans are ``true`` / ``false``, floats ``repr``.
Lists of ids (``batch_ids`` of ``requests.csv``, ``rids`` of ``batches.csv``) are
space-separated in one cell. ``batches.csv`` ends with one ``t_<term>_s`` column per term
of the cost model's breakdown (:func:`prefillkit.sim.metrics.batch_columns`).

Partial runs: ``requests.csv`` holds the requests that had been scheduled, finished or
rejected when the run stopped (requests still waiting in the queue, or not yet arrived,
are left out); ``summary.json`` says ``"partial": true``.

Every file is written atomically: to a temporary file in the same folder, flushed, then
``os.replace`` d over the target, so a reader never sees half a file. The CSVs are written
first and ``summary.json`` last.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prefillkit.config import Config, describe
from prefillkit.request import ReqStatus, Request
from prefillkit.sim.engine import SimResult
from prefillkit.sim.metrics import REQUEST_COLUMNS, batch_columns, request_row

__all__ = [
    "BATCHES_FILE",
    "REQUESTS_FILE",
    "SUMMARY_FILE",
    "WALL_CLOCK_FIELDS",
    "atomic_write_text",
    "json_ready",
    "summary_document",
    "write_run",
]

SUMMARY_FILE = "summary.json"
REQUESTS_FILE = "requests.csv"
BATCHES_FILE = "batches.csv"

#: Summary fields that depend on the wall clock; never written to ``summary.json``.
WALL_CLOCK_FIELDS: tuple[str, ...] = ("wall_time_s",)


def json_ready(value: Any) -> Any:
    """``value`` with non-finite floats replaced (NaN → None, ±inf → "inf"/"-inf")."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def summary_document(
    result: SimResult, *, name: str, config: Config, workload: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``summary.json`` object (JSON-ready, without wall-clock fields)."""
    metrics = {k: v for k, v in result.summary.items() if k not in WALL_CLOCK_FIELDS}
    doc: dict[str, Any] = {
        "name": name,
        "partial": bool(result.partial),
        "config": describe(config),
        "deployment": dict(result.deployment),
        "workload": dict(workload),
        "metrics": metrics,
    }
    ready: dict[str, Any] = json_ready(doc)
    return ready


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, ReqStatus):
        return value.value
    return str(value)


def _csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file in the same folder."""
    target = Path(path)
    # A fresh name opened with "x" (not mkstemp) so the file gets the umask's permissions.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _written_requests(result: SimResult) -> list[Request]:
    if not result.partial:
        return result.requests
    return [
        r
        for r in result.requests
        if r.first_token_time is not None
        or r.first_scheduled_time is not None
        or r.status is ReqStatus.REJECTED
    ]


def _request_rows(result: SimResult) -> Iterable[dict[str, Any]]:
    ids, classes = result.trace.batch_ids(), result.cache_classes
    for req in _written_requests(result):
        yield request_row(req, ids.get(req.rid, ()), classes.get(req.rid))


def _batch_rows(result: SimResult) -> Iterable[dict[str, Any]]:
    trace = result.trace
    for i, batch in enumerate(result.batches):
        row = batch.row()
        row["rids"] = " ".join(trace.batch_rids(i))
        row.update(trace.batch_terms(i))
        yield row


def write_run(
    result: SimResult,
    out_dir: str | os.PathLike[str],
    *,
    name: str,
    config: Config,
    workload: Mapping[str, Any],
) -> None:
    """Write ``requests.csv``, ``batches.csv`` and ``summary.json`` into ``out_dir``.

    Creates ``out_dir`` (and parents) if needed; see the module docstring for the format.
    Raises ``OSError`` when the folder or a file cannot be written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    requests_text = _csv_text(REQUEST_COLUMNS, _request_rows(result))
    columns = batch_columns(result.trace.keys)
    batches_text = _csv_text(columns, _batch_rows(result))
    doc = summary_document(result, name=name, config=config, workload=workload)
    summary_text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    atomic_write_text(out / REQUESTS_FILE, requests_text)
    atomic_write_text(out / BATCHES_FILE, batches_text)
    atomic_write_text(out / SUMMARY_FILE, summary_text)
