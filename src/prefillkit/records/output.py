# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Write a simulator run to a run directory: ``summary.json``, ``requests.csv``, ``batches.csv``.

Layout of ``summary.json`` (read back by :mod:`prefillkit.report.rundir`)::

    {
      "name": "...",            # run label
      "partial": false,         # true when the replay was interrupted (SIGINT)
      "config": {...},          # the settings by field name, resolved (the app's describe)
      "deployment": {...},      # result.deployment (pool pages, host pages, key unit, GPUs)
      "workload": {...},        # what was replayed (source, request count, options)
      "metrics": {...},         # result.summary, minus wall-clock fields
      "base": "...",            # replay: what the settings were laid over (a preset, ...)
      "sources": {...},         # replay: field -> line / file / preset NAME / default
      "files": {...}            # manifest: {"requests.csv": {"bytes", "sha256"}, ...}
    }

``base`` and ``sources`` are added by ``prefillkit replay`` (the deployment panel of
:mod:`prefillkit.report.deployment` reads them; other writers leave them out).

Determinism: the same input and seed give byte-identical files. Floats are written with
``repr`` (shortest round-trip form) in both JSON and CSV, keys keep a fixed order, and the
wall-clock fields of the summary (:data:`WALL_CLOCK_FIELDS`, i.e. ``wall_time_s``) are
**dropped** from ``summary.json`` -- the CLI prints the wall time on the console instead.
Non-finite floats are not valid JSON: NaN is written as ``null``, infinities as the
strings ``"inf"`` / ``"-inf"``.

CSV cells: ``None`` is an empty cell, booleans are ``true`` / ``false``, floats ``repr``.
Lists of ids (``batch_ids`` of ``requests.csv``, ``rids`` of ``batches.csv``) are
space-separated in one cell. ``batches.csv``'s ``cached_tokens`` is the sum of its
``device_hit_tokens``, ``host_hit_tokens`` and ``carried_prefix_tokens``
(:mod:`prefillkit.cost.cached`). ``batches.csv`` ends with one ``t_<term>_s`` column per term
of the cost model's breakdown (:func:`prefillkit.records.metrics.batch_columns`).

Partial runs: ``requests.csv`` holds the requests that had been scheduled, finished or
rejected when the run stopped (requests still waiting in the queue, or not yet arrived,
are left out); ``summary.json`` says ``"partial": true``.

The three files are written as a set: all three go to temporary files in the same folder
(flushed and fsynced) first; then, with SIGINT held back, the previous ``summary.json`` is
removed, the CSVs are ``os.replace`` d into place and ``summary.json`` comes last. The
summary carries a manifest, ``"files"``: the byte size and SHA-256 of each CSV, and a
reader (:func:`prefillkit.report.rundir.load_run`) refuses a folder whose CSVs do not match
it. So a run killed while writing leaves either the previous complete set or a folder the
readers reject by name ("interrupted while writing"), never a silent mix; a Ctrl-C in the
writing window is delivered after the set is complete. Temporary files left by a killed
run (``.requests.csv.<pid>.<hex>.tmp``) are removed by the next write into the folder when
their process is gone. A target that exists as a folder is refused before anything is
written, naming the file.

Streaming: :class:`StreamingRunWriter` writes the CSV rows into temporary files named
``.requests.csv.<pid>.<hex>.part`` while the run goes (a
:class:`~prefillkit.records.collector.RowSink`; the manifest's sizes and hashes are taken as the
bytes are written; a Ctrl-C stops the run and the partial set is committed, as for a
non-streaming run; the rows are formatted and written by a child process when two cores
are there, see :mod:`prefillkit.records.row_writer`) and :meth:`StreamingRunWriter.commit`
commits them with the same set rule (the ``.tmp`` summary, then the renames); the bytes
are those :func:`write_run` writes for the same run. A run that fails before the commit
leaves no temporary file behind; a killed one's ``.part`` files are removed by the next
write into the folder (or by the writer process, when its parent goes away).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prefillkit.outfile import temp_path
from prefillkit.records.file_set import (
    check_targets,
    commit_temps,
    file_manifest,
    remove_stale_temporaries,
    unlink_quietly,
    write_file_set,
    write_temp,
)
from prefillkit.records.metrics import REQUEST_COLUMNS, batch_columns, request_row
from prefillkit.records.result import SimResult
from prefillkit.records.row_writer import RowFiles, fast_cell, open_row_files
from prefillkit.request import ReqStatus, Request

#: Rows a streaming run hands to its row files at once (a batch of about 100 KB
#: when they go to the writer process, records/row_writer.py).
_ROWS_PER_WRITE = 512

__all__ = [
    "BATCHES_FILE",
    "REQUESTS_FILE",
    "SUMMARY_FILE",
    "WALL_CLOCK_FIELDS",
    "StreamingRunWriter",
    "json_ready",
    "summary_document",
    "temp_path",
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
    result: SimResult, *, name: str, config: Mapping[str, Any], workload: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``summary.json`` object (JSON-ready, without wall-clock fields and without the
    ``files`` manifest, which :func:`write_run` adds). ``config`` is the run's settings by
    field name (``prefillkit.app.settings.describe``); ``workload`` what was replayed."""
    metrics = {k: v for k, v in result.summary.items() if k not in WALL_CLOCK_FIELDS}
    doc: dict[str, Any] = {
        "name": name,
        "partial": bool(result.partial),
        "config": dict(config),
        "deployment": dict(result.deployment),
        "workload": dict(workload),
        "metrics": metrics,
    }
    ready: dict[str, Any] = json_ready(doc)
    return ready


def _csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    cell = fast_cell
    for row in rows:
        get = row.get
        writer.writerow([cell(get(c)) for c in columns])
    return buf.getvalue()


class StreamingRunWriter:
    """``requests.csv`` and ``batches.csv`` written row by row while a streaming run goes
    (a :class:`prefillkit.records.collector.RowSink`), then committed with ``summary.json`` as
    one set (:meth:`commit`; the same files :func:`write_run` writes, byte for byte).

    The rows go to temporary files beside the targets; :meth:`discard` (or an exception
    before :meth:`commit`) removes them and leaves the folder as it was.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        breakdown_keys: Sequence[str],
        *,
        process: bool | None = None,
    ) -> None:
        self.folder = Path(out_dir)
        self.folder.mkdir(parents=True, exist_ok=True)
        names = (REQUESTS_FILE, BATCHES_FILE, SUMMARY_FILE)
        check_targets(self.folder, names)
        remove_stale_temporaries(self.folder, names)
        # ".part": rows of a run in progress; the set's commit (the ".tmp" summary, then
        # the renames) is the same short window as write_run's.
        self._parts: dict[str, Path] = {}
        self._files: RowFiles | None = None
        try:
            for name in (REQUESTS_FILE, BATCHES_FILE):
                part = temp_path(self.folder / name, "part")
                open(part, "xb").close()  # NOTE: created here, so a failure shows here
                self._parts[name] = part
            self._files = open_row_files(
                [
                    (str(self._parts[REQUESTS_FILE]), REQUEST_COLUMNS),
                    (str(self._parts[BATCHES_FILE]), batch_columns(breakdown_keys)),
                ],
                process=process,
            )
        except BaseException:
            self.discard()
            raise
        self._req_rows: list[list[Any]] = []
        self._batch_rows: list[list[Any]] = []

    def request_row(self, values: list[Any]) -> None:
        rows = self._req_rows
        rows.append(values)
        if len(rows) >= _ROWS_PER_WRITE:
            self._write(0, rows)
            self._req_rows = []

    def batch_row(self, values: list[Any]) -> None:
        rows = self._batch_rows
        rows.append(values)
        if len(rows) >= _ROWS_PER_WRITE:
            self._write(1, rows)
            self._batch_rows = []

    def _write(self, index: int, rows: list[list[Any]]) -> None:
        assert self._files is not None
        self._files.write(index, rows)

    def _finish_files(self) -> dict[str, Any]:
        assert self._files is not None
        if self._req_rows:
            self._write(0, self._req_rows)
        if self._batch_rows:
            self._write(1, self._batch_rows)
        self._req_rows, self._batch_rows = [], []
        requests, batches = self._files.finish()
        return {REQUESTS_FILE: requests, BATCHES_FILE: batches}

    def commit(self, document: Mapping[str, Any]) -> None:
        """Finish the CSVs and write ``summary.json`` (``document`` plus the manifest)."""
        try:
            manifest = self._finish_files()
            doc = {**document, "files": manifest}
            summary_text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
            temps = dict(self._parts)
            temps[SUMMARY_FILE] = write_temp(self.folder / SUMMARY_FILE, summary_text)
            commit_temps(self.folder, temps, SUMMARY_FILE)
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the temporary files (after :meth:`commit`: those not renamed, none)."""
        if self._files is not None:
            self._files.abandon()  # NOTE: after the files' finish: nothing
            self._files = None
        for part in self._parts.values():
            if part.exists():
                unlink_quietly(part)
        self._parts = {}
        tmp = [p for p in self.folder.glob(f".{SUMMARY_FILE}.{os.getpid()}.*.tmp")]
        for p in tmp:
            unlink_quietly(p)


def _written_requests(result: SimResult) -> list[Request]:
    if not result.partial:
        return result.requests
    return [
        r
        for r in result.requests
        if r.metrics.first_token_time is not None
        or r.metrics.first_scheduled_time is not None
        or r.state.status is ReqStatus.REJECTED
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
    result: SimResult, out_dir: str | os.PathLike[str], document: Mapping[str, Any]
) -> None:
    """Write ``requests.csv``, ``batches.csv`` and ``summary.json`` into ``out_dir``.

    ``document`` is the run's :func:`summary_document` (not mutated: ``summary.json`` is
    it plus the ``files`` manifest). Creates ``out_dir`` (and parents) if needed; see the
    module docstring for the format. Raises ``OSError`` when the folder or a file cannot
    be written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    requests_text = _csv_text(REQUEST_COLUMNS, _request_rows(result))
    columns = batch_columns(result.trace.keys)
    batches_text = _csv_text(columns, _batch_rows(result))
    csvs = {REQUESTS_FILE: requests_text, BATCHES_FILE: batches_text}
    doc = {**document, "files": file_manifest(csvs)}
    summary_text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    write_file_set(out, {**csvs, SUMMARY_FILE: summary_text}, last=SUMMARY_FILE)
