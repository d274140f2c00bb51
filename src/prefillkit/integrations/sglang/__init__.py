"""prefillkit inside SGLang (the ``sglang`` extra; SGLang 0.5.23 is the tested version).

Two things live here:

- **The plugin** (``plugin.register``, entry point ``prefillkit`` in SGLang's group
  ``sglang.srt.plugins``): when enabled (``PREFILLKIT_SGLANG=1``) it makes SGLang's
  ``Scheduler.get_prefill_adder_class()`` return :class:`adder.PrefillkitAdder` and wraps
  ``SchedulePolicy.calc_priority`` for the wait bound. Every feature is off by default; with
  all off the adder is SGLang's own, call for call. Settings: ``settings.py``
  (environment variables, read in every SGLang process, as SGLang's own ``SGLANG_*``).
- **A scheduler backend for the simulator** (``backend.py``): SGLang's real
  ``Scheduler._get_new_batch_prefill_raw`` with its ``PrefillAdder``, radix tree, KV
  allocator and request-slot pool, built on CPU (``harness.py``), behind prefillkit's
  :class:`~prefillkit.sched.interface.SchedulerInterface`, so that ``prefillkit replay
  --scheduler sglang`` runs a trace through SGLang's own admission.

This file imports nothing from SGLang; the modules that do call :func:`require_sglang`.
"""

from __future__ import annotations

from prefillkit.integrations import engine_installed

TESTED_SGLANG_VERSIONS = ("0.5.23",)
MISSING_EXTRA = (
    "prefillkit.integrations.sglang needs SGLang: pip install 'prefillkit[sglang]' "
    "(on a CPU-only machine: docs/sglang.md, 'SGLang on CPU')"
)


class MissingExtraError(ImportError):
    """SGLang is not importable; ``str(err)`` is the one line to print."""


def sglang_installed() -> bool:
    """Whether SGLang's package is importable, without importing it."""
    return engine_installed("sglang")


def require_sglang() -> str:
    """Import SGLang's scheduler modules (stubbing triton / torchvision where they are
    missing, as on a CPU-only machine) and return SGLang's version; raise
    :class:`MissingExtraError` (one line, naming the extra) when SGLang is not installed."""
    if not sglang_installed():
        raise MissingExtraError(MISSING_EXTRA)
    import warnings

    from prefillkit.integrations.sglang import cpu_stubs

    cpu_stubs.install_all()
    try:
        # NOTE: on a CPU machine SGLang warns on import about CUDA-only kernels (AWQ,
        # GGUF, Triton); none is on the admission path.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import sglang.srt.managers.schedule_policy
            import sglang.srt.managers.scheduler  # noqa: F401
    except ImportError as err:
        raise MissingExtraError(f"{MISSING_EXTRA}; importing it failed: {err}") from None
    from importlib.metadata import version

    return version("sglang")


__all__ = [
    "MISSING_EXTRA",
    "TESTED_SGLANG_VERSIONS",
    "MissingExtraError",
    "require_sglang",
    "sglang_installed",
]
