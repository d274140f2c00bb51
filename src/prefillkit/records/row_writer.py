# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Where a streaming run's CSV rows are formatted and written: here, or in a child process.

Formatting the rows of ``requests.csv`` and ``batches.csv`` (``repr`` of some 20 floats a
request, the csv module's quoting, SHA-256 and the writes) is about a sixth of a replay's
time (benchmarks/RESULTS.md). :func:`open_row_files` gives one of two implementations of
:class:`RowFiles`:

- :class:`InlineRowFiles` formats and writes in this process;
- :class:`RowWriterProcess` pickles each batch of rows (about 1/30 of the cost of
  formatting them) into a pipe to a child process running :func:`serve`, which formats,
  hashes and writes them while the event loop runs on, as SGLang's detokenizer runs
  beside its scheduler. The pipe's bounded buffer is the back-pressure: a slow disk slows
  the run; it never grows its memory.

The files are the same, byte for byte, either way (``tests/test_row_writer.py``).
``PREFILLKIT_HELPERS`` chooses (:mod:`prefillkit.helpers`): by default a child process
when this process may run on two or more cores.

The parent creates each file (empty, exclusively: a name clash or a folder it cannot
write fails at once, in the parent); the child fills it. If the child fails (a full
disk), it removes its files, reports the error and exits; the parent raises it as an
``OSError`` at its next write or at :meth:`RowFiles.finish`. If the parent goes away
without finishing (killed), the child removes its files and exits: told at once by a
SIGHUP on Linux (``PR_SET_PDEATHSIG``), else when it reads the end of its input.

NOTE: this module imports only the standard library and :mod:`prefillkit.helpers`: the
child imports them and ``prefillkit/__init__`` alone (``python -I -S``), so it starts in
a few tens of ms.
"""

from __future__ import annotations

import contextlib
import csv
import enum
import errno
import hashlib
import io
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from prefillkit.helpers import die_with_parent, wants_helpers

__all__ = [
    "CsvFile",
    "InlineRowFiles",
    "RowFiles",
    "RowWriterProcess",
    "cell",
    "fast_cell",
    "open_row_files",
    "serve",
]

#: Characters of formatted rows buffered before they are encoded, hashed and written.
FLUSH_CHARS = 1 << 18

_LEN = struct.Struct("<Q")  # a frame: its length, then a pickle
_FINISH = -1  # the frame index that asks the child to finish
_PICKLE = pickle.HIGHEST_PROTOCOL
#: Linux's F_SETPIPE_SZ (fcntl.F_SETPIPE_SZ from Python 3.10, spelled out for typing).
_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20  # /proc/sys/fs/pipe-max-size's default
#: The signal the child gets when its parent ends (it removes its files, then exits).
_PARENT_GONE = signal.SIGHUP


def cell(value: Any) -> str:
    """One CSV cell: empty for None and NaN, ``true``/``false``, ``repr`` of a float (the
    shortest that reads back equal), an enum's value, else ``str``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if value != value else repr(value)  # NaN is empty
    if isinstance(value, int):
        return str(value)
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def fast_cell(value: Any) -> str:
    """:func:`cell`, with the common exact types first (called once a cell)."""
    t = type(value)
    if t is float:
        return "" if value != value else repr(value)
    if t is int:
        return str(value)
    if t is str:
        return value  # type: ignore[no-any-return]
    return cell(value)


class CsvFile:
    """One CSV file being written to ``path`` (which exists, empty): rows are formatted
    into a buffer that is encoded, counted, hashed and written every :data:`FLUSH_CHARS`."""

    def __init__(self, path: str, header: Sequence[str]) -> None:
        self.path = path
        self.fh: IO[bytes] = open(path, "wb")
        self.sha = hashlib.sha256()
        self.bytes = 0
        self.buf = io.StringIO()
        self.writer = csv.writer(self.buf, lineterminator="\n")
        self.writer.writerow(header)

    def write_rows(self, rows: list[list[Any]]) -> None:
        writerow, c = self.writer.writerow, fast_cell
        for row in rows:
            writerow([c(v) for v in row])
        if self.buf.tell() >= FLUSH_CHARS:
            self._flush()

    def _flush(self) -> None:
        data = self.buf.getvalue().encode("utf-8")
        self.buf.seek(0)
        self.buf.truncate(0)
        self.sha.update(data)
        self.bytes += len(data)
        self.fh.write(data)

    def finish(self) -> dict[str, Any]:
        """Write what is buffered, fsync and close: ``{"bytes", "sha256"}`` of the file."""
        self._flush()
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        return {"bytes": self.bytes, "sha256": self.sha.hexdigest()}

    def abandon(self) -> None:
        """Close and remove the file (nothing raised)."""
        with contextlib.suppress(OSError):
            self.fh.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class RowFiles(Protocol):
    """CSV files written batch by batch: file ``index`` of those it was opened with."""

    def write(self, index: int, rows: list[list[Any]]) -> None:
        """Append ``rows`` (lists of cell values) to file ``index``."""
        ...

    def finish(self) -> list[dict[str, Any]]:
        """Complete every file (written, fsynced, closed): ``{"bytes", "sha256"}`` each."""
        ...

    def abandon(self) -> None:
        """Stop; the files are removed (after :meth:`finish`: nothing happens)."""
        ...


def _open_all(specs: Sequence[tuple[str, Sequence[str]]]) -> list[CsvFile]:
    files: list[CsvFile] = []
    try:
        for path, header in specs:
            files.append(CsvFile(path, header))
    except BaseException:
        for f in files:
            f.abandon()
        raise
    return files


class InlineRowFiles:
    """:class:`RowFiles` formatted and written in this process."""

    def __init__(self, specs: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.files = _open_all(specs)
        self.finished = False

    def write(self, index: int, rows: list[list[Any]]) -> None:
        self.files[index].write_rows(rows)

    def finish(self) -> list[dict[str, Any]]:
        out = [f.finish() for f in self.files]
        self.finished = True
        return out

    def abandon(self) -> None:
        if not self.finished:
            for f in self.files:
                f.abandon()


# The child's program: the folder holding the ``prefillkit`` package goes first on its
# path (``-I`` ignores PYTHONPATH and the working folder; ``-S`` skips site-packages);
# then the parent's process id (0: do not watch it).
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from prefillkit.records.row_writer import serve; serve(int(sys.argv[2]))"
)


class RowWriterProcess:
    """:class:`RowFiles` formatted and written by a child process (:func:`serve`)."""

    def __init__(self, specs: Sequence[tuple[str, Sequence[str]]]) -> None:
        root = str(Path(__file__).resolve().parents[2])
        # NOTE: Linux signals a child on the end of the thread that started it: only a
        # child of the main thread (whose end is the process's) watches its parent.
        main = threading.current_thread() is threading.main_thread()
        parent = str(os.getpid() if main else 0)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _CHILD, root, parent],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # NOTE: its own session: a Ctrl-C at the terminal is the parent's alone (it
            # stops the run, which still commits); serve() also ignores SIGINT and
            # SIGTERM. Its stdout and stderr are pipes to the parent, never the
            # parent's own (close_fds): a pipeline the run writes into ends with it.
            start_new_session=True,
        )  # fmt: skip
        assert self.proc.stdin is not None
        self._stdin: IO[bytes] = self.proc.stdin
        with contextlib.suppress(OSError, AttributeError):
            import fcntl

            fcntl.fcntl(self._stdin.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
        self.finished = False
        self._send([(path, list(header)) for path, header in specs])

    def _send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=_PICKLE)
        try:
            self._stdin.write(_LEN.pack(len(data)))
            self._stdin.write(data)
        except (BrokenPipeError, ValueError):  # ValueError: the pipe is closed
            raise self._failure() from None

    def write(self, index: int, rows: list[list[Any]]) -> None:
        self._send((index, rows))

    def finish(self) -> list[dict[str, Any]]:
        self._send((_FINISH, None))
        reply = self._reply()
        if reply[0] != "ok":
            raise _error_of(reply)
        self.finished = True
        manifests: list[dict[str, Any]] = reply[1]
        return manifests

    def abandon(self) -> None:
        """Close the pipe (the child removes its files on the end of its input) and
        wait for the child; kill it if it does not go within 10 s."""
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def _reply(self) -> tuple[Any, ...]:
        """Close the pipe, wait for the child and read its reply."""
        if self._stdin.closed:
            self.proc.stdin = None  # NOTE: communicate() would flush it
        out, err = self.proc.communicate()
        try:
            reply: tuple[Any, ...] = pickle.loads(out)
        except Exception:
            last = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1]
            reply = ("crash", f"exited with code {self.proc.returncode}: {last}".rstrip(": "))
        return reply

    def _failure(self) -> OSError:
        return _error_of(self._reply())


def _error_of(reply: tuple[Any, ...]) -> OSError:
    """The ``OSError`` a child's failure reply stands for."""
    if reply[0] == "oserror":
        _, code, reason, filename = reply
        return OSError(code, reason, filename)
    return OSError(errno.EIO, f"the CSV writer process failed: {reply[-1]}")


def open_row_files(
    specs: Sequence[tuple[str, Sequence[str]]], *, process: bool | None = None
) -> RowFiles:
    """The :class:`RowFiles` for ``specs`` (each an existing empty file's path and its
    header row): in a child process if ``process`` (None: :func:`wants_helpers`)."""
    if process is None:
        process = wants_helpers()
    if process:
        return RowWriterProcess(specs)
    return InlineRowFiles(specs)


# --------------------------------------------------------------------------- the child


def _read_frame(stream: IO[bytes]) -> Any:
    """The next message, or None at the end of the input."""
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (size,) = _LEN.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


class _ParentGone(Exception):
    """The parent ended (:data:`_PARENT_GONE` came)."""


def _parent_gone(signum: int, frame: Any) -> None:
    raise _ParentGone


def serve(parent_pid: int = 0) -> None:
    """The child: read the file specs, then ``(index, rows)`` batches until the finish
    message; reply (one pickle on stdout) with the manifests or the error. If its parent
    ``parent_pid`` (0: not watched) ends first, remove the files and exit."""
    # NOTE: Ctrl-C is the parent's: it stops the run and still commits what was written.
    # So is SIGTERM (a job scheduler's stop reaches every process of the job): the
    # parent stops the run, commits and closes this child's input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if parent_pid:
        signal.signal(_PARENT_GONE, _parent_gone)
        die_with_parent(parent_pid, _PARENT_GONE)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    files: InlineRowFiles | None = None
    reply: tuple[Any, ...]
    try:
        specs = _read_frame(stdin)
        if specs is None:
            return
        files = InlineRowFiles(specs)
        while True:
            message = _read_frame(stdin)
            if message is None:  # the parent gave up: leave nothing behind
                files.abandon()
                return
            index, rows = message
            if index == _FINISH:
                reply = ("ok", files.finish())
                break
            files.write(index, rows)
    except _ParentGone:  # NOTE: nobody reads a reply
        if files is not None:
            files.abandon()
        return
    except OSError as exc:
        if files is not None:
            files.abandon()
        reply = ("oserror", exc.errno, exc.strerror or str(exc), exc.filename)
    except Exception as other:
        if files is not None:
            files.abandon()
        reply = ("error", f"{type(other).__name__}: {other}")
    stdout.write(pickle.dumps(reply, protocol=_PICKLE))
    stdout.flush()
