"""Routers in front of a fleet of instances (sim/fleet.py): each a pure decision over the
typed view of :mod:`prefillkit.sim.routers.view`.

- ``config.py``: :class:`RouterConfig`, the settings (defaults cited there);
- ``decisions.py``: each router's decision as a pure function;
- ``router.py``: the stateful routers (counter, RNG, approximate index) and ``build_router``;
- ``prefix_index.py`` / ``approx_index.py``: the exact (KV events) and approximate
  (routing history, sglang-router's tree) prefix indexes; ``masks.py`` their shared walk.

docs/routers.md has each rule, its source and the deviations.
"""
