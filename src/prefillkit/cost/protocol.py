"""What every forward-time model offers: the :class:`CostModel` protocol, its breakdown
terms (:data:`BREAKDOWN_KEYS`, the ``t_<term>_s`` columns of ``batches.csv``) and the
:class:`ParallelLayout` a deployment splits a forward by (``num_gpus = attn_tp × cp_size
× dp_size``; the routed experts over ``ep_size``, 1 or all GPUs). A model that prices a
DP attention forward, one batch per DP rank run in lockstep, is also a
:class:`LockstepCostModel` (its keys: :func:`dp_breakdown_keys`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from prefillkit.sched.buffer import ReqShape

__all__ = [
    "BREAKDOWN_KEYS",
    "CostModel",
    "LockstepCostModel",
    "ParallelLayout",
    "dp_breakdown_keys",
]

BREAKDOWN_KEYS: tuple[str, ...] = (
    "linear",
    "attention",
    "indexer",
    "elementwise",
    "moe_experts",
    "moe_comm_exposed",
    "tp_comm",
    "cp_kv_gather",
    "loadback_exposed",
    "per_request",
    "per_forward",
    "total",
)


def dp_breakdown_keys(dp_size: int) -> tuple[str, ...]:
    """The breakdown keys of a lockstep DP attention forward over ``dp_size`` ranks:
    :data:`BREAKDOWN_KEYS` with ``dp_rank<i>`` (rank ``i``'s attention-side seconds, the
    ``t_dp_rank<i>_s`` columns; not part of the total) before ``total``."""
    ranks = tuple(f"dp_rank{i}" for i in range(dp_size))
    return (*BREAKDOWN_KEYS[:-1], *ranks, BREAKDOWN_KEYS[-1])


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """How one instance's ``num_gpus`` GPUs split a forward (module docstring)."""

    num_gpus: int
    cp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    two_batch_overlap: bool = False
    cp_kv_prefetch: bool = False
    shared_kv: bool = True  # CP KV sharded over owner lanes (shared-KV); else replicated

    def __post_init__(self) -> None:
        for name in ("num_gpus", "cp_size", "dp_size", "ep_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_gpus % (self.cp_size * self.dp_size):
            raise ValueError(
                f"cp_size x dp_size ({self.cp_size} x {self.dp_size}) must divide "
                f"num_gpus {self.num_gpus}"
            )
        if self.ep_size not in (1, self.num_gpus):
            raise ValueError(f"ep_size must be 1 or num_gpus ({self.num_gpus}), got {self.ep_size}")

    @property
    def attn_tp(self) -> int:
        return self.num_gpus // (self.cp_size * self.dp_size)


class CostModel(Protocol):
    breakdown_keys: tuple[str, ...]

    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        """Seconds per term of one prefill forward; ``"total"`` is the forward time."""
        ...

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        """Seconds for one prefill forward over ``batch`` (0.0 for an empty batch)."""
        ...

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        """Seconds for one decode step of ``batch_size`` requests."""
        ...

    def kv_transfer_time(self, tokens: int) -> float:
        """Seconds to send ``tokens`` tokens of KV out (PD prefill send-out)."""
        ...


class LockstepCostModel(Protocol):
    """A cost model that prices one DP attention forward (``prefillkit.sim.dp_attention``)."""

    def breakdown_dp(self, batches: Sequence[Sequence[ReqShape]]) -> dict[str, float]:
        """Seconds per term of one lockstep forward: ``batches[i]`` is DP rank ``i``'s
        batch (empty: the rank idles through the forward); keys :func:`dp_breakdown_keys`."""
        ...
