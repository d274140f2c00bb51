"""Measured-kernel forward times from NVIDIA AIConfigurator's published tables.

:class:`AicCostModel` implements the :class:`~prefillkit.cost.roofline.CostModel` protocol
for the deployment of a :class:`~prefillkit.cost.roofline.RooflineCostModel` it wraps, with
the same :data:`~prefillkit.cost.roofline.BREAKDOWN_KEYS` and the same composition as the
roofline's ``breakdown`` (the busiest attention rank's linear + attention + indexer +
elementwise, plus ``moe_experts``; MoE communication exposed unless two-batch overlap
hides it; ``tp_comm``; ``cp_kv_gather`` hidden under compute with ``cp_kv_prefetch``;
host load-back exposed past the compute; the fixed costs; ``total`` = the sum). Each
term is read from the kernel tables at the shape the rank runs, through AIC's own
loaders and compiled engine (``get_database`` + ``EngineHandle.for_database`` +
``evaluate_ops_json``); only an answer whose source is ``"silicon"`` counts as measured.

Source: NVIDIA AIConfigurator, ``aiconfigurator-core`` 0.12.0 (Apache-2.0), kernel
tables per GPU and engine version (``systems/data/<system>/<family>/<backend>/<ver>``).
Nothing of its data is copied here; the package is imported lazily (the ``aic`` extra).

What is measured (per term, shapes of the busiest rank):

- ``linear``: every token-local GEMM of one layer, ``m`` = the rank's query rows, the
  weights split over ``attn_tp``: MLA ``q_a``+``kv_a`` (fused, ``hidden -> q_lora +
  kv_lora + rope``), ``q_b``, ``kv_b``, ``o``; the DSA indexer's ``wq_b``, ``wk`` and
  head weights; the shared expert's gate-up and down; the router (bf16); the dense-FFN
  layers; GQA ``qkv``/``o`` and FFN. Quant mode ``fp8_block`` for FP8 checkpoints
  (``weight_bytes_per_param <= 1``), ``bfloat16`` otherwise; the list is the roofline's
  (:func:`~prefillkit.models.token_local_gemms`).
- ``attention`` (dense MLA): the context-MLA table (bf16 FMHA, the KV dtype of
  ``kv_bytes_per_token``) at ``num_heads / attn_tp`` heads, each request of the batch
  timed alone; the batch's measured seconds per causal (query, key) pair times the
  busiest rank's keys (:meth:`AicCostModel.attention_pair_seconds`: the absorbed form's
  FLOP ratio where SGLang runs it, other head dims by ``d_qk + d_v``).
- ``moe_experts``: under EP, SGLang's large-EP kernels (AIC's ``MoEExpertCompute``:
  DeepEP + DeepGEMM, one attention-DP rank's tokens scaled by the DP size; EPLB as AIC
  models it with ``moe_balance="eplb"``), else or where missing the fused-MoE table
  (``MoE``), with AIC's skewed routing (``power_law_1.01``) or ``balanced`` for
  ``moe_balance="perfect"``.
- ``moe_comm_exposed``: EP: DeepEP normal-mode dispatch + combine (``deepep_ht``)
  of the rank's tokens per MoE layer; MoE without EP under CP/DP: NCCL all-gather +
  reduce-scatter of the instance's tokens.
- ``tp_comm``: the custom all-reduce table at the rank's rows and ``attn_tp`` GPUs
  (twice per layer under pure TP, as the roofline counts it).
- ``cp_kv_gather``: NCCL all-gather (1-byte elements) of the batch's context KV of one
  layer over the ``cp_size`` lanes, per layer.
- ``attention`` and ``indexer`` (DSA models without CP): AIC's whole DSA block per
  request (projections, indexer, top-k, sparse MLA, o_proj) less its projection GEMMs
  (which ``linear`` counts), as a ratio to the roofline's attention + indexer of that
  request; both terms are the roofline's scaled by the batch's ratio
  (:meth:`AicCostModel.dsa_scale`). Under CP AIC only estimates the block.

Not measured (the roofline's value, and :meth:`AicCostModel.provenance` says so):
``elementwise`` (AIC's elementwise ops are empirical), DSA attention and indexer under
CP, GQA attention (AIC answers ``"mixed"``, not ``"silicon"``), load-back (a host
copy), ``per_request`` and ``per_forward``, ``decode_step_time`` and
``kv_transfer_time``. Per-lane roofline terms use the roofline's per-key and per-row
coefficients (:attr:`RooflineCostModel.indexer_coefficient`,
:attr:`RooflineCostModel.elementwise_per_row`).

GPUs: ``h100``/``h200``/``b200``/``gb200``/``gb300``/``a100`` read their own AIC system
(:func:`aic_system_for_gpu`). H20, H20-141G (from ``h200_sxm``) and H800 (from
``h100_sxm``) have no tables: each op keeps the source GPU's measured efficiency at its
shape and is rescaled by the target's peaks, ``t_target = t_src × max(math_t, mem_t) /
max(math_src, mem_src)``, with AIC's SOL math and memory times of that op
(``evaluate_ops_sol_json``) and ``math_t = math_src × peak_src / peak_t`` (fp8 or bf16
peak as the op computes), ``mem_t = mem_src × hbm_src / hbm_t``; an op without a SOL
decomposition (the large-EP expert table) is taken as compute-bound (the peak ratio);
communication scales by the NVLink bandwidth ratio inside one NVLink domain and by the
NIC's across domains. A GPU with neither gets the roofline for every term.

Fallback: each term's table is probed once at construction (a 4,096-token forward); a
term whose probe fails or is not ``"silicon"`` uses the roofline for the whole run. A
probed term that fails for one shape at run time falls back for that call and counts it
in ``fallback_calls``. AIC does not flag extrapolation: beyond its grids (e.g. GEMM
``m`` > 32,768, context-MLA ``isl`` > 32,768) the engine extrapolates (linearly in
``m`` for GEMMs) and still answers ``"silicon"``; those values are used as given.
Evaluations are memoised per (term, shape).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prefillkit.cost.aic_families import AicEvaluator, build_families, probe_terms
from prefillkit.cost.aic_tables import (
    BACKENDS,
    MOE_DISTRIBUTIONS,
    Family,
    aic_system_for_gpu,
    import_aic,
    load_database,
)
from prefillkit.cost.aic_tables import AicUnavailableError as AicUnavailableError
from prefillkit.cost.gpus import get_gpu
from prefillkit.cost.roofline import BREAKDOWN_KEYS, RooflineCostModel
from prefillkit.sched.buffer import ReqShape

MEMO_LIMIT = 500_000  # memoised shapes per term
_MLA_TABLE_HEAD_DIMS = 192 + 128  # DeepSeek-V3's qk + v head dims (context-MLA table)

_ROOFLINE_ONLY: dict[str, str] = {
    "indexer": "roofline: AIC's DSA tables time the indexer inside the attention module",
    "elementwise": "roofline: AIC's elementwise ops are empirical, not measured",
    "loadback_exposed": "roofline: no table (host-to-device copy)",
    "per_request": "roofline: no table (fixed cost)",
    "per_forward": "roofline: no table (fixed cost)",
    "total": "sum of the other terms",
}


class AicCostModel:
    """AIConfigurator-table forward times for a roofline's deployment (module docstring)."""

    breakdown_keys: tuple[str, ...] = BREAKDOWN_KEYS
    name: str = "aic"

    def __init__(
        self,
        roofline: RooflineCostModel,
        *,
        backend: str = "sglang",
        version: str | None = None,
        moe_balance: str = "default",
    ) -> None:
        if moe_balance not in MOE_DISTRIBUTIONS:
            raise ValueError(f"moe_balance must be one of {', '.join(MOE_DISTRIBUTIONS)}")
        self.roofline = roofline
        self.backend = backend
        self.moe_balance = moe_balance
        self.small_gemm = roofline.small_gemm
        self.fallback_calls: dict[str, int] = {}
        self._aic = import_aic()
        self._prov: dict[str, str] = dict(_ROOFLINE_ONLY)
        self._families: dict[str, Family] = {}
        self._eval: AicEvaluator | None = None
        self._dsa = False
        self._memo: dict[str, dict[tuple[int, int], float | None]] = {}
        self._coef_idx = roofline.indexer_coefficient
        self._coef_elem = roofline.elementwise_per_row
        try:
            system, source = aic_system_for_gpu(roofline.gpu.name)
        except KeyError:
            if backend not in BACKENDS:
                raise ValueError(f"unknown --aic-backend {backend!r}") from None
            for key in ("linear", "attention", "moe_experts", "moe_comm_exposed", "tp_comm"):
                self._prov[key] = f"roofline: no AIC tables for GPU {roofline.gpu.name}"
            self._prov["cp_kv_gather"] = self._prov["linear"]
            return
        db = load_database(self._aic, system, backend, version)
        handle = self._aic["engine"].EngineHandle.for_database(db)
        src = get_gpu(source) if source else None
        self._eval = AicEvaluator(handle, src, roofline.gpu, roofline.layout.num_gpus)
        what = f"{backend} {db.version} {system}"
        self._label = (
            f"derived: {what} tables scaled to {roofline.gpu.name} compute/bandwidth"
            if src
            else f"measured: {what}"
        )
        measure = self._eval.measure
        self._families = build_families(self._aic, roofline, moe_balance, measure)
        self._dsa = "dsa_proj" in self._families
        self._memo = {name: {} for name in self._families}
        self._prov.update(probe_terms(self._families, measure, self._label, self._dsa))

    # --- evaluation ---------------------------------------------------------------------
    def _value(
        self, key: str, family: str, shape: tuple[int, int], fallback: Callable[[], float]
    ) -> float:
        fam = self._families.get(family)
        if fam is None:
            return fallback()
        memo = self._memo[family]
        if shape in memo:
            value = memo[shape]
        else:
            if len(memo) >= MEMO_LIMIT:  # bound a long replay's memory; re-evaluates
                memo.clear()
            assert self._eval is not None  # a family is built only with tables
            value = memo[shape] = self._eval.measure(fam, *shape)
        if value is None:
            self.fallback_calls[key] = self.fallback_calls.get(key, 0) + 1
            return fallback()
        return value

    def linear_time(self, rows: int) -> float:
        if rows <= 0:
            return 0.0
        return self._value("linear", "linear", (rows, 0), lambda: self.roofline.linear_time(rows))

    def attention_pair_seconds(self, batch: Sequence[ReqShape], coef: float) -> float:
        """Measured seconds per (query, key) pair on one rank for ``batch``'s requests.

        The context-MLA table times whole requests (``isl`` new tokens after ``prefix``
        cached ones, SGLang's MHA-form prefill, ``num_heads / attn_tp`` heads); a rank's
        share of a batch is not a request (CP splits each request's pages over the
        lanes), so each request is timed alone and the batch's measured seconds per
        causal (query, key) pair, ``Σ t_r / Σ pairs_r``, times the busiest rank's keys.
        ``coef`` is the roofline's seconds per pair for the batch's attention form
        (:meth:`RooflineCostModel.attention_coefficient`): when SGLang runs the absorbed
        form (under CP, or as its thresholds pick it) the measured MHA-form rate is scaled
        by the two forms' FLOP ratio; heads other than DeepSeek-V3's 192/128 (the table's)
        by their ``d_qk + d_v``. Falls back to ``coef`` when any request is not measured.
        """
        rf = self.roofline
        if self._families.get("attention") is None:
            return coef
        measured = pairs = 0.0
        for req in batch:
            e, p = req.extend_len, req.prefix_len
            if e <= 0:
                continue
            t = self._value("attention", "attention", (e, p), lambda: -1.0)
            if t < 0.0:
                return coef
            measured += t
            pairs += e * (p + (e + 1) / 2)
        if pairs == 0.0:
            return coef
        head = (rf.model.head_dim_qk + rf.model.head_dim_v) / _MLA_TABLE_HEAD_DIMS
        return measured / pairs * head * (coef / rf.mha_attention_coefficient)

    def dsa_scale(self, batch: Sequence[ReqShape]) -> float | None:
        """Measured over modelled attention + indexer of ``batch`` (DSA models, no CP):
        per request, AIC's DSA block less its projection GEMMs (which ``linear`` counts)
        against the roofline's attention + indexer of that request alone; None when a
        request is not measured or the difference is not positive."""
        measured = modelled = 0.0
        for req in batch:
            e, p = req.extend_len, req.prefix_len
            if e <= 0:
                continue
            block = self._value("attention", "attention", (e, p), lambda: -1.0)
            proj = self._value("attention", "dsa_proj", (e, 0), lambda: -1.0)
            if block < 0.0 or proj < 0.0:
                return None
            alone = self.roofline.breakdown([req])
            measured += block - proj
            modelled += alone["attention"] + alone["indexer"]
        if measured <= 0.0 or modelled <= 0.0:
            return None
        return measured / modelled

    def moe_expert_time(self, tokens: int) -> float:
        """Busiest GPU's routed experts when the instance runs ``tokens`` tokens (AIC's
        MoE ops take one attention-DP rank's tokens and scale by the DP size)."""
        if tokens <= 0:
            return 0.0
        rf = self.roofline
        per_rank = max(tokens // rf.layout.dp_size, 1)
        return self._value(
            "moe_experts", "moe_experts", (per_rank, 0), lambda: rf.moe_expert_time(tokens)
        )

    def moe_comm_time(self, rank_rows: int, tokens: int) -> float:
        rf = self.roofline
        if rf.layout.ep_size > 1:
            n = -(-rank_rows // rf.layout.attn_tp)
        else:
            n = tokens
        if n <= 0:
            return 0.0
        fallback = lambda: rf.moe_comm_time(rank_rows, tokens)  # noqa: E731
        return self._value("moe_comm_exposed", "moe_comm", (n, 0), fallback)

    def tp_comm_time(self, rows: int) -> float:
        if rows <= 0:
            return 0.0
        rf = self.roofline
        return self._value("tp_comm", "tp_comm", (rows, 0), lambda: rf.tp_comm_time(rows))

    def cp_gather_time(self, context: int) -> float:
        if context <= 0:
            return 0.0
        rf = self.roofline
        return self._value(
            "cp_kv_gather", "cp_kv_gather", (context, 0), lambda: rf.cp_gather_time(context)
        )

    # --- CostModel ----------------------------------------------------------------------
    def provenance(self) -> dict[str, str]:
        """Where each breakdown term comes from (decided at construction)."""
        out = {key: self._prov[key] for key in BREAKDOWN_KEYS}
        out["decode"] = "roofline: decode_step_time and kv_transfer_time delegate to it"
        return out

    def _busiest(
        self, rows: list[int], keys: list[int], idx: list[int], attn: float, index: float
    ) -> tuple[int, float]:
        best, best_t = 0, -1.0
        seen: dict[tuple[int, int, int], float] = {}
        for lane, lane_rows in enumerate(rows):
            sig = (lane_rows, keys[lane], idx[lane])
            t = seen.get(sig)
            if t is None:
                t = seen[sig] = (
                    self.linear_time(lane_rows)
                    + attn * keys[lane]
                    + index * idx[lane]
                    + self._coef_elem * lane_rows
                )
            if t > best_t:
                best, best_t = lane, t
        return best, best_t

    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        """Seconds per term of one forward; keys are :data:`BREAKDOWN_KEYS`."""
        rf = self.roofline
        tokens = loaded = context = 0
        for req in batch:
            p, e, ld = req.prefix_len, req.extend_len, req.loaded_tokens
            if p < 0 or e < 0 or ld < 0 or ld > p:
                raise ValueError(f"bad request shape (fields >= 0, loads in the prefix): {req}")
            tokens += e
            loaded += ld
            context += p + e
        if tokens == 0 and loaded == 0:
            return dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        rows, keys, idx = rf.rank_work(batch)
        coef, index = rf.attention_coefficient(batch), self._coef_idx
        scale = self.dsa_scale(batch) if self._dsa and "attention" in self._families else None
        if scale is not None:
            attn, index = coef * scale, index * scale
        elif self._dsa:
            attn = coef
        else:
            attn = self.attention_pair_seconds(batch, coef)
        lane, best_t = self._busiest(rows, keys, idx, attn, index)
        r = rows[lane]
        instance = tokens * rf.layout.dp_size
        experts = self.moe_expert_time(instance)
        compute = best_t + experts
        comm = self.moe_comm_time(r, instance)
        if rf.layout.two_batch_overlap and comm > 0.0:
            sm_frac = min(rf.eff.comm_sms / rf.gpu.num_sms, 0.9)
            core = max(compute / (1.0 - sm_frac), comm)
        else:
            core = compute + comm
        gather = self.cp_gather_time(context)
        if rf.layout.cp_kv_prefetch:
            gather = max(0.0, gather - compute)
        parts = {
            "linear": self.linear_time(r),
            "attention": attn * keys[lane],
            "indexer": index * idx[lane],
            "elementwise": self._coef_elem * r,
            "moe_experts": experts,
            "moe_comm_exposed": core - compute,
            "tp_comm": self.tp_comm_time(r),
            "cp_kv_gather": gather,
            "loadback_exposed": max(0.0, rf.loadback_time(loaded) - core),
            "per_request": rf.per_request_s * len(batch),
            "per_forward": rf.per_forward_s,
        }
        parts["total"] = sum(parts.values())
        return parts

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        return self.breakdown(batch)["total"]

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        """Delegated to the roofline (no decode tables are read)."""
        return self.roofline.decode_step_time(batch_size, total_context)

    def kv_transfer_time(self, tokens: int) -> float:
        """Delegated to the roofline."""
        return self.roofline.kv_transfer_time(tokens)

    def __repr__(self) -> str:
        return f"AicCostModel({self.roofline!r}, backend={self.backend!r})"
