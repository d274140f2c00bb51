"""``prefillkit sweep`` and ``prefillkit capacity``: many replays, one store.

- :mod:`.grid`: the ``GRID.toml`` file (base settings, grid axes, random / Latin-hypercube
  samples, workloads, seeds) expanded into points, every point checked before any runs.
- :mod:`.points`: a point's canonical spec, its stable id and the replay of one point
  (the task a worker runs).
- :mod:`.store`: the results store, a Parquet dataset (one file per point, written
  atomically) plus ``manifest.json``.
- :mod:`.backend`: runs points as Ray tasks (local ``ray.init()`` or a cluster by
  address) or, without Ray, in local worker processes; a failed point is retried once.
- :mod:`.sweep`: the sweep driver (resume, progress bar).
- :mod:`.capacity`: the highest request rate meeting a TTFT / goodput SLO, by bisection.
- :mod:`.render`: the summary table and the HTML page (Pareto front, knob effects).

Ray and pyarrow are the optional ``sweep`` extra (``pip install 'prefillkit[sweep]'``):
only :mod:`.backend` imports Ray and only :mod:`.store` imports pyarrow, when needed.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from prefillkit.app.replay import InputError

__all__ = ["EXTRA_HINT", "SweepError", "require"]

EXTRA_HINT = "pip install 'prefillkit[sweep]'"


class SweepError(InputError):
    """A bad grid, option or store (one line, names the file, entry or flag)."""


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` or raise a one-line ``SweepError`` naming the ``sweep`` extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SweepError(
            f"{what} needs {module.split('.')[0]}, which is not installed: {EXTRA_HINT}"
        ) from None
