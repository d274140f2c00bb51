"""Generator parameters as options: their kinds, command-line parsing and the TOML table.

Each built-in generator's keyword arguments are described once (:data:`GENERATOR_PARAMS`:
``agentic`` and ``seed`` take :data:`AGENTIC_PARAMS`, ``gsp`` :data:`GSP_PARAMS`, ``llmd``
:data:`LLMD_PARAMS`): the command-line option that sets it, the kind of value and its
bounds. The same
description parses a flag's text (:func:`parse_text`) and checks a value from a TOML
``[workload]`` table (:func:`check_value`), so both give the same one-line errors
(:class:`GenParam`, the value kinds, checks and parsing are in
:mod:`prefillkit.workloads.param_values`).

Ranges are written ``LO,HI`` on the command line (``--agentic-turns 10,30``; a single
number ``N`` means ``N,N``) and ``[LO, HI]`` (or a single number) in TOML. Lists (llmd's
``qps_steps`` and ``step_s``) are written ``3,10,15`` on the command line and
``[3, 10, 15]`` (or a single number) in TOML.

The ``[workload]`` table (:func:`workload_table`) sits beside the ``[prefillkit]``
table of a ``--config`` file: ``generator = "seed"`` (or ``agentic`` / ``gsp`` / ``llmd``;
default ``agentic``) plus any of that generator's parameters by keyword name (``_`` or ``-``)::

    [prefillkit]
    chunked_prefill_size = 16384

    [workload]
    generator = "seed"
    session_arrival_rate = 0.3
    turns_per_session = [10, 30]
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefillkit.workloads.generators import SYSTEM_PROMPT_CHOICE
from prefillkit.workloads.llmd import PICKS
from prefillkit.workloads.param_values import GenParam, check_value, show_value

__all__ = [
    "AGENTIC_PARAMS",
    "GENERATOR_PARAMS",
    "GSP_PARAMS",
    "LLMD_PARAMS",
    "WorkloadTable",
    "WorkloadTableError",
    "params_of",
    "workload_table",
]


def _agentic(name: str, flag: str, kind: str, help: str, **kw: Any) -> GenParam:
    return GenParam(name, f"--agentic-{flag}", kind, f"Agentic: {help}", **kw)


AGENTIC_PARAMS: tuple[GenParam, ...] = (
    _agentic("num_sessions", "sessions", "int", "number of sessions.", low=1),
    _agentic("turns_per_session", "turns", "int_range", "turns per session, LO,HI.", low=1),
    _agentic(
        "system_prompt_len",
        "system-prompt-len",
        "int_range",
        "system prompt tokens, N or LO,HI (a length drawn per prompt).",
    ),
    _agentic(
        "num_system_prompts",
        "system-prompts",
        "int",
        "distinct system prompts, assigned to sessions round robin (none: one shared "
        "by all, unless --agentic-sessions-per-system-prompt).",
        low=1,
        nullable=True,
    ),
    _agentic(
        "sessions_per_system_prompt",
        "sessions-per-system-prompt",
        "int",
        "sessions sharing one system prompt (consecutive groups; 1 = one per session).",
        low=1,
        nullable=True,
    ),
    _agentic("first_user_len", "first-user-len", "int_range", "turn-1 user tokens, LO,HI.", low=1),
    _agentic(
        "turn_append_len",
        "turn-append-len",
        "int_range",
        "tokens appended per later turn (tool output / user text), LO,HI.",
        low=1,
    ),
    _agentic("output_len", "output-len", "int_range", "output tokens per turn, LO,HI."),
    _agentic("think_time_s", "think-time", "float_range", "seconds between turns, LO,HI."),
    _agentic(
        "session_arrival_rate",
        "session-rate",
        "float",
        "session arrival rate (per second).",
        strict=True,
        allow_inf=True,
    ),
    _agentic(
        "max_prompt_len",
        "max-prompt-len",
        "int",
        "a session ends before a turn whose prompt would be longer ('none': no limit).",
        low=1,
        nullable=True,
    ),
    _agentic(
        "prefill_tokens_per_s",
        "prefill-tokens-per-s",
        "float",
        "nominal prefill speed for turn spacing (tokens/s).",
        strict=True,
    ),
    _agentic(
        "decode_tokens_per_s",
        "decode-tokens-per-s",
        "float",
        "nominal decode speed for turn spacing (tokens/s).",
        strict=True,
    ),
    GenParam(
        "block_size",
        "--block-size",
        "int",
        "Tokens per hash block.",
        low=1,
        cli=False,
    ),
)


def _gsp(name: str, flag: str, kind: str, help: str, **kw: Any) -> GenParam:
    return GenParam(name, f"--gsp-{flag}", kind, f"GSP: {help}", **kw)


GSP_PARAMS: tuple[GenParam, ...] = (
    _gsp("num_groups", "num-groups", "int", "system-prompt groups.", low=1),
    _gsp("prompts_per_group", "prompts-per-group", "int", "requests per group.", low=1),
    _gsp("system_prompt_len", "system-prompt-len", "int", "system prompt tokens."),
    _gsp("question_len", "question-len", "int", "question tokens.", low=1),
    _gsp("output_len", "output-len", "int", "output tokens."),
    _gsp(
        "range_ratio",
        "range-ratio",
        "float",
        "lengths drawn from [len x ratio, len].",
        strict=True,
        high=1.0,
    ),
    _gsp("num_turns", "num-turns", "int", "turns per conversation.", low=1),
    _gsp(
        "request_rate",
        "request-rate",
        "float",
        "Poisson request rate (inf: all at once).",
        strict=True,
        allow_inf=True,
    ),
    _gsp(
        "group_distribution",
        "group-distribution",
        "choice",
        "how requests are spread over groups.",
        choices=("uniform", "zipf"),
    ),
    _gsp("zipf_alpha", "zipf-alpha", "float", "Zipf exponent (with zipf).", strict=True),
    _gsp("ordered", "ordered", "bool", "keep requests in group order (no shuffle)."),
)


def _llmd(name: str, flag: str, kind: str, help: str, **kw: Any) -> GenParam:
    return GenParam(name, f"--llmd-{flag}", kind, f"llm-d: {help}", **kw)


LLMD_PARAMS: tuple[GenParam, ...] = (
    _llmd("customers", "customers", "int", "customers (groups with one context each).", low=1),
    _llmd("users_per_customer", "users-per-customer", "int", "questions a customer.", low=1),
    _llmd("context_tokens", "context-tokens", "int", "context tokens a customer (shared prefix)."),
    _llmd("query_tokens", "query-tokens", "int", "question tokens a request.", low=1),
    _llmd("output_tokens", "output-tokens", "int", "output tokens a request (ignore_eos)."),
    _llmd("qps_steps", "qps-steps", "float_list", "each step's QPS, Q1,Q2,...", strict=True),
    _llmd("step_s", "step-s", "float_list", "step seconds: one, or one a step.", strict=True),
    _llmd("warmup_qps", "warmup-qps", "float", "warm-up stage rate (0: none)."),
    _llmd("warmup_s", "warmup-s", "float", "warm-up stage seconds (0: none)."),
    _llmd("step_gap_s", "step-gap-s", "float", "seconds from a stage's last arrival to the next."),
    _llmd("pick", "pick", "choice", "a request's prompt: harness cycle or uniform.", choices=PICKS),
    _llmd("fresh_queries", "fresh-queries", "bool", "a new question for every request."),
    GenParam("block_size", "--block-size", "int", "Tokens per hash block.", low=1, cli=False),
)

#: Generator name -> its parameters (``seed`` is ``agentic`` with preset values).
GENERATOR_PARAMS: Mapping[str, tuple[GenParam, ...]] = {
    "agentic": AGENTIC_PARAMS,
    "seed": AGENTIC_PARAMS,
    "gsp": GSP_PARAMS,
    "llmd": LLMD_PARAMS,
}


def params_of(generator: str) -> dict[str, GenParam]:
    """``name -> GenParam`` of ``generator`` (a key of :data:`GENERATOR_PARAMS`)."""
    return {p.name: p for p in GENERATOR_PARAMS[generator]}


# --------------------------------------------------------------------------- TOML


class WorkloadTableError(ValueError):
    """A bad ``[workload]`` table (one line; names the file and the key)."""


@dataclass(frozen=True, slots=True)
class WorkloadTable:
    """The ``[workload]`` table of a config file: a generator name (None when the table
    does not give one) and its raw settings by keyword name."""

    path: str
    generator: str | None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def label(self, name: str) -> str:
        """How an error names setting ``name``."""
        return f"{self.path}: [workload] {name}"

    def args_for(self, generator: str) -> dict[str, Any]:
        """The settings checked as arguments of ``generator``; raises
        ``WorkloadTableError`` for an unknown key, a bad value or conflicting keys."""
        known = params_of(generator)
        out: dict[str, Any] = {}
        for name, value in self.settings.items():
            if name not in known:
                raise WorkloadTableError(self._unknown(name, generator, list(known)))
            try:
                out[name] = check_value(known[name], value)
            except ValueError as exc:
                raise WorkloadTableError(f"{self.label(name)}: {exc}") from None
        both = [n for n in SYSTEM_PROMPT_CHOICE if out.get(n) is not None]
        if len(both) == 2:
            raise WorkloadTableError(
                f"{self.path}: [workload]: give {both[0]} or {both[1]}, not both"
            )
        return out

    def _unknown(self, name: str, generator: str, known: list[str]) -> str:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        if self.generator is not None and self.generator != generator:
            hint += f" (the table is for generator {self.generator}; --generator replaced it)"
        return f"{self.path}: [workload]: unknown key {name!r} for generator {generator}{hint}"


def workload_table(data: Mapping[str, Any], path: str) -> WorkloadTable | None:
    """The ``[workload]`` table of the parsed config file ``data`` (read from ``path``,
    which names the file in errors), or None when it has none.

    The config settings of such a file must be in a ``[prefillkit]`` table (the config
    reader takes top-level keys as settings otherwise). Raises ``WorkloadTableError``.
    """
    if "workload" not in data:
        return None
    table = data["workload"]
    if not isinstance(table, dict):
        raise WorkloadTableError(f"{path}: 'workload' must be a table ([workload])")
    if "prefillkit" not in data:
        raise WorkloadTableError(
            f"{path}: a file with a [workload] table keeps its config settings in a "
            "[prefillkit] table (an empty one is fine)"
        )
    settings: dict[str, Any] = {}
    generator: str | None = None
    for key, value in table.items():
        name = str(key).replace("-", "_")
        if name in settings or (name == "generator" and generator is not None):
            raise WorkloadTableError(f"{path}: [workload] {key!r} given twice ('-' and '_')")
        if name == "generator":
            if value not in GENERATOR_PARAMS:
                raise WorkloadTableError(
                    f"{path}: [workload] generator: expected one of "
                    f"{', '.join(GENERATOR_PARAMS)}, got {show_value(value)}"
                )
            generator = str(value)
        elif name == "seed":
            raise WorkloadTableError(
                f"{path}: [workload] seed: the seed is a config setting (seed = N in "
                "[prefillkit], or --seed)"
            )
        else:
            settings[name] = value
    return WorkloadTable(path=path, generator=generator, settings=settings)
