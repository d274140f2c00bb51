"""``--scheduler``: which admission a replay runs, as the engine's scheduler factory.

- ``prefillkit`` (the default): prefillkit's own scheduler (no factory: the engine builds
  it);
- ``sglang``: SGLang's own admission pass, adder, radix tree and pools on CPU
  (``prefillkit.integrations.sglang.backend``; needs the ``sglang`` extra);
- ``sglang+prefillkit``: the same with prefillkit's plugin adder installed in it.

The one place outside ``prefillkit.integrations`` that imports it, and only when a run
asks for it (inside the functions below), so the simulator and the rest of the
application never load SGLang. Errors are one line naming the flag:
:class:`~prefillkit.sched.config.ConfigError` (the extra is missing, or a setting the
backend cannot mirror) and :class:`InputError`-style ``ValueError`` for an executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefillkit.sched.config import ConfigError

if TYPE_CHECKING:
    from prefillkit.cost.deployment import SimSettings
    from prefillkit.sim.engine import SchedulerFactory

__all__ = ["SCHEDULERS", "check_scheduler", "scheduler_factory"]

SCHEDULERS: tuple[str, ...] = ("prefillkit", "sglang", "sglang+prefillkit")


def check_scheduler(name: str, settings: SimSettings, executor: str = "sim") -> None:
    """Refuse (one line) what ``--scheduler name`` cannot run, without importing SGLang:
    a measured executor, a setting the SGLang backend cannot mirror, a missing extra."""
    if name == "prefillkit":
        return
    if executor != "sim":
        raise ConfigError(
            f"--executor {executor}: runs prefillkit's own scheduler; not with "
            f"--scheduler {name} (its steps carry no page tables)"
        )
    from prefillkit.integrations.sglang import MISSING_EXTRA, sglang_installed
    from prefillkit.integrations.sglang.replay_limits import refusal

    if not sglang_installed():
        raise ConfigError(f"--scheduler {name}: {MISSING_EXTRA}")
    reason = refusal(settings, name)
    if reason is not None:
        raise ConfigError(reason)


def scheduler_factory(
    name: str, settings: SimSettings, executor: str = "sim"
) -> SchedulerFactory | None:
    """The engine's scheduler factory for ``--scheduler name`` (None: prefillkit's own);
    checked first (:func:`check_scheduler`)."""
    check_scheduler(name, settings, executor)
    if name == "prefillkit":
        return None
    from prefillkit.integrations.sglang import MissingExtraError

    try:  # NOTE: require_sglang (run on import) silences SGLang's CPU import warnings
        from prefillkit.integrations.sglang.backend import scheduler_factory as backend
    except MissingExtraError as err:
        raise ConfigError(f"--scheduler {name}: {err}") from None
    return backend(plugin=name == "sglang+prefillkit")
