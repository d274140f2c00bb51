"""The type of each knob, and the check of a value against it.

Every knob of :class:`~prefillkit.app.knobs.Knobs` has one base type (``int``, ``float``,
``bool`` or ``str``), optionally nullable (``int | None``). :func:`check_type` is the one
check of a value against it, shared by :class:`~prefillkit.app.settings.Config` (at
construction) and the readers of its sources (a config file's settings, flag values):
a wrong type is a one-line :class:`~prefillkit.sched.config.ConfigError` naming the flag
(or the caller's ``prefix``); an int given for a float knob becomes a float.
"""

from __future__ import annotations

import dataclasses
import math
import typing

from prefillkit.app.knobs import Knobs
from prefillkit.sched.config import ConfigError, field_flag
from prefillkit.text import one_line as _one_line

__all__ = ["FIELD_NAMES", "FIELD_TYPES", "NULL_WORDS", "TypeSpec", "check_type"]

TypeSpec = tuple[type, bool]  # (base type, nullable)

#: Words that set a nullable knob to None (in a config file or a flag value).
NULL_WORDS = frozenset({"none", "null"})


def _field_types() -> dict[str, TypeSpec]:
    hints = typing.get_type_hints(Knobs)
    specs: dict[str, TypeSpec] = {}
    for f in dataclasses.fields(Knobs):
        hint = hints[f.name]
        args = typing.get_args(hint)
        if args:
            bases = [a for a in args if a is not type(None)]
            assert len(bases) == 1, f.name
            specs[f.name] = (bases[0], True)
        else:
            specs[f.name] = (hint, False)
    return specs


#: Every knob's name, in declaration order.
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Knobs))
#: Every knob's ``(base type, nullable)``.
FIELD_TYPES: dict[str, TypeSpec] = _field_types()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TYPE_WORDS: dict[type, str] = {
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    str: "a string",
}


def _type_error(name: str, value: object, prefix: str = "") -> ConfigError:
    base, nullable = FIELD_TYPES[name]
    want = _TYPE_WORDS[base] + (" or none" if nullable else "")
    shown = _one_line(repr(value))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    where = prefix or field_flag(name)
    return ConfigError(f"{where}: expected {want}, got {type(value).__name__} {shown}")


def check_type(name: str, value: object, prefix: str = "") -> object:
    """Return ``value`` (floats normalised) if it fits the field's type, else raise."""
    base, nullable = FIELD_TYPES[name]
    if value is None:
        if nullable:
            return None
        raise _type_error(name, value, prefix)
    if base is bool:
        if isinstance(value, bool):
            return value
    elif base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64_MIN <= value <= _INT64_MAX:
                where = prefix or field_flag(name)
                digits = len(str(abs(value)))
                raise ConfigError(
                    f"{where}: must fit in a 64-bit integer, got a {digits}-digit number"
                )
            return value
    elif base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            as_float = float(value)
            if not math.isfinite(as_float):
                where = prefix or field_flag(name)
                raise ConfigError(f"{where}: must be a finite number, got {value}")
            return as_float
    elif base is str:
        if isinstance(value, str):
            return value
    raise _type_error(name, value, prefix)
