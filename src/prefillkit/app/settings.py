"""The user-facing settings: one flat, validated :class:`Config` with every knob.

This is the application layer's view: every knob is a field of :class:`Config`, spelled
like SGLang's ``ServerArgs`` where SGLang has the flag, so a field
``chunked_prefill_size`` is the flag ``--chunked-prefill-size``. Each field carries
``help`` and ``group`` metadata, from which the CLI generates one option per field and the
README prints a knob table (:func:`knob_table`). A :class:`Config` is split by owner:

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

Sources: :func:`read_config_file` (the one TOML reader: keys with ``_`` or ``-``, top
level or a ``[prefillkit]`` table, plus the file's ``[workload]`` table for the workload
options), :func:`parse_flags` (SGLang-spelled command-line flags, with a few SGLang
aliases; every other SGLang 0.5.23 launch flag is ignored or refused as
:mod:`prefillkit.app.launch_flags` classifies it) and
:meth:`Config.from_sources` (file first, flags override).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefillkit.app.launch_flags import (
    consume_launch_flag,
    strip_launch_prefix,
    suggest_launch_flag,
)
from prefillkit.cost.deployment import KV_CACHE_DTYPES, MODES, SimSettings
from prefillkit.models import (
    MODELS,
    ModelConfigError,
    ModelSpec,
    get_model,
    model_from_hf_config,
    preset_for_model_id,
)
from prefillkit.sched.config import (
    SCHEDULE_POLICIES,
    SCHEDULER_FIELDS,
    WRITE_POLICIES,
    ConfigError,
    SchedulerConfig,
    check_choice,
    field_flag,
)
from prefillkit.text import one_line as _one_line
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

#: Field groups, in the order a CLI/README should present them.
GROUPS: tuple[str, ...] = (
    "memory",
    "scheduler",
    "priority",
    "hicache",
    "cp",
    "affinity",
    "deployment",
)

_CP_DEFAULT_PAGE_SIZE = 64


def _knob(default: Any, help: str, group: str) -> Any:
    if group not in GROUPS:  # pragma: no cover - programming error
        raise AssertionError(f"unknown group {group!r}")
    return field(default=default, metadata={"help": help, "group": group})


@dataclass(frozen=True, slots=True)
class Config:
    """Every prefillkit knob; validated at construction. See the module docstring."""

    # ----------------------------------------------------------------- memory / KV pool
    page_size: int | None = _knob(
        None,
        "Tokens per KV page; unset = 64 with context parallelism (cp_size > 1), else 1.",
        "memory",
    )
    max_total_tokens: int | None = _knob(
        None,
        "KV pool capacity in tokens, all CP lanes together; unset = derived from GPU memory.",
        "memory",
    )
    kv_cache_dtype: str = _knob(
        "auto", "KV cache dtype: auto (= bf16), bf16, fp8_e4m3 or fp8_e5m2.", "memory"
    )
    kv_bytes_per_token: int | None = _knob(
        None, "KV bytes per token; unset = from the model preset and --kv-cache-dtype.", "memory"
    )
    mem_fraction_static: float = _knob(
        0.88,
        "Fraction of GPU memory for weights + KV pool, in (0, 1]. A launch line without it "
        "gets SGLang's GPU-dependent default (GPU memory less its activation and CUDA-graph "
        "reserve: 0.878 for DeepSeek-V3 at TP 8 on H200).",
        "memory",
    )
    device_memory_gb: float | None = _knob(
        None, "Memory per GPU in GB; unset = the GPU preset's.", "memory"
    )

    # ----------------------------------------------------------------- scheduler core
    max_prefill_tokens: int = _knob(
        16384, "Legacy input-token budget of one prefill batch (rem_input_tokens).", "scheduler"
    )
    chunked_prefill_size: int | None = _knob(
        8192,
        "Chunk budget per prefill batch (rem_chunk_tokens); -1 or none disables chunking. "
        "A launch line without it gets SGLang's GPU-dependent default (16384 from 160 GiB "
        "of GPU memory, 8192 from 60 GiB, less below).",
        "scheduler",
    )
    max_running_requests: int | None = _knob(
        None,
        "Slot limit: requests holding KV at once; unset = min(4096, pool tokens / 2).",
        "scheduler",
    )
    schedule_policy: str = _knob(
        "fcfs", "Waiting-queue order: fcfs, lpm, dfs-weight or lof.", "scheduler"
    )
    lpm_fallback_queue_len: int | None = _knob(
        None,
        "LPM falls back to FCFS when the waiting queue is longer than this (upstream: 128); "
        "-1 or none = never (default: matching is cheap, see benchmarks/RESULTS.md).",
        "scheduler",
    )
    schedule_max_wait_s: float | None = _knob(
        5.0,
        "Wait bound of lpm, dfs-weight, lof and random: a request waiting this many seconds "
        "goes ahead of the policy's order, oldest first (prefillkit extension; -1 or none = "
        "off, upstream). With affinity on, min(this, --affinity-max-age-s) is used.",
        "scheduler",
    )
    schedule_conservativeness: float = _knob(
        1.0, "Scales the initial new-token ratio (higher = reserve more decode room).", "scheduler"
    )
    init_new_token_ratio: float = _knob(
        0.7,
        "Initial new-token ratio (times --schedule-conservativeness, capped at 1).",
        "scheduler",
    )
    min_new_token_ratio_factor: float = _knob(
        0.14, "Floor of the new-token ratio as a fraction of its initial value.", "scheduler"
    )
    new_token_ratio_decay_steps: int = _knob(
        600, "Decode steps for the new-token ratio to decay from initial to floor.", "scheduler"
    )
    clip_max_new_tokens: int = _knob(
        4096, "Output tokens reserved per request are clipped to this.", "scheduler"
    )

    # ----------------------------------------------------------------- priority
    enable_priority_scheduling: bool = _knob(
        False, "Order the queue by request priority (needs fcfs or lof).", "priority"
    )
    schedule_low_priority_values_first: bool = _knob(
        False, "Lower priority values are more important.", "priority"
    )
    enable_priority_aging: bool = _knob(
        False,
        "Apply --schedule-max-wait-s under priority scheduling too (aged requests go ahead "
        "of every class); off = strict classes, upstream.",
        "priority",
    )
    priority_scheduling_preemption_threshold: int = _knob(
        10, "Preempt only victims whose priority differs by more than this.", "priority"
    )
    enable_priority_preemption: bool = _knob(
        True,
        "Preempt lower-priority running requests when the slot limit blocks a higher one.",
        "priority",
    )
    enable_preempt_on_no_token: bool = _knob(
        False,
        "prefillkit extension: also preempt when memory (NO_TOKEN) blocks a higher-priority "
        "request.",
        "priority",
    )
    enable_ignore_eos_admission: bool = _knob(
        False,
        "Upstream's add_one_req_ignore_eos test for ignore_eos requests: the whole output "
        "(not clipped, ratio 1.0) of every running and admitted request must fit the "
        "current free + evictable tokens as requests finish (upstream takes this path only "
        "with the radix cache disabled; here it is added to the normal test).",
        "scheduler",
    )

    # ----------------------------------------------------------------- hicache
    enable_hierarchical_cache: bool = _knob(
        False, "Enable the host (L2) KV cache tier (HiCache).", "hicache"
    )
    hicache_ratio: float = _knob(
        2.0,
        "Host pool size as a multiple of the device pool (used when --hicache-size is 0).",
        "hicache",
    )
    hicache_size: int = _knob(
        0, "Host pool size in GB per GPU; 0 = use --hicache-ratio.", "hicache"
    )
    hicache_write_policy: str = _knob(
        "write_through",
        "Host backup policy: write_through, write_through_selective or write_back.",
        "hicache",
    )
    hicache_write_through_threshold: int = _knob(
        2, "Hits (requests caching the prefix) before a write_through_selective backup.", "hicache"
    )
    hicache_load_back_threshold: int = _knob(
        10, "Host hits shorter than this many tokens are not loaded back.", "hicache"
    )

    # ----------------------------------------------------------------- context parallel
    tp_size: int = _knob(1, "Tensor-parallel degree (GPUs per instance).", "cp")
    cp_size: int = _knob(1, "Context-parallel degree; must divide --tp-size.", "cp")
    enable_cp_shared_kv: bool = _knob(
        False, "CP shared-KV: the KV pool is sharded over cp_size owner lanes.", "cp"
    )
    enable_cp_shared_kv_prefill_bs_gt1: bool = _knob(
        False, "Allow several requests per CP shared-KV prefill batch.", "cp"
    )
    cp_shared_kv_prefill_max_requests: int | None = _knob(
        None, "CP bs>1: most requests per prefill batch; unset = unlimited.", "cp"
    )
    cp_shared_kv_prefill_max_total_extend_tokens: int | None = _knob(
        None,
        "CP bs>1: most extend tokens per batch (page-aligned); capped by the chunk budget.",
        "cp",
    )
    cp_shared_kv_prefill_max_cached_tokens: int | None = _knob(
        None, "CP bs>1: most cached (L1 + loaded L2) tokens per batch; unset = unlimited.", "cp"
    )
    cp_shared_kv_prefill_max_buffer_size: int | None = _knob(
        None, "CP bs>1: most estimated temporary-buffer bytes per batch; unset = unlimited.", "cp"
    )
    cp_prefill_mix_chunked: bool = _knob(
        False, "Experimental: admit followers after a tail chunk in a CP bs>1 batch.", "cp"
    )
    cp_symm_staging_pages: int | None = _knob(
        None,
        "Symmetric staging capacity in pages; must equal extend-cap pages + max requests "
        "(unset = derived).",
        "cp",
    )

    # ----------------------------------------------------------------- affinity
    enable_affinity: bool = _knob(
        False, "Warm/cold cache-affinity admission (cold skipped behind a warm lead).", "affinity"
    )
    affinity_warm_floor_tokens: int = _knob(
        64, "A candidate is warm if device prefix + host hit reaches this many tokens.", "affinity"
    )
    affinity_skip_window: int = _knob(
        16, "Most cold skips per admission pass (W) before the scan stops.", "affinity"
    )
    affinity_max_head_defers: int = _knob(
        3, "Passes a cold request may be skipped (K) before the scan stops at it.", "affinity"
    )
    affinity_max_age_s: float = _knob(
        5.0, "Cold requests waiting this long (T, seconds) stop the scan instead.", "affinity"
    )

    # ----------------------------------------------------------------- deployment / simulator
    model: str = _knob("glm-5", f"Model preset: {', '.join(MODELS)}.", "deployment")
    model_path: str | None = _knob(
        None,
        "SGLang's --model-path: a Hugging Face id of a preset selects it "
        "(deepseek-ai/DeepSeek-V3 -> deepseek-v3, ...); a local config.json, or a folder "
        "holding one, is read; any other id needs --model-config.",
        "deployment",
    )
    model_config: str | None = _knob(
        None,
        "A Hugging Face config.json (or a folder holding one) to build the model from "
        "(layers, heads, KV/latent dims, experts, DSA indexer, dtype); wins over --model "
        "and --model-path's preset.",
        "deployment",
    )
    gpu: str = _knob("h200", "GPU preset name (validated by the simulator).", "deployment")
    mode: str = _knob(
        "pd-prefill", "pd-prefill (prefill instance of a PD pair) or colocated.", "deployment"
    )
    ep_size: int = _knob(
        1,
        "Expert-parallel degree of the MoE layers: 1 (MoE tensor-parallel over --tp-size) "
        "or --tp-size (all-to-all dispatch/combine), as SGLang's --ep-size.",
        "deployment",
    )
    enable_two_batch_overlap: bool = _knob(
        False,
        "Two-batch overlap: MoE communication hides under compute (SGLang's flag).",
        "deployment",
    )
    nvlink_bandwidth_gbps: float | None = _knob(
        None,
        "Scale-up (NVLink) bandwidth per GPU per direction in GB/s; unset = the GPU preset's.",
        "deployment",
    )
    net_bandwidth_gbps: float | None = _knob(
        None,
        "Scale-out NIC bandwidth per GPU in GB/s (IB/RoCE); unset = the GPU preset's.",
        "deployment",
    )
    kv_transfer_bandwidth_gbps: float = _knob(
        50.0, "KV send-out bandwidth per GPU in GB/s (pd-prefill).", "deployment"
    )
    h2d_bandwidth_gbps: float = _knob(
        25.0, "Host-to-device load-back bandwidth per GPU in GB/s.", "deployment"
    )
    cost_model: str = _knob(
        "roofline",
        "What times a simulated forward: roofline (per-rank roofline, the default) or aic "
        "(NVIDIA AIConfigurator's measured kernel tables per GPU and engine version, the "
        "roofline for what they lack; needs the aic extra).",
        "deployment",
    )
    small_gemm: str = _knob(
        "tiles",
        "The roofline's small-GEMM assumption: tiles (tile padding and wave quantisation "
        "from the GPU's SM count), sqrt-h100 (prefillkit 0.2's H100 curve) or ideal (no "
        "small-GEMM loss).",
        "deployment",
    )
    open_loop: bool = _knob(
        False,
        "Send every turn of an agent session at its trace time (open-loop) instead of "
        "after the previous turn's answer + think time (closed-loop, the default).",
        "deployment",
    )
    session_decode_tokens_per_s: float | None = _knob(
        None,
        "Decode speed that times a session turn's answer from its first token; unset = "
        "the simulated decode (colocated) or this deployment's batch-1 decode step "
        "(pd-prefill). A stated --agentic-decode-tokens-per-s sets it too.",
        "deployment",
    )
    seed: int = _knob(0, "Random seed.", "deployment")
    debug_check_invariants: bool = _knob(
        False, "Check scheduler/cache invariants after every step (slow).", "deployment"
    )

    # ----------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            checked = _check_type(f.name, value)
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
        ):
            put(name, getattr(self, name).strip().lower())

    def _validate(self) -> None:
        check_choice("model", self.model, tuple(MODELS))
        self.sim_settings()  # resolves the model and builds (validates) both configs

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
            if name not in _FIELD_NAMES:
                raise ConfigError(f"unknown setting {key!r}{_suggest(name, _FIELD_NAMES)}")
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
    if name not in _FIELD_NAMES or name in set(flag_names):
        return message
    return f"{config_file.path}: {message}" if name in config_file.values else message


# --------------------------------------------------------------------- type checking

_TypeSpec = tuple[type, bool]  # (base type, nullable)


def _field_types() -> dict[str, _TypeSpec]:
    hints = typing.get_type_hints(Config)
    specs: dict[str, _TypeSpec] = {}
    for f in dataclasses.fields(Config):
        hint = hints[f.name]
        args = typing.get_args(hint)
        if args:
            bases = [a for a in args if a is not type(None)]
            assert len(bases) == 1, f.name
            specs[f.name] = (bases[0], True)
        else:
            specs[f.name] = (hint, False)
    return specs


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config))
#: Config fields that :class:`SimSettings` takes as they are (``scheduler`` and ``model``
#: are built from the rest).
_SIM_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(SimSettings) if f.name not in ("scheduler", "model")
)
_APP_FIELDS: tuple[str, ...] = ("model", "model_path", "model_config")
assert set(SCHEDULER_FIELDS) | set(_SIM_FIELDS) | set(_APP_FIELDS) == set(_FIELD_NAMES)
assert not set(SCHEDULER_FIELDS) & set(_SIM_FIELDS)
_FIELD_TYPES: dict[str, _TypeSpec] = _field_types()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TYPE_WORDS: dict[type, str] = {
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    str: "a string",
}


def _type_error(name: str, value: object, prefix: str = "") -> ConfigError:
    base, nullable = _FIELD_TYPES[name]
    want = _TYPE_WORDS[base] + (" or none" if nullable else "")
    shown = _one_line(repr(value))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    where = prefix or field_flag(name)
    return ConfigError(f"{where}: expected {want}, got {type(value).__name__} {shown}")


def _check_type(name: str, value: object, prefix: str = "") -> object:
    """Return ``value`` (floats normalised) if it fits the field's type, else raise."""
    base, nullable = _FIELD_TYPES[name]
    if value is None:
        if nullable:
            return None
        raise _type_error(name, value, prefix)
    if base is bool:
        if isinstance(value, bool):
            return value
    elif base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64_MIN <= value <= _INT64_MAX:
                where = prefix or field_flag(name)
                digits = len(str(abs(value)))
                raise ConfigError(
                    f"{where}: must fit in a 64-bit integer, got a {digits}-digit number"
                )
            return value
    elif base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            as_float = float(value)
            if not math.isfinite(as_float):
                where = prefix or field_flag(name)
                raise ConfigError(f"{where}: must be a finite number, got {value}")
            return as_float
    elif base is str:
        if isinstance(value, str):
            return value
    raise _type_error(name, value, prefix)


# --------------------------------------------------------------------- the model

MODEL_CONFIG_DIR = Path(__file__).resolve().parents[1] / "model_configs"


def _config_json(path: Path) -> Path | None:
    """``path`` if it is a file, ``path/config.json`` if that exists, else None."""
    if path.is_file():
        return path
    candidate = path / "config.json"
    return candidate if candidate.is_file() else None


def read_model_config(path: str | Path, flag: str, name: str | None = None) -> ModelSpec:
    """The model of a Hugging Face ``config.json`` (a file, or a folder holding one).

    ``name`` defaults to the folder's (or, for a bare file, the file's stem) name, lower
    case. Raises ``ConfigError`` starting with ``flag`` and the path."""
    where = Path(path)
    file = _config_json(where)
    if file is None:
        raise ConfigError(f"{flag} {path}: no such file, and no folder holding a config.json")
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{flag} {file}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{flag} {file}: not a JSON config: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ConfigError(f"{flag} {file}: not a JSON config: nested too deeply") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{flag} {file}: expected a JSON object (a Hugging Face config.json)")
    if name is None:
        stem = file.parent.name if file.name == "config.json" else file.stem
        name = stem.lower() or "model"
    try:
        return model_from_hf_config(raw, name)
    except ModelConfigError as exc:
        raise ConfigError(f"{flag} {file}: {exc}") from None


def resolve_model(model: str, model_path: str | None, model_config: str | None) -> ModelSpec:
    """See :attr:`Config.model_spec`."""
    if model_config is not None:
        preset = preset_for_model_id(model_path) if model_path else None
        return read_model_config(model_config, "--model-config", preset)
    if model_path is not None:
        preset = preset_for_model_id(model_path)
        if preset is not None:
            return get_model(preset)
        if _config_json(Path(model_path)) is not None:
            return read_model_config(model_path, "--model-path")
        raise ConfigError(
            f"--model-path {model_path}: not the Hugging Face id of a model preset and not "
            "a local config.json or a folder holding one; give --model-config PATH (the "
            f"model's Hugging Face config.json) or --model NAME ({', '.join(MODELS)})"
        )
    return get_model(model)


# --------------------------------------------------------------------- TOML

_NULL_WORDS = frozenset({"none", "null"})


def read_toml(path: str | Path) -> dict[str, Any]:
    """The parsed TOML document at ``path``; one-line ``ConfigError`` s naming the file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer over Python's digit limit
        raise ConfigError(f"{path}: invalid TOML: {_one_line(str(exc))}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays / tables
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A ``--config`` file, read and checked once (:func:`read_config_file`).

    ``values``: its settings by field name, typed; ``document``: the whole parsed file
    (its ``[workload]`` table is read from here by the workload options).
    """

    path: str
    values: dict[str, object]
    document: dict[str, Any]


def read_config_file(path: str | Path) -> ConfigFile:
    """Read a config file: settings at the top level or in a ``[prefillkit]`` table
    (``_`` or ``-`` spellings; ``none``/``null`` unsets an optional one), beside an
    optional ``[workload]`` table (which needs the ``[prefillkit]`` table). Each value is
    type-checked; ranges and combinations are checked when a :class:`Config` is built.
    Raises ``ConfigError`` naming the file (and the key)."""
    data = read_toml(path)
    if isinstance(data.get("workload"), dict) and "prefillkit" not in data:
        raise ConfigError(
            f"{path}: a file with a [workload] table keeps its config settings in a "
            "[prefillkit] table (an empty one is fine)"
        )
    table: dict[str, Any] = data
    if "prefillkit" in data:
        section = data["prefillkit"]
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: 'prefillkit' must be a table ([prefillkit])")
        for key, value in data.items():
            if key != "prefillkit" and not isinstance(value, dict):
                raise ConfigError(
                    f"{path}: setting {key!r} is outside the [prefillkit] table; "
                    "put every setting in the table"
                )
        table = section

    values: dict[str, object] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in _FIELD_NAMES:
            raise ConfigError(f"{path}: unknown setting {key!r}{_suggest(name, _FIELD_NAMES)}")
        if name in values:
            raise ConfigError(f"{path}: setting {key!r} given twice (as '-' and '_' spellings)")
        _, nullable = _FIELD_TYPES[name]
        if nullable and isinstance(value, str) and value.strip().lower() in _NULL_WORDS:
            value = None
        values[name] = _check_type(name, value, prefix=f"{path}: setting {key!r}")
    return ConfigFile(str(path), values, data)


# --------------------------------------------------------------------- flags


@dataclass(slots=True)
class ParsedFlags:
    """Result of :func:`parse_flags`: typed field values and the ignored SGLang flags."""

    values: dict[str, object] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


_FLAG_TO_FIELD: dict[str, str] = {field_flag(name): name for name in _FIELD_NAMES}

#: SGLang spellings that map onto a field.
_ALIASES: dict[str, str] = {
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--ep": "ep_size",
    "--expert-parallel-size": "ep_size",
    "--attn-cp-size": "cp_size",
    "--attention-context-parallel-size": "cp_size",
    "--enable-hicache": "enable_hierarchical_cache",
}

_SPECIAL_FLAGS: tuple[str, ...] = (
    "--disaggregation-mode",
    "--disable-priority-preemption",
    "--enable-ep-moe",
)
_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def suggest_flag(flag: str, also_accepted: typing.Iterable[str] = ()) -> str:
    """``" (did you mean '--x'?)"`` for an unknown ``flag``, or ``""``: the closest of the
    flags that set something (:func:`accepted_flags` plus ``also_accepted``, e.g. the
    command's own options) and SGLang's launch flags, unless it is a refused one
    (:func:`~prefillkit.app.launch_flags.suggest_launch_flag`)."""
    return suggest_launch_flag(flag, [*accepted_flags(), *also_accepted])


def accepted_flags() -> list[str]:
    """The flags that set something: config fields, SGLang aliases, the special
    spellings."""
    return [*_FLAG_TO_FIELD, *_ALIASES, *_SPECIAL_FLAGS]


def _parse_bool(flag: str, text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ConfigError(f"{flag}: expected true or false, got {text!r}")


def _parse_value(flag: str, name: str, text: str) -> object:
    base, nullable = _FIELD_TYPES[name]
    word = text.strip()
    if nullable and word.lower() in _NULL_WORDS:
        return None
    if base is bool:
        return _parse_bool(flag, word)
    if base is int:
        try:
            return int(word, 10)
        except ValueError:
            raise ConfigError(f"{flag}: expected an integer, got {text!r}") from None
    if base is float:
        try:
            value = float(word)
        except ValueError:
            raise ConfigError(f"{flag}: expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise ConfigError(f"{flag}: must be a finite number, got {text!r}")
        return value
    return word


def parse_flags(argv: list[str], *, allow_repeats: bool = False) -> ParsedFlags:
    """Parse SGLang-spelled flags into ``{field: typed value}`` plus the ignored flags.

    Forms: ``--flag value``, ``--flag=value``; booleans bare (``--flag``), ``--flag=false``,
    ``--flag true|false`` or ``--no-flag``. ``none``/``null`` sets an optional field to None.
    Aliases: ``--tp``/``--tensor-parallel-size`` → tp_size, ``--attn-cp-size`` → cp_size,
    ``--disaggregation-mode prefill`` → mode pd-prefill (``null`` leaves mode alone),
    ``--disable-priority-preemption`` → enable_priority_preemption false, ``--enable-ep-moe``
    (SGLang before 0.5) → ep_size = the line's TP size. Every other SGLang 0.5.23 flag is
    ignored (listed in ``ignored``, its values consumed) or refused, as
    :mod:`~prefillkit.app.launch_flags` classifies it; a pasted ``python3 -m
    sglang.launch_server`` / ``sglang serve`` prefix is taken off first
    (:func:`~prefillkit.app.launch_flags.strip_launch_prefix`). Values are typed
    but not range-checked (``Config`` does that). A setting given twice, by the same flag
    or by two spellings of it (``--tp 4 --tp-size 8``), is refused naming both, unless
    ``allow_repeats`` (layered flags, e.g. a compare variant's on top of the shared ones:
    then the last occurrence wins).
    """
    argv = strip_launch_prefix(argv)
    result = ParsedFlags()
    given: dict[str, str] = {}
    ep_moe = False

    def put(name: str, flag: str, value: object) -> None:
        if not allow_repeats and name in given:
            first = given[name]
            also = "" if first == flag else f" (also given as {first})"
            raise ConfigError(f"{flag}: given twice{also}; give each setting once")
        given[name] = flag
        result.values[name] = value

    i = 0
    n = len(argv)
    while i < n:
        token = argv[i]
        i += 1
        if not token.startswith("--") or token == "--":
            raise ConfigError(f"unexpected argument {token!r} (expected a --flag)")
        flag, eq, inline = token.partition("=")
        flag = flag.replace("_", "-")
        has_inline = bool(eq)

        def take_value(
            flag: str = flag, has_inline: bool = has_inline, inline: str = inline
        ) -> str:
            nonlocal i
            if has_inline:
                return inline
            if i >= n or argv[i].startswith("--"):
                raise ConfigError(f"{flag}: missing value")
            value = argv[i]
            i += 1
            return value

        def bool_value(
            flag: str = flag, has_inline: bool = has_inline, inline: str = inline
        ) -> bool:
            nonlocal i
            if has_inline:
                return _parse_bool(flag, inline)
            if i < n and argv[i].strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
                i += 1
                return _parse_bool(flag, argv[i - 1])
            return True

        name = _FLAG_TO_FIELD.get(flag) or _ALIASES.get(flag)
        if name is not None:
            if _FIELD_TYPES[name][0] is bool:
                put(name, flag, bool_value())
            else:
                put(name, flag, _parse_value(flag, name, take_value()))
            continue
        if flag.startswith("--no-") and _FLAG_TO_FIELD.get("--" + flag[5:]) is not None:
            neg = _FLAG_TO_FIELD["--" + flag[5:]]
            if _FIELD_TYPES[neg][0] is bool:
                if has_inline:
                    raise ConfigError(f"{flag}: takes no value")
                put(neg, flag, False)
                continue
        if flag == "--disable-priority-preemption":
            put("enable_priority_preemption", flag, not bool_value())
            continue
        if flag == "--disaggregation-mode":
            mode = take_value().strip().lower()
            if mode == "prefill":
                put("mode", flag, "pd-prefill")
            elif mode not in _NULL_WORDS:
                raise ConfigError(
                    f"--disaggregation-mode: {mode!r} is not supported "
                    "(prefillkit models the prefill side: use prefill or null)"
                )
            continue
        if flag == "--enable-ep-moe":  # SGLang < 0.5: EP over the whole TP group
            if has_inline:
                raise ConfigError(f"{flag}: takes no value")
            ep_moe = True
            continue
        after = consume_launch_flag(flag, argv, i, inline if has_inline else None, result.ignored)
        if after is None:
            raise ConfigError(f"unknown flag {flag!r}{suggest_flag(flag)}")
        i = after
    if ep_moe:
        tp = result.values.get("tp_size")
        if not isinstance(tp, int):
            raise ConfigError(
                "--enable-ep-moe: sets the EP size to the TP size (SGLang before 0.5); give "
                "--tp-size on the line too, or --ep-size N instead"
            )
        put("ep_size", "--enable-ep-moe", tp)
    return result


# --------------------------------------------------------------------- reporting


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
        for f in dataclasses.fields(Config)
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
