"""KV memory: one device pool per owner lane indexed by page id, and a lane's host-tier slots."""

from __future__ import annotations

import torch
from torch import Tensor

from prefillkit.exec.model import DTYPE


class LanePool:
    """One owner lane's device KV: ``data[layer, page, slot_in_page, :]``, one row per token."""

    def __init__(
        self,
        lane: int,
        n_pages: int,
        page_size: int,
        n_layers: int,
        width: int,
        device: str | torch.device = "cpu",
    ) -> None:
        self.lane = lane
        self.page_size = page_size
        # NaN until written: a read of a page nobody wrote poisons the logits visibly
        self.data = torch.full(
            (n_layers, n_pages, page_size, width), float("nan"), dtype=DTYPE, device=device
        )

    @property
    def n_pages(self) -> int:
        return self.data.shape[1]

    def _check(self, pages: Tensor) -> None:
        if pages.numel() and (int(pages.min()) < 0 or int(pages.max()) >= self.n_pages):
            raise ValueError(f"page id outside lane {self.lane}'s pool of {self.n_pages} pages")

    def write(self, layer: int, pages: Tensor, offsets: Tensor, rows: Tensor) -> None:
        self._check(pages)
        self.data[layer, pages, offsets] = rows

    def read(self, layer: int, pages: Tensor, offsets: Tensor) -> Tensor:
        self._check(pages)
        return self.data[layer, pages, offsets]


class HostPool:
    """One lane's host-tier slots: ``data[slot]`` holds a whole page (all layers), in CPU memory."""

    def __init__(self, lane: int, n_slots: int, page_size: int, n_layers: int, width: int) -> None:
        self.lane = lane
        self.data = torch.full((n_slots, n_layers, page_size, width), float("nan"), dtype=DTYPE)

    def store(self, slot: int, device: LanePool, page: int) -> None:
        """Back up a device page into a host slot (write-through / write-back)."""
        self.data[slot] = device.data[:, page].to("cpu")

    def load(self, slot: int, device: LanePool, page: int) -> None:
        """Load a host slot back into a device page."""
        device.data[:, page] = self.data[slot].to(device.data.device)
