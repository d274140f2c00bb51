"""One generator parameter (:class:`GenParam`) and its values: kinds, checks, parsing.

The same description parses a flag's text (:func:`parse_text`) and checks a value from a
TOML ``[workload]`` table (:func:`check_value`), so both give the same one-line errors
(:mod:`prefillkit.workloads.options` describes each generator's parameters with it).

Kinds (:data:`KINDS`): ``int`` and ``float``; ``int_range`` and ``float_range`` (``LO,HI``
on the command line, ``[LO, HI]`` or one number in TOML); ``float_list``, a list of one or
more finite numbers within the bounds (``3,10,15`` on the command line, ``[3, 10, 15]`` or
one number in TOML; a tuple either way); ``choice`` and ``bool``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "GenParam", "check_value", "parse_text", "show_value"]

#: Kinds of parameter value.
KINDS = ("int", "float", "int_range", "float_range", "float_list", "choice", "bool")


@dataclass(frozen=True, slots=True)
class GenParam:
    """One generator keyword argument and the command-line option that sets it.

    ``low`` is the smallest allowed value (both ends of a range, every number of a
    list); ``strict``: ``low`` itself is not allowed; ``high``: the largest allowed value
    (None: unbounded). ``nullable``: the value may be unset (``none`` on the command
    line). ``allow_inf``: a float may be ``inf`` (not in a list). ``cli``: the parameter
    has its own option (``block_size`` is set by the shared ``--block-size``).
    """

    name: str
    flag: str
    kind: str
    help: str
    low: float = 0
    strict: bool = False
    high: float | None = None
    nullable: bool = False
    allow_inf: bool = False
    choices: tuple[str, ...] = ()
    cli: bool = True  # False: set by a shared option (--block-size), not its own flag

    @property
    def dest(self) -> str:
        """The click parameter name of :attr:`flag`."""
        return self.flag.lstrip("-").replace("-", "_")


def show_value(value: object) -> str:
    """``value`` as TOML / JSON spells it (``true``, ``"x"``, ``[1, 2]``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _bound_text(p: GenParam) -> str:
    low = f"> {p.low:g}" if p.strict else f">= {p.low:g}"
    return low if p.high is None else f"{low} and <= {p.high:g}"


def _check_number(p: GenParam, x: float) -> None:
    if math.isnan(x) or (math.isinf(x) and not (p.allow_inf and x > 0)):
        raise ValueError(f"must be a finite number, got {x}")
    too_low = x <= p.low if p.strict else x < p.low
    if too_low or (p.high is not None and x > p.high):
        raise ValueError(f"must be {_bound_text(p)}, got {x:g}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return _is_int(v) or isinstance(v, float)


def _check_pair(p: GenParam, lo: float, hi: float) -> None:
    for x in (lo, hi):
        _check_number(p, x)
    if lo > hi:
        raise ValueError(f"LO must be <= HI, got {lo:g},{hi:g}")


def check_value(p: GenParam, value: object) -> Any:
    """``value`` (a TOML value or a parsed flag) checked for ``p``; returns the value to
    pass to the generator (a range as a tuple). Raises ``ValueError`` without the name."""
    if value is None and p.nullable:
        return None
    if p.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {show_value(value)}")
        return value
    if p.kind == "choice":
        if value not in p.choices:
            raise ValueError(f"expected one of {', '.join(p.choices)}, got {show_value(value)}")
        return value
    if p.kind in ("int_range", "float_range"):
        return _check_range_value(p, value)
    if p.kind == "float_list":
        return _check_list_value(p, value)
    want_int = p.kind == "int"
    if not (_is_int(value) if want_int else _is_number(value)):
        raise ValueError(
            f"expected {'an integer' if want_int else 'a number'}, got {show_value(value)}"
        )
    assert isinstance(value, (int, float))
    _check_number(p, value)
    return value if want_int else float(value)


def _check_range_value(p: GenParam, value: object) -> tuple[Any, Any]:
    is_ok = _is_int if p.kind == "int_range" else _is_number
    what = "integers" if p.kind == "int_range" else "numbers"
    if is_ok(value):
        pair: list[Any] = [value, value]
    elif isinstance(value, (list, tuple)) and len(value) == 2 and all(map(is_ok, value)):
        pair = list(value)
    else:
        raise ValueError(f"expected LO,HI (two {what}) or one number, got {show_value(value)}")
    if p.kind == "float_range":
        pair = [float(x) for x in pair]
    _check_pair(p, pair[0], pair[1])
    return (pair[0], pair[1])


def _check_list_value(p: GenParam, value: object) -> tuple[float, ...]:
    """One number or a list (tuple) of numbers as a tuple of finite floats within
    ``p``'s bounds."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    numbers = tuple(float(x) for x in items if isinstance(x, (int, float)) and _is_number(x))
    if not items or len(numbers) != len(items):
        raise ValueError(f"expected a number or a list of numbers, got {show_value(value)}")
    for x in numbers:
        too_low = x <= p.low if p.strict else x < p.low
        if not math.isfinite(x) or too_low or (p.high is not None and x > p.high):
            raise ValueError(f"must be finite and {_bound_text(p)}, got {x:g}")
    return numbers


def _parse_number(p: GenParam, text: str, want_int: bool) -> int | float:
    t = text.strip()
    try:
        return int(t) if want_int else float(t)
    except ValueError:
        what = "an integer" if want_int else "a number"
        raise ValueError(f"expected {what}, got {text!r}") from None


def parse_text(p: GenParam, text: str) -> Any:
    """A command-line value of ``p`` (``LO,HI`` for ranges, ``N[,N...]`` for lists,
    ``none`` for nullable ones), checked; raises ``ValueError`` without the option name."""
    if p.nullable and text.strip().lower() in ("none", "null"):
        return None
    if p.kind in ("int_range", "float_range"):
        want_int = p.kind == "int_range"
        parts = text.split(",")
        if len(parts) > 2 or not all(s.strip() for s in parts):
            what = "integers" if want_int else "numbers"
            raise ValueError(f"expected LO,HI (two {what}) or one number, got {text!r}")
        nums = [_parse_number(p, s, want_int) for s in parts]
        return check_value(p, nums[0] if len(nums) == 1 else nums)
    if p.kind == "float_list":
        try:
            values = [float(s) for s in text.split(",")]
        except ValueError:
            raise ValueError(f"expected numbers separated by commas, got {text!r}") from None
        return check_value(p, values)
    if p.kind in ("int", "float"):
        return check_value(p, _parse_number(p, text, p.kind == "int"))
    if p.kind == "choice":
        return check_value(p, text)
    raise ValueError(f"{p.flag} takes no value")
