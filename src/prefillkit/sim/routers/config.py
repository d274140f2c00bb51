"""A router's settings: which router, where its prefix beliefs come from, its parameters.

:class:`RouterConfig` is frozen and checked at construction; every error is ONE line
naming the parameter as ``router.<name>`` (the fleet's CLI knob is ``router_<name>``,
:data:`PARAMETERS`). Defaults, with their sources (docs/routers.md has the links):

- sglang-router ``cache_aware`` (sgl-project/sglang ``sgl-router/py_src/sglang_router/
  router_args.py`` L31-35 at e46dcd87, the launcher defaults; the Rust
  ``CacheAwareConfig::default()`` in ``sgl-router/src/policies/mod.rs`` holds older values
  0.5 / 32 / 1.1 / 30 s / 10000 that the launcher overrides): ``cache_threshold`` 0.3,
  ``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5, ``eviction_interval_s`` 120,
  ``max_tree_size`` 2**26. sglang-router counts its tree in characters of the prompt
  text; here it is counted in tokens (whole key units), the number kept as is.
- Dynamo KV router (ai-dynamo/dynamo ``lib/llm/src/kv_router/config.rs``
  ``KvRouterConfig::default()`` L94-95 at 79a21ca4): ``overlap_score_weight`` 1.0,
  ``temperature`` 0.0 (``router_temperature``); both validated ``>= 0`` there (L29-33).
- ``name`` "round-robin": Dynamo's frontend default (``--router-mode``, docs "Router
  Guide", CLI table); sglang-router's launcher defaults to cache_aware instead.
- llm-d precise prefix-cache profile (llm-d/llm-d ``guides/precise-prefix-cache-aware/
  gaie-kv-events/values.yaml`` L92-97 at bf8659b2, the configuration the 2025-09-24 blog
  "KV-cache wins you can see" benchmarked): ``prefix_weight`` 3.0, ``kv_usage_weight`` 2.0,
  ``queue_weight`` 2.0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NoReturn

from prefillkit.sched.config import ConfigError
from prefillkit.sim.routers.view import PREFIX_SOURCES
from prefillkit.text import one_line, suggest

__all__ = [
    "LOAD_ONLY",
    "PARAMETERS",
    "ROUTERS",
    "RouterConfig",
    "default_prefix_source",
]

ROUTERS: tuple[str, ...] = (
    "round-robin",
    "least-load",
    "power-of-two",
    "cache-aware",
    "kv-cost",
    "weighted",
)

#: Routers that read no prefix at all (their prefix source is always "none").
LOAD_ONLY: tuple[str, ...] = ("round-robin", "least-load", "power-of-two")

#: The parameters each router reads (besides ``prefix_source``), for :meth:`describe`.
_READS: dict[str, tuple[str, ...]] = {
    "round-robin": (),
    "least-load": (),
    "power-of-two": ("seed",),
    "cache-aware": ("cache_threshold", "balance_abs_threshold", "balance_rel_threshold"),
    "kv-cost": ("overlap_score_weight", "temperature", "seed"),
    "weighted": ("prefix_weight", "queue_weight", "kv_usage_weight", "seed"),
}

#: What the approximate prefix source (sglang-router's tree) reads, whichever router uses it.
_APPROXIMATE_READS: tuple[str, ...] = ("max_tree_size", "eviction_interval_s")

_FLOATS: tuple[str, ...] = (
    "cache_threshold",
    "balance_rel_threshold",
    "eviction_interval_s",
    "overlap_score_weight",
    "temperature",
    "prefix_weight",
    "queue_weight",
    "kv_usage_weight",
)
_INTS: tuple[str, ...] = ("balance_abs_threshold", "max_tree_size", "seed")


def default_prefix_source(name: str) -> str:
    """The prefix source a router uses when none is given: sglang-router's cache_aware
    keeps its own approximate tree; Dynamo's KV router and llm-d's precise profile read
    the engines' KV events ("exact"); the load-only routers read none."""
    if name == "cache-aware":
        return "approximate"
    if name in ("kv-cost", "weighted"):
        return "exact"
    return "none"


def _fail(param: str, message: str) -> NoReturn:
    raise ConfigError(one_line(f"router.{param}: {message}"))


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """One router's settings (module docstring for the defaults' sources).

    ``prefix_source`` None means the router's default (:func:`default_prefix_source`); it
    is stored resolved, so a built config always holds a string (:attr:`source`). Ints
    given for float parameters are stored as floats; nothing else is changed.
    """

    name: str = "round-robin"
    prefix_source: str | None = None
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    max_tree_size: int = 2**26
    eviction_interval_s: float = 120.0
    overlap_score_weight: float = 1.0
    temperature: float = 0.0
    prefix_weight: float = 3.0
    queue_weight: float = 2.0
    kv_usage_weight: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in ROUTERS:
            _fail(
                "name",
                f"unknown router {self.name!r}{suggest(str(self.name), ROUTERS)}; "
                f"one of {', '.join(ROUTERS)}",
            )
        for param in _INTS:
            _check_int(param, getattr(self, param))
        for param in _FLOATS:
            value = getattr(self, param)
            _check_number(param, value)
            object.__setattr__(self, param, float(value))
        self._check_ranges()
        object.__setattr__(self, "prefix_source", self._resolved_source())

    def _check_ranges(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            _fail("cache_threshold", f"must be in [0, 1], got {self.cache_threshold}")
        for param in ("balance_abs_threshold", "max_tree_size"):
            if getattr(self, param) < 0:
                _fail(param, f"must be >= 0, got {getattr(self, param)}")
        if self.balance_rel_threshold <= 0:
            _fail("balance_rel_threshold", f"must be > 0, got {self.balance_rel_threshold}")
        for param in _FLOATS[2:]:
            if getattr(self, param) < 0:
                _fail(param, f"must be >= 0, got {getattr(self, param)}")

    def _resolved_source(self) -> str:
        source = self.prefix_source
        if source is None:
            return default_prefix_source(self.name)
        if source not in PREFIX_SOURCES:
            _fail(
                "prefix_source",
                f"unknown source {source!r}{suggest(str(source), PREFIX_SOURCES)}; "
                f"one of {', '.join(PREFIX_SOURCES)}",
            )
        if self.name in LOAD_ONLY and source != "none":
            _fail("prefix_source", f"{self.name} reads no prefix: must be 'none', got {source!r}")
        if source == "none" and self.name not in LOAD_ONLY:
            if self.name != "weighted" or self.prefix_weight != 0:
                _fail(
                    "prefix_source",
                    f"{self.name} reads a prefix: must be 'exact' or 'approximate' "
                    "('none' only for weighted with router.prefix_weight 0), got 'none'",
                )
        return source

    @property
    def source(self) -> str:
        """The resolved prefix source: "none", "exact" or "approximate"."""
        assert self.prefix_source is not None  # resolved in __post_init__
        return self.prefix_source

    @staticmethod
    def field_names() -> tuple[str, ...]:
        """The parameter names (every field but ``name``): the CLI knob ``router_<p>``."""
        return PARAMETERS

    def describe(self) -> str:
        """One line for logs: the router, its prefix source and the parameters it reads."""
        reads = list(_READS[self.name])
        if self.source == "approximate":
            reads += _APPROXIMATE_READS
        params = " ".join(f"{p}={_fmt(getattr(self, p))}" for p in reads)
        return f"{self.name} (prefix {self.source}{'; ' + params if params else ''})"


#: Every parameter of :class:`RouterConfig` but ``name`` (the router itself).
PARAMETERS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(RouterConfig) if f.name != "name"
)


def _check_int(param: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(param, f"must be an integer, got {value!r}")


def _check_number(param: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        _fail(param, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        _fail(param, f"must be finite, got {value!r}")


def _fmt(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
