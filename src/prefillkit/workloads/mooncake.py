# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Streaming loader for Mooncake (FAST'25) JSONL traces.

One JSON object per line::

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}

- ``timestamp``: arrival in **milliseconds** since the trace start (integer >= 0);
- ``input_length``: prompt tokens (> 0); ``output_length``: generated tokens (>= 0);
- ``hash_ids``: chain-consistent prefix-block ids, ``block_size`` (512) tokens per block,
  ``len(hash_ids) == ceil(input_length / block_size)`` (the last block may be partial);
- ``priority`` (optional integer, default 0);
- ``ignore_eos`` (optional boolean, default false): generate exactly the output length,
  as upstream's ``ignore_eos`` sampling parameter.

Works for ``conversation_trace.jsonl`` and the other FAST'25 traces (``toolagent_trace``,
``synthetic_trace``) which share the format. Request ids are ``"L<line number>"``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefillkit.workloads.json_row import (
    check_hash_len,
    get_int,
    get_int_list,
    get_opt_bool,
    get_opt_int,
    parse_json_object,
)
from prefillkit.workloads.jsonl import PathLike, SkipList, stream_records
from prefillkit.workloads.record import TraceRecord

__all__ = ["MOONCAKE_BLOCK_SIZE", "iter_mooncake", "parse_mooncake_line"]

MOONCAKE_BLOCK_SIZE = 512


def parse_mooncake_line(lineno: int, text: str, block_size: int) -> TraceRecord | None:
    """Parse one Mooncake line (None for a blank line); raises ``RowError`` if bad."""
    obj = parse_json_object(text)
    if obj is None:
        return None
    ts_ms = get_int(obj, "timestamp", min_value=0)
    input_len = get_int(obj, "input_length", min_value=1)
    output_len = get_int(obj, "output_length", min_value=0)
    hash_ids = get_int_list(obj, "hash_ids")
    check_hash_len(hash_ids, input_len, block_size)
    return TraceRecord(
        rid=f"L{lineno}",
        arrival_s=ts_ms / 1000.0,
        input_len=input_len,
        output_len=output_len,
        hash_ids=hash_ids,
        block_size=block_size,
        tokens=None,
        priority=get_opt_int(obj, "priority", 0),
        ignore_eos=get_opt_bool(obj, "ignore_eos"),
    )


def iter_mooncake(
    path: PathLike,
    *,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    skipped: SkipList | None = None,
) -> Iterator[TraceRecord]:
    """Stream ``TraceRecord`` s from a Mooncake trace, line by line.

    With ``skipped`` None the first bad row raises ``WorkloadError``; otherwise bad rows
    are appended to it as ``(line, reason)`` and skipped.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    return stream_records(path, lambda n, t: parse_mooncake_line(n, t, block_size), skipped=skipped)
