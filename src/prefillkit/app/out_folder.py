"""One writer per ``--out`` folder: the lock that ``replay``, ``compare`` and ``sweep`` take.

A command that writes a folder claims it first (:meth:`OutFolder.claim`): the folder is
created if needed and locked with ``flock`` on the folder itself (no lock file is left
behind). A second prefillkit command claiming the same folder, whichever command it is,
gets one line naming the folder and exit 2 instead of mixing its results with the first
one's. The lock is the kernel's: it ends with the process, so a killed run never leaves
a stale lock.

A folder the claim created and that is still empty when it is released (a run refused
by its configuration before writing anything) is removed again.

NOTE: ``flock`` locks are per open file description: a second claim in the same process
conflicts too, so each claim must be released (:meth:`OutFolder.release`, or ``with``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType

from prefillkit.app.replay import InputError

__all__ = ["OutFolder"]


class OutFolder:
    """A claimed (created, locked) output folder."""

    def __init__(self, path: Path, fd: int, created: bool) -> None:
        self.path = path
        self._fd: int | None = fd
        self._created = created

    @classmethod
    def claim(cls, out: str | os.PathLike[str], *, flag: str = "--out") -> OutFolder:
        """Create ``out`` (and parents) if needed and lock it; :class:`InputError` (one line
        naming ``flag`` and the folder) if it cannot be created or another run holds it."""
        import fcntl  # NOTE: POSIX only, as the rest of the CLI's process handling

        path = Path(out)
        created = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            reason = " ".join((exc.strerror or str(exc)).split())
            raise InputError(f"{flag} {out}: cannot create folder: {reason}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise InputError(
                f"{flag} {out}: another prefillkit run is writing this folder (wait for it "
                "or give another folder)"
            ) from None
        return cls(path, fd, created)

    def release(self) -> None:
        """Unlock (idempotent); remove the folder if this claim created it and it is empty."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        if self._created:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # NOTE: fails, as meant, unless the folder is empty

    def __enter__(self) -> OutFolder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
