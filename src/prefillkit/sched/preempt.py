# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Priority preemption: which running requests to evict for a higher-priority one."""

from __future__ import annotations

from collections.abc import Callable

from prefillkit.request import Request


def outranks(a: int, b: int, threshold: int, low_values_first: bool) -> bool:
    """Whether priority ``a`` beats ``b`` by more than ``threshold``."""
    diff = (b - a) if low_values_first else (a - b)
    return diff > threshold


def pick_victims(
    req: Request,
    running: list[Request],
    *,
    slots_needed: int,
    tokens_needed: int,
    threshold: int,
    low_values_first: bool,
    reserved: Callable[[Request], float] | None = None,
    held: Callable[[Request], float] | None = None,
) -> list[Request]:
    """Victims for ``req``: lowest priority first, then newest, while the priority
    difference exceeds ``threshold``, until ``slots_needed`` slots and ``tokens_needed``
    tokens are freed. Returns [] if the need cannot be met (all or nothing).

    A victim frees the KV it holds (``held(victim)`` tokens: by default prompt + output
    tokens; the scheduler passes what actually becomes free or evictable) plus, when
    ``reserved`` is given, the decode room the admission budget reserves for it
    (``reserved(victim)`` tokens), since preempting it releases that reservation too.

    A pure function: the caller evicts the victims.
    """
    sign = -1 if low_values_first else 1
    cands = sorted(
        (r for r in running if outranks(req.priority, r.priority, threshold, low_values_first)),
        key=lambda r: (sign * r.priority, -r.arrival_time),
    )
    victims: list[Request] = []
    slots = 0
    tokens = 0.0
    for r in cands:
        if slots >= slots_needed and tokens >= tokens_needed:
            break
        victims.append(r)
        slots += 1
        tokens += (r.input_len + r.output_len if held is None else held(r)) + (
            reserved(r) if reserved is not None else 0
        )
    if slots < slots_needed or tokens < tokens_needed:
        return []
    return victims
