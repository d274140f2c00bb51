"""A linear forward-time model for tests, fuzzing and path benchmarks.

Not a model of any GPU: forward = ``per_forward_s`` + ``per_extend_token_s`` per extend
token + ``per_loaded_token_s`` per token loaded back from host; a decode step costs
``decode_step_s`` + ``decode_per_context_token_s`` per context token; sending KV out
costs ``transfer_per_token_s`` per token. It satisfies
:class:`prefillkit.cost.roofline.CostModel`, so a run's timing is easy to predict by hand
while the scheduler and the engine loop run for real.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prefillkit.sched.buffer import ReqShape

__all__ = ["LinearCostModel"]


@dataclass(frozen=True, slots=True)
class LinearCostModel:
    per_forward_s: float = 0.01
    per_extend_token_s: float = 1e-5
    per_loaded_token_s: float = 0.0
    decode_step_s: float = 0.005
    decode_per_context_token_s: float = 0.0
    transfer_per_token_s: float = 1e-6
    breakdown_keys: tuple[str, ...] = ("total",)

    def breakdown(self, batch: Sequence[ReqShape]) -> dict[str, float]:
        return {"total": self.forward_time(batch)}

    def forward_time(self, batch: Sequence[ReqShape]) -> float:
        if not batch:
            return 0.0
        extend = sum(s.extend_len for s in batch)
        loaded = sum(s.loaded_tokens for s in batch)
        return (
            self.per_forward_s + extend * self.per_extend_token_s + loaded * self.per_loaded_token_s
        )

    def decode_step_time(self, batch_size: int, total_context: int) -> float:
        return self.decode_step_s + total_context * self.decode_per_context_token_s

    def kv_transfer_time(self, tokens: int) -> float:
        return tokens * self.transfer_per_token_s
