"""A fleet's bookkeeping: the load a router tracks per instance, and per-instance metrics.

:class:`FleetLoad` holds the load columns of :class:`~prefillkit.sim.routers.view.FleetView`
(one list per column, indexed by instance), kept by what the router sent and what came
back, as a real router counts them (sglang-router counts a worker's requests from
dispatch to response; Dynamo adds a request's blocks to a worker's active blocks when it
routes it and frees them when it finishes): a routed request adds itself to ``running``,
``waiting`` and its prompt to ``queued_tokens`` and its blocks to ``active_blocks``; its
first token takes it out of ``waiting`` and ``queued_tokens``; its end (finished or
rejected) out of the rest.

:class:`InstanceStats` keeps what the fleet reports per instance: requests routed, their
prompt and cache-hit tokens (device and host, at first admission, as a request's own
metrics say once its prefill is done), TTFTs, forward busy time, the deepest waiting queue
a router saw there, and how often the router's prefix view of the chosen instance was
wrong (an approximate view against the instance's KV events).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

from prefillkit.request import Request

__all__ = ["FleetLoad", "InstanceStats", "imbalance", "instance_rows"]


class FleetLoad:
    """The router-visible load of every instance (module docstring). Mutated by the
    fleet's calls only: :meth:`routed`, :meth:`prefilled`, :meth:`retired`."""

    def __init__(self, total_blocks: Sequence[int], key_tokens: int) -> None:
        n = len(total_blocks)
        self.running = [0] * n
        self.waiting = [0] * n
        self.queued_tokens = [0] * n
        self.active_blocks = [0] * n
        self.total_blocks = list(total_blocks)
        self.key_tokens = key_tokens
        # NOTE: per live request: its instance, its blocks, and whether it still waits
        # for its first token (a requeued request's second prefill is not counted twice).
        self._live: dict[Request, list[int]] = {}

    def routed(self, req: Request, index: int) -> None:
        blocks = -(-req.prompt_len // self.key_tokens)
        self._live[req] = [index, blocks, 1]
        self.running[index] += 1
        self.waiting[index] += 1
        self.queued_tokens[index] += req.prompt_len
        self.active_blocks[index] += blocks

    def prefilled(self, req: Request) -> int:
        """``req``'s prefill is done: its instance, or -1 when it was done before (a
        requeued request prefilled again is counted once)."""
        entry = self._live[req]
        if not entry[2]:
            return -1
        index = entry[0]
        entry[2] = 0
        self.waiting[index] -= 1
        self.queued_tokens[index] -= req.prompt_len
        return index

    def retired(self, req: Request) -> int:
        """``req`` is done; its instance."""
        index, blocks, waiting = self._live.pop(req)
        self.running[index] -= 1
        self.active_blocks[index] -= blocks
        if waiting:
            self.waiting[index] -= 1
            self.queued_tokens[index] -= req.prompt_len
        return index


class InstanceStats:
    """What the fleet reports about one instance (module docstring)."""

    __slots__ = (
        "busy_s",
        "device_hit_tokens",
        "host_hit_tokens",
        "max_waiting",
        "prefilled",
        "prompt_tokens",
        "routed",
        "ttft",
        "view_checked",
        "view_over_tokens",
        "view_under_tokens",
        "view_wrong",
    )

    def __init__(self) -> None:
        self.routed = 0
        self.prefilled = 0
        self.prompt_tokens = 0
        self.device_hit_tokens = 0
        self.host_hit_tokens = 0
        self.busy_s = 0.0
        self.max_waiting = 0
        self.ttft = array("d")
        self.view_checked = 0
        self.view_wrong = 0
        self.view_over_tokens = 0
        self.view_under_tokens = 0

    def first_token(self, req: Request) -> None:
        m = req.metrics
        if m.first_token_time is None:
            return
        self.prefilled += 1
        self.prompt_tokens += req.prompt_len
        self.device_hit_tokens += m.device_hit_tokens
        self.host_hit_tokens += m.host_hit_tokens
        self.ttft.append(m.first_token_time - req.arrival_time)

    def view(self, believed: int, exact: int) -> None:
        """The router believed ``believed`` tokens cached on this instance; its KV events
        said ``exact``."""
        self.view_checked += 1
        if believed != exact:
            self.view_wrong += 1
            if believed > exact:
                self.view_over_tokens += believed - exact
            else:
                self.view_under_tokens += exact - believed

    def row(self, index: int, span_s: float) -> dict[str, Any]:
        """This instance's ``instances.csv`` row (``span_s``: the run's simulated span)."""
        ttft = sorted(self.ttft)
        hit = self.device_hit_tokens + self.host_hit_tokens
        return {
            "instance": index,
            "requests": self.routed,
            "prefilled": self.prefilled,
            "prompt_tokens": self.prompt_tokens,
            "hit_rate": hit / self.prompt_tokens if self.prompt_tokens else None,
            "utilization": self.busy_s / span_s if span_s > 0 else None,
            "ttft_p50_s": _quantile(ttft, 0.50),
            "ttft_p90_s": _quantile(ttft, 0.90),
            "ttft_p99_s": _quantile(ttft, 0.99),
            "ttft_max_s": ttft[-1] if ttft else None,
            "max_waiting": self.max_waiting,
            "view_checked": self.view_checked,
            "view_wrong": self.view_wrong,
        }


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of sorted ``values`` by linear interpolation (numpy's default)."""
    if not values:
        return None
    pos = q * (len(values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def instance_rows(stats: Sequence[InstanceStats], span_s: float) -> list[dict[str, Any]]:
    """Every instance's row, in index order."""
    return [s.row(i, span_s) for i, s in enumerate(stats)]


def imbalance(values: Sequence[float]) -> dict[str, float | None]:
    """How unevenly ``values`` (one per instance) are spread: max over mean (1.0: even)
    and the coefficient of variation (population standard deviation over the mean)."""
    n = len(values)
    mean = sum(values) / n if n else 0.0
    if mean <= 0:
        return {"max_over_mean": None, "cv": None}
    var = sum((v - mean) ** 2 for v in values) / n
    return {"max_over_mean": max(values) / mean, "cv": math.sqrt(var) / mean}
