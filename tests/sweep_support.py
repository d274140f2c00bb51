"""Shared helpers of the sweep tests: tiny grids and traces."""

from __future__ import annotations

import json
from pathlib import Path

TINY_GRID = """
[sweep]
seeds = [0, 1]

[grid]
chunked_prefill_size = [4096, 8192]
schedule_policy = ["fcfs", "lpm"]

[[workload]]
name = "tiny"
generator = "agentic"
num_sessions = 4
turns_per_session = [2, 4]
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def even_trace(path: Path, n: int = 40, input_len: int = 4096) -> Path:
    """``n`` identical requests sharing nothing, one per second (jsonl)."""
    blocks = -(-input_len // 512)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            row = {
                "arrival_s": float(i),
                "output_len": 16,
                "hash_ids": [i * 1000 + k for k in range(blocks)],
                "block_size": 512,
                "input_len": input_len,
            }
            fh.write(json.dumps(row) + "\n")
    return path


def task_log(path: Path) -> list[str]:
    """Point ids of the task log, one per task started."""
    if not path.exists():
        return []
    return [line.split()[1] for line in path.read_text().splitlines() if line.strip()]
