"""Message helpers shared by every layer (standard library only), and :func:`lazy_module`."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from types import ModuleType
from typing import Any

__all__ = ["lazy_module", "one_line", "suggest"]


class _LazyModule(ModuleType):
    """A module imported on first attribute access (then its namespace is copied in, so
    later lookups cost what a module's do)."""

    def __getattr__(self, attr: str) -> Any:
        module = self.__dict__.get("_lazy_target")
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__.update(module.__dict__)
            self.__dict__["_lazy_target"] = module
        return getattr(module, attr)


def lazy_module(name: str) -> Any:
    """``name`` (e.g. ``"numpy"``), imported when first used: start-up of a command that
    never touches it (``prefillkit --help``) does not pay its import. Use as
    ``np = lazy_module("numpy")`` beside ``if TYPE_CHECKING: import numpy as np``.

    NOTE: not in a module that setup.py compiles: mypyc takes that ``else`` branch for
    unreachable and the import fails; import numpy inside the functions there."""
    return _LazyModule(name)


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) folded to one space."""
    return " ".join(str(text).split())


def suggest(word: str, candidates: Iterable[str], prefix: str = "") -> str:
    """``" (did you mean '{prefix}{closest}'?)"`` for the closest candidate, or ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""
