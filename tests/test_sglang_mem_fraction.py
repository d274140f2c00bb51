"""A launch line without ``--mem-fraction-static`` gets SGLang 0.5.23's GPU-dependent default.

Every expected figure is SGLang's own arithmetic, spelled out with numbers, from
``sglang/srt/arg_groups/memory_hook.py`` (0.5.23 wheel), ``handle_gpu_memory_settings``::

    :305  activation_tokens = max(cfg.chunked_prefill_size, 2048)
    :309  reserved_mem = 512
    :310  reserved_mem += activation_tokens * 1.5
    :312  reserved_mem += cfg.tp_size * cfg.pp_size / 8 * 1024
    :313  reserved_mem += reserve_for_graph_mb(server_args)
    :314  if gpu_mem is not None and gpu_mem > 60 * 1024:
    :315      reserved_mem = max(reserved_mem, 10 * 1024)
    :317  reserved_mem += reserve_for_deepep_a2a_mb(server_args)
    :325  round((gpu_mem - reserved_mem) / gpu_mem, 3)

with ``reserve_for_graph_mb`` (:368 ``decode max_bs * 2``; :386 ``len(prefill bs) * 8``, or
:389 ``1.5 * 1024`` for an MLA model), the decode graph's ``max_bs`` from :132-170 (256 at
TP < 4 and 512 at TP >= 4 below 160 GiB, 512 from 160 GiB) and the prefill buckets of
``cuda_graph_hook.py:480-497``.

Units: SGLang's ``gpu_mem`` and reserves are MiB (2**20 bytes, ``nvidia-smi`` memory.total);
prefillkit's GPU presets and ``--device-memory-gb`` are bytes (GB = 1e9), so
``gpu_mem = bytes / 2**20`` (H100 80 GB = 76,293.9 MiB, H20 96 GB = 91,552.7 MiB, H200
141 GB = 134,468.1 MiB, B200 180 GB = 171,661.4 MiB).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prefillkit.app.launch import build_config
from prefillkit.app.settings import ConfigError
from prefillkit.app.sglang_memory import (
    sglang_decode_graph_max_bs,
    sglang_mem_fraction_default,
    sglang_prefill_graph_buckets,
    sglang_reserved_mib,
)
from prefillkit.sim.sizing import resolve_deployment

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

MIB = 2**20
H100, H20, H200, B200 = 80e9, 96e9, 141e9, 180e9  # bytes (the GPU presets' memory_bytes)

# cuda_graph_hook.py:486-495, counted by hand: 4..32 by 4 (8), 48..256 by 16 (14),
# 288..512 by 32 (8), 576..1024 by 64 (8), 1280..4096 by 256 (12), 4608.. by 512.
BUCKETS_8K = 8 + 14 + 8 + 8 + 12 + 8  # 4608..8192: 8 -> 58
BUCKETS_16K = 8 + 14 + 8 + 8 + 12 + 24  # 4608..16384: 24 -> 74


def fraction(gpu_bytes: float, reserved_mib: float) -> float:
    """memory_hook.py:325, with gpu_mem in MiB."""
    gpu_mib = gpu_bytes / MIB
    return round((gpu_mib - reserved_mib) / gpu_mib, 3)


def test_prefill_bucket_counts_by_hand() -> None:
    assert (BUCKETS_8K, BUCKETS_16K) == (58, 74)
    assert sglang_prefill_graph_buckets(8192) == BUCKETS_8K
    assert sglang_prefill_graph_buckets(16384) == BUCKETS_16K
    assert sglang_prefill_graph_buckets(4096) == 8 + 14 + 8 + 8 + 12  # 50
    assert sglang_prefill_graph_buckets(2048) == 8 + 14 + 8 + 8 + 4  # 1280..2048: 42
    assert sglang_prefill_graph_buckets(-1) == 0  # chunking off: max_bs = -1


@pytest.mark.parametrize(
    ("gib", "tp", "max_bs"),
    [(16, 1, 8), (24, 1, 48), (24, 4, 160), (48, 1, 32), (48, 8, 160), (80, 1, 256),
     (80, 8, 512), (141, 3, 256), (141, 4, 512), (180, 1, 512), (180, 8, 512)],
)  # fmt: skip
def test_decode_graph_max_bs_bands(gib: int, tp: int, max_bs: int) -> None:
    # memory_hook.py:89-170: by gpu_mem (MiB) bands 20/35/60/90/160 GiB and `tp_size < 4`
    assert sglang_decode_graph_max_bs(gib * 1024, tp) == max_bs
    # :182-188: a smaller --max-running-requests caps the default max_bs
    assert sglang_decode_graph_max_bs(gib * 1024, tp, max_running_requests=4) == min(4, max_bs)


# (GPU bytes, chunk (SGLang's GPU default), tp, MLA, reserved MiB spelled out, fraction).
# reserved = 512 + max(chunk, 2048) * 1.5 + tp * 1 / 8 * 1024 + graph, graph =
# decode max_bs * 2 + (MLA: 1.5 * 1024, else prefill buckets * 8); no 10 GiB floor applies.
POINTS = [
    # H100 80 GB = 76,293.9 MiB: 60-90 GiB band, chunk 8192, max_bs 256 (tp 1) / 512 (tp 8)
    (H100, 8192, 1, False, 512 + 8192 * 1.5 + 1 / 8 * 1024 + 256 * 2 + BUCKETS_8K * 8, 0.818),
    (H100, 8192, 8, False, 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + BUCKETS_8K * 8, 0.799),
    (H100, 8192, 8, True, 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + 1.5 * 1024, 0.785),
    # H20 96 GB = 91,552.7 MiB (< 90 GiB: the H100 band; a 97,871 MiB board is the H200
    # band, which has the same chunk and max_bs)
    (H20, 8192, 1, False, 512 + 8192 * 1.5 + 1 / 8 * 1024 + 256 * 2 + BUCKETS_8K * 8, 0.848),
    (H20, 8192, 8, False, 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + BUCKETS_8K * 8, 0.833),
    (H20, 8192, 8, True, 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + 1.5 * 1024, 0.821),
    # H200 141 GB = 134,468.1 MiB: 90-160 GiB band, chunk 8192, max_bs 256 / 512
    (H200, 8192, 1, False, 512 + 8192 * 1.5 + 1 / 8 * 1024 + 256 * 2 + BUCKETS_8K * 8, 0.897),
    (H200, 8192, 8, False, 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + BUCKETS_8K * 8, 0.886),
    (H200, 8192, 1, True, 512 + 8192 * 1.5 + 1 / 8 * 1024 + 256 * 2 + 1.5 * 1024, 0.889),
    (H200, 8192, 8, True, 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2 + 1.5 * 1024, 0.878),
    # B200 180 GB = 171,661.4 MiB: >= 160 GiB, chunk 16384, max_bs 512 at any TP
    (B200, 16384, 1, False, 512 + 16384 * 1.5 + 1 / 8 * 1024 + 512 * 2 + BUCKETS_16K * 8, 0.844),
    (B200, 16384, 8, False, 512 + 16384 * 1.5 + 8 / 8 * 1024 + 512 * 2 + BUCKETS_16K * 8, 0.838),
    (B200, 16384, 8, True, 512 + 16384 * 1.5 + 8 / 8 * 1024 + 512 * 2 + 1.5 * 1024, 0.833),
]


@pytest.mark.parametrize(("gpu", "chunk", "tp", "mla", "reserved", "expected"), POINTS)
def test_fraction_per_gpu_and_tp_by_hand(
    gpu: float, chunk: int, tp: int, mla: bool, reserved: float, expected: float
) -> None:
    assert reserved > 10 * 1024  # the :315 floor does not bind
    assert fraction(gpu, reserved) == expected
    assert sglang_reserved_mib(gpu / MIB, chunked_prefill_size=chunk, tp_size=tp, mla=mla) == (
        reserved
    )
    got = sglang_mem_fraction_default(gpu, chunked_prefill_size=chunk, tp_size=tp, mla=mla)
    assert got == expected


def test_h200_deepseek_tp8_spelled_out() -> None:
    # 512 + 12,288 + 1,024 + (1,024 + 1,536) = 16,384 MiB of 134,468.1 MiB
    reserved = 512 + max(8192, 2048) * 1.5 + 8 * 1 / 8 * 1024 + (512 * 2 + 1.5 * 1024)
    assert reserved == 16_384
    assert round((141e9 / 2**20 - reserved) / (141e9 / 2**20), 3) == 0.878


def test_small_chunk_hits_the_10_gib_floor() -> None:
    # 512 + 2048 * 1.5 + 128 + 256 * 2 + 42 * 8 = 4,560 MiB < 10,240: :315 raises it
    raw = 512 + 2048 * 1.5 + 1 / 8 * 1024 + 256 * 2 + 42 * 8
    assert raw == 4560
    assert sglang_reserved_mib(H200 / MIB, chunked_prefill_size=2048, tp_size=1, mla=False) == (
        10 * 1024
    )
    got = sglang_mem_fraction_default(H200, chunked_prefill_size=2048, tp_size=1, mla=False)
    assert got == fraction(H200, 10 * 1024) == 0.924
    # below 60 GiB there is no floor: 40 GB = 38,147 MiB, chunk 4096, max_bs 32, 50 buckets
    small = 512 + 4096 * 1.5 + 1 / 8 * 1024 + 32 * 2 + 50 * 8
    got = sglang_mem_fraction_default(40e9, chunked_prefill_size=4096, tp_size=1, mla=False)
    assert small == 7248 and got == fraction(40e9, small) == 0.81


def test_pd_prefill_drops_the_decode_graph_and_deepep_reserves() -> None:
    # cuda_graph_hook.py:557-567 disables the decode graph of a prefill server; :365 and
    # :409 skip its reserve and DeepEP's: 512 + 12,288 + 1,024 + 1,536 = 15,360 MiB
    got = sglang_mem_fraction_default(
        H200, chunked_prefill_size=8192, tp_size=8, mla=True, pd_prefill=True, deepep=True
    )
    # DeepEP still adds the breakable prefill graph's 1,024 (:391-397)
    assert got == fraction(H200, 512 + 8192 * 1.5 + 1024 + 1.5 * 1024 + 1024) == 0.878
    got = sglang_mem_fraction_default(
        H200, chunked_prefill_size=8192, tp_size=8, mla=True, pd_prefill=True
    )
    assert got == fraction(H200, 512 + 8192 * 1.5 + 1024 + 1.5 * 1024) == 0.886


def test_deepep_adds_after_the_floor() -> None:
    # colocated: + 1,024 (BCG + DeepEP, inside the graph reserve) + 2,048 (:317, after :315)
    reserved = 512 + 8192 * 1.5 + 1024 + 512 * 2 + 1.5 * 1024 + 1024 + 2048
    got = sglang_mem_fraction_default(
        H200, chunked_prefill_size=8192, tp_size=8, mla=True, deepep=True
    )
    assert got == fraction(H200, reserved) == 0.855


def test_chunking_off_sizes_activations_by_max_prefill_tokens() -> None:
    # :307 max(cfg.max_prefill_tokens, 2048) = 16,384; prefill max_bs -1: no bucket
    reserved = 512 + 16384 * 1.5 + 1 / 8 * 1024 + 256 * 2 + 0 * 8
    got = sglang_mem_fraction_default(H200, chunked_prefill_size=None, tp_size=1, mla=False)
    assert got == fraction(H200, reserved) == 0.809


# --------------------------------------------------------------------------- the launch line

DEEPSEEK_H200 = ["--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8", "--gpu", "h200"]


def test_deepseek_line_gets_sglangs_fraction() -> None:
    resolved = build_config(None, DEEPSEEK_H200)
    assert resolved.config.mem_fraction_static == 0.878  # test_h200_deepseek_tp8_spelled_out
    assert resolved.sources["mem_fraction_static"] == "SGLang default"
    same = build_config(None, ["--model", "deepseek-v3", "--tp", "8", "--gpu", "h200"])
    assert same.config.mem_fraction_static == 0.878


def test_explicit_fraction_wins(tmp_path: Path) -> None:
    resolved = build_config(None, [*DEEPSEEK_H200, "--mem-fraction-static", "0.8"])
    assert resolved.config.mem_fraction_static == 0.8
    assert resolved.sources["mem_fraction_static"] == "line"
    toml = tmp_path / "c.toml"
    toml.write_text("mem_fraction_static = 0.83\n")
    resolved = build_config(toml, DEEPSEEK_H200)
    assert resolved.config.mem_fraction_static == 0.83
    assert resolved.sources["mem_fraction_static"] == "file"


def test_presets_keep_their_fraction() -> None:
    for resolved in (
        build_config(None, [], preset="demo"),
        build_config(None, []),  # the implied demo
        build_config(None, ["--tp", "4"], preset="demo"),
    ):
        assert resolved.config.mem_fraction_static == 0.88
        assert "mem_fraction_static" not in resolved.sources
    # The seed line states its fraction (cost/validation.py SEED_DEPLOYMENT: SGLang's
    # default for its 64 K chunk, 0.25, would not hold GLM-5's weights).
    seed = build_config(None, [], preset="seed")
    assert seed.config.mem_fraction_static == 0.88
    assert seed.sources["mem_fraction_static"] == "preset seed"


def test_line_chunk_and_settings_enter_the_fraction() -> None:
    def got(*flags: str) -> float:
        return build_config(None, ["--model", "llama-3.1-8b", *flags]).config.mem_fraction_static

    base = 512 + 1 / 8 * 1024  # tp 1
    # the line's chunk: 2048 -> 42 buckets, under the 10 GiB floor on an H200
    assert got("--chunked-prefill-size", "2048") == fraction(H200, 10 * 1024)
    # --device-memory-gb 40: 38,147 MiB, chunk 4096, max_bs 32, 50 buckets
    assert got("--device-memory-gb", "40") == fraction(40e9, base + 6144 + 64 + 400)
    # prefill server: no decode graph (cuda_graph_hook.py:557-567)
    pd = got("--disaggregation-mode", "prefill")
    assert pd == fraction(H200, base + 12288 + BUCKETS_8K * 8)
    # --disable-cuda-graph: neither graph (cuda_graph_hook.py:55-57)
    assert got("--disable-cuda-graph") == fraction(H200, base + 12288)
    # CP > 1 (no --enable-prefill-cp) and two-batch overlap turn off the prefill graph
    # (cuda_graph_hook.py:204-221); TP 8 here
    cp = fraction(H200, 512 + 1024 + 12288 + 512 * 2)
    assert got("--tp", "8", "--attn-cp-size", "8") == cp
    assert got("--tp", "8", "--enable-two-batch-overlap") == cp
    # --max-running-requests caps the decode graph's max_bs (memory_hook.py:182-188)
    assert got("--max-running-requests", "64") == fraction(
        H200, base + 12288 + 64 * 2 + BUCKETS_8K * 8
    )


def test_unknown_gpu_or_model_leaves_the_config_default() -> None:
    resolved = build_config(None, ["--model", "llama-3.1-8b", "--gpu", "nope"])
    assert resolved.config.mem_fraction_static == 0.88
    assert "mem_fraction_static" not in resolved.sources
    with pytest.raises(ConfigError):  # the model's own error, not the fraction's
        build_config(None, ["--model", "nope", "--gpu", "h200"])


def test_memory_below_sglangs_reserve_is_refused(tmp_path: Path) -> None:
    # 2 GB = 1,907 MiB < 512 + 3,072 + 128 + 8 * 2 + 42 * 8 = 4,064 MiB reserved
    line = ["--model", "llama-3.1-8b", "--device-memory-gb", "2"]
    with pytest.raises(ConfigError, match=r"^--device-memory-gb: 2 GB \(1,907 MiB\) leaves"):
        build_config(None, line)
    toml = tmp_path / "c.toml"
    toml.write_text("device_memory_gb = 2\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(toml))}: --device-memory-gb: 2 GB"):
        build_config(toml, ["--model", "llama-3.1-8b"])
    cfg = build_config(None, [*line, "--mem-fraction-static", "0.9"]).config
    assert cfg.mem_fraction_static == 0.9  # an explicit fraction is taken as given


def test_infinite_memory_is_left_to_the_runs_own_check(tmp_path: Path) -> None:
    # 1e300 GB is inf bytes: no fraction (it would be nan), the run names the setting
    toml = tmp_path / "c.toml"
    toml.write_text("device_memory_gb = 1e300\n")
    resolved = build_config(toml, ["--model", "llama-3.1-8b"])
    assert resolved.config.mem_fraction_static == 0.88
    assert "mem_fraction_static" not in resolved.sources


# --------------------------------------------------------------------------- the KV pool

# SGLang sizes the pool (mem_cache/kv_cache_configurator.py:2990-3060 and
# model_executor/pool_configurator.py:637-647) as
#     rest_memory = available_after_weights - pre_model_load_memory * (1 - fraction)   (GiB)
#     tokens = int(rest_memory * 2**30) // cell_size // page_size * page_size
# with pre_model_load_memory the free memory measured at start-up. prefillkit takes the
# GPU's whole memory for it, and available_after_weights = memory - weights:
#     tokens per GPU = (memory_bytes * fraction - weights_bytes / tp) // kv_bytes_per_rank
FAMILY_LINES = [
    # Llama-3.1-8B bf16 (16.06 GB), 1 x H100: GQA tp 1 -> 0.818; 32 layers x 2 x 8 KV heads
    # x 128 x 2 bytes = 131,072 bytes per token
    (["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100"],
     H100, 0.818, 16.06e9, 32 * 2 * 8 * 128 * 2),
    # Qwen2.5-7B bf16 (15.24 GB), 1 x H20: GQA tp 1 -> 0.848; 28 x 2 x 4 x 128 x 2 = 57,344
    (["--model", "qwen2.5-7b", "--gpu", "h20"],
     H20, 0.848, 15.24e9, 28 * 2 * 4 * 128 * 2),
    # Qwen3-235B-A22B FP8 (235.1 GB), 8 x H200: GQA tp 8 -> 0.886; 4 KV heads over 8 ranks:
    # max(1, 4 // 8) = 1 head per rank, 94 x 2 x 1 x 128 x 2 = 48,128
    (["--model", "qwen3-235b-a22b", "--tp", "8", "--gpu", "h200"],
     H200, 0.886, 235.1e9 / 8, 94 * 2 * 1 * 128 * 2),
    # DeepSeek-V3 FP8 (671 GB), 8 x H200: MLA tp 8 -> 0.878; latent (512 + 64) x 2 bytes
    # x 61 layers = 70,272, whole on every rank
    (DEEPSEEK_H200, H200, 0.878, 671e9 / 8, 61 * (512 + 64) * 2),
    # GLM-5 FP8 (744 GB), 8 x B200: MLA tp 8 -> 0.833; 78 x ((512 + 64) x 2 + 128 + 4):
    # the latent plus the DSA indexer key (128 fp8 bytes + a 4-byte scale) = 100,152
    (["--model-path", "zai-org/GLM-5-FP8", "--tp", "8", "--gpu", "b200"],
     B200, 0.833, 744e9 / 8, 78 * ((512 + 64) * 2 + 128 + 4)),
]  # fmt: skip


@pytest.mark.parametrize(("line", "memory", "frac", "weights", "per_token"), FAMILY_LINES)
def test_pool_per_model_family_is_sglangs_arithmetic(
    line: list[str], memory: float, frac: float, weights: float, per_token: int
) -> None:
    cfg = build_config(None, line).config
    assert cfg.mem_fraction_static == frac
    assert cfg.sim_settings().kv_bytes_per_token_per_rank == per_token
    tokens = int((memory * frac - weights) // per_token)  # page 1, one KV lane
    assert resolve_deployment(cfg.sim_settings(), []).total_pages == tokens
    assert cfg.sim_settings().total_pages(weights, memory / 1e9) == tokens


def test_pool_figures_by_hand() -> None:
    # DeepSeek-V3 on 8 x H200: 141e9 x 0.878 = 123.798 GB, less 83.875 GB of weights =
    # 39.923 GB of KV -> 568,121 tokens per GPU (at the old 0.88: 572,133)
    cfg = build_config(None, DEEPSEEK_H200).config
    assert resolve_deployment(cfg.sim_settings(), []).total_pages == 568_121
    assert int((141e9 * 0.88 - 83.875e9) // 70_272) == 572_133
