"""``prefillkit replay``: one workload through the scheduler simulator (its steps are in
:mod:`prefillkit.cli.replay_run`, loaded when the command runs)."""

from __future__ import annotations

from typing import Any

import click

from prefillkit.app.launch import PRESETS
from prefillkit.app.measured import EXECUTORS
from prefillkit.cli.common import CONTEXT_SETTINGS
from prefillkit.cli.flag_help import ConfigFlagsCommand
from prefillkit.cli.workload_options import workload_options
from prefillkit.records.steady import DEFAULT_WINDOW_S

__all__ = ["REPLAY_HELP", "replay_cmd"]

REPLAY_HELP = """Replay a trace (or a built-in workload) through the scheduler simulator.

With no arguments, replays the built-in agentic multi-turn workload (multi_turn_agentic,
seeded by --seed) on the demo deployment (--preset demo: GLM-5 on 8xH200, TP 8, CP 8
shared-KV, HiCache, pd-prefill), and says so.

As soon as a deployment flag (model, GPUs, TP/CP/EP, DP attention, HiCache, memory; or a
pasted SGLang launch flag such as --trust-remote-code) is given, whatever the line does
not say takes
SGLang 0.5.23's default (TP 1, CP 1, HiCache off, colocated unless
--disaggregation-mode prefill, ...); the model comes from --model-path (a preset's
Hugging Face id, or a local config.json) or --model-config. --preset NAME (demo, seed)
puts a named deployment under the line instead; its values the line contradicts are
dropped (--tp 4 drops the demo's CP 8). The header lists every deployment setting with
where it came from; `prefillkit knobs` lists the defaults of each base.

Every config flag listed below can be given, spelled as SGLang spells it, so an SGLang
launch command can be pasted. Ctrl-C stops the replay, writes the results so far marked
partial and exits with status 130.
"""


@click.command(
    "replay",
    cls=ConfigFlagsCommand,
    help=REPLAY_HELP,
    context_settings=CONTEXT_SETTINGS,
)
@workload_options
@click.option(
    "--config",
    "config_path",
    metavar="FILE.toml",
    help="TOML settings (top level or [prefillkit]); flags override it.",
)
@click.option(
    "--preset",
    type=click.Choice(tuple(PRESETS)),
    help="A named deployment under the launch flags [default: demo without launch flags, "
    "else SGLang's defaults].",
)
@click.option(
    "--window-s",
    type=click.FloatRange(min=0.0, min_open=True),
    default=DEFAULT_WINDOW_S,
    show_default=True,
    help="Window length (seconds of arrival time) of the per-window TTFT, utilisation and "
    "overload metrics.",
)
@click.option(
    "--percentiles",
    metavar="LIST",
    help="TTFT / queueing percentiles the summary shows, comma separated, as vLLM's "
    "--metric-percentiles (e.g. 50,90,99.9); p50/p90/p95/p99 are always in summary.json. "
    "[default: 50,90,95,99]",
)
@click.option(
    "--slo-ttft",
    metavar="DURATION",
    help="TTFT SLO (2s, 2000ms; a bare number is seconds): adds SLO attainment (share of all "
    "requests with TTFT within it) and goodput (those per second), as vLLM's "
    "--goodput ttft:2000.",
)
@click.option(
    "--trace-events",
    metavar="FILE",
    help="Write the run's timeline (forwards and request lifecycles) to FILE in the "
    "Chrome / Perfetto trace-event JSON format (open in ui.perfetto.dev or chrome://tracing).",
)
@click.option(
    "--out",
    metavar="DIR",
    help="Write summary.json, requests.csv and batches.csv into DIR (created if needed).",
)
@click.option("--name", help="Run name in summary.json [default: the --out folder's name].")
@click.option(
    "--report",
    "write_html",
    is_flag=True,
    help="Also write OUT/report.html, a self-contained HTML report (needs --out).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the summary as JSON instead of a table."
)
@click.option(
    "--executor",
    type=click.Choice(EXECUTORS),
    default="sim",
    show_default=True,
    help="What times each prefill forward: sim (the cost model), torch (run it on the real "
    "executor, a small seeded CPU model, and time it on the wall clock) or torch-cpu (the same, "
    "timed by its CPU time: reproducible on a busy machine). The executor needs the torch "
    "extra, --disaggregation-mode prefill and a small pool (--max-total-tokens); it also "
    "writes OUT/forwards.csv for prefillkit calibrate.",
)
@click.option(
    "--cost-preset",
    metavar="FILE.toml",
    help="Time the simulated forwards with a cost-model preset fitted by prefillkit "
    "calibrate (not with --executor torch).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no notes on stderr.")
@click.pass_context
def replay_cmd(ctx: click.Context, /, **params: Any) -> None:
    from prefillkit.cli.replay_run import run_replay_command  # NOTE: not loaded for --help

    run_replay_command(ctx, params)
