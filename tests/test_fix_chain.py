"""The fix-chain benchmark's variants are valid configs on the seed deployment, and each
step adds exactly the knob its name says (so README's first table stays what it claims)."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest

from prefillkit.app.settings import Config, parse_flags
from prefillkit.cost.validation import SEED_DEPLOYMENT

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parent.parent


def load_chain() -> tuple[tuple[str, str], ...]:
    spec = importlib.util.spec_from_file_location("fix_chain", ROOT / "benchmarks" / "fix_chain.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fix_chain"] = mod
    spec.loader.exec_module(mod)
    return mod.CHAIN  # type: ignore[no-any-return]


def config_of(flags: str) -> Config:
    values = parse_flags([*SEED_DEPLOYMENT, *shlex.split(flags)]).values
    return Config(**values)  # type: ignore[arg-type]


def test_chain_steps_are_valid_and_cumulative() -> None:
    chain = dict(load_chain())
    assert list(chain) == ["fcfs-bs1", "bs-gt1", "mix-chunked", "affinity", "lpm", "lpm-unbounded"]
    cfgs = {name: config_of(flags) for name, flags in chain.items()}
    base = cfgs["fcfs-bs1"]
    assert not base.enable_cp_shared_kv_prefill_bs_gt1 and base.schedule_policy == "fcfs"
    bs = cfgs["bs-gt1"]
    assert bs.enable_cp_shared_kv_prefill_bs_gt1
    limits = (
        bs.cp_shared_kv_prefill_max_requests,
        bs.cp_shared_kv_prefill_max_total_extend_tokens,
        bs.cp_shared_kv_prefill_max_cached_tokens,
        bs.cp_shared_kv_prefill_max_buffer_size,
    )
    assert all(v is not None for v in limits)  # the four limits
    assert cfgs["mix-chunked"].cp_prefill_mix_chunked and not bs.cp_prefill_mix_chunked
    assert cfgs["affinity"].enable_affinity and not cfgs["mix-chunked"].enable_affinity
    assert cfgs["lpm"].schedule_policy == "lpm" and not cfgs["lpm"].enable_affinity
    unbounded = cfgs["lpm-unbounded"]
    assert unbounded.schedule_policy == "lpm" and unbounded.schedule_max_wait_s is None
    assert all(c.gpu == "h20-141g" and c.cp_size == 8 and c.ep_size == 8 for c in cfgs.values())
