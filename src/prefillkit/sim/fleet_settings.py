"""A fleet: M instances (each a deployment the simulator models) behind one router.

:class:`FleetSettings` is what :class:`prefillkit.sim.fleet.Fleet` runs: one
:class:`~prefillkit.cost.deployment.SimSettings` per instance and the router's
:class:`~prefillkit.sim.routers.config.RouterConfig`. Checked once, at construction, with
one-line errors naming the instance (``instance[3]``: the fourth ``[[instance]]`` table of
a fleet file, or the fourth of ``--instances N``'s copies):

- the instances share the page size and the mode (``pd-prefill`` or ``colocated``): a
  request's cache keys are computed once, at the page size, and a router compares them
  across instances; the summary's rows are one table;
- they share whether sessions run closed-loop (one session gate for the fleet).
"""

from __future__ import annotations

from dataclasses import dataclass

from prefillkit.cost.deployment import SimSettings
from prefillkit.sched.config import ConfigError
from prefillkit.sim.routers.config import RouterConfig

__all__ = ["FleetSettings"]


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """The instances (in order: the router's indices) and the router."""

    instances: tuple[SimSettings, ...]
    router: RouterConfig

    def __post_init__(self) -> None:
        if not self.instances:
            raise ConfigError("a fleet needs at least one instance")
        first = self.instances[0]
        for i, inst in enumerate(self.instances[1:], start=1):
            for name in ("page_size", "mode", "open_loop"):
                mine, theirs = getattr(inst, name), getattr(first, name)
                if mine != theirs:
                    raise ConfigError(
                        f"instance[{i}]: {name} {mine!r} differs from instance[0]'s "
                        f"{theirs!r}; a fleet's instances share it"
                    )

    @classmethod
    def copies(cls, settings: SimSettings, count: int, router: RouterConfig) -> FleetSettings:
        """``count`` identical instances of ``settings`` (``--instances N``)."""
        if count < 1:
            raise ConfigError(f"--instances: must be >= 1, got {count}")
        return cls((settings,) * count, router)

    def __len__(self) -> int:
        return len(self.instances)
