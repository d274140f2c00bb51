"""The knobs of a grid file: which names a table may set, and whether a value is one the
simulator accepts (each checked alone, before any point is expanded).

A knob is a :class:`~prefillkit.app.settings.Config` field (not ``seed``: ``[sweep]
seeds``) or, on an axis, one of :data:`WORKLOAD_AXES`, which vary the workload's replay
options instead. Every problem is a one-line :class:`~prefillkit.app.sweep.SweepError`
naming the file and the entry (:func:`grid_error`).
"""

from __future__ import annotations

import dataclasses

from prefillkit.app.settings import Config
from prefillkit.app.sweep import SweepError
from prefillkit.app.sweep.points import config_for, workload_spec
from prefillkit.text import one_line, suggest

__all__ = ["CONFIG_FIELDS", "WORKLOAD_AXES", "check_value", "grid_error", "knob_name"]

#: The config fields a grid may set (every one but ``seed``).
CONFIG_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Config) if f.name != "seed"
)
#: Grid axes that vary the workload (its replay options) rather than the config.
WORKLOAD_AXES: tuple[str, ...] = ("rate", "time_scale", "max_requests")
_SCALARS = (bool, int, float, str)


def grid_error(path: str, where: str, message: str) -> SweepError:
    """The one-line error ``PATH: WHERE: MESSAGE``."""
    return SweepError(one_line(f"{path}: {where}: {message}"))


def knob_name(path: str, where: str, key: str, *, workload_axes: bool) -> str:
    """The knob ``key`` names (``-`` read as ``_``); an error for ``seed`` or an unknown
    name (:data:`WORKLOAD_AXES` are known only with ``workload_axes``)."""
    name = key.replace("-", "_")
    if name == "seed":
        raise grid_error(path, where, "'seed' is not a knob here: give [sweep] seeds = [...]")
    known = (*CONFIG_FIELDS, *WORKLOAD_AXES) if workload_axes else CONFIG_FIELDS
    if name not in known:
        raise grid_error(path, where, f"unknown knob {key!r}{suggest(name, list(known))}")
    return name


def check_value(path: str, where: str, name: str, value: object) -> None:
    """Raise unless ``value`` is a scalar the knob ``name`` accepts on its own."""
    if not isinstance(value, _SCALARS):
        raise grid_error(
            path, where, f"expected a number, string or boolean, got {type(value).__name__}"
        )
    if name in WORKLOAD_AXES:
        try:
            if name == "max_requests" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"max_requests must be an integer, got {value!r}")
            workload_spec({"replay": {name: value}, "generator": "agentic"})
        except ValueError as exc:
            raise grid_error(path, where, f"bad value {value!r}: {exc}") from None
        return
    try:
        config_for({name: value})
    except ValueError as exc:
        raise grid_error(path, where, f"bad value {value!r}: {exc}") from None
