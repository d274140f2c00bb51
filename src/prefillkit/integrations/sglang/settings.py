"""The plugin's settings: environment variables, read in every SGLang process.

SGLang configures itself with ``SGLANG_*`` environment variables beside its flags, and its
plugin loader runs in every process (scheduler, detokenizer, DP controller) with no access
to the server's argument parser before the scheduler starts; environment variables reach
all of them the same way, so the plugin reads ``PREFILLKIT_SGLANG_*``:

======================================================= ======= =============================
variable                                                default meaning
======================================================= ======= =============================
``PREFILLKIT_SGLANG``                                   0       1: the plugin is active (else
                                                                it changes nothing)
``PREFILLKIT_SGLANG_ENABLE_AFFINITY``                   0       the warm/cold affinity policy
``PREFILLKIT_SGLANG_AFFINITY_WARM_FLOOR_TOKENS``        64      warm: device + host hit ≥ this
``PREFILLKIT_SGLANG_AFFINITY_SKIP_WINDOW``              16      W: skips per pass
``PREFILLKIT_SGLANG_AFFINITY_MAX_HEAD_DEFERS``          3       K: passes a request may be
                                                                deferred
``PREFILLKIT_SGLANG_AFFINITY_MAX_AGE_S``                5       T: seconds a request may wait
                                                                before it can't be skipped
``PREFILLKIT_SGLANG_SCHEDULE_MAX_WAIT_S``               (off)   the wait bound of lpm /
                                                                dfs-weight / lof / random
``PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV``                0       the CP gate: one request per
                                                                CP batch (SGLang's prefill CP)
``PREFILLKIT_SGLANG_ENABLE_CP_SHARED_KV_PREFILL_BS_GT1`` 0      CP batches of several requests
                                                                under the limits below
``PREFILLKIT_SGLANG_CP_SHARED_KV_PREFILL_MAX_REQUESTS``  (none)  requests per CP batch
``..._CP_SHARED_KV_PREFILL_MAX_TOTAL_EXTEND_TOKENS``     (none)  extend tokens per CP batch
``..._CP_SHARED_KV_PREFILL_MAX_CACHED_TOKENS``           (none)  cached tokens per CP batch
``..._CP_SHARED_KV_PREFILL_MAX_BUFFER_SIZE``             (none)  estimated temporary-buffer
                                                                bytes per CP batch (needs:)
``PREFILLKIT_SGLANG_MODEL``                              (none)  the estimator's model: a
                                                                prefillkit preset or a path
                                                                to a config.json
``PREFILLKIT_SGLANG_KV_CACHE_DTYPE``                     bf16    the KV cache dtype
======================================================= ======= =============================

The names are prefillkit's scheduler knobs (``prefillkit knobs``) upper-cased behind the
prefix, with the same meanings; a feature is off unless its variable turns it on, so with
``PREFILLKIT_SGLANG=1`` alone the adder is SGLang's own, decision for decision. A bad value
is one line naming the variable (:class:`SettingsError`): the plugin refuses to start
rather than serve with a setting it did not understand.

Pure: imports nothing from SGLang.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from prefillkit.models import ModelSpec
from prefillkit.sched.affinity import AffinityBounds
from prefillkit.sched.config import SchedulerConfig

PREFIX = "PREFILLKIT_SGLANG"


class SettingsError(ValueError):
    """A ``PREFILLKIT_SGLANG_*`` variable has a bad value; ``str(err)`` is one line."""


@dataclass(frozen=True, slots=True)
class CpLimits:
    """The CP shared-KV multi-request limits (None: unlimited), as prefillkit's
    ``cp_shared_kv_prefill_*`` knobs; ``bs_gt1`` False keeps one request per CP batch."""

    bs_gt1: bool = False
    max_requests: int | None = None
    max_total_extend_tokens: int | None = None
    max_cached_tokens: int | None = None
    # The temporary-buffer limit (bytes of sched/buffer.py's estimate) and the estimator's
    # model and KV dtype (the CP size and page size are SGLang's, read by the adder).
    max_buffer_bytes: int | None = None
    buffer_model: ModelSpec | None = None
    kv_cache_dtype: str = "bf16"


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """What the plugin does inside SGLang. ``affinity`` None: off; ``max_wait_s`` None:
    off; ``cp`` None: SGLang's own admission under CP (applies only where SGLang runs
    prefill context parallelism, ``--enable-prefill-cp`` with ``--attn-cp-size`` > 1)."""

    enabled: bool = False
    affinity: AffinityBounds | None = None
    max_wait_s: float | None = None
    cp: CpLimits | None = None

    @property
    def features_off(self) -> bool:
        """No feature is on: the adder and the ordering are SGLang's own."""
        return self.affinity is None and self.max_wait_s is None and self.cp is None

    def describe(self) -> str:
        """One line for SGLang's startup log."""
        parts = []
        if self.affinity is not None:
            a = self.affinity
            parts.append(
                f"affinity(floor={a.warm_floor_tokens}, W={a.skip_window}, "
                f"K={a.max_head_defers}, T={a.max_age_s:g}s)"
            )
        if self.max_wait_s is not None:
            parts.append(f"wait bound {self.max_wait_s:g}s")
        if self.cp is not None:
            c = self.cp
            if c.bs_gt1:
                parts.append(
                    f"CP bs>1(max_requests={c.max_requests}, "
                    f"max_total_extend_tokens={c.max_total_extend_tokens}, "
                    f"max_cached_tokens={c.max_cached_tokens}"
                    + (
                        f", max_buffer_size={c.max_buffer_bytes} for {c.buffer_model.name}"
                        if c.buffer_model is not None
                        else ""
                    )
                    + ")"
                )
            else:
                parts.append("CP bs=1")
        return ", ".join(parts) if parts else "every feature off (SGLang's own decisions)"


def _var(name: str) -> str:
    return f"{PREFIX}_{name}" if name else PREFIX


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(_var(name), "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{_var(name)}={env[_var(name)]!r}: expected 1/0 (true/false)")


def _int(env: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = env.get(_var(name), "").strip()
    if raw == "" or raw.lower() == "none":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{_var(name)}={raw!r}: expected an integer") from None
    if value < minimum:
        raise SettingsError(f"{_var(name)}={raw!r}: must be at least {minimum}")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = env.get(_var(name), "").strip()
    if raw == "" or raw.lower() in ("none", "-1"):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{_var(name)}={raw!r}: expected seconds") from None
    if not math.isfinite(value) or value < 0:
        raise SettingsError(f"{_var(name)}={raw!r}: expected seconds >= 0")
    return value


def _affinity(env: Mapping[str, str]) -> AffinityBounds | None:
    """The bounds (every variable checked, set or not) when affinity is on, else None."""
    d = AffinityBounds()
    age = _seconds(env, "AFFINITY_MAX_AGE_S", d.max_age_s)
    bounds = AffinityBounds(
        warm_floor_tokens=_int(env, "AFFINITY_WARM_FLOOR_TOKENS", d.warm_floor_tokens, 1)
        or d.warm_floor_tokens,
        skip_window=_int(env, "AFFINITY_SKIP_WINDOW", d.skip_window, 1) or d.skip_window,
        max_head_defers=_int(env, "AFFINITY_MAX_HEAD_DEFERS", d.max_head_defers, 0) or 0,
        max_age_s=d.max_age_s if age is None else age,
    )
    return bounds if _flag(env, "ENABLE_AFFINITY") else None


def _cp(env: Mapping[str, str]) -> CpLimits | None:
    shared = _flag(env, "ENABLE_CP_SHARED_KV")
    bs_gt1 = _flag(env, "ENABLE_CP_SHARED_KV_PREFILL_BS_GT1")
    if bs_gt1 and not shared:
        raise SettingsError(
            f"{_var('ENABLE_CP_SHARED_KV_PREFILL_BS_GT1')}=1 needs {_var('ENABLE_CP_SHARED_KV')}=1"
        )
    limits = CpLimits(
        bs_gt1=bs_gt1,
        max_requests=_int(env, "CP_SHARED_KV_PREFILL_MAX_REQUESTS", None, 1),
        max_total_extend_tokens=_int(env, "CP_SHARED_KV_PREFILL_MAX_TOTAL_EXTEND_TOKENS", None, 1),
        max_cached_tokens=_int(env, "CP_SHARED_KV_PREFILL_MAX_CACHED_TOKENS", None, 0),
    )
    buffer = _int(env, "CP_SHARED_KV_PREFILL_MAX_BUFFER_SIZE", None, 1)
    if buffer is not None:
        limits = replace(
            limits,
            max_buffer_bytes=buffer,
            buffer_model=_model(env),
            kv_cache_dtype=env.get(_var("KV_CACHE_DTYPE"), "bf16").strip() or "bf16",
        )
    given = (
        limits.max_requests,
        limits.max_total_extend_tokens,
        limits.max_cached_tokens,
        limits.max_buffer_bytes,
    )
    if not bs_gt1 and any(v is not None for v in given):
        raise SettingsError(
            f"{_var('CP_SHARED_KV_PREFILL_MAX_*')}: the CP limits need "
            f"{_var('ENABLE_CP_SHARED_KV_PREFILL_BS_GT1')}=1"
        )
    return limits if shared else None


def _model(env: Mapping[str, str]) -> ModelSpec:
    """The buffer estimator's model: a prefillkit preset name or a Hugging Face
    config.json path (``PREFILLKIT_SGLANG_MODEL``)."""
    import json
    from pathlib import Path

    from prefillkit.models.hf_config import model_from_hf_config
    from prefillkit.models.model_presets import MODELS

    raw = env.get(_var("MODEL"), "").strip()
    if not raw:
        raise SettingsError(
            f"{_var('CP_SHARED_KV_PREFILL_MAX_BUFFER_SIZE')} needs {_var('MODEL')}: a "
            f"prefillkit model ({', '.join(sorted(MODELS))}) or a config.json path"
        )
    if raw in MODELS:
        return MODELS[raw]
    path = Path(raw)
    try:
        return model_from_hf_config(json.loads(path.read_text(encoding="utf-8")), path.stem)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SettingsError(f"{_var('MODEL')}={raw!r}: {err}") from None


def settings_from_env(env: Mapping[str, str] | None = None) -> PluginSettings:
    """The settings in ``env`` (default: ``os.environ``); raises :class:`SettingsError`."""
    env = os.environ if env is None else env
    known = {
        _var(n)
        for n in (
            "",
            "ENABLE_AFFINITY",
            "AFFINITY_WARM_FLOOR_TOKENS",
            "AFFINITY_SKIP_WINDOW",
            "AFFINITY_MAX_HEAD_DEFERS",
            "AFFINITY_MAX_AGE_S",
            "SCHEDULE_MAX_WAIT_S",
            "ENABLE_CP_SHARED_KV",
            "ENABLE_CP_SHARED_KV_PREFILL_BS_GT1",
            "CP_SHARED_KV_PREFILL_MAX_REQUESTS",
            "CP_SHARED_KV_PREFILL_MAX_TOTAL_EXTEND_TOKENS",
            "CP_SHARED_KV_PREFILL_MAX_CACHED_TOKENS",
            "CP_SHARED_KV_PREFILL_MAX_BUFFER_SIZE",
            "MODEL",
            "KV_CACHE_DTYPE",
        )
    }
    unknown = sorted(k for k in env if k.startswith(PREFIX) and k not in known)
    if unknown:
        raise SettingsError(f"{unknown[0]}: not a prefillkit setting (docs/sglang.md lists them)")
    if not _flag(env, ""):
        return PluginSettings()
    return PluginSettings(
        enabled=True,
        affinity=_affinity(env),
        max_wait_s=_seconds(env, "SCHEDULE_MAX_WAIT_S", None),
        cp=_cp(env),
    )


def settings_from_scheduler_config(
    cfg: SchedulerConfig, buffer_model: ModelSpec | None = None, kv_cache_dtype: str = "bf16"
) -> PluginSettings:
    """The plugin settings that give SGLang the features ``cfg`` (prefillkit's own
    scheduler config) turns on, for ``replay --scheduler sglang+prefillkit``: affinity and
    its bounds, the wait bound (as prefillkit's: not under fcfs, and under priority
    scheduling only with priority aging) and the CP limits; the buffer limit's estimator
    needs ``buffer_model`` (ValueError without it) and the KV dtype."""
    affinity = None
    if cfg.enable_affinity:
        affinity = AffinityBounds(
            warm_floor_tokens=cfg.affinity_warm_floor_tokens,
            skip_window=cfg.affinity_skip_window,
            max_head_defers=cfg.affinity_max_head_defers,
            max_age_s=cfg.affinity_max_age_s,
        )
    wait = cfg.schedule_max_wait_s
    if cfg.schedule_policy == "fcfs" or (
        cfg.enable_priority_scheduling and not cfg.enable_priority_aging
    ):
        wait = None
    cp = None
    if cfg.cp_size > 1 and cfg.enable_cp_shared_kv:
        cp = CpLimits(
            bs_gt1=cfg.enable_cp_shared_kv_prefill_bs_gt1,
            max_requests=cfg.cp_shared_kv_prefill_max_requests,
            max_total_extend_tokens=cfg.cp_shared_kv_prefill_max_total_extend_tokens,
            max_cached_tokens=cfg.cp_shared_kv_prefill_max_cached_tokens,
        )
        if cfg.cp_shared_kv_prefill_max_buffer_size is not None:
            if buffer_model is None:
                raise ValueError("the CP buffer limit needs the model (buffer_model)")
            cp = replace(
                cp,
                max_buffer_bytes=cfg.cp_shared_kv_prefill_max_buffer_size,
                buffer_model=buffer_model,
                kv_cache_dtype=kv_cache_dtype,
            )
    return PluginSettings(enabled=True, affinity=affinity, max_wait_s=wait, cp=cp)
