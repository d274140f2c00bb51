"""Append-only columns whose full chunks go to a temporary file: memory flat in the run.

A streaming replay keeps, per request and per batch, the few numbers its summary needs
(:mod:`prefillkit.records.collector`). :class:`SpillColumns` holds a group of columns that
grow together (one row at a time, every column appended once): the rows since the
last spill in ``array`` buffers (:attr:`SpillColumns.tails`, appended to directly on
the hot path), and every :data:`CHUNK_ROWS` rows the buffers' bytes go to one unlinked
temporary file per column (``tempfile.TemporaryFile``: removed by the system however the
process ends) and the buffers are emptied in place. Reading (:meth:`SpillColumns.read`,
:meth:`SpillColumns.chunks`) gives numpy arrays of at most a chunk's rows at a time,
from the file (``os.pread``) and then the buffer; a run that never fills a chunk
creates no file.

NOTE: only whole rows are read: every column of a group has :meth:`__len__` values
between two appends of a row (the caller appends each column once per row).
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from prefillkit.text import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

__all__ = ["CHUNK_ROWS", "SpillColumns", "SpillError"]

#: Rows buffered in memory before they go to the files (1.5 MB for the request
#: columns' 25 bytes a row).
CHUNK_ROWS: int = 1 << 16

#: array typecode -> numpy dtype.
_DTYPES: dict[str, str] = {"d": "f8", "b": "i1", "q": "i8"}


class SpillError(OSError):
    """The columns could not be written to (or read back from) the temporary directory;
    the message is one line naming it."""


def _failed(exc: OSError, what: str) -> SpillError:
    where = tempfile.gettempdir()
    reason = exc.strerror or str(exc) or type(exc).__name__
    return SpillError(
        exc.errno, f"cannot {what} the run's summary columns in {where} (set TMPDIR): {reason}"
    )


class SpillColumns:
    """Named columns of machine numbers (``array`` typecodes ``d``, ``b``, ``q``)."""

    def __init__(self, columns: dict[str, str], chunk_rows: int = CHUNK_ROWS) -> None:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.names = tuple(columns)
        self.typecodes = tuple(columns.values())
        self.chunk_rows = chunk_rows
        #: The buffers, in ``names`` order: append one value to each per row, then call
        #: :meth:`row_added`.
        self.tails: tuple[array, ...] = tuple(array(t) for t in self.typecodes)
        self._files: list[IO[bytes]] | None = None
        self._spilled = 0  # rows in the files

    def __len__(self) -> int:
        return self._spilled + len(self.tails[0])

    def row_added(self) -> None:
        """After each row: spill the buffers once they hold a chunk."""
        if len(self.tails[0]) >= self.chunk_rows:
            self.spill()

    def spill(self) -> None:
        """Write the buffered rows to the files and empty the buffers (in place)."""
        tails = self.tails
        if not tails[0]:
            return
        rows = len(tails[0])
        try:
            if self._files is None:
                self._files = [tempfile.TemporaryFile(prefix="prefillkit-") for _ in tails]
            for f, tail in zip(self._files, tails, strict=True):
                if len(tail) != rows:
                    raise RuntimeError(f"column lengths differ: {len(tail)} != {rows}")
                f.write(memoryview(tail).cast("B"))
                f.flush()
        except OSError as exc:
            raise _failed(exc, "write") from None
        for tail in tails:
            del tail[:]
        self._spilled += rows

    def close(self) -> None:
        """Remove the files (the columns become empty)."""
        for f in self._files or ():
            f.close()
        self._files = None
        self._spilled = 0
        for tail in self.tails:
            del tail[:]

    def read(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` of one column (a new array)."""
        i = self.names.index(name)
        n = len(self)
        lo, hi = max(lo, 0), min(hi, n)
        dtype = np.dtype(_DTYPES[self.typecodes[i]])
        if hi <= lo:
            return np.zeros(0, dtype=dtype)
        parts: list[np.ndarray] = []
        if lo < self._spilled:
            f = self._files[i]  # type: ignore[index]
            end = min(hi, self._spilled)
            size = dtype.itemsize
            try:
                data = os.pread(f.fileno(), (end - lo) * size, lo * size)
            except OSError as exc:
                raise _failed(exc, "read") from None
            if len(data) != (end - lo) * size:
                raise SpillError(f"cannot read the run's summary columns: {name!r} is short")
            parts.append(np.frombuffer(data, dtype=dtype))
        if hi > self._spilled:
            tail = np.frombuffer(self.tails[i], dtype=dtype)
            parts.append(tail[max(lo - self._spilled, 0) : hi - self._spilled].copy())
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def chunks(self, name: str, lo: int = 0, hi: int | None = None) -> Iterator[np.ndarray]:
        """Rows ``[lo, hi)`` (default: all) of one column, at most a chunk at a time."""
        stop = len(self) if hi is None else min(hi, len(self))
        for a in range(lo, stop, self.chunk_rows):
            yield self.read(name, a, min(a + self.chunk_rows, stop))

    def column(self, name: str) -> np.ndarray:
        """The whole column in memory (for what needs it all: small runs, tests)."""
        return self.read(name, 0, len(self))
