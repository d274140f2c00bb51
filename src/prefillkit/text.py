"""Message helpers shared by every layer (standard library only)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["one_line", "suggest"]


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) folded to one space."""
    return " ".join(str(text).split())


def suggest(word: str, candidates: Iterable[str], prefix: str = "") -> str:
    """``" (did you mean '{prefix}{closest}'?)"`` for the closest candidate, or ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""
