"""What every console table shares: the stdout console, a plain line, and the value
formatters (counts, seconds, percentages, floats, tokens; ``-`` for a missing value).

rich loads when a console is made, not on import (``prefillkit --help`` never needs it).
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "fmt_count",
    "fmt_float",
    "fmt_pct",
    "fmt_seconds",
    "fmt_tokens",
    "make_console",
    "plain",
]


def make_console() -> Console:
    """A stdout console; 120 columns wide when stdout is not a terminal (unless COLUMNS)."""
    from rich.console import Console

    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=120)


def plain(console: Console, text: str) -> None:
    """One line printed as is: no markup, no highlighting."""
    console.print(text, markup=False, highlight=False)


# --------------------------------------------------------------------------- formatting


def fmt_count(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def _finite(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def fmt_seconds(value: Any) -> str:
    if not _finite(value):
        return "-"
    if abs(value) < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:,.3f} s"


def fmt_pct(value: Any) -> str:
    if not _finite(value):
        return "-"
    return f"{value * 100:.2f} %"


def fmt_float(value: Any, digits: int = 2) -> str:
    if not _finite(value):
        return "-"
    return f"{value:,.{digits}f}"


def fmt_tokens(value: Any) -> str:
    return "-" if value is None else f"{int(value):,} tok"
