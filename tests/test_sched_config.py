"""The config split by owner: SchedulerConfig (core), SimSettings (sim), Config (app)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from prefillkit.app.settings import Config
from prefillkit.cost.deployment import SimSettings
from prefillkit.models import get_model
from prefillkit.request import Request
from prefillkit.sched.config import SCHEDULER_FIELDS, ConfigError, SchedulerConfig
from prefillkit.sched.interface import build_scheduler


def test_an_engine_builds_it_from_its_own_values() -> None:
    """The module docstring's example, with an engine's own argument object."""
    server_args = SimpleNamespace(
        page_size=16,
        chunked_prefill_size=-1,
        max_prefill_tokens=8192,
        schedule_policy="lpm",
        enable_hierarchical_cache=False,
    )
    cfg = SchedulerConfig(
        page_size=server_args.page_size,
        chunked_prefill_size=server_args.chunked_prefill_size,
        max_prefill_tokens=server_args.max_prefill_tokens,
        schedule_policy=server_args.schedule_policy,
        enable_hierarchical_cache=server_args.enable_hierarchical_cache,
    )
    assert cfg.chunked_prefill_size is None and not cfg.chunking_enabled
    sched = build_scheduler(cfg, 4096 // cfg.page_size, key_tokens=cfg.page_size)
    req = Request("a", 0.0, 64, 4, [1, 2, 3, 4], 16)
    assert sched.add_request(req) is None
    step = sched.schedule(0.0)
    assert [s.rid for s in step.reqs] == [req.rid]
    assert isinstance(cfg.page_size, int)


def test_defaults_are_the_app_defaults() -> None:
    app = Config()
    sched = app.scheduler_config()
    for name in SCHEDULER_FIELDS:
        assert getattr(SchedulerConfig(), name) == getattr(sched, name), name
    sim = app.sim_settings()
    plain = SimSettings()
    for f in dataclasses.fields(SimSettings):
        assert getattr(plain, f.name) == getattr(sim, f.name), f.name


def test_page_size_is_an_int_and_derived_helpers() -> None:
    cfg = SchedulerConfig(
        page_size=64,
        cp_size=8,
        enable_cp_shared_kv=True,
        enable_cp_shared_kv_prefill_bs_gt1=True,
        cp_shared_kv_prefill_max_requests=4,
        chunked_prefill_size=8192,
    )
    assert cfg.kv_lanes == 8 and cfg.cp_extend_cap == 8192
    assert cfg.staging_identity() == (128, 4, 132)
    assert SchedulerConfig(cp_size=2).kv_lanes == 1


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"chunked_prefill_size": 100, "page_size": 64}, "--chunked-prefill-size"),
        ({"schedule_policy": "sjf"}, "--schedule-policy"),
        ({"enable_cp_shared_kv": True}, "--enable-cp-shared-kv"),
        ({"page_size": 0}, "--page-size"),
        ({"enable_priority_scheduling": True, "schedule_policy": "lpm"}, "--enable-priority"),
        ({"hicache_write_policy": "write_around"}, "--hicache-write-policy"),
    ],
)
def test_one_line_errors_name_the_flag(kwargs: dict[str, object], flag: str) -> None:
    with pytest.raises(ConfigError) as info:
        SchedulerConfig(**kwargs)  # type: ignore[arg-type]
    text = str(info.value)
    assert text.startswith(flag) and "\n" not in text


def test_sim_settings_validate_the_deployment() -> None:
    with pytest.raises(ConfigError, match=r"^--cp-size: 8 must divide --tp-size 4$|^--cp-size 8"):
        SimSettings(SchedulerConfig(cp_size=8), tp_size=4)
    with pytest.raises(ConfigError, match=r"^--ep-size"):
        SimSettings(tp_size=8, ep_size=4)
    with pytest.raises(ConfigError, match=r"^--hicache-ratio"):
        SimSettings(SchedulerConfig(enable_hierarchical_cache=True), hicache_ratio=1.0)
    ok = SimSettings(SchedulerConfig(page_size=64), model=get_model("llama-3.1-8b"), gpu="h100")
    assert ok.page_size == 64 and ok.resolved_kv_bytes_per_token == 131_072


def test_app_config_splits_into_both() -> None:
    cfg = Config(tp_size=8, cp_size=8, enable_cp_shared_kv=True, kv_cache_dtype="fp8_e4m3")
    sim = cfg.sim_settings()
    assert sim.scheduler == cfg.scheduler_config()
    assert sim.page_size == 64 and sim.kv_lanes == 8 and sim.tp_size == 8
    assert sim.model is get_model("glm-5")
    assert sim.resolved_kv_bytes_per_token == get_model("glm-5").kv_bytes_per_token_fp8
