"""The SGLang plugin: ``register`` is the entry point ``prefillkit`` of SGLang's plugin
group ``sglang.srt.plugins`` (pyproject.toml), which ``sglang.srt.plugins.load_plugins()``
runs in every SGLang process.

- Not enabled (``PREFILLKIT_SGLANG`` unset or 0): it registers nothing; installing
  prefillkit changes nothing.
- Enabled: it checks SGLang's seams (:func:`missing_seams`) and registers two hooks with
  SGLang's ``HookRegistry``: ``Scheduler.get_prefill_adder_class`` REPLACEd to return
  prefillkit's adder (``adder.py``) and ``SchedulePolicy.calc_priority`` wrapped AROUND
  (``ordering.py``; only when the wait bound or affinity is on). It logs one INFO line:
  ``prefillkit <version> active in SGLang <version>: <settings>``.
- A missing seam (another SGLang version): one ERROR line naming it, and nothing is
  registered: SGLang's stock admission stays in place (SGLang still serves). An SGLang
  version other than the tested one with every seam present: one WARNING line, then active.
- A bad ``PREFILLKIT_SGLANG_*`` value: one ERROR line naming the variable and the process
  exits with status 2 (``SystemExit``, which SGLang's loader does not catch): a server must
  not start with a setting it did not understand.

:func:`install_on` puts the same adder and ordering on one ``Scheduler`` object (the
simulator's ``--scheduler sglang+prefillkit`` and the tests), with a clock of its own.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from prefillkit.integrations.sglang import TESTED_SGLANG_VERSIONS, require_sglang
from prefillkit.integrations.sglang.settings import (
    PluginSettings,
    SettingsError,
    settings_from_env,
)

logger = logging.getLogger("prefillkit.integrations.sglang")

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
POLICY = "sglang.srt.managers.schedule_policy.SchedulePolicy"
# The seams the plugin relies on: (dotted owner, attribute, parameters it passes).
SEAMS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (SCHEDULER, "get_prefill_adder_class", ()),
    (
        "sglang.srt.managers.schedule_policy.PrefillAdder",
        "add_one_req",
        ("req", "has_chunked_req", "truncation_align_size"),
    ),
    ("sglang.srt.managers.schedule_policy.PrefillAdder", "add_chunked_req", ("req",)),
    ("sglang.srt.managers.schedule_policy.PrefillAdder", "_select_prefill_admission", ("req",)),
    (
        "sglang.srt.managers.schedule_policy.PrefillAdder",
        "_commit_prefill_admission",
        ("req", "admission"),
    ),
    ("sglang.srt.managers.schedule_policy.PrefillAdder", "ceil_paged_tokens", ("tokens",)),
    (POLICY, "calc_priority", ("waiting_queue",)),
)


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def missing_seams() -> list[str]:
    """The seams this SGLang lacks (empty: every one is there), e.g.
    ``PrefillAdder.add_one_req(req, has_chunked_req, truncation_align_size)``."""
    missing = []
    for owner, attr, params in SEAMS:
        label = f"{owner.rpartition('.')[2]}.{attr}({', '.join(params)})"
        try:
            fn = getattr(_resolve(owner), attr)
            names = set(inspect.signature(fn).parameters)
        except (ImportError, AttributeError, TypeError, ValueError):
            missing.append(label)
            continue
        if not set(params) <= names:
            missing.append(label)
    return missing


def _cp_size() -> int:
    """This SGLang process's prefill context-parallel size, 1 without prefill CP (read when
    the scheduler's first adder is built: the server args are published by then)."""
    from sglang.srt.runtime_context import get_parallel, get_server_args

    if not getattr(get_server_args(), "enable_prefill_cp", False):
        return 1
    return max(1, int(get_parallel().attn_cp_size))


def adder_class_for(
    settings: PluginSettings, clock: Callable[[], float], cp_size: int | None = None
) -> type:
    """The adder class for ``settings`` (``cp_size`` None: read from SGLang's server
    args when first needed)."""
    from prefillkit.integrations.sglang.adder import make_adder_class

    if cp_size is None:
        cp_size = _cp_size() if settings.cp is not None else 1
    return make_adder_class(settings, clock, cp_size)


def install_on(
    scheduler: Any,
    settings: PluginSettings,
    clock: Callable[[], float],
    *,
    cp_size: int = 1,
) -> None:
    """Put prefillkit's adder and ordering on one SGLang ``Scheduler`` object (and its
    ``policy``): mutates their attributes only; the class and other schedulers keep
    SGLang's. ``cp_size``: SGLang's prefill context-parallel size (1: none)."""
    from prefillkit.integrations.sglang.ordering import ordered_calc_priority

    cls = adder_class_for(settings, clock, cp_size)
    scheduler.get_prefill_adder_class = lambda: cls
    policy = scheduler.policy
    original = type(policy).calc_priority
    policy.calc_priority = functools.partial(
        ordered_calc_priority, original, settings, clock, policy
    )


def _around_calc_priority(settings: PluginSettings) -> Callable[..., Any]:
    from prefillkit.integrations.sglang.ordering import ordered_calc_priority

    def hook(
        original: Callable[..., Any], policy: Any, waiting_queue: list[Any], *a: Any, **kw: Any
    ) -> Any:
        return ordered_calc_priority(
            original, settings, time.perf_counter, policy, waiting_queue, *a, **kw
        )

    return hook


def register() -> None:
    """SGLang's entry point (see the module docstring)."""
    try:
        settings = settings_from_env()
    except SettingsError as err:
        logger.error("prefillkit: %s; refusing to start", err)
        raise SystemExit(2) from None
    if not settings.enabled:
        logger.debug("prefillkit: installed, not enabled (PREFILLKIT_SGLANG=1 enables it)")
        return
    version = require_sglang()
    missing = missing_seams()
    if missing:
        logger.error(
            "prefillkit: SGLang %s lacks %s; SGLang's own admission stays in place "
            "(tested: SGLang %s)",
            version,
            ", ".join(missing),
            ", ".join(TESTED_SGLANG_VERSIONS),
        )
        return
    if version not in TESTED_SGLANG_VERSIONS:
        logger.warning(
            "prefillkit: SGLang %s is not a tested version (%s); its seams are present",
            version,
            ", ".join(TESTED_SGLANG_VERSIONS),
        )
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    holder: dict[str, type] = {}

    def get_prefill_adder_class(self: Any) -> type:
        if "cls" not in holder:  # NOTE: built once the server args are published
            holder["cls"] = adder_class_for(settings, time.perf_counter)
        return holder["cls"]

    HookRegistry.register(
        f"{SCHEDULER}.get_prefill_adder_class", get_prefill_adder_class, HookType.REPLACE
    )
    if settings.affinity is not None or settings.max_wait_s is not None:
        HookRegistry.register(
            f"{POLICY}.calc_priority", _around_calc_priority(settings), HookType.AROUND
        )
    from prefillkit import __version__

    logger.info("prefillkit %s active in SGLang %s: %s", __version__, version, settings.describe())
