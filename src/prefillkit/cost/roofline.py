# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""Forward-time cost model: what the simulator uses in place of a GPU.

One small interface, :class:`CostModel`, and one implementation,
:class:`RooflineCostModel`: per-rank roofline terms over a :class:`ModelSpec`, a
:class:`GpuSpec` and a :class:`ParallelLayout`, plus the communication the layout
implies. A forward waits for its **busiest rank**; nothing is split "perfectly evenly"
unless the layout really splits it that way.

Layout (``num_gpus = attn_tp × cp_size × dp_size``):

- attention runs context-parallel over ``cp_size`` ranks with the **page-aligned split**
  of :mod:`prefillkit.sched.cp_split` (page ``j`` of a sequence on rank ``j mod R``, the
  same function the buffer estimator uses), data-parallel over ``dp_size`` ranks (each
  runs its own batch: :meth:`~RooflineCostModel.breakdown` assumes every DP rank runs a
  batch of the same shape, as the published benchmarks do;
  :meth:`~RooflineCostModel.breakdown_dp` prices one batch per rank, the lockstep
  forward of DP attention, ``prefillkit.sim.dp_attention``), and head-parallel over the
  remaining ``attn_tp`` ranks;
- the routed experts run expert-parallel over ``ep_size`` GPUs (``ep_size == 1``: tensor
  parallel over all ``num_gpus``).

Per prefill forward, each attention rank ``r`` runs ``linear``, ``attention``,
``indexer`` and ``elementwise`` over its query rows and causal keys
(:func:`~prefillkit.cost.rank_work.rank_work`); each term's formula and coefficient:
:mod:`prefillkit.cost.roofline_setup`.

The forward's compute is ``max_r(rank time)`` plus ``moe_experts``: the busiest GPU's
routed-expert grouped GEMMs over its local experts, ``T × k / E ×
moe_imbalance(T)`` rows each on average (``T`` = extend tokens of the whole instance),
padded per expert to the tile (:meth:`~prefillkit.cost.gemm.GemmTimer.grouped_expert_time`),
never below reading the local experts' weights.

Communication (``moe_comm``, ``tp_comm``, ``cp_kv_gather``; per forward, all layers, each
on its own link) and the host load-back: :mod:`prefillkit.cost.roofline_comm`.

Overlap rule (what hides and what does not):

- ``moe_comm`` hides under compute only with two-batch overlap (``two_batch_overlap``,
  SGLang ``--enable-two-batch-overlap``). Then the MoE time is ``max(compute / (1 - f),
  moe_comm)``: the communication kernels hold ``f = comm_sms / num_sms`` of the SMs while
  they run (DeepSeek-V3 report, section 3.2.2: 20 of 132 SMs). Without it, it adds.
  The breakdown reports the exposed part, ``moe_comm_exposed``.
- ``tp_comm`` and ``cp_kv_gather`` are on the critical path (each layer's attention needs
  them first) unless ``cp_kv_prefetch`` (the bs>1 L1 prefetch of the spec): then the
  gather hides under compute and only ``max(0, gather - compute)`` is exposed.
- host **load-back** is layer-wise H2D under compute: ``max(0, load - compute)``.
- fixed costs: ``per_forward`` (batch set-up, launch, sampling sync) and ``per_request``
  (page table, owner-lane remap, positions and first-token sampling per request).

``total`` is the sum of every other breakdown term (``linear + attention + indexer +
elementwise`` of the busiest rank, ``moe_experts``, the exposed communication terms,
``loadback_exposed`` and the fixed costs).

Efficiencies are per GPU **family** (:data:`FAMILY_EFFICIENCIES`), chosen once from
kernel measurements and never fitted to a throughput figure; ``benchmarks/RESULTS.md``
("The forward model meets measured kernels") compares the model with every published
prefill figure we use, including the ones it misses, and each term with
AIConfigurator's measured kernels (:mod:`prefillkit.cost.aic`).

NOT modelled: FP8/FP4 attention, kernel tail effects, power throttling, the KV write of
new tokens (a few MB per layer), PD KV send-out beyond one bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from prefillkit.cost.efficiency import FAMILY_EFFICIENCIES as FAMILY_EFFICIENCIES
from prefillkit.cost.efficiency import HOPPER as HOPPER
from prefillkit.cost.efficiency import Efficiencies as Efficiencies
from prefillkit.cost.efficiency import (
    activation_bytes_per_token_layer as activation_bytes_per_token_layer,
)
from prefillkit.cost.gpus import GpuSpec
from prefillkit.cost.protocol import BREAKDOWN_KEYS as BREAKDOWN_KEYS
from prefillkit.cost.protocol import CostModel as CostModel
from prefillkit.cost.protocol import ParallelLayout as ParallelLayout
from prefillkit.cost.protocol import dp_breakdown_keys
from prefillkit.cost.rank_work import rank_work
from prefillkit.cost.roofline_comm import RooflineComm
from prefillkit.cost.roofline_setup import (
    attention_coefficients,
    decode_batch_terms,
    expert_shares,
    gemm_timer,
    resolve_settings,
)
from prefillkit.models import ModelSpec, token_local_gemms
from prefillkit.sched.buffer import ReqShape

# SGLang 0.5.23 runs MLA prefill in the MHA form ("forward_normal", K and V decompressed
# per key) or the absorbed form (QK over the latent + rope, PV over the latent):
# DSA/NSA models take MHA only when every sequence of the batch is at most
# SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD = 2048 keys and CP prefill is off
# (dsa_backend.set_dsa_prefill_impl); dense MLA (FA3/FlashInfer/FlashMLA) takes MHA when
# the batch has no cached prefix or at least SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD = 8192
# prefix tokens, and absorbed MLA in between (attention_backend_handler); under CP it is
# always absorbed ("Strategy CP gathers latent KV in the backend's absorbed MLA path").
CHUNKED_PREFIX_CACHE_THRESHOLD: int = 8192
# PCIe Gen5 x16 host->device, achievable (64 GB/s theoretical per direction).
DEFAULT_H2D_BANDWIDTH: float = 50e9
# Aggregate send-out bandwidth of a prefill instance for PD disaggregation.
DEFAULT_KV_TRANSFER_BANDWIDTH: float = 50e9
# Assumption: batch set-up, kernel launches not hidden behind the first kernels, and the
# first-token sampling sync of one forward (SGLang runs prefill without CUDA graphs).
DEFAULT_PER_FORWARD_S: float = 0.003
# Assumption: host-side work per request in a batch (page-table row, owner-lane remap,
# positions, sampling); the same order as this repository's measured upstream admission
# cost per request (60-85 us, benchmarks/RESULTS.md).
DEFAULT_PER_REQUEST_S: float = 0.0001


class RooflineCostModel:
    """Per-rank roofline + communication cost model; see the module docstring."""

    breakdown_keys: tuple[str, ...] = BREAKDOWN_KEYS
    name: str = "roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        num_gpus: int,
        *,
        layout: ParallelLayout | None = None,
        page_size: int = 64,
        eff: Efficiencies | None = None,
        eff_gemm: float | None = None,
        eff_attn: float | None = None,
        per_forward_s: float = DEFAULT_PER_FORWARD_S,
        per_request_s: float = DEFAULT_PER_REQUEST_S,
        h2d_bandwidth: float = DEFAULT_H2D_BANDWIDTH,
        kv_transfer_bandwidth: float = DEFAULT_KV_TRANSFER_BANDWIDTH,
        kv_bytes_per_token: int | None = None,
        gemm_dtype: str | None = None,
        small_gemm: str = "tiles",
        dp_lockstep: bool = False,
    ) -> None:
        layout, eff, gemm_dtype, eff_gemm, eff_attn, kv_bytes_per_token = resolve_settings(
            model, gpu, num_gpus, layout=layout, page_size=page_size, eff=eff,
            eff_gemm=eff_gemm, eff_attn=eff_attn, per_forward_s=per_forward_s,
            per_request_s=per_request_s, h2d_bandwidth=h2d_bandwidth,
            kv_transfer_bandwidth=kv_transfer_bandwidth,
            kv_bytes_per_token=kv_bytes_per_token, gemm_dtype=gemm_dtype,
        )  # fmt: skip
        self.model = model
        self.gpu = gpu
        self.num_gpus = num_gpus
        self.layout = layout
        self.page_size = page_size
        self.eff = eff
        self.eff_gemm = eff_gemm
        self.eff_attn = eff_attn
        self.per_forward_s = per_forward_s
        self.per_request_s = per_request_s
        self.h2d_bandwidth = h2d_bandwidth
        self.kv_transfer_bandwidth = kv_transfer_bandwidth
        self.kv_bytes_per_token = kv_bytes_per_token
        self.gemm_dtype = gemm_dtype
        self.small_gemm = small_gemm
        # A DP attention run (dp_lockstep) prices each forward with breakdown_dp, whose
        # keys add each DP rank's attention-side time (the t_dp_rank<i>_s columns).
        if dp_lockstep:
            self.breakdown_keys = dp_breakdown_keys(layout.dp_size)
        self._init_terms()

    def _init_terms(self) -> None:
        """The per-deployment coefficients the per-forward pricing multiplies out (set
        once: the model's settings are fixed once built)."""
        m, gpu, layout, eff = self.model, self.gpu, self.layout, self.eff
        tp = layout.attn_tp
        gemm_dtype = self.gemm_dtype
        self._gemm_peak = gpu.peak_flops_fp8 if gemm_dtype == "fp8" else gpu.peak_flops_bf16
        self._mem_bw = gpu.hbm_bandwidth * eff.mem
        # Hot-path coefficients (breakdown): every term below is linear in its input.
        self._a_attn, self._a_absorbed, self._b_idx = attention_coefficients(
            m, gpu, tp, eff, self.eff_attn
        )
        self._topk = m.index_topk if m.is_sparse else 0
        self._mla = m.attention == "mla" and m.kv_lora_rank > 0
        self._gemms = token_local_gemms(m)
        self._timer = gemm_timer(
            m, gpu, gemm_dtype=gemm_dtype, peak=self._gemm_peak, eff_gemm=self.eff_gemm,
            mem_bw=self._mem_bw, small_gemm=self.small_gemm,
        )  # fmt: skip
        self._linear_memo: dict[int, float] = {}
        self._moe_memo: dict[int, float] = {}
        self._elem_s_per_row = activation_bytes_per_token_layer(m, tp) * m.num_layers / self._mem_bw
        self._ep = layout.ep_size
        self._k_over_e, self._local_experts, self._expert_width = expert_shares(
            m, self._ep, self.num_gpus
        )
        self._sm_frac = min(eff.comm_sms / gpu.num_sms, 0.9)
        self._dp = layout.dp_size
        self._dp_keys = tuple(f"dp_rank{i}" for i in range(layout.dp_size))
        self._tbo = layout.two_batch_overlap
        self._prefetch = layout.cp_kv_prefetch
        self._comm = RooflineComm(m, gpu, layout, eff, self.kv_bytes_per_token, self.h2d_bandwidth)
        self._comm_per_rank_row = self._comm.moe_comm_time(1.0, 0)
        self._comm_per_token = self._comm.moe_comm_time(0.0, 1)
        self._tp_per_rank_row = self._comm.tp_comm_time(1.0)
        self._gather_per_token = self._comm.cp_gather_time(1)
        self._load_per_token = self._comm.loadback_time(1)
        # decode_step_time's batch-size terms (NOTE: the model's settings are fixed once
        # built, as the per-row constants above assume).
        self._decode_terms: dict[int, tuple[float, float]] = {}

    # --- building blocks -------------------------------------------------------------
    def gemm_efficiency(self, tokens: float) -> float:
        """Achieved fraction of the GEMM peak for a token-local GEMM over ``tokens`` rows,
        under the small-GEMM assumption (:mod:`prefillkit.cost.gemm`), before the memory
        roofline: ``tiles``: the padding of the rows to the tile; ``sqrt-h100``: the
        0.2 ramp; ``ideal``: the family's efficiency."""
        return self._timer.efficiency(tokens)

    @property
    def mha_attention_coefficient(self) -> float:
        """Seconds per attention (query, key) pair on one rank in the MHA form."""
        return self._a_attn

    @property
    def indexer_coefficient(self) -> float:
        """Seconds per indexer (query, key) pair on one rank."""
        return self._b_idx

    @property
    def elementwise_per_row(self) -> float:
        """Elementwise seconds per query row on one rank."""
        return self._elem_s_per_row

    def attention_coefficient(self, batch: Sequence[ReqShape]) -> float:
        """Seconds per attention (query, key) pair on one rank: the absorbed MLA form or
        the MHA form, as SGLang 0.5.23 picks it for this batch (see
        :data:`CHUNKED_PREFIX_CACHE_THRESHOLD`'s note); GQA models: the MHA form."""
        if not self._mla:
            return self._a_attn
        if self.layout.cp_size > 1:
            return self._a_absorbed
        if self._topk:
            longest = max((r.prefix_len + r.extend_len for r in batch), default=0)
            return self._a_absorbed if longest > self.model.sparse_dense_threshold else self._a_attn
        prefix = sum(r.prefix_len for r in batch)
        if prefix == 0 or prefix >= CHUNKED_PREFIX_CACHE_THRESHOLD:
            return self._a_attn
        return self._a_absorbed

    def linear_time(self, rows: float) -> float:
        """Token-local GEMM time of one rank computing ``rows`` query rows: every GEMM of
        :func:`~prefillkit.models.token_local_gemms` at ``rows`` rows, split by attention
        TP, each timed by :class:`~prefillkit.cost.gemm.GemmTimer` (memoised per row count)."""
        if rows <= 0:
            return 0.0
        key = int(rows)
        if key == rows:
            hit = self._linear_memo.get(key)
            if hit is not None:
                return hit
        t = self._timer.gemm_list_time(rows, self._gemms, self.layout.attn_tp)
        if key == rows:
            self._linear_memo[key] = t
        return t

    def moe_imbalance(self, tokens: float) -> float:
        """Busiest EP rank's routed (token, expert) pairs over the mean.

        ``skew × (1 + sqrt(2 ln(ep) (1 - 1/ep) / μ))`` with ``μ = tokens × k / ep`` the mean
        pairs per rank: the expected maximum of ``ep`` near-binomial loads (the extreme-
        value approximation ``μ + σ sqrt(2 ln ep)``: small batches are less even), times
        ``skew``, the family's residual systematic imbalance after EPLB
        (:attr:`Efficiencies.moe_imbalance`, an assumption stated there). 1.0 without EP.
        """
        ep = self._ep
        if ep <= 1:
            return 1.0
        if tokens <= 0:
            return self.eff.moe_imbalance
        mean = tokens * self.model.experts_per_token / ep
        spread = math.sqrt(2.0 * math.log(ep) * (1.0 - 1.0 / ep) / mean)
        return self.eff.moe_imbalance * (1.0 + spread)

    def moe_expert_time(self, tokens: int) -> float:
        """Busiest GPU's routed-expert GEMM time when the instance runs ``tokens`` tokens.

        EP: its ``E / ep_size`` experts with ``tokens × k / E × moe_imbalance(tokens)``
        rows each on average; MoE TP: a ``1 / num_gpus`` slice of every expert's width
        with ``tokens × k / E`` rows each. Timed by
        :meth:`~prefillkit.cost.gemm.GemmTimer.grouped_expert_time` (tile padding per
        expert, waves, at least the local experts' weights read). Memoised per ``tokens``.
        """
        if tokens <= 0 or self._local_experts == 0.0:
            return 0.0
        hit = self._moe_memo.get(tokens)
        if hit is not None:
            return hit
        rows = tokens * self._k_over_e * self.moe_imbalance(tokens)
        m = self.model
        t = self._timer.grouped_expert_time(
            self._local_experts, rows, m.hidden_size, self._expert_width, m.moe_layers
        )
        self._moe_memo[tokens] = t
        return t

    def moe_comm_time(self, rank_rows: float, tokens: int) -> float:
        """Raw MoE communication time per forward (EP all-to-all or TP collectives)."""
        return self._comm.moe_comm_time(rank_rows, tokens)

    def tp_comm_time(self, rank_rows: float) -> float:
        """Attention all-reduce time of one rank's rows (``attn_tp > 1``)."""
        return self._comm.tp_comm_time(rank_rows)

    def cp_gather_time(self, context_tokens: int) -> float:
        """Shared-KV CP read of the remote share of every context row, all layers."""
        return self._comm.cp_gather_time(context_tokens)

    def loadback_time(self, loaded_tokens: int) -> float:
        """Raw host->device load time for ``loaded_tokens`` tokens (before overlap)."""
        return self._comm.loadback_time(loaded_tokens)

    def rank_work(self, batch: Sequence[ReqShape]) -> tuple[list[int], list[int], list[int]]:
        """Per attention rank: query rows, attention keys and indexer keys of ``batch``
        (:func:`prefillkit.cost.rank_work.rank_work` on this deployment)."""
        return rank_work(
            batch,
            self.layout.cp_size,
            self.page_size,
            self._topk,
            self.model.sparse_dense_threshold,
        )

    # --- CostModel --------------------------------------------------------------------
    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        """Seconds per term of one forward; keys are :data:`BREAKDOWN_KEYS`.

        Every DP rank (``dp_size``) runs a batch of this shape: the busiest attention
        lane's side (:meth:`_rank_side`) and the routed experts over ``dp_size`` times
        its tokens (:meth:`_lockstep_parts`, which :meth:`breakdown_dp` shares)."""
        side, counts = self._rank_side(batch)
        tokens, loaded = counts[1], counts[2]
        if tokens == 0 and loaded == 0:
            return dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        return self._lockstep_parts(
            side, counts[0], [counts[0], tokens * self._dp, loaded, counts[3], counts[4]]
        )

    def _busiest_lane(
        self, rows: list[int], attn_keys: list[int], idx_keys: list[int], a: float
    ) -> tuple[int, float, float]:
        """The busiest attention rank of a forward (the NOTE in :meth:`_rank_side`): its
        index, its time and its linear term."""
        b = self._b_idx
        c = self._elem_s_per_row
        best_t = -1.0
        best = 0
        best_lin = 0.0
        memo = self._linear_memo
        for lane, lane_rows in enumerate(rows):
            lin = memo.get(lane_rows) if lane_rows else 0.0
            if lin is None:
                lin = self.linear_time(lane_rows)
            t = a * attn_keys[lane] + b * idx_keys[lane] + c * lane_rows + lin
            if t > best_t:
                best_t = t
                best = lane
                best_lin = lin
        return best, best_t, best_lin

    def breakdown_dp(self, batches: Sequence[Sequence[ReqShape]]) -> dict[str, float]:
        """Seconds per term of one DP attention forward: ``batches[i]`` is DP rank ``i``'s
        batch, all ``dp_size`` ranks in lockstep (an idle rank, an empty batch, still
        joins the MoE step); keys :data:`BREAKDOWN_KEYS` plus ``dp_rank<i>``.

        Each rank runs attention over its own batch: its attention-side time is its
        busiest CP lane's ``linear + attention + indexer + elementwise`` (as
        :meth:`breakdown`), ``dp_rank<i>``. The slowest rank sets the forward: its
        terms are ``linear`` .. ``elementwise`` and ``tp_comm`` (its lane's rows); the
        routed experts run over the **combined** tokens of all ranks
        (:meth:`moe_expert_time`), the MoE all-to-all carries the most rows any rank
        sends plus the combined tokens; the CP gather, the load-back and ``per_request``
        are the largest rank's (each rank gathers, loads and prepares its own batch, in
        parallel: one scheduler process per rank); ``per_forward`` once. Every rank
        running the same batch gives :meth:`breakdown`'s terms exactly (tests pin it).
        """
        if len(batches) != self._dp:
            raise ValueError(f"{len(batches)} batches for {self._dp} DP ranks")
        sides: list[float] = []
        lead: list[float] = [-1.0, 0.0, 0.0, 0.0, 0.0]
        lead_rows = 0
        most = [0, 0, 0, 0, 0]  # most rows, combined tokens, most loaded, context, requests
        for batch in batches:
            terms, counts = self._rank_side(batch)
            sides.append(terms[0])
            if terms[0] > lead[0]:
                lead, lead_rows = terms, counts[0]
            most[1] += counts[1]
            for k in (0, 2, 3, 4):
                if counts[k] > most[k]:
                    most[k] = counts[k]
        if most[1] == 0 and most[2] == 0:
            return dict.fromkeys(self.breakdown_keys, 0.0)
        parts = self._lockstep_parts(lead, lead_rows, most)
        for key, side in zip(self._dp_keys, sides, strict=True):
            parts[key] = side
        return parts

    def _rank_side(self, batch: Sequence[ReqShape]) -> tuple[list[float], list[int]]:
        """One rank's attention side of a forward over ``batch``: ``[time, linear,
        attention, indexer, elementwise]`` of its busiest lane, and ``[that lane's rows,
        extend tokens, loaded tokens, context tokens, requests]``.

        NOTE: hot path. The communication terms (:meth:`_lockstep_parts`) are inlined
        through coefficients precomputed from their helper methods (each is linear in its
        argument); the GEMM terms come from linear_time / moe_expert_time, memoised per
        row count (tests check both give the same terms). The busiest lane: every lane's
        time is linear(rows) + a * attention keys + b * indexer keys + c * rows."""
        tokens = loaded = context = n_req = 0
        for req in batch:
            p, e, ld = req.prefix_len, req.extend_len, req.loaded_tokens
            if p < 0 or e < 0 or ld < 0 or ld > p:
                raise ValueError(f"bad request shape (fields >= 0, loads in the prefix): {req}")
            tokens += e
            loaded += ld
            context += p + e
            n_req += 1
        if tokens == 0:
            return [0.0, 0.0, 0.0, 0.0, 0.0], [0, 0, loaded, context, n_req]
        rows, attn_keys, idx_keys = self.rank_work(batch)
        a = self.attention_coefficient(batch)
        best, best_t, best_lin = self._busiest_lane(rows, attn_keys, idx_keys, a)
        r = rows[best]
        terms = [
            best_t,
            best_lin,
            a * attn_keys[best],
            self._b_idx * idx_keys[best],
            self._elem_s_per_row * r,
        ]
        return terms, [r, tokens, loaded, context, n_req]

    def _lockstep_parts(
        self, lead: list[float], lead_rows: int, most: list[int]
    ) -> dict[str, float]:
        """The forward's terms from the slowest rank's attention side ``lead`` (its lane's
        rows ``lead_rows``) and ``most``: the most rows a rank sends, the instance's
        extend tokens, then the loaded and context tokens and the requests that the
        fixed, gather and load-back terms count (:meth:`breakdown`, :meth:`breakdown_dp`)."""
        instance_tokens = most[1]
        experts = self.moe_expert_time(instance_tokens) if instance_tokens > 0 else 0.0
        compute = lead[0] + experts
        comm = self._comm_per_rank_row * most[0] + self._comm_per_token * instance_tokens
        if self._tbo and comm > 0.0:
            core = compute / (1.0 - self._sm_frac)
            if comm > core:
                core = comm
        else:
            core = compute + comm
        gather = self._gather_per_token * most[3]
        if self._prefetch:
            gather = max(0.0, gather - compute)
        exposed = self._load_per_token * most[2] - core
        parts = {
            "linear": lead[1],
            "attention": lead[2],
            "indexer": lead[3],
            "elementwise": lead[4],
            "moe_experts": experts,
            "moe_comm_exposed": core - compute,
            "tp_comm": self._tp_per_rank_row * lead_rows,
            "cp_kv_gather": gather,
            "loadback_exposed": exposed if exposed > 0.0 else 0.0,
            "per_request": self.per_request_s * most[4],
            "per_forward": self.per_forward_s,
        }
        parts["total"] = sum(parts.values())
        return parts

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        return self.breakdown(batch)["total"]

    def provenance(self) -> dict[str, str]:
        """Where each breakdown term comes from: this roofline, for every term."""
        note = f"roofline (small GEMMs: {self.small_gemm})"
        terms = {k: note for k in BREAKDOWN_KEYS if k != "total"}
        for key in ("per_request", "per_forward"):
            terms[key] = "roofline (fixed cost, assumption)"
        if len(self.breakdown_keys) > len(BREAKDOWN_KEYS):
            for key in self._dp_keys:
                terms[key] = "roofline: this DP rank's attention side (not in the total)"
        return terms

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        """One decode step: ``max(memory, compute) + per_forward_s``.

        Memory: the weights the step touches (all for dense models, the expected
        expert coverage of ``batch_size`` tokens for MoE) plus the KV it reads, over
        ``num_gpus × hbm_bandwidth × eff_mem``. KV read is ``total_context ×
        kv_bytes_per_token``; a sparse model reads indexer keys for the whole context
        but latents only for ``min(total_context, batch_size × index_topk)`` tokens.
        KV is assumed spread evenly over the GPUs (DP attention / head sharding).
        Compute: ``2 × active_params × batch_size`` at the ramped GEMM efficiency;
        attention math is ignored (decode attention is memory-bound).
        """
        if batch_size < 0 or total_context < 0:
            raise ValueError(
                f"batch_size and total_context must be >= 0, got {batch_size}, {total_context}"
            )
        if batch_size == 0:
            return 0.0
        m = self.model
        if m.is_sparse:
            idx_bytes = min(float(self.kv_bytes_per_token), m.num_layers * (m.index_head_dim + 4.0))
            latent_bytes = self.kv_bytes_per_token - idx_bytes
            latent_tokens = min(total_context, batch_size * m.index_topk)
            kv = total_context * idx_bytes + latent_tokens * latent_bytes
        else:
            kv = float(total_context) * self.kv_bytes_per_token
        terms = self._decode_terms.get(batch_size)
        if terms is None:
            terms = self._decode_terms[batch_size] = decode_batch_terms(
                m, batch_size, self.num_gpus, self._gemm_peak, self._timer
            )
        weights, compute = terms
        memory = (weights + kv) / (self.num_gpus * self._mem_bw)
        return max(memory, compute) + self.per_forward_s

    def kv_transfer_time(self, tokens: int) -> float:
        """``tokens × kv_bytes_per_token / kv_transfer_bandwidth`` (no fixed latency)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        return tokens * self.kv_bytes_per_token / self.kv_transfer_bandwidth

    def __repr__(self) -> str:
        return (
            f"RooflineCostModel(model={self.model.name!r}, gpu={self.gpu.name!r}, "
            f"layout={self.layout!r}, gemm_dtype={self.gemm_dtype!r}, "
            f"eff_gemm={self.eff_gemm}, eff_attn={self.eff_attn})"
        )
