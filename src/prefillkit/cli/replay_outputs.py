"""The files ``prefillkit replay`` writes: ``--out``'s summary and CSVs and the
``--trace-events`` timeline, streamed as the run goes (a simulated run) or written at its
end (a measured one), and the one-line errors of each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefillkit.app.measured import write_forwards
from prefillkit.app.replay import InputError
from prefillkit.cli.common import echo_err, os_reason
from prefillkit.records.fleet_files import FleetFiles
from prefillkit.records.output import StreamingRunWriter, write_run
from prefillkit.records.result import SimResult
from prefillkit.records.trace_events import StreamingTraceWriter, write_trace_events
from prefillkit.sim.engine import Engine

if TYPE_CHECKING:
    from prefillkit.sim.fleet import Fleet

__all__ = ["RunSinks"]


class RunSinks:
    """``--out DIR`` and ``--trace-events FILE`` of one replay (either may be None).

    Streaming (``streaming``: a simulated run), the CSVs and the timeline are written as
    the run goes (see prefillkit.records.collector) and committed at its end; else both
    are written from the result. :meth:`discard` drops whatever was not committed.
    """

    def __init__(self, out: str | None, trace_events: str | None, *, streaming: bool) -> None:
        self.out = out
        self.trace_events = trace_events
        self.streaming = streaming
        self.writer: StreamingRunWriter | None = None
        self.timeline: StreamingTraceWriter | None = None
        self.fleet_files: FleetFiles | None = None

    def trace_events_error(self, exc: OSError) -> InputError:
        return InputError(
            f"--trace-events {self.trace_events}: {os_reason(exc, self.trace_events)}"
        )

    def out_error(self, exc: OSError) -> InputError:
        return InputError(f"--out {self.out}: cannot write results: {os_reason(exc)}")

    def open(self) -> None:
        """Start the streamed timeline (the streamed CSVs start in :meth:`attach`)."""
        if not self.streaming or self.trace_events is None:
            return
        try:
            self.timeline = StreamingTraceWriter(self.trace_events)
        except OSError as exc:
            raise self.trace_events_error(exc) from None

    def attach(self, engine: Engine | Fleet) -> None:
        """Stream ``engine``'s timeline and rows into the files (a collecting engine or
        a fleet; a fleet's routing decisions too)."""
        if engine.collector is not None:
            engine.collector.timeline = self.timeline
        if self.out is not None and engine.collector is not None:
            self.writer = StreamingRunWriter(self.out, engine.trace.keys)
            engine.collector.sink = self.writer
        if self.out is not None and not isinstance(engine, Engine):
            self.fleet_files = FleetFiles(self.out)
            engine.routing_sink = self.fleet_files.route

    def run_failure(self, exc: OSError) -> InputError | None:
        """The one-line error of a write that failed during the run; None when ``exc`` is
        none of ours (raise it as is)."""
        if self.timeline is not None and self.timeline.error is exc:
            return self.trace_events_error(exc)
        if self.out is None or not self.streaming:
            return None
        return self.out_error(exc)

    def commit(self, result: SimResult, doc: dict[str, Any], *, quiet: bool) -> Path | None:
        """Finish every file; the measured forwards' CSV written (its path), if any."""
        self._commit_timeline(result, quiet=quiet)
        if self.out is None:
            return None
        try:
            if self.fleet_files is not None:
                self.fleet_files.commit(result.extra["fleet"]["instances"])
            if self.writer is not None:
                self.writer.commit(doc)
            else:
                write_run(result, self.out, doc)
            return write_forwards(result, self.out)
        except OSError as exc:
            raise self.out_error(exc) from None

    def _commit_timeline(self, result: SimResult, *, quiet: bool) -> None:
        if self.trace_events is None:
            return
        try:
            if self.timeline is not None:
                steps = result.extra.get("decode_steps") or ()
                self.timeline.commit(partial=result.partial, decode_steps=steps)
            else:
                write_trace_events(result, self.trace_events)
        except OSError as exc:
            raise self.trace_events_error(exc) from None
        if not quiet:
            echo_err(f"wrote {self.trace_events} (open in ui.perfetto.dev or chrome://tracing)")

    def discard(self) -> None:
        """Drop the streamed files not committed (a failed or interrupted write)."""
        if self.writer is not None:
            self.writer.discard()
        if self.fleet_files is not None:
            self.fleet_files.discard()
        if self.timeline is not None:
            self.timeline.discard()
