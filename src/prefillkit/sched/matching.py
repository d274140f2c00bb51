"""Matching a request against the prefix cache, reusing its last match as a hint."""

from __future__ import annotations

from prefillkit.cache.prefix import MatchResult, PrefixCache
from prefillkit.request import Request


def match_req(cache: PrefixCache, req: Request) -> MatchResult:
    """The request's longest cached prefix. Between passes a match rarely changes, so
    the previous length is confirmed in two dict lookups before any binary search."""
    m = cache.match(req.keys, req.max_match_units, req.match_hint)
    req.match_hint = m.units
    return m
