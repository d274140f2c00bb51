"""Published prefill figures, part 2: single long prompts on H20 (SGLang's chunked
pipeline post), vLLM on GB300 and SGLang's Kimi K2 on H200 (field conventions:
:mod:`prefillkit.cost.published_figure`)."""

from __future__ import annotations

from prefillkit.cost.published_figure import PublishedFigure

__all__ = ["LONG_PROMPT_AND_OTHER_ROWS"]

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


LONG_PROMPT_AND_OTHER_ROWS: tuple[PublishedFigure, ...] = (
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
            "Rounded figure ('~48.5s'). The deepseek-v3 preset (V3.1 has V3's "
            "architecture; --model-path deepseek-ai/DeepSeek-V3.1 selects it). PP4 TP8 on "
            "four 96 GB nodes gives ~15.5 s (same paragraph)."
        ),
        engine="SGLang >= v0.5.7 (the blog's stated requirement)",
    ),
    PublishedFigure(
        name="Qwen3-235B-A22B-FP8 128K prompt, PP1 TP4 (H20-96G)",
        source=(
            _CPP + ": 'For the Qwen3-235B-A22B-FP8, the baseline TTFT of ~55.5s (PP1 TP4)' "
            "(Fig. 11); testbed: '6 H20 nodes (8 x 96GB VRAM GPUs)'"
        ),
        model="qwen3-235b-a22b",
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
            "The qwen3-235b-a22b preset (Qwen/Qwen3-235B-A22B-FP8 config.json). Rounded "
            "figure ('~55.5s')."
        ),
        engine="SGLang >= v0.5.7 (the blog's stated requirement)",
    ),
    PublishedFigure(
        name="Qwen3-235B-A22B-FP8 128K prompt, PP8 TP4 (32 x H20-96G)",
        source=(
            _CPP + ", Table 1 'TTFT vs. Input Token Length for Qwen3-235B-A22B-FP8 with "
            "PP8 TP4 on H20': 10.54 s at 128K"
        ),
        model="qwen3-235b-a22b",
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
            "for the same point (81.1 % below PP1). Not modelled: no pipeline parallelism."
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
            "The gb300 GPU preset (datasheet values; NVFP4 peak not modelled). The "
            "deepseek-v3 preset is FP8 (1 byte/param); NVFP4 weights are ~0.5625 byte/param. "
            "Figure "
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
            "for a single DSA layer step is 2.7x that of MLA', R1's prefill ~3x V3.2's. The "
            "deepseek-v3.2 preset is FP8 (1 byte/param)."
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
        model="kimi-k2",
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
            "The kimi-k2 preset (moonshotai/Kimi-K2-Instruct config.json). 56k/node = "
            "224k / 4 nodes, rounded."
        ),
        engine="SGLang (lmsysorg/sglang:dev image, July 2025)",
    ),
)
