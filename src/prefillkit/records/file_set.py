"""A set of files written as one (a run directory's ``summary.json`` and CSVs): each
file goes to a fresh, fsynced temporary file in the same folder first; then, with SIGINT
and SIGTERM held back, the manifest (``last``) is removed, the others are ``os.replace`` d
into place and the manifest comes last (the rule is :mod:`prefillkit.records.output`'s
module docstring's). Also: the manifest of a set (sizes and SHA-256), the removal of the
temporary files of processes that are gone, and a target that is not a regular file
refused before anything is written.

This runs once per run (not per row): it is interpreted, beside the compiled
:mod:`prefillkit.records.output` that calls it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import signal
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prefillkit.outfile import temp_path, write_text

__all__ = [
    "atomic_write_text",
    "check_targets",
    "commit_temps",
    "file_manifest",
    "remove_stale_temporaries",
    "sigint_held",
    "unlink_quietly",
    "write_file_set",
    "write_temp",
]


def write_temp(target: Path, text: str) -> Path:
    """``text`` (UTF-8) in a fresh, fsynced temporary file beside ``target``; its path."""
    # A fresh name opened with "x" (not mkstemp) so the file gets the umask's permissions.
    tmp = temp_path(target)
    try:
        with open(tmp, "x", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        unlink_quietly(tmp)
        raise
    return tmp


def unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` by :mod:`prefillkit.outfile`'s rules (a regular
    file via a temporary file in the same folder and a rename)."""
    write_text(path, text)


_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]+\.(tmp|part)$")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but not ours (EPERM): alive
        return True
    return True


def remove_stale_temporaries(folder: Path, names: Iterable[str]) -> list[Path]:
    """Remove ``.NAME.<pid>.<hex>.tmp`` files in ``folder`` whose process is gone."""
    wanted = set(names)
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP_NAME.match(entry.name)
        if m is None or m.group("name") not in wanted or _pid_alive(int(m.group("pid"))):
            continue
        with contextlib.suppress(OSError):
            entry.unlink()
            removed.append(entry)
    return removed


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back until the block ends, then deliver the first that
    came to its previous handler.

    A Python-level handler (not ``pthread_sigmask``): it works whichever thread the
    kernel picks for a process-directed signal. A no-op off the main thread.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []

    def hold(signum: int, frame: Any) -> None:
        caught.append((signum, frame))

    previous: dict[int, Any] = {
        sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if caught:
        signum, frame = caught[0]
        old = previous[signum]
        if callable(old):
            old(signum, frame)
        elif old == signal.SIG_DFL and signum == signal.SIGTERM:
            signal.raise_signal(signum)  # its default: the process ends
        elif old == signal.SIG_DFL:
            raise KeyboardInterrupt


def file_manifest(texts: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``{file name: {"bytes": size, "sha256": hex}}`` of UTF-8 ``texts``."""
    out: dict[str, dict[str, Any]] = {}
    for name, text in texts.items():
        data = text.encode("utf-8")
        out[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return out


def write_file_set(folder: Path, texts: Mapping[str, str], last: str) -> None:
    """Write ``texts`` (file name -> text) into ``folder`` as one set; ``last`` (the
    manifest) is removed first and written last. See the module docstring."""
    check_targets(folder, texts)
    remove_stale_temporaries(folder, texts)
    temps: dict[str, Path] = {}
    try:
        for name, text in texts.items():
            temps[name] = write_temp(folder / name, text)
        commit_temps(folder, temps, last)
    finally:
        for tmp in temps.values():
            if tmp.exists():
                unlink_quietly(tmp)


def check_targets(folder: Path, names: Iterable[str]) -> None:
    """Refuse a set whose files exist as anything but regular files (a folder, a link, a
    device, ...): the set is renamed into place as one, never written through a link or
    over a device (prefillkit.outfile's rules for a single file)."""
    for name in names:
        target = folder / name
        if target.is_dir() and not target.is_symlink():
            raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(target))
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.lstat(target).st_mode):
                raise OSError(errno.EINVAL, "not a regular file: refused", str(target))


def commit_temps(folder: Path, temps: Mapping[str, Path], last: str) -> None:
    """Rename the written, fsynced ``temps`` into place, ``last`` last (SIGINT held)."""
    with sigint_held():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / last)
        for name, tmp in temps.items():
            if name != last:
                os.replace(tmp, folder / name)
        os.replace(temps[last], folder / last)
