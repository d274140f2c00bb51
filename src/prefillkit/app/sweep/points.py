"""A sweep point: its canonical spec, its stable id, and the replay of one point.

A point is ``(settings, workload, seed)``:

- ``settings``: config field name → value (the grid's ``[base]`` plus the point's axis
  values), applied as SGLang-spelled flags over the default deployment, exactly as
  ``prefillkit replay --preset demo`` would take them (:func:`prefillkit.app.launch.build_config`);
- ``workload``: a JSON-ready description (name, trace path or generator and its
  parameters, replay options);
- ``seed``: the config seed (the generator's seed too).

The point id is a hash of the canonical JSON of the three (sorted keys, no spaces), so it
does not depend on where the point sits in a grid: a changed grid reuses the points it
shares with the old one. :func:`run_point` is what a worker runs; it never raises, it
returns ``("ok", row)`` or ``("error", one line)``. The row holds the point's identity, every
resolved config field, every scalar summary metric and the completed requests' TTFTs
(``ttft_s``), so any percentile or goodput can be computed later from the store.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefillkit import __version__
from prefillkit.app.compare import setting_text
from prefillkit.app.fleet_file import fleet_settings
from prefillkit.app.launch import build_config
from prefillkit.app.replay import (
    WorkloadSpec,
    make_replay_options,
    open_workload,
    run_replay,
    with_stated_decode_rate,
)
from prefillkit.app.settings import Config, describe, field_flag
from prefillkit.sim.engine import Engine
from prefillkit.text import one_line
from prefillkit.workloads.generators import merge_agentic_args
from prefillkit.workloads.options import WorkloadTable

__all__ = [
    "REPLAY_KEYS",
    "PointSpec",
    "config_for",
    "point_id",
    "run_point",
    "workload_spec",
]

#: Replay options of a workload (TOML key → ``make_replay_options`` keyword).
REPLAY_KEYS: dict[str, str] = {
    "time_scale": "time_scale",
    "rate": "rate",
    "max_requests": "max_requests",
    "start": "start_s",
    "duration": "duration_s",
    "spread_buckets": "spread_buckets",
    "skip_bad_rows": "skip_bad_rows",
}


def config_for(settings: Mapping[str, object], seed: int | None = None) -> Config:
    """The Config of ``settings`` (field → value) over the demo deployment (``--preset
    demo``: its values the settings contradict are dropped).

    Raises ``ConfigError`` (one line, names the flag).
    """
    flags = [f"{field_flag(k)}={setting_text(v)}" for k, v in settings.items()]
    if seed is not None:
        flags.append(f"--seed={seed}")
    return build_config(None, flags, preset="demo").config


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def point_id(settings: Mapping[str, object], workload: Mapping[str, Any], seed: int) -> str:
    """The stable id: 16 hex digits of the SHA-256 of the canonical point spec and the
    prefillkit version (a point stored by another version is recomputed, not reused)."""
    doc = {
        "settings": dict(settings),
        "workload": dict(workload),
        "seed": seed,
        "prefillkit": __version__,
    }
    return hashlib.sha256(_canonical(doc).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PointSpec:
    """One point. ``labels`` (axis → value) only name it in tables; not part of the id."""

    settings: Mapping[str, object]
    workload: Mapping[str, Any]
    seed: int
    labels: Mapping[str, object] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return point_id(self.settings, self.workload, self.seed)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (goes to worker tasks and into the manifest)."""
        return {
            "id": self.id,
            "settings": dict(self.settings),
            "workload": dict(self.workload),
            "seed": self.seed,
            "labels": dict(self.labels),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PointSpec:
        return cls(
            settings=dict(data["settings"]),
            workload=dict(data["workload"]),
            seed=int(data["seed"]),
            labels=dict(data.get("labels", {})),
        )

    def with_rate(self, rate: float) -> PointSpec:
        """The same point at another request rate (capacity probes)."""
        workload = dict(self.workload)
        replay = dict(workload.get("replay", {}))
        replay.pop("time_scale", None)
        replay["rate"] = rate
        workload["replay"] = replay
        return PointSpec(self.settings, workload, self.seed, {**self.labels, "rate": rate})


def workload_spec(workload: Mapping[str, Any], where: str = "workload") -> WorkloadSpec:
    """The runner's ``WorkloadSpec`` of a canonical workload description.

    Raises ``InputError`` / ``WorkloadTableError`` (one line) for bad values.
    """
    replay_kw = {REPLAY_KEYS[k]: v for k, v in dict(workload.get("replay", {})).items()}
    replay = make_replay_options(**replay_kw)
    trace = workload.get("trace")
    block_size = workload.get("block_size")
    if trace is not None:
        return WorkloadSpec(
            trace=str(trace),
            fmt=str(workload.get("format", "auto")),
            block_size=block_size,
            replay=replay,
        )
    generator = str(workload.get("generator", "agentic"))
    table = WorkloadTable(where, generator, dict(workload.get("generator_args", {})))
    args = table.args_for(generator)
    if generator != "gsp":
        args = merge_agentic_args({}, args)  # the seed preset is merged by the runner
    labels = {name: table.label(name) for name in args}
    return WorkloadSpec(
        generator=generator,
        generator_args=args,
        block_size=block_size,
        replay=replay,
        arg_labels=labels,
    )


# --------------------------------------------------------------------------- the task

#: Summary fields that are not one number per run (or not deterministic).
DROPPED_METRICS: frozenset[str] = frozenset({"windows", "wall_time_s"})
#: Summary fields holding a list (stored as JSON text).
LIST_METRICS: frozenset[str] = frozenset({"saturated_windows", "overloaded_windows"})


def _hooks_before(hooks: Mapping[str, str], pid_: str) -> None:
    """The tests' fault hooks (``run_sweep(hooks=...)``, see ``backend.FaultHooks``): log
    each task start; kill the worker process on its first attempt at each point."""
    log = hooks.get("task_log")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {pid_}\n".encode())
        finally:
            os.close(fd)
    crash_dir = hooks.get("crash_once")
    if crash_dir:
        marker = os.path.join(crash_dir, pid_)
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


def run_point(point: Mapping[str, Any], hooks: Mapping[str, str] | None = None) -> tuple[Any, ...]:
    """Replay one point; ``("ok", row, wall_s)`` or ``("error", message, wall_s)``.

    Never raises for a bad point: the message is one line (the error a ``replay`` with
    the same settings would print).
    """
    t0 = time.perf_counter()
    spec = PointSpec.from_dict(point)
    pid_ = spec.id
    _hooks_before(hooks or {}, pid_)
    try:
        cfg = config_for(spec.settings, spec.seed)
        wspec = workload_spec(spec.workload, where=f"workload {spec.workload.get('name')!r}")
        # NOTE: streamed, as `prefillkit replay` runs: a point's memory is its live
        # requests plus the kept columns, whatever the trace's length. No helper
        # process: the sweep's workers already have a core each.
        stream = open_workload(
            wspec, page_size=cfg.resolved_page_size, seed=cfg.seed, helpers=False
        )
        engines: list[Engine] = []
        stated = with_stated_decode_rate(cfg, wspec)
        result = run_replay(
            stated.sim_settings(),
            stream.requests,
            progress=False,
            handle_sigint=False,
            on_start=engines.append,
            scheduler=cfg.scheduler,
            fleet=fleet_settings(stated),
        )
        info = stream.finish_info(int(result.summary["requests"]))
    except (ValueError, OSError, MemoryError) as exc:
        return ("error", one_line(str(exc) or type(exc).__name__), time.perf_counter() - t0)
    except Exception as exc:  # a bug: still one line, the point is recorded as failed
        return ("error", one_line(f"{type(exc).__name__}: {exc}"), time.perf_counter() - t0)
    collector = engines[0].collector
    assert collector is not None  # NOTE: a streaming run always has one
    ttft = collector.ttft_values()
    collector.release()
    row = point_row(spec, cfg, info, result.summary, ttft, bool(result.partial))
    return ("ok", row, time.perf_counter() - t0)


def point_row(
    spec: PointSpec,
    cfg: Config,
    workload_info: Mapping[str, Any],
    summary: Mapping[str, Any],
    ttft: Sequence[float],
    partial: bool,
) -> dict[str, Any]:
    """The stored row of a finished point (see :mod:`.store` for the schema)."""
    w = spec.workload
    replay = dict(w.get("replay", {}))
    row: dict[str, Any] = {
        "point_id": spec.id,
        "status": "ok",
        "error": None,
        "workload": w.get("name"),
        "workload_source": str(workload_info.get("source", "")),
        "rate": replay.get("rate"),
        "time_scale": replay.get("time_scale"),
        "seed": spec.seed,
        "settings_json": _canonical(dict(spec.settings)),
        "workload_json": _canonical(dict(w)),
        "partial": partial,
    }
    for name, value in describe(cfg).items():
        row[f"cfg_{name}"] = value
    for name, value in summary.items():
        if name in DROPPED_METRICS:
            continue
        if name in LIST_METRICS:
            row[name] = _canonical(list(value or []))
        elif isinstance(value, float) and not math.isfinite(value):
            row[name] = None
        else:
            row[name] = value
    row["ttft_s"] = [float(t) for t in ttft]
    return row


def failed_row(spec: PointSpec, message: str) -> dict[str, Any]:
    """The stored row of a point that failed (twice)."""
    w = spec.workload
    replay = dict(w.get("replay", {}))
    return {
        "point_id": spec.id,
        "status": "failed",
        "error": message,
        "workload": w.get("name"),
        "workload_source": "",
        "rate": replay.get("rate"),
        "time_scale": replay.get("time_scale"),
        "seed": spec.seed,
        "settings_json": _canonical(dict(spec.settings)),
        "workload_json": _canonical(dict(w)),
        "partial": False,
    }
