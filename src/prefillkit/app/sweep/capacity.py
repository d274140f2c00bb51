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
``jobs`` probes in flight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.backend import Outcome, PointRunner
from prefillkit.app.sweep.grid import Grid
from prefillkit.app.sweep.points import PointSpec
from prefillkit.app.sweep.store import ManifestWriter, Store, atomic_write_bytes
from prefillkit.app.sweep.sweep import Progress, SweepInterrupted, open_backend, store_outcome

__all__ = ["CAPACITY_FILE", "Search", "Slo", "run_capacity", "slo_values"]

CAPACITY_FILE = "capacity.json"


@dataclass(frozen=True, slots=True)
class Slo:
    percentile: float = 99.0
    ttft_s: float | None = None
    goodput: float | None = None
    goodput_ttft_s: float | None = None

    def __post_init__(self) -> None:
        if self.ttft_s is None and self.goodput is None:
            raise SweepError("give an SLO: --slo-ttft SECONDS and/or --slo-goodput FRACTION")
        if not 0 < self.percentile <= 100:
            raise SweepError(f"--slo-percentile: expected 0 < P <= 100, got {self.percentile}")
        if self.goodput is not None:
            if not 0 < self.goodput <= 1:
                raise SweepError(f"--slo-goodput: expected 0 < F <= 1, got {self.goodput}")
            if self.goodput_ttft_s is None and self.ttft_s is None:
                raise SweepError("--slo-goodput needs --slo-goodput-ttft (or --slo-ttft)")

    @property
    def goodput_bound(self) -> float | None:
        return self.goodput_ttft_s if self.goodput_ttft_s is not None else self.ttft_s

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT p{self.percentile:g} <= {self.ttft_s:g} s")
        if self.goodput is not None:
            parts.append(f"goodput >= {self.goodput:.3g} within {self.goodput_bound:g} s")
        return " and ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "percentile": self.percentile,
            "ttft_s": self.ttft_s,
            "goodput": self.goodput,
            "goodput_ttft_s": self.goodput_bound if self.goodput is not None else None,
            "text": self.describe(),
        }


def slo_values(row: Mapping[str, Any], slo: Slo) -> dict[str, Any]:
    """``{"ttft_pct_s", "goodput", "ok"}`` of a stored row (inf for missing first tokens)."""
    ttft = [float(t) for t in (row.get("ttft_s") or [])]
    n = int(row.get("requests") or len(ttft))
    values = np.array(ttft + [math.inf] * max(0, n - len(ttft)), dtype=float)
    pct: float | None = None
    ok = True
    if slo.ttft_s is not None:
        if len(values) == 0:
            pct = math.inf
        else:
            with np.errstate(invalid="ignore"):
                p = float(np.percentile(values, slo.percentile))
            pct = math.inf if math.isnan(p) else p
        ok = ok and pct <= slo.ttft_s
    good: float | None = None
    if slo.goodput is not None:
        bound = slo.goodput_bound
        assert bound is not None
        good = float(np.sum(values <= bound)) / len(values) if len(values) else 0.0
        ok = ok and good >= slo.goodput
    return {
        "ttft_pct_s": None if pct is None or math.isinf(pct) else pct,
        "goodput": good,
        "ok": ok,
    }


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


@dataclass(slots=True)
class Search:
    """One configuration's bisection."""

    config: PointSpec
    rate_min: float
    rate_max: float
    tolerance: float
    lo: float | None = None
    hi: float | None = None
    status: str = "searching"  # searching | found | below | above | failed
    error: str | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    pending: set[float] = field(default_factory=set)

    def first(self) -> list[float]:
        return [self.rate_min, self.rate_max]

    def record(
        self, rate: float, values: Mapping[str, Any] | None, point_id: str, error: str | None = None
    ) -> list[float]:
        """Note a probe's result; the next rates to probe."""
        self.pending.discard(rate)
        if values is None:
            self.status, self.error = "failed", f"probe at {rate:g} req/s: {error}"
            self.probes.append({"rate": rate, "point_id": point_id, "error": error})
            return []
        self.probes.append({"rate": rate, "point_id": point_id, **values})
        if self.status != "searching":
            return []
        if values["ok"]:
            self.lo = rate if self.lo is None else max(self.lo, rate)
        else:
            self.hi = rate if self.hi is None else min(self.hi, rate)
        if self.pending:
            return []  # the other end of the range is still running
        if self.lo is None:
            self.status = "below"
            return []
        if self.hi is None:
            self.status = "above"
            return []
        if self.hi / self.lo <= 1 + self.tolerance:
            self.status = "found"
            return []
        mid = _sig(math.sqrt(self.lo * self.hi))
        if not self.lo < mid < self.hi:
            self.status = "found"
            return []
        return [mid]

    def to_dict(self, varied: Sequence[str]) -> dict[str, Any]:
        return {
            "labels": {k: v for k, v in self.config.labels.items() if k in varied},
            "settings": dict(self.config.settings),
            "workload": dict(self.config.workload),
            "seed": self.config.seed,
            "status": self.status,
            "capacity_rps": self.lo if self.status in ("found", "above") else None,
            "upper_rps": self.hi,
            "error": self.error,
            "probes": sorted(self.probes, key=lambda p: p["rate"]),
        }


def max_probes(rate_min: float, rate_max: float, tolerance: float) -> int:
    k = math.ceil(math.log2(math.log(rate_max / rate_min) / math.log1p(tolerance)))
    return 2 + max(0, k)


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
        return _run(
            grid, store, slo, rate_min, rate_max, tolerance, backend, address, jobs, progress, say
        )
    finally:
        store.close()


def _run(
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
) -> dict[str, Any]:
    configs = grid.points()
    searches = [Search(c, rate_min, rate_max, tolerance) for c in configs]
    varied = grid.varied
    statuses = store.statuses()
    probes: dict[str, dict[str, Any]] = {}
    doc: dict[str, Any] = {
        "kind": "capacity",
        "name": grid.name,
        "grid_file": grid.path,
        "varied": [*varied, "rate"],
        "points": [],
    }
    manifest = ManifestWriter(store, doc)
    waiting: dict[str, list[tuple[Search, float]]] = {}
    be = None
    runner: PointRunner | None = None
    total = len(searches) * max_probes(rate_min, rate_max, tolerance)
    bar = Progress("probes", total, 0, progress)

    def entry(spec: PointSpec, status: str) -> dict[str, Any]:
        return {
            "id": spec.id,
            "labels": {k: v for k, v in spec.labels.items() if k in (*varied, "rate")},
            "settings": dict(spec.settings),
            "workload": dict(spec.workload),
            "seed": spec.seed,
            "status": status,
        }

    def submit(search: Search, rate: float) -> None:
        nonlocal be, runner
        spec = search.config.with_rate(rate)
        pid = spec.id
        search.pending.add(rate)
        if pid not in probes:
            probes[pid] = entry(spec, "pending")
            doc["points"].append(probes[pid])
        if statuses.get(pid) == "ok":
            rows = store.read_rows([pid])
            if pid in rows:
                bar.add(cached=1)
                finish(search, rate, rows[pid], pid, None)
                return
        waiting.setdefault(pid, []).append((search, rate))
        if len(waiting[pid]) > 1:
            return
        if runner is None:
            be, n_jobs = open_backend(backend, address, jobs)
            where = "Ray" if be.name == "ray" else "local worker processes"
            say(
                f"capacity {grid.name}: {len(searches)} configurations, SLO {slo.describe()}, "
                f"rates {rate_min:g}-{rate_max:g} req/s, tolerance {tolerance:.0%}; probes on "
                f"{where} ({n_jobs} at a time)"
            )
            runner = PointRunner(be, n_jobs)
        runner.add(spec)

    def finish(
        search: Search, rate: float, row: Mapping[str, Any] | None, pid: str, error: str | None
    ) -> None:
        values = slo_values(row, slo) if row is not None else None
        for nxt in search.record(rate, values, pid, error):
            submit(search, nxt)
        if search.status != "searching":
            # the probes it will not make
            bar.set_total(bar.done + bar.failed + bar.cached + _left(searches))

    def on_outcome(outcome: Outcome) -> None:
        store_outcome(store, outcome)
        pid = outcome.spec.id
        probes[pid]["status"] = "ok" if outcome.ok else "failed"
        probes[pid]["error"] = outcome.error
        bar.add(done=1) if outcome.ok else bar.add(failed=1)
        for search, rate in waiting.pop(pid, []):
            finish(search, rate, outcome.row, pid, outcome.error)
        manifest.maybe()

    manifest.flush()
    try:
        with bar:
            for s in searches:
                s.pending.update(s.first())  # both ends before either result is read
                for rate in s.first():
                    submit(s, rate)
            while runner is not None and runner.busy:
                for outcome in runner.step():
                    on_outcome(outcome)
    except KeyboardInterrupt:
        if be is not None:
            be.close()
        manifest.flush()
        stored = sum(1 for p in probes.values() if p["status"] == "ok")
        raise SweepInterrupted(stored, len(probes)) from None
    except BaseException:
        if be is not None:
            be.close()
        manifest.flush()
        raise
    if be is not None:
        be.close()
    manifest.flush()
    store.write_results(list(probes))
    result = {
        "format": "prefillkit-capacity",
        "version": 1,
        "slo": slo.to_dict(),
        "rate_min": rate_min,
        "rate_max": rate_max,
        "tolerance": tolerance,
        "varied": varied,
        "configs": [s.to_dict(varied) for s in searches],
    }
    import json

    atomic_write_bytes(
        store.root / CAPACITY_FILE, (json.dumps(result, indent=1, allow_nan=False) + "\n").encode()
    )
    return result


def _left(searches: Sequence[Search]) -> int:
    """Upper bound of the probes the unfinished searches may still make."""
    left = 0
    for s in searches:
        if s.status != "searching":
            continue
        if s.lo is None or s.hi is None:
            left += len(s.pending) + max_probes(s.rate_min, s.rate_max, s.tolerance) - 2
        else:
            left += len(s.pending) + max(
                0, math.ceil(math.log2(max(1.0, math.log(s.hi / s.lo) / math.log1p(s.tolerance))))
            )
    return left


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
