"""The routers (sim/routers): each decision as a table of small hand-built fleet views,
each formula at one hand-computed point, the settings' one-line errors, and the stateful
routers' order of calls and determinism. Sources of every rule: docs/routers.md."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import pytest

from prefillkit.cache.events import BlockStored
from prefillkit.sched.config import ConfigError
from prefillkit.sim.routers import decisions as d
from prefillkit.sim.routers.config import PARAMETERS, ROUTERS, RouterConfig
from prefillkit.sim.routers.prefix_index import ExactPrefixIndex
from prefillkit.sim.routers.router import (
    CacheAwareRouter,
    KvCostRouter,
    LeastLoadRouter,
    PowerOfTwoRouter,
    RoundRobinRouter,
    WeightedRouter,
    build_router,
)
from prefillkit.sim.routers.view import FleetView, RouteRequest

KT = 16


def view(
    n: int = 3,
    *,
    running: Sequence[int] | None = None,
    waiting: Sequence[int] | None = None,
    queued: Sequence[int] | None = None,
    active: Sequence[int] | None = None,
    total: Sequence[int] | None = None,
    matched: Sequence[int] | None = None,
) -> FleetView:
    """A fleet view of ``n`` instances, every field 0 (pools of 100 blocks) unless given."""
    z = [0] * n
    return FleetView(
        list(running or z),
        list(waiting or z),
        list(queued or z),
        list(active or z),
        list(total or [100] * n),
        list(matched or z),
    )


def request(prompt: int = 64, units: int | None = None, keys: Sequence[int] = ()) -> RouteRequest:
    """A request of ``prompt`` tokens; keys 1..units (``prompt // KT`` by default)."""
    if not keys:
        keys = range(1, (prompt // KT if units is None else units) + 1)
    return RouteRequest("r", prompt, tuple(keys), KT)


# ------------------------------------------------------------------ RouterConfig
def test_defaults_are_the_cited_ones() -> None:
    cfg = RouterConfig("cache-aware")
    assert (cfg.cache_threshold, cfg.balance_abs_threshold, cfg.balance_rel_threshold) == (
        0.3,
        64,
        1.5,
    )
    assert (cfg.max_tree_size, cfg.eviction_interval_s) == (2**26, 120.0)
    assert (cfg.overlap_score_weight, cfg.temperature) == (1.0, 0.0)
    assert (cfg.prefix_weight, cfg.queue_weight, cfg.kv_usage_weight) == (3.0, 2.0, 2.0)
    assert RouterConfig().name == "round-robin"


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("round-robin", "none"),
        ("least-load", "none"),
        ("power-of-two", "none"),
        ("cache-aware", "approximate"),
        ("kv-cost", "exact"),
        ("weighted", "exact"),
    ],
)
def test_default_prefix_source(name: str, source: str) -> None:
    cfg = RouterConfig(name)
    assert cfg.prefix_source == cfg.source == source
    assert build_router(cfg, 2).prefix_source == source


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("cache-aware", "exact"),
        ("kv-cost", "approximate"),
        ("weighted", "approximate"),
    ],
)
def test_explicit_prefix_source(name: str, source: str) -> None:
    assert RouterConfig(name, prefix_source=source).source == source


def test_weighted_without_prefix_weight_may_read_no_prefix() -> None:
    assert RouterConfig("weighted", prefix_source="none", prefix_weight=0).source == "none"


def test_ints_for_floats_are_stored_as_floats() -> None:
    cfg = RouterConfig("kv-cost", temperature=1, overlap_score_weight=2)
    assert isinstance(cfg.temperature, float) and cfg.overlap_score_weight == 2.0


BAD: list[tuple[dict[str, Any], str]] = [
    (
        {"name": "cache_aware"},
        "router.name: unknown router 'cache_aware' (did you mean 'cache-aware'?)",
    ),
    ({"name": "x", "cache_threshold": 2}, "router.name:"),
    ({"cache_threshold": 1.5}, "router.cache_threshold: must be in [0, 1], got 1.5"),
    ({"cache_threshold": -0.1}, "router.cache_threshold: must be in [0, 1]"),
    ({"cache_threshold": math.nan}, "router.cache_threshold: must be finite"),
    ({"cache_threshold": "0.3"}, "router.cache_threshold: must be a number"),
    ({"balance_abs_threshold": -1}, "router.balance_abs_threshold: must be >= 0, got -1"),
    ({"balance_abs_threshold": 1.5}, "router.balance_abs_threshold: must be an integer"),
    ({"balance_abs_threshold": True}, "router.balance_abs_threshold: must be an integer"),
    ({"balance_rel_threshold": 0}, "router.balance_rel_threshold: must be > 0, got 0.0"),
    ({"max_tree_size": -5}, "router.max_tree_size: must be >= 0, got -5"),
    ({"eviction_interval_s": -1}, "router.eviction_interval_s: must be >= 0"),
    ({"eviction_interval_s": math.inf}, "router.eviction_interval_s: must be finite"),
    ({"overlap_score_weight": -1}, "router.overlap_score_weight: must be >= 0"),
    ({"temperature": -0.5}, "router.temperature: must be >= 0, got -0.5"),
    ({"prefix_weight": -1}, "router.prefix_weight: must be >= 0"),
    ({"queue_weight": -1}, "router.queue_weight: must be >= 0"),
    ({"kv_usage_weight": -1}, "router.kv_usage_weight: must be >= 0"),
    ({"seed": 1.0}, "router.seed: must be an integer"),
    ({"prefix_source": "exakt"}, "router.prefix_source: unknown source 'exakt' (did you mean"),
    ({"name": "round-robin", "prefix_source": "exact"}, "router.prefix_source: round-robin"),
    ({"name": "kv-cost", "prefix_source": "none"}, "router.prefix_source: kv-cost reads"),
    ({"name": "cache-aware", "prefix_source": "none"}, "router.prefix_source: cache-aware"),
    ({"name": "weighted", "prefix_source": "none"}, "router.prefix_source: weighted reads"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD, ids=[str(k) for k, _ in BAD])
def test_bad_parameter_is_one_line_naming_it(kwargs: dict[str, Any], message: str) -> None:
    kwargs = {"name": "cache-aware", **kwargs}
    with pytest.raises(ConfigError) as err:
        RouterConfig(**kwargs)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(message), text


def test_field_names_are_the_parameters() -> None:
    assert RouterConfig.field_names() == PARAMETERS
    assert "name" not in PARAMETERS
    assert {"prefix_source", "cache_threshold", "temperature", "seed"} <= set(PARAMETERS)


def test_describe_is_one_line_with_what_the_router_reads() -> None:
    assert RouterConfig("round-robin").describe() == "round-robin (prefix none)"
    text = RouterConfig("kv-cost", temperature=0.5).describe()
    assert text == "kv-cost (prefix exact; overlap_score_weight=1 temperature=0.5 seed=0)"
    approx = RouterConfig("weighted", prefix_source="approximate").describe()
    assert "max_tree_size=67108864" in approx and "\n" not in approx


# ------------------------------------------------------------------ load only
@pytest.mark.parametrize(("counter", "n", "expected"), [(0, 3, 0), (2, 3, 2), (3, 3, 0), (7, 4, 3)])
def test_round_robin(counter: int, n: int, expected: int) -> None:
    assert d.round_robin(counter, n) == expected


@pytest.mark.parametrize(
    ("queued", "running", "expected"),
    [
        ([30, 10, 20], [0, 0, 0], 1),  # fewest owed prefill tokens
        ([10, 10, 20], [5, 2, 0], 1),  # tie on tokens: fewer running requests
        ([10, 10, 10], [2, 2, 2], 0),  # full tie: the lowest index
        ([0, 5, 0], [3, 0, 1], 2),
    ],
)
def test_least_load(queued: list[int], running: list[int], expected: int) -> None:
    assert d.least_load(view(queued=queued, running=running)) == expected


@pytest.mark.parametrize(
    ("running", "first", "second", "expected"),
    [
        ([5, 1, 3], 0, 1, 1),  # the lower load of the two drawn
        ([5, 1, 3], 2, 0, 2),
        ([4, 9, 4], 2, 0, 2),  # equal loads keep the first drawn (load1 <= load2)
        ([4, 9, 4], 0, 2, 0),
    ],
)
def test_power_of_two(running: list[int], first: int, second: int, expected: int) -> None:
    assert d.power_of_two(view(running=running), first, second) == expected


# ------------------------------------------------------------------ sglang-router cache_aware
@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ([70, 5], True),  # 65 > 64 and 70 > 7.5
        ([69, 5], False),  # 64 is not > 64
        ([200, 150], False),  # 50 <= 64
        ([300, 200], False),  # 300 is not > 1.5 * 200
        ([301, 200], True),
        ([65, 0], True),  # 65 > 0 * 1.5
    ],
)
def test_is_imbalanced(loads: list[int], expected: bool) -> None:
    assert d.is_imbalanced(loads, 64, 1.5) is expected


CACHE_AWARE = [
    # (running, matched, tree sizes, prompt, expected, why)
    ([70, 5, 6], [160, 0, 0], [0, 0, 0], 160, 1, "imbalanced: least loaded, match ignored"),
    ([69, 5, 6], [160, 0, 0], [9, 9, 9], 160, 0, "balanced, rate 1 > 0.3: longest match"),
    ([0, 0, 0], [0, 64, 48], [5, 1, 3], 160, 1, "rate 0.4 > 0.3: longest match"),
    ([0, 0, 0], [0, 48, 32], [5, 2, 3], 160, 1, "rate 0.3 is not above 0.3: smallest tree"),
    ([0, 0, 0], [0, 48, 32], [5, 7, 3], 160, 2, "rate 0.3: smallest tree"),
    ([0, 0, 0], [0, 64, 64], [5, 7, 3], 160, 1, "equal longest matches: the lowest index"),
    ([0, 0, 0], [0, 0, 0], [4, 2, 2], 160, 1, "no match: smallest tree, lowest index"),
    ([0, 0, 0], [0, 0, 0], [4, 2, 2], 0, 1, "empty prompt: rate 0"),
    ([3, 1, 1], [0, 0, 0], [0, 0, 0], 160, 0, "balanced: load plays no part"),
    ([80, 10, 10], [0, 0, 0], [0, 0, 0], 160, 1, "imbalanced: first least loaded"),
]


@pytest.mark.parametrize(
    ("running", "matched", "sizes", "prompt", "expected", "why"),
    CACHE_AWARE,
    ids=[row[-1] for row in CACHE_AWARE],
)
def test_cache_aware(
    running: list[int],
    matched: list[int],
    sizes: list[int],
    prompt: int,
    expected: int,
    why: str,
) -> None:
    v = view(running=running, matched=matched)
    assert d.cache_aware(request(prompt), v, sizes, 0.3, 64, 1.5) == expected, why


# ------------------------------------------------------------------ Dynamo KV router
def test_kv_costs_at_a_hand_computed_point() -> None:
    # prefill blocks = (queued + prompt - matched) / 16; decode blocks = active blocks
    v = view(queued=[0, 50, 200], matched=[64, 0, 32], active=[10, 2, 0])
    req = request(100, units=6)
    # w=1: 36/16 + 10 = 12.25; 150/16 + 2 = 11.375; 268/16 + 0 = 16.75
    assert d.kv_costs(req, v, 1.0) == [12.25, 11.375, 16.75]
    assert d.kv_cost(req, v, 1.0, 0.0, 0.5) == 1
    # w=2: 14.5; 20.75; 33.5: the cache weighs more than the load
    assert d.kv_costs(req, v, 2.0) == [14.5, 20.75, 33.5]
    assert d.kv_cost(req, v, 2.0, 0.0, 0.5) == 0


def test_softmax_normalisation_at_a_hand_computed_point() -> None:
    # p_i ~ exp(-(c_i - 2) / ((6 - 2) * T)): T=1 -> exp(0), exp(-0.5), exp(-1)
    probs = d.softmax_probabilities([2.0, 4.0, 6.0], 1.0)
    total = 1 + math.exp(-0.5) + math.exp(-1)
    assert probs == pytest.approx([1 / total, math.exp(-0.5) / total, math.exp(-1) / total])
    assert probs == pytest.approx([0.506480, 0.307196, 0.186324], abs=1e-6)
    # T=0.5 -> exp(0), exp(-1), exp(-2)
    assert d.softmax_probabilities([2.0, 4.0, 6.0], 0.5) == pytest.approx(
        [0.665241, 0.244728, 0.090031], abs=1e-6
    )
    assert d.softmax_probabilities([3.0, 3.0], 0.7) == [0.5, 0.5]  # equal costs: uniform


@pytest.mark.parametrize(
    ("draw", "expected"), [(0.0, 0), (0.50, 0), (0.51, 1), (0.81, 1), (0.82, 2), (0.999, 2)]
)
def test_kv_cost_softmax_draw(draw: float, expected: int) -> None:
    # costs 2, 4, 6 (queued 32, 64, 96 tokens; nothing matched, prompt 0): cumsum .506 .813 1
    v = view(queued=[32, 64, 96])
    req = RouteRequest("r", 0, (), KT)
    assert d.kv_costs(req, v, 1.0) == [2.0, 4.0, 6.0]
    assert d.kv_cost(req, v, 1.0, 1.0, draw) == expected


def test_softmax_pick_falls_back_to_the_last_when_rounding_leaves_it_short() -> None:
    assert d.softmax_pick([0.3, 0.3, 0.3999999], 0.99999999) == 2


@pytest.mark.parametrize(
    ("sizes", "draw", "expected"),
    [
        ([9, 4, 7], 0.0, 1),  # tied costs: the smallest tree
        ([9, 4, 4], 0.0, 1),  # ... the first smallest
        ([5, 5, 5], 0.0, 0),  # equal trees: a uniform pick by the draw
        ([5, 5, 5], 0.5, 1),
        ([5, 5, 5], 0.9, 2),
        (None, 0.7, 2),  # no tree sizes: the draw
    ],
)
def test_kv_cost_ties_at_temperature_zero(
    sizes: list[int] | None, draw: float, expected: int
) -> None:
    assert d.kv_cost(request(), view(), 1.0, 0.0, draw, sizes) == expected


# ------------------------------------------------------------------ llm-d weighted scorers
def test_scorers_at_a_hand_computed_point() -> None:
    assert d.queue_scores([0, 4, 2]) == [1.0, 0.0, 0.5]  # (max - q) / (max - min)
    assert d.queue_scores([3, 3]) == [1.0, 1.0]  # all equal: neutral 1
    assert d.kv_usage_scores([10, 90, 0, 5], [100, 100, 100, 0]) == pytest.approx([0.9, 0.1, 1, 0])
    v = view(matched=[0, 64, 32])
    assert d.prefix_scores(request(64), v) == [0.0, 1.0, 0.5]  # matched / request blocks
    assert d.prefix_scores(RouteRequest("r", 8, (), KT), v) == [0.0, 0.0, 0.0]


def test_weighted_at_a_hand_computed_point() -> None:
    # queue [1, 0, .5]; kv [.9, .1, 1]; prefix [0, 1, 0]
    v = view(waiting=[0, 4, 2], active=[10, 90, 0], matched=[0, 64, 0])
    req = request(64)
    # 3*0 + 2*1 + 2*.9 = 3.8; 3*1 + 0 + 2*.1 = 3.2; 0 + 2*.5 + 2*1 = 3.0
    assert d.weighted_scores(req, v, 3.0, 2.0, 2.0) == pytest.approx([3.8, 3.2, 3.0])
    assert d.weighted(req, v, 3.0, 2.0, 2.0, 0.5) == 0  # the prefix holder loses to load
    assert d.weighted(req, v, 5.0, 2.0, 2.0, 0.5) == 1  # 5.2 > 3.8: it wins


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 0), (0.34, 1), (0.67, 2), (0.99, 2)])
def test_weighted_ties_are_a_uniform_draw(draw: float, expected: int) -> None:
    assert d.weighted(request(), view(), 3.0, 2.0, 2.0, draw) == expected


# ------------------------------------------------------------------ the router classes
def test_round_robin_router_cycles() -> None:
    r = build_router(RouterConfig("round-robin"), 3)
    assert isinstance(r, RoundRobinRouter)
    got = []
    for _ in range(5):
        got.append(r.choose(request(), view(), 0.0))
        r.routed(request(), got[-1], 0.0)
    assert got == [0, 1, 2, 0, 1]


def _sequence(cfg: RouterConfig, n: int = 8, count: int = 40) -> list[int]:
    r = build_router(cfg, n)
    v = view(n, running=list(range(n)), waiting=[i % 3 for i in range(n)])
    out = []
    for _ in range(count):
        out.append(r.choose(request(), v, 0.0))
        r.routed(request(), out[-1], 0.0)
    return out


@pytest.mark.parametrize("name", ["power-of-two", "kv-cost", "weighted"])
def test_random_routers_are_a_function_of_the_seed(name: str) -> None:
    cfg = RouterConfig(name, temperature=1.0) if name == "kv-cost" else RouterConfig(name)
    assert _sequence(cfg) == _sequence(cfg)
    other = dataclasses.replace(cfg, seed=7)
    assert _sequence(cfg) != _sequence(other)


def test_power_of_two_router_draws_two_distinct_instances() -> None:
    r = build_router(RouterConfig("power-of-two", seed=3), 2)
    assert isinstance(r, PowerOfTwoRouter)
    # two instances: the pair is always both, so the less loaded one always wins
    assert {r.choose(request(), view(2, running=[4, 1]), 0.0) for _ in range(20)} == {1}
    assert build_router(RouterConfig("power-of-two"), 1).choose(request(), view(1), 0.0) == 0


def test_build_router_classes() -> None:
    classes = [
        RoundRobinRouter,
        LeastLoadRouter,
        PowerOfTwoRouter,
        CacheAwareRouter,
        KvCostRouter,
        WeightedRouter,
    ]
    for name, cls in zip(ROUTERS, classes, strict=True):
        r = build_router(RouterConfig(name), 4)
        assert type(r) is cls and r.name == name
    with pytest.raises(ConfigError, match=r"^router: needs at least one instance, got 0$"):
        build_router(RouterConfig("least-load"), 0)


def test_only_the_approximate_source_believes() -> None:
    for name in ROUTERS:
        r = build_router(RouterConfig(name), 2)
        units = r.believed_units(request(), 0.0)
        assert (units is not None) == (r.prefix_source == "approximate"), name


def test_cache_aware_router_follows_its_own_history() -> None:
    r = build_router(RouterConfig("cache-aware"), 3)
    a = request(64, keys=(1, 2, 3, 4))
    b = request(64, keys=(9, 8, 7, 6))

    def route(req: RouteRequest, now: float, running: Sequence[int] = (0, 0, 0)) -> int:
        units = r.believed_units(req, now)
        assert units is not None
        v = view(running=running, matched=[min(u * KT, req.prompt_tokens) for u in units])
        i = r.choose(req, v, now)
        r.routed(req, i, now)
        return i

    assert route(a, 0.0) == 0  # nothing matched: smallest tree (all 0), lowest index
    assert r.tree_sizes() == [4, 0, 0]
    assert route(b, 1.0) == 1  # no match: the smallest tree is now 1's
    assert route(a, 2.0) == 0  # a fully matched on 0: rate 1 > 0.3
    assert route(a, 3.0, running=(100, 0, 0)) == 1  # imbalanced: least loaded (lowest index)
    assert r.believed_units(a, 4.0) == [4, 4, 0]  # the router inserted it there too


def test_cache_aware_router_stamps_the_match_it_did_not_follow() -> None:
    r = build_router(RouterConfig("cache-aware"), 2, key_tokens=KT)
    assert isinstance(r, CacheAwareRouter) and r.approx is not None
    r.routed(request(64, keys=(1, 2, 3, 4)), 0, 0.0)
    r.routed(request(64, keys=(5, 6, 7, 8, 9, 10, 11, 12)), 1, 1.0)
    long = request(160, keys=(1, 2, 3, 30, 31, 32, 33, 34, 35, 36))  # rate 48/160 = 0.3
    units = r.believed_units(long, 5.0)
    assert units == [3, 0]
    v = view(2, matched=[48, 0])
    assert r.choose(long, v, 5.0) == 0  # smallest tree: 0 holds 4 units, 1 holds 8
    r.routed(long, 0, 5.0)
    assert r.approx.last_access(3, 0) == 5.0  # the insert stamped the path through 3
    assert r.approx.last_access(4, 0) == 0.0  # ... not the branch beside it
    r2 = build_router(RouterConfig("cache-aware", cache_threshold=0.5), 2, key_tokens=KT)
    assert r2.approx is not None
    r2.routed(request(64, keys=(1, 2, 3, 4)), 0, 0.0)
    r2.routed(request(16, keys=(5,)), 1, 1.0)
    assert r2.approx.last_access(3, 0) == 0.0
    assert r2.choose(long, v, 5.0) == 1  # rate 0.3 <= 0.5: smallest tree, 1
    assert r2.approx.last_access(3, 0) == 5.0  # the longest match was stamped all the same
    assert r2.approx.last_access(4, 0) == 0.0


def test_cache_aware_router_with_exact_source_reads_the_exact_sizes() -> None:
    exact = ExactPrefixIndex(3)
    exact.listener(0)(BlockStored((1, 2, 3), 0, "GPU"))
    exact.listener(2)(BlockStored((7,), 0, "GPU"))
    r = build_router(RouterConfig("cache-aware", prefix_source="exact"), 3, exact_index=exact)
    assert r.believed_units(request(), 0.0) is None
    assert r.tree_sizes() == [3, 0, 1]
    assert r.choose(request(64, keys=(90, 91, 92, 93)), view(), 0.0) == 1


def test_kv_cost_router_breaks_ties_by_the_exact_tree() -> None:
    exact = ExactPrefixIndex(3)
    exact.listener(0)(BlockStored((1, 2, 3), 0, "GPU"))
    exact.listener(1)(BlockStored((7,), 0, "GPU"))
    r = build_router(RouterConfig("kv-cost"), 3, exact_index=exact)
    assert r.choose(request(64, keys=(90, 91, 92, 93)), view(), 0.0) == 2  # equal costs, no tree


def test_a_request_with_another_key_unit_is_refused() -> None:
    r = build_router(RouterConfig("cache-aware"), 2, key_tokens=32)
    with pytest.raises(ConfigError, match=r"^router: request r has 16-token key units"):
        r.believed_units(request(), 0.0)
