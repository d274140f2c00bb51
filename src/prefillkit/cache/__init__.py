"""KV pool with owner lanes, the two-tier prefix cache, and its invariant checker."""

from prefillkit.cache.host import WRITE_POLICIES, HostTier
from prefillkit.cache.invariants import InvariantError, check_invariants
from prefillkit.cache.node import Node
from prefillkit.cache.pool import KVPool, lane_split
from prefillkit.cache.prefix import LoadBack, MatchResult, PrefixCache

__all__ = [
    "WRITE_POLICIES",
    "HostTier",
    "InvariantError",
    "KVPool",
    "LoadBack",
    "MatchResult",
    "Node",
    "PrefixCache",
    "check_invariants",
    "lane_split",
]
