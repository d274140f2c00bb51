"""Errors raised while reading a workload trace."""

from __future__ import annotations

import os

__all__ = ["MAX_MESSAGE", "WorkloadError"]

#: Longest message a ``WorkloadError`` keeps (characters; the path and line come on top).
MAX_MESSAGE = 400


class WorkloadError(ValueError):
    """A trace file cannot be used: names the file and (when known) the 1-based line.

    ``str(err)`` is always one line: ``"{path}:{line}: {msg}"``, or ``"{path}: {msg}"``
    when the problem is not tied to a line (missing file, no requests).
    """

    path: str
    line: int | None
    msg: str

    def __init__(self, path: str | os.PathLike[str], line: int | None, msg: str) -> None:
        self.path = os.fspath(path)
        self.line = line
        # Keep the message on one line, and a readable one, whatever the caller passed (a
        # value quoted from a malformed row may be megabytes long).
        text = " ".join(str(msg).split())
        self.msg = text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
        super().__init__(self.path, line, self.msg)

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.msg}"
        return f"{self.path}:{self.line}: {self.msg}"

    def __repr__(self) -> str:
        return f"WorkloadError({self.path!r}, {self.line!r}, {self.msg!r})"
