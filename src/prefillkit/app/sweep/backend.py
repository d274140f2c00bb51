"""Where points run: Ray tasks, or local worker processes when Ray is not installed.

Both backends run :func:`~prefillkit.app.sweep.points.run_point`, one point per task, and
hand back its result tuple unchanged, so the stored rows (and files) are the same
whichever ran them. :class:`PointRunner` keeps at most ``jobs`` points in flight and
retries a failed point once (an error the point raised, or its worker dying); its
second failure is final.

- :class:`RayBackend`: ``ray.init()`` on this machine (a local cluster) unless Ray is
  already initialised; ``address`` (``ray://HOST:PORT``, ``HOST:PORT`` or ``auto``) or
  ``RAY_ADDRESS`` joins a cluster. Tasks carry ``PYTHONPATH`` with this prefillkit's
  source folder first, so local workers import the same code as the driver (a remote
  cluster needs prefillkit installed; the extra path is then harmless). Ray's own task
  retries are off: the retry is :class:`PointRunner`'s, the same for both backends.
- :class:`ProcessBackend`: one forked process per point (so a process that dies takes
  exactly its own point with it), at most ``jobs`` at once.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Protocol

from prefillkit.app.sweep import EXTRA_HINT, SweepError
from prefillkit.app.sweep.points import PointSpec, run_point

__all__ = [
    "Backend",
    "FaultHooks",
    "Outcome",
    "PointRunner",
    "ProcessBackend",
    "RayBackend",
    "make_backend",
    "ray_available",
]

Raw = tuple[Any, ...]  # ("ok", row, wall_s) | ("error", message, wall_s)


#: Fault-injection hooks a test passes to :func:`prefillkit.app.sweep.sweep.run_sweep`
#: (``hooks=``; nothing sets them in a user's run): ``task_log``, a file each task
#: appends ``<pid> <point id>`` to as it starts; ``crash_once``, a folder: a task's first
#: attempt at a point leaves a marker there and kills its worker (SIGKILL).
FaultHooks = Mapping[str, str]
HOOK_KEYS = ("task_log", "crash_once")


class Backend(Protocol):
    name: str

    def capacity(self) -> int: ...

    def submit(self, key: int, spec: PointSpec) -> None: ...

    def wait(self, timeout: float) -> list[tuple[int, Raw]]: ...

    def close(self) -> None: ...


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- ray


class RayBackend:
    name = "ray"

    def __init__(self, address: str | None, hooks: Mapping[str, str]) -> None:
        try:
            import ray
        except ImportError:
            why = f"--address {address}" if address else "--backend ray"
            raise SweepError(f"{why} needs Ray, which is not installed: {EXTRA_HINT}") from None
        self.ray = ray
        self.owns = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "logging_level": "ERROR",
                "log_to_driver": True,
            }
            if address:
                kwargs["address"] = address
            try:
                ray.init(**kwargs)
            except Exception as exc:  # ConnectionError, ValueError, ...
                where = address or os.environ.get("RAY_ADDRESS") or "a local cluster"
                msg = " ".join(str(exc).split())[:300]
                raise SweepError(f"--address {where}: cannot start or join Ray: {msg}") from None
            self.owns = True
        src = str(Path(__file__).resolve().parents[3])
        path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
        self.fn = ray.remote(num_cpus=1, max_retries=0)(run_point).options(
            runtime_env={"env_vars": {"PYTHONPATH": path}}
        )
        self.hooks = dict(hooks)
        self.refs: dict[Any, int] = {}

    def capacity(self) -> int:
        try:
            return max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        except Exception:
            return 1

    def submit(self, key: int, spec: PointSpec) -> None:
        ref = self.fn.remote(spec.to_dict(), self.hooks)
        self.refs[ref] = key

    def wait(self, timeout: float) -> list[tuple[int, Raw]]:
        if not self.refs:
            return []
        ready, _ = self.ray.wait(list(self.refs), num_returns=1, timeout=timeout)
        out: list[tuple[int, Raw]] = []
        for ref in ready:
            key = self.refs.pop(ref)
            try:
                raw = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                raw = ("error", f"its Ray worker failed ({type(exc).__name__})", 0.0)
            out.append((key, tuple(raw)))
        return out

    def close(self) -> None:
        for ref in list(self.refs):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:
                pass
        self.refs.clear()
        if self.owns:
            self.ray.shutdown()


# --------------------------------------------------------------------------- processes


def _child(conn: Connection, point: dict[str, Any], hooks: dict[str, str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's business
    try:
        conn.send(run_point(point, hooks))
    finally:
        conn.close()


class ProcessBackend:
    name = "process"

    def __init__(self, hooks: Mapping[str, str]) -> None:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        self.ctx: Any = multiprocessing.get_context(method)
        self.hooks = dict(hooks)
        self.live: dict[Connection, tuple[int, Any]] = {}

    def capacity(self) -> int:
        return max(1, os.cpu_count() or 1)

    def submit(self, key: int, spec: PointSpec) -> None:
        recv, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_child, args=(send, spec.to_dict(), self.hooks), daemon=True)
        proc.start()
        send.close()
        self.live[recv] = (key, proc)

    def wait(self, timeout: float) -> list[tuple[int, Raw]]:
        if not self.live:
            return []
        out: list[tuple[int, Raw]] = []
        for conn in wait(list(self.live), timeout=timeout):
            assert isinstance(conn, Connection)
            key, proc = self.live.pop(conn)
            try:
                raw: Raw = tuple(conn.recv())
            except (EOFError, OSError):
                proc.join(timeout=10)
                code = proc.exitcode
                how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                raw = ("error", f"its worker process died ({how})", 0.0)
            conn.close()
            proc.join(timeout=10)
            out.append((key, raw))
        return out

    def close(self) -> None:
        for conn, (_, proc) in list(self.live.items()):
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5)
            conn.close()
        self.live.clear()


def make_backend(kind: str, address: str | None, hooks: FaultHooks | None = None) -> Backend:
    """``kind``: ``auto`` (Ray when installed, else processes), ``ray`` or ``process``;
    ``hooks``: the tests' fault injection (:data:`FaultHooks`)."""
    hooks = dict(hooks or {})
    unknown = sorted(set(hooks) - set(HOOK_KEYS))
    if unknown:
        raise ValueError(f"unknown fault hooks {unknown} (known: {list(HOOK_KEYS)})")
    if address and kind == "process":
        raise SweepError("--address needs the Ray backend (not --backend process)")
    if kind == "ray" or (kind == "auto" and (address or ray_available())):
        return RayBackend(address, hooks)
    return ProcessBackend(hooks)


# --------------------------------------------------------------------------- retries


@dataclass(slots=True)
class Outcome:
    """A point's final result: its row (``ok``) or its last one-line error."""

    spec: PointSpec
    ok: bool
    row: dict[str, Any] | None
    error: str | None
    attempts: int
    wall_s: float


class PointRunner:
    """At most ``jobs`` points in flight on ``backend``; a failed point is retried once."""

    def __init__(self, backend: Backend, jobs: int, retries: int = 1) -> None:
        self.backend = backend
        self.jobs = max(1, jobs)
        self.retries = retries
        self.queue: deque[tuple[PointSpec, int]] = deque()
        self.inflight: dict[int, tuple[PointSpec, int]] = {}
        self.next_key = 0

    def add(self, spec: PointSpec) -> None:
        self.queue.append((spec, 1))

    @property
    def busy(self) -> bool:
        return bool(self.queue or self.inflight)

    def _fill(self) -> None:
        while self.queue and len(self.inflight) < self.jobs:
            spec, attempt = self.queue.popleft()
            key = self.next_key
            self.next_key += 1
            self.inflight[key] = (spec, attempt)
            self.backend.submit(key, spec)

    def step(self, timeout: float = 0.5) -> list[Outcome]:
        """Submit what fits, wait up to ``timeout`` s; the points that finished for good."""
        self._fill()
        out: list[Outcome] = []
        for key, raw in self.backend.wait(timeout):
            spec, attempt = self.inflight.pop(key)
            status, payload, wall = raw
            if status == "ok":
                out.append(Outcome(spec, True, payload, None, attempt, float(wall)))
            elif attempt <= self.retries:
                self.queue.append((spec, attempt + 1))
            else:
                out.append(Outcome(spec, False, None, str(payload), attempt, float(wall)))
        self._fill()
        return out
