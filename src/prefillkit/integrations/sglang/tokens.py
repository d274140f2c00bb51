"""Synthetic prompt token ids for a prefillkit :class:`~prefillkit.request.Request`, so that
SGLang's radix tree (which matches token ids) shares exactly what prefillkit's prefix
cache (which matches key chains) shares.

A request carries no tokens: its prompt is a chain of keys, one per complete *key unit*
of ``key_tokens`` tokens, where equal key ``i`` means an equal prefix through unit ``i``
(``request.py``). Its tokens here are:

- unit ``i`` (its ``key_tokens`` tokens): ``mix(key_i + (j + 1) * GOLDEN) >> 1`` for
  ``j = 0 .. key_tokens - 1``, a function of the unit's key and the position in the unit
  (the key already names the whole prefix, so the position in the unit suffices);
- the tail past the last keyed unit (a partial last unit, or a prompt without keys):
  ``mix((seed ^ TAIL_SALT) + (p + 1) * GOLDEN) >> 1`` for absolute position ``p``, with
  ``seed`` the xxh3-64 of the request's id: never shared with another request.

``mix`` is SplitMix64's finaliser (a bijection of 64-bit words); ``>> 1`` makes every
token a non-negative int63, as SGLang's ``array('q')`` token rows hold.

ASSUMPTION (collisions): two requests share a token prefix in SGLang's tree exactly when
they share a key-chain prefix, unless two *different* (key, position) inputs give the
same 63-bit token at the first position where their prompts differ. With ``n`` distinct
units in a run that is about ``n**2 / 2**63`` (below 1e-10 for a million units): taken
as never. A rid used twice in one run (the engine refuses it only while the first is
live) would share its tail with its namesake.

Pure: numpy and xxhash, no SGLang.
"""

from __future__ import annotations

from array import array

import numpy as np
import xxhash

from prefillkit.request import Request

__all__ = ["GOLDEN", "TAIL_SALT", "prompt_tokens", "unit_token"]

#: The SplitMix64 increment (2**64 / golden ratio).
GOLDEN = 0x9E3779B97F4A7C15
#: Keeps the tail's inputs apart from the units' (a rid hash equal to a key would
#: otherwise give a tail equal to that unit).
TAIL_SALT = 0x5851F42D4C957F2D
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over an array of uint64 (wrapping arithmetic), >> 1."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    x = x ^ (x >> np.uint64(31))
    return x >> np.uint64(1)


def _steps(start: int, n: int) -> np.ndarray:
    """``(p + 1) * GOLDEN`` mod 2**64 for ``p = start .. start + n - 1``."""
    p = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    return p * np.uint64(GOLDEN)


def unit_token(key: int, j: int) -> int:
    """Token ``j`` of the unit whose key is ``key``, in plain integers (the reference the
    vectorised :func:`prompt_tokens` is checked against)."""
    x = (key + (j + 1) * GOLDEN) & _MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    x ^= x >> 31
    return x >> 1


def prompt_tokens(req: Request) -> array[int]:
    """The prompt's ``prompt_len`` token ids (see the module docstring), as ``array('q')``."""
    kt = req.key_tokens
    units = min(len(req.keys), req.prompt_len // kt) if kt > 0 else 0
    parts: list[np.ndarray] = []
    with np.errstate(over="ignore"):
        if units:
            keys = np.array(req.keys[:units], dtype=np.uint64)
            parts.append(_mix(keys[:, None] + _steps(0, kt)[None, :]).reshape(-1))
        tail = req.prompt_len - units * kt
        if tail > 0:
            seed = xxhash.xxh3_64_intdigest(req.rid.encode()) ^ TAIL_SALT
            parts.append(_mix(np.uint64(seed) + _steps(units * kt, tail)))
    out = array("q")
    for part in parts:
        out.frombytes(part.astype(np.int64).tobytes())
    return out
