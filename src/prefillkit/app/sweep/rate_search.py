"""The SLO of ``prefillkit capacity`` and one configuration's bisection of the rate.

:class:`Slo` is the bound a probe must meet (a TTFT percentile and/or a goodput),
:func:`slo_values` checks a stored probe against it (a request without a first token
counts as an infinite TTFT), and :class:`Search` is one configuration's bisection: both
ends of the range first, then geometric midpoints (6 significant digits) until ``hi / lo
<= 1 + tolerance`` (:mod:`prefillkit.app.sweep.capacity` describes the search).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.points import PointSpec

__all__ = ["Search", "Slo", "max_probes", "probes_left", "slo_values"]


@dataclass(frozen=True, slots=True)
class Slo:
    """The SLO a probe must meet: the ``percentile``-th TTFT at most ``ttft_s`` and/or a
    fraction ``goodput`` of the requests within ``goodput_ttft_s`` (default ``ttft_s``)."""

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
    """The most probes one search of ``[rate_min, rate_max]`` makes: both ends, then the
    bisections down to ``tolerance``."""
    k = math.ceil(math.log2(math.log(rate_max / rate_min) / math.log1p(tolerance)))
    return 2 + max(0, k)


def probes_left(searches: Sequence[Search]) -> int:
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
