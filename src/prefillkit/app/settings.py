"""The user-facing settings: one flat, validated :class:`Config` with every knob.

This is the application layer's view: every knob is a field of :class:`Config` (declared
in :class:`~prefillkit.app.knobs.Knobs`), spelled like SGLang's ``ServerArgs`` where
SGLang has the flag, so a field ``chunked_prefill_size`` is the flag
``--chunked-prefill-size``. Each field carries ``help`` and ``group`` metadata, from which
the CLI generates one option per field and the README prints a knob table
(:func:`~prefillkit.app.knob_table.knob_table`). A :class:`Config` is split by owner:

- :meth:`Config.scheduler_config` → :class:`~prefillkit.sched.config.SchedulerConfig`,
  the admission knobs the scheduler reads (the core);
- :meth:`Config.sim_settings` → :class:`~prefillkit.cost.deployment.SimSettings`, the
  simulated deployment (model, GPU, parallelism, links, memory sizing), which carries
  the scheduler config.

A :class:`Config` is validated once, at construction, by building both (so each knob is
checked by its owner) plus the checks only this layer can make (the model preset name,
the field types): any impossible combination raises :class:`ConfigError` with one line
that names the offending flag. Normalisations done at construction (so the stored values
are canonical):

- ``page_size`` ``None`` resolves to 64 when ``cp_size > 1`` else 1 (after construction it is
  always an ``int``; note that ``dataclasses.replace`` keeps the resolved value, so pass
  ``page_size=None`` to re-resolve after changing ``cp_size``);
- ``chunked_prefill_size``, ``lpm_fallback_queue_len`` and ``schedule_max_wait_s`` of ``-1``
  become ``None``;
- ``model`` and the enum-like strings are lower-cased, ``kv_cache_dtype`` ``bfloat16`` → ``bf16``;
- ints given for float fields become floats.

``cp_symm_staging_pages`` stays ``None`` when not given; the scheduler config's
``staging_identity`` derives it, so ``dataclasses.replace`` on the extend limits never
trips a stale value.

Sources: :func:`~prefillkit.app.config_file.read_config_file` (the one TOML reader: keys
with ``_`` or ``-``, top level or a ``[prefillkit]`` table, plus the file's ``[workload]``
table for the workload options), :func:`~prefillkit.app.flags.parse_flags`
(SGLang-spelled command-line flags, with a few SGLang aliases; every other SGLang 0.5.23
launch flag is ignored or refused as :mod:`prefillkit.app.launch_flags` classifies it)
and :meth:`Config.from_sources` (file first, flags override). The model a config names
is resolved by :mod:`prefillkit.app.model_source`. Every name those modules define that
was once defined here is still importable from here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prefillkit.app.config_file import ConfigFile as ConfigFile
from prefillkit.app.config_file import read_config_file as read_config_file
from prefillkit.app.config_file import read_toml as read_toml
from prefillkit.app.flags import ParsedFlags as ParsedFlags
from prefillkit.app.flags import accepted_flags as accepted_flags
from prefillkit.app.flags import parse_flags as parse_flags
from prefillkit.app.flags import suggest_flag as suggest_flag
from prefillkit.app.knob_table import describe as describe
from prefillkit.app.knob_table import knob_table as knob_table
from prefillkit.app.knob_types import FIELD_NAMES, check_type
from prefillkit.app.knobs import GROUPS as GROUPS
from prefillkit.app.knobs import Knobs
from prefillkit.app.model_source import MODEL_CONFIG_DIR as MODEL_CONFIG_DIR
from prefillkit.app.model_source import read_model_config as read_model_config
from prefillkit.app.model_source import resolve_model as resolve_model
from prefillkit.app.scheduler_choice import SCHEDULERS
from prefillkit.cost.deployment import KV_CACHE_DTYPES, MODES, SimSettings
from prefillkit.models import MODELS, ModelSpec
from prefillkit.sched.config import (
    SCHEDULE_POLICIES,
    SCHEDULER_FIELDS,
    WRITE_POLICIES,
    ConfigError,
    SchedulerConfig,
    check_choice,
    field_flag,
)
from prefillkit.sim.routers.config import RouterConfig
from prefillkit.text import suggest as _suggest

__all__ = [
    "GROUPS",
    "KV_CACHE_DTYPES",
    "MODES",
    "SCHEDULE_POLICIES",
    "WRITE_POLICIES",
    "Config",
    "ConfigError",
    "ConfigFile",
    "ParsedFlags",
    "blame_config_file",
    "describe",
    "field_flag",
    "knob_table",
    "parse_flags",
    "read_config_file",
]


_KV_DTYPE_ALIASES: dict[str, str] = {"bfloat16": "bf16"}

_CP_DEFAULT_PAGE_SIZE = 64


@dataclass(frozen=True, slots=True)
class Config(Knobs):
    """Every prefillkit knob; validated at construction. See the module docstring."""

    # ----------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            checked = check_type(f.name, value)
            if checked is not value:
                object.__setattr__(self, f.name, checked)
        self._normalise()
        self._validate()

    def _normalise(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        if self.page_size is None:
            put("page_size", _CP_DEFAULT_PAGE_SIZE if self.cp_size > 1 else 1)
        if self.chunked_prefill_size == -1:
            put("chunked_prefill_size", None)
        if self.lpm_fallback_queue_len == -1:
            put("lpm_fallback_queue_len", None)
        if self.schedule_max_wait_s == -1:
            put("schedule_max_wait_s", None)
        dtype = self.kv_cache_dtype.strip().lower()
        put("kv_cache_dtype", _KV_DTYPE_ALIASES.get(dtype, dtype))
        for name in (
            "model",
            "gpu",
            "mode",
            "schedule_policy",
            "hicache_write_policy",
            "cost_model",
            "small_gemm",
            "scheduler",
            "router",
        ):
            put(name, getattr(self, name).strip().lower())

    def _validate(self) -> None:
        check_choice("model", self.model, tuple(MODELS))
        check_choice("scheduler", self.scheduler, SCHEDULERS)
        self._validate_fleet()
        self.sim_settings()  # resolves the model and builds (validates) both configs

    def _validate_fleet(self) -> None:
        """``--instances``, ``--router`` and the ``--router-*`` knobs (the router's own
        check, its ``router.<param>`` named as the flag)."""
        if self.instances < 1:
            raise ConfigError(f"--instances: must be >= 1, got {self.instances}")
        values = {p: getattr(self, "router_" + p) for p in _ROUTER_PARAMS}
        try:
            RouterConfig(name=self.router, seed=self.seed, **values)
        except ConfigError as exc:
            text = re.sub(
                r"^router\.([a-z_]+)",
                lambda m: "--router-" + m.group(1).replace("_", "-"),
                str(exc),
            )
            raise ConfigError(re.sub(r"^router\b", "--router", text)) from None

    # ----------------------------------------------------------------- the split
    def scheduler_config(self) -> SchedulerConfig:
        """The admission knobs as the scheduler's own config (validated there)."""
        values = {name: getattr(self, name) for name in SCHEDULER_FIELDS}
        return SchedulerConfig(**values)

    def sim_settings(self) -> SimSettings:
        """The simulated deployment, carrying :meth:`scheduler_config` (validated there)."""
        return SimSettings(
            self.scheduler_config(),
            model=self.model_spec,
            **{name: getattr(self, name) for name in _SIM_FIELDS},
        )

    # ----------------------------------------------------------------- derived values
    @property
    def resolved_page_size(self) -> int:
        """The page size (always resolved at construction)."""
        assert self.page_size is not None
        return self.page_size

    @property
    def model_spec(self) -> ModelSpec:
        """The model: from ``model_config`` if set, else ``model_path`` (a preset's
        Hugging Face id, or a local config.json / folder), else the ``model`` preset.
        Raises ``ConfigError`` naming the flag (an unknown id names both flags)."""
        return resolve_model(self.model, self.model_path, self.model_config)

    # ----------------------------------------------------------------- loading
    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """Load a TOML file (top-level keys or a ``[prefillkit]`` table; ``_`` or ``-``)."""
        values = read_config_file(path).values
        try:
            return cls(**values)  # type: ignore[arg-type]  # NOTE: values checked in __post_init__
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    @classmethod
    def from_sources(
        cls, config_file: str | Path | ConfigFile | None, flags: dict[str, object]
    ) -> Config:
        """File settings first (if a file or path is given), then ``flags`` (field names)
        override. An error caused by a file setting is prefixed with the file's path."""
        if config_file is not None and not isinstance(config_file, ConfigFile):
            config_file = read_config_file(config_file)
        values: dict[str, object] = {}
        if config_file is not None:
            values.update(config_file.values)
        flag_names: set[str] = set()
        for key, value in flags.items():
            name = key.replace("-", "_")
            if name not in FIELD_NAMES:
                raise ConfigError(f"unknown setting {key!r}{_suggest(name, FIELD_NAMES)}")
            values[name] = value
            flag_names.add(name)
        try:
            return cls(**values)  # type: ignore[arg-type]  # NOTE: values checked in __post_init__
        except ConfigError as exc:
            raise ConfigError(blame_config_file(str(exc), config_file, flag_names)) from None


def blame_config_file(
    message: str, config_file: ConfigFile | None, flag_names: Iterable[str]
) -> str:
    """``message`` prefixed with ``"{path}: "`` when the setting it starts with
    (``--flag ...``) comes from ``config_file`` rather than from a command-line flag
    (``flag_names``: field names given as flags), so the error names its source."""
    if config_file is None or message.startswith(f"{config_file.path}:"):
        return message
    m = re.match(r"--([a-z0-9-]+)", message)
    if m is None:
        return message
    name = m.group(1).replace("-", "_")
    if name not in FIELD_NAMES or name in set(flag_names):
        return message
    return f"{config_file.path}: {message}" if name in config_file.values else message


#: Config fields that :class:`SimSettings` takes as they are (``scheduler`` and ``model``
#: are built from the rest).
_SIM_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(SimSettings) if f.name not in ("scheduler", "model")
)
_ROUTER_PARAMS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(RouterConfig) if f.name not in ("name", "seed")
)
_FLEET_FIELDS: tuple[str, ...] = tuple(
    name for name in FIELD_NAMES if name in ("instances", "fleet") or name.startswith("router")
)
_APP_FIELDS: tuple[str, ...] = ("model", "model_path", "model_config", "scheduler", *_FLEET_FIELDS)
assert set(SCHEDULER_FIELDS) | set(_SIM_FIELDS) | set(_APP_FIELDS) == set(FIELD_NAMES)
assert not set(SCHEDULER_FIELDS) & set(_SIM_FIELDS)
