"""``prefillkit generate``: a built-in workload written as a prefillkit JSONL trace."""

from __future__ import annotations

from typing import Any

import click

from prefillkit.app.launch import build_config
from prefillkit.app.replay import InputError, WorkloadSpec, generate_records, write_trace_jsonl
from prefillkit.app.settings import ConfigError, ConfigFile
from prefillkit.cli.common import CONTEXT_SETTINGS, echo_err, os_reason
from prefillkit.cli.workload_options import generator_options
from prefillkit.cli.workload_spec import generator_args
from prefillkit.report.console_base import fmt_pct
from prefillkit.workloads.stats import TOKEN_BLOCK_SIZE, trace_stats

__all__ = ["GENERATE_HELP", "generate_cmd"]

GENERATE_HELP = """Write a built-in workload as a prefillkit JSONL trace.

Runs the generator chosen as for replay (--generator, the --agentic-* / --gsp-* / --llmd-*
options, the [workload] table of --config) with the seed of --seed, else of the --config file,
else 0, and writes its requests to FILE.jsonl in prefillkit's own format (arrival_s,
output_len and hash_ids / block_size / input_len, or tokens for gsp), atomically. `replay
--trace FILE.jsonl` then replays exactly the requests `replay` generates with the same
options and seed; `trace-stats FILE.jsonl` reports their ideal hit rate.

\b
Example: the seed system's traffic mix at 0.3 sessions/s
  prefillkit generate --generator seed --agentic-session-rate 0.3 -o seed.jsonl
Example: llm-d's shared-prefix fleet experiment (150 customers, 3 to 60 QPS)
  prefillkit generate --generator llmd -o llmd.jsonl
"""


def _generate_seed(config_path: str | None, seed: int | None) -> tuple[int, ConfigFile | None]:
    """``--seed``, else the seed of the ``--config`` file, else the Config default; and
    the config file as read."""
    try:
        resolved = build_config(config_path, [] if seed is None else ["--seed", str(seed)])
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    return resolved.config.seed, resolved.file


@click.command("generate", help=GENERATE_HELP, context_settings=CONTEXT_SETTINGS)
@generator_options
@click.option(
    "--config",
    "config_path",
    metavar="FILE.toml",
    help="Its [workload] table chooses the workload (flags override it) and its seed setting "
    "the seed.",
)
@click.option("--seed", type=int, help="Random seed [default: the config's, 0].")
@click.option(
    "-o", "--output", required=True, metavar="FILE.jsonl", help="Where to write the trace."
)
@click.option("-q", "--quiet", is_flag=True, help="No note on stderr.")
@click.pass_context
def generate_cmd(ctx: click.Context, /, **params: Any) -> None:
    seed, config_file = _generate_seed(params["config_path"], params["seed"])
    generator, args, labels = generator_args(ctx, params, config_file)
    spec = WorkloadSpec(
        block_size=params["block_size"],
        generator=generator,
        generator_args=args,
        arg_labels=labels,
    )
    records, _ = generate_records(spec, seed)
    output: str = params["output"]
    try:
        write_trace_jsonl(records, output)
    except OSError as exc:
        raise InputError(f"--output {output}: cannot write: {os_reason(exc, output)}") from None
    if not params["quiet"]:
        # The figure trace-stats reports for the file: same function, same token blocks.
        stats = trace_stats(records, token_block_size=TOKEN_BLOCK_SIZE)
        echo_err(
            f"wrote {len(records):,} requests to {output} (generator {generator}, seed {seed}; "
            f"span {stats.span_s:,.1f} s; ideal hit rate {fmt_pct(stats.block_hit_rate)} "
            "by blocks, as trace-stats reports it)"
        )
