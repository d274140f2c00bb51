"""Each feature on: prefillkit inside SGLang decides as prefillkit standalone on the same
state (sglang_twins.py), pass by pass, over randomised states; plus the adder cases an
SGLang ``test_prefill_adder``-style test would check, on SGLang's real objects."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from prefillkit.integrations.sglang import MissingExtraError, require_sglang

try:
    require_sglang()
except MissingExtraError as err:
    pytest.skip(str(err), allow_module_level=True)

from sglang_twins import (
    Twin,
    random_twin,
    sglang_pass,
    sglang_side,
    standalone_pass,
    standalone_side,
)

from prefillkit.integrations.sglang.adder import state_of
from prefillkit.integrations.sglang.settings import (
    PluginSettings,
    settings_from_scheduler_config,
)
from prefillkit.models import ModelSpec
from prefillkit.models.model_presets import get_model
from prefillkit.sched.config import SchedulerConfig

PASSES = 3


def _compare(
    tw: Twin, cfg: SchedulerConfig, *, cp_active: bool = False, model: ModelSpec | None = None
) -> list[list[object]]:
    """Run PASSES passes on both sides (now = 10, 11, ...); assert equal; return them."""
    settings = settings_from_scheduler_config(cfg, buffer_model=model)
    s, clock = sglang_side(tw, settings, cfg, cp_active=cp_active)
    alone = standalone_side(tw, cfg, model)
    passes: list[list[object]] = []
    for k in range(PASSES):
        now = 10.0 + k
        clock[0] = now
        got = sglang_pass(s, release=True)
        want = standalone_pass(alone, now)
        assert got == want, f"pass {k}: {settings.describe()}"
        passes.append(list(got))
    return passes


def _cfg(rng: random.Random, page: int, **kw: object) -> SchedulerConfig:
    base = SchedulerConfig(
        page_size=page,
        chunked_prefill_size=rng.choice([None, 2048, 8192]),
        max_prefill_tokens=rng.choice([4096, 16_384]),
        schedule_max_wait_s=None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("page", [1, 16, 64])
def test_features_off_sglang_and_standalone_agree(page: int) -> None:
    """The baseline the feature differentials rest on (prefillkit's wait bound off)."""
    for seed in range(40):
        rng = random.Random(seed)
        policy = ("fcfs", "lpm", "dfs-weight")[seed % 3]
        _compare(random_twin(seed, page), _cfg(rng, page, schedule_policy=policy))


@pytest.mark.parametrize("page", [1, 16, 64])
def test_affinity_in_sglang_equals_standalone(page: int) -> None:
    skipped = stopped = 0
    for seed in range(60):
        rng = random.Random(seed)
        cfg = _cfg(
            rng,
            page,
            enable_affinity=True,
            affinity_warm_floor_tokens=rng.choice([64, 256]),
            affinity_skip_window=rng.choice([1, 2, 3, 16]),
            affinity_max_head_defers=rng.choice([0, 1, 3]),
            affinity_max_age_s=rng.choice([2.0, 5.0, 60.0]),
        )
        tw = random_twin(seed, page)
        settings = settings_from_scheduler_config(cfg)
        assert settings.affinity is not None
        s, clock = sglang_side(tw, settings, cfg, cp_active=False)
        alone = standalone_side(tw, cfg)
        for k in range(PASSES):
            clock[0] = 10.0 + k
            assert sglang_pass(s, release=True) == standalone_pass(alone, 10.0 + k), (seed, k)
        counters = state_of(s.tree_cache).counters
        skipped += counters.get("affinity_skips", 0)
        stopped += counters.get("affinity_stops", 0)
    assert skipped > 0 and stopped > 0  # the states exercise both verdicts


@pytest.mark.parametrize("policy", ["lpm", "dfs-weight"])
def test_wait_bound_in_sglang_equals_standalone(policy: str) -> None:
    reordered = 0
    for seed in range(60):
        rng = random.Random(seed)
        page = (1, 16, 64)[seed % 3]
        cfg = _cfg(
            rng, page, schedule_policy=policy, schedule_max_wait_s=rng.choice([0.5, 3.0, 8.0])
        )
        passes = _compare(random_twin(seed, page), cfg)
        off = _compare(random_twin(seed, page), replace(cfg, schedule_max_wait_s=None))
        reordered += passes != off
    assert reordered > 0  # the bound changes decisions in some states


@pytest.mark.parametrize("bs_gt1", [False, True])
def test_cp_admission_in_sglang_equals_standalone(bs_gt1: bool) -> None:
    limited = 0
    for seed in range(60):
        rng = random.Random(seed)
        page = (1, 16, 64)[seed % 3]
        cfg = _cfg(
            rng,
            page,
            cp_size=2,
            enable_cp_shared_kv=True,
            enable_cp_shared_kv_prefill_bs_gt1=bs_gt1,
            cp_shared_kv_prefill_max_requests=rng.choice([None, 2, 4]) if bs_gt1 else None,
            cp_shared_kv_prefill_max_total_extend_tokens=(
                rng.choice([None, 1024, 6144]) if bs_gt1 else None
            ),
            cp_shared_kv_prefill_max_cached_tokens=rng.choice([None, 500, 3000])
            if bs_gt1
            else None,
        )
        tw = random_twin(seed, page)
        passes = _compare(tw, cfg, cp_active=True)
        if not bs_gt1:
            assert all(len(p) <= 1 for p in passes)
        limited += any(len(p) > 1 for p in passes)
    if bs_gt1:
        assert limited > 0


def test_cp_rules_need_sglang_to_run_prefill_cp() -> None:
    """Without prefill CP in SGLang the CP settings do nothing (SGLang's batches)."""
    tw = random_twin(5, 16)
    cfg = _cfg(random.Random(5), 16, cp_size=2, enable_cp_shared_kv=True)
    s, _ = sglang_side(tw, settings_from_scheduler_config(cfg), cfg, cp_active=False)
    stock, _ = sglang_side(tw, PluginSettings(enabled=True), cfg, cp_active=False)
    assert sglang_pass(s, release=True) == sglang_pass(stock, release=True)


def test_cp_buffer_limit_in_sglang_equals_standalone() -> None:
    """The temporary-buffer limit: the estimator (sched/buffer.py) over the same shapes on
    both sides, SGLang's CP size and page size, GLM-5's dimensions."""
    model = get_model("glm-5")
    stopped = 0
    for seed in range(45):
        rng = random.Random(seed)
        page = (16, 64)[seed % 2]
        cfg = _cfg(
            rng,
            page,
            cp_size=8,
            enable_cp_shared_kv=True,
            enable_cp_shared_kv_prefill_bs_gt1=True,
            cp_shared_kv_prefill_max_buffer_size=rng.choice([1, 4, 16, 64]) << 20,
        )
        tw = random_twin(seed, page)
        s_settings = settings_from_scheduler_config(cfg, buffer_model=model)
        s, clock = sglang_side(tw, s_settings, cfg, cp_active=True)
        alone = standalone_side(tw, cfg, model)
        for k in range(PASSES):
            clock[0] = 10.0 + k
            assert sglang_pass(s, release=True) == standalone_pass(alone, 10.0 + k), (seed, k)
        stopped += state_of(s.tree_cache).counters.get("close_cp_max_buffer_size", 0)
    assert stopped > 0  # the limit binds in some passes
