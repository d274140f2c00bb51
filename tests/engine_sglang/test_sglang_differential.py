"""With every feature off, SGLang's own prefill pass admits, chunks and stops identically
with and without prefillkit's adder: 1,000 randomised pre-pass states (sglang_states.py:
page 1, 16, 64; fcfs, lpm, dfs-weight; cached prefixes, allocator pressure, running decode
requests, chunked continuations), each built twice from its seed, one scheduler stock and
one with the plugin installed (``plugin.install_on``, the path the replay uses; the
entry-point path is test_sglang_plugin.py's)."""

from __future__ import annotations

import collections
import os

import pytest

from prefillkit.integrations.sglang import MissingExtraError, require_sglang

try:
    require_sglang()
except MissingExtraError as err:
    pytest.skip(str(err), allow_module_level=True)

from sglang_states import build_state, outcome, spec_of

from prefillkit.integrations.sglang.adder import PrefillkitAdder
from prefillkit.integrations.sglang.plugin import install_on
from prefillkit.integrations.sglang.settings import PluginSettings

STATES = int(os.environ.get("PREFILLKIT_SGLANG_STATES", "1000"))


def _kind(out: dict[str, object]) -> str:
    if not out["admitted"]:
        return "empty"
    if not out["queue"]:
        return "queue drained"
    return "memory (batch full)" if out["batch_is_full"] else "budget or chunk"


def test_features_off_decisions_are_sglangs_on_1000_states() -> None:
    used: list[type] = []
    kinds: collections.Counter[tuple[int, str]] = collections.Counter()
    for seed in range(STATES):
        spec = spec_of(seed)
        stock = outcome(build_state(spec))
        sched = build_state(spec)
        install_on(sched, PluginSettings(enabled=True), lambda: 0.0)
        used.append(sched.get_prefill_adder_class())
        with_plugin = outcome(sched)
        assert with_plugin == stock, f"seed {seed}: {spec}"
        kinds[(spec.page_size, _kind(stock))] += 1
    assert all(issubclass(c, PrefillkitAdder) for c in used)
    # The states cover every way a pass ends, at every page size.
    for page in (1, 16, 64):
        for kind in ("empty", "queue drained", "memory (batch full)", "budget or chunk"):
            assert kinds[(page, kind)] > 0, (page, kind, kinds)


def test_the_states_are_diverse() -> None:
    """Cached prefixes, running requests and chunked continuations occur in the states."""
    seen = collections.Counter()
    for seed in range(60):
        s = build_state(spec_of(seed))
        seen["cached"] += s.tree_cache.evictable_size() > 0
        seen["running"] += len(s.running_batch.reqs) > 0
        seen["chunk"] += s.chunked_req is not None
        seen["policy " + spec_of(seed).policy] += 1
    assert min(seen.values()) >= 5, seen
