"""What a run reports besides what it simulates: :class:`RunOptions`, checked once."""

from __future__ import annotations

from dataclasses import dataclass

from prefillkit.records.slo import DEFAULT_PERCENTILES
from prefillkit.records.steady import DEFAULT_WINDOW_S, check_window_s

__all__ = ["RunOptions"]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The steady-state window (``window_s`` seconds, records/steady.py), the TTFT /
    queueing percentiles the summary shows and the TTFT SLO of its goodput
    (records/slo.py), handed to the engine when it is built.

    The window's length is checked here, once (a one-line ``ValueError`` naming
    ``--window-s``); its count over the arrival span is the engine's to check (a list
    run when it starts, a stream as requests arrive: sim/engine.py).
    """

    window_s: float = DEFAULT_WINDOW_S
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    slo_ttft_s: float | None = None

    def __post_init__(self) -> None:
        try:
            check_window_s(self.window_s, ())
        except ValueError as exc:
            raise ValueError(f"--window-s: {exc}") from None
