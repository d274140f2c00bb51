"""Choosing a deployment's forward model: the roofline (:mod:`prefillkit.cost.roofline`) or
AIConfigurator's measured tables (:mod:`prefillkit.cost.aic`, imported only when
asked for), and the record of what timed a run (``summary.json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefillkit.cost.gpus import get_gpu
from prefillkit.cost.roofline import (
    DEFAULT_H2D_BANDWIDTH,
    DEFAULT_KV_TRANSFER_BANDWIDTH,
    CostModel,
    ParallelLayout,
    RooflineCostModel,
)
from prefillkit.models import get_model
from prefillkit.sched.config import ConfigError

if TYPE_CHECKING:
    from prefillkit.cost.deployment import SimSettings

__all__ = [
    "cost_model_for_config",
    "cost_model_record",
    "default_cost_model",
    "roofline_for_config",
]


def default_cost_model(
    model_name: str,
    gpu_name: str,
    num_gpus: int = 8,
    kv_bytes_per_token: int | None = None,
    h2d_gbps: float = DEFAULT_H2D_BANDWIDTH / 1e9,
    kv_transfer_gbps: float = DEFAULT_KV_TRANSFER_BANDWIDTH / 1e9,
    *,
    cp_size: int = 1,
    ep_size: int = 1,
    page_size: int = 64,
    two_batch_overlap: bool = False,
    shared_kv: bool = True,
) -> RooflineCostModel:
    """:class:`RooflineCostModel` for preset names and a layout.

    ``h2d_gbps`` and ``kv_transfer_gbps`` are in GB/s (1e9 *bytes*/s, not Gbit/s).
    ``kv_bytes_per_token`` defaults to the model's bf16 KV size.
    """
    layout = ParallelLayout(
        num_gpus,
        cp_size=cp_size,
        ep_size=ep_size,
        two_batch_overlap=two_batch_overlap,
        shared_kv=shared_kv,
    )
    return RooflineCostModel(
        get_model(model_name),
        get_gpu(gpu_name),
        num_gpus,
        layout=layout,
        page_size=page_size,
        kv_bytes_per_token=kv_bytes_per_token,
        h2d_bandwidth=h2d_gbps * 1e9,
        kv_transfer_bandwidth=kv_transfer_gbps * 1e9,
    )


def cost_model_record(cost: CostModel) -> dict[str, object]:
    """What timed a run's forwards, for ``summary.json`` (``deployment.cost_model``) and the
    deployment panel: the model's ``name``, its ``small_gemm`` assumption where it has one,
    and per breakdown term where the number came from (``provenance()``: measured table,
    derived table or roofline); a model without ``provenance`` (a fitted preset) gives
    its class name and no terms."""
    prov = getattr(cost, "provenance", None)
    record: dict[str, object] = {
        "name": str(getattr(cost, "name", type(cost).__name__)),
        "terms": dict(prov()) if callable(prov) else {},
    }
    small = getattr(cost, "small_gemm", None)
    if isinstance(small, str):
        record["small_gemm"] = small
    return record


def roofline_for_config(cfg: SimSettings, num_gpus: int) -> RooflineCostModel:
    """The roofline cost model of the deployment ``cfg`` describes on ``num_gpus`` GPUs.

    CP runs over ``cfg.cp_size`` ranks (shared-KV when the scheduler's
    ``enable_cp_shared_kv``), DP attention over ``cfg.attn_dp_size`` ranks (then each
    forward is priced by ``breakdown_dp``, one batch per rank), the routed experts over
    ``cfg.ep_size``, attention TP over the rest; the page size, KV bytes, bandwidths,
    two-batch overlap and the small-GEMM assumption come from ``cfg``. Raises
    ``KeyError`` for an unknown GPU name.
    """
    dp = cfg.attn_dp_size
    layout = ParallelLayout(
        num_gpus,
        cp_size=cfg.cp_size,
        dp_size=dp,
        ep_size=cfg.ep_size if cfg.ep_size == num_gpus else 1,
        two_batch_overlap=cfg.enable_two_batch_overlap,
        shared_kv=cfg.scheduler.enable_cp_shared_kv,
    )
    return RooflineCostModel(
        cfg.model,
        cfg.gpu_spec(),
        num_gpus,
        layout=layout,
        page_size=cfg.page_size,
        kv_bytes_per_token=cfg.resolved_kv_bytes_per_token,
        h2d_bandwidth=cfg.h2d_bandwidth_gbps * 1e9,
        kv_transfer_bandwidth=cfg.kv_transfer_bandwidth_gbps * 1e9,
        small_gemm=cfg.small_gemm,
        dp_lockstep=dp > 1,
    )


def cost_model_for_config(cfg: SimSettings, num_gpus: int) -> CostModel:
    """The cost model ``cfg.cost_model`` names for the deployment ``cfg`` describes:
    :func:`roofline_for_config`, or (``aic``) AIConfigurator's measured tables over it
    (:mod:`prefillkit.cost.aic`, imported only here). Raises ``KeyError`` for an
    unknown GPU name, :class:`~prefillkit.sched.config.ConfigError` (one line naming the
    extra) when the ``aic`` extra is missing."""
    roofline = roofline_for_config(cfg, num_gpus)
    if cfg.cost_model != "aic":
        return roofline
    from prefillkit.cost.aic import AicCostModel, AicUnavailableError

    try:
        return AicCostModel(roofline)
    except AicUnavailableError as exc:
        raise ConfigError(str(exc)) from None
