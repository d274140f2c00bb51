"""What a router may see: the typed view of a request and of each instance.

A router never reaches into an instance's scheduler. It decides from

- a :class:`RouteRequest`: the request as a router receives it (its prompt's length and
  its prefix identity, the chained cache keys of ``prefillkit.request``: one key per
  ``key_tokens`` tokens, equal keys mean equal whole prefixes);
- a :class:`FleetView` of the instances: the load the router tracks itself (what it sent
  and what has come back, as sglang-router, Dynamo and llm-d's queue scorer count it) and
  ``matched_tokens``: how much of this request's prefix the router *believes* the
  instance holds, from its prefix source (:data:`PREFIX_SOURCES`): ``"exact"`` is the
  instance's device cache as its KV events report it (vLLM / SGLang KV events, Dynamo's
  and llm-d's precise mode), ``"approximate"`` the router's own history of where it sent
  which prefix (sglang-router's radix tree, llm-d's approximate scorer), ``"none"`` a
  router that reads no prefix at all (0 everywhere).

Both are frozen: a decision is a pure function of them (and of the router's parameters).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PREFIX_SOURCES", "FleetView", "RouteRequest"]

#: Where a router's ``matched_tokens`` come from (module docstring).
PREFIX_SOURCES: tuple[str, ...] = ("none", "exact", "approximate")


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """A request as the router sees it on arrival.

    ``prompt_tokens``: its input length; ``keys``: its prefix's chained cache keys (one per
    ``key_tokens`` tokens of the prompt's whole key units; may be empty); ``session``: its
    agent session id, if it is a session turn (None otherwise).
    """

    rid: str
    prompt_tokens: int
    keys: tuple[int, ...]
    key_tokens: int
    session: str | None = None


@dataclass(frozen=True, slots=True)
class FleetView:
    """Every instance as the router sees it when a request arrives: one sequence per
    field, indexed by instance (0-based; ties break to the lowest index). Built once per
    routing decision over the fleet's own counters (not copied): a decision reads it and
    never mutates it.

    Load, as the router tracks it from what it sent and what came back:

    - ``running_reqs``: requests routed there and not yet finished (sglang-router's
      per-worker load, the "running requests" of least-load);
    - ``waiting_reqs``: of those, the ones whose prefill has not produced a first token
      (llm-d's queue scorer reads the engine's waiting-queue metric: the same count);
    - ``queued_tokens``: their prompt tokens (the prefill work still owed there);
    - ``active_blocks``: KV blocks (``key_tokens`` each) the running requests hold, the
      "decode blocks" of Dynamo's KV cost; ``total_blocks``: the instance's pool size in
      blocks (KV-cache utilisation is their ratio).

    ``matched_tokens``: tokens of this request's prefix the router believes are cached
    on each instance (module docstring; multiples of ``key_tokens``, at most the prompt;
    all 0 for a router whose prefix source is ``"none"``).
    """

    running_reqs: Sequence[int]
    waiting_reqs: Sequence[int]
    queued_tokens: Sequence[int]
    active_blocks: Sequence[int]
    total_blocks: Sequence[int]
    matched_tokens: Sequence[int]

    def __len__(self) -> int:
        return len(self.running_reqs)
