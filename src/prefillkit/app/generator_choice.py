"""Which built-in generator a workload names, with which arguments (app/replay.py
re-exports every name here).

- :data:`GENERATORS`, :func:`generator_call` (the generator function of a
  :class:`~prefillkit.app.replay.WorkloadSpec` and its keyword arguments),
  :func:`name_sources` (a generator's error in the user's words) and
  :func:`generate_records`.

Each generator's parameters as options (``--agentic-*``, ``--gsp-*``, ``--llmd-*`` and the
``[workload]`` table's keys) are :data:`prefillkit.workloads.options.GENERATOR_PARAMS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from prefillkit.workloads.agentic import iter_multi_turn_agentic, multi_turn_agentic
from prefillkit.workloads.block_size import block_size_refusal
from prefillkit.workloads.generators import (
    SEED_AGENTIC,
    generated_shared_prefix,
    iter_generated_shared_prefix,
    merge_agentic_args,
)
from prefillkit.workloads.llmd import iter_llmd_prefix, llmd_prefix
from prefillkit.workloads.record import TraceRecord


class WorkloadSpec(Protocol):
    """What the dispatch reads of :class:`prefillkit.app.replay.WorkloadSpec` (a
    protocol, so this module does not import the one that imports it)."""

    @property
    def generator(self) -> str: ...

    @property
    def generator_args(self) -> Mapping[str, Any]: ...

    @property
    def block_size(self) -> int | None: ...

    @property
    def arg_labels(self) -> Mapping[str, str]: ...


__all__ = [
    "GENERATORS",
    "InputError",
    "generate_records",
    "generator_call",
    "name_sources",
]

#: Built-in workload generators (used when no trace file is given): ``seed`` is
#: ``agentic`` with the seed system's traffic mix (``generators.SEED_AGENTIC``); ``llmd``
#: is llm-d's shared-prefix fleet experiment (``workloads/llmd.py``).
GENERATORS: tuple[str, ...] = ("agentic", "seed", "gsp", "llmd")


class InputError(ValueError):
    """A bad command-line value (one line, names the option)."""


def generator_call(
    spec: WorkloadSpec, lazy: bool = False
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The generator function of ``spec`` and its full keyword arguments (but the seed);
    ``lazy``: the function that yields the records (same records, same order)."""
    args = dict(spec.generator_args)
    if spec.generator in ("agentic", "seed"):
        if spec.generator == "seed":
            args = merge_agentic_args(SEED_AGENTIC, args)
        if spec.block_size is not None:
            args["block_size"] = spec.block_size
        return (iter_multi_turn_agentic if lazy else multi_turn_agentic), args
    if spec.generator == "gsp":
        refusal = block_size_refusal(generator=spec.generator)
        if spec.block_size is not None and refusal is not None:
            raise InputError(f"--block-size {refusal}")
        return (iter_generated_shared_prefix if lazy else generated_shared_prefix), args
    if spec.generator == "llmd":
        if spec.block_size is not None:
            args["block_size"] = spec.block_size
        return (iter_llmd_prefix if lazy else llmd_prefix), args
    raise InputError(
        f"--generator: unknown generator {spec.generator!r}; expected one of "
        f"{', '.join(GENERATORS)}"
    )


def name_sources(message: str, spec: WorkloadSpec) -> str:
    """A generator's error with its parameter names replaced by the user's flags or
    config keys; prefixed with ``--generator NAME:`` when none was named."""
    labels = dict(spec.arg_labels)
    if spec.block_size is not None:
        labels["block_size"] = "--block-size"
    text = " ".join(message.split())
    if labels:
        pattern = r"\b(" + "|".join(map(re.escape, sorted(labels, key=len, reverse=True))) + r")\b"
        text, hits = re.subn(pattern, lambda m: labels[m.group(1)], text)
        if hits:
            return text
    return f"--generator {spec.generator}: {text}"


def generate_records(spec: WorkloadSpec, seed: int) -> tuple[list[TraceRecord], dict[str, Any]]:
    """Run ``spec``'s generator: ``(records sorted by arrival, JSON-ready description)``.

    Raises ``InputError`` naming the flag or config key at fault.
    """
    fn, args = generator_call(spec)
    try:
        records = fn(**args, seed=seed)
    except (TypeError, ValueError) as exc:
        raise InputError(name_sources(str(exc), spec)) from None
    return records, {"generator": spec.generator, **args, "seed": seed}
