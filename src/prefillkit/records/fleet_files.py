"""A fleet run's own files beside ``summary.json``, ``requests.csv`` and ``batches.csv``.

- ``routing.csv``: one row per routing decision, in routing order: the request id, the
  instance it went to and the prefix tokens the router believed cached there
  (:data:`ROUTING_COLUMNS`); streamed to ``routing.csv.part`` as the run goes;
- ``instances.csv``: one row per instance (:data:`INSTANCE_COLUMNS`: requests, hit rate,
  utilisation, TTFT percentiles, the deepest waiting queue the router saw, how often its
  prefix view was wrong), written at the end.

:meth:`FleetFiles.commit` renames both into place before the run's ``summary.json`` is
committed (which names them); :meth:`FleetFiles.discard` removes what was not committed.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from prefillkit.outfile import temp_path

__all__ = ["INSTANCES_FILE", "INSTANCE_COLUMNS", "ROUTING_COLUMNS", "ROUTING_FILE", "FleetFiles"]

ROUTING_FILE = "routing.csv"
INSTANCES_FILE = "instances.csv"
ROUTING_COLUMNS: tuple[str, ...] = ("rid", "instance", "believed_prefix_tokens")
INSTANCE_COLUMNS: tuple[str, ...] = (
    "instance",
    "requests",
    "prefilled",
    "prompt_tokens",
    "hit_rate",
    "utilization",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "ttft_max_s",
    "max_waiting",
    "view_checked",
    "view_wrong",
)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


class FleetFiles:
    """``routing.csv`` streamed and ``instances.csv`` at the end, into ``folder``."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._routing_part = temp_path(self.folder / ROUTING_FILE, "part")
        self._file: IO[str] | None = open(self._routing_part, "x", newline="")
        self._writer = csv.writer(self._file, lineterminator="\n")
        self._writer.writerow(ROUTING_COLUMNS)

    def route(self, rid: str, instance: int, believed: int) -> None:
        """One routing decision (a ``sim.fleet.RoutingSink``)."""
        self._writer.writerow((rid, instance, believed))

    def commit(self, instances: Sequence[Mapping[str, Any]]) -> None:
        """Finish ``routing.csv``, write ``instances.csv``; both renamed into place."""
        assert self._file is not None
        self._file.close()
        self._file = None
        part = temp_path(self.folder / INSTANCES_FILE, "part")
        with open(part, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(INSTANCE_COLUMNS)
            for row in instances:
                writer.writerow([_cell(row.get(c)) for c in INSTANCE_COLUMNS])
        os.replace(part, self.folder / INSTANCES_FILE)
        os.replace(self._routing_part, self.folder / ROUTING_FILE)

    def discard(self) -> None:
        """Remove the streamed part (after :meth:`commit`: nothing)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._routing_part.exists():
            self._routing_part.unlink()
