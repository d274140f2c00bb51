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
and the entry, raised before anything runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import random
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefillkit.app.replay import GENERATORS
from prefillkit.app.settings import Config, parse_flags
from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.points import REPLAY_KEYS, PointSpec, config_for, workload_spec
from prefillkit.sim.engine import Engine
from prefillkit.text import one_line, suggest
from prefillkit.workloads.bundled import BUNDLED_TRACES

__all__ = ["WORKLOAD_AXES", "Grid", "load_grid", "parse_grid"]

_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config) if f.name != "seed")
#: Grid axes that vary the workload (its replay options) rather than the config.
WORKLOAD_AXES: tuple[str, ...] = ("rate", "time_scale", "max_requests")
_TOP_KEYS = ("sweep", "base", "grid", "sample", "workload")
_SWEEP_KEYS = ("seeds", "name")
_SAMPLE_KEYS = ("method", "n", "seed", "axes")
_WORKLOAD_KEYS = ("name", "trace", "format", "block_size", "generator", *REPLAY_KEYS)
_SCALARS = (bool, int, float, str)


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


def _err(path: str, where: str, message: str) -> SweepError:
    return SweepError(one_line(f"{path}: {where}: {message}"))


def _knob_name(path: str, where: str, key: str, *, workload_axes: bool) -> str:
    name = key.replace("-", "_")
    if name == "seed":
        raise _err(path, where, "'seed' is not a knob here: give [sweep] seeds = [...]")
    known = (*_FIELDS, *WORKLOAD_AXES) if workload_axes else _FIELDS
    if name not in known:
        raise _err(path, where, f"unknown knob {key!r}{suggest(name, list(known))}")
    return name


def _check_value(path: str, where: str, name: str, value: object) -> None:
    if not isinstance(value, _SCALARS):
        raise _err(path, where, f"expected a number, string or boolean, got {type(value).__name__}")
    if name in WORKLOAD_AXES:
        try:
            if name == "max_requests" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"max_requests must be an integer, got {value!r}")
            workload_spec({"replay": {name: value}, "generator": "agentic"})
        except ValueError as exc:
            raise _err(path, where, f"bad value {value!r}: {exc}") from None
        return
    try:
        config_for({name: value})
    except ValueError as exc:
        raise _err(path, where, f"bad value {value!r}: {exc}") from None


def _base(path: str, table: object) -> dict[str, object]:
    if not isinstance(table, dict):
        raise _err(path, "[base]", "expected a table")
    out: dict[str, object] = {}
    flags = table.get("flags")
    if flags is not None:
        if isinstance(flags, str):
            try:
                argv = shlex.split(flags)
            except ValueError as exc:
                raise _err(path, "[base] flags", f"cannot split: {exc}") from None
        elif isinstance(flags, list) and all(isinstance(f, str) for f in flags):
            argv = list(flags)
        else:
            raise _err(path, "[base] flags", "expected a string or a list of strings")
        try:
            parsed = parse_flags(argv)
        except ValueError as exc:
            raise _err(path, "[base] flags", str(exc)) from None
        out.update(parsed.values)
        out.pop("seed", None)
    for key, value in table.items():
        if key == "flags":
            continue
        name = _knob_name(path, "[base]", key, workload_axes=False)
        _check_value(path, f"[base] {key}", name, value)
        out[name] = value
    try:
        config_for(out)
    except ValueError as exc:
        raise _err(path, "[base]", str(exc)) from None
    return out


def _axes(path: str, table: object) -> dict[str, tuple[object, ...]]:
    if not isinstance(table, dict):
        raise _err(path, "[grid]", "expected a table of axes (knob = [values])")
    out: dict[str, tuple[object, ...]] = {}
    for key, values in table.items():
        where = f"[grid] {key}"
        name = _knob_name(path, "[grid]", key, workload_axes=True)
        if name in out:
            raise _err(path, where, "given twice")
        if not isinstance(values, list):
            raise _err(path, where, "expected a list of values (a fixed value goes in [base])")
        if not values:
            raise _err(path, where, "empty axis: give at least one value")
        seen: list[object] = []
        for value in values:
            _check_value(path, where, name, value)
            if any(type(v) is type(value) and v == value for v in seen):
                raise _err(path, where, f"value {value!r} given twice")
            seen.append(value)
        out[name] = tuple(values)
    return out


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def _samples(path: str, table: object, taken: Sequence[str]) -> tuple[dict[str, object], ...]:
    if not isinstance(table, dict):
        raise _err(path, "[sample]", "expected a table")
    for key in table:
        if key not in _SAMPLE_KEYS:
            raise _err(path, "[sample]", f"unknown key {key!r}{suggest(key, list(_SAMPLE_KEYS))}")
    method = table.get("method", "random")
    if method not in ("random", "lhs"):
        raise _err(path, "[sample] method", f"expected 'random' or 'lhs', got {method!r}")
    n = table.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise _err(path, "[sample] n", f"expected a positive integer, got {n!r}")
    seed = table.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _err(path, "[sample] seed", f"expected an integer, got {seed!r}")
    axes = table.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise _err(path, "[sample.axes]", "expected a table of knob = {low, high} or [choices]")
    rng = random.Random(seed)
    columns: dict[str, list[object]] = {}
    for key, spec in axes.items():
        where = f"[sample.axes] {key}"
        name = _knob_name(path, "[sample.axes]", key, workload_axes=True)
        if name in taken:
            raise _err(path, where, "also a [grid] axis: a knob is either gridded or sampled")
        if name in columns:
            raise _err(path, where, "given twice")
        # strata: an independent permutation per axis (Latin hypercube) or plain uniforms
        if method == "lhs":
            perm = list(range(n))
            rng.shuffle(perm)
            us = [(perm[i] + rng.random()) / n for i in range(n)]
        else:
            us = [rng.random() for _ in range(n)]
        if isinstance(spec, list):
            if not spec:
                raise _err(path, where, "empty choice list")
            for value in spec:
                _check_value(path, where, name, value)
            columns[name] = [spec[min(int(u * len(spec)), len(spec) - 1)] for u in us]
            continue
        if not isinstance(spec, dict):
            raise _err(path, where, "expected {low = ..., high = ...} or a list of choices")
        unknown = [k for k in spec if k not in ("low", "high", "log")]
        if unknown:
            raise _err(path, where, f"unknown key {unknown[0]!r} (expected low, high, log)")
        low, high, log = spec.get("low"), spec.get("high"), spec.get("log", False)
        nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
        if not nums or not isinstance(log, bool):
            raise _err(path, where, "low and high must be numbers (log a boolean)")
        assert isinstance(low, (int, float)) and isinstance(high, (int, float))
        if not low < high or (log and low <= 0):
            raise _err(path, where, f"need low < high{' and low > 0 (log)' if log else ''}")
        ints = isinstance(low, int) and isinstance(high, int)
        values: list[object] = []
        for u in us:
            x = (
                math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
                if log
                else low + u * (high - low)
            )
            values.append(min(max(round(x), low), high) if ints else _sig(x))
        for value in dict.fromkeys(values):
            _check_value(path, where, name, value)
        columns[name] = values
    return tuple({k: v[i] for k, v in columns.items()} for i in range(n))


def _workloads(path: str, entries: object) -> tuple[dict[str, Any], ...]:
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        raise _err(path, "[[workload]]", "expected one or more [[workload]] tables")
    base_dir = Path(path).parent
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _err(path, f"workload {i + 1}", "expected a table")
        name = entry.get(
            "name", entry.get("generator", "agentic") if "trace" not in entry else None
        )
        if not isinstance(name, str) or not name:
            raise _err(path, f"workload {i + 1}", "missing 'name' (a workload with a trace)")
        where = f"workload {name!r}"
        if name in names:
            raise _err(path, where, "duplicate workload name")
        names.add(name)
        w: dict[str, Any] = {"name": name}
        replay: dict[str, Any] = {}
        gen_args: dict[str, Any] = {}
        for key, value in entry.items():
            key_ = key.replace("-", "_")
            if key_ in REPLAY_KEYS:
                replay[key_] = value
            elif key_ in ("name", "trace", "format", "block_size", "generator"):
                continue
            else:
                gen_args[key_] = value
        trace = entry.get("trace")
        if trace is not None:
            if not isinstance(trace, str) or not trace:
                raise _err(path, f"{where} trace", "expected a file path")
            if gen_args or "generator" in entry:
                bad = next(iter(gen_args), "generator")
                hint = suggest(bad, list(_WORKLOAD_KEYS))
                raise _err(path, where, f"unknown key {bad!r} for a trace workload{hint}")
            # absolute, so that the point id does not depend on the working folder
            resolved = os.path.abspath(trace if os.path.isabs(trace) else base_dir / trace)
            if not os.path.isfile(resolved) and trace in BUNDLED_TRACES:
                resolved = trace  # NOTE: a bundled trace (mooncake-slice), kept by name
            elif not os.path.isfile(resolved):
                bundled = ", ".join(sorted(BUNDLED_TRACES))
                raise _err(path, f"{where} trace", f"no such file: {resolved} (bundled: {bundled})")
            w["trace"] = resolved
            w["format"] = entry.get("format", "auto")
        else:
            generator = entry.get("generator", "agentic")
            if generator not in GENERATORS:
                raise _err(
                    path,
                    f"{where} generator",
                    f"expected one of {', '.join(GENERATORS)}, got {generator!r}",
                )
            w["generator"] = generator
            w["generator_args"] = gen_args
        if "block_size" in entry:
            w["block_size"] = entry["block_size"]
        w["replay"] = replay
        try:
            workload_spec(w, where=f"{path}: {where}")
        except ValueError as exc:
            message = str(exc)
            if not message.startswith(path):
                message = f"{path}: {where}: {message}"
            raise SweepError(one_line(message)) from None
        out.append(w)
    return tuple(out)


def _seeds(path: str, table: Mapping[str, Any]) -> tuple[int, ...]:
    seeds = table.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise _err(path, "[sweep] seeds", "expected a non-empty list of integers")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise _err(path, "[sweep] seeds", f"expected integers >= 0, got {s!r}")
    if len(set(seeds)) != len(seeds):
        raise _err(path, "[sweep] seeds", "a seed is given twice")
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
            raise _err(path, "top level", f"unknown table {key!r}{suggest(key, list(_TOP_KEYS))}")
    sweep = data.get("sweep", {})
    if not isinstance(sweep, dict):
        raise _err(path, "[sweep]", "expected a table")
    for key in sweep:
        if key not in _SWEEP_KEYS:
            raise _err(path, "[sweep]", f"unknown key {key!r}{suggest(key, list(_SWEEP_KEYS))}")
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
        except ValueError as exc:
            knobs = " ".join(
                f"{k}={v}" for k, v in p.labels.items() if k not in ("workload", "seed")
            )
            raise _err(path, f"point {knobs or '(base)'}", str(exc)) from None


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
