"""The results store of a sweep: a Parquet dataset plus a manifest.

Layout of ``DIR`` (``--out``)::

    manifest.json          the sweep's points (id, labels, spec, status, wall time), counts
    points/<id>.parquet    one file per finished or failed point (one row, schema below)
    results.parquet        the current grid's points in grid order (rewritten at the end)
    report.html            the HTML page (``--show`` rewrites it)
    capacity.json          ``prefillkit capacity``'s answer (capacity runs only)

The driver writing the store holds ``flock`` on the folder itself (app/out_folder.py, the
lock ``replay`` and ``compare`` take too).

Every file is written atomically (a temporary file in the same folder, fsynced, then
renamed), so a driver killed at any moment leaves only whole files: a point is finished
exactly when its file exists with ``status = "ok"``. Rerunning the same command skips
those; a failed point (``status = "failed"``) is run again.

Schema (every point file has the same columns; read the folder as one dataset, e.g.
``pandas.read_parquet("DIR/points")``, ``pyarrow.dataset.dataset("DIR/points")`` or DuckDB
``SELECT * FROM 'DIR/points/*.parquet'``):

- identity: ``point_id`` (string, the stable hash), ``status`` (``ok`` | ``failed``),
  ``error`` (one line, failed points), ``attempts`` (int64), ``workload`` (its name),
  ``workload_source`` (``mooncake:PATH``, ``generator:agentic``), ``rate`` and
  ``time_scale`` (float64, null unless set), ``seed`` (int64), ``settings_json`` (the
  point's settings over the default deployment, canonical JSON), ``workload_json``,
  ``partial`` (bool);
- ``cfg_<field>``: every resolved config field (``cfg_chunked_prefill_size``, ...), typed
  as the field (int64 / float64 / string / bool, null for an unset optional);
- every scalar summary metric of ``summary.json`` under its name (``ttft_p99_s``,
  ``input_throughput_tok_s``, ``cache_hit_rate``, ``overloaded``, ...; counts int64,
  others float64; the window lists as JSON text);
- ``ttft_s``: list<float64>, the TTFT of every request that got its first token (so any
  percentile or goodput can be computed from the store).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefillkit import __version__
from prefillkit.app.settings import Config
from prefillkit.app.sweep import SweepError, require
from prefillkit.outfile import write_bytes

if TYPE_CHECKING:
    from prefillkit.app.out_folder import OutFolder

__all__ = [
    "MANIFEST_FILE",
    "POINTS_DIR",
    "RESULTS_FILE",
    "Store",
    "atomic_write_bytes",
    "schema",
]

MANIFEST_FILE = "manifest.json"
POINTS_DIR = "points"
RESULTS_FILE = "results.parquet"
FORMAT = "prefillkit-sweep"
VERSION = 1

_ID_RE = re.compile(r"^[0-9a-f]{16}$")

#: Identity columns (name, arrow type name).
ID_COLUMNS: tuple[tuple[str, str], ...] = (
    ("point_id", "string"),
    ("status", "string"),
    ("error", "string"),
    ("attempts", "int64"),
    ("workload", "string"),
    ("workload_source", "string"),
    ("rate", "float64"),
    ("time_scale", "float64"),
    ("seed", "int64"),
    ("settings_json", "string"),
    ("workload_json", "string"),
    ("partial", "bool"),
)

#: The summary's metrics in summary order (name, arrow type name).
METRIC_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (name, kind)
    for kind, names in (
        ("int64", "requests completed rejected unfinished"),
        ("float64", "ttft_p50_s ttft_p90_s ttft_p99_s ttft_max_s ttft_mean_s queueing_mean_s"),
        ("float64", "device_hit_rate host_hit_rate cache_hit_rate input_throughput_tok_s"),
        ("float64", "executor_utilization"),
        ("int64", "num_batches"),
        ("float64", "mean_batch_size mean_chunks_per_request sim_duration_s"),
        (
            "int64",
            "affinity_skips affinity_defers affinity_deferred_requests affinity_skip_passes "
            "affinity_max_skips_in_pass affinity_max_deferred_passes affinity_stops "
            "affinity_stops_w affinity_stops_k affinity_stops_t preemptions retractions "
            "admission_passes empty_passes upstream_log_input_tokens upstream_log_hit_tokens "
            "evicted_pages stuck",
        ),
        ("float64", "window_s steady_start_s steady_end_s"),
        ("int64", "steady_requests steady_completed"),
        ("float64", "steady_ttft_p50_s steady_ttft_p90_s steady_ttft_p99_s steady_ttft_max_s"),
        ("int64", "warm_requests"),
        ("float64", "warm_ttft_p50_s warm_ttft_p90_s warm_ttft_p99_s warm_ttft_max_s"),
        ("int64", "cold_requests"),
        ("float64", "cold_ttft_p50_s cold_ttft_p90_s cold_ttft_p99_s cold_ttft_max_s"),
        ("bool", "overloaded"),
        ("string", "saturated_windows overloaded_windows"),
        ("int64", "num_windows"),
        # a fleet's (sim/fleet.py; null for one instance)
        ("int64", "instances"),
        ("string", "router"),
        ("float64", "fleet_busy_s routing_imbalance router_view_wrong_share"),
    )
    for name in names.split()
)


def _config_columns() -> list[tuple[str, str]]:
    hints = typing.get_type_hints(Config)
    out: list[tuple[str, str]] = []
    for f in dataclasses.fields(Config):
        hint = hints[f.name]
        base = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
        kind = {bool: "bool", int: "int64", float: "float64"}.get(base, "string")
        out.append((f"cfg_{f.name}", kind))
    return out


def schema(extra: Iterable[tuple[str, Any]] = ()) -> Any:
    """The arrow schema of a point file; ``extra`` are metrics this table does not know
    (a newer summary field), typed from a value."""
    pa = require("pyarrow", "the sweep store")
    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
    }
    fields = [pa.field(n, types[k]) for n, k in (*ID_COLUMNS, *_config_columns(), *METRIC_COLUMNS)]
    for name, value in extra:
        if isinstance(value, bool):
            t = pa.bool_()
        elif isinstance(value, (int, float)):
            t = pa.float64()
        else:
            t = pa.string()
        fields.append(pa.field(name, t))
    fields.append(pa.field("ttft_s", pa.list_(pa.float64())))
    return pa.schema(fields)


_KNOWN = {n for n, _ in (*ID_COLUMNS, *METRIC_COLUMNS)} | {"ttft_s"}


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """``data`` to ``target`` by :mod:`prefillkit.outfile`'s rules (temporary + rename)."""
    write_bytes(target, data)


def _table(rows: Sequence[Mapping[str, Any]]) -> Any:
    pa = require("pyarrow", "the sweep store")
    extra: dict[str, Any] = {}
    for row in rows:
        for k, v in row.items():
            if k not in _KNOWN and not k.startswith("cfg_") and k not in extra:
                extra[k] = v
    sch = schema(sorted(extra.items()))
    cols = {f.name: [row.get(f.name) for row in rows] for f in sch}
    for f in sch:
        if pa.types.is_floating(f.type):
            cols[f.name] = [None if v is None else float(v) for v in cols[f.name]]
        elif pa.types.is_string(f.type):
            cols[f.name] = [
                v if v is None or isinstance(v, str) else json.dumps(v) for v in cols[f.name]
            ]
    return pa.table(cols, schema=sch)


class Store:
    """A sweep's ``--out`` folder. Open with :meth:`open` (creates it) or :meth:`existing`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.points_dir = root / POINTS_DIR
        self._claim: OutFolder | None = None

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> Store:
        """Create (or reopen) a store for writing; takes a lock so one driver writes it."""
        require("pyarrow", "the sweep store")
        path = Path(root)
        if path.exists() and not path.is_dir():
            raise SweepError(f"--out {path}: not a folder")
        if path.is_dir() and any(path.iterdir()) and not (path / MANIFEST_FILE).is_file():
            if not (path / POINTS_DIR).is_dir():
                raise SweepError(
                    f"--out {path}: the folder is not empty and holds no sweep "
                    f"({MANIFEST_FILE}); give a new or a sweep folder"
                )
        try:
            (path / POINTS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SweepError(f"--out {path}: cannot create folder: {exc.strerror or exc}") from None
        store = cls(path)
        store._lock()
        store._clean_temps()
        return store

    @classmethod
    def existing(cls, root: str | os.PathLike[str]) -> Store:
        require("pyarrow", "reading a sweep store")
        path = Path(root)
        if not (path / MANIFEST_FILE).is_file():
            what = "not found" if not path.exists() else f"no {MANIFEST_FILE} (not a sweep folder)"
            raise SweepError(f"{path}: {what}")
        return cls(path)

    def _lock(self) -> None:
        from prefillkit.app.out_folder import OutFolder
        from prefillkit.app.replay import InputError

        try:
            self._claim = OutFolder.claim(self.root)
        except InputError as exc:
            raise SweepError(str(exc)) from None

    def close(self) -> None:
        if self._claim is not None:
            self._claim.release()
            self._claim = None

    def _clean_temps(self) -> None:
        for folder in (self.root, self.points_dir):
            for p in folder.glob(".*.tmp"):
                with contextlib.suppress(OSError):
                    p.unlink()

    # ------------------------------------------------------------------ points

    def point_path(self, pid: str) -> Path:
        return self.points_dir / f"{pid}.parquet"

    def write_point(self, row: Mapping[str, Any]) -> None:
        """Write one point's file atomically."""
        pq = require("pyarrow.parquet", "the sweep store")
        pa = require("pyarrow", "the sweep store")
        pid = str(row["point_id"])
        target = self.point_path(pid)
        sink = pa.BufferOutputStream()
        pq.write_table(_table([row]), sink)
        atomic_write_bytes(target, sink.getvalue().to_pybytes())

    def statuses(self) -> dict[str, str]:
        """``point id → status`` of every readable point file."""
        pq = require("pyarrow.parquet", "the sweep store")
        out: dict[str, str] = {}
        for p in sorted(self.points_dir.glob("*.parquet")):
            if not _ID_RE.match(p.stem):
                continue
            try:
                t = pq.read_table(p, columns=["status"])
                out[p.stem] = str(t.column("status")[0].as_py())
            except Exception:  # unreadable: recomputed
                continue
        return out

    def read_rows(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored rows of ``ids`` (those with a readable file)."""
        pq = require("pyarrow.parquet", "reading a sweep store")
        out: dict[str, dict[str, Any]] = {}
        for pid in ids:
            p = self.point_path(pid)
            if not p.is_file():
                continue
            try:
                rows = pq.read_table(p).to_pylist()
            except Exception:
                continue
            if rows:
                out[pid] = rows[0]
        return out

    def write_results(self, ids: Sequence[str]) -> Path:
        """``results.parquet``: the stored rows of ``ids`` in that order."""
        pa = require("pyarrow", "the sweep store")
        pq = require("pyarrow.parquet", "the sweep store")
        rows = self.read_rows(ids)
        tables = []
        for pid in ids:
            if pid in rows:
                tables.append(pq.read_table(self.point_path(pid)))
        target = self.root / RESULTS_FILE
        sink = pa.BufferOutputStream()
        if tables:
            table = pa.concat_tables(tables, promote_options="permissive")
        else:
            table = schema().empty_table()
        pq.write_table(table, sink)
        atomic_write_bytes(target, sink.getvalue().to_pybytes())
        return target

    # ------------------------------------------------------------------ manifest

    def read_manifest(self) -> dict[str, Any]:
        path = self.root / MANIFEST_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise SweepError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None
        except RecursionError:
            raise SweepError(f"{path}: cannot read: JSON nested too deeply") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SweepError(f"{path}: not a prefillkit sweep manifest")
        return data

    def write_manifest(self, doc: Mapping[str, Any]) -> None:
        full = {"format": FORMAT, "version": VERSION, "prefillkit_version": __version__, **doc}
        text = json.dumps(full, indent=1, allow_nan=False) + "\n"
        atomic_write_bytes(self.root / MANIFEST_FILE, text.encode())


class ManifestWriter:
    """Rewrites the manifest at most every ``interval`` seconds (and on :meth:`flush`)."""

    def __init__(self, store: Store, doc: dict[str, Any], interval: float = 2.0) -> None:
        self.store = store
        self.doc = doc
        self.interval = interval
        self.last = 0.0

    def maybe(self) -> None:
        if time.monotonic() - self.last >= self.interval:
            self.flush()

    def flush(self) -> None:
        self.store.write_manifest(self.doc)
        self.last = time.monotonic()
