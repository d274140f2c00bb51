"""The simulated deployment's sizes: :class:`Deployment` (pages, host pages, key unit,
GPUs, memory) resolved from the settings and the requests, and :class:`SimConfigError`,
the one-line error of a deployment that cannot be simulated.

With DP attention (``docs/dp_attention.md``) the pools are per DP rank: SGLang sizes the
KV pool per GPU (``KVCacheConfigurator``: free memory over one GPU's KV bytes per token)
and a rank's ``attn_tp`` GPUs hold its own requests' KV, so each rank's scheduler gets
the pool one GPU's memory holds (:meth:`~prefillkit.cost.deployment.SimSettings.total_pages`
with ``attn_tp = tp / (cp x dp)``), ``dp`` pools in the instance; and each GPU holds its
rank's whole attention projections split over ``attn_tp`` GPUs instead of ``tp / cp``
(SGLang's ``DeepseekV2AttentionMLA``: ``parallel_group="attn_tp"``), which
:func:`weights_per_gpu` adds to the even split of the weights."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prefillkit.cost.deployment import SimSettings
from prefillkit.cost.gpus import get_gpu
from prefillkit.models import ModelSpec, token_local_gemms
from prefillkit.request import KeyUnitCheck, KeyUnitError, Request

__all__ = [
    "Deployment",
    "SimConfigError",
    "key_tokens_of",
    "resolve_deployment",
    "weights_per_gpu",
]

#: The FFN GEMMs of :func:`~prefillkit.models.token_local_gemms` (dense layers, shared
#: experts, router): DP attention leaves them split over the whole TP group.
_FFN_GEMMS = frozenset(
    {"dense_gate_up", "dense_down", "shared_gate_up", "shared_down", "router_gate"}
)


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
    #: DP attention ranks; ``total_pages`` and ``host_pages`` are each rank's pools.
    dp_size: int = 1

    def as_dict(self, page_size: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "total_pages": self.total_pages,
            "kv_pool_tokens": self.total_pages * page_size,
            "host_pages": self.host_pages,
            "key_tokens": self.key_tokens,
            "num_gpus": self.num_gpus,
        }
        if self.dp_size > 1:  # NOTE: per rank above; a run without DP keeps its keys
            out["dp_size"] = self.dp_size
            out["kv_pool_tokens_all_ranks"] = self.total_pages * page_size * self.dp_size
        return out


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
    num_gpus = cfg.tp_size
    weights = weights_per_gpu(cfg)
    mem = cfg.device_memory_gb * 1e9 if cfg.device_memory_gb else gpu.memory_bytes
    total_pages = cfg.total_pages(weights, mem / 1e9)
    return Deployment(
        total_pages=total_pages,
        host_pages=cfg.host_pages(total_pages),
        key_tokens=key_tokens_of(list(requests), cfg.page_size),
        num_gpus=num_gpus,
        device_memory_bytes=mem,
        weights_bytes_per_gpu=weights,
        dp_size=cfg.attn_dp_size,
    )


def weights_per_gpu(cfg: SimSettings) -> float:
    """Weight bytes per GPU: the model's weights split evenly over the ``tp`` GPUs, plus,
    with DP attention, the share of the attention projections it replicates: each is
    split over ``attn_tp = tp / (cp x dp)`` GPUs instead of ``tp / cp`` (module
    docstring). ASSUMPTION: the FFN (dense layers, shared experts, router) and the
    vocabulary matrices stay split over the TP group, SGLang's default without
    ``--enable-dp-lm-head`` / ``--moe-dense-tp-size``."""
    model = cfg.model_spec
    even = model.weight_bytes / cfg.tp_size
    if cfg.attn_dp_size == 1:
        return even
    before = max(1, cfg.tp_size // cfg.cp_size)
    extra = 1.0 / cfg.attn_tp_size - 1.0 / before
    return even + attention_params(model) * model.weight_bytes_per_param * extra


def attention_params(model: ModelSpec) -> float:
    """Parameters of the attention projections that attention TP splits (column- or
    row-parallel: the replicated ones are on every GPU either way), all layers."""
    return float(
        sum(
            g.n * g.k * g.layers
            for g in token_local_gemms(model)
            if g.split != "rep" and g.name not in _FFN_GEMMS
        )
    )
