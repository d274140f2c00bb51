"""The steps of ``prefillkit replay``: settings, workload and run options checked
(:func:`prepare_replay`), the run (:meth:`ReplayRun.simulate`), its summary document and
its console output (:func:`finish_replay`); :func:`run_replay_command` runs them.

Imported when ``replay`` runs, never for ``--help`` (nor are the streamed outputs'
modules: :mod:`prefillkit.cli.replay_outputs`, the timeline writer).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from prefillkit.app.fleet_file import fleet_settings
from prefillkit.app.launch import (
    ResolvedSettings,
    base_text,
    build_config,
    header_lines,
    setting_sources,
    weights_warning,
)
from prefillkit.app.measured import RunFlags, load_cost_preset, run_keys
from prefillkit.app.replay import (
    InputError,
    WorkloadSpec,
    load_requests,
    open_workload,
    run_replay,
    with_stated_decode_rate,
)
from prefillkit.app.settings import Config, ConfigError, describe
from prefillkit.cli.common import (
    EXIT_INTERRUPTED,
    claim_out_folder,
    echo_err,
    echo_skipped,
    os_reason,
    run_options,
    span_error,
    unknown_flag_message,
)
from prefillkit.cli.replay_outputs import RunSinks
from prefillkit.cli.workload_spec import workload_spec
from prefillkit.records.output import json_ready, summary_document
from prefillkit.records.result import SimResult
from prefillkit.records.run_options import RunOptions
from prefillkit.records.spill import SpillError
from prefillkit.report.console import print_summary_table
from prefillkit.request import Request
from prefillkit.sim.engine import Engine, SimConfigError

if TYPE_CHECKING:
    from prefillkit.sim.fleet import Fleet

__all__ = ["ReplayRun", "finish_replay", "prepare_replay", "run_replay_command"]


@dataclass(slots=True)
class ReplayWorkload:
    """The requests of a replay: streamed (read or generated as they arrive, dropped once
    done) for a simulated run, a list for a measured executor (which needs them up front).
    ``finish_info(total)`` is ``summary.json``'s ``workload`` once the run is over."""

    requests: Iterator[Request] | list[Request]
    source: str
    skipped: list[tuple[int, str]]
    finish_info: Callable[[int], dict[str, Any]]
    streaming: bool


def load_workload(spec: WorkloadSpec, cfg: Config, *, streaming: bool) -> ReplayWorkload:
    """Open (``streaming``) or load the workload (the engine checks ``--window-s``
    against its arrivals)."""
    if streaming:
        stream = open_workload(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
        source = stream.info["source"]
        return ReplayWorkload(
            stream.requests, source, stream.skipped_rows, stream.finish_info, True
        )
    workload = load_requests(spec, page_size=cfg.resolved_page_size, seed=cfg.seed)
    if workload.skipped_rows:
        echo_skipped(spec.trace, workload.skipped_rows)
    return ReplayWorkload(
        workload.requests,
        workload.info["source"],
        workload.skipped_rows,
        lambda _total: workload.info,
        False,
    )


@dataclass(slots=True)
class ReplayRun:
    """One replay, its options checked: what :func:`prepare_replay` made of them."""

    params: dict[str, Any]
    resolved: ResolvedSettings
    spec: WorkloadSpec
    cfg: Config
    out: str | None
    name: str
    run_flags: RunFlags
    options: RunOptions
    workload: ReplayWorkload
    sinks: RunSinks

    @property
    def quiet(self) -> bool:
        return bool(self.params["quiet"])

    def announce(self, engine: Engine | Fleet) -> None:
        """Attach the run's files to the engine; say what runs (not quiet)."""
        self.sinks.attach(engine)
        if not self.quiet:
            for text in self._header():
                echo_err(text)

    def _header(self) -> list[str]:
        lines = header_lines(self.resolved)
        source, requests = self.workload.source, self.workload.requests
        what = (
            f"{len(requests):,} requests from {source}"
            if isinstance(requests, list)  # not streaming: loaded up front
            else f"requests from {source} as they arrive"
        )
        lines.append(f"replaying {what} (Ctrl-C stops and keeps partial results)")
        executor = self.params["executor"]
        if executor != "sim":
            clock = "CPU time" if executor == "torch-cpu" else "the wall clock"
            lines.append(
                f"executor: {executor} (each prefill forward runs on the small "
                f"seeded CPU model and is timed by {clock})"
            )
        return lines

    def simulate(self) -> SimResult:
        """Run the replay; a deployment or write error becomes one line."""
        try:
            return run_replay(
                self.cfg.sim_settings(),
                self.workload.requests,
                progress=not self.quiet and sys.stderr.isatty(),
                on_start=self.announce,
                executor=self.params["executor"],
                cost=load_cost_preset(self.run_flags.cost_preset),
                options=self.options,
                scheduler=self.cfg.scheduler,
                fleet=fleet_settings(self.cfg),
            )
        except (ConfigError, SimConfigError) as exc:
            # A deployment the simulator cannot build: name the --config file when the
            # setting at fault comes from it (the trace, for its arrivals' span).
            raise type(exc)(span_error(self.resolved.blame(str(exc)), self.spec.trace)) from None
        except SpillError as exc:
            raise InputError(os_reason(exc)) from None
        except OSError as exc:
            failure = self.sinks.run_failure(exc)
            if failure is None:
                raise
            raise failure from None

    def document(self, result: SimResult) -> dict[str, Any]:
        """The run's ``summary.json`` document."""
        info = self.workload.finish_info(result.summary["requests"])
        doc = summary_document(result, name=self.name, config=describe(self.cfg), workload=info)
        doc["base"] = base_text(self.resolved)
        doc["sources"] = setting_sources(self.resolved)
        doc.update(run_keys(self.run_flags))  # measured forwards or a preset (else no key)
        if "fleet" in result.extra:
            doc["fleet"] = json_ready(result.extra["fleet"])
        return doc


def _resolve_settings(ctx: click.Context, params: dict[str, Any]) -> ResolvedSettings:
    """The config file, preset and config flags (``ctx.args``) resolved."""
    try:
        resolved = build_config(params["config_path"], ctx.args, preset=params["preset"])
    except ConfigError as exc:
        raise ConfigError(unknown_flag_message(exc, ctx.command)) from None
    if resolved.ignored:
        from prefillkit.app.launch_flags import ignored_line

        echo_err(ignored_line(resolved.ignored))
    return resolved


def _out_folder(ctx: click.Context, params: dict[str, Any]) -> tuple[str | None, str]:
    """``--out`` (claimed) and the run's name."""
    out: str | None = params["out"]
    if params["write_html"] and out is None:
        raise InputError("--report needs --out DIR (the report is written to DIR/report.html)")
    if out is not None:
        claim_out_folder(ctx, out)
    return out, params["name"] or (Path(out).resolve().name if out else "replay")


def _run_flags(params: dict[str, Any], cfg: Config) -> RunFlags:
    """What times the forwards; warns of a simulated deployment whose weights do not fit."""
    run_flags = RunFlags(params["executor"], params["cost_preset"])
    if run_flags.cost_preset is not None and run_flags.executor != "sim":
        raise InputError("--cost-preset times a simulated run: not with --executor torch")
    simulated = run_flags.executor == "sim" and run_flags.cost_preset is None
    warning = weights_warning(cfg) if simulated else None
    if warning is not None:  # the simulated deployment only: an executor or a fitted preset
        # times its own model
        echo_err(warning)
    return run_flags


def prepare_replay(ctx: click.Context, params: dict[str, Any]) -> ReplayRun:
    """Check every option of ``replay`` and open its workload, in the order the errors
    and notes are reported."""
    resolved = _resolve_settings(ctx, params)
    spec = workload_spec(ctx, params, resolved.file)
    cfg = with_stated_decode_rate(resolved.config, spec)
    out, name = _out_folder(ctx, params)
    run_flags = _run_flags(params, cfg)
    options = run_options(params)
    streaming = run_flags.executor == "sim"
    workload = load_workload(spec, cfg, streaming=streaming)
    sinks = RunSinks(out, params["trace_events"], streaming=streaming)
    return ReplayRun(params, resolved, spec, cfg, out, name, run_flags, options, workload, sinks)


def _print_result(run: ReplayRun, result: SimResult, doc: dict[str, Any]) -> None:
    """The summary on stdout (a table, or JSON with ``--json``), then ``--report``'s page."""
    wall = result.summary.get("wall_time_s")
    if run.params["as_json"]:
        click.echo(json.dumps({**doc, "timing": json_ready({"wall_time_s": wall})}, indent=2))
    else:
        print_summary_table(doc, wall_time_s=wall)
    if run.params["write_html"] and run.out is not None:
        from prefillkit.app.compare import write_dir_report  # NOTE: only with --report

        report = write_dir_report(run.out)
        if not run.quiet:
            echo_err(f"wrote {report}")


def finish_replay(
    ctx: click.Context,
    run: ReplayRun,
    result: SimResult,
    doc: dict[str, Any],
    forwards: Path | None,
) -> None:
    """Report the finished run; an interrupted one exits with status 130."""
    if run.workload.streaming and run.workload.skipped:
        echo_skipped(run.spec.trace, run.workload.skipped)
    if run.out is not None and not run.quiet:
        more = f", {forwards.name}" if forwards is not None else ""
        echo_err(f"wrote {run.out}/summary.json, requests.csv, batches.csv{more}")
    _print_result(run, result, doc)
    if result.partial:
        done = result.summary.get("completed", 0)
        total = result.summary["requests"]
        where = f"; partial results written to {run.out}" if run.out is not None else ""
        at = result.summary.get("sim_duration_s", 0.0)
        echo_err(
            f"prefillkit: interrupted at simulated {at:,.1f} s: "
            f"{done:,} of the {total:,} requests that had arrived finished (those not yet "
            f"arrived are not counted){where}"
        )
        ctx.exit(EXIT_INTERRUPTED)


def run_replay_command(ctx: click.Context, params: dict[str, Any]) -> None:
    """``prefillkit replay`` with its parsed ``params`` (config flags in ``ctx.args``)."""
    run = prepare_replay(ctx, params)
    try:
        run.sinks.open()
        result = run.simulate()
        doc = run.document(result)
        forwards = run.sinks.commit(result, doc, quiet=run.quiet)
    finally:
        run.sinks.discard()
    finish_replay(ctx, run, result, doc, forwards)
