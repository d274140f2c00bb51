"""Writing one output file safely: the helper every prefillkit writer uses.

What is at the path decides how it is written:

- nothing, or a regular file: a fresh temporary file in the same folder
  (``.NAME.<pid>.<hex>.tmp``), fsynced, then renamed over the path, so a reader (or a
  killed run) sees the old file or the new one, never half of one;
- a symlink: followed to its final target, which is written by these rules (the link
  stays a link);
- a character device or a FIFO (``/dev/null``, ``/dev/stdout``, a named pipe): written
  in place, never replaced by a regular file;
- a folder, a socket or a block device: refused (a disk written in place is never what
  an output path means).

Every error is an ``OSError`` whose ``filename`` is the path as given, so the CLI prints
``prefillkit: error: PATH: <reason>`` (exit 2); the temporary file is removed.

NOTE: standard library only (imported by the core-free simulator and the app layer).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["OutputFile", "open_output", "resolve_output", "temp_path", "write_bytes", "write_text"]


def temp_path(target: Path, suffix: str = "tmp") -> Path:
    """A fresh temporary name beside ``target``: ``.NAME.<pid>.<hex>.<suffix>``."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.{suffix}")


def _refused(path: str, what: str) -> OSError:
    return OSError(errno.EINVAL, f"{what}: refused (give a file path)", path)


def resolve_output(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """``(where to write, in place)`` for ``path`` by the module's rules; ``OSError``
    naming ``path`` for a folder, a socket or a block device."""
    given = os.fspath(path)
    target = Path(os.path.realpath(given)) if os.path.islink(given) else Path(given)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target, False
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, given) from None
    if stat.S_ISREG(mode):
        return target, False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return target, True
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", given)
    kind = "a socket" if stat.S_ISSOCK(mode) else "a block device"
    raise _refused(given, f"is {kind}")


def _open_existing(path: str, flags: int) -> int:
    return os.open(path, flags & ~(os.O_TRUNC | os.O_CREAT))


class OutputFile:
    """One output being written: ``fh`` is open for writing; :meth:`commit` completes it
    (renamed into place, or flushed to the device / FIFO), :meth:`discard` drops it.

    ``binary`` selects bytes or UTF-8 text (``newline`` as :func:`open`'s).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        binary: bool = False,
        newline: str | None = "",
        suffix: str = "tmp",
    ) -> None:
        self.given = os.fspath(path)
        self.target, self.in_place = resolve_output(path)
        #: The temporary file (None when written in place).
        self.part: Path | None = None if self.in_place else temp_path(self.target, suffix)
        where = self.target if self.part is None else self.part
        mode = "w" if self.in_place else "x"
        # In place: neither O_TRUNC nor O_CREAT (a device or FIFO is opened as it is; one
        # that vanished since the check is an error, never a new regular file).
        opener = _open_existing if self.in_place else None
        try:
            if binary:
                self.fh: IO[Any] = open(where, mode + "b", opener=opener)
            else:
                self.fh = open(where, mode, encoding="utf-8", newline=newline, opener=opener)
        except OSError as exc:
            raise self.named(exc) from None
        self._open = True

    def named(self, exc: OSError) -> OSError:
        """``exc`` as an ``OSError`` of the same kind naming the path as given."""
        if exc.filename == self.given:
            return exc
        return type(exc)(exc.errno, exc.strerror or str(exc), self.given)

    def commit(self) -> None:
        """Flush (fsync a regular file) and put the output in place; on error the target
        is left as it was and the error names the path."""
        try:
            self.fh.flush()
            if self.part is not None:
                os.fsync(self.fh.fileno())
            self._open = False
            self.fh.close()
            if self.part is not None:
                os.replace(self.part, self.target)
                self.part = None
        except OSError as exc:
            self.discard()
            raise self.named(exc) from None
        except BaseException:  # Ctrl-C mid-commit: no temporary left either
            self.discard()
            raise

    def discard(self) -> None:
        """Close and remove the temporary file (nothing to do after :meth:`commit`)."""
        if self._open:
            self._open = False
            with contextlib.suppress(OSError):
                self.fh.close()
        if self.part is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.part)
            self.part = None


@contextlib.contextmanager
def open_output(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """``with open_output(p) as fh:``: committed when the block ends, discarded (the
    target untouched) when it raises; a write error names ``p``."""
    out = OutputFile(path, binary=binary)
    try:
        yield out.fh
    except OSError as exc:
        out.discard()
        raise out.named(exc) from None
    except BaseException:
        out.discard()
        raise
    out.commit()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` by the module's rules."""
    with open_output(path) as fh:
        fh.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` by the module's rules."""
    with open_output(path, binary=True) as fh:
        fh.write(data)
