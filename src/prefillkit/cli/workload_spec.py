"""The workload options read back (:mod:`prefillkit.cli.workload_options`): which generator
with which arguments, or which trace with which replay options, as a
:class:`~prefillkit.app.replay.WorkloadSpec`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from prefillkit.app.replay import InputError, WorkloadSpec, make_replay_options
from prefillkit.app.settings import ConfigFile
from prefillkit.workloads.generators import merge_agentic_args
from prefillkit.workloads.options import (
    AGENTIC_PARAMS,
    GSP_PARAMS,
    LLMD_PARAMS,
    WorkloadTable,
    WorkloadTableError,
    workload_table,
)
from prefillkit.workloads.param_values import GenParam

__all__ = ["generator_args", "workload_spec"]


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


def _given_params(ctx: click.Context, params: Sequence[GenParam]) -> list[GenParam]:
    return [p for p in params if p.cli and _given(ctx, p.dest)]


def _file_table(config_file: ConfigFile | None) -> WorkloadTable | None:
    """The ``[workload]`` table of the ``--config`` file (None without one)."""
    if config_file is None:
        return None
    try:
        return workload_table(config_file.document, config_file.path)
    except WorkloadTableError as exc:
        raise InputError(str(exc)) from None


#: Each generator family's parameters (``seed`` takes the agentic ones).
_FAMILIES: dict[str, Sequence[GenParam]] = {
    "agentic": AGENTIC_PARAMS,
    "gsp": GSP_PARAMS,
    "llmd": LLMD_PARAMS,
}


def _family(generator: str) -> str:
    return "agentic" if generator == "seed" else generator


def _default_generator(given: dict[str, list[GenParam]]) -> str:
    """``gsp`` or ``llmd`` when only that family's options are given, else ``agentic``."""
    families = [name for name, params in given.items() if params]
    return families[0] if len(families) == 1 else "agentic"


def generator_args(
    ctx: click.Context, params: dict[str, Any], config_file: ConfigFile | None
) -> tuple[str, dict[str, Any], dict[str, str]]:
    """``(generator, keyword arguments, where each came from)`` of a generated workload.

    Layers, lowest first: the ``[workload]`` table of ``--config``, then the flags (the
    ``seed`` preset's values lie below both; see ``app.generator_choice.generator_call``).
    The generator is ``--generator``, else the table's, else ``gsp`` / ``llmd`` when only
    ``--gsp-*`` / ``--llmd-*`` options are given, else ``agentic``.
    """
    given = {name: _given_params(ctx, ps) for name, ps in _FAMILIES.items()}
    table = _file_table(config_file)
    generator: str | None = params["generator"] or (table.generator if table else None)
    if generator is None:
        generator = _default_generator(given)
    wrong = [p for name, ps in given.items() if name != _family(generator) for p in ps]
    if wrong:
        raise InputError(f"{wrong[0].flag} does not apply to --generator {generator}")
    try:
        file_args = table.args_for(generator) if table is not None else {}
    except WorkloadTableError as exc:
        raise InputError(str(exc)) from None
    mine = given[_family(generator)]
    flag_args = {p.name: params[p.dest] for p in mine}
    labels = {n: table.label(n) for n in file_args} if table is not None else {}
    labels.update((p.name, p.flag) for p in mine)
    if generator in ("gsp", "llmd"):
        return generator, {**file_args, **flag_args}, labels
    return generator, merge_agentic_args(file_args, flag_args), labels


def _refuse_generator_options(ctx: click.Context, params: dict[str, Any]) -> None:
    """Refuse ``--generator`` and the generator parameters next to ``--trace``."""
    given = [p for ps in (GSP_PARAMS, AGENTIC_PARAMS, LLMD_PARAMS) for p in _given_params(ctx, ps)]
    extra = (["--generator"] if params["generator"] is not None else []) + [p.flag for p in given]
    if extra:
        raise InputError(f"{extra[0]} does not apply with --trace (a trace file)")


def workload_spec(
    ctx: click.Context, params: dict[str, Any], config_file: ConfigFile | None
) -> WorkloadSpec:
    """The workload options as a spec; ``config_file``'s ``[workload]`` table (if any)
    lies below the generator flags."""
    trace = params["trace"]
    generator = "agentic"
    gen_args: dict[str, Any] = {}
    labels: dict[str, str] = {}
    if trace is not None:
        _refuse_generator_options(ctx, params)
    else:
        if _given(ctx, "fmt"):
            raise InputError("--format needs --trace")
        generator, gen_args, labels = generator_args(ctx, params, config_file)
    if params["skip_bad_rows"] and trace is None:
        raise InputError("--skip-bad-rows needs --trace")
    replay = make_replay_options(
        time_scale=params["time_scale"],
        rate=params["rate"],
        max_requests=params["max_requests"],
        start_s=params["start"],
        duration_s=params["duration"],
        spread_buckets=params["spread_buckets"],
        skip_bad_rows=params["skip_bad_rows"],
    )
    return WorkloadSpec(
        trace=trace,
        fmt=params["fmt"],
        block_size=params["block_size"],
        generator=generator,
        generator_args=gen_args,
        replay=replay,
        arg_labels=labels,
    )
