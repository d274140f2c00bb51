"""A finished (or interrupted) simulator run, as the engine returns it and the writers read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prefillkit.records.metrics import BatchRecord, BatchTrace
from prefillkit.request import Request


@dataclass(slots=True)
class SimResult:
    """A finished (or interrupted) run.

    ``trace`` says which requests ran in which batch and holds each batch's forward-time
    breakdown; ``cache_classes`` maps a request id to ``warm`` / ``cold`` (its hit at
    first admission).
    """

    requests: list[Request]
    batches: list[BatchRecord]
    summary: dict[str, Any]
    deployment: dict[str, Any]
    partial: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    trace: BatchTrace = field(default_factory=lambda: BatchTrace(()))
    cache_classes: dict[str, str] = field(default_factory=dict)
