"""The sweep driver: skip what the store has, run the rest, store each point as it ends.

:func:`run_sweep` writes ``manifest.json`` first (the grid's points, pending or cached),
then each finished point's file the moment its result arrives, so killing the driver
(Ctrl-C, ``kill -9``) loses at most the points still running; rerunning the same command
recomputes none of the finished ones. The manifest is rewritten every few seconds and at
the end, with ``results.parquet``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefillkit.app.sweep.backend import (
    Backend,
    FaultHooks,
    Outcome,
    PointRunner,
    make_backend,
)
from prefillkit.app.sweep.grid import Grid
from prefillkit.app.sweep.points import PointSpec, failed_row
from prefillkit.app.sweep.store import ManifestWriter, Store

__all__ = ["Progress", "SweepInterrupted", "SweepRun", "run_points", "run_sweep"]


class Progress:
    """One rich progress bar on stderr: points, done / failed / cached, ETA."""

    def __init__(self, description: str, total: int, cached: int, enabled: bool) -> None:
        self.done = 0
        self.failed = 0
        self.cached = cached
        self.enabled = enabled
        self.progress: Any = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        from prefillkit.app.progress import CountColumn

        self.progress = RichProgress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            CountColumn(f"{description} settled"),
            TextColumn("{task.fields[counts]}"),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.progress.add_task(
            description, total=total, completed=cached, counts=self._counts()
        )

    def _counts(self) -> str:
        return f"done {self.done:,} · failed {self.failed:,} · cached {self.cached:,}"

    def __enter__(self) -> Progress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def add(self, *, done: int = 0, failed: int = 0, cached: int = 0) -> None:
        self.done += done
        self.failed += failed
        self.cached += cached
        if self.progress is not None:
            self.progress.update(self.task, advance=done + failed + cached, counts=self._counts())

    def set_total(self, total: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, total=total)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep; the finished points are stored."""

    def __init__(self, stored: int, total: int) -> None:
        super().__init__()
        self.stored = stored
        self.total = total


@dataclass(slots=True)
class SweepRun:
    """What one :func:`run_sweep` did."""

    total: int
    cached: int = 0
    done: int = 0
    failed: int = 0
    backend: str = ""
    errors: dict[str, str] = field(default_factory=dict)


def _entry(p: PointSpec, status: str, old: Mapping[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": p.id,
        "labels": dict(p.labels),
        "settings": dict(p.settings),
        "workload": dict(p.workload),
        "seed": p.seed,
        "status": status,
        "attempts": 0,
        "error": None,
        "wall_s": None,
    }
    if old is not None and status == "ok":
        for key in ("attempts", "wall_s"):
            entry[key] = old.get(key)
    return entry


def store_outcome(store: Store, outcome: Outcome) -> None:
    """Write ``outcome``'s point file (its row, or the failure with its error)."""
    if outcome.ok and outcome.row is not None:
        row = dict(outcome.row)
    else:
        row = failed_row(outcome.spec, outcome.error or "failed")
    row["attempts"] = outcome.attempts
    store.write_point(row)


def run_points(
    runner: PointRunner,
    specs: Iterable[PointSpec],
    on_outcome: Callable[[Outcome], None],
) -> None:
    """Run ``specs`` to the end on ``runner``, calling ``on_outcome`` for each."""
    for spec in specs:
        runner.add(spec)
    while runner.busy:
        for outcome in runner.step():
            on_outcome(outcome)


def open_backend(
    backend: str, address: str | None, jobs: int | None, hooks: FaultHooks | None = None
) -> tuple[Backend, int]:
    be = make_backend(backend, address, hooks)
    return be, jobs if jobs is not None else be.capacity()


def run_sweep(
    grid: Grid,
    out: str,
    *,
    backend: str = "auto",
    address: str | None = None,
    jobs: int | None = None,
    progress: bool = False,
    note: Callable[[str], None] | None = None,
    hooks: FaultHooks | None = None,
) -> SweepRun:
    """Run ``grid``'s points not yet in the store at ``out``; see the module docstring.
    ``hooks``: fault injection for the tests (:data:`~prefillkit.app.sweep.backend.FaultHooks`)."""
    store = Store.open(out)
    try:
        return _run(grid, store, backend, address, jobs, progress, note or (lambda _: None), hooks)
    finally:
        store.close()


def _run(
    grid: Grid,
    store: Store,
    backend: str,
    address: str | None,
    jobs: int | None,
    progress: bool,
    note: Callable[[str], None],
    hooks: FaultHooks | None,
) -> SweepRun:
    points = grid.points()
    entries = _entries(store, points)
    doc = _manifest_doc(grid, entries)
    manifest = ManifestWriter(store, doc)
    manifest.flush()
    todo = [p for p in points if entries[p.id]["status"] != "ok"]
    run = SweepRun(total=len(points), cached=len(points) - len(todo))
    if not todo:
        note(f"all {len(points)} points are in the store (cached)")
        store.write_results([p.id for p in points])
        return run
    be, n_jobs = open_backend(backend, address, jobs, hooks)
    run.backend = be.name
    where = "Ray" if be.name == "ray" else "local worker processes"
    note(
        f"sweep {grid.name}: {len(points)} points, {run.cached} cached, running {len(todo)} on "
        f"{where} ({n_jobs} at a time; Ctrl-C stops, rerun resumes)"
    )
    runner = PointRunner(be, n_jobs)

    def on_outcome(outcome: Outcome) -> None:
        store_outcome(store, outcome)
        _record(entries[outcome.spec.id], run, bar, outcome)
        manifest.maybe()

    t0 = time.monotonic()
    bar = Progress("points", len(points), run.cached, progress)
    try:
        with bar:
            run_points(runner, todo, on_outcome)
    except KeyboardInterrupt:
        be.close()
        manifest.flush()
        store.write_results([p.id for p in points])
        raise SweepInterrupted(run.cached + run.done, len(points)) from None
    except BaseException:
        be.close()
        manifest.flush()
        raise
    be.close()
    doc["wall_s"] = round(time.monotonic() - t0, 3)
    manifest.flush()
    store.write_results([p.id for p in points])
    return run


def _manifest_doc(grid: Grid, entries: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The manifest of a sweep of ``grid`` (its entries are ``entries``' own dicts, which
    the run updates in place)."""
    return {
        "kind": "sweep",
        "name": grid.name,
        "grid_file": grid.path,
        "varied": grid.varied,
        "points": list(entries.values()),
    }


def _entries(store: Store, points: Sequence[PointSpec]) -> dict[str, dict[str, Any]]:
    """Point id -> its manifest entry: ``ok`` when the store has it (its attempts and wall
    time from the last manifest), else ``pending``."""
    old = {e["id"]: e for e in store.read_manifest().get("points", []) if isinstance(e, dict)}
    statuses = store.statuses()
    return {
        p.id: _entry(p, "ok" if statuses.get(p.id) == "ok" else "pending", old.get(p.id))
        for p in points
    }


def _record(entry: dict[str, Any], run: SweepRun, bar: Progress, outcome: Outcome) -> None:
    """Note a finished point in its manifest ``entry``, the run's counts and the bar."""
    entry["status"] = "ok" if outcome.ok else "failed"
    entry["attempts"] = outcome.attempts
    entry["error"] = outcome.error
    entry["wall_s"] = round(outcome.wall_s, 3)
    if outcome.ok:
        run.done += 1
        bar.add(done=1)
    else:
        run.failed += 1
        run.errors[outcome.spec.id] = outcome.error or ""
        bar.add(failed=1)


def point_entries(manifest: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    pts = manifest.get("points", [])
    return [e for e in pts if isinstance(e, dict)]
