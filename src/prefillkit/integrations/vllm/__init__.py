"""prefillkit inside vLLM (the ``vllm`` extra; vLLM 0.34.0 is the tested version).

:class:`~prefillkit.integrations.vllm.scheduler.CacheAwareScheduler` is a subclass of
vLLM v1's ``AsyncScheduler`` for ``--scheduler-cls
prefillkit.integrations.vllm.scheduler.CacheAwareScheduler``: each step it reorders
vLLM's waiting queue with one of prefillkit's pure policy orders (``order.py``), reading
each waiting request's prefix hit from vLLM's own ``KVCacheManager`` (a probe that takes
no references and emits no events), then runs vLLM's step unchanged. Settings:
``order.py`` (environment variables ``PREFILLKIT_VLLM_*``, docs/vllm.md).

This file imports nothing from vLLM; ``scheduler.py`` calls :func:`require_vllm`.
"""

from __future__ import annotations

from prefillkit.integrations import engine_installed

TESTED_VLLM_VERSIONS = ("0.34.0",)
MISSING_EXTRA = (
    "prefillkit.integrations.vllm needs vLLM: pip install 'prefillkit[vllm]' "
    "(on a CPU-only machine: docs/vllm.md, 'vLLM on CPU')"
)


class MissingExtraError(ImportError):
    """vLLM is not importable; ``str(err)`` is the one line to print."""


def vllm_installed() -> bool:
    """Whether vLLM's package is importable, without importing it."""
    return engine_installed("vllm")


def require_vllm() -> str:
    """Import vLLM's v1 scheduler and return vLLM's version; raise
    :class:`MissingExtraError` (one line, naming the extra) when it cannot be imported."""
    if not vllm_installed():
        raise MissingExtraError(MISSING_EXTRA)
    try:
        import vllm.v1.core.sched.async_scheduler  # noqa: F401
    except ImportError as err:
        raise MissingExtraError(f"{MISSING_EXTRA}; importing it failed: {err}") from None
    from importlib.metadata import version

    return version("vllm")


__all__ = [
    "MISSING_EXTRA",
    "TESTED_VLLM_VERSIONS",
    "MissingExtraError",
    "require_vllm",
    "vllm_installed",
]
