"""The SGLang plugin's settings (environment variables; pure, no SGLang needed)."""

from __future__ import annotations

import pytest

from prefillkit.integrations.sglang.settings import (
    CpLimits,
    PluginSettings,
    SettingsError,
    settings_from_env,
    settings_from_scheduler_config,
)
from prefillkit.sched.affinity import AffinityBounds
from prefillkit.sched.config import SchedulerConfig

ON = {"PREFILLKIT_SGLANG": "1"}


def test_not_enabled_is_nothing_and_enabled_alone_is_every_feature_off() -> None:
    assert settings_from_env({}) == PluginSettings()
    assert not settings_from_env({"PREFILLKIT_SGLANG": "0"}).enabled
    s = settings_from_env(ON)
    assert s.enabled and s.features_off
    assert s.describe() == "every feature off (SGLang's own decisions)"


def test_each_feature_from_its_variables() -> None:
    s = settings_from_env(
        {
            **ON,
            "PREFILLKIT_SGLANG_ENABLE_AFFINITY": "true",
            "PREFILLKIT_SGLANG_AFFINITY_SKIP_WINDOW": "4",
            "PREFILLKIT_SGLANG_AFFINITY_MAX_AGE_S": "2.5",
            "PREFILLKIT_SGLANG_SCHEDULE_MAX_WAIT_S": "5",
            "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV": "1",
            "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV_PREFILL_BS_GT1": "1",
            "PREFILLKIT_SGLANG_CP_SHARED_KV_PREFILL_MAX_REQUESTS": "4",
        }
    )
    assert s.affinity == AffinityBounds(skip_window=4, max_age_s=2.5)
    assert s.max_wait_s == 5.0
    assert s.cp == CpLimits(bs_gt1=True, max_requests=4)
    assert s.describe() == (
        "affinity(floor=64, W=4, K=3, T=2.5s), wait bound 5s, "
        "CP bs>1(max_requests=4, max_total_extend_tokens=None, max_cached_tokens=None)"
    )
    only_gate = settings_from_env({**ON, "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV": "1"})
    assert only_gate.cp == CpLimits(bs_gt1=False)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"PREFILLKIT_SGLANG_AFFINITY_SKIP_WINDOW": "0"},
            "PREFILLKIT_SGLANG_AFFINITY_SKIP_WINDOW='0': must be at least 1",
        ),
        (
            {"PREFILLKIT_SGLANG_SCHEDULE_MAX_WAIT_S": "soon"},
            "PREFILLKIT_SGLANG_SCHEDULE_MAX_WAIT_S='soon': expected seconds",
        ),
        (
            {"PREFILLKIT_SGLANG_ENABLE_AFFINITY": "maybe"},
            "PREFILLKIT_SGLANG_ENABLE_AFFINITY='maybe': expected 1/0 (true/false)",
        ),
        (
            {"PREFILLKIT_SGLANG_CP_SHARED_KV_PREFILL_MAX_REQUESTS": "2"},
            "PREFILLKIT_SGLANG_CP_SHARED_KV_PREFILL_MAX_*: the CP limits need "
            "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV_PREFILL_BS_GT1=1",
        ),
        (
            {"PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV_PREFILL_BS_GT1": "1"},
            "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV_PREFILL_BS_GT1=1 needs "
            "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV=1",
        ),
        (
            {"PREFILLKIT_SGLANG_AFINITY": "1"},
            "PREFILLKIT_SGLANG_AFINITY: not a prefillkit setting (docs/sglang.md lists them)",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        settings_from_env({**ON, **env})
    assert str(err.value) == message


def test_the_replay_mapping_follows_prefillkits_own_rules() -> None:
    # The wait bound: not under fcfs (it changes nothing there), on under lpm.
    assert settings_from_scheduler_config(SchedulerConfig()).max_wait_s is None
    assert settings_from_scheduler_config(SchedulerConfig(schedule_policy="lpm")).max_wait_s == 5.0
    cp = SchedulerConfig(cp_size=8, enable_cp_shared_kv=True)
    assert settings_from_scheduler_config(cp).cp == CpLimits(bs_gt1=False)
    assert settings_from_scheduler_config(SchedulerConfig(cp_size=8)).cp is None
    aff = settings_from_scheduler_config(SchedulerConfig(enable_affinity=True))
    assert aff.affinity == AffinityBounds()


def test_the_buffer_limit_needs_a_model() -> None:
    gate = {
        **ON,
        "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV": "1",
        "PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV_PREFILL_BS_GT1": "1",
        "PREFILLKIT_SGLANG_CP_SHARED_KV_PREFILL_MAX_BUFFER_SIZE": str(64 << 20),
    }
    with pytest.raises(SettingsError) as err:
        settings_from_env(gate)
    assert str(err.value).startswith(
        "PREFILLKIT_SGLANG_CP_SHARED_KV_PREFILL_MAX_BUFFER_SIZE needs PREFILLKIT_SGLANG_MODEL: "
        "a prefillkit model ("
    )
    s = settings_from_env({**gate, "PREFILLKIT_SGLANG_MODEL": "glm-5"})
    assert s.cp is not None and s.cp.max_buffer_bytes == 64 << 20
    assert s.cp.buffer_model is not None and s.cp.buffer_model.name == "glm-5"
    assert s.describe().endswith("max_buffer_size=67108864 for glm-5)")
    with pytest.raises(SettingsError, match=r"PREFILLKIT_SGLANG_MODEL='/nonexistent\.json'"):
        settings_from_env({**gate, "PREFILLKIT_SGLANG_MODEL": "/nonexistent.json"})
