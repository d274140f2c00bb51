# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".
"""A waiting request's current match, confirmed from its previous one.

Between passes a match rarely changes, and every pass needs it for every waiting request
(ordering, then the scan), so the previous match is confirmed from the node that held
its last unit instead of probing the key index (one large dict) again.
"""

from __future__ import annotations

from prefillkit.cache.prefix import PrefixCache
from prefillkit.request import Request


def refresh_match(cache: PrefixCache, req: Request) -> int:
    """Units of ``req``'s longest cached prefix (device + host); keeps ``req.match_hint``
    and ``req.match_node`` (the node holding the last matched unit, or the root) current.

    The previous match ``h`` with node ``n`` still holds when:
    - ``n`` is still in the tree: a node in the tree is on device or on host, and a
      removed one is on neither;
    - ``n`` still holds unit ``h - 1``: a node's end never changes and a split only moves
      its start up (the head goes to a new parent), so ``n.start < h`` (or ``n`` is the
      root and ``h == 0``);
    - unit ``h`` is still not cached: inside ``n`` the key after unit ``h - 1`` is fixed
      (and was not ours), and a node can only grow a branch at its end, as a child.
    Keys identify whole prefixes, so these are exactly "keys[h-1] cached, keys[h] not".
    Otherwise the match is recomputed (a binary search over the key chain).
    """
    st = req.state
    h = st.match_hint
    n = st.match_node
    if (
        n is not None
        and (n.on_device or n.on_host)
        and (n.start < h or n is cache.root)
        and (h == st.max_match_units or h < n.end or req.keys[h] not in n.children)
    ):
        return h
    keys = req.keys
    c = st.match_hint = cache.match_units(keys, st.max_match_units, h)
    st.match_node = cache.index[keys[c - 1]] if c else cache.root
    return c


def device_units(cache: PrefixCache, req: Request, c: int) -> int:
    """Units of the device-resident part of ``req``'s match of ``c`` units: the end of
    the deepest device node on the path (``PrefixCache.match_node(...).device_units``)
    by binary search over the key chain, not a walk up the host-only part.

    Exact because residency is per node and a device node never sits under a host-only
    one: "unit ``i`` of the path is on device" is monotone in ``i``, and the node
    holding the last device unit ends there (the next unit is host-only, so in
    another node)."""
    keys = req.keys
    index = cache.index
    if c == 0 or index[keys[c - 1]].on_device:
        return c
    lo, hi = 0, c - 1  # NOTE: units < lo are on device, unit hi is not
    while lo < hi:
        mid = (lo + hi) >> 1
        if index[keys[mid]].on_device:
            lo = mid + 1
        else:
            hi = mid
    return lo
