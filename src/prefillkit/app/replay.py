"""Replay: a workload (trace file or generator) through the simulator, for the commands.

- :func:`load_requests`: a trace file or a built-in generator as a :class:`Workload`
  (requests ready to replay plus a JSON-ready description for ``summary.json``); the one
  workload loader of the command line and the tests.
- :func:`run_replay`: one simulation, with an optional progress bar on stderr and a
  SIGINT handler that stops the replay cleanly (the result is then ``partial``).
- :func:`lru_hit_rate`, :func:`write_trace_jsonl`: ``trace-stats`` and ``generate``.

The settings come from :mod:`prefillkit.app.settings` (``build_config``). Errors are
one-line exceptions: :class:`~prefillkit.sched.config.ConfigError`,
:class:`~prefillkit.workloads.errors.WorkloadError`,
:class:`~prefillkit.sim.engine.SimConfigError` and :class:`InputError` (a bad option
value that is neither a config field nor a trace problem).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from prefillkit.app.generator_choice import (
    GENERATORS,
    InputError,
    generate_records,
    generator_call,
    name_sources,
)
from prefillkit.app.prefetch import RequestPrefetcher, can_fork
from prefillkit.app.scheduler_choice import scheduler_factory
from prefillkit.app.settings import Config
from prefillkit.cost.deployment import SimSettings
from prefillkit.cost.roofline import CostModel
from prefillkit.helpers import wants_helpers
from prefillkit.records.collector import RowSink
from prefillkit.records.run_options import RunOptions
from prefillkit.request import KeyUnitCheck, KeyUnitError, Request
from prefillkit.sim.engine import Engine, SimResult
from prefillkit.workloads.block_size import block_size_refusal
from prefillkit.workloads.bundled import resolve_trace
from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.jsonl import write_jsonl
from prefillkit.workloads.record import TraceRecord, to_request
from prefillkit.workloads.trace_reader import (
    FORMATS,
    ReplayOptions,
    detect_format,
    iter_records,
    iter_replay_records,
    load_records,
    replay_records,
)

if TYPE_CHECKING:
    from prefillkit.sim.fleet import Fleet
    from prefillkit.sim.fleet_settings import FleetSettings

__all__ = [
    "GENERATORS",
    "InputError",
    "Workload",
    "WorkloadSpec",
    "WorkloadStream",
    "generate_records",
    "load_requests",
    "make_replay_options",
    "open_workload",
    "run_replay",
    "stop_on_sigint",
    "write_trace_jsonl",
]

# --------------------------------------------------------------------------- workload


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to replay: a trace file (``trace``) or else a built-in generator.

    ``generator_args`` are keyword arguments of the generator function
    (``multi_turn_agentic`` for ``"agentic"``; for ``"seed"`` they override
    ``SEED_AGENTIC``, merged by ``merge_agentic_args``; ``generated_shared_prefix`` for
    ``"gsp"``); the seed always comes from the config. ``block_size`` overrides a trace's
    block size (Mooncake / Bailian) or the agentic generator's. ``arg_labels`` name where
    each argument came from (``--agentic-turns``, ``FILE: [workload] turns_per_session``)
    so a generator's error names the user's flag or key.
    """

    trace: str | None = None
    fmt: str = "auto"
    block_size: int | None = None
    generator: str = "agentic"
    generator_args: Mapping[str, Any] = field(default_factory=dict)
    replay: ReplayOptions = field(default_factory=ReplayOptions)
    arg_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Workload:
    """A loaded workload.

    ``requests`` are built for the config's page size and are mutated by a replay: for
    another run call :meth:`fresh_requests` (cheap; rebuilds from ``records``).
    """

    requests: list[Request]
    records: list[TraceRecord]
    info: dict[str, Any]  # JSON-ready; goes into summary.json "workload"
    skipped_rows: list[tuple[int, str]]

    def fresh_requests(self, page_size: int) -> list[Request]:
        return [to_request(r, page_size) for r in self.records]


_REPLAY_FLAGS: dict[str, str] = {
    "time_scale": "--time-scale",
    "rate": "--rate",
    "max_requests": "--max-requests",
    "start_s": "--start",
    "duration_s": "--duration",
}


def make_replay_options(
    *,
    time_scale: float = 1.0,
    rate: float | None = None,
    max_requests: int | None = None,
    start_s: float = 0.0,
    duration_s: float | None = None,
    spread_buckets: bool = False,
    skip_bad_rows: bool = False,
) -> ReplayOptions:
    """``ReplayOptions`` with errors as ``InputError`` naming the command-line option."""
    if rate is not None and time_scale != 1.0:
        raise InputError("give --rate or --time-scale, not both")
    try:
        return ReplayOptions(
            time_scale=time_scale,
            rate=rate,
            max_requests=max_requests,
            start_s=start_s,
            duration_s=duration_s,
            spread_buckets=spread_buckets,
            skip_bad_rows=skip_bad_rows,
        )
    except ValueError as exc:
        text = str(exc)
        for name, flag in _REPLAY_FLAGS.items():
            if text.startswith(name + " "):
                text = flag + text[len(name) :]
                break
        raise InputError(text) from None


def _replay_info(opts: ReplayOptions) -> dict[str, Any]:
    return {
        "time_scale": opts.time_scale,
        "rate": opts.rate,
        "max_requests": opts.max_requests,
        "start_s": opts.start_s,
        "duration_s": opts.duration_s,
        "spread_buckets": opts.spread_buckets,
    }


def with_stated_decode_rate(config: Config, spec: WorkloadSpec) -> Config:
    """``config`` with the generator's stated ``--agentic-decode-tokens-per-s`` as the
    rate that times a session turn's answer (``session_decode_tokens_per_s``), unless
    that is set itself or the workload is not generated by the agentic generators."""
    rate = spec.generator_args.get("decode_tokens_per_s")
    if (
        spec.trace is not None
        or spec.generator not in ("agentic", "seed")
        or rate is None
        or config.session_decode_tokens_per_s is not None
    ):
        return config
    return dataclasses.replace(config, session_decode_tokens_per_s=float(rate))


def write_trace_jsonl(records: Sequence[TraceRecord], path: str | Path) -> None:
    """Write ``records`` in prefillkit's JSONL trace format (``workloads/jsonl.py``),
    atomically: into a temporary file beside ``path``, then renamed over it.

    ``OSError`` propagates (the temporary file is removed).
    """
    write_jsonl(records, path)


@dataclass(slots=True)
class WorkloadStream:
    """A workload opened for a streaming replay (:func:`open_workload`).

    ``requests`` yields the requests in arrival order, each built (its key chain) when
    pulled; ``info`` is the ``summary.json`` description, whose ``requests`` and
    ``skipped_rows`` are final once ``requests`` is exhausted (:meth:`finish_info`);
    ``skipped_rows`` fills as the trace is read.
    """

    requests: Iterator[Request]
    info: dict[str, Any]
    skipped_rows: list[tuple[int, str]]
    count: list[int]  # requests yielded so far (one cell)
    prefetched: bool = False  # built by a helper process (app/prefetch.py)

    def finish_info(self, total: int | None = None) -> dict[str, Any]:
        """``info`` with the request count (``total``, else the count yielded) and the
        skipped rows filled in."""
        self.info["requests"] = self.count[0] if total is None else total
        self.info["skipped_rows"] = len(self.skipped_rows)
        return self.info


def _built_requests(
    records: Iterator[TraceRecord],
    page_size: int,
    skipped: list[tuple[int, str]],
    helpers: bool,
) -> Iterator[Request]:
    """``records`` as requests: built by a helper process if ``helpers`` and this process
    can fork (forked now, before a row writer's pipe exists for it to inherit;
    app/prefetch.py), else here."""
    if helpers and can_fork():
        return RequestPrefetcher(records, page_size, skipped)
    return _keyed(records, page_size)


def _keyed(records: Iterator[TraceRecord], page_size: int) -> Iterator[Request]:
    try:
        for rec in records:
            yield to_request(rec, page_size)
    finally:
        _close(records)


def _close(it: Iterator[Any]) -> None:
    """Close ``it`` if it can be closed (a generator: its ``finally`` runs now)."""
    close = getattr(it, "close", None)
    if close is not None:
        close()


def _counted_requests(
    built: Iterator[Request], page_size: int, count: list[int], trace: str | None
) -> Iterator[Request]:
    """``built``, counted into ``count`` and (a trace) checked for one key-unit size."""
    units = KeyUnitCheck()
    n = 0
    try:
        for req in built:
            if trace is not None and req.keys:
                try:
                    units.check(req)
                except KeyUnitError:
                    _check_key_units((units.first or req, req), trace, page_size)
            n += 1
            count[0] = n
            yield req
    finally:
        _close(built)


def _trace_source(spec: WorkloadSpec, trace: str) -> tuple[str, str, dict[str, Any]]:
    """The trace's path (a bundled name such as mooncake-slice resolved), its format and
    the workload info; one-line ``InputError`` for a bad ``--format`` / ``--block-size``."""
    if spec.fmt != "auto" and spec.fmt not in FORMATS:
        raise InputError(
            f"--format: unknown trace format {spec.fmt!r}; expected one of "
            f"{', '.join((*FORMATS, 'auto'))}"
        )
    path = resolve_trace(trace)
    real_fmt = detect_format(path) if spec.fmt == "auto" else spec.fmt
    refusal = None if spec.block_size is None else block_size_refusal(fmt=real_fmt)
    if refusal is not None:
        raise InputError(f"--block-size {refusal}")
    info: dict[str, Any] = {
        "source": f"{real_fmt}:{trace}",
        "kind": "trace",
        "path": path,
        "format": real_fmt,
        "block_size": spec.block_size,
    }
    return path, real_fmt, info


def open_workload(
    spec: WorkloadSpec, *, page_size: int, seed: int = 0, helpers: bool | None = None
) -> WorkloadStream:
    """:func:`load_requests`, streaming: the same requests in the same order, read or
    generated as they are pulled (a bounded look-ahead: see
    :func:`prefillkit.workloads.trace_reader.iter_records` and the generators). The same
    errors, raised here for an empty window and, for a bad trace row or mixed key units
    past the first request, when the iterator reaches it. ``helpers``: whether a helper
    process may build the requests (None: :func:`prefillkit.helpers.wants_helpers`)."""
    if page_size < 1:
        raise InputError(f"--page-size: must be positive, got {page_size}")
    opts = spec.replay
    if spec.trace is not None:
        path, real_fmt, info = _trace_source(spec, spec.trace)
        records, skipped = iter_records(path, real_fmt, opts, block_size=spec.block_size)
    else:
        fn, args = generator_call(spec, lazy=True)
        try:
            generated = fn(**args, seed=seed)
            stream = iter_replay_records(generated, opts)
            head = next(stream, None)
        except (TypeError, ValueError) as exc:
            raise InputError(name_sources(str(exc), spec)) from None
        if head is None:
            raise InputError("the generated workload has no requests in the selected window")
        records = itertools.chain((head,), stream)
        skipped = []
        info = {
            "source": f"generator:{spec.generator}",
            "kind": "generator",
            "generator": spec.generator,
            **args,
            "seed": seed,
        }
    info["requests"] = None
    info["skipped_rows"] = 0
    info["replay"] = _replay_info(opts)
    for key, value in list(info.items()):
        if isinstance(value, float) and math.isinf(value):
            info[key] = "inf"
    count = [0]
    if helpers is None:
        helpers = wants_helpers()
    built = _built_requests(records, page_size, skipped, helpers)
    reqs = _counted_requests(built, page_size, count, spec.trace)
    return WorkloadStream(
        requests=reqs,
        info=info,
        skipped_rows=skipped,
        count=count,
        prefetched=isinstance(built, RequestPrefetcher),
    )


def load_requests(spec: WorkloadSpec, *, page_size: int, seed: int = 0) -> Workload:
    """Load ``spec`` as requests keyed for ``page_size`` (a generator draws with ``seed``).

    Raises ``WorkloadError`` for trace problems (names the file and line) and
    ``InputError`` for option values that do not fit the workload (or ``page_size < 1``).
    """
    if page_size < 1:
        raise InputError(f"--page-size: must be positive, got {page_size}")
    opts = spec.replay
    skipped: list[tuple[int, str]] = []
    if spec.trace is not None:
        path, real_fmt, info = _trace_source(spec, spec.trace)
        records, skipped = load_records(path, real_fmt, opts, block_size=spec.block_size)
    else:
        generated, gen_info = generate_records(spec, seed)
        records = replay_records(generated, opts)
        if not records:
            raise InputError("the generated workload has no requests in the selected window")
        info = {"source": f"generator:{spec.generator}", "kind": "generator", **gen_info}
    info["requests"] = len(records)
    info["skipped_rows"] = len(skipped)
    info["replay"] = _replay_info(opts)
    for key, value in list(info.items()):
        if isinstance(value, float) and math.isinf(value):
            info[key] = "inf"
    requests = [to_request(r, page_size) for r in records]
    if spec.trace is not None:
        _check_key_units(requests, spec.trace, page_size)
    return Workload(requests=requests, records=records, info=info, skipped_rows=skipped)


def _check_key_units(requests: Iterable[Request], path: str, page_size: int) -> None:
    """One key-unit size for the whole trace (``lcm(page, block size)`` per request,
    request.py), or a ``WorkloadError`` naming the trace and the first
    request that differs."""
    try:
        KeyUnitCheck().check_all(requests)
    except KeyUnitError as e:
        raise WorkloadError(
            path,
            None,
            f"{e} (page size {page_size}): the block sizes of one trace must give one key unit",
        ) from None


# --------------------------------------------------------------------------- replay


#: The signals that stop a run and keep its partial results (a terminal's Ctrl-C; the
#: polite kill of ``timeout`` and of job schedulers).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Said at once when the first of them arrives.
STOPPING_LINE = (
    "prefillkit: stopping: writing the partial results (Ctrl-C again: stop without writing)"
)


@contextmanager
def stop_on_sigint(engine: Engine | Fleet) -> Iterator[None]:
    """While active, the first SIGINT or SIGTERM sets ``engine.stop_requested`` (the run
    then ends at its next event with a partial result) and says so at once on stderr; a
    second one raises ``KeyboardInterrupt``. Does nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if engine.stop_requested:
            raise KeyboardInterrupt
        engine.stop_requested = True
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(STOPPING_LINE + "\n")
            sys.stderr.flush()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _ProgressBar:
    """A rich progress bar on stderr, refreshed at most every ``interval`` seconds."""

    def __init__(self, description: str, interval: float = 0.2) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from prefillkit.app.progress import CountColumn

        self.progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            CountColumn("requests finished"),
            TaskProgressColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            auto_refresh=False,
            transient=True,
        )
        self.task = self.progress.add_task(description, total=None)
        self.interval = interval
        self.last = 0.0

    def __enter__(self) -> _ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, finished: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < self.interval and finished < total:
            return
        self.last = now
        self.progress.update(self.task, completed=finished, total=total)
        self.progress.refresh()


def run_replay(
    settings: SimSettings,
    requests: list[Request] | Iterator[Request],
    *,
    progress: bool,
    handle_sigint: bool = True,
    description: str = "replay",
    on_start: Callable[[Engine], None] | None = None,
    executor: str = "sim",
    cost: CostModel | None = None,
    sink: RowSink | None = None,
    options: RunOptions | None = None,
    scheduler: str = "prefillkit",
    fleet: FleetSettings | None = None,
) -> SimResult:
    """Simulate ``requests`` on the deployment ``settings`` describes (``fleet``: on that
    fleet instead, app/fleet_run.py).

    ``progress``: show a progress bar on stderr (the caller decides, e.g. only when stderr
    is a terminal). ``handle_sigint``: Ctrl-C stops the replay and returns the result so
    far with ``partial`` true (see :func:`stop_on_sigint`). ``on_start`` is called once
    the engine is built and the handler installed, just before the run starts.
    ``executor``: ``"sim"`` (the cost model times each forward) or ``"torch"`` (the real
    executor times each forward: app/measured.py); ``cost``: the simulator's cost model.
    Raises ``SimConfigError`` / ``ConfigError`` for a deployment that cannot be simulated.
    ``requests`` may be an iterator in arrival order (a streaming run: ``sink`` gets the
    rows, see :class:`~prefillkit.sim.engine.Engine`); ``options``: what the run reports
    (default: :class:`RunOptions`'s); ``scheduler``: ``--scheduler`` (app/scheduler_choice).
    """
    from prefillkit.app.measured import make_runner

    if fleet is not None:
        from prefillkit.app.fleet_run import run_fleet

        bar = _ProgressBar(description) if progress else None
        return run_fleet(
            fleet, requests, progress_bar=bar, sigint=stop_on_sigint if handle_sigint else None,
            on_start=on_start, executor=executor, cost=cost, sink=sink, options=options,
            scheduler=scheduler,
        )  # fmt: skip
    if executor != "sim" and not isinstance(requests, list):
        raise ValueError("a measured executor needs the request list, not a stream")
    factory = scheduler_factory(scheduler, settings, executor)
    runner, dep = make_runner(executor, settings, requests if isinstance(requests, list) else [])
    engine = Engine(
        settings,
        requests,
        cost=cost,
        deployment=dep,
        runner=runner,
        sink=sink,
        options=options,
        scheduler_factory=factory,
    )
    bar = _ProgressBar(description) if progress else None
    if bar is not None:
        engine.on_progress = bar.update
    with stop_on_sigint(engine) if handle_sigint else contextlib.nullcontext():
        if on_start is not None:
            on_start(engine)
        if bar is None:
            result = engine.run()
        else:
            with bar:
                result = engine.run()
    if runner is not None:
        from prefillkit.app.measured import FORWARDS_KEY

        result.extra[FORWARDS_KEY] = runner.forwards_csv()
    return result
