"""Helpers for the executor tests: a tiny per-lane page allocator and plan builders.

The allocator stands in for the scheduler's (issue 15): free lists per owner lane, LIFO, so a
freed page is the next one handed out (eviction and reuse are easy to provoke).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from prefillkit.exec.executor import Executor, StepOutput
from prefillkit.exec.model import Model, ModelConfig
from prefillkit.exec.plan import HostCopy, ReqPlan, StepPlan

PAGE = 4


def assert_bitwise(a: torch.Tensor, b: torch.Tensor) -> None:
    """Same shape, same dtype, same bits (int view: -0.0 != 0.0, NaN payloads compared)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    same = torch.equal(a.view(torch.int64), b.view(torch.int64))
    assert same, f"max |diff| {float((a - b).abs().max()):.3e}"


def differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    return not torch.equal(a.view(torch.int64), b.view(torch.int64))


def prompt(seed: int, n: int, vocab: int = 96) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(vocab) for _ in range(n))


class Pages:
    """Free lists per lane; page j of a sequence goes to lane j % cp."""

    def __init__(self, cp: int, n_pages: int) -> None:
        self.cp = cp
        self.free = [list(range(n_pages - 1, -1, -1)) for _ in range(cp)]

    def alloc(self, lane: int) -> int:
        return self.free[lane].pop()

    def release(self, table: Sequence[int], first: int = 0) -> None:
        """Free sequence pages first.. of a table (in reverse, so LIFO hands them back in order)."""
        for j in range(len(table) - 1, first - 1, -1):
            self.free[j % self.cp].append(table[j])


def per_lane(table: Sequence[int], first: int, cp: int) -> tuple[tuple[int, ...], ...]:
    """Split sequence pages first.. of a table into per-lane lists (page j on lane j % cp)."""
    return tuple(
        tuple(table[j] for j in range(first, len(table)) if j % cp == lane) for lane in range(cp)
    )


def extend(
    pages: Pages,
    rid: object,
    tokens: Sequence[int],
    start: int,
    end: int,
    prefix_table: Sequence[int] = (),
    is_chunk: bool | None = None,
) -> tuple[ReqPlan, list[int]]:
    """Plan tokens[start:end] over a page-aligned prefix held in prefix_table's first pages;
    allocates the new pages. Returns the plan and the request's page table after it."""
    cp = pages.cp
    n_prefix = start // PAGE
    assert start % PAGE == 0 and len(prefix_table) >= n_prefix
    table = list(prefix_table[:n_prefix])
    for j in range(n_prefix, -(-end // PAGE)):
        table.append(pages.alloc(j % cp))
    plan = ReqPlan(
        rid=rid,
        token_ids=tuple(tokens[start:end]),
        prefix_len=start,
        prefix_pages=per_lane(table[:n_prefix], 0, cp),
        new_pages=per_lane(table, n_prefix, cp),
        is_chunk=(end < len(tokens)) if is_chunk is None else is_chunk,
    )
    return plan, table


def backups(table: Sequence[int], n: int, slots: Sequence[int], cp: int) -> tuple[HostCopy, ...]:
    """Copies of a table's first n pages into host slots (slot i for page i; slots per lane)."""
    return tuple(HostCopy(j % cp, slots[j], table[j]) for j in range(n))


def fresh(cfg: ModelConfig | None = None, n_pages: int = 64, host: int = 16) -> Executor:
    return Executor(Model(cfg or ModelConfig()), PAGE, n_pages, host)


def cold(tokens: Sequence[int], cfg: ModelConfig | None = None) -> torch.Tensor:
    """Logits of a whole prompt on an empty cache, alone."""
    pages = Pages(1, 64)
    plan, _ = extend(pages, "x", tokens, 0, len(tokens))
    return fresh(cfg).step(StepPlan((plan,))).logits["x"]


def run(ex: Executor, *reqs: ReqPlan, **kw: tuple[HostCopy, ...]) -> StepOutput:
    return ex.step(StepPlan(tuple(reqs), **kw))


def wrong_lane_fault() -> None:
    """A CP bug for negative controls: page j is computed and written on lane (j // 2) % R
    instead of j % R (runs in each worker before the steps)."""
    import prefillkit.exec.executor as executor

    executor.owner_lane = lambda pos, page_size, cp: (pos // page_size // 2) % cp
