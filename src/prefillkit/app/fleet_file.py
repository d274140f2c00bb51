"""A fleet from the command line: ``--instances N --router NAME`` or a fleet file (``--fleet``).

A fleet file is TOML::

    [router]
    name = "cache-aware"          # round-robin | least-load | power-of-two | cache-aware |
    cache_threshold = 0.3         # kv-cost | weighted; then the router's parameters
                                  # (RouterConfig's names; unset ones keep the defaults)
    [[instance]]                  # one table per kind of instance, in order
    count = 6                     # copies of it (default 1)
    tp_size = 8                   # any config setting: overrides the run's settings
    [[instance]]
    count = 2
    tp_size = 4
    cp_size = 4

Each instance is the run's :class:`~prefillkit.app.settings.Config` (its ``--config`` file
and flags) with the table's settings on top, validated as a config is; a fleet file
without ``[[instance]]`` tables is ``--instances`` copies of the run's settings. The
``[router]`` table's values override ``--router`` and the ``--router-*`` flags.

Errors are one line naming the file and the key (``fleet.toml: instance[1]: tp_sizes:
unknown setting``); exit status 2 from the command line.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prefillkit.app.config_file import read_toml
from prefillkit.app.knob_types import FIELD_NAMES, check_type
from prefillkit.app.settings import Config
from prefillkit.cost.deployment import SimSettings
from prefillkit.sched.config import ConfigError
from prefillkit.sim.engine import Engine
from prefillkit.sim.fleet_settings import FleetSettings
from prefillkit.sim.routers.config import RouterConfig
from prefillkit.sim.sizing import SimConfigError
from prefillkit.text import suggest as _suggest

__all__ = ["FLEET_FIELDS", "ROUTER_PREFIX", "fleet_settings", "router_config"]

#: Config knobs of a fleet (app-layer fields: neither the scheduler's nor SimSettings').
ROUTER_PREFIX = "router_"
FLEET_FIELDS: tuple[str, ...] = tuple(
    name for name in FIELD_NAMES if name in ("instances", "router", "fleet")
) + tuple(name for name in FIELD_NAMES if name.startswith(ROUTER_PREFIX))

_ROUTER_PARAMS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(RouterConfig) if f.name not in ("name", "seed")
)


def router_config(cfg: Config, overrides: dict[str, Any] | None = None) -> RouterConfig:
    """The router ``cfg``'s ``--router`` and ``--router-*`` knobs describe (seeded by
    ``--seed``), with a fleet file's ``[router]`` values on top."""
    values: dict[str, Any] = {"name": cfg.router, "seed": cfg.seed}
    for param in _ROUTER_PARAMS:
        values[param] = getattr(cfg, ROUTER_PREFIX + param)
    values.update(overrides or {})
    return RouterConfig(**values)


def fleet_settings(cfg: Config) -> FleetSettings | None:
    """The fleet ``cfg`` runs (None: one instance, no router)."""
    if cfg.fleet is None:
        if cfg.instances == 1:
            return None
        return FleetSettings.copies(cfg.sim_settings(), cfg.instances, router_config(cfg))
    path = cfg.fleet
    try:
        return _read_fleet(path, cfg)
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if text.startswith(f"{path}:") else f"{path}: {text}") from None


def _read_fleet(path: str, cfg: Config) -> FleetSettings:
    doc = read_toml(path)
    for key in doc:
        if key not in ("router", "instance"):
            raise ConfigError(
                f"{path}: unknown table or key {key!r} (a fleet file has [router] and "
                "[[instance]] tables)"
            )
    router = router_config(cfg, _router_table(doc.get("router", {})))
    tables = doc.get("instance")
    if tables is None:
        return FleetSettings.copies(cfg.sim_settings(), cfg.instances, router)
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError("'instance' must be an array of tables ([[instance]])")
    instances: list[SimSettings] = []
    for k, table in enumerate(tables):
        count, settings = _instance(table, cfg, f"instance[{k}]")
        instances.extend([settings] * count)
    return FleetSettings(tuple(instances), router)


def _router_table(table: object) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError("'router' must be a table ([router])")
    known = ("name", *_ROUTER_PARAMS)
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"[router] {key}: unknown parameter{_suggest(name, known)}")
        out[name] = value
    return out


def _instance(table: dict[str, Any], cfg: Config, where: str) -> tuple[int, SimSettings]:
    """One ``[[instance]]`` table: its count and its settings."""
    count = table.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"{where}: count must be an integer >= 1, got {count!r}")
    values: dict[str, object] = {}
    for key, value in table.items():
        if key == "count":
            continue
        name = key.replace("-", "_")
        if name not in FIELD_NAMES:
            raise ConfigError(f"{where}: {key}: unknown setting{_suggest(name, FIELD_NAMES)}")
        if name in FLEET_FIELDS:
            raise ConfigError(f"{where}: {key}: a fleet setting, not an instance's")
        values[name] = check_type(name, value, prefix=f"{where}: {key}")
    try:
        settings = dataclasses.replace(cfg, **values).sim_settings()  # type: ignore[arg-type]
        Engine(settings, [])  # the deployment's checks (GPU, pool, buffer limit)
    except (ConfigError, SimConfigError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return count, settings
