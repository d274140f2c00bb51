"""The ``[[workload]]`` tables of a grid file: each a trace or a built-in generator.

A table has a ``name`` (a generator's defaults to the generator), a ``trace`` (a path,
relative to the grid file, or a bundled trace by name) with its ``format``, or a
``generator`` (default ``agentic``) with its parameters by name; ``block_size`` and the
replay options (``rate``, ``max_requests``, ...) apply to both. Each is checked as
``prefillkit replay`` would open it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefillkit.app.replay import GENERATORS
from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.grid_knobs import grid_error
from prefillkit.app.sweep.points import REPLAY_KEYS, workload_spec
from prefillkit.text import one_line, suggest
from prefillkit.workloads.bundled import BUNDLED_TRACES

__all__ = ["workloads"]

_WORKLOAD_KEYS = ("name", "trace", "format", "block_size", "generator", *REPLAY_KEYS)


def workloads(path: str, entries: object) -> tuple[dict[str, Any], ...]:
    """The workloads of the ``[[workload]]`` tables (one table alone is one), checked."""
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        raise grid_error(path, "[[workload]]", "expected one or more [[workload]] tables")
    base_dir = Path(path).parent
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, entry in enumerate(entries):
        out.append(_workload(path, i, entry, names, base_dir))
    return tuple(out)


def _workload(path: str, i: int, entry: object, names: set[str], base_dir: Path) -> dict[str, Any]:
    """The ``i``-th table as a workload (its name added to ``names``)."""
    if not isinstance(entry, dict):
        raise grid_error(path, f"workload {i + 1}", "expected a table")
    name = _name(path, i, entry, names)
    where = f"workload {name!r}"
    w: dict[str, Any] = {"name": name}
    replay, gen_args = _split_keys(entry)
    if entry.get("trace") is not None:
        w.update(_trace_source(path, where, entry, gen_args, base_dir))
    else:
        w.update(_generator_source(path, where, entry, gen_args))
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
    return w


def _name(path: str, i: int, entry: Mapping[str, Any], names: set[str]) -> str:
    """The table's workload name, new among ``names`` (and added to them)."""
    name = entry.get("name", entry.get("generator", "agentic") if "trace" not in entry else None)
    if not isinstance(name, str) or not name:
        raise grid_error(path, f"workload {i + 1}", "missing 'name' (a workload with a trace)")
    if name in names:
        raise grid_error(path, f"workload {name!r}", "duplicate workload name")
    names.add(name)
    return name


def _split_keys(entry: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(replay options, generator parameters)`` of the table (``-`` read as ``_``)."""
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
    return replay, gen_args


def _trace_source(
    path: str, where: str, entry: Mapping[str, Any], gen_args: Mapping[str, Any], base_dir: Path
) -> dict[str, Any]:
    """``{"trace": absolute path or bundled name, "format": ...}`` of a trace workload."""
    trace = entry.get("trace")
    if not isinstance(trace, str) or not trace:
        raise grid_error(path, f"{where} trace", "expected a file path")
    if gen_args or "generator" in entry:
        bad = next(iter(gen_args), "generator")
        hint = suggest(bad, list(_WORKLOAD_KEYS))
        raise grid_error(path, where, f"unknown key {bad!r} for a trace workload{hint}")
    # absolute, so that the point id does not depend on the working folder
    resolved = os.path.abspath(trace if os.path.isabs(trace) else base_dir / trace)
    if not os.path.isfile(resolved) and trace in BUNDLED_TRACES:
        resolved = trace  # NOTE: a bundled trace (mooncake-slice), kept by name
    elif not os.path.isfile(resolved):
        bundled = ", ".join(sorted(BUNDLED_TRACES))
        raise grid_error(path, f"{where} trace", f"no such file: {resolved} (bundled: {bundled})")
    return {"trace": resolved, "format": entry.get("format", "auto")}


def _generator_source(
    path: str, where: str, entry: Mapping[str, Any], gen_args: dict[str, Any]
) -> dict[str, Any]:
    """``{"generator": name, "generator_args": parameters}`` of a generator workload."""
    generator = entry.get("generator", "agentic")
    if generator not in GENERATORS:
        raise grid_error(
            path,
            f"{where} generator",
            f"expected one of {', '.join(GENERATORS)}, got {generator!r}",
        )
    return {"generator": generator, "generator_args": gen_args}
