"""``prefillkit capacity``: per configuration, the highest request rate meeting an SLO.

The configurations are the points of a grid file (which must not vary ``rate`` or
``time_scale``: the search sets the rate). Each probe replays the configuration's workload
rescaled to a mean request rate ``r`` (``--rate``; for a trace of ``n`` requests over
``T`` seconds that is time scale ``n / (T r)``) and checks the SLO:

- ``ttft``: the ``percentile``-th TTFT (default p99) at most ``ttft_s`` seconds;
- ``goodput``: at least a fraction ``goodput`` of all requests got their first token within
  ``goodput_ttft_s``;

(both when both are given). A request that never got its first token (rejected,
unfinished) counts as an infinite TTFT. Search: probe ``rate_min`` and ``rate_max``; if
the SLO fails at ``rate_min`` the capacity is below the range, if it holds at
``rate_max`` it is at least ``rate_max``; otherwise bisect geometrically (midpoints
rounded to 6 significant digits) until ``hi / lo <= 1 + tolerance``. The answer is
``lo``, the highest rate probed that met the SLO, with ``hi`` the lowest that failed: the
true threshold lies in ``[lo, hi)`` if the SLO metric is monotone in the rate.

Probes are points of the sweep store, so a rerun (or a search with another SLO that
probes the same rates) reuses them; every configuration searches concurrently, at most
``jobs`` probes in flight. The SLO and one configuration's bisection are
:mod:`.rate_search`'s; this module drives the searches and writes the result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.backend import Backend, Outcome, PointRunner
from prefillkit.app.sweep.grid import Grid
from prefillkit.app.sweep.points import PointSpec
from prefillkit.app.sweep.rate_search import Search, Slo, max_probes, probes_left, slo_values
from prefillkit.app.sweep.store import ManifestWriter, Store, atomic_write_bytes
from prefillkit.app.sweep.sweep import Progress, SweepInterrupted, open_backend, store_outcome

__all__ = ["CAPACITY_FILE", "run_capacity"]

CAPACITY_FILE = "capacity.json"


def run_capacity(
    grid: Grid,
    out: str,
    slo: Slo,
    *,
    rate_min: float,
    rate_max: float,
    tolerance: float = 0.05,
    backend: str = "auto",
    address: str | None = None,
    jobs: int | None = None,
    progress: bool = False,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Search every configuration of ``grid``; writes ``out/capacity.json``; returns it."""
    say = note or (lambda _: None)
    for name in ("rate", "time_scale"):
        if name in grid.axes:
            raise SweepError(
                f"{grid.path}: [grid] {name}: capacity searches the request rate; remove this axis"
            )
    if not (0 < rate_min < rate_max and math.isfinite(rate_max)):
        raise SweepError(
            f"--rate-min/--rate-max: need 0 < min < max, got {rate_min:g} and {rate_max:g}"
        )
    if not 0 < tolerance < 1:
        raise SweepError(f"--tolerance: expected a fraction in (0, 1), got {tolerance:g}")
    store = Store.open(out)
    try:
        return _CapacityRun(
            grid, store, slo, rate_min, rate_max, tolerance, backend, address, jobs, progress, say
        ).run()
    finally:
        store.close()


class _CapacityRun:
    """One :func:`run_capacity` on an open store: every configuration's :class:`Search`, its
    probes run as sweep points (or read back when the store has them), the manifest kept
    current; the backend starts with the first probe the store does not have."""

    def __init__(
        self,
        grid: Grid,
        store: Store,
        slo: Slo,
        rate_min: float,
        rate_max: float,
        tolerance: float,
        backend: str,
        address: str | None,
        jobs: int | None,
        progress: bool,
        say: Callable[[str], None],
    ) -> None:
        self.grid, self.store, self.slo, self.say = grid, store, slo, say
        self.rate_min, self.rate_max, self.tolerance = rate_min, rate_max, tolerance
        self.backend_name, self.address, self.jobs = backend, address, jobs
        configs = grid.points()
        self.searches = [Search(c, rate_min, rate_max, tolerance) for c in configs]
        self.varied = grid.varied
        self.statuses = store.statuses()
        self.probes: dict[str, dict[str, Any]] = {}
        self.doc: dict[str, Any] = {
            "kind": "capacity",
            "name": grid.name,
            "grid_file": grid.path,
            "varied": [*self.varied, "rate"],
            "points": [],
        }
        self.manifest = ManifestWriter(store, self.doc)
        self.waiting: dict[str, list[tuple[Search, float]]] = {}
        self.be: Backend | None = None
        self.runner: PointRunner | None = None
        total = len(self.searches) * max_probes(rate_min, rate_max, tolerance)
        self.bar = Progress("probes", total, 0, progress)

    def run(self) -> dict[str, Any]:
        """Run every search to its end; the result, also written to ``capacity.json``."""
        self.manifest.flush()
        try:
            with self.bar:
                for s in self.searches:
                    s.pending.update(s.first())  # both ends before either result is read
                    for rate in s.first():
                        self._submit(s, rate)
                while self.runner is not None and self.runner.busy:
                    for outcome in self.runner.step():
                        self._on_outcome(outcome)
        except KeyboardInterrupt:
            self._close()
            stored = sum(1 for p in self.probes.values() if p["status"] == "ok")
            raise SweepInterrupted(stored, len(self.probes)) from None
        except BaseException:
            self._close()
            raise
        self._close()
        self.store.write_results(list(self.probes))
        return self._write_result()

    def _close(self) -> None:
        """Close the backend (when one started) and write the manifest."""
        if self.be is not None:
            self.be.close()
        self.manifest.flush()

    def _entry(self, spec: PointSpec, status: str) -> dict[str, Any]:
        return {
            "id": spec.id,
            "labels": {k: v for k, v in spec.labels.items() if k in (*self.varied, "rate")},
            "settings": dict(spec.settings),
            "workload": dict(spec.workload),
            "seed": spec.seed,
            "status": status,
        }

    def _submit(self, search: Search, rate: float) -> None:
        """Probe ``search``'s configuration at ``rate``: from the store when it has the
        point, else once on the backend (a probe two searches share runs once)."""
        spec = search.config.with_rate(rate)
        pid = spec.id
        search.pending.add(rate)
        if pid not in self.probes:
            self.probes[pid] = self._entry(spec, "pending")
            self.doc["points"].append(self.probes[pid])
        if self.statuses.get(pid) == "ok":
            rows = self.store.read_rows([pid])
            if pid in rows:
                self.bar.add(cached=1)
                self._finish(search, rate, rows[pid], pid, None)
                return
        self.waiting.setdefault(pid, []).append((search, rate))
        if len(self.waiting[pid]) > 1:
            return
        if self.runner is None:
            self.runner = self._start()
        self.runner.add(spec)

    def _start(self) -> PointRunner:
        """Open the backend and say what runs where."""
        be, n_jobs = open_backend(self.backend_name, self.address, self.jobs)
        self.be = be
        where = "Ray" if be.name == "ray" else "local worker processes"
        self.say(
            f"capacity {self.grid.name}: {len(self.searches)} configurations, SLO "
            f"{self.slo.describe()}, rates {self.rate_min:g}-{self.rate_max:g} req/s, "
            f"tolerance {self.tolerance:.0%}; probes on {where} ({n_jobs} at a time)"
        )
        return PointRunner(be, n_jobs)

    def _finish(
        self,
        search: Search,
        rate: float,
        row: Mapping[str, Any] | None,
        pid: str,
        error: str | None,
    ) -> None:
        values = slo_values(row, self.slo) if row is not None else None
        for nxt in search.record(rate, values, pid, error):
            self._submit(search, nxt)
        if search.status != "searching":
            # the probes it will not make
            bar = self.bar
            bar.set_total(bar.done + bar.failed + bar.cached + probes_left(self.searches))

    def _on_outcome(self, outcome: Outcome) -> None:
        store_outcome(self.store, outcome)
        pid = outcome.spec.id
        self.probes[pid]["status"] = "ok" if outcome.ok else "failed"
        self.probes[pid]["error"] = outcome.error
        self.bar.add(done=1) if outcome.ok else self.bar.add(failed=1)
        for search, rate in self.waiting.pop(pid, []):
            self._finish(search, rate, outcome.row, pid, outcome.error)
        self.manifest.maybe()

    def _write_result(self) -> dict[str, Any]:
        """The result document, written atomically to ``capacity.json``."""
        result = {
            "format": "prefillkit-capacity",
            "version": 1,
            "slo": self.slo.to_dict(),
            "rate_min": self.rate_min,
            "rate_max": self.rate_max,
            "tolerance": self.tolerance,
            "varied": self.varied,
            "configs": [s.to_dict(self.varied) for s in self.searches],
        }
        atomic_write_bytes(
            self.store.root / CAPACITY_FILE,
            (json.dumps(result, indent=1, allow_nan=False) + "\n").encode(),
        )
        return result


def capacity_table(result: Mapping[str, Any]) -> Any:
    from rich.table import Table

    varied = list(result.get("varied", []))
    table = Table(
        title=f"capacity: highest rate with {result['slo']['text']} "
        f"(tolerance {result['tolerance']:.0%})"
    )
    table.add_column("#", justify="right")
    for name in varied:
        table.add_column(name)
    for col in ("capacity (req/s)", "fails at (req/s)", "probes", "status"):
        table.add_column(col, justify="right")
    for i, c in enumerate(result["configs"]):
        cap = c.get("capacity_rps")
        hi = c.get("upper_rps")
        status = c["status"]
        if status == "below":
            cap_text = f"< {result['rate_min']:g}"
        elif status == "above":
            cap_text = f">= {result['rate_max']:g}"
        else:
            cap_text = f"{cap:.4g}" if cap is not None else "-"
        table.add_row(
            str(i + 1),
            *(str(c["labels"].get(n, "")) for n in varied),
            cap_text,
            f"{hi:.4g}" if hi is not None else "-",
            str(len(c["probes"])),
            status if c.get("error") is None else f"failed: {c['error'][:60]}",
        )
    return table
