"""The ``[sample]`` table of a grid file: random or Latin-hypercube samples of knobs.

``method`` (``random`` or ``lhs``), ``n`` samples, ``seed`` (of ``random.Random``) and
``[sample.axes]``: per knob a range ``{low, high, log}`` (integer bounds draw integers;
``log``: uniform in the logarithm, ``low > 0``) or a list of choices. Per axis, in the
table's order, ``n`` uniforms are drawn: one in each of ``n`` strata in a random order
(``lhs``, an independent permutation per axis) or plain (``random``); a drawn float keeps
6 significant digits. A sampled knob may not also be a ``[grid]`` axis.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from prefillkit.app.sweep.grid_knobs import check_value, grid_error, knob_name
from prefillkit.text import suggest

__all__ = ["samples"]

_SAMPLE_KEYS = ("method", "n", "seed", "axes")


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def samples(path: str, table: object, taken: Sequence[str]) -> tuple[dict[str, object], ...]:
    """The ``n`` samples of the ``[sample]`` table (knob -> value each); ``taken``: the
    ``[grid]`` axes. A bad entry is a one-line error naming it."""
    method, n, seed, axes = _options(path, table)
    rng = random.Random(seed)
    columns: dict[str, list[object]] = {}
    for key, spec in axes.items():
        where = f"[sample.axes] {key}"
        name = knob_name(path, "[sample.axes]", key, workload_axes=True)
        if name in taken:
            raise grid_error(path, where, "also a [grid] axis: a knob is either gridded or sampled")
        if name in columns:
            raise grid_error(path, where, "given twice")
        columns[name] = _column(path, where, name, spec, _uniforms(rng, method, n))
    return tuple({k: v[i] for k, v in columns.items()} for i in range(n))


def _options(path: str, table: object) -> tuple[str, int, int, dict[str, Any]]:
    """``(method, n, seed, axes)`` of the ``[sample]`` table, checked."""
    if not isinstance(table, dict):
        raise grid_error(path, "[sample]", "expected a table")
    for key in table:
        if key not in _SAMPLE_KEYS:
            hint = suggest(key, list(_SAMPLE_KEYS))
            raise grid_error(path, "[sample]", f"unknown key {key!r}{hint}")
    method = table.get("method", "random")
    if method not in ("random", "lhs"):
        raise grid_error(path, "[sample] method", f"expected 'random' or 'lhs', got {method!r}")
    n = table.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise grid_error(path, "[sample] n", f"expected a positive integer, got {n!r}")
    seed = table.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise grid_error(path, "[sample] seed", f"expected an integer, got {seed!r}")
    axes = table.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise grid_error(
            path, "[sample.axes]", "expected a table of knob = {low, high} or [choices]"
        )
    return method, n, seed, axes


def _uniforms(rng: random.Random, method: str, n: int) -> list[float]:
    """``n`` uniforms in [0, 1) for one axis."""
    # strata: an independent permutation per axis (Latin hypercube) or plain uniforms
    if method == "lhs":
        perm = list(range(n))
        rng.shuffle(perm)
        return [(perm[i] + rng.random()) / n for i in range(n)]
    return [rng.random() for _ in range(n)]


def _column(path: str, where: str, name: str, spec: object, us: Sequence[float]) -> list[object]:
    """The values of knob ``name`` at the uniforms ``us``: a choice of the list ``spec``, or
    a point of its range."""
    if isinstance(spec, list):
        if not spec:
            raise grid_error(path, where, "empty choice list")
        for value in spec:
            check_value(path, where, name, value)
        return [spec[min(int(u * len(spec)), len(spec) - 1)] for u in us]
    low, high, log = _range(path, where, spec)
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
        check_value(path, where, name, value)
    return values


def _range(path: str, where: str, spec: object) -> tuple[int | float, int | float, bool]:
    """``(low, high, log)`` of a range ``spec``, checked."""
    if not isinstance(spec, dict):
        raise grid_error(path, where, "expected {low = ..., high = ...} or a list of choices")
    unknown = [k for k in spec if k not in ("low", "high", "log")]
    if unknown:
        raise grid_error(path, where, f"unknown key {unknown[0]!r} (expected low, high, log)")
    low, high, log = spec.get("low"), spec.get("high"), spec.get("log", False)
    nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
    if not nums or not isinstance(log, bool):
        raise grid_error(path, where, "low and high must be numbers (log a boolean)")
    assert isinstance(low, (int, float)) and isinstance(high, (int, float))
    if not low < high or (log and low <= 0):
        raise grid_error(path, where, f"need low < high{' and low > 0 (log)' if log else ''}")
    return low, high, log
