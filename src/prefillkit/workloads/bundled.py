"""Traces shipped with the package, by name (``--trace mooncake-slice``).

:data:`BUNDLED_TRACES` maps a name to a file of ``prefillkit/data/`` (its SOURCE.md says
where each comes from and under which licence). :func:`resolve_trace` turns a
``--trace`` value into a path: a file or folder that exists is taken as it is (so a
file of the same name in the current folder wins), a bundled name gives the packaged
file, anything else is returned unchanged (the loader then names it as not found).
"""

from __future__ import annotations

import os
from importlib import resources

__all__ = ["BUNDLED_TRACES", "bundled_trace_path", "resolve_trace"]

#: name -> file in ``prefillkit/data/``.
BUNDLED_TRACES: dict[str, str] = {
    "mooncake-slice": "mooncake_conversation_slice.jsonl",
}


def bundled_trace_path(name: str) -> str:
    """The path of bundled trace ``name`` (a ``KeyError`` for an unknown name)."""
    file = BUNDLED_TRACES[name]
    return str(resources.files("prefillkit").joinpath("data").joinpath(file))


def resolve_trace(value: str) -> str:
    """``value`` as a path: itself when it exists or is not a bundled name."""
    if value in BUNDLED_TRACES and not os.path.exists(value):
        return bundled_trace_path(value)
    return value
