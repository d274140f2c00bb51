"""The routers as stateful objects: each holds its counter, its RNG and its index, and
calls the pure decision of decisions.py.

The fleet calls, per arriving request, in this order:

1. :meth:`Router.believed_units` (``now``): an approximate-source router's per-instance
   matched key units from its own history (None for the other sources: the fleet fills
   ``matched_tokens`` from the exact index or with zeros), turned by the fleet into
   ``matched_tokens = min(units * key_tokens, prompt_tokens)``;
2. :meth:`Router.choose` (the view built from them): the instance;
3. :meth:`Router.routed` (that instance): the router's own history (the approximate tree
   insert).

Randomness comes from ``random.Random(cfg.seed)`` per router, drawn a fixed number of
times per decision (power-of-two: two ``randrange``; kv-cost and weighted: one
``random()``), so a run is a function of the seed.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod

from prefillkit.sched.config import ConfigError
from prefillkit.sim.routers import decisions
from prefillkit.sim.routers.config import RouterConfig
from prefillkit.sim.routers.masks import check_instances
from prefillkit.sim.routers.prefix_index import ApproximatePrefixIndex, ExactPrefixIndex
from prefillkit.sim.routers.view import FleetView, RouteRequest

__all__ = [
    "CacheAwareRouter",
    "KvCostRouter",
    "LeastLoadRouter",
    "PowerOfTwoRouter",
    "RoundRobinRouter",
    "Router",
    "WeightedRouter",
    "build_router",
]


class Router(ABC):
    """A router over ``num_instances`` instances (module docstring for the call order).

    ``exact_index``: the fleet's :class:`ExactPrefixIndex` (exact source), read for tree
    sizes (cache-aware's smallest tree, kv-cost's tie-break); ``approx``: the router's own
    :class:`ApproximatePrefixIndex` (approximate source)."""

    def __init__(
        self,
        cfg: RouterConfig,
        num_instances: int,
        exact_index: ExactPrefixIndex | None = None,
        key_tokens: int | None = None,
    ) -> None:
        check_instances(num_instances)
        self.cfg = cfg
        self.name = cfg.name
        self.prefix_source = cfg.source
        self.num_instances = num_instances
        self.exact_index = exact_index if self.prefix_source == "exact" else None
        self.approx: ApproximatePrefixIndex | None = None
        if self.prefix_source == "approximate" and key_tokens is not None:
            self.approx = self._new_approx(key_tokens)
        self.rng = random.Random(cfg.seed)

    @abstractmethod
    def choose(self, req: RouteRequest, view: FleetView, now: float) -> int:
        """The instance for ``req`` arriving at ``now`` (``view``: the fleet as seen)."""

    def routed(self, req: RouteRequest, index: int, now: float) -> None:
        """``req`` went to instance ``index``: an approximate source records it (sglang-
        router inserts the request into the chosen tenant's tree, in both branches)."""
        if self.prefix_source == "approximate":
            self._approx(req).insert(req.keys, index, now)

    def believed_units(self, req: RouteRequest, now: float) -> list[int] | None:
        """Approximate source: per instance, the leading key units of ``req`` the router's
        tree says it holds (read only: no stamps). None for the exact and "none" sources."""
        if self.prefix_source != "approximate":
            return None
        return self._approx(req).matched_units(req.keys, now, touch=False)

    def tree_sizes(self) -> list[int] | None:
        """Per instance, the key units the router's prefix source says it holds; None
        without a source to read."""
        if self.prefix_source == "approximate":
            if self.approx is None:
                return [0] * self.num_instances
            return self.approx.tenant_units()
        if self.exact_index is not None:
            return self.exact_index.sizes()
        return None

    def _new_approx(self, key_tokens: int) -> ApproximatePrefixIndex:
        cfg = self.cfg
        return ApproximatePrefixIndex(
            self.num_instances, cfg.max_tree_size, cfg.eviction_interval_s, key_tokens
        )

    def _approx(self, req: RouteRequest) -> ApproximatePrefixIndex:
        """The approximate index (built at the first request when ``key_tokens`` was not
        given: the key unit is the requests')."""
        approx = self.approx
        if approx is None:
            approx = self.approx = self._new_approx(req.key_tokens)
        elif req.key_tokens != approx.key_tokens:
            raise ConfigError(
                f"router: request {req.rid} has {req.key_tokens}-token key units, the "
                f"router's tree {approx.key_tokens}"
            )
        return approx


class RoundRobinRouter(Router):
    """sglang-router round_robin: the counter advances once per decision, in choose."""

    def __init__(
        self,
        cfg: RouterConfig,
        num_instances: int,
        exact_index: ExactPrefixIndex | None = None,
        key_tokens: int | None = None,
    ) -> None:
        super().__init__(cfg, num_instances, exact_index, key_tokens)
        self.counter = 0

    def choose(self, req: RouteRequest, view: FleetView, now: float) -> int:
        index = decisions.round_robin(self.counter, len(view))
        self.counter += 1
        return index


class LeastLoadRouter(Router):
    """Fewest owed prefill tokens (decisions.least_load)."""

    def choose(self, req: RouteRequest, view: FleetView, now: float) -> int:
        return decisions.least_load(view)


class PowerOfTwoRouter(Router):
    """sglang-router power_of_two: two distinct instances drawn uniformly (sglang-router
    redraws the second until it differs; here the second is drawn among the others, the
    same distribution in a fixed two draws)."""

    def choose(self, req: RouteRequest, view: FleetView, now: float) -> int:
        n = len(view)
        if n == 1:
            return 0
        first = self.rng.randrange(n)
        second = self.rng.randrange(n - 1)
        if second >= first:
            second += 1
        return decisions.power_of_two(view, first, second)


class CacheAwareRouter(Router):
    """sglang-router cache_aware (decisions.cache_aware). With the approximate source,
    a balanced decision stamps the longest-match tenant's path as ``prefix_match`` does
    (the imbalanced branch never calls it)."""

    def choose(self, req: RouteRequest, view: FleetView, now: float) -> int:
        cfg = self.cfg
        sizes = self.tree_sizes()
        index = decisions.cache_aware(
            req,
            view,
            sizes if sizes is not None else view.running_reqs,
            cfg.cache_threshold,
            cfg.balance_abs_threshold,
            cfg.balance_rel_threshold,
        )
        if self.approx is not None:
            self._stamp_match(req, view, index, now)
        return index

    def _stamp_match(self, req: RouteRequest, view: FleetView, index: int, now: float) -> None:
        """Stamp the longest-match tenant's path when the balanced branch ran and chose
        another instance (when it chose that one, :meth:`routed`'s insert stamps the path)."""
        cfg = self.cfg
        best = decisions.longest_match(view.matched_tokens)
        if (
            best != index
            and view.matched_tokens[best] > 0
            and not decisions.is_imbalanced(
                view.running_reqs, cfg.balance_abs_threshold, cfg.balance_rel_threshold
            )
        ):
            self._approx(req).touch(req.keys, best, now)


class KvCostRouter(Router):
    """Dynamo's KV router (decisions.kv_cost); one uniform draw per decision."""

    def choose(self, req: RouteRequest, view: FleetView, now: float) -> int:
        cfg = self.cfg
        draw = self.rng.random()
        return decisions.kv_cost(
            req, view, cfg.overlap_score_weight, cfg.temperature, draw, self.tree_sizes()
        )


class WeightedRouter(Router):
    """llm-d's weighted scorers (decisions.weighted); one uniform draw per decision."""

    def choose(self, req: RouteRequest, view: FleetView, now: float) -> int:
        cfg = self.cfg
        draw = self.rng.random()
        return decisions.weighted(
            req, view, cfg.prefix_weight, cfg.queue_weight, cfg.kv_usage_weight, draw
        )


_CLASSES: dict[str, type[Router]] = {
    "round-robin": RoundRobinRouter,
    "least-load": LeastLoadRouter,
    "power-of-two": PowerOfTwoRouter,
    "cache-aware": CacheAwareRouter,
    "kv-cost": KvCostRouter,
    "weighted": WeightedRouter,
}


def build_router(
    cfg: RouterConfig,
    num_instances: int,
    exact_index: ExactPrefixIndex | None = None,
    key_tokens: int | None = None,
) -> Router:
    """The router ``cfg`` names over ``num_instances`` instances.

    ``exact_index``: the fleet's exact index, which an exact-source router reads for tree
    sizes (without it, cache-aware's smallest-tree choice falls back to the fewest running
    requests and kv-cost's ties to a uniform draw). ``key_tokens``: the requests' key
    unit, to build an approximate index at once (else at the first request)."""
    return _CLASSES[cfg.name](cfg, num_instances, exact_index, key_tokens)
