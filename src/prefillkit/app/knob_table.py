"""The knobs as text and data: the knob table (flag, default, meaning) and a config's
every knob with its resolved value (:func:`describe`, the ``config`` of a run's
``summary.json``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from prefillkit.app.knobs import Knobs
from prefillkit.sched.config import field_flag

if TYPE_CHECKING:
    from prefillkit.app.settings import Config

__all__ = ["describe", "knob_table"]


def _format_default(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def knob_table() -> list[tuple[str, str, str]]:
    """``(flag, default, meaning)`` for every field, in declaration order."""
    return [
        (field_flag(f.name), _format_default(f.default), str(f.metadata["help"]))
        for f in dataclasses.fields(Knobs)
    ]


def describe(cfg: Config) -> dict[str, object]:
    """Every field with its resolved value (JSON-serialisable; ``Config(**describe(c))``
    works for a preset model).

    Resolved: ``model`` (the model's name: the preset ``--model-path`` selects, or the name
    a ``config.json`` model gets), ``page_size``, ``kv_cache_dtype`` (auto → bf16),
    ``kv_bytes_per_token`` (from the model) and ``cp_symm_staging_pages`` (derived when
    ``cp_prefill_mix_chunked``).
    """
    sim = cfg.sim_settings()
    out: dict[str, object] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    out["model"] = sim.model.name
    out["page_size"] = cfg.resolved_page_size
    out["kv_cache_dtype"] = sim.resolved_kv_cache_dtype
    out["kv_bytes_per_token"] = sim.resolved_kv_bytes_per_token
    if cfg.cp_prefill_mix_chunked:
        out["cp_symm_staging_pages"] = sim.scheduler.staging_identity()[2]
    return out
