"""The table of :mod:`prefillkit.app.launch_flags`: what prefillkit does with each of SGLang
0.5.23's launch flags (``prefillkit/data/sglang_0_5_23_server_args.json``).

Every flag of the data file is in exactly one of :data:`MODELLED`, :data:`REFUSED` and
:data:`IGNORED_GROUPS` (``tests/test_launch_flags.py`` checks it, and that the modelled
ones are those :func:`~prefillkit.app.settings.parse_flags` maps). An alias is listed
under its own spelling. The line a refused flag gets is ``--flag: not supported:
REASON``; an ignored flag's theme is what ``docs/launch_lines.md`` lists it under.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["IGNORED_GROUPS", "LEGACY", "MODELLED", "REFUSED"]

#: The flags :func:`~prefillkit.app.settings.parse_flags` maps onto a setting.
MODELLED: frozenset[str] = frozenset(
    """
    --model-path --model --kv-cache-dtype --mem-fraction-static --max-running-requests
    --max-total-tokens --chunked-prefill-size --max-prefill-tokens --schedule-policy
    --enable-priority-scheduling --disable-priority-preemption
    --schedule-low-priority-values-first --priority-scheduling-preemption-threshold
    --schedule-conservativeness --page-size --tp-size --tensor-parallel-size --attn-cp-size
    --attention-context-parallel-size --ep-size --expert-parallel-size --ep
    --enable-hierarchical-cache --enable-hicache --hicache-ratio --hicache-size
    --hicache-write-policy --enable-two-batch-overlap --disaggregation-mode
    --enable-dp-attention --dp-size --data-parallel-size --attn-dp-size
    --attention-data-parallel-size --load-balance-method
    """.split()
)

_PP = "pipeline parallelism is not modelled"
_EXTERNAL_TIER = (
    "an external KV-cache tier is not modelled; HiCache's host (L2) tier is "
    "(--enable-hierarchical-cache)"
)
_LORA = "LoRA serving (adapters loaded and batched per request) is not modelled"
_DELAY = "holding new prefills back to batch them is not modelled"
_GPU_MEMORY = "changes the GPU memory left to the KV pool, which is not modelled"
_POOL = "changes how many tokens the KV pool holds, which is not modelled"

#: Flag -> why it is refused: it changes admission, the KV pool or the cache in a way
#: prefillkit does not model. A value equal to SGLang's default is accepted (ignored).
REFUSED: dict[str, str] = {
    "--pp-size": _PP,
    "--pipeline-parallel-size": _PP,
    "--dcp-size": "decode context parallelism (the KV cache sharded over DCP ranks) is not "
    "modelled",
    "--decode-context-parallel-size": "decode context parallelism (the KV cache sharded over "
    "DCP ranks) is not modelled",
    "--disable-radix-cache": "a no-prefix-cache mode is not modelled (prefillkit always runs "
    "the radix cache)",
    "--enable-mixed-chunk": "mixing decode tokens into prefill batches is not modelled",
    "--hicache-storage-backend": "HiCache's storage (L3) tier is not modelled; the host (L2) "
    "tier is (--enable-hierarchical-cache)",
    "--max-queued-requests": "a waiting-queue length limit is not modelled",
    "--enable-kv-cache-sharding": "sharding the KV cache over the ranks that replicate it " + _POOL,
    "--enable-dsa-cache-layer-split": "splitting DSA cache layers over CP ranks " + _POOL,
    "--prefill-max-requests": "a cap on the requests of one prefill batch is not modelled",
    "--prefill-decode-interval": "holding prefills back for decode rounds is not modelled",
    "--retraction-policy": "only SGLang's default decode retraction order (length) is modelled",
    "--radix-eviction-policy": "only LRU eviction (SGLang's default) is modelled",
    "--radix-cache-backend": "a registered radix-cache backend is not modelled (SGLang's "
    "built-in radix cache is)",
    "--default-priority-value": "a default priority for requests without one is not modelled",
    "--abort-on-priority-when-disabled": "aborting requests that carry a priority is not modelled",
    "--enable-session-radix-cache": "session-referenced eviction is not modelled",
    "--enable-streaming-session": "streaming sessions (KV held for a session between turns) "
    "are not modelled",
    "--strip-thinking-cache": "leaving reasoning output out of the radix cache changes its "
    "hits and is not modelled",
    "--cpu-offload-gb": "offloading weights to CPU " + _GPU_MEMORY,
    "--offload-group-size": "offloading layers to CPU " + _GPU_MEMORY,
    "--enable-paged-experts": "paging experts from host memory " + _GPU_MEMORY,
    "--kt-weight-path": "ktransformers' CPU experts change the GPU memory and the forward "
    "time, which are not modelled",
    "--enable-lmcache": _EXTERNAL_TIER,
    "--enable-flexkv": _EXTERNAL_TIER,
    "--enable-unified-cache-external-linker": _EXTERNAL_TIER,
    "--hicache-host-memory-mode": "only HiCache's cache host mode (SGLang's default) is modelled",
    "--enable-hisparse": "hierarchical sparse attention (KV offloaded to host) is not modelled",
    "--enable-lora": _LORA,
    "--lora-paths": _LORA,
    "--dllm-algorithm": "diffusion LLM decoding is not modelled",
    "--enable-pdmux": "PD multiplexing (prefill and decode sharing the GPU's SMs) is not modelled",
    "--encoder-only": "an encoder-only server runs no LLM prefill",
    "--enable-prefill-delayer": _DELAY,
    "--prefill-delayer-queue-min-ratio": _DELAY,
    "--min-free-slots-delay": _DELAY,
    "--config": "SGLang's YAML config file is not read (prefillkit's own --config takes a "
    "TOML settings file); give its flags on the line",
}

#: Theme -> the flags accepted and ignored under it (whitespace-separated): they do not
#: change what the simulator models.
IGNORED_GROUPS: dict[str, str] = {
    "HTTP / gRPC server, API keys and responses": """
        --host --port --fastapi-root-path --smg-grpc-mode --grpc-mode --grpc-port --sidecar
        --sidecar-args --skip-server-warmup --warmups --enable-http2
        --http2-max-concurrent-streams --http2-initial-connection-window-size --ssl-keyfile
        --ssl-certfile --ssl-ca-certs --ssl-keyfile-password --enable-ssl-refresh --api-key
        --admin-api-key --served-model-name --weight-version --file-storage-path
        --enable-cache-report --return-input-ids --return-output-ids --tool-server
        --sampling-defaults --asr-max-buffer-seconds --asr-max-concurrent-sessions
        --preferred-sampling-params --allow-auto-truncate --stream-interval
        --batch-notify-size --stream-response-default-include-usage
        --incremental-streaming-output --enable-response-store --enable-http-worker-reuseport
        --grpc-response-timeout-secs --enable-custom-logit-processor
        --enable-return-hidden-states --return-hidden-states-mode
        --enable-return-routed-experts --enable-return-indexer-topk
        --enable-return-aux-hidden-states --return-aux-hidden-state-layer-ids
        --sampling-mask-max-tokens --enable-watermark --watermark-config
        --engine-info-bootstrap-port --enable-mis
    """,
    "chat templates, reasoning / tool-call parsers, grammar and sampling": """
        --chat-template --trust-request-chat-template --hf-chat-template-name
        --completion-template --default-chat-template-kwargs --enable-strict-thinking
        --reasoning-parser --tool-call-parser --grammar-backend
        --constrained-json-whitespace-pattern --constrained-json-disable-any-whitespace
        --constrained-json-max-whitespace-cnt --disable-outlines-disk-cache --sampling-backend
        --random-seed --mlx-enable-sampling --rl-on-policy-target
    """,
    "tokenizer and detokenizer": """
        --tokenizer-path --tokenizer-mode --tokenizer-backend --tokenizer-worker-num
        --detokenizer-worker-num --skip-tokenizer-init --enable-dynamic-batch-tokenizer
        --dynamic-batch-tokenizer-batch-size --dynamic-batch-tokenizer-batch-timeout
        --enable-tokenizer-batch-encode --disable-tokenizer-batch-decode
    """,
    "logging, metrics, tracing and debugging": """
        --log-level --log-level-http --log-requests --log-requests-level --log-requests-format
        --log-requests-target --uvicorn-access-log-exclude-prefixes --crash-dump-folder
        --show-time-cost --enable-metrics --smg-http-sidecar-port --grpc-http-sidecar-port
        --enable-mfu-metrics --enable-metrics-for-all-schedulers
        --load-snapshot-publish-interval --tokenizer-metrics-custom-labels-header
        --tokenizer-metrics-allowed-custom-labels --extra-metric-labels
        --bucket-time-to-first-token --bucket-inter-token-latency --bucket-e2e-request-latency
        --prompt-tokens-buckets --generation-tokens-buckets --gc-warning-threshold-secs
        --decode-log-interval --enable-request-time-stats-logging --kv-events-config
        --load-publish-endpoint --enable-forward-pass-metrics --forward-pass-metrics-worker-id
        --forward-pass-metrics-ipc-name --enable-trace --trace-modules --otlp-traces-endpoint
        --otlp-service-name --export-metrics-to-file --export-metrics-to-file-dir
        --expert-distribution-recorder-mode --expert-distribution-recorder-buffer-size
        --expert-balancedness-report-mode --debug-tensor-dump-output-folder
        --debug-tensor-dump-layers --debug-tensor-dump-input-file --kv-canary
        --kv-canary-sweep-interval --kv-canary-real-data --enable-layerwise-nvtx-marker
        --enable-profile-cuda-graph --msprobe-dump-config --forward-hooks --watchdog-timeout
        --soft-watchdog-timeout --spec-trace-dir
    """,
    "model loading, weight format and quantization (the model is the one --model-path or "
    "--model-config gives)": """
        --load-format --model-loader-extra-config --trust-remote-code --context-length
        --revision --model-impl --model-config-parser --json-model-override-args --dtype
        --quantization --quantization-param-path --enable-fp32-lm-head --modelopt-quant
        --modelopt-checkpoint-restore-path --modelopt-checkpoint-save-path
        --modelopt-export-path --quantize-and-serve --rl-quant-profile
        --startup-weight-load-mode --custom-weight-loader --weight-loader-disable-mmap
        --weight-loader-prefetch-checkpoints --weight-loader-prefetch-num-threads
        --weight-loader-drop-cache-after-load --remote-instance-weight-loader-seed-instance-ip
        --remote-instance-weight-loader-seed-instance-service-port
        --remote-instance-weight-loader-send-weights-group-ports
        --remote-instance-weight-loader-backend
        --remote-instance-weight-loader-start-seed-via-transfer-engine --modelexpress-config
        --download-dir --model-checksum --delete-ckpt-after-loading --decrypted-config-file
        --decrypted-draft-config-file --checkpoint-engine-wait-weights-before-ready
        --weight-cache-mode --weight-cache-socket --weight-cache-timeout --is-embedding
        --prefill-kv-cache-dequant-dtype
    """,
    "kernels, CUDA graphs, torch.compile and collectives (not inputs of the forward cost "
    "model)": """
        --attention-backend --decode-attention-backend --prefill-attention-backend
        --enable-lean-attention --fp8-gemm-backend --fp4-gemm-backend --bf16-gemm-backend
        --dsa-prefill-backend --dsv4-prefill-backend --dsa-decode-backend
        --dsa-paged-mqa-logits-backend --dsa-topk-backend --dsv4-attn-backend
        --dsa-triton-union --enable-dsa-fused-indexer --no-enable-dsa-fused-indexer
        --enable-deepseek-v4-fp4-indexer --disable-flashinfer-autotune
        --flashinfer-autotune-skip-ops --cuda-graph-config --cuda-graph-backend-decode
        --cuda-graph-backend-prefill --cuda-graph-max-bs-decode --cuda-graph-max-bs-prefill
        --cuda-graph-bs-decode --cuda-graph-bs-prefill --cuda-graph-prefill-max-context
        --context-bucket --cuda-graph-max-seq-len-prefill --disable-prefill-cuda-graph
        --disable-decode-cuda-graph --disable-cuda-graph --disable-cuda-graph-padding
        --enable-cudagraph-gc --debug-cuda-graph --enable-nccl-nvls --enable-symm-mem
        --triton-attention-reduce-in-fp32 --triton-attention-num-kv-splits
        --triton-attention-split-tile-size --flashinfer-mla-disable-ragged
        --enable-fused-qk-norm-rope --no-enable-fused-qk-norm-rope
        --enable-precise-embedding-interpolation --enable-fused-moe-sum-all-reduce
        --disable-custom-all-reduce --enable-mscclpp --enable-torch-symm-mem
        --enable-scattered-sconv --pre-warm-nccl --boundary-reduction
        --enable-quant-communications --enforce-disable-flashinfer-allreduce-fusion
        --flashinfer-allreduce-fusion-backend --enable-aiter-allreduce-fusion
        --enable-flashinfer-allreduce-fusion --disable-aiter-allreduce-fusion-in-prefill
        --disable-aiter-allreduce-fusion-in-decode --enable-torch-compile
        --enable-torch-compile-debug-mode --torch-compile-max-bs --enable-tf32-matmul
        --no-enable-tf32-matmul --enable-amd-monokernel --monokernel-backend
        --enable-nvidia-megakernel --enable-megamoe-for-layernorm-sp
        --enable-deterministic-inference --disable-chunked-prefix-cache
    """,
    "parallel layout details (the TP, CP, DP attention and EP sizes are modelled; these do "
    "not change them)": """
        --enable-prefill-cp --cp-strategy --enable-cp-decode-attn-tp
        --enable-attn-tp-input-scattered --enable-shared-experts-attn-tp
        --shared-experts-tp-size --enable-dense-mlp-attn-tp --enable-layernorm-sp
        --enable-dp-attention-local-control-broadcast
        --disable-attn-tp-gather --enable-dp-lm-head --enable-tp-lm-head-all-to-all
        --no-enable-tp-lm-head-all-to-all --moe-dense-tp-size --dwdp-size --moe-dp-size
        --moe-data-parallel-size --enable-single-batch-overlap
        --tbo-token-distribution-threshold --enable-p2p-check
    """,
    "MoE runners, all-to-all, expert placement and balancing (not inputs of the forward "
    "cost model)": """
        --moe-a2a-backend --enable-w4a4-mxfp4-megamoe --deepep-v2-mode --moe-runner-backend
        --flashinfer-mxfp4-moe-precision --deepep-mode --fuseep-mode
        --deepep-dispatcher-output-dtype --ep-num-redundant-experts --ep-dispatch-algorithm
        --init-expert-location --enable-eplb --eplb-algorithm --eplb-rebalance-num-iterations
        --eplb-rebalance-layers-per-chunk --eplb-min-rebalancing-utilization-threshold
        --deepep-config --elastic-ep-backend --enable-elastic-expert-backup
        --mooncake-ib-device --enable-waterfill --elastic-ep-join-mode
        --elastic-ep-join-rank-offset --elastic-ep-initial-size --max-ep-size
        --elastic-ep-scale-timeout --disable-flashinfer-cutlass-moe-fp4-allgather
        --disable-shared-experts-fusion --enforce-shared-experts-fusion
        --flashinfer-a2a-dispatch-type
    """,
    "speculative decoding (the decode side)": """
        --speculative-algorithm --uno-lora-path --speculative-draft-model-path
        --speculative-draft-model --speculative-draft-model-revision
        --speculative-draft-load-format --speculative-num-steps --speculative-eagle-topk
        --speculative-num-draft-tokens --speculative-dflash-block-size
        --speculative-dspark-block-size --speculative-dspark-sps-table-path
        --speculative-dspark-confidence-sts-path
        --speculative-dspark-align-verify-tokens-to-graph-tier
        --speculative-accept-threshold-single --speculative-accept-threshold-acc
        --speculative-use-rejection-sampling --speculative-token-map
        --speculative-attention-mode --speculative-draft-attention-backend
        --speculative-dsa-topk-backend --speculative-draft-kv-cache-dtype
        --speculative-draft-window-size --speculative-moe-runner-backend
        --speculative-moe-a2a-backend --speculative-enable-w4a4-mxfp4-megamoe
        --no-speculative-enable-w4a4-mxfp4-megamoe --speculative-draft-model-quantization
        --enable-multi-layer-eagle --speculative-adaptive --speculative-adaptive-config
        --decoupled-spec-bind-endpoint --decoupled-spec-connect-endpoints
        --decoupled-spec-rank --decoupled-spec-role --speculative-ngram-min-bfs-breadth
        --speculative-ngram-max-bfs-breadth --speculative-ngram-match-type
        --speculative-ngram-max-trie-depth --speculative-ngram-capacity
        --speculative-ngram-external-corpus-path --speculative-ngram-external-sam-budget
        --speculative-ngram-external-corpus-max-tokens
        --speculative-domino-candidate-pool-size --speculative-use-block-verification
        --speculative-draft-sink-size --enable-draft-weights-cpu-backup
    """,
    "multimodal inputs and encoders (a trace gives token counts)": """
        --enable-multimodal --mm-attention-backend --enable-broadcast-mm-inputs-process
        --enable-prefix-mm-cache --mm-enable-dp-encoder --no-mm-enable-dp-encoder
        --mm-process-config --mm-processor-worker-num --mm-io-worker-num
        --allowed-media-domains --media-url-max-file-size-mb --mm-preprocess-cache-size-mb
        --trust-mm-content-hashes --limit-mm-data-per-request --enable-mm-global-cache
        --image-processor-backend --mm-global-cache-backend --disable-fast-image-processor
        --mm-feature-transport --language-only --language-model-only
        --encoder-transfer-backend --encoder-urls --encoder-bootstrap-port
        --encoder-register-urls --enable-adaptive-dispatch-to-encoder
    """,
    "Mamba, sliding-window, linear-attention and other model families' layers (none in "
    "the models prefillkit simulates)": """
        --c128-page-size --swa-full-tokens-ratio --disable-hybrid-swa-memory
        --enable-page-major-kv-layout --enable-unified-memory --max-mamba-cache-size
        --mamba-ssm-dtype --mamba-max-states-per-path --enable-mamba-cache-stochastic-rounding
        --mamba-cache-philox-rounds --mamba-full-memory-ratio --mamba-radix-cache-strategy
        --mamba-track-interval --enable-int8-mamba-checkpoint --int8-mamba-ckpt-size
        --mamba-backend --linear-attn-backend --linear-attn-decode-backend
        --linear-attn-prefill-backend --linear-attn-verify-backend --enable-linear-replayssm
        --linear-replayssm-cache-len --enable-linear-replayssm-spec --swa-prefix-tails
        --enable-encoder-swa-bounded-replay --enable-decoder-swa-bounded-replay
        --no-enable-decoder-swa-bounded-replay --qsa-indexer-dtype --ple-offload-embedding
        --no-ple-offload-embedding --ple-offload-backend --ple-offload-dir
    """,
    "PD transfer and the decode server (prefillkit simulates the prefill side)": """
        --disaggregation-transfer-backend --disaggregation-bootstrap-port
        --disaggregation-ib-device --disaggregation-decode-enable-radix-cache
        --disaggregation-decode-enable-offload-kvcache
        --disaggregation-decode-retraction-backup --num-reserved-decode-tokens
        --disaggregation-decode-extra-slots --disaggregation-decode-polling-interval
        --optimistic-prefill-attempts --disaggregation-enable-kv-checksum
        --enable-pd-role-switch --disaggregation-decode-host-receive-threshold
        --disaggregation-decode-allocation-policy --enable-linker-mla-dedup
    """,
    "HiCache transfer and host-memory details (the host tier's size and write policy are "
    "modelled)": """
        --hicache-io-backend --hicache-mem-layout --hicache-host-memory-fraction
    """,
    "scheduler-loop timing (overlap, polling, consecutive decode steps)": """
        --disable-overlap-schedule --num-continuous-decode-steps --scheduler-recv-interval
        --sleep-on-idle
    """,
    "processes, devices, ports, distributed init and memory release": """
        --nccl-port --dist-timeout --dist-init-addr --nccl-init-addr --gated-launch-port
        --nnodes --node-rank --device --base-gpu-id --gpu-id-step --numa-node --gc-threshold
        --use-ray --enable-memory-saver --enable-weights-cpu-backup
    """,
    "options of a feature that is off or refused (pipeline and decode-context "
    "parallelism, LoRA, storage tiers, offloading, the prefill delayer, ...): no effect "
    "without it": """
        --pp-max-micro-batch-size --pp-async-batch-depth
        --dcp-comm-backend --dcp-replicate-q-proj --no-dcp-replicate-q-proj
        --enable-dynamic-chunking
        --radix-eviction-policy-config --prefill-only-disable-kv-cache
        --hicache-storage-prefetch-policy --hicache-storage-backend-extra-config
        --hicache-storage-prefetch-retry-poll-interval
        --hicache-storage-prefetch-retry-max-attempts --unified-cache-external-linker-backend
        --unified-cache-external-linker-config --hisparse-config
        --hierarchical-sparse-attention-extra-config --enable-lora-overlap-loading
        --max-lora-rank --lora-target-modules --max-loaded-loras --max-loras-per-batch
        --lora-eviction-policy --lora-backend --max-lora-chunk-size
        --experts-shared-outer-loras --no-experts-shared-outer-loras
        --lora-use-virtual-experts --lora-strict-loading --no-lora-strict-loading
        --lora-drain-wait-threshold --offload-num-in-group --offload-prefetch-step
        --offload-mode --lmcache-config-file --flexkv-config-file --kt-method --kt-cpuinfer
        --kt-threadpool-count --kt-num-gpu-experts --kt-max-deferred-experts-per-token
        --dllm-algorithm-config --dllm-fdfo --no-dllm-fdfo --pdmux-config-path
        --sm-group-num --prefill-delayer-max-delay-passes
        --prefill-delayer-token-usage-low-watermark --prefill-delayer-forward-passes-buckets
        --prefill-delayer-wait-seconds-buckets --prefill-delayer-max-delay-ms
        --prefill-decode-interval-min-bs --paged-experts-num-resident
    """,
}

LegacyKind = Literal["modelled", "ignored", "refused"]

#: Spellings SGLang 0.5.23 does not register that pasted lines carry: flag -> (kind,
#: what it means / why it is refused / its theme, argparse nargs, SGLang's default).
#: Older releases' flags, and abbreviations 0.5.23's argparse expands (``--tp`` is
#: ``--tp-size``'s; ``--dp`` ``--dp-size``'s).
LEGACY: dict[str, tuple[LegacyKind, str, int | str | None, object]] = {
    "--tp": ("modelled", "--tp-size (an abbreviation SGLang's argparse expands)", None, 1),
    "--enable-ep-moe": (
        "modelled",
        "--ep-size = the line's --tp-size (SGLang before 0.5)",
        0,
        False,
    ),
    "--dp": ("modelled", "--dp-size (an abbreviation SGLang's argparse expands)", None, 1),
    "--cuda-graph-max-bs": ("ignored", "CUDA graphs (SGLang before 0.5.23)", None, None),
    "--cuda-graph-bs": ("ignored", "CUDA graphs (SGLang before 0.5.23)", "+", None),
    "--stream-output": ("ignored", "HTTP server (SGLang before 0.5.23)", 0, False),
}
