"""Waiting-queue ordering policies on small hand-built queues with hand-computed orders.

Every test builds a prefix cache by hand (as tests/test_cache.py does), a queue of
requests from token ids, and checks the exact order each policy returns.
"""

from __future__ import annotations

import random

import pytest

from prefillkit.app.settings import Config
from prefillkit.cache import HostTier, KVPool, PrefixCache, check_invariants
from prefillkit.request import (
    IN_BATCH_HEAD,
    Request,
    in_batch_head_from_blocks,
    in_batch_head_from_tokens,
)
from prefillkit.sched.config import SchedulerConfig
from prefillkit.sched.interface import StepOutput
from prefillkit.sched.policy import (
    order_dfs_weight,
    order_fcfs,
    order_lof,
    order_lpm,
    order_priority,
    order_waiting,
)
from prefillkit.sched.scheduler import Scheduler

PAGE = 4


def make_cache(
    total_pages: int = 512, page_size: int = PAGE, host_pages: int | None = None
) -> PrefixCache:
    host = HostTier(host_pages) if host_pages is not None else None
    return PrefixCache(KVPool(total_pages, page_size), page_size, host)


def compute_and_insert(cache: PrefixCache, tokens: list[int]) -> None:
    """One request's prefill through the cache: match, lock, alloc, insert, unlock."""
    keys = Request.from_tokens("_", tokens, page_size=cache.page_size).keys
    m = cache.match(keys, len(keys))
    node = cache.lock(m.device_node, m.device_units)
    start = m.device_units * cache.unit_pages
    n_pages = (len(keys) - m.device_units) * cache.unit_pages
    assert cache.alloc_pages(start, n_pages) is not None
    node = cache.insert(node, keys, m.device_units, len(keys))
    cache.unlock(node)
    check_invariants(cache, [])


def seq(tag: int, n: int) -> list[int]:
    """``n`` token ids no other tag shares."""
    return [tag * 10_000 + i for i in range(n)]


def mk(
    rid: str,
    tokens: list[int],
    t: float,
    *,
    out: int = 16,
    prio: int = 0,
    page: int = PAGE,
) -> Request:
    return Request.from_tokens(
        rid, tokens, page_size=page, arrival_time=t, max_new_tokens=out, priority=prio
    )


def rids(reqs: list[Request]) -> list[str]:
    return [r.rid for r in reqs]


def policy_used(s: Scheduler, step: StepOutput) -> str:
    """The ordering policy the step's pass used (the scheduler's record of its batch)."""
    return s.state.in_flight[step.step_id].policy_used


def snapshot(cache: PrefixCache) -> tuple[object, ...]:
    return (
        list(cache.lru),
        dict(cache.index),
        cache.evictable_pages,
        cache.protected_pages,
        list(cache.pool.free),
    )


# ---------------------------------------------------------------- fcfs / lof / priority
def test_fcfs_is_arrival_order() -> None:
    cache = make_cache()
    compute_and_insert(cache, seq(1, 40))
    q = [mk("a", seq(2, 8), 0.0), mk("b", seq(1, 40) + seq(3, 4), 1.0), mk("c", seq(4, 8), 2.0)]
    assert rids(order_fcfs(q)) == ["a", "b", "c"]
    order, used = order_waiting(q, "fcfs", cache)
    assert (rids(order), used) == (["a", "b", "c"], "fcfs")


def test_lof_longest_output_first_ties_by_arrival() -> None:
    q = [
        mk("a", seq(1, 8), 0.0, out=10),
        mk("b", seq(2, 8), 1.0, out=300),
        mk("c", seq(3, 8), 2.0, out=10),
        mk("d", seq(4, 8), 3.0, out=50),
    ]
    before = list(q)
    assert rids(order_lof(q)) == ["b", "d", "a", "c"]
    assert q == before  # not sorted in place
    order, used = order_waiting(q, "lof", make_cache())
    assert (rids(order), used) == (["b", "d", "a", "c"], "lof")


def _prio_queue() -> list[Request]:
    return [
        mk("a", seq(1, 8), 0.0, prio=1, out=10),
        mk("b", seq(2, 8), 1.0, prio=5, out=10),
        mk("c", seq(3, 8), 2.0, prio=1, out=90),
        mk("d", seq(4, 8), 3.0, prio=5, out=40),
        mk("e", seq(5, 8), 4.0, prio=3, out=10),
    ]


def test_priority_high_values_first_then_arrival() -> None:
    q = _prio_queue()
    assert rids(order_priority(q, low_values_first=False)) == ["b", "d", "e", "a", "c"]


def test_priority_low_values_first_then_arrival() -> None:
    q = _prio_queue()
    assert rids(order_priority(q, low_values_first=True)) == ["a", "c", "e", "b", "d"]


def test_priority_with_lof_breaks_ties_by_longest_output() -> None:
    q = _prio_queue()
    assert rids(order_priority(q, low_values_first=False, lof=True)) == ["d", "b", "e", "c", "a"]
    order, used = order_waiting(q, "lof", make_cache(), priority=True)
    assert (rids(order), used) == (["d", "b", "e", "c", "a"], "lof")
    order, used = order_waiting(
        q, "fcfs", make_cache(), priority=True, low_priority_values_first=True
    )
    assert (rids(order), used) == (["a", "c", "e", "b", "d"], "fcfs")


def test_priority_ignores_arrival_order_of_the_list() -> None:
    q = [mk("late", seq(1, 8), 5.0, prio=2), mk("early", seq(2, 8), 1.0, prio=2)]
    assert rids(order_priority(q, low_values_first=False)) == ["early", "late"]


# ---------------------------------------------------------------- lpm
def test_lpm_longest_device_match_first() -> None:
    cache = make_cache()
    p = seq(1, 40)
    compute_and_insert(cache, p)  # 10 pages
    compute_and_insert(cache, seq(2, 16))  # 4 pages
    q = [
        mk("a", seq(3, 48), 0.0),  # match 0
        mk("b", p + seq(4, 8), 1.0),  # match 40
        mk("c", seq(2, 16) + seq(5, 20), 2.0),  # match 16
        mk("d", p[:20] + seq(6, 20), 3.0),  # match 20
        mk("e", p[:20] + seq(7, 20), 4.0),  # match 20 (tie with d: arrival order)
    ]
    before = snapshot(cache)
    order, used = order_waiting(q, "lpm", cache)
    assert used == "lpm"
    assert rids(order) == ["b", "d", "e", "c", "a"]
    assert snapshot(cache) == before  # ordering never mutates the cache
    check_invariants(cache, [])


def test_lpm_match_is_capped_one_token_short_of_the_prompt() -> None:
    cache = make_cache()
    compute_and_insert(cache, seq(1, 40))
    # Fully cached 40-token prompt: at most 36 tokens (9 pages) can match.
    full = mk("full", seq(1, 40), 0.0)
    longer = mk("longer", seq(1, 40) + seq(2, 4), 1.0)  # 40 tokens match
    assert rids(order_lpm([full, longer], cache)) == ["longer", "full"]


def test_lpm_counts_host_hits() -> None:
    cache = make_cache(total_pages=16, host_pages=64)
    h = seq(1, 24)
    compute_and_insert(cache, h)  # 6 pages, written through to host
    assert cache.evict_tokens(10_000) == 6  # now host only
    compute_and_insert(cache, seq(2, 20))  # 5 device pages
    m = cache.match(Request.from_tokens("x", [*h, 1], page_size=PAGE).keys, 6)
    assert (m.device_units, m.host_units) == (0, 6)
    q = [
        mk("dev20", seq(2, 20) + seq(3, 20), 0.0),  # device 20
        mk("host24", h + seq(4, 20), 1.0),  # host 24
        mk("none", seq(5, 40), 2.0),
    ]
    assert rids(order_lpm(q, cache)) == ["host24", "dev20", "none"]


def test_lpm_deprioritises_short_matches_sharing_a_waiting_prefix() -> None:
    cache = make_cache()
    compute_and_insert(cache, seq(9, 48))
    s = seq(1, 32)  # a new 32-token prefix no cache holds
    q = [
        mk("x1", s + seq(2, 8), 0.0),  # computes s first
        mk("y", seq(3, 40), 1.0),
        mk("x2", s + seq(4, 8), 2.0),  # shares 32 tokens with x1: deprioritised
        mk("near", s[:28] + seq(5, 12), 3.0),  # shares only 28 tokens: not deprioritised
        mk("x3", s + seq(6, 8), 4.0),  # deprioritised
        mk("warm", seq(9, 48) + seq(7, 4), 5.0),  # 48 matched
    ]
    assert rids(order_lpm(q, cache)) == ["warm", "x1", "y", "near", "x2", "x3"]


def test_lpm_in_batch_check_threshold_is_32_matched_tokens() -> None:
    cache = make_cache()
    c = seq(1, 36)
    compute_and_insert(cache, c)
    q = [
        mk("u1", c[:32] + seq(2, 12), 0.0),  # match 32 (<= 32): checked, first of its prefix
        mk("u2", c[:32] + seq(3, 12), 1.0),  # match 32, shares 32 tokens with u1
        mk("u3", c + seq(4, 8), 2.0),  # match 36 > 32: never deprioritised
        mk("u4", c[:32] + seq(5, 2), 3.0),  # match 32, shares u1's 32 tokens
    ]
    assert rids(order_lpm(q, cache)) == ["u3", "u1", "u2", "u4"]


def test_lpm_in_batch_check_with_page_size_one() -> None:
    cache = make_cache(page_size=1)
    s = list(range(1000, 1032))
    q = [
        mk("a", [*s, 1, 2], 0.0, page=1),
        mk("b", [*s[:31], 7, 8, 9], 1.0, page=1),  # shares 31 tokens only
        mk("c", [*s, 3], 2.0, page=1),  # shares 32 tokens: deprioritised
        mk("d", [5, 6, 7], 3.0, page=1),  # too short to share 32 tokens
    ]
    assert rids(order_lpm(q, cache)) == ["a", "b", "d", "c"]


def mk_head(rid: str, tokens: list[int], t: float, page: int) -> Request:
    """A request built with its in-batch head (the first 32 tokens), as upstream compares."""
    r = mk(rid, tokens, t, page=page)
    r.extra[IN_BATCH_HEAD] = in_batch_head_from_tokens(tokens)
    return r


def test_lpm_in_batch_deprioritises_prompts_sharing_32_tokens_at_page_64() -> None:
    """Upstream matches a waiting prompt token by token against the earlier ones: two
    prompts sharing 40 tokens share >= 32, whatever the page size (issue 14, item 5)."""
    cache = make_cache(page_size=64)
    s = seq(1, 40)
    q = [
        mk_head("a", s + seq(2, 100), 0.0, 64),
        mk_head("b", s + seq(3, 100), 1.0, 64),  # shares 40 tokens: deprioritised
        mk_head("c", s[:31] + seq(4, 100), 2.0, 64),  # shares 31: not
        mk_head("d", seq(5, 20), 3.0, 64),  # shorter than 32 tokens: never
    ]
    assert rids(order_lpm(q, cache)) == ["a", "c", "d", "b"]
    # Without its head a request falls back to its first key (64 tokens here): the
    # 40-token share goes unseen, a 64-token share is still caught.
    q = [mk("a", s + seq(2, 100), 0.0, page=64), mk("b", s + seq(3, 100), 1.0, page=64)]
    assert rids(order_lpm(q, cache)) == ["a", "b"]
    q.append(mk("e", s + seq(2, 100)[:24] + seq(6, 50), 2.0, page=64))  # shares 64 with a
    q.insert(0, mk("f", seq(7, 70), -1.0, page=64))
    assert rids(order_lpm(q, cache)) == ["f", "a", "b", "e"]


def test_in_batch_head_from_blocks_names_the_first_32_tokens() -> None:
    assert in_batch_head_from_blocks([1, 2, 3], 48, 16) == in_batch_head_from_blocks(
        [1, 2, 9], 48, 16
    )
    assert in_batch_head_from_blocks([1, 2], 40, 16) != in_batch_head_from_blocks([1, 5], 40, 16)
    assert in_batch_head_from_blocks([1], 30, 512) is None  # shorter than 32 tokens
    assert in_batch_head_from_blocks([7, 8], 1000, 512) == in_batch_head_from_blocks(
        [7, 9], 1000, 512
    )
    assert in_batch_head_from_tokens(list(range(31))) is None


def test_lpm_in_batch_check_uses_the_device_match_as_upstream() -> None:
    """The <= 32-token check reads the device prefix (upstream ``req.prefix_len``): a
    request with a long host hit but no device match is still checked."""
    cache = make_cache(total_pages=16, host_pages=64)
    h = seq(1, 40)
    compute_and_insert(cache, h)  # 10 pages written through to host
    assert cache.evict_tokens(10_000) == 10  # host only
    q = [
        mk("h1", h + seq(2, 8), 0.0),  # host 40, device 0: checked, first of its head
        mk("h2", h + seq(3, 8), 1.0),  # host 40, device 0: shares 32 tokens -> last
        mk("cold", seq(4, 40), 2.0),
    ]
    assert rids(order_lpm(q, cache)) == ["h1", "cold", "h2"]


def test_lpm_falls_back_to_fcfs_above_the_queue_limit() -> None:
    cache = make_cache()
    compute_and_insert(cache, seq(1, 40))
    q = [mk("cold", seq(2, 40), 0.0), mk("warm", seq(1, 40) + seq(3, 4), 1.0)]
    lpm = ["warm", "cold"]
    fcfs = ["cold", "warm"]
    order, used = order_waiting(q, "lpm", cache, lpm_fallback_queue_len=2)
    assert (rids(order), used) == (lpm, "lpm")  # len == limit: still lpm
    order, used = order_waiting(q, "lpm", cache, lpm_fallback_queue_len=1)
    assert (rids(order), used) == (fcfs, "fcfs")  # len > limit: fcfs
    order, used = order_waiting(q, "lpm", cache, lpm_fallback_queue_len=None)
    assert (rids(order), used) == (lpm, "lpm")  # None: never falls back
    # dfs-weight has no fallback
    _, used = order_waiting(q, "dfs-weight", cache, lpm_fallback_queue_len=1)
    assert used == "dfs-weight"


def test_lpm_fallback_through_the_scheduler_upstream_128() -> None:
    # Default off (matching is cheap); upstream's 128 is one flag away.
    assert Config().lpm_fallback_queue_len is None
    for n, expect in ((128, "lpm"), (129, "fcfs")):
        cfg = Config(
            page_size=PAGE,
            schedule_policy="lpm",
            chunked_prefill_size=None,
            lpm_fallback_queue_len=128,
        )
        s = Scheduler(cfg.scheduler_config(), 4096, PAGE)
        for i in range(n):
            assert s.add_request(mk(f"r{i}", seq(i + 1, 8), float(i), out=4)) is None
        assert policy_used(s, s.schedule(1000.0)) == expect
        s.check()
    cfg = Config(page_size=PAGE, schedule_policy="lpm")  # the default: never
    s = Scheduler(cfg.scheduler_config(), 4096, PAGE)
    for i in range(300):
        s.add_request(mk(f"r{i}", seq(i + 1, 8), float(i), out=4))
    assert policy_used(s, s.schedule(1000.0)) == "lpm"


def test_unknown_policy_raises() -> None:
    with pytest.raises(ValueError, match="unknown schedule policy"):
        order_waiting([], "hrrn", make_cache())


# ---------------------------------------------------------------- dfs-weight
def _dfs_tree() -> tuple[PrefixCache, list[int], list[int], list[int], list[int]]:
    """root -> A(4 pages) -> {B(2), C(2)}; root -> D(4 pages)."""
    cache = make_cache()
    a, b, c, d = seq(1, 16), seq(2, 8), seq(3, 8), seq(4, 16)
    compute_and_insert(cache, a + b)
    compute_and_insert(cache, a + c)
    compute_and_insert(cache, d)
    return cache, a, b, c, d


def test_dfs_weight_heaviest_subtree_first_node_after_children() -> None:
    cache, a, b, c, d = _dfs_tree()
    q = [
        mk("r1", a + c + seq(10, 4), 0.0),  # ends at C
        mk("r2", d + seq(11, 4), 1.0),  # ends at D
        mk("r3", a + b + seq(12, 4), 2.0),  # ends at B
        mk("r4", a + c + seq(13, 4), 3.0),  # ends at C
        mk("r5", a + seq(14, 8), 4.0),  # ends at A
        mk("r6", seq(15, 20), 5.0),  # no match: root
        mk("r7", d + seq(16, 4), 6.0),  # ends at D
    ]
    # weights: C=2, B=1, A=4 (C+B+r5), D=2, root=7.
    # root: A (4) before D (2); A: C (2) before B (1), then A's own r5; root's r6 last.
    before = snapshot(cache)
    order, used = order_waiting(q, "dfs-weight", cache)
    assert used == "dfs-weight"
    assert rids(order) == ["r1", "r4", "r3", "r5", "r2", "r7", "r6"]
    assert snapshot(cache) == before


def test_dfs_weight_ties_keep_the_tree_children_order_not_the_queue_order() -> None:
    """Upstream sorts a node's children by weight, stable on ``node.children`` (creation
    order): equal-weight siblings never follow the queue."""
    cache, a, b, c, d = _dfs_tree()  # root's children: A then D; A's: B then C
    q = [
        mk("b1", a + b + seq(10, 4), 0.0),  # B weight 1, arrived first
        mk("d1", d + seq(11, 4), 1.0),  # D weight 2
        mk("c1", a + c + seq(12, 4), 2.0),  # C weight 1 (tie with B: B, created first)
        mk("d2", d + seq(13, 4), 3.0),
    ]
    # root: A (2) vs D (2) tie -> A (created first).
    assert rids(order_dfs_weight(q, cache)) == ["b1", "c1", "d1", "d2"]
    q2 = [q[1], q[2], q[0], q[3]]  # d1 and c1 now wait longest: still A, then B first
    assert rids(order_dfs_weight(q2, cache)) == ["b1", "c1", "d1", "d2"]
    q3 = [q[0], q[1], q[3]]  # D (2) outweighs A (1)
    assert rids(order_dfs_weight(q3, cache)) == ["d1", "d2", "b1"]


def test_dfs_weight_tie_order_survives_splits_and_follows_recreation() -> None:
    """A split parent takes its child's slot among the siblings; a node dropped and
    created again goes last (as a dict re-insert does upstream)."""
    cache = make_cache(total_pages=12)
    x, y = seq(1, 16), seq(2, 16)
    compute_and_insert(cache, x)  # root: X then Y
    compute_and_insert(cache, y)
    compute_and_insert(cache, x[:8] + seq(3, 8))  # splits X at 2 pages: X' keeps X's slot
    q = [mk("y", y + seq(4, 4), 0.0), mk("x", x[:8] + seq(5, 8), 1.0)]
    assert rids(order_dfs_weight(q, cache)) == ["x", "y"]
    # Evict everything and cache Y, then X again: root's children are now Y then X.
    cache.evict_tokens(10_000)
    compute_and_insert(cache, y)
    compute_and_insert(cache, x)
    q = [mk("x", x + seq(6, 4), 0.0), mk("y", y + seq(7, 4), 1.0)]
    assert rids(order_dfs_weight(q, cache)) == ["y", "x"]
    check_invariants(cache, [])


def test_dfs_weight_host_hit_sits_at_its_device_node() -> None:
    """Upstream groups a request by ``last_node`` (device match): a host hit below it
    neither adds weight to the host nodes nor moves the request."""
    cache = make_cache(total_pages=16, host_pages=64)
    h = seq(1, 16)
    compute_and_insert(cache, h)  # written through to host
    assert cache.evict_tokens(10_000) == 4  # host only now
    d = seq(2, 16)
    compute_and_insert(cache, d)
    q = [
        mk("d1", d + seq(3, 4), 0.0),
        mk("h1", h + seq(4, 4), 1.0),  # host hit: at the root
        mk("h2", h + seq(5, 4), 2.0),  # host hit: at the root
    ]
    # root's own requests come after its children's: D (1) first, then h1, h2.
    assert rids(order_dfs_weight(q, cache)) == ["d1", "h1", "h2"]


def test_dfs_weight_match_ending_inside_a_node_comes_after_deeper_matches() -> None:
    cache = make_cache()
    path = seq(1, 24)  # one path-compressed node of 6 pages
    compute_and_insert(cache, path)
    q = [
        mk("half", path[:12] + seq(2, 8), 0.0),  # ends inside the node (3 pages)
        mk("full", path + seq(3, 4), 1.0),  # ends at its end
        mk("mid", path[:16] + seq(4, 4), 2.0),  # 4 pages
    ]
    # Upstream's match splits the node: [0,3) -> [3,4) -> [4,6). Children first.
    assert rids(order_dfs_weight(q, cache)) == ["full", "mid", "half"]
    assert len(cache.index) == 6 and cache.root.children  # and nothing was split
    check_invariants(cache, [])


def test_policies_do_not_mutate_queue_or_cache() -> None:
    cache, a, b, c, d = _dfs_tree()
    q = [mk(f"r{i}", t + seq(20 + i, 4), float(i)) for i, t in enumerate((a, d, a + b, a + c))]
    before_q = list(q)
    before_c = snapshot(cache)
    for policy in ("fcfs", "lpm", "dfs-weight", "lof"):
        order_waiting(q, policy, cache)
    order_waiting(q, "fcfs", cache, priority=True)
    assert q == before_q
    assert snapshot(cache) == before_c


# ---------------------------------------------------------------- random
def test_random_policy_is_a_seeded_deterministic_shuffle() -> None:
    """Upstream ``random`` shuffles the queue; prefillkit's is a function of the seed:
    one generator per scheduler, so a run's passes repeat exactly."""
    q = [mk(f"r{i}", seq(i + 1, 8), float(i)) for i in range(30)]

    def passes(seed: int, n: int = 3) -> list[list[str]]:
        cache = make_cache()
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            order, used = order_waiting(q, "random", cache, rng=rng)
            assert used == "random"
            out.append(rids(order))
        return out

    a = passes(7)
    assert a == passes(7)  # same seed, same sequence of passes
    assert a != passes(8)
    assert a[0] != a[1]  # each pass draws anew
    for order in a:
        assert sorted(order) == sorted(rids(q)) and order != rids(q)
    assert rids(q) == [f"r{i}" for i in range(30)]  # the queue itself is not mutated


def test_random_policy_runs_through_the_scheduler() -> None:
    """The scheduler's passes draw from its own generator, seeded with its ``seed``."""

    def admitted(seed: int) -> list[str]:
        cfg = SchedulerConfig(
            page_size=PAGE,
            schedule_policy="random",
            chunked_prefill_size=None,
            max_running_requests=5,
            seed=seed,
        )
        s = Scheduler(cfg, 4096, PAGE)
        for i in range(20):
            assert s.add_request(mk(f"r{i}", seq(i + 1, 8), float(i), out=4)) is None
        step = s.schedule(1.0)
        assert policy_used(s, step) == "random"
        s.check()
        return [r.rid for r in step.reqs]

    assert admitted(3) == admitted(3) != admitted(4)


def test_loaded_requests_carry_their_in_batch_head() -> None:
    # Trace/generator requests get extra["in_batch_head"] on load, so LPM's in-batch
    # check is exact at page 64: two prompts sharing 40 tokens have the same head.
    from prefillkit.workloads.record import TraceRecord, to_request

    shared = list(range(40))
    a = TraceRecord("a", 0.0, 100, 1, None, None, tuple(shared + [1000 + i for i in range(60)]))
    b = TraceRecord("b", 0.0, 100, 1, None, None, tuple(shared + [2000 + i for i in range(60)]))
    c = TraceRecord("c", 0.0, 100, 1, None, None, tuple(range(5000, 5100)))
    ra, rb, rc = (to_request(r, 64) for r in (a, b, c))
    assert ra.extra["in_batch_head"] == rb.extra["in_batch_head"] != rc.extra["in_batch_head"]
    blocks = TraceRecord("d", 0.0, 1024, 1, (7, 8), 512, None)
    assert "in_batch_head" in to_request(blocks, 64).extra


def test_random_policy_follows_the_config_seed() -> None:
    from prefillkit.app.settings import Config
    from prefillkit.sim.engine import simulate
    from prefillkit.workloads.generators import generated_shared_prefix
    from prefillkit.workloads.record import to_request

    records = generated_shared_prefix(
        num_groups=4, prompts_per_group=8, system_prompt_len=64, question_len=32, output_len=4
    )

    def order(seed: int) -> list[str]:
        cfg = Config(
            schedule_policy="random", seed=seed, max_prefill_tokens=256, max_total_tokens=100_000
        )
        result = simulate(cfg.sim_settings(), [to_request(r, 1) for r in records])
        return [
            r.rid for r in sorted(result.requests, key=lambda r: r.metrics.first_token_time or 0.0)
        ]

    assert order(1) == order(1)
    assert order(1) != order(2)
