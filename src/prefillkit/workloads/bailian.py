"""Streaming loader for Alibaba Qwen/Bailian KVCache traces (``qwen_trace{A,B}_blksz_16``).

The public trace (github.com/alibaba-edu/qwen-bailian-usagetraces-anon, Apache-2.0) has
one JSON object per line::

    {"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114, "input_length": 521,
     "output_length": 132, "type": "text", "turn": 2, "hash_ids": [1089, 1090, ...]}

Read here:

- ``timestamp`` (or ``arrival_time``): arrival in **seconds** since the trace start
  (number >= 0);
- ``input_length`` (or ``input_len``): prompt tokens (> 0);
- ``output_length`` (or ``output_len``): generated tokens (>= 0);
- ``hash_ids``: per-block ids, ``block_size`` tokens per block (16 in the public files),
  ``len(hash_ids) == ceil(input_length / block_size)``;
- ``chat_id`` (optional) becomes the request id (else ``"L<line number>"``);
- ``priority`` (optional integer, default 0);
- ``ignore_eos`` (optional boolean, default false): generate exactly the output length,
  as upstream's ``ignore_eos`` sampling parameter.

``parent_chat_id``, ``type`` and ``turn`` are accepted and ignored. The block size is the
``block_size`` argument, else taken from a ``blksz_<N>`` in the file name (``N`` from 1 to
999,999,999: a name with ``blksz_0`` is refused), else 16.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from prefillkit.workloads.errors import WorkloadError
from prefillkit.workloads.json_row import (
    RowError,
    check_hash_len,
    get_int,
    get_int_list,
    get_opt_bool,
    get_opt_int,
    get_seconds,
    parse_json_object,
    show,
)
from prefillkit.workloads.jsonl import PathLike, SkipList, stream_records
from prefillkit.workloads.record import TraceRecord

__all__ = ["BAILIAN_BLOCK_SIZE", "bailian_block_size", "iter_bailian", "parse_bailian_line"]

BAILIAN_BLOCK_SIZE = 16

_BLKSZ = re.compile(r"blksz_?(\d+)", re.IGNORECASE)
_MAX_BLKSZ_DIGITS = 9


def bailian_block_size(path: PathLike) -> int:
    """Block size stated in the file name (``..._blksz_16.jsonl``), else 16.

    A name stating a block size of 0 (or one with more than 9 digits) is refused with a
    ``WorkloadError`` naming the file: its hash ids cannot be read with a made-up size."""
    name = os.path.basename(os.fspath(path))
    m = _BLKSZ.search(name)
    if m is None:
        return BAILIAN_BLOCK_SIZE
    digits = m.group(1)
    if len(digits.lstrip("0")) > _MAX_BLKSZ_DIGITS or int(digits) == 0:
        raise WorkloadError(
            path,
            None,
            f"the file name states block size {m.group(0)!r}: expected 1 to "
            f"{10**_MAX_BLKSZ_DIGITS - 1:,} tokens per block (rename the file or give "
            "--block-size N)",
        )
    return int(digits)


def parse_bailian_line(
    lineno: int, text: str, block_size: int, seen: set[str]
) -> TraceRecord | None:
    """Parse one Bailian line (None for a blank line); raises ``RowError`` if bad."""
    obj = parse_json_object(text)
    if obj is None:
        return None
    arrival = get_seconds(obj, "timestamp", "arrival_time")
    input_len = get_int(obj, "input_length", "input_len", min_value=1)
    output_len = get_int(obj, "output_length", "output_len", min_value=0)
    hash_ids = get_int_list(obj, "hash_ids")
    check_hash_len(hash_ids, input_len, block_size)
    chat_id = obj.get("chat_id")
    if chat_id is None:
        rid = f"L{lineno}"
    elif isinstance(chat_id, str) or (type(chat_id) is int):
        rid = str(chat_id)
    else:
        raise RowError(f"field 'chat_id': expected an integer or string, got {show(chat_id)}")
    if rid in seen:  # keep request ids unique even if a chat id repeats
        rid = f"{rid}@L{lineno}"
    seen.add(rid)
    return TraceRecord(
        rid=rid,
        arrival_s=arrival,
        input_len=input_len,
        output_len=output_len,
        hash_ids=hash_ids,
        block_size=block_size,
        tokens=None,
        priority=get_opt_int(obj, "priority", 0),
        ignore_eos=get_opt_bool(obj, "ignore_eos"),
    )


def iter_bailian(
    path: PathLike,
    *,
    block_size: int | None = None,
    skipped: SkipList | None = None,
) -> Iterator[TraceRecord]:
    """Stream ``TraceRecord`` s from a Bailian trace, line by line.

    With ``skipped`` None the first bad row raises ``WorkloadError``; otherwise bad rows
    are appended to it as ``(line, reason)`` and skipped.
    """
    bs = bailian_block_size(path) if block_size is None else block_size
    if bs <= 0:
        raise ValueError(f"block_size must be > 0, got {bs}")
    seen: set[str] = set()
    return stream_records(path, lambda n, t: parse_bailian_line(n, t, bs, seen), skipped=skipped)
