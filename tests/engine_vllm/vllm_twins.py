"""Building vLLM 0.34's v1 scheduler on CPU and driving it step by step (the tests of
tests/engine_vllm). Written for these tests after reading how vLLM's own scheduler tests
build one (``tests/v1/core/utils.py``): a tiny local model config (no download, no
tokenizer), a CPU device config, a KV cache of ``num_blocks`` blocks of one layer."""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

EOS = 2
#: A two-layer OPT-shaped config: vLLM inspects the architecture, never loads weights.
TINY_CONFIG = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "ffn_dim": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 8192,
    "word_embed_proj_dim": 64,
    "torch_dtype": "float16",
    "do_layer_norm_before": True,
    "eos_token_id": EOS,
    "bos_token_id": EOS,
    "pad_token_id": 1,
}
_MODEL_DIR: Path | None = None


def model_dir() -> Path:
    global _MODEL_DIR
    if _MODEL_DIR is None:
        _MODEL_DIR = Path(tempfile.mkdtemp(prefix="prefillkit-vllm-model-"))
        (_MODEL_DIR / "config.json").write_text(json.dumps(TINY_CONFIG))
    return _MODEL_DIR


def build(
    cls: type[Any],
    *,
    num_blocks: int = 10_000,
    block_size: int = 16,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 512,
    scheduler_cls: str | None = None,
) -> Any:
    """A scheduler of class ``cls`` (or the class ``scheduler_cls`` resolves to)."""
    sc = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=8192,
        enable_chunked_prefill=True,
        async_scheduling=True,
        is_encoder_decoder=False,
        scheduler_cls=scheduler_cls,
    )
    mc = ModelConfig(model=str(model_dir()), dtype="float16", seed=0, skip_tokenizer_init=True)
    cc = CacheConfig(block_size=block_size, cache_dtype="auto", enable_prefix_caching=True)
    vc = VllmConfig(
        scheduler_config=sc, model_config=mc, cache_config=cc, device_config=DeviceConfig("cpu")
    )
    spec = FullAttentionSpec(block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kvc = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    cc.num_gpu_blocks = num_blocks
    if scheduler_cls is not None:
        cls = sc.get_scheduler_cls()
    return cls(
        vllm_config=vc,
        kv_cache_config=kvc,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=block_size,
        log_stats=True,
    )


_HASH_READY = False


@dataclass(frozen=True, slots=True)
class Spec:
    """One request of a stream: its id, prompt, output budget and arrival (step, time)."""

    rid: str
    prompt: tuple[int, ...]
    max_tokens: int
    step: int
    arrival: float
    session: str | None = None


def make_request(s: Spec, block_size: int = 16) -> Request:
    global _HASH_READY
    if not _HASH_READY:
        init_none_hash(sha256)
        _HASH_READY = True
    return Request(
        request_id=s.rid,
        prompt_token_ids=list(s.prompt),
        sampling_params=SamplingParams(ignore_eos=True, max_tokens=s.max_tokens),
        pooling_params=None,
        arrival_time=s.arrival,
        block_hasher=get_request_block_hasher(block_size, sha256),
        session_id=s.session,
    )


def random_stream(seed: int, n: int = 40, steps: int = 30) -> list[Spec]:
    """Requests sharing a few prefixes (``families``), of 20-400 tokens, arriving over
    ``steps`` steps (several at one step), with 1-24 output tokens."""
    rng = random.Random(seed)
    families = [[rng.randrange(3, 1000) for _ in range(rng.randint(16, 200))] for _ in range(4)]
    out = []
    for i in range(n):
        base = rng.choice(families) if rng.random() < 0.75 else []
        cut = rng.randint(0, len(base)) if base else 0
        tail = [rng.randrange(3, 1000) for _ in range(rng.randint(4, 200))]
        step = rng.randrange(steps)
        prompt = tuple(base[:cut] + tail)
        out.append(Spec(f"r{i}", prompt, rng.randint(1, 24), step, step + i * 1e-3, f"s{i % 7}"))
    return sorted(out, key=lambda s: (s.step, s.arrival))


def runner_output(out: SchedulerOutput) -> ModelRunnerOutput:
    """One sampled token for every scheduled request (vLLM discards the ones of a
    request still mid-prefill)."""
    rids = list(out.num_scheduled_tokens)
    return ModelRunnerOutput(req_ids=rids, sampled_token_ids=[[7] for _ in rids])


def summary(out: SchedulerOutput) -> tuple[Any, ...]:
    """Everything a step decided, as plain values (ids, token counts, block ids)."""
    new = [
        (r.req_id, r.num_computed_tokens, tuple(map(tuple, r.block_ids)))
        for r in out.scheduled_new_reqs
    ]
    c = out.scheduled_cached_reqs
    cached = (
        tuple(c.req_ids),
        tuple(c.num_computed_tokens),
        tuple(None if b is None else tuple(map(tuple, b)) for b in c.new_block_ids),
    )
    return (
        tuple(new),
        cached,
        tuple(sorted(out.num_scheduled_tokens.items())),
        out.total_num_scheduled_tokens,
        tuple(sorted(out.finished_req_ids)),
        tuple(sorted(out.preempted_req_ids or ())),
    )


def drive(
    sched: Any, stream: Sequence[Spec], *, max_steps: int = 400, clock: list[float] | None = None
) -> Iterator[tuple[int, SchedulerOutput]]:
    """Run ``stream`` through ``sched``: at step k the requests of step k arrive, then one
    ``schedule`` and its ``update_from_output``. Yields every step's output. ``clock``:
    a one-element list the caller's clock reads (set to the step number)."""
    pending = list(stream)
    for k in range(max_steps):
        if clock is not None:
            clock[0] = float(k)
        while pending and pending[0].step <= k:
            sched.add_request(make_request(pending.pop(0)))
        out = sched.schedule()
        yield k, out
        sched.update_from_output(out, runner_output(out))
        if not pending and sched.get_num_unfinished_requests() == 0:
            return
    raise AssertionError(f"stream not finished in {max_steps} steps")
