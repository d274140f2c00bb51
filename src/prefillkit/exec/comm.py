"""The rank group an executor runs in: one process (R = 1) or R gloo processes."""

from __future__ import annotations

from typing import Protocol

import torch
import torch.distributed as dist
from torch import Tensor


class Comm(Protocol):
    rank: int
    size: int

    def all_gather(self, t: Tensor) -> list[Tensor]:
        """Every rank's ``t`` (same shape on all ranks), indexed by rank."""
        ...


class LocalComm:
    """A group of one."""

    rank = 0
    size = 1

    def all_gather(self, t: Tensor) -> list[Tensor]:
        return [t]


class GlooComm:
    """The default torch.distributed process group (gloo: CPU tensors)."""

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()

    def all_gather(self, t: Tensor) -> list[Tensor]:
        t = t.contiguous().cpu()
        out = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(out, t)
        return out
