"""Running prepared compare variants in a pool of worker processes.

The workload is loaded once, in the parent; every worker gets the same records (at its
start, :func:`_worker_init`) and builds its own requests for its own page size, so the
runs are paired request by request. Each worker replays them with its variant's config
and writes its run directory (:func:`~prefillkit.records.output.write_run`, or the
streaming writer that commits the same files) to ``OUT/<name>/``; the parent collects
what each reports back (:class:`VariantOutcome`). Ctrl-C stops the workers
(:class:`VariantsInterrupted`); a failing variant stops the others.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefillkit.app.fleet_file import fleet_settings
from prefillkit.app.knob_table import describe
from prefillkit.app.measured import RunFlags, load_cost_preset, run_keys, write_forwards
from prefillkit.app.replay import InputError, Workload, run_replay
from prefillkit.app.settings import Config
from prefillkit.app.variant_configs import PreparedVariant
from prefillkit.app.variants import VariantError
from prefillkit.helpers import ENV as HELPERS_ENV
from prefillkit.records.output import (
    StreamingRunWriter,
    json_ready,
    summary_document,
    write_run,
)
from prefillkit.records.run_options import RunOptions
from prefillkit.request import Request
from prefillkit.sched.config import ConfigError
from prefillkit.sim.engine import SimConfigError
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.record import TraceRecord, to_request

__all__ = ["VariantOutcome", "VariantsInterrupted", "default_jobs", "run_variants"]


@dataclass(frozen=True, slots=True)
class VariantOutcome:
    """What a worker reports back: the run itself is in its folder."""

    name: str
    wall_time_s: float
    requests: int
    completed: int
    partial: bool


_WORKER_RECORDS: list[TraceRecord] = []


def _worker_init(records: list[TraceRecord], workers: int = 1) -> None:
    """Worker start: Ctrl-C is the parent's business (it stops the workers); keep records.

    With two or more workers the cores are theirs: none starts helper processes of its
    own (prefillkit.helpers), unless the user chose."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if workers > 1:
        os.environ.setdefault(HELPERS_ENV, "inline")
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _WORKER_RECORDS[:] = records


def _worker_requests(page_size: int, streaming: bool) -> list[Request] | Iterator[Request]:
    """The worker's requests for ``page_size``: built as they arrive when ``streaming``
    (in arrival order, as the list path sorts), else the whole list."""
    records = _WORKER_RECORDS
    if streaming and any(a.arrival_s > b.arrival_s for a, b in itertools.pairwise(records)):
        records = sorted(records, key=lambda r: r.arrival_s)  # NOTE: as the list path sorts
    return (
        (to_request(r, page_size) for r in records)
        if streaming
        else [to_request(r, page_size) for r in _WORKER_RECORDS]
    )


def _run_one(
    name: str,
    cfg: Config,
    workload_info: dict[str, Any],
    out_dir: str,
    options: RunOptions | None = None,
    run: RunFlags | None = None,
) -> VariantOutcome:
    """Worker: replay the shared records with ``cfg`` and write the run to ``out_dir``.

    ``options``: what the run reports (``--percentiles`` / ``--slo-ttft``), the same for
    every variant.
    ``run``: what times its forwards (the variant's ``--executor`` / ``--cost-preset``).
    """
    run = run or RunFlags()
    t0 = time.perf_counter()
    # NOTE: a simulated variant streams (requests built as they arrive, rows written as
    # they finish, the files committed as one set: those write_run writes, byte for
    # byte); a measured executor needs the whole list.
    streaming = run.executor == "sim"
    requests = _worker_requests(cfg.resolved_page_size, streaming)
    writer: StreamingRunWriter | None = None

    def configure(engine: Any) -> None:
        nonlocal writer
        if streaming and engine.collector is not None:
            writer = StreamingRunWriter(out_dir, engine.trace.keys)
            engine.collector.sink = writer

    try:
        result = run_replay(
            cfg.sim_settings(),
            requests,
            progress=False,
            handle_sigint=False,
            description=name,
            on_start=configure,
            executor=run.executor,
            cost=load_cost_preset(run.cost_preset),
            options=options,
            scheduler=cfg.scheduler,
            fleet=fleet_settings(cfg),
        )
        doc = summary_document(result, name=name, config=describe(cfg), workload=workload_info)
        doc.update(run_keys(run))
        if writer is not None:
            writer.commit(doc)
        else:
            write_run(result, out_dir, doc)
        write_forwards(result, out_dir)
    finally:
        if writer is not None:
            writer.discard()
    return _outcome(name, t0, result.summary, result.partial)


def _outcome(name: str, t0: float, summary: Mapping[str, Any], partial: bool) -> VariantOutcome:
    """What the worker reports back of a run started at ``t0`` (``perf_counter``)."""
    completed = summary.get("completed", 0)
    return VariantOutcome(
        name=name,
        wall_time_s=time.perf_counter() - t0,
        requests=int(summary["requests"]),
        completed=int(completed) if isinstance(completed, (int, float)) else 0,
        partial=bool(partial),
    )


def default_jobs(num_variants: int) -> int:
    """``min(variants, CPUs)``, at least 1."""
    return max(1, min(num_variants, os.cpu_count() or 1))


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(timeout=5)
    # NOTE: wait=True joins the pool's manager thread (it exits once it sees the dead
    # workers). With wait=False, CPython 3.11's exit hook could still find the thread and
    # write to the wake-up pipe the thread had just closed, printing "OSError: Bad file
    # descriptor" with a traceback after the one-line interrupt message (seen 2 in 60).
    pool.shutdown(wait=True, cancel_futures=True)


class VariantsInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_variants`; ``finished`` names the variants already done."""

    def __init__(self, finished: Sequence[str]) -> None:
        super().__init__()
        self.finished = list(finished)


def _make_run_folders(root: Path, variants: Sequence[PreparedVariant]) -> None:
    """``root/<name>/`` for every variant; a folder that cannot be made is an
    ``InputError``."""
    for pv in variants:
        target = root / pv.name
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            reason = " ".join((exc.strerror or str(exc)).split())
            raise InputError(f"--out {root}: cannot create folder {target}: {reason}") from None


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked while inside (where the platform can block signals).

    Workers are forked/spawned while SIGINT is blocked, so none dies of a Ctrl-C before
    its initializer makes it ignore SIGINT; the parent gets it afterwards."""
    can_mask = hasattr(signal, "pthread_sigmask")
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if can_mask else None
    try:
        yield
    finally:
        if old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _collect(
    pending: dict[Future[VariantOutcome], str],
    outcomes: dict[str, VariantOutcome],
    on_done: Callable[[VariantOutcome], None] | None,
) -> None:
    """Wait for every run of ``pending`` (future → variant name), into ``outcomes``; a
    failed run is a ``VariantError`` naming its variant."""
    while pending:
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for fut in done:
            name = pending.pop(fut)
            try:
                outcome = fut.result()
            except BrokenProcessPool:
                raise VariantError(
                    f"variant {name!r}: its worker process died (out of memory?)"
                ) from None
            except (ConfigError, SimConfigError, InputError, WorkloadError, OSError) as exc:
                raise VariantError(f"variant {name!r}: {' '.join(str(exc).split())}") from None
            outcomes[name] = outcome
            if on_done is not None:
                on_done(outcome)


def run_variants(
    variants: Sequence[PreparedVariant],
    workload: Workload,
    out_dir: str | Path,
    *,
    jobs: int,
    on_done: Callable[[VariantOutcome], None] | None = None,
    options: RunOptions | None = None,
) -> list[VariantOutcome]:
    """Run every variant in a pool of ``jobs`` worker processes; outcomes in variant order.

    Each run is written to ``out_dir/<name>/``. On Ctrl-C (``KeyboardInterrupt`` here) the
    workers are terminated and :class:`VariantsInterrupted` (a ``KeyboardInterrupt``) is
    raised. A failing variant
    stops the others and raises ``VariantError`` naming it.
    """
    root = Path(out_dir)
    _make_run_folders(root, variants)
    info = json_ready(workload.info)
    outcomes: dict[str, VariantOutcome] = {}
    pool: ProcessPoolExecutor | None = None
    pending: dict[Future[VariantOutcome], str] = {}
    try:
        with _sigint_blocked():
            workers = max(1, min(jobs, len(variants)))
            pool = ProcessPoolExecutor(
                max_workers=workers,
                initializer=_worker_init,
                initargs=(workload.records, workers),
            )
            for pv in variants:
                fut = pool.submit(
                    _run_one, pv.name, pv.config, info, str(root / pv.name), options, pv.run
                )
                pending[fut] = pv.name
        _collect(pending, outcomes, on_done)
    except BaseException as exc:
        if pool is not None:
            _stop_workers(pool)
            pool = None
        if isinstance(exc, KeyboardInterrupt):
            raise VariantsInterrupted([pv.name for pv in variants if pv.name in outcomes]) from None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return [outcomes[pv.name] for pv in variants]
