"""The simulated deployment's sizes: :class:`Deployment` (pages, host pages, key unit,
GPUs, memory) resolved from the settings and the requests, and :class:`SimConfigError`,
the one-line error of a deployment that cannot be simulated."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prefillkit.cost.deployment import SimSettings
from prefillkit.cost.gpus import get_gpu
from prefillkit.request import KeyUnitCheck, KeyUnitError, Request

__all__ = ["Deployment", "SimConfigError", "key_tokens_of", "resolve_deployment"]


class SimConfigError(ValueError):
    """A deployment that cannot be simulated (one line, names the flag)."""


@dataclass(slots=True)
class Deployment:
    """Resolved sizes of the simulated deployment."""

    total_pages: int
    host_pages: int
    key_tokens: int
    num_gpus: int
    device_memory_bytes: float
    weights_bytes_per_gpu: float

    def as_dict(self, page_size: int) -> dict[str, Any]:
        return {
            "total_pages": self.total_pages,
            "kv_pool_tokens": self.total_pages * page_size,
            "host_pages": self.host_pages,
            "key_tokens": self.key_tokens,
            "num_gpus": self.num_gpus,
        }


def key_tokens_of(requests: list[Request], page_size: int) -> int:
    """The run's key unit: its keyed requests' one unit (request.py), or the
    page size when none has keys."""
    try:
        unit = KeyUnitCheck().check_all(requests).unit
    except KeyUnitError as e:
        raise SimConfigError(str(e)) from None
    return page_size if unit is None else unit


def resolve_deployment(cfg: SimSettings, requests: Iterable[Request]) -> Deployment:
    try:
        gpu = get_gpu(cfg.gpu)
    except KeyError as e:
        raise SimConfigError(f"--gpu: {e.args[0]}") from None
    model = cfg.model_spec
    num_gpus = cfg.tp_size
    weights = model.weight_bytes / num_gpus
    mem = cfg.device_memory_gb * 1e9 if cfg.device_memory_gb else gpu.memory_bytes
    total_pages = cfg.total_pages(weights, mem / 1e9)
    return Deployment(
        total_pages=total_pages,
        host_pages=cfg.host_pages(total_pages),
        key_tokens=key_tokens_of(list(requests), cfg.page_size),
        num_gpus=num_gpus,
        device_memory_bytes=mem,
        weights_bytes_per_gpu=weights,
    )
