"""Published prefill figures, each with the deployment shape its source states.

These are measurements other people published (blogs, profiles, design documents) of
prefill throughput, time-to-first-token or per-layer time, collected so that the cost
model can be checked against them. Nothing in prefillkit is fitted to them: a row is a
target the model is run against on the row's shape, never an input to a parameter.

Every row names its source precisely enough to find the number (document, section,
table or figure), the shape the source measured it on, and in ``assumptions`` every
element of the shape the source does not state together with what was assumed for it.
Where a source contradicts itself, or an earlier transcription of it was wrong, ``notes``
says so.

Field conventions (checked by ``tests/test_published.py``):

* ``num_gpus`` is the GPUs of ONE prefill instance (one engine the request runs on), not
  the cluster: ``num_gpus == tp_size * dp_attention * cp_size * pp_size``, where
  ``tp_size`` is the attention tensor-parallel degree inside one DP-attention rank,
  ``dp_attention`` the number of DP-attention ranks, ``cp_size`` the context-parallel
  degree and ``pp_size`` the pipeline stages.
* ``ep_size`` is the expert-parallel degree of the MoE layers, which reuse the GPUs of a
  pipeline stage: ``ep_size`` divides ``num_gpus // pp_size`` and each expert is
  tensor-sharded over the rest (:attr:`PublishedFigure.moe_tp_size`); ``ep_size == 1``
  means the MoE is tensor-parallel over the whole stage (SGLang ``--tp 8`` without EP,
  or AIConfigurator's CP group reused as MoE-TP).
* ``batch_tokens_per_gpu`` is the number of prompt tokens in one forward of the GPU's
  attention rank (under attention TP all ranks of the group run the same tokens; under
  CP it is the GPU's query-token share). ``None`` where the source does not state it.
* ``metric``: ``tok/s/node`` (input tokens/s per 8-GPU node), ``tok/s/gpu``,
  ``s/prompt`` (time to first token of one prompt, alone in the engine) or ``ms/layer``
  (one decoder layer's forward; ``components`` then holds its measured split, in ms).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["METRICS", "PUBLISHED_FIGURES", "PublishedFigure"]

#: The metrics a row may be expressed in.
METRICS: tuple[str, ...] = ("tok/s/node", "tok/s/gpu", "s/prompt", "ms/layer")


@dataclass(frozen=True, slots=True)
class PublishedFigure:
    """One published prefill figure and the shape it was measured on."""

    name: str  # short row label
    source: str  # author/org, title, URL path, date, and where in it the figure is
    model: str  # prefillkit model preset, or the HF id when no preset exists (see notes)
    gpu: str  # prefillkit GPU preset, or the GPU's name when no preset exists (see notes)
    num_gpus: int  # GPUs of ONE prefill instance
    tp_size: int  # attention TP per DP-attention rank
    dp_attention: int  # DP-attention ranks
    ep_size: int  # MoE expert-parallel degree (1 = MoE tensor-parallel)
    cp_size: int  # context-parallel degree
    prompt_len: int
    batch_tokens_per_gpu: int | None  # prompt tokens per forward of one attention rank
    chunk_size: int | None  # chunked-prefill size where it matters (long prompts)
    precision: str  # GEMM / MoE / attention / KV precisions
    balancing: str  # "EPLB", "perfect (simulated)", "default", "n/a" (+ detail)
    two_batch_overlap: bool
    metric: str  # one of METRICS
    published: float
    assumptions: str  # every shape element the source does not state, and what was assumed
    notes: str = ""
    components: tuple[tuple[str, float], ...] = ()  # measured split of a ms/layer figure
    pp_size: int = 1  # pipeline-parallel stages
    engine: str = ""  # serving engine and version as the source gives it

    @property
    def moe_tp_size(self) -> int:
        """Tensor-parallel degree of each expert: the stage's GPUs not used for EP."""
        return self.num_gpus // self.pp_size // self.ep_size


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

_CPP = (
    "Shangming Cai et al. (SGLang), 'Pipeline Parallelism in SGLang: Scaling to "
    "Million-Token Contexts and Beyond', LMSYS blog, lmsys.org/blog/2026-01-15-chunked-"
    "pipeline (2026-01-15), section 'Performance Impact > Reduced TTFT and Scaling Out for "
    "1 million ITL'"
)

_VLLM_GB300 = (
    "The DaoCloud and vLLM team, 'DeepSeek-V3.2 on GB300: Performance Breakthrough', vLLM "
    "blog, blog.vllm.ai/2026/02/13/gb300-deepseek.html (2026-02-13)"
)

_AIC_DOC = (
    "NVIDIA AIConfigurator, docs/CONTEXT_PARALLEL_DSA_MODELING.md (github.com/ai-dynamo/"
    "aiconfigurator, stored at commit 1f8d4701002f1944a8835b57a51071cf65596790), "
    "section 7 'Per-layer assembly - serial, no overlap': 'Measured decomposition (device "
    "0, RS->RS, isl=32768/cp8)': DSA 3808 us + AG_hidden 622 us + MoE 2430 us + RS 610 us "
    "= RS->RS period 7470 us"
)


# ------------------------------------------------------------------------------- rows

PUBLISHED_FIGURES: tuple[PublishedFigure, ...] = (
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
    PublishedFigure(
        name="SGLang DeepSeek-R1 on 8 x H20-96G, TP8, 4K prompts",
        source=(
            "Tianyu Zhang, Peng Zhang, Yusong Gao, Yun Zhang (Ant Group), 'Together with "
            "SGLang: Best Practices for Serving DeepSeek-R1 on H20-96G', LMSYS blog, "
            "lmsys.org/blog/2025-09-26-sglang-ant-group (2025-09-26): Introduction ('each "
            "node achieves 16.5k input tokens per second ... on 4096-token input "
            "sequences'); setup in 'Performance > Prefill > Environment' (1 node, "
            "--tp-size 8, bench_serving 512 prompts, random input 4096, output 1)"
        ),
        model="deepseek-v3",
        gpu="h20",
        num_gpus=8,
        tp_size=8,
        dp_attention=1,
        ep_size=1,
        cp_size=1,
        prompt_len=4096,
        batch_tokens_per_gpu=None,
        chunk_size=None,
        precision=(
            "DeepSeek-R1 fp8 block-scaled weights and GEMMs (fused MoE, TP8), FA3 attention "
            "with FP8 ('Fa3-FP8'), MHA path for prefill (MHA/MLA chosen per batch); KV "
            "dtype not stated"
        ),
        balancing="n/a (MoE tensor-parallel, no EP)",
        two_batch_overlap=False,
        metric="tok/s/node",
        published=16_500,
        assumptions=(
            "Tokens per forward not stated: SGLang v0.5.2 defaults assumed (chunked "
            "prefill size chosen by GPU memory, believed 8192 for a 96 GB GPU, i.e. 2 "
            "prompts of 4096 per forward; max-prefill-tokens 16384) - not verified in the "
            "source. The 16.5k is the best configuration of the blog's prefill chart (all "
            "optimizations: MHA, MoE, QKV, Fa3-FP8) per the introduction; the chart itself "
            "is per GPU. KV cache fp8 assumed with Fa3-FP8 (not stated). DeepEP not used "
            "(TP-only prefill)."
        ),
        notes=(
            "Rounded figure ('16.5k'). Model is DeepSeek-R1 (deepseek-v3 preset, same "
            "architecture)."
        ),
        engine="SGLang v0.5.2 (stated)",
    ),
    PublishedFigure(
        name="DeepSeek-V3.1 128K prompt, PP1 TP8, one H20-141G node",
        source=(
            _CPP + ": 'for the DeepSeek-V3.1, the baseline TTFT of ~48.5s (PP1 TP8)' (Fig. "
            "10); testbed in 'Performance Impact': 'for the PP size = 1 configuration of "
            "DeepSeek-V3.1, we used a standalone H20 node (8 x 141GB VRAM GPUs) ... for an "
            "input token length of 128K'"
        ),
        model="deepseek-v3",
        gpu="h20-141g",
        num_gpus=8,
        tp_size=8,
        dp_attention=1,
        ep_size=1,
        cp_size=1,
        prompt_len=131072,
        batch_tokens_per_gpu=None,
        chunk_size=4096,
        precision=(
            "DeepSeek-V3.1 fp8 block-scaled weights and GEMMs (MoE TP8), FA3 attention "
            "(--attention-backend fa3), KV dtype not stated"
        ),
        balancing="n/a (MoE tensor-parallel, no EP)",
        two_batch_overlap=False,
        metric="s/prompt",
        published=48.5,
        assumptions=(
            "Chunk size of the PP1 baseline not stated: Fig. 10 plots fixed 4096, fixed "
            "12288 and dynamic 12288 (sigma 0.65) series; 4096 (the blog's fixed-chunk "
            "example) assumed - each forward then runs one chunk of 4096 new tokens over a "
            "growing prefix. '128K' read as 131072. Batch size 1 (the blog's throughput "
            "figures are 'Batch Size = 1'). KV bf16 (SGLang default) assumed. MoE "
            "tensor-parallel (no --ep / DeepEP in the launch examples) assumed."
        ),
        notes=(
            "Rounded figure ('~48.5s'). The deepseek-v3 preset fits (V3.1 has V3's "
            "architecture), but the HF id deepseek-ai/DeepSeek-V3.1 is not in the preset "
            "alias table. PP4 TP8 on four 96 GB nodes gives ~15.5 s (same paragraph)."
        ),
        engine="SGLang >= v0.5.7 (the blog's stated requirement)",
    ),
    PublishedFigure(
        name="Qwen3-235B-A22B-FP8 128K prompt, PP1 TP4 (H20-96G)",
        source=(
            _CPP + ": 'For the Qwen3-235B-A22B-FP8, the baseline TTFT of ~55.5s (PP1 TP4)' "
            "(Fig. 11); testbed: '6 H20 nodes (8 x 96GB VRAM GPUs)'"
        ),
        model="Qwen/Qwen3-235B-A22B-FP8",
        gpu="h20",
        num_gpus=4,
        tp_size=4,
        dp_attention=1,
        ep_size=1,
        cp_size=1,
        prompt_len=131072,
        batch_tokens_per_gpu=None,
        chunk_size=6144,
        precision=(
            "fp8 block-scaled (128x128) weights and w8a8 GEMMs (attention projections and "
            "MoE, MoE TP4), FA3 attention, KV dtype not stated"
        ),
        balancing="n/a (MoE tensor-parallel, no EP)",
        two_batch_overlap=False,
        metric="s/prompt",
        published=55.5,
        assumptions=(
            "Chunk size of the PP1 baseline not stated: Fig. 11 plots fixed 6144 and "
            "dynamic 18432 series; 6144 (the blog's fixed-chunk example for this model) "
            "assumed. H20 variant: the 96 GB testbed (only DeepSeek's PP1 run is said to "
            "use a 141 GB node). '128K' read as 131072; batch size 1; KV bf16 (SGLang "
            "default) and MoE tensor-parallel assumed."
        ),
        notes=(
            "No prefillkit preset for Qwen3-235B-A22B (HF id given; the report lists the "
            "config values a preset needs). Rounded figure ('~55.5s')."
        ),
        engine="SGLang >= v0.5.7 (the blog's stated requirement)",
    ),
    PublishedFigure(
        name="Qwen3-235B-A22B-FP8 128K prompt, PP8 TP4 (32 x H20-96G)",
        source=(
            _CPP + ", Table 1 'TTFT vs. Input Token Length for Qwen3-235B-A22B-FP8 with "
            "PP8 TP4 on H20': 10.54 s at 128K"
        ),
        model="Qwen/Qwen3-235B-A22B-FP8",
        gpu="h20",
        num_gpus=32,
        tp_size=4,
        dp_attention=1,
        ep_size=1,
        cp_size=1,
        prompt_len=131072,
        batch_tokens_per_gpu=None,
        chunk_size=18432,
        precision=(
            "fp8 block-scaled (128x128) weights and w8a8 GEMMs, MoE TP4 per stage, FA3 "
            "attention, KV dtype not stated"
        ),
        balancing="n/a (MoE tensor-parallel, no EP)",
        two_batch_overlap=False,
        metric="s/prompt",
        published=10.54,
        assumptions=(
            "Chunking of the Table 1 runs not stated: dynamic chunking with initial chunk "
            "18432 and smooth factor 0.8 (the blog's dynamic example for this model, the "
            "best series of Fig. 11) assumed; chunks shrink as the prefix grows. 94 layers "
            "over 8 stages (partition not stated; SGLang's default split assumed). H20 "
            "96 GB, batch size 1, KV bf16 and MoE tensor-parallel assumed."
        ),
        notes=(
            "Pipeline-parallel row: num_gpus = tp 4 x pp 8. The blog's prose gives ~10.5 s "
            "for the same point (81.1 % below PP1). No Qwen3 preset (see the PP1 row)."
        ),
        pp_size=8,
        engine="SGLang >= v0.5.7 (the blog's stated requirement)",
    ),
    PublishedFigure(
        name="vLLM DeepSeek-R1 NVFP4 on 2 x GB300, EP2, 2K prompts",
        source=(
            _VLLM_GB300 + ": Summary ('with 2x GB300 GPUs, DeepSeek-R1 (NVFP4 + EP2) can "
            "achieve a throughput of 22476 TGS (ISL=2K,OSL=1,batch=256) in a prefill-only "
            "scenario', TGS = tokens/GPU/s) and 'Deployment Tuning > EP2 vs. TP2 "
            "Selection' (EP2 = -dp=2 --enable-expert-parallel; ceiling of 22476 TGS)"
        ),
        model="deepseek-v3",
        gpu="gb300",
        num_gpus=2,
        tp_size=1,
        dp_attention=2,
        ep_size=2,
        cp_size=1,
        prompt_len=2048,
        batch_tokens_per_gpu=None,
        chunk_size=None,
        precision=(
            "nvidia/DeepSeek-R1-0528-NVFP4: nvfp4 MoE (FlashInfer FP4 MoE kernel, "
            "VLLM_USE_FLASHINFER_MOE_FP4=1); other linears per the checkpoint (not "
            "stated); KV dtype not stated"
        ),
        balancing="default (no EPLB; the blog notes fluctuations from unbalanced routing)",
        two_batch_overlap=False,
        metric="tok/s/gpu",
        published=22_476,
        assumptions=(
            "'ISL=2K' read as 2048. 'batch=256' is the benchmark's max concurrency, not "
            "tokens per forward; --max-num-batched-tokens is given as 32768 for TP2 only, "
            "the EP2 value is not stated (assume 32768 per DP rank, i.e. 16 prompts per "
            "forward per GPU). Metric is vllm bench serve 'Total token throughput' per "
            "GPU, which also counts the one output token per request (0.05 %). Linear "
            "precisions outside the MoE assumed as NVIDIA's NVFP4 checkpoints (attention "
            "q/kv projections bf16, o_proj and MLP nvfp4); KV bf16 (vLLM 'auto') assumed. "
            "No dual-batch overlap assumed (not mentioned)."
        ),
        notes=(
            "No gb300 GPU preset (the report lists its datasheet values). The deepseek-v3 "
            "preset is FP8 (1 byte/param); NVFP4 weights are ~0.5625 byte/param. Figure "
            "is the peak of a concurrency sweep ('throughput ceiling')."
        ),
        engine="vLLM v0.14.1, CUDA 13.0 (stated)",
    ),
    PublishedFigure(
        name="vLLM DeepSeek-V3.2 NVFP4 on 2 x GB300, TP2, 2K prompts",
        source=(
            _VLLM_GB300 + ": Summary ('DeepSeek-V3.2 (NVFP4 + TP2) ... achieves a "
            "single-GPU throughput of 7360 TGS ... in a prefill-only scenario') and 'FP8 "
            "vs. FP4': 'In prefill-only scenarios (ISL=2k, OSL=1, batch=64), TP2 ... "
            "achieves up to 7360 TGS'; recipe '--max-num-batched-tokens 20480' for "
            "DeepSeek-V3.2-NVFP4 in 'Optimized Configurations'"
        ),
        model="deepseek-v3.2",
        gpu="gb300",
        num_gpus=2,
        tp_size=2,
        dp_attention=1,
        ep_size=1,
        cp_size=1,
        prompt_len=2048,
        batch_tokens_per_gpu=20480,
        chunk_size=None,
        precision=(
            "nvidia/DeepSeek-V3.2-NVFP4: nvfp4 MoE, dense MLP and o_proj; bf16 q_a/q_b/"
            "kv_a/kv_b projections and DSA indexer (checkpoint exclude list); checkpoint "
            "kv_cache_quant_algo FP8"
        ),
        balancing="n/a (MoE tensor-parallel, no EP)",
        two_batch_overlap=False,
        metric="tok/s/gpu",
        published=7_360,
        assumptions=(
            "'ISL=2K' read as 2048. Tokens per forward: the recipe's --max-num-batched-"
            "tokens 20480 assumed used for the measurement (batch=64 is the concurrency). "
            "KV cache: fp8 from the checkpoint's kv_cache_quant_algo assumed (vLLM flags "
            "not given). Dense prefill attention below the sparse threshold vs DSA path "
            "for 2K prompts not stated (vLLM runs the indexer path)."
        ),
        notes=(
            "The blog contradicts itself: the summary and 'FP8 vs. FP4' say TP2, 'DeepSeek "
            "V3.2 - Still Way To Go' says 'DeepSeek V3.2 in EP2 ... ~7360 TGS'; TP2 kept "
            "(stated twice, with the recipe). The same section: 'the kernel execution time "
            "for a single DSA layer step is 2.7x that of MLA', R1's prefill ~3x V3.2's. No "
            "gb300 GPU preset; the deepseek-v3.2 preset is FP8 (1 byte/param)."
        ),
        engine="vLLM v0.14.1, CUDA 13.0 (stated)",
    ),
    PublishedFigure(
        name="SGLang Kimi K2 on 4 x 8 H200 prefill nodes, 2000-token prompts",
        source=(
            "The Mooncake Team, 'Deploying Kimi K2 with PD Disaggregation and Large-Scale "
            "Expert Parallelism on 128 H200 GPUs', LMSYS blog, lmsys.org/blog/"
            "2025-07-20-k2-large-scale-ep (2025-07-20): 'Cluster-Level Performance' table "
            "('Prefill Throughput 224k tokens/sec (4 P Nodes)') and 'Comparison to "
            "DeepSeek R1 Deployment' ('56k / node'); input length 2000 in the benchmark "
            "table; prefill flags from the OME runtime it deploys, sgl-project/ome "
            "config/runtimes/srt/kimi-k2-pd-rt.yaml (engineConfig: leader + 3 workers)"
        ),
        model="moonshotai/Kimi-K2-Instruct",
        gpu="h200",
        num_gpus=32,
        tp_size=1,
        dp_attention=32,
        ep_size=32,
        cp_size=1,
        prompt_len=2000,
        batch_tokens_per_gpu=16384,
        chunk_size=None,
        precision=(
            "fp8 block-scaled (128x128) checkpoint and GEMMs (DeepGEMM), DeepEP normal "
            "dispatch (fp8) / combine (bf16), bf16 MLA attention, bf16 KV"
        ),
        balancing="EPLB (--enable-eplb, dynamic dispatch; no redundant prefill experts)",
        two_batch_overlap=True,
        metric="tok/s/node",
        published=56_000,
        assumptions=(
            "Shape from the OME runtime yaml, not the blog: --dp-size = --tp-size = "
            "PARALLELISM_SIZE (32 over 4 nodes assumed), --chunked-prefill-size 524288 "
            "(SGLang divides it over DP ranks: 16,384 tokens per GPU per forward), "
            "--enable-two-batch-overlap, --deepep-mode normal, --moe-dense-tp-size 1, "
            "--max-total-tokens 131072, --context-length 2176; the yaml in the index may "
            "postdate the blog's run. Precisions not stated: as for DeepSeek-V3 on SGLang "
            "(fp8 GEMM, bf16 attention and KV) assumed."
        ),
        notes=(
            "No prefillkit preset for Kimi K2 (HF id given; the report lists the config "
            "values a preset needs). 56k/node = 224k / 4 nodes, rounded."
        ),
        engine="SGLang (lmsysorg/sglang:dev image, July 2025)",
    ),
)
