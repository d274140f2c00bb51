"""prefillkit.exec: a real executor for the scheduler's prefill steps (optional, needs PyTorch).

This package file is torch-free so that a user-facing entry point can check for the extra and
print one line instead of a traceback. The submodules import torch:

- ``plan``      the typed description of one prefill step (torch-free, frozen dataclasses)
- ``ops``       batch-invariant elementwise primitives (fixed accumulation order)
- ``model``     a small seeded decoder-only transformer: MLA latent KV + DSA indexer, or GQA
- ``paged``     per-lane device KV pools indexed by page id, host-tier slots
- ``comm``      the rank group (one process, or gloo across processes)
- ``executor``  executes one step plan on one rank
- ``cp``        spawns R gloo worker processes and runs a sequence of plans on them
"""

from __future__ import annotations

MISSING_EXTRA = "prefillkit.exec needs PyTorch: pip install 'prefillkit[torch]'"


class MissingExtraError(ImportError):
    """PyTorch (the ``torch`` extra) is not installed; ``str(err)`` is the one line to print."""


def require_torch() -> None:
    """Raise MissingExtraError (one line, naming the extra) when torch cannot be imported."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingExtraError(MISSING_EXTRA) from None


__all__ = ["MISSING_EXTRA", "MissingExtraError", "require_torch"]
