"""The steps of ``prefillkit compare``: shared settings and variants checked, the workload
loaded once, every variant run in worker processes, the comparison written and printed.

Imported when ``compare`` runs (it loads :mod:`prefillkit.app.compare` and the paired
statistics), never for ``--help``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from dataclasses import dataclass
from typing import Any

import click

from prefillkit.app.compare import (
    PreparedVariant,
    Variant,
    VariantOutcome,
    VariantsInterrupted,
    check_shared_settings,
    collect_variants,
    compare_document,
    default_jobs,
    describe_variant,
    prepare_variants,
    run_variants,
    write_compare,
    write_dir_report,
)
from prefillkit.app.replay import (
    InputError,
    Workload,
    WorkloadSpec,
    load_requests,
    with_stated_decode_rate,
)
from prefillkit.app.settings import ConfigError, ConfigFile
from prefillkit.cli.common import (
    EXIT_INTERRUPTED,
    claim_out_folder,
    echo_err,
    echo_skipped,
    os_reason,
    run_options,
    unknown_flag_message,
)
from prefillkit.cli.workload_spec import workload_spec
from prefillkit.records.run_options import RunOptions
from prefillkit.report.console_base import fmt_seconds, make_console
from prefillkit.report.paired import comparison_table, headline_table

__all__ = ["run_compare"]


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every variant shares: compare's own ``--config`` file and config flags."""

    config_path: str | None
    flags: list[str]
    file: ConfigFile | None


def _shared_settings(ctx: click.Context, params: dict[str, Any]) -> _Shared:
    config_path: str | None = params["config_path"]
    shared_flags = list(ctx.args)
    try:
        shared_file, ignored = check_shared_settings(config_path, shared_flags)
    except ConfigError as exc:
        raise ConfigError(unknown_flag_message(exc, ctx.command)) from None
    if ignored:
        from prefillkit.app.launch_flags import ignored_line

        echo_err(ignored_line(ignored))
    return _Shared(config_path, shared_flags, shared_file)


def _refuse_own_options(ctx: click.Context, variants: list[Variant]) -> None:
    """A variant's flags are config flags: none may be an option of compare itself."""
    own_options = {o for p in ctx.command.params for o in p.opts if o.startswith("--")}
    for v in variants:
        for token in v.flags:
            flag = token.partition("=")[0]
            if flag in own_options:
                raise InputError(
                    f"variant {v.name!r}: {flag} is an option of compare itself, shared by "
                    "every variant (a variant takes config flags only); give it outside "
                    "--variant"
                )


def _prepared_variants(
    ctx: click.Context, params: dict[str, Any], shared: _Shared, spec: WorkloadSpec
) -> list[PreparedVariant]:
    """Every variant collected, checked and resolved to its config."""
    variants = collect_variants(params["variants_file"], params["variant_options"])
    _refuse_own_options(ctx, variants)
    prepared = [
        dataclasses.replace(pv, config=with_stated_decode_rate(pv.config, spec))
        for pv in prepare_variants(variants, shared.file, shared.flags, preset=params["preset"])
    ]
    for pv in prepared:
        if pv.ignored:
            from prefillkit.app.launch_flags import ignored_line

            echo_err(f"variant {pv.name!r}: {ignored_line(pv.ignored)}")
    return prepared


def _jobs(params: dict[str, Any], prepared: list[PreparedVariant]) -> int:
    jobs: int = params["jobs"] or default_jobs(len(prepared))
    if not params["jobs"] and any(pv.run.executor != "sim" for pv in prepared):
        jobs = 1  # measured forwards: no variant runs beside a timed one
    return jobs


def _load_workload(spec: WorkloadSpec, baseline: PreparedVariant) -> Workload:
    """The shared workload's records (the workers build their own requests)."""
    config = baseline.config
    workload = load_requests(spec, page_size=config.resolved_page_size, seed=config.seed)
    if workload.skipped_rows:
        echo_skipped(spec.trace, workload.skipped_rows)
    return workload


@dataclass(slots=True)
class _Comparison:
    """One compare run: its checked options, variants and workload."""

    ctx: click.Context
    params: dict[str, Any]
    shared: _Shared
    prepared: list[PreparedVariant]
    workload: Workload
    jobs: int
    options: RunOptions

    @property
    def quiet(self) -> bool:
        return bool(self.params["quiet"])

    def _done(self, outcome: VariantOutcome) -> None:
        if not self.quiet:
            echo_err(f"variant {outcome.name!r}: done in {fmt_seconds(outcome.wall_time_s)}")

    def run(self, num_requests: int) -> dict[str, Any]:
        """Run every variant (into ``--out``, else a temporary folder); the comparison."""
        out: str | None = self.params["out"]
        n = len(self.prepared)
        with contextlib.ExitStack() as stack:
            root = (
                out
                if out is not None
                else stack.enter_context(tempfile.TemporaryDirectory(prefix="prefillkit-compare-"))
            )
            if not self.quiet:
                workers = "1 worker process" if self.jobs == 1 else f"{self.jobs} worker processes"
                echo_err(
                    f"comparing {n} variants on {num_requests:,} requests from "
                    f"{self.workload.info['source']} in {workers} (Ctrl-C stops)"
                )
            try:
                run_variants(
                    self.prepared,
                    self.workload,
                    root,
                    jobs=self.jobs,
                    on_done=self._done,
                    options=self.options,
                )
            except VariantsInterrupted as exc:
                echo_err(
                    f"prefillkit: interrupted: stopped the variant runs ({len(exc.finished)} of "
                    f"{n} had finished)"
                )
                self.ctx.exit(EXIT_INTERRUPTED)
            return compare_document(
                self.prepared,
                root,
                self.workload.info,
                shared_config=self.shared.config_path,
                shared_flags=self.shared.flags,
            )

    def print_tables(self, doc: dict[str, Any]) -> None:
        """The workload, the shared settings, each variant, then the two tables."""
        console = make_console()
        console.print(f"workload: {self.workload.info['source']}", markup=False, highlight=False)
        config_path, flags = self.shared.config_path, self.shared.flags
        if flags or config_path:
            shared = " ".join(([f"--config {config_path}"] if config_path else []) + flags)
            console.print(f"shared: {shared}", markup=False, highlight=False)
        for i, pv in enumerate(self.prepared):
            role = " (baseline)" if i == 0 else ""
            console.print(
                f"variant {pv.name}{role}: {describe_variant(pv.variant)}",
                markup=False,
                highlight=False,
            )
        console.print(comparison_table(doc))
        console.print(headline_table(doc))


def _prepare(ctx: click.Context, params: dict[str, Any]) -> _Comparison:
    """Check every option and variant and load the workload, in the order the errors and
    notes are reported."""
    shared = _shared_settings(ctx, params)
    spec = workload_spec(ctx, params, shared.file)
    if params["write_html"] and params["out"] is None:
        raise InputError("--report needs --out DIR (the report is written to DIR/report.html)")
    prepared = _prepared_variants(ctx, params, shared, spec)
    jobs = _jobs(params, prepared)
    options = run_options(params)
    if params["out"] is not None:
        claim_out_folder(ctx, params["out"])
    workload = _load_workload(spec, prepared[0])
    return _Comparison(ctx, params, shared, prepared, workload, jobs, options)


def _write(out: str, doc: dict[str, Any], *, quiet: bool) -> None:
    try:
        write_compare(doc, out)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write results: {os_reason(exc)}") from None
    if not quiet:
        echo_err(f"wrote {out}/compare.json and a run folder per variant")


def run_compare(ctx: click.Context, params: dict[str, Any]) -> None:
    """``prefillkit compare`` with its parsed ``params`` (config flags in ``ctx.args``)."""
    comparison = _prepare(ctx, params)
    num_requests = len(comparison.workload.records)
    comparison.workload.requests.clear()  # the workers build their own
    doc = comparison.run(num_requests)
    out: str | None = params["out"]
    if out is not None:
        _write(out, doc, quiet=comparison.quiet)
    if params["as_json"]:
        click.echo(json.dumps(doc, indent=2))
    else:
        comparison.print_tables(doc)
    if params["write_html"] and out is not None:
        report = write_dir_report(out)
        if not comparison.quiet:
            echo_err(f"wrote {report}")
