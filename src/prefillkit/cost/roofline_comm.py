"""The roofline's communication and host load-back times (:class:`RooflineComm`).

:class:`~prefillkit.cost.roofline.RooflineCostModel` builds one per deployment and takes
its per-row and per-token coefficients once (every term here is linear in its input);
the forward pricing itself, compiled in :mod:`prefillkit.cost.roofline`, multiplies them
out, so nothing here runs per forward.

Communication (per forward, all layers), each on its own link:

- ``moe_comm``: EP dispatch (fp8 activations + scales for FP8 checkpoints, else bf16)
  and combine (bf16) of the busiest rank's tokens, ``k`` copies each. Inside one NVLink
  domain: ``rows × k × (ep-1)/ep × bytes`` over NVLink. Across ``N`` nodes, DeepEP-style
  hierarchical dispatch sends a token once per distinct remote node, ``(N-1) ×
  (1 - (1 - 1/N)^k)`` copies, over the NIC, and the NVLink share as above; the slower
  link bounds. Without EP (``ep_size == 1``, ``num_gpus > 1``): an all-gather before and
  a reduce-scatter after the MoE of ``T`` tokens' bf16 hidden state, ``2 × (n-1)/n ×
  T × hidden × 2`` bytes per GPU per MoE layer.
- ``tp_comm`` (``attn_tp > 1``): ring all-reduce of the attention output, ``2 ×
  (t-1)/t × rows × hidden × 2`` bytes per layer.
- ``cp_kv_gather`` (``cp_size > 1``): shared-KV keeps page ``j``'s KV on lane ``j mod R``
  only, and the CP attention/indexer kernels read the context densely (the buffer
  estimator's ``kv_materialize`` + ``index_k_materialize``), so every rank reads the
  ``(R-1)/R`` remote share of **every context row** of the batch (prefix and extend)
  once per layer: ``Σ (prefix + extend) × (R-1)/R × kv_bytes_per_token`` over NVLink.
  *Assumption*: no DSA top-k-only gather.

Host load-back: ``loaded × kv_bytes_per_token / kv_shards / h2d_bandwidth`` per GPU;
shared-KV CP shards the latent over the ``R`` lanes, MLA otherwise keeps the full latent
on every GPU, GQA shards KV heads over ``min(num_gpus, kv_heads)``.
"""

from __future__ import annotations

from prefillkit.cost.efficiency import Efficiencies
from prefillkit.cost.gpus import GpuSpec
from prefillkit.cost.protocol import ParallelLayout
from prefillkit.models import ModelSpec

__all__ = ["RooflineComm"]


class RooflineComm:
    """Raw communication and load-back times of one deployment (module docstring)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        layout: ParallelLayout,
        eff: Efficiencies,
        kv_bytes_per_token: int,
        h2d_bandwidth: float,
    ) -> None:
        m = model
        self.model = model
        self.gpu = gpu
        self.layout = layout
        self.kv_bytes_per_token = kv_bytes_per_token
        self.h2d_bandwidth = h2d_bandwidth
        self.ep = layout.ep_size
        # Links.
        self.nvl_bw = gpu.nvlink_bandwidth * eff.nvlink
        self.net_bw = gpu.net_bandwidth * eff.net
        disp = (
            m.hidden_size * (1.0 + 4.0 / 128)
            if m.weight_bytes_per_param <= 1.0
            else (2.0 * m.hidden_size)
        )
        self.a2a_bytes_per_copy = disp + 2.0 * m.hidden_size  # dispatch + bf16 combine
        # Host load-back shards.
        if layout.cp_size > 1 and layout.shared_kv:
            self.kv_shards = layout.cp_size
        elif m.attention == "mla":
            self.kv_shards = 1
        else:
            self.kv_shards = max(1, min(layout.num_gpus, m.num_kv_heads))

    def moe_comm_time(self, rank_rows: float, tokens: int) -> float:
        """Raw MoE communication time per forward (EP all-to-all or TP collectives)."""
        m = self.model
        lay = self.layout
        if m.num_experts == 0 and lay.num_gpus == 1:
            return 0.0
        if self.ep > 1:
            rows = rank_rows / lay.attn_tp
            k = m.experts_per_token
            nodes = -(-self.ep // self.gpu.nvlink_domain)
            nvl = rows * k * (self.ep - 1) / self.ep * self.a2a_bytes_per_copy
            per_layer = nvl / self.nvl_bw
            if nodes > 1:
                remote = (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** k)
                per_layer = max(per_layer, rows * remote * self.a2a_bytes_per_copy / self.net_bw)
            return per_layer * m.moe_layers
        n = lay.num_gpus
        if n == 1:
            return 0.0
        layers = m.moe_layers if m.num_experts else m.num_layers
        if lay.cp_size == 1 and lay.dp_size == 1:
            return 0.0  # pure TP: the FFN all-reduce is counted with the attention one
        volume = 2.0 * (n - 1) / n * tokens * m.hidden_size * 2.0
        bw = self.nvl_bw if n <= self.gpu.nvlink_domain else self.net_bw
        return volume / bw * layers

    def tp_comm_time(self, rank_rows: float) -> float:
        """Attention all-reduce time of one rank's rows (``attn_tp > 1``)."""
        t = self.layout.attn_tp
        if t == 1:
            return 0.0
        m = self.model
        per_layer = 2.0 * (t - 1) / t * rank_rows * m.hidden_size * 2.0
        if self.layout.cp_size == 1 and self.layout.dp_size == 1:
            per_layer *= 2.0  # pure TP: the FFN output is all-reduced too
        bw = self.nvl_bw if t <= self.gpu.nvlink_domain else self.net_bw
        return per_layer * self.model.num_layers / bw

    def cp_gather_time(self, context_tokens: int) -> float:
        """Shared-KV CP read of the remote share of every context row, all layers."""
        r = self.layout.cp_size
        if r == 1:
            return 0.0
        return context_tokens * (r - 1) / r * self.kv_bytes_per_token / self.nvl_bw

    def loadback_time(self, loaded_tokens: int) -> float:
        """Raw host->device load time for ``loaded_tokens`` tokens (before overlap)."""
        per_gpu = loaded_tokens * self.kv_bytes_per_token / self.kv_shards
        return per_gpu / self.h2d_bandwidth
