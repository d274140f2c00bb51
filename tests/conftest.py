"""Shared helpers for the admission tests: build a cache, an adder and requests by hand."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# NOTE: every subprocess a test starts (``python -m prefillkit ...``) imports the tree under
# test, not whatever prefillkit is installed (an editable install of another checkout).
# PREFILLKIT_TEST_INSTALLED=1 tests the installed build instead (the compiled one after
# ``pip install .``): the source tree leaves the import path, here and in subprocesses.
_SRC = str(Path(__file__).resolve().parents[1] / "src")
# NOTE: as the CLI does (cli.py), before numpy loads: one BLAS thread, so the process
# stays single-threaded and may fork its workload helper (app/prefetch.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if os.environ.get("PREFILLKIT_TEST_INSTALLED") == "1":
    while _SRC in sys.path:
        sys.path.remove(_SRC)
    os.environ.pop("PYTHONPATH", None)
else:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, os.environ.get("PYTHONPATH")) if p)

from prefillkit.cache import (  # noqa: E402  (after the import path is set)
    HostTier,
    KVPool,
    PrefixCache,
    check_invariants,
    lane_split,
)
from prefillkit.request import ReqStatus, Request  # noqa: E402
from prefillkit.sched.adder import AdmissionLimits, PrefillAdder  # noqa: E402
from prefillkit.sched.verdicts import AddReqResult  # noqa: E402


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was compiled by mypyc (setup.py) rather than run as source."""
    return not str(module.__file__).endswith(".py")


def patches(module: ModuleType) -> pytest.MarkDecorator:
    """Skip a test that monkeypatches ``module``'s internals when that module is compiled
    (a compiled module's calls bind at build time); the source run keeps testing it."""
    return pytest.mark.skipif(
        is_compiled(module), reason=f"patches {module.__name__}, which this build compiled"
    )


def make_cache(
    total_pages: int,
    page_size: int,
    cp: int = 1,
    host_pages: int | None = None,
    policy: str = "write_through",
) -> PrefixCache:
    """A cache whose key unit is one page."""
    host = HostTier(host_pages, policy) if host_pages is not None else None
    return PrefixCache(KVPool(total_pages, page_size, cp), page_size, host)


def make_limits(page_size: int, **kw: Any) -> AdmissionLimits:
    kw.setdefault("max_prefill_tokens", 16384)
    kw.setdefault("chunked_prefill_size", None)
    return AdmissionLimits(page_size=page_size, **kw)


def make_adder(
    cache: PrefixCache,
    limits: AdmissionLimits | None = None,
    running: Sequence[Request] = (),
    ratio: float = 1.0,
    **kw: Any,
) -> PrefillAdder:
    if limits is None:
        limits = make_limits(cache.page_size, **kw)
    return PrefillAdder(cache, limits, list(running), ratio)


def keys_for(rid: str, n_units: int, family: object = None, shared: int = 0) -> list[int]:
    """A chain-consistent key chain: units ``< shared`` belong to ``family`` (equal for every
    request of that family), the rest are private to ``rid``."""
    return [
        hash(("fam", family, i)) if i < shared else hash(("own", rid, i)) for i in range(n_units)
    ]


def make_req(
    rid: str,
    input_len: int,
    kt: int,
    *,
    family: object = None,
    shared: int = 0,
    max_new: int = 16,
    arrival: float = 0.0,
    ignore_eos: bool = False,
) -> Request:
    """A request of ``input_len`` tokens whose first ``shared`` key units are ``family``'s."""
    n_units = input_len // kt
    return Request(
        rid=rid,
        arrival_time=arrival,
        input_len=input_len,
        max_new_tokens=max_new,
        keys=keys_for(rid, n_units, family, min(shared, n_units)),
        key_tokens=kt,
        ignore_eos=ignore_eos,
    )


def warm(cache: PrefixCache, keys: list[int]) -> None:
    """Compute ``keys`` and cache them (unlocked): match, lock, alloc, insert, unlock."""
    m = cache.match(keys, len(keys))
    node = cache.lock(m.device_node, m.device_units)
    assert cache.alloc_pages(m.device_units, len(keys) - m.device_units) is not None
    node = cache.insert(node, keys, m.device_units, len(keys))
    cache.unlock(node)
    check_invariants(cache, [])


def to_host(cache: PrefixCache, keys: list[int], keep_units: int = 0) -> None:
    """Evict the device pages of ``keys`` beyond ``keep_units`` (they stay on the host tier)."""
    pin = cache.match(keys, keep_units)
    node = cache.lock(pin.device_node, pin.device_units)
    cache.evict_tokens(10**12)
    cache.unlock(node)
    check_invariants(cache, [])


def alloc_batch(adder: PrefillAdder, owned: dict[str, tuple[int, int]]) -> None:
    """Allocate the admitted requests' pages as the scheduler does after a pass.

    ``owned`` maps rid -> owned page range and is updated (a continuing chunked request
    keeps its range and grows it)."""
    cache = adder.cache
    p = cache.page_size
    for req in adder.can_run_list:
        start, end = owned.get(
            req.rid, (-(-req.state.prefix_len // p), -(-req.state.prefix_len // p))
        )
        last = -(-(req.state.prefix_len + req.state.extend_input_len) // p)
        assert cache.alloc_pages(end, last - end) is not None, f"{req.rid}: not allocatable"
        owned[req.rid] = (start, last)
    check_invariants(cache, owned.values())


def finish(cache: PrefixCache, reqs: Iterable[Request], owned: dict[str, tuple[int, int]]) -> None:
    """Insert what each request computed, then free its pages and lock."""
    for req in reqs:
        start, end = owned.pop(req.rid)
        node = req.state.locked_node
        assert node is not None
        units = min(
            (req.state.prefix_len + req.state.extend_input_len) // cache.key_tokens, len(req.keys)
        )
        if units > node.end:
            node = cache.insert(node, req.keys, node.end, units)
            start = units * cache.unit_pages
        if end > start:
            cache.pool.release_owned(lane_split(start, end - start, cache.cp_size))
        cache.unlock(node)
        req.state.locked_node = None
    check_invariants(cache, owned.values())


def make_chunked(cache: PrefixCache, rid: str, input_len: int, computed: int, **kw: Any) -> Request:
    """A request whose first ``computed`` tokens were computed by earlier chunks: their
    complete units are cached and locked by the request, as after ``prefill_done``."""
    req = make_req(rid, input_len, cache.key_tokens, **kw)
    units = computed // cache.key_tokens
    warm(cache, req.keys[:units])
    m = cache.match(req.keys, units)
    req.state.locked_node = cache.lock(m.device_node, units)
    req.state.computed_tokens = computed
    req.state.status = ReqStatus.PREFILLING
    check_invariants(cache, [])
    return req


def add(
    adder: PrefillAdder, req: Request, owned: Iterable[tuple[int, int]] | None = ()
) -> AddReqResult:
    """``add_one_req`` followed by the invariant check. ``owned``: the page ranges requests
    own (none mid-pass by default; None skips that part of the check)."""
    res = adder.add_one_req(req)
    check_invariants(adder.cache, None if owned is None else list(owned))
    return res


def add_chunked(
    adder: PrefillAdder, req: Request, owned: Iterable[tuple[int, int]] | None = ()
) -> Request | None:
    """``add_chunked_req`` followed by the invariant check."""
    res = adder.add_chunked_req(req)
    check_invariants(adder.cache, None if owned is None else list(owned))
    return res


def snapshot(adder: PrefillAdder) -> dict[str, object]:
    """Everything a rejected candidate must leave untouched."""
    cache = adder.cache
    pool = cache.pool
    host = cache.host
    locks: dict[int, tuple[int, int, bool, bool]] = {}
    stack = [cache.root]
    while stack:
        n = stack.pop()
        stack.extend(n.children.values())
        for k in n.keys:
            locks[k] = (n.lock_ref, n.host_lock_ref, n.on_device, n.on_host)
    return {
        "evictable": cache.evictable_pages,
        "protected": cache.protected_pages,
        "evictable_lanes": list(cache.evictable_lanes),
        "free": list(pool.free),
        "cached": list(pool.cached),
        "owned": list(pool.owned),
        "host_used": host.used_pages if host else None,
        "host_lru": len(host.lru) if host else None,
        "index_keys": len(cache.index),
        "per_key": locks,
        "rem_total_offset": adder.rem_total_token_offset,
        "cur_rem_offset": adder.cur_rem_token_offset,
        "rem_input": adder.rem_input_tokens,
        "rem_chunk": adder.rem_chunk_tokens,
        "rem_total": adder.rem_total_tokens,
        "cur_rem": adder.cur_rem_tokens,
        "can_run": [r.rid for r in adder.can_run_list],
        "new_chunked": adder.new_chunked_req,
        "chunked_in_batch": (adder.chunked_req_in_batch, adder.has_chunked_req_in_batch),
        "load_backs": len(adder.load_backs),
        "planned_lanes": list(adder.planned_lanes),
        "batch": (
            adder.batch_extend_tokens,
            adder.batch_cached_tokens,
            adder.batch_load_back_tokens,
            len(adder.batch_shapes),
        ),
        "log": (adder.log_hit_tokens, adder.log_input_tokens),
    }


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        default=False,
        help="run the whole-engine fuzz with 10,000 examples (PREFILLKIT_FUZZ_LONG=1)",
    )
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run the tests marked slow (tests/slow/: long fuzz runs, mutation "
        "checks); PREFILLKIT_RUN_SLOW=1 does the same",
    )


def pytest_configure(config: pytest.Config) -> None:
    # NOTE: set before collection: the fuzz module reads it when it is imported.
    if config.getoption("--fuzz-long"):
        os.environ["PREFILLKIT_FUZZ_LONG"] = "1"
    config.addinivalue_line(
        "markers", "slow: minutes-long run, skipped unless --run-slow or PREFILLKIT_RUN_SLOW=1"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = config.getoption("--run-slow") or os.environ.get("PREFILLKIT_RUN_SLOW", "") not in (
        "",
        "0",
    )
    if run_slow:
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow (or PREFILLKIT_RUN_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
