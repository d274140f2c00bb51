"""Tests for prefillkit.app.settings and the configs it builds: defaults, normalisation,
loading, flags, refusals, memory math."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from prefillkit.app.settings import (
    Config,
    ConfigError,
    ParsedFlags,
    describe,
    field_flag,
    knob_table,
    parse_flags,
)
from prefillkit.models import MODELS, get_model

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

# A CP shared-KV bs>1 base that the CP refusal tests extend.
CP_BS_GT1: dict[str, Any] = {
    "tp_size": 8,
    "cp_size": 8,
    "enable_cp_shared_kv": True,
    "enable_cp_shared_kv_prefill_bs_gt1": True,
}


def _refuse(flag: str, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        Config(**kwargs)
    message = str(info.value)
    assert flag in message, message
    assert "\n" not in message
    return message


# --------------------------------------------------------------------- defaults / resolution


def test_defaults_valid() -> None:
    cfg = Config()
    assert cfg.page_size == 1
    assert cfg.chunked_prefill_size == 8192
    assert cfg.scheduler_config().chunking_enabled
    assert not cfg.enable_hierarchical_cache
    assert cfg.schedule_policy == "fcfs"
    assert cfg.model_spec is get_model("glm-5")
    assert (
        cfg.sim_settings().resolved_kv_bytes_per_token == get_model("glm-5").kv_bytes_per_token_bf16
    )
    assert cfg.lpm_fallback_queue_len is None  # off: LPM stays affordable on long queues
    assert isinstance(ConfigError("x"), ValueError)


def test_frozen() -> None:
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.page_size = 4  # type: ignore[misc]


def test_page_size_resolution() -> None:
    assert Config().page_size == 1
    assert Config(tp_size=8, cp_size=8).page_size == 64
    assert Config(tp_size=8, cp_size=8).resolved_page_size == 64
    assert Config(tp_size=8, cp_size=8, page_size=32).page_size == 32
    assert Config(page_size=16).page_size == 16
    # replace keeps the resolved value; page_size=None re-resolves.
    cp = dataclasses.replace(Config(), tp_size=2, cp_size=2, page_size=None)
    assert cp.page_size == 64


def test_normalisations() -> None:
    cfg = Config(
        chunked_prefill_size=-1,
        lpm_fallback_queue_len=-1,
        model="GLM-5",
        kv_cache_dtype="bfloat16",
        mem_fraction_static=1,
    )
    assert cfg.chunked_prefill_size is None
    assert not cfg.scheduler_config().chunking_enabled
    assert cfg.lpm_fallback_queue_len is None
    assert cfg.model == "glm-5"
    assert cfg.kv_cache_dtype == "bf16"
    assert isinstance(cfg.mem_fraction_static, float)
    assert Config(chunked_prefill_size=None).chunked_prefill_size is None


def test_kv_bytes_override_and_dtype() -> None:
    spec = get_model("glm-5")
    assert Config(kv_cache_dtype="fp8_e4m3").sim_settings().resolved_kv_bytes_per_token == (
        spec.kv_bytes_per_token_fp8
    )
    assert (
        Config(kv_cache_dtype="auto").sim_settings().resolved_kv_bytes_per_token
        == spec.kv_bytes_per_token_bf16
    )
    assert Config(kv_bytes_per_token=1234).sim_settings().resolved_kv_bytes_per_token == 1234


def test_replace_revalidates() -> None:
    with pytest.raises(ConfigError, match="--page-size"):
        dataclasses.replace(Config(), page_size=0)


# --------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("flag", "kwargs"),
    [
        ("--page-size", {"page_size": 0}),
        ("--page-size", {"page_size": -64}),
        ("--max-total-tokens", {"max_total_tokens": 0}),
        ("--kv-bytes-per-token", {"kv_bytes_per_token": -1}),
        ("--mem-fraction-static", {"mem_fraction_static": 0.0}),
        ("--mem-fraction-static", {"mem_fraction_static": 1.2}),
        ("--device-memory-gb", {"device_memory_gb": 0}),
        ("--max-prefill-tokens", {"max_prefill_tokens": 0}),
        ("--chunked-prefill-size", {"chunked_prefill_size": 0}),
        ("--chunked-prefill-size", {"chunked_prefill_size": -2}),
        ("--max-running-requests", {"max_running_requests": 0}),
        ("--lpm-fallback-queue-len", {"lpm_fallback_queue_len": -5}),
        ("--schedule-conservativeness", {"schedule_conservativeness": 0}),
        ("--init-new-token-ratio", {"init_new_token_ratio": 1.5}),
        ("--min-new-token-ratio-factor", {"min_new_token_ratio_factor": -0.1}),
        ("--new-token-ratio-decay-steps", {"new_token_ratio_decay_steps": 0}),
        ("--clip-max-new-tokens", {"clip_max_new_tokens": 0}),
        (
            "--priority-scheduling-preemption-threshold",
            {"priority_scheduling_preemption_threshold": -1},
        ),
        ("--hicache-ratio", {"hicache_ratio": 0}),
        ("--hicache-size", {"hicache_size": -1}),
        ("--hicache-write-through-threshold", {"hicache_write_through_threshold": 0}),
        ("--hicache-load-back-threshold", {"hicache_load_back_threshold": -1}),
        ("--tp-size", {"tp_size": 0}),
        ("--cp-size", {"cp_size": 0}),
        (
            "--cp-shared-kv-prefill-max-requests",
            {**CP_BS_GT1, "cp_shared_kv_prefill_max_requests": 0},
        ),
        (
            "--cp-shared-kv-prefill-max-total-extend-tokens",
            {**CP_BS_GT1, "cp_shared_kv_prefill_max_total_extend_tokens": -64},
        ),
        (
            "--cp-shared-kv-prefill-max-cached-tokens",
            {**CP_BS_GT1, "cp_shared_kv_prefill_max_cached_tokens": 0},
        ),
        (
            "--cp-shared-kv-prefill-max-buffer-size",
            {**CP_BS_GT1, "cp_shared_kv_prefill_max_buffer_size": -1},
        ),
        ("--cp-symm-staging-pages", {"cp_symm_staging_pages": 0}),
        ("--affinity-warm-floor-tokens", {"affinity_warm_floor_tokens": 0}),
        ("--affinity-skip-window", {"affinity_skip_window": 0}),
        ("--affinity-max-head-defers", {"affinity_max_head_defers": -1}),
        ("--affinity-max-age-s", {"affinity_max_age_s": -0.5}),
        ("--kv-transfer-bandwidth-gbps", {"kv_transfer_bandwidth_gbps": 0}),
        ("--h2d-bandwidth-gbps", {"h2d_bandwidth_gbps": -1.0}),
        ("--seed", {"seed": -1}),
        ("--gpu", {"gpu": ""}),
    ],
)
def test_refuses_out_of_range(flag: str, kwargs: dict[str, Any]) -> None:
    _refuse(flag, **kwargs)


@pytest.mark.parametrize(
    ("flag", "kwargs"),
    [
        ("--schedule-policy", {"schedule_policy": "hrrn"}),
        ("--hicache-write-policy", {"hicache_write_policy": "write_sometimes"}),
        ("--mode", {"mode": "decode"}),
        ("--kv-cache-dtype", {"kv_cache_dtype": "fp4_e2m1"}),
        ("--model", {"model": "gpt-5"}),
    ],
)
def test_refuses_unknown_choice(flag: str, kwargs: dict[str, Any]) -> None:
    message = _refuse(flag, **kwargs)
    assert "must be one of" in message


def test_unknown_choice_suggests() -> None:
    assert "did you mean 'lpm'" in _refuse("--schedule-policy", schedule_policy="lmp")
    assert "did you mean 'glm-5'" in _refuse("--model", model="glm5")


@pytest.mark.parametrize(
    ("flag", "kwargs"),
    [
        ("--page-size", {"page_size": True}),
        ("--max-prefill-tokens", {"max_prefill_tokens": False}),
        ("--max-prefill-tokens", {"max_prefill_tokens": 16384.0}),
        ("--max-prefill-tokens", {"max_prefill_tokens": "16384"}),
        ("--max-prefill-tokens", {"max_prefill_tokens": None}),
        ("--chunked-prefill-size", {"chunked_prefill_size": "8192"}),
        ("--mem-fraction-static", {"mem_fraction_static": True}),
        ("--mem-fraction-static", {"mem_fraction_static": "0.9"}),
        ("--enable-affinity", {"enable_affinity": 1}),
        ("--enable-affinity", {"enable_affinity": "true"}),
        ("--model", {"model": 5}),
        ("--schedule-policy", {"schedule_policy": None}),
    ],
)
def test_refuses_wrong_type(flag: str, kwargs: dict[str, Any]) -> None:
    message = _refuse(flag, **kwargs)
    assert "expected" in message


@pytest.mark.parametrize(
    ("flag", "kwargs"),
    [
        ("--mem-fraction-static", {"mem_fraction_static": math.nan}),
        ("--affinity-max-age-s", {"affinity_max_age_s": math.inf}),
        ("--device-memory-gb", {"device_memory_gb": -math.inf}),
        ("--hicache-ratio", {"hicache_ratio": math.nan}),
    ],
)
def test_refuses_non_finite(flag: str, kwargs: dict[str, Any]) -> None:
    assert "finite" in _refuse(flag, **kwargs)


def test_accepts_int_for_float() -> None:
    cfg = Config(affinity_max_age_s=0, h2d_bandwidth_gbps=10, device_memory_gb=141)
    assert cfg.affinity_max_age_s == 0.0 and isinstance(cfg.affinity_max_age_s, float)
    assert isinstance(cfg.device_memory_gb, float)


def test_refuses_chunk_not_page_multiple() -> None:
    message = _refuse("--chunked-prefill-size", page_size=64, chunked_prefill_size=1000)
    assert "--page-size 64" in message
    assert Config(page_size=64, chunked_prefill_size=-1).chunked_prefill_size is None


def test_refuses_extend_limit_not_page_aligned() -> None:
    _refuse(
        "--cp-shared-kv-prefill-max-total-extend-tokens",
        **CP_BS_GT1,
        cp_shared_kv_prefill_max_total_extend_tokens=1000,
    )
    ok = Config(**CP_BS_GT1, cp_shared_kv_prefill_max_total_extend_tokens=4096)
    assert ok.cp_shared_kv_prefill_max_total_extend_tokens == 4096


def test_refuses_bs_gt1_without_shared_kv() -> None:
    message = _refuse(
        "--enable-cp-shared-kv-prefill-bs-gt1",
        tp_size=8,
        cp_size=8,
        enable_cp_shared_kv_prefill_bs_gt1=True,
    )
    assert "--enable-cp-shared-kv" in message.split("requires", 1)[1]


def test_refuses_shared_kv_without_cp() -> None:
    _refuse("--enable-cp-shared-kv", enable_cp_shared_kv=True)


def test_refuses_cp_not_dividing_tp() -> None:
    message = _refuse("--cp-size", tp_size=8, cp_size=3)
    assert "--tp-size" in message
    _refuse("--cp-size", tp_size=1, cp_size=2)
    assert Config(tp_size=8, cp_size=4).cp_size == 4


def test_refuses_mix_chunked_without_bs_gt1() -> None:
    _refuse(
        "--cp-prefill-mix-chunked",
        tp_size=8,
        cp_size=8,
        enable_cp_shared_kv=True,
        cp_prefill_mix_chunked=True,
    )


def test_refuses_mix_chunked_without_extend_cap() -> None:
    message = _refuse(
        "--cp-prefill-mix-chunked",
        **CP_BS_GT1,
        cp_prefill_mix_chunked=True,
        chunked_prefill_size=-1,
        cp_shared_kv_prefill_max_requests=4,
    )
    assert "extend cap" in message


def test_refuses_mix_chunked_without_request_limit() -> None:
    _refuse("--cp-prefill-mix-chunked", **CP_BS_GT1, cp_prefill_mix_chunked=True)


def test_refuses_broken_staging_identity() -> None:
    message = _refuse(
        "--cp-symm-staging-pages",
        **CP_BS_GT1,
        cp_prefill_mix_chunked=True,
        cp_shared_kv_prefill_max_requests=4,
        cp_symm_staging_pages=100,
    )
    assert "132" in message  # 8192 / 64 = 128 pages + 4 slack


def test_refuses_priority_with_wrong_policy() -> None:
    for policy in ("lpm", "dfs-weight"):
        message = _refuse(
            "--enable-priority-scheduling", enable_priority_scheduling=True, schedule_policy=policy
        )
        assert "--schedule-policy" in message
    for policy in ("fcfs", "lof"):
        assert Config(enable_priority_scheduling=True, schedule_policy=policy)


def test_refuses_preempt_on_no_token_without_priority() -> None:
    _refuse("--enable-preempt-on-no-token", enable_preempt_on_no_token=True)
    _refuse(
        "--enable-preempt-on-no-token",
        enable_preempt_on_no_token=True,
        enable_priority_scheduling=True,
        enable_priority_preemption=False,
    )
    assert Config(enable_priority_scheduling=True, enable_preempt_on_no_token=True)


def test_refuses_hicache_ratio_not_above_one() -> None:
    message = _refuse("--hicache-ratio", enable_hierarchical_cache=True, hicache_ratio=1.0)
    assert "--hicache-size" in message
    # A fixed host size makes the ratio irrelevant; hicache off makes it irrelevant too.
    assert Config(enable_hierarchical_cache=True, hicache_ratio=0.5, hicache_size=100)
    assert Config(hicache_ratio=0.5)


# --------------------------------------------------------------------- staging identity


def test_staging_identity_derived() -> None:
    cfg = Config(
        **CP_BS_GT1,
        cp_prefill_mix_chunked=True,
        cp_shared_kv_prefill_max_requests=4,
    )
    assert cfg.page_size == 64
    assert cfg.cp_symm_staging_pages is None
    assert cfg.scheduler_config().staging_identity() == (128, 4, 132)
    assert describe(cfg)["cp_symm_staging_pages"] == 132


def test_staging_identity_uses_min_of_caps() -> None:
    base = {**CP_BS_GT1, "cp_prefill_mix_chunked": True, "cp_shared_kv_prefill_max_requests": 8}
    smaller_extend = Config(**base, cp_shared_kv_prefill_max_total_extend_tokens=4096)
    assert smaller_extend.scheduler_config().cp_extend_cap == 4096
    assert smaller_extend.scheduler_config().staging_identity() == (64, 8, 72)
    larger_extend = Config(**base, cp_shared_kv_prefill_max_total_extend_tokens=65536)
    assert larger_extend.scheduler_config().staging_identity() == (128, 8, 136)
    extend_only = Config(
        **base, chunked_prefill_size=-1, cp_shared_kv_prefill_max_total_extend_tokens=2048
    )
    assert extend_only.scheduler_config().staging_identity() == (32, 8, 40)


def test_staging_identity_given_value_accepted() -> None:
    cfg = Config(
        **CP_BS_GT1,
        cp_prefill_mix_chunked=True,
        cp_shared_kv_prefill_max_requests=4,
        cp_symm_staging_pages=132,
    )
    cap, slack, staging = cfg.scheduler_config().staging_identity()
    assert cap + slack == staging == 132
    # Changing the chunk size re-derives when the staging size was not given.
    derived = Config(**CP_BS_GT1, cp_prefill_mix_chunked=True, cp_shared_kv_prefill_max_requests=4)
    assert dataclasses.replace(
        derived, chunked_prefill_size=4096
    ).scheduler_config().staging_identity() == (
        68 - 4,
        4,
        68,
    )


def test_staging_identity_off_is_not_enforced() -> None:
    cfg = Config(**CP_BS_GT1, cp_symm_staging_pages=7)
    assert cfg.scheduler_config().staging_identity() == (128, 0, 7)


# --------------------------------------------------------------------- memory math

H200_GB = 141.0


def _glm5_weights_per_gpu(tp: int) -> float:
    return get_model("glm-5").weight_bytes / tp


def test_total_pages_glm5_bf16_vs_fp8() -> None:
    weights = _glm5_weights_per_gpu(8)
    bf16 = Config(tp_size=8, kv_cache_dtype="bf16")
    fp8 = Config(tp_size=8, kv_cache_dtype="fp8_e4m3")
    spec = get_model("glm-5")
    kv_bytes = H200_GB * 1e9 * 0.88 - weights
    assert bf16.sim_settings().total_pages(weights, H200_GB) == int(
        kv_bytes // spec.kv_bytes_per_token_bf16
    )
    assert fp8.sim_settings().total_pages(weights, H200_GB) == int(
        kv_bytes // spec.kv_bytes_per_token_fp8
    )
    assert fp8.sim_settings().total_pages(weights, H200_GB) > bf16.sim_settings().total_pages(
        weights, H200_GB
    )


def test_total_pages_cp_shared_kv_multiplies_by_cp_size() -> None:
    weights = _glm5_weights_per_gpu(8)
    plain_cp = Config(tp_size=8, cp_size=8)
    shared = Config(tp_size=8, cp_size=8, enable_cp_shared_kv=True)
    assert plain_cp.page_size == shared.page_size == 64
    per_lane = plain_cp.sim_settings().total_pages(weights, H200_GB)
    assert per_lane > 0
    assert shared.sim_settings().total_pages(weights, H200_GB) == per_lane * 8
    assert shared.sim_settings().total_pages(weights, H200_GB) % 8 == 0
    expected_tokens = int((H200_GB * 1e9 * 0.88 - weights) // 100152)
    assert per_lane == expected_tokens // 64


def test_total_pages_uses_field_device_memory() -> None:
    weights = _glm5_weights_per_gpu(8)
    cfg = Config(tp_size=8, device_memory_gb=H200_GB)
    assert cfg.sim_settings().total_pages(weights) == Config(tp_size=8).sim_settings().total_pages(
        weights, H200_GB
    )
    with pytest.raises(ConfigError, match="--device-memory-gb"):
        Config().sim_settings().total_pages(weights)


def test_total_pages_max_total_tokens() -> None:
    cfg = Config(page_size=64, max_total_tokens=1_000_000)
    assert cfg.sim_settings().total_pages(1e12, 1.0) == 1_000_000 // 64
    shared = Config(**CP_BS_GT1, max_total_tokens=64 * 7)
    with pytest.raises(ConfigError, match="--max-total-tokens"):
        shared.sim_settings().total_pages(0, H200_GB)


def test_total_pages_no_memory_left() -> None:
    cfg = Config(tp_size=1)  # 744 GB of weights on one GPU
    with pytest.raises(ConfigError) as info:
        cfg.sim_settings().total_pages(_glm5_weights_per_gpu(1), H200_GB)
    message = str(info.value)
    assert message.startswith("--mem-fraction-static/--device-memory-gb: no memory left for KV")
    assert "\n" not in message


def test_host_pages() -> None:
    assert Config().sim_settings().host_pages(1000) == 0
    assert Config(enable_hierarchical_cache=True).sim_settings().host_pages(1000) == 2000
    assert (
        Config(enable_hierarchical_cache=True, hicache_ratio=3.5).sim_settings().host_pages(1000)
        == 3500
    )
    sized = Config(enable_hierarchical_cache=True, hicache_size=100, kv_bytes_per_token=1000)
    assert sized.sim_settings().host_pages(1) == 100_000_000
    shared = Config(
        **CP_BS_GT1, enable_hierarchical_cache=True, hicache_size=100, kv_bytes_per_token=1000
    )
    assert shared.sim_settings().host_pages(1) == (100_000_000 // 64) * 8


# --------------------------------------------------------------------- TOML


def _write(tmp_path: Path, text: str, name: str = "cfg.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_from_toml_top_level_mixed_spellings(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        'chunked-prefill-size = 4096\nschedule_policy = "lpm"\nenable-hierarchical-cache = true\n'
        'kv_cache_dtype = "fp8_e4m3"\nmem-fraction-static = 0.9\n',
    )
    cfg = Config.from_toml(path)
    assert cfg.chunked_prefill_size == 4096
    assert cfg.schedule_policy == "lpm"
    assert cfg.enable_hierarchical_cache
    assert cfg.kv_cache_dtype == "fp8_e4m3"
    assert cfg.mem_fraction_static == 0.9


def test_from_toml_prefillkit_table(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "[other_tool]\nx = 1\n\n[prefillkit]\ntp-size = 8\ncp_size = 8\n"
        'enable-cp-shared-kv = true\nmax_running_requests = "none"\nchunked-prefill-size = -1\n',
    )
    cfg = Config.from_toml(str(path))
    assert (cfg.tp_size, cfg.cp_size, cfg.page_size) == (8, 8, 64)
    assert cfg.enable_cp_shared_kv
    assert cfg.max_running_requests is None
    assert cfg.chunked_prefill_size is None


def test_from_toml_setting_outside_table(tmp_path: Path) -> None:
    path = _write(tmp_path, "seed = 3\n[prefillkit]\ntp_size = 2\n")
    with pytest.raises(ConfigError, match=r"'seed' is outside the \[prefillkit\] table"):
        Config.from_toml(path)


def test_from_toml_unknown_key_suggests(tmp_path: Path) -> None:
    path = _write(tmp_path, "chunked_prefil_size = 4096\n")
    with pytest.raises(ConfigError) as info:
        Config.from_toml(path)
    assert str(info.value) == (
        f"{path}: unknown setting 'chunked_prefil_size' (did you mean 'chunked_prefill_size'?)"
    )


def test_from_toml_invalid_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, "page_size = = 3\n")
    with pytest.raises(ConfigError) as info:
        Config.from_toml(path)
    message = str(info.value)
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "\n" not in message


def test_from_toml_wrong_type_names_file_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, 'chunked-prefill-size = "big"\n')
    with pytest.raises(ConfigError) as info:
        Config.from_toml(path)
    message = str(info.value)
    assert str(path) in message and "'chunked-prefill-size'" in message
    assert "expected an integer" in message


def test_from_toml_bool_for_int_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "page_size = true\n")
    with pytest.raises(ConfigError, match="'page_size': expected an integer"):
        Config.from_toml(path)


def test_from_toml_validation_error_names_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "page_size = 64\nchunked_prefill_size = 1000\n")
    with pytest.raises(ConfigError) as info:
        Config.from_toml(path)
    assert str(info.value).startswith(f"{path}: --chunked-prefill-size")


def test_from_toml_duplicate_spelling(tmp_path: Path) -> None:
    path = _write(tmp_path, "page_size = 64\npage-size = 32\n")
    with pytest.raises(ConfigError, match="given twice"):
        Config.from_toml(path)


def test_from_toml_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('gpu = "h200"  # caf\xe9\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        Config.from_toml(path)


def test_from_toml_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Config.from_toml(tmp_path / "nope.toml")


def test_from_sources_flags_override_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[prefillkit]\nchunked_prefill_size = 4096\nseed = 7\n")
    parsed = parse_flags(["--chunked-prefill-size", "2048", "--enable-affinity"])
    cfg = Config.from_sources(str(path), parsed.values)
    assert cfg.chunked_prefill_size == 2048
    assert cfg.seed == 7
    assert cfg.enable_affinity
    assert Config.from_sources(None, {}) == Config()
    with pytest.raises(ConfigError, match="did you mean 'seed'"):
        Config.from_sources(None, {"sede": 1})


# --------------------------------------------------------------------- flags


def test_parse_flags_forms() -> None:
    parsed = parse_flags(
        [
            "--chunked-prefill-size",
            "8192",
            "--max-prefill-tokens=4096",
            "--enable-hierarchical-cache",
            "--mem-fraction-static",
            "0.8",
            "--schedule-policy=lpm",
            "--max-running-requests",
            "none",
            "--enable-affinity=false",
            "--debug-check-invariants",
            "true",
            "--lpm-fallback-queue-len",
            "-1",
        ]
    )
    assert isinstance(parsed, ParsedFlags)
    assert parsed.values == {
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 4096,
        "enable_hierarchical_cache": True,
        "mem_fraction_static": 0.8,
        "schedule_policy": "lpm",
        "max_running_requests": None,
        "enable_affinity": False,
        "debug_check_invariants": True,
        "lpm_fallback_queue_len": -1,
    }
    assert parsed.ignored == []
    cfg = Config(**parsed.values)  # type: ignore[arg-type]
    assert cfg.lpm_fallback_queue_len is None


def test_parse_flags_negation_and_repeats() -> None:
    parsed = parse_flags(["--no-enable-priority-preemption", "--seed", "1"])
    assert parsed.values == {"enable_priority_preemption": False, "seed": 1}
    with pytest.raises(ConfigError, match=r"^--seed: given twice; give each setting once$"):
        parse_flags(["--seed", "1", "--seed=2"])
    with pytest.raises(ConfigError, match=r"^--tp-size: given twice \(also given as --tp\)"):
        parse_flags(["--tp", "4", "--tp-size", "8"])
    # Layered flags (a compare variant over the shared ones): the last wins.
    assert parse_flags(["--seed", "1", "--seed=2"], allow_repeats=True).values == {"seed": 2}
    assert parse_flags(["--disable-priority-preemption"]).values == {
        "enable_priority_preemption": False
    }


def test_parse_flags_aliases() -> None:
    parsed = parse_flags(
        [
            "--tp",
            "8",
            "--attn-cp-size=8",
            "--disaggregation-mode",
            "prefill",
            "--enable-cp-shared-kv",
        ]
    )
    assert parsed.values == {
        "tp_size": 8,
        "cp_size": 8,
        "mode": "pd-prefill",
        "enable_cp_shared_kv": True,
    }
    assert parse_flags(["--disaggregation-mode", "null"]).values == {}
    assert parse_flags(["--tensor-parallel-size", "4"]).values == {"tp_size": 4}
    with pytest.raises(ConfigError, match="--disaggregation-mode"):
        parse_flags(["--disaggregation-mode", "decode"])


def test_parse_flags_ignored() -> None:
    argv = [
        "--model-path",
        "zai-org/GLM-5-FP8",
        "--trust-remote-code",
        "--host=0.0.0.0",
        "--port",
        "30000",
        "--disable-cuda-graph",
        "--dp",
        "1",
        "--speculative-algorithm",
        "EAGLE",
        "--mem-fraction-static",
        "0.85",
        "--context-length",
        "131072",
    ]
    parsed = parse_flags(argv)
    assert parsed.values == {
        "mem_fraction_static": 0.85,
        "model_path": "zai-org/GLM-5-FP8",
        "dp_size": 1,  # --dp is modelled (DP attention); 1 is the default
    }
    assert parsed.ignored == [
        "--trust-remote-code",
        "--host",
        "--port",
        "--disable-cuda-graph",
        "--speculative-algorithm",
        "--context-length",
    ]


def test_parse_flags_unknown_suggests() -> None:
    with pytest.raises(ConfigError) as info:
        parse_flags(["--chunked-prefil-size", "8"])
    assert str(info.value) == (
        "unknown flag '--chunked-prefil-size' (did you mean '--chunked-prefill-size'?)"
    )
    with pytest.raises(ConfigError, match=r"unknown flag '--zzzzzz'$"):
        parse_flags(["--zzzzzz"])


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--chunked-prefill-size"], "--chunked-prefill-size"),
        (["--chunked-prefill-size", "--enable-affinity"], "--chunked-prefill-size"),
        (["--chunked-prefill-size", "lots"], "--chunked-prefill-size"),
        (["--page-size=1.5"], "--page-size"),
        (["--mem-fraction-static", "high"], "--mem-fraction-static"),
        (["--mem-fraction-static", "nan"], "--mem-fraction-static"),
        (["--enable-affinity=maybe"], "--enable-affinity"),
        (["--model-path"], "--model-path"),
        (["--trust-remote-code=yes"], "--trust-remote-code"),
    ],
)
def test_parse_flags_bad_values(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_flags(argv)
    message = str(info.value)
    assert message.startswith(flag)
    assert "\n" not in message


def test_parse_flags_positional_refused() -> None:
    with pytest.raises(ConfigError, match="unexpected argument"):
        parse_flags(["8192"])


def test_every_field_has_a_flag() -> None:
    for f in dataclasses.fields(Config):
        flag = field_flag(f.name)
        assert flag.startswith("--") and "_" not in flag
        assert f.metadata["help"] and f.metadata["group"]


# --------------------------------------------------------------------- reporting


def test_knob_table() -> None:
    table = knob_table()
    assert len(table) == len(dataclasses.fields(Config))
    rows = {flag: (default, meaning) for flag, default, meaning in table}
    assert rows["--chunked-prefill-size"][0] == "8192"
    assert rows["--page-size"][0] == "none"
    assert rows["--enable-affinity"][0] == "false"
    assert all(meaning for _, meaning in rows.values())


def test_describe_json_and_round_trip() -> None:
    cfg = Config(tp_size=8, cp_size=8, enable_cp_shared_kv=True, kv_cache_dtype="fp8_e4m3")
    info = describe(cfg)
    json.dumps(info)
    assert info["page_size"] == 64
    assert info["kv_bytes_per_token"] == get_model("glm-5").kv_bytes_per_token_fp8
    assert describe(Config(**info)) == info  # type: ignore[arg-type]
    assert describe(Config())["kv_cache_dtype"] == "bf16"


def test_every_model_preset_loads() -> None:
    for name in MODELS:
        assert Config(model=name).model_spec.name == name
