"""The grid file of ``prefillkit sweep`` / ``prefillkit capacity`` and its points.

A grid file is TOML (every table optional)::

    [sweep]
    seeds = [0, 1]                # config seeds (the generator's seed too); default [0]

    [base]                        # settings shared by every point
    flags = "--enable-cp-shared-kv-prefill-bs-gt1"   # SGLang-spelled flags, and/or
    max_running_requests = 64     # config fields by name

    [grid]                        # axes: every combination is a point
    chunked_prefill_size = [8192, 16384]
    schedule_policy = ["fcfs", "lpm"]
    rate = [2.0, 4.0]             # workload axes: rate, time_scale, max_requests

    [sample]                      # optional random / Latin-hypercube samples
    method = "lhs"                # or "random"
    n = 8
    seed = 0
    [sample.axes]
    max_prefill_tokens = { low = 4096, high = 65536, log = true }  # integers: int bounds
    affinity_skip_window = [4, 8, 16]                              # a choice

    [[workload]]                  # one or more; default: the built-in agentic generator
    name = "mooncake"
    trace = "../shared/traces/mooncake_fast25/conversation_trace.jsonl"  # relative to this file
    max_requests = 2000
    spread_buckets = true

    [[workload]]
    name = "agentic"
    generator = "agentic"         # agentic | seed | gsp
    num_sessions = 16             # generator parameters by name (as in a [workload] table)

Points: every workload × seed × grid combination × sample (samples and grid axes must
not share a knob). Every problem (unknown knob, empty axis, bad value, a combination the
simulator refuses) is a one-line :class:`~prefillkit.app.sweep.SweepError` naming the file
and the entry, raised before anything runs. The tables' own checks: :mod:`.grid_knobs`
(knob names and values), :mod:`.grid_samples` (``[sample]``), :mod:`.grid_workloads`
(``[[workload]]``).
"""

from __future__ import annotations

import itertools
import os
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefillkit.app.fleet_file import fleet_settings
from prefillkit.app.settings import parse_flags
from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.grid_knobs import WORKLOAD_AXES, check_value, grid_error, knob_name
from prefillkit.app.sweep.grid_samples import samples as _samples
from prefillkit.app.sweep.grid_workloads import workloads as _workloads
from prefillkit.app.sweep.points import PointSpec, config_for
from prefillkit.sim.engine import Engine
from prefillkit.text import one_line, suggest

__all__ = ["Grid", "load_grid", "parse_grid"]

_TOP_KEYS = ("sweep", "base", "grid", "sample", "workload")
_SWEEP_KEYS = ("seeds", "name")


@dataclass(frozen=True, slots=True)
class Grid:
    """A parsed grid file; :meth:`points` expands it (already checked)."""

    path: str
    name: str
    base: Mapping[str, object]
    axes: Mapping[str, tuple[object, ...]]
    samples: tuple[Mapping[str, object], ...]
    workloads: tuple[Mapping[str, Any], ...]
    seeds: tuple[int, ...]
    point_list: tuple[PointSpec, ...] = field(default=())

    def points(self) -> list[PointSpec]:
        return list(self.point_list)

    @property
    def varied(self) -> list[str]:
        """Label names that vary across the points, in display order."""
        out: list[str] = []
        if len(self.workloads) > 1:
            out.append("workload")
        out += [k for k in self.axes if len(self.axes[k]) > 1]
        for s in self.samples[:1]:
            out += [k for k in s if k not in out]
        if len(self.seeds) > 1:
            out.append("seed")
        return out


def _base(path: str, table: object) -> dict[str, object]:
    if not isinstance(table, dict):
        raise grid_error(path, "[base]", "expected a table")
    out: dict[str, object] = {}
    flags = table.get("flags")
    if flags is not None:
        if isinstance(flags, str):
            try:
                argv = shlex.split(flags)
            except ValueError as exc:
                raise grid_error(path, "[base] flags", f"cannot split: {exc}") from None
        elif isinstance(flags, list) and all(isinstance(f, str) for f in flags):
            argv = list(flags)
        else:
            raise grid_error(path, "[base] flags", "expected a string or a list of strings")
        try:
            parsed = parse_flags(argv)
        except ValueError as exc:
            raise grid_error(path, "[base] flags", str(exc)) from None
        out.update(parsed.values)
        out.pop("seed", None)
    for key, value in table.items():
        if key == "flags":
            continue
        name = knob_name(path, "[base]", key, workload_axes=False)
        check_value(path, f"[base] {key}", name, value)
        out[name] = value
    try:
        config_for(out)
    except ValueError as exc:
        raise grid_error(path, "[base]", str(exc)) from None
    return out


def _axes(path: str, table: object) -> dict[str, tuple[object, ...]]:
    if not isinstance(table, dict):
        raise grid_error(path, "[grid]", "expected a table of axes (knob = [values])")
    out: dict[str, tuple[object, ...]] = {}
    for key, values in table.items():
        where = f"[grid] {key}"
        name = knob_name(path, "[grid]", key, workload_axes=True)
        if name in out:
            raise grid_error(path, where, "given twice")
        if not isinstance(values, list):
            raise grid_error(
                path, where, "expected a list of values (a fixed value goes in [base])"
            )
        if not values:
            raise grid_error(path, where, "empty axis: give at least one value")
        seen: list[object] = []
        for value in values:
            check_value(path, where, name, value)
            if any(type(v) is type(value) and v == value for v in seen):
                raise grid_error(path, where, f"value {value!r} given twice")
            seen.append(value)
        out[name] = tuple(values)
    return out


def _seeds(path: str, table: Mapping[str, Any]) -> tuple[int, ...]:
    seeds = table.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise grid_error(path, "[sweep] seeds", "expected a non-empty list of integers")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise grid_error(path, "[sweep] seeds", f"expected integers >= 0, got {s!r}")
    if len(set(seeds)) != len(seeds):
        raise grid_error(path, "[sweep] seeds", "a seed is given twice")
    return tuple(seeds)


def _point(
    path: str,
    base: Mapping[str, object],
    values: Mapping[str, object],
    workload: Mapping[str, Any],
    seed: int,
    labels: Mapping[str, object],
) -> PointSpec:
    settings = dict(base)
    w = dict(workload)
    replay = dict(w["replay"])
    for name, value in values.items():
        if name in WORKLOAD_AXES:
            replay[name] = value
            if name == "rate":
                replay.pop("time_scale", None)
            elif name == "time_scale":
                replay.pop("rate", None)
        else:
            settings[name] = value
    w["replay"] = dict(sorted(replay.items()))
    return PointSpec(dict(sorted(settings.items())), w, seed, dict(labels))


def parse_grid(data: Mapping[str, Any], path: str) -> Grid:
    """Check and expand a parsed grid file (``path`` names it in errors)."""
    for key in data:
        if key not in _TOP_KEYS:
            raise grid_error(
                path, "top level", f"unknown table {key!r}{suggest(key, list(_TOP_KEYS))}"
            )
    sweep = data.get("sweep", {})
    if not isinstance(sweep, dict):
        raise grid_error(path, "[sweep]", "expected a table")
    for key in sweep:
        if key not in _SWEEP_KEYS:
            raise grid_error(
                path, "[sweep]", f"unknown key {key!r}{suggest(key, list(_SWEEP_KEYS))}"
            )
    seeds = _seeds(path, sweep)
    base = _base(path, data.get("base", {}))
    axes = _axes(path, data.get("grid", {}))
    samples = _samples(path, data["sample"], list(axes)) if "sample" in data else ({},)
    workloads = _workloads(path, data.get("workload", [{"name": "agentic"}]))
    names = list(axes)
    points: list[PointSpec] = []
    seen: dict[str, int] = {}
    for w in workloads:
        for seed in seeds:
            for combo in itertools.product(*(axes[n] for n in names)):
                for sample in samples:
                    values = {**dict(zip(names, combo, strict=True)), **sample}
                    labels: dict[str, object] = {"workload": w["name"], **values, "seed": seed}
                    p = _point(path, base, values, w, seed, labels)
                    if p.id in seen:
                        continue  # a sample drawn twice: one point
                    seen[p.id] = len(points)
                    points.append(p)
    _check_points(path, points)
    return Grid(
        path=path,
        name=str(sweep.get("name", Path(path).stem)),
        base=base,
        axes=axes,
        samples=samples,
        workloads=workloads,
        seeds=seeds,
        point_list=tuple(points),
    )


def _check_points(path: str, points: Sequence[PointSpec]) -> None:
    """Every point's config and deployment (cached per distinct settings)."""
    checked: set[str] = set()
    for p in points:
        key = repr(sorted(p.settings.items()))
        if key in checked:
            continue
        checked.add(key)
        try:
            cfg = config_for(p.settings)
            Engine(cfg.sim_settings(), [])
            fleet_settings(cfg)
        except ValueError as exc:
            knobs = " ".join(
                f"{k}={v}" for k, v in p.labels.items() if k not in ("workload", "seed")
            )
            raise grid_error(path, f"point {knobs or '(base)'}", str(exc)) from None


def load_grid(path: str | os.PathLike[str]) -> Grid:
    """Read, check and expand a grid file."""
    p = str(path)
    try:
        text = Path(p).read_bytes().decode("utf-8")
    except OSError as exc:
        raise SweepError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SweepError(f"{p}: not valid UTF-8 text ({exc.reason})") from None
    try:
        data = tomllib.loads(text)
    except ValueError as exc:
        raise SweepError(one_line(f"{p}: invalid TOML: {exc}")) from None
    except RecursionError:  # tomllib recurses once per level of nested arrays / tables
        raise SweepError(f"{p}: invalid TOML: nested too deeply") from None
    return parse_grid(data, p)
