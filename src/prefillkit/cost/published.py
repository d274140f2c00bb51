"""Published prefill figures, each with the deployment shape its source states.

These are measurements other people published (blogs, profiles, design documents) of
prefill throughput, time-to-first-token or per-layer time, collected so that the cost
model can be checked against them. Nothing in prefillkit is fitted to them: a row is a
target the model is run against on the row's shape, never an input to a parameter. The
row type and the field conventions are in :mod:`prefillkit.cost.published_figure`; this
module holds the large-EP, GB200 and AIConfigurator rows,
:mod:`prefillkit.cost.published_more` the rest; :data:`PUBLISHED_FIGURES` is all of them.
"""

from __future__ import annotations

from prefillkit.cost.published_figure import METRICS, PublishedFigure
from prefillkit.cost.published_more import LONG_PROMPT_AND_OTHER_ROWS

__all__ = ["METRICS", "PUBLISHED_FIGURES", "PublishedFigure"]


# ----------------------------------------------------------------------------- sources

_SGLANG_EP = (
    "The SGLang Team, 'Deploying DeepSeek with PD Disaggregation and Large-scale Expert "
    "Parallelism on 96 H100 GPUs', LMSYS blog, lmsys.org/blog/2025-05-05-large-scale-ep "
    "(2025-05-05)"
)
_SGLANG_EP_E2E = (
    _SGLANG_EP + ", section 'Evaluation > End-to-end Performance > Performance Analysis of "
    "Prefill and Decode Phases': 'On 4 nodes (4x8xH100, EP32), the system achieved "
    "per-node throughputs of 57,674, 54,543, and 50,302 tokens per second for prompt "
    "lengths of 1K, 2K, and 4K'"
)
_SGLANG_EP_PROFILE = (
    _SGLANG_EP + ", section 'Profile Results > Overall Throughput', prefill table "
    "(Batch Size 16,384, Input Length 4,096, 'Throughput (per node)')"
)
_SGLANG_EP_ASSUMPTIONS = (
    "Batch: the blog states 16,384 tokens per device only for the 4K profile runs; the "
    "1K/2K end-to-end runs are assumed to use the same 16,384 tokens per GPU per forward "
    "(the repro sets --chunked-prefill-size 524288 over DP 32). Prompt length: '1K/2K/4K' "
    "read as 1024/2048/4096 (the profile table states 4,096; the headline elsewhere uses "
    "2000-token inputs). Precision not stated in this blog: FP8 block-scaled DeepGEMM "
    "GEMMs (dense and grouped MoE), FP8 DeepEP dispatch, BF16 combine, BF16 MLA attention "
    "and BF16 KV assumed (DeepSeek's recipe; SGLang's GB200 part II calls BF16 attention + "
    "FP8 GEMM the 'traditional precision' of this baseline). Attention TP 1 per DP rank "
    "(DP attention 32 = TP 32 --enable-dp-attention, --moe-dense-tp-size 1, DP LM head) "
    "assumed from the parallelism section. Redundant experts: 32 (288 slots) given only as "
    "the blog's example, assumed. SGLang version not stated (May 2025, ~v0.4.6)."
)

_GB200_II = (
    "The SGLang Team, 'Deploying DeepSeek on GB200 NVL72 with PD and Large Scale EP "
    "(Part II): 3.8x Prefill, 4.8x Decode Throughput', LMSYS blog, "
    "lmsys.org/blog/2025-09-25-gb200-part-2 (2025-09-25)"
)
_GB200_II_ASSUMPTIONS = (
    "Tokens per forward not stated (the blog's 'batch size ... 768 for 4k ISL and 1408 "
    "for 2k ISL' is chosen 'to make KV cache roughly full', which reads as the decode "
    "batch; prefill tokens per GPU unknown, 16,384 per rank as in the H100 blog is a "
    "guess). 'Ranks per instance' read as DP-attention ranks with DeepEP expert "
    "parallelism over the same ranks (attention TP 1), as in the earlier blogs. "
    "Balancing: 'we follow our previous blogs to let data be in-distribution', i.e. EPLB "
    "on in-distribution statistics, assumed. Two-batch overlap: replaced by a fine-grained "
    "overlap (combine overlapped with the down GEMM and shared experts), so False. "
    "Weights may be partly offloaded to Grace memory with prefetching ('Scaling Down by "
    "Offloading'); whether this run offloads is not stated. SGLang version not stated "
    "(Sept 2025, early-access CuTe DSL)."
)


_AIC_DOC = (
    "NVIDIA AIConfigurator, docs/CONTEXT_PARALLEL_DSA_MODELING.md (github.com/ai-dynamo/"
    "aiconfigurator, stored at commit 1f8d4701002f1944a8835b57a51071cf65596790), "
    "section 7 'Per-layer assembly - serial, no overlap': 'Measured decomposition (device "
    "0, RS->RS, isl=32768/cp8)': DSA 3808 us + AG_hidden 622 us + MoE 2430 us + RS 610 us "
    "= RS->RS period 7470 us"
)


# ------------------------------------------------------------------------------- rows

_EP_GB200_AIC_ROWS: tuple[PublishedFigure, ...] = (
    PublishedFigure(
        name="DeepSeek profile, 4K prompts, EP32 (H800)",
        source=(
            "Figure: 62,713 tok/s/node, the 'DeepSeek Profile' column of the prefill table "
            "in " + _SGLANG_EP_PROFILE + ". Shape: DeepSeek, deepseek-ai/profile-data "
            "README.md, 'Inference > Prefilling' (2025-02-27): 'EP32 and TP1 ... prompt "
            "length set to 4K and a batch size of 16K tokens per GPU ... two "
            "micro-batches'; 'we simulate an absolutely balanced MoE routing strategy for "
            "profiling'. Precision: DeepSeek, open-infra-index 202502OpenSourceWeek/"
            "day_6_one_more_thing_deepseekV3R1_inference_system_overview.md (2025-03-01): "
            "'matrix multiplications and dispatch transmissions adopt the FP8 format ... "
            "core MLA computations and combine transmissions use the BF16 format'"
        ),
        model="deepseek-v3",
        gpu="h800",
        num_gpus=32,
        tp_size=1,
        dp_attention=32,
        ep_size=32,
        cp_size=1,
        prompt_len=4096,
        batch_tokens_per_gpu=16384,
        chunk_size=None,
        precision=(
            "fp8 block-scaled GEMMs (dense and MoE), fp8 dispatch, bf16 combine, bf16 "
            "core MLA attention; KV dtype not stated"
        ),
        balancing="perfect (simulated): 'absolutely balanced MoE routing' in the profile",
        two_batch_overlap=True,
        metric="tok/s/node",
        published=62_713,
        assumptions=(
            "The number is SGLang's reading of DeepSeek's prefill.json trace, not a figure "
            "DeepSeek published. '4K' = 4096 (the SGLang table states 4,096). 'TP1' with "
            "EP32 read as DP attention over 32 GPUs (MLA/shared expert DP32 in the day-6 "
            "overview). KV dtype not stated: bf16 latent assumed (a fresh prefill only "
            "writes it). Redundant experts (32, 9 routed per GPU) are stated for the "
            "production deployment in day 6, not for the profile: assumed the same. "
            "Attention load is balanced across the two micro-batches by splitting prompts "
            "(stated), so a 4K prompt may straddle them."
        ),
        notes=(
            "DeepSeek's own production figures differ: ~73.7k tok/s/node input including "
            "cache hits (day-6 overview), 32,206 excluding cache hits (SGLang's table)."
        ),
        engine="DeepSeek internal inference system",
    ),
    PublishedFigure(
        name="SGLang large-scale EP, 1K prompts (H100)",
        source=_SGLANG_EP_E2E + " (the 1K value)",
        model="deepseek-v3",
        gpu="h100",
        num_gpus=32,
        tp_size=1,
        dp_attention=32,
        ep_size=32,
        cp_size=1,
        prompt_len=1024,
        batch_tokens_per_gpu=16384,
        chunk_size=None,
        precision="fp8 block GEMM (DeepGEMM), fp8 dispatch, bf16 combine, bf16 MLA, bf16 KV",
        balancing="EPLB (distribution matching the input/output data)",
        two_batch_overlap=True,
        metric="tok/s/node",
        published=57_674,
        assumptions=_SGLANG_EP_ASSUMPTIONS,
        notes="DeepSeek-V3 weights (the blog's evaluation model).",
        engine="SGLang (version not stated, May 2025)",
    ),
    PublishedFigure(
        name="SGLang large-scale EP, 2K prompts (H100)",
        source=_SGLANG_EP_E2E + " (the 2K value)",
        model="deepseek-v3",
        gpu="h100",
        num_gpus=32,
        tp_size=1,
        dp_attention=32,
        ep_size=32,
        cp_size=1,
        prompt_len=2048,
        batch_tokens_per_gpu=16384,
        chunk_size=None,
        precision="fp8 block GEMM (DeepGEMM), fp8 dispatch, bf16 combine, bf16 MLA, bf16 KV",
        balancing="EPLB (distribution matching the input/output data)",
        two_batch_overlap=True,
        metric="tok/s/node",
        published=54_543,
        assumptions=_SGLANG_EP_ASSUMPTIONS,
        notes=(
            "The same blog's headline gives 52.3k input tok/s per node 'for 2000-token "
            "input sequences' (the full 12-node PD run); 54,543 is the prefill-only "
            "4-node figure. Which run each comes from is not reconciled in the blog."
        ),
        engine="SGLang (version not stated, May 2025)",
    ),
    PublishedFigure(
        name="SGLang large-scale EP, 4K prompts (H100)",
        source=_SGLANG_EP_E2E + " (the 4K value); the same 50,302 is the 'SGLang (Default)' "
        "column of the prefill table in 'Profile Results > Overall Throughput'",
        model="deepseek-v3",
        gpu="h100",
        num_gpus=32,
        tp_size=1,
        dp_attention=32,
        ep_size=32,
        cp_size=1,
        prompt_len=4096,
        batch_tokens_per_gpu=16384,
        chunk_size=None,
        precision="fp8 block GEMM (DeepGEMM), fp8 dispatch, bf16 combine, bf16 MLA, bf16 KV",
        balancing="EPLB (distribution matching the input/output data)",
        two_batch_overlap=True,
        metric="tok/s/node",
        published=50_302,
        assumptions=_SGLANG_EP_ASSUMPTIONS,
        notes=(
            "The profile section calls this case 'default expert distribution' / 'default "
            "expert imbalance', the end-to-end section says EPLB with a distribution "
            "matching the data: the balancing of this run is EPLB on in-distribution "
            "statistics, not the perfect balance of the 59,337 row. Stated 16,384 tokens "
            "per device and input length 4,096."
        ),
        engine="SGLang (version not stated, May 2025)",
    ),
    PublishedFigure(
        name="SGLang large-scale EP, 4K prompts, simulated perfect EPLB (H100)",
        source=(
            _SGLANG_EP_PROFILE + ": 59,337 in the 'SGLang + Simulated Perfect EPLB' column "
            "('random expert selection following group-limited routing semantics')"
        ),
        model="deepseek-v3",
        gpu="h100",
        num_gpus=32,
        tp_size=1,
        dp_attention=32,
        ep_size=32,
        cp_size=1,
        prompt_len=4096,
        batch_tokens_per_gpu=16384,
        chunk_size=None,
        precision="fp8 block GEMM (DeepGEMM), fp8 dispatch, bf16 combine, bf16 MLA, bf16 KV",
        balancing="perfect (simulated): random routing under group-limited semantics",
        two_batch_overlap=True,
        metric="tok/s/node",
        published=59_337,
        assumptions=_SGLANG_EP_ASSUMPTIONS,
        notes=(
            "Stated: batch 16,384 tokens per device, input length 4,096, EP32 on 4 nodes. "
            "The blog: 'the simulated perfect EPLB case narrows the gap [to DeepSeek's "
            "profile] to 5%'."
        ),
        engine="SGLang (version not stated, May 2025)",
    ),
    PublishedFigure(
        name="SGLang GB200 NVL72, 2000-token prompts, BF16 attention + FP8 MoE",
        source=(
            _GB200_II + ": opening paragraph and Highlights ('Even with traditional BF16 "
            "attention and FP8 MoE, SGLang still achieves 18,471 input ... tokens per "
            "second' per GPU, 2000-token input sequences); instance size in 'Experiments > "
            "End-to-end Performance': 'for prefill, we use 4 ranks per instance for "
            "high-precision and 2 for low-precision'"
        ),
        model="deepseek-v3",
        gpu="gb200",
        num_gpus=4,
        tp_size=1,
        dp_attention=4,
        ep_size=4,
        cp_size=1,
        prompt_len=2000,
        batch_tokens_per_gpu=None,
        chunk_size=None,
        precision=(
            "fp8 block GEMM (MoE and dense linears), bf16 attention (FlashAttention CuTe "
            "prefill kernel for BF16 KV), bf16 KV cache, fp8 DeepEP dispatch"
        ),
        balancing="EPLB (assumed; data 'in-distribution' as in the previous blogs)",
        two_batch_overlap=False,
        metric="tok/s/gpu",
        published=18_471,
        assumptions=_GB200_II_ASSUMPTIONS,
        notes=(
            "Corrects validation.PUBLISHED's row: the source states 4 GPUs per prefill "
            "instance (not 16) and 2000-token inputs (not 2048). DeepSeek V3/R1 weights."
        ),
        engine="SGLang (version not stated, Sept 2025)",
    ),
    PublishedFigure(
        name="SGLang GB200 NVL72, 2000-token prompts, FP8 attention + NVFP4 MoE",
        source=(
            _GB200_II + ": opening paragraph and Highlights ('When using FP8 attention and "
            "NVFP4 MoE, SGLang achieved 26,156 input ... tokens per second per GPU' for "
            "2000-token input sequences); '2 [ranks per instance] for low-precision' in "
            "'Experiments > End-to-end Performance'"
        ),
        model="deepseek-v3",
        gpu="gb200",
        num_gpus=2,
        tp_size=1,
        dp_attention=2,
        ep_size=2,
        cp_size=1,
        prompt_len=2000,
        batch_tokens_per_gpu=None,
        chunk_size=None,
        precision=(
            "nvfp4 MoE experts and nvfp4 attention output projection, fp8 q_b_proj, fp8 "
            "attention with fp8 KV cache (FlashInfer TRT-LLM attention), nvfp4 DeepEP "
            "dispatch; other linears as in NVIDIA's NVFP4 checkpoint (not stated)"
        ),
        balancing="EPLB (assumed; data 'in-distribution' as in the previous blogs)",
        two_batch_overlap=False,
        metric="tok/s/gpu",
        published=26_156,
        assumptions=_GB200_II_ASSUMPTIONS
        + " Precision of q_a/kv_a/kv_b projections, shared experts and dense layers not "
        "stated: NVIDIA's checkpoint convention (attention projections bf16, MLP nvfp4) "
        "assumed.",
        notes=(
            "Weights: DeepSeek-R1 NVFP4 (the blog cites nvidia/DeepSeek-R1-0528-FP4-v2 for "
            "accuracy); the deepseek-v3 preset is FP8 (1 byte/param), NVFP4 experts are "
            "~0.5625 byte/param (4 bits + one fp8 scale per 16)."
        ),
        engine="SGLang (version not stated, Sept 2025)",
    ),
    PublishedFigure(
        name="AIConfigurator GLM-5 DSA layer, CP8, 32K prompt (B200, NVFP4)",
        source=_AIC_DOC + "; shape in the doc's header and section 1 (GLM-5-NVFP4, "
        "attn_cp_size 8, attn_dp 1, attn_tp 1, isl 32768), MoE in section 5 (moe_tp = cp = "
        "8, ep 1), precision in section 4",
        model="glm-5",
        gpu="b200",
        num_gpus=8,
        tp_size=1,
        dp_attention=1,
        ep_size=1,
        cp_size=8,
        prompt_len=32768,
        batch_tokens_per_gpu=4096,
        chunk_size=None,
        precision=(
            "GLM-5-NVFP4: nvfp4 MoE experts (MoE TP8 over the CP group, EP 1); attention "
            "projections and indexer bf16 (checkpoint exclude list); fp8 KV cache "
            "(fp8_ds_mla) dequantized to bf16 for the sparse FMHA (bf16 QkvBfloat16 "
            "kernel); DSA indexer mqa logits fp8; all-gathers and reduce-scatter in bf16"
        ),
        balancing="n/a (MoE tensor-parallel, EP 1)",
        two_batch_overlap=False,
        metric="ms/layer",
        published=7.47,
        assumptions=(
            "Prefix 0, one request (batch 1), no chunking (one forward of 32,768 tokens; "
            "the doc notes the full point needs chunked_prefill_size >= isl) - read from "
            "the doc's setup, not restated beside the measurement. Per-GPU tokens: 4,096 "
            "query tokens (round-robin isl/cp) for attention, the full 32,768 tokens for "
            "the TP-sharded MoE. Engine version: the doc's data directory is "
            "systems/data/b200_sxm/sglang/0.5.12, assumed to be the measured run's. Which "
            "MoE layer was captured is not stated ('stable across layers'); it is a MoE "
            "layer (GLM-5's 3 leading dense layers have no MoE)."
        ),
        notes=(
            "Measured with nsys on device 0, one reduce-scatter to the next. The four "
            "parts are serial ('segment sum = layer period, no hidden overlap'). The DSA "
            "part includes the two small all-gathers (KV indexer key ~55 us, latent ~94 us "
            "measured, section 8). AIConfigurator's own prediction of the same layer is "
            "7.87 ms (+5.4 %); that is a model output, not a target."
        ),
        components=(
            ("dsa_attention", 3.808),
            ("all_gather_hidden", 0.622),
            ("moe", 2.430),
            ("reduce_scatter", 0.610),
        ),
        engine="SGLang (0.5.12 per the data directory; assumed)",
    ),
)


PUBLISHED_FIGURES: tuple[PublishedFigure, ...] = _EP_GB200_AIC_ROWS + LONG_PROMPT_AND_OTHER_ROWS
