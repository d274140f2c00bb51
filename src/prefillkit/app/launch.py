"""From a launch line to settings: which defaults apply, and where each setting came from.

A command's settings are layered, lowest first:

1. the base: either a named deployment preset (:data:`PRESETS`: ``demo``, the deployment
   ``prefillkit replay`` runs with no launch flags; ``seed``, the seed system's), or
   SGLang 0.5.23's defaults for what the launch line does not say;
2. the ``--config`` file's settings;
3. the launch flags (SGLang-spelled).

Which base: ``--preset NAME`` names it; otherwise a command given no deployment setting
(:data:`DEPLOYMENT_FIELDS`: model, GPUs, parallelism, HiCache, memory; as a flag or in the
config file) and no other SGLang launch flag runs the ``demo`` preset (and says so); as
soon as one is given, the base is SGLang's defaults: the library defaults of
:class:`~prefillkit.app.settings.Config`, with :data:`SGLANG_DEFAULTS` where SGLang's default
differs (colocated serving unless ``--disaggregation-mode prefill``) and SGLang's
GPU-dependent ``--chunked-prefill-size`` and ``--mem-fraction-static``
(:mod:`prefillkit.app.sglang_defaults`, :mod:`prefillkit.app.sglang_memory`). A preset
value the user's settings contradict is dropped rather than refused (``--tp 4`` drops the
demo's CP 8 and shared KV).

:func:`build_config` returns the settings with the source of every field
(:attr:`ResolvedSettings.sources`: ``line``, ``file``, ``preset NAME``, ``SGLang
default`` or ``default``), which the commands print in their header.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prefillkit.app.settings import (
    Config,
    ConfigError,
    ConfigFile,
    ParsedFlags,
    blame_config_file,
    parse_flags,
    read_config_file,
)
from prefillkit.app.sglang_defaults import SGLANG_DEFAULTS, sglang_gpu_defaults
from prefillkit.cost.gpus import get_gpu
from prefillkit.cost.validation import SEED_DEPLOYMENT
from prefillkit.text import suggest

__all__ = [
    "DEFAULT_DEPLOYMENT",
    "DEPLOYMENT_FIELDS",
    "PRESETS",
    "ResolvedSettings",
    "base_text",
    "build_config",
    "choose_base",
    "deployment_defaults",
    "header_lines",
    "preset_values",
    "setting_sources",
    "weights_warning",
]

#: The deployment ``prefillkit replay`` simulates without launch flags: GLM-5 on 8×H200,
#: CP 8 with shared KV, HiCache on, the prefill instance of a PD pair.
DEFAULT_DEPLOYMENT: dict[str, object] = {
    "model": "glm-5",
    "gpu": "h200",
    "mode": "pd-prefill",
    "tp_size": 8,
    "cp_size": 8,
    "enable_cp_shared_kv": True,
    "enable_hierarchical_cache": True,
}


def _seed_preset() -> dict[str, object]:
    values = dict(parse_flags(list(SEED_DEPLOYMENT)).values)
    values.setdefault("mode", "pd-prefill")
    return values


#: Named deployments (``--preset NAME``): field → value.
PRESETS: dict[str, dict[str, object]] = {
    "demo": DEFAULT_DEPLOYMENT,
    "seed": _seed_preset(),  # cost.validation.SEED_DEPLOYMENT
}


def weights_warning(config: Config) -> str | None:
    """A one-line warning when ``--max-total-tokens`` sizes the pool of a deployment whose
    weights do not fit its GPUs (SGLang would fail to load the model; the simulator would
    otherwise replay it without a word), else None."""
    if config.max_total_tokens is None:
        return None
    try:
        gpu = get_gpu(config.gpu)
    except KeyError:
        return None
    model = config.model_spec
    memory = config.device_memory_gb * 1e9 if config.device_memory_gb else gpu.memory_bytes
    per_gpu = model.weight_bytes / config.tp_size
    budget = memory * config.mem_fraction_static
    if per_gpu <= budget:
        return None
    return (
        f"warning: --max-total-tokens sizes the pool, but {model.name}'s weights "
        f"({per_gpu / 1e9:.1f} GB per GPU on {config.tp_size} GPU(s)) do not fit "
        f"{budget / 1e9:.1f} GB ({memory / 1e9:.0f} GB x --mem-fraction-static "
        f"{config.mem_fraction_static:g}): SGLang could not load this deployment"
    )


def _sglang_base(
    given: Mapping[str, object], parsed: ParsedFlags, file: ConfigFile | None
) -> dict[str, object]:
    """SGLang's defaults under a launch line: :data:`SGLANG_DEFAULTS` and the GPU-dependent
    ones (:func:`~prefillkit.app.sglang_defaults.sglang_gpu_defaults`), for what ``given``
    does not set; an error names the config file when the setting it names came from
    there."""
    try:
        gpu_defaults = sglang_gpu_defaults(given, parsed.ignored)
    except ConfigError as exc:
        raise ConfigError(blame_config_file(str(exc), file, parsed.values)) from None
    return {**{k: v for k, v in SGLANG_DEFAULTS.items() if k not in given}, **gpu_defaults}


#: The settings that describe the deployment, as an SGLang launch line gives them: one of
#: these (or an SGLang flag that is accepted and ignored, such as ``--trust-remote-code``)
#: switches the base from the demo preset to SGLang's defaults. Scheduler knobs
#: (policy, chunk and batch limits, priority, affinity) and simulator knobs (seed,
#: bandwidths, invariant checks) do not: ``--schedule-policy lpm`` alone runs the demo.
DEPLOYMENT_FIELDS: frozenset[str] = frozenset(
    {
        "model",
        "model_path",
        "model_config",
        "gpu",
        "mode",
        "tp_size",
        "cp_size",
        "ep_size",
        "enable_dp_attention",
        "dp_size",
        "load_balance_method",
        "enable_cp_shared_kv",
        "enable_two_batch_overlap",
        "enable_hierarchical_cache",
        "hicache_ratio",
        "hicache_size",
        "page_size",
        "max_total_tokens",
        "kv_cache_dtype",
        "kv_bytes_per_token",
        "mem_fraction_static",
        "device_memory_gb",
    }
)


def preset_values(name: str) -> dict[str, object]:
    """The settings of preset ``name``; ``ConfigError`` naming ``--preset`` otherwise."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise ConfigError(
            f"--preset: unknown preset {name!r}; expected one of {', '.join(PRESETS)}"
            f"{suggest(key, PRESETS)}"
        )
    return dict(PRESETS[key])


def deployment_defaults(
    given: Mapping[str, object], preset: Mapping[str, object] | None = None
) -> dict[str, object]:
    """The ``preset`` settings (default :data:`DEFAULT_DEPLOYMENT`) that apply on top of
    the user's ``given`` ones.

    A setting the user gives always wins. Preset values that would contradict the
    user's settings are dropped rather than turned into errors: the preset's
    ``cp_size`` only when the user's ``tp_size`` (if any) is a multiple of it (times the
    user's ``dp_size`` under DP attention), its
    ``ep_size`` only when it equals the TP size in force, CP shared KV only with
    ``cp_size > 1``, HiCache only when the user's ``--hicache-ratio`` / ``--hicache-size``
    allow it.
    """
    values = dict(DEFAULT_DEPLOYMENT if preset is None else preset)
    out = {k: v for k, v in values.items() if k not in given}
    tp = given.get("tp_size", out.get("tp_size", 1))
    cp = out.get("cp_size")
    dp = given.get("dp_size", 1) if given.get("enable_dp_attention") else 1
    width = cp * dp if isinstance(cp, int) and isinstance(dp, int) else cp
    if isinstance(width, int) and not (isinstance(tp, int) and tp > 0 and tp % width == 0):
        del out["cp_size"]
    ep = out.get("ep_size")
    if ep is not None and ep != tp:
        del out["ep_size"]
    cp_now = given.get("cp_size", out.get("cp_size", 1))
    if "enable_cp_shared_kv" in out and not (isinstance(cp_now, int) and cp_now > 1):
        del out["enable_cp_shared_kv"]
    if "enable_hierarchical_cache" in out:
        ratio = given.get("hicache_ratio", out.get("hicache_ratio", 2.0))
        size = given.get("hicache_size", 0)
        ratio_ok = not isinstance(ratio, (int, float)) or ratio > 1.0
        if not (size != 0 or ratio_ok):
            del out["enable_hierarchical_cache"]
    return out


def choose_base(
    preset: str | None, parsed: ParsedFlags, file: ConfigFile | None
) -> tuple[str | None, bool]:
    """``(preset name or None for SGLang's defaults, whether it was implied)``: a named
    ``preset`` wins; no deployment setting (:data:`DEPLOYMENT_FIELDS`, as a flag or in the
    file) and no ignored SGLang launch flag means ``demo``."""
    if preset is not None:
        return preset.strip().lower(), False
    given = set(parsed.values) | (set(file.values) if file is not None else set())
    if given & DEPLOYMENT_FIELDS or parsed.ignored:
        return None, False
    return "demo", True


@dataclass(frozen=True, slots=True)
class ResolvedSettings:
    """What :func:`build_config` made of a config file and the command line.

    ``config``: the validated settings; ``ignored``: SGLang flags accepted and ignored;
    ``file``: the config file as read (None without one); ``flag_fields``: the field
    names the flags set (so a later error can name its source, :meth:`blame`);
    ``preset``: the base preset (None: SGLang's defaults), ``implied`` whether no launch
    flag chose it; ``sources``: field → where its value came from.
    """

    config: Config
    ignored: tuple[str, ...] = ()
    file: ConfigFile | None = None
    flag_fields: frozenset[str] = frozenset()
    preset: str | None = None
    implied: bool = False
    sources: Mapping[str, str] = field(default_factory=dict)

    def blame(self, message: str) -> str:
        """``message`` prefixed with the config file's path when the setting it names came
        from the file (see :func:`~prefillkit.app.settings.blame_config_file`)."""
        return blame_config_file(message, self.file, self.flag_fields)


def _read_file(config_file: str | Path | ConfigFile | None) -> ConfigFile | None:
    """The config file read (``config_file`` as it is when None or already read)."""
    return (
        config_file
        if config_file is None or isinstance(config_file, ConfigFile)
        else read_config_file(config_file)
    )


def build_config(
    config_file: str | Path | ConfigFile | None,
    flag_args: Sequence[str],
    *,
    preset: str | None = None,
    base_args: Sequence[str] | None = None,
    allow_repeats: bool = False,
) -> ResolvedSettings:
    """The settings of a TOML file (a path, or a file already read) and SGLang flags.

    Precedence (lowest first): ``Config`` defaults, the base (``preset``, or the one
    :func:`choose_base` picks from ``base_args`` (default ``flag_args``) and the file:
    the demo preset or :data:`SGLANG_DEFAULTS`), the TOML file, the flags. The flags are
    parsed and the file is read once each. Raises ``ConfigError`` (one line, names the
    flag or key); a setting given twice in ``flag_args`` is refused unless
    ``allow_repeats`` (layered flags, the last wins).
    """
    parsed = parse_flags(list(flag_args), allow_repeats=allow_repeats)
    base_parsed = parsed if base_args is None else parse_flags(list(base_args), allow_repeats=True)
    file = _read_file(config_file)
    file_values = file.values if file is not None else {}
    given = {**file_values, **parsed.values}
    if "model" in given and ("model_path" in given or "model_config" in given):
        other = "--model-config" if "model_config" in given else "--model-path"
        raise ConfigError(f"--model: give --model NAME or {other}, not both")
    name, implied = choose_base(preset, base_parsed, file)
    base = (
        deployment_defaults(given, preset_values(name))
        if name is not None
        else _sglang_base(given, parsed, file)
    )
    if "model_path" in given or "model_config" in given:
        base.pop("model", None)  # the line's model wins over a preset's
    config = Config.from_sources(file, {**base, **parsed.values})
    sources = _field_sources(name, base, file_values, parsed.values)
    return ResolvedSettings(
        config,
        tuple(parsed.ignored),
        file,
        frozenset(parsed.values),
        name,
        implied,
        sources,
    )


def _field_sources(
    name: str | None,
    base: Mapping[str, object],
    file_values: Mapping[str, object],
    line_values: Mapping[str, object],
) -> dict[str, str]:
    """Field -> where :func:`build_config` took it from: the base (``preset NAME`` or
    ``SGLang default``), then the file, then the line, the last one winning."""
    sources: dict[str, str] = {}
    for key in base:
        sources[key] = f"preset {name}" if name is not None else "SGLang default"
    sources.update((k, "file") for k in file_values)
    sources.update((k, "line") for k in line_values)
    return sources


#: The settings a command's header shows: (field, label).
_HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("model", "model"),
    ("gpu", "gpu"),
    ("tp_size", "TP"),
    ("cp_size", "CP"),
    ("ep_size", "EP"),
    ("enable_cp_shared_kv", "shared-KV"),
    ("enable_hierarchical_cache", "HiCache"),
    ("mode", "mode"),
    ("page_size", "page"),
    ("chunked_prefill_size", "chunk"),
    ("schedule_policy", "policy"),
)


def _shown(value: object) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return "none" if value is None else str(value)


def header_lines(resolved: ResolvedSettings) -> list[str]:
    """The header of a run: which base, and each deployment setting with its source."""
    cfg = resolved.config
    if resolved.preset is None:
        first = "deployment: the launch line over SGLang 0.5.23's defaults"
    elif resolved.implied:
        first = (
            "deployment: the demo preset (no launch flags given; paste your SGLang launch "
            "flags, or --preset demo|seed)"
        )
    else:
        first = f"deployment: preset {resolved.preset}"
    parts: list[str] = []
    for name, label in _HEADER_FIELDS:
        value: object = cfg.model_spec.name if name == "model" else getattr(cfg, name)
        source = resolved.sources.get(name, "default")
        if name == "model" and "model_config" in resolved.sources:
            source = f"{resolved.sources['model_config']}: --model-config"
        elif name == "model" and "model_path" in resolved.sources:
            source = f"{resolved.sources['model_path']}: --model-path"
        if name == "page_size" and source == "default" and cfg.cp_size > 1:
            source = "default with CP"
        parts.append(f"{label} {_shown(value)} ({source})")
    return [first, "settings: " + ", ".join(parts)]


def base_text(resolved: ResolvedSettings) -> str:
    """What the settings were laid over, in words (the header's first line)."""
    if resolved.preset is None:
        return "the launch line over SGLang 0.5.23's defaults"
    if resolved.implied:
        return "the demo preset (no launch flags given)"
    return f"preset {resolved.preset}"


def setting_sources(resolved: ResolvedSettings) -> dict[str, str]:
    """Field -> where its value came from, for every setting (``summary.json``
    ``sources``; the header's sources: ``line``, ``file``, ``preset NAME``, ``SGLang
    default``, ``default``; the model names the flag that chose it)."""
    cfg = resolved.config
    out = {f.name: resolved.sources.get(f.name, "default") for f in dataclasses.fields(cfg)}
    if "model_config" in resolved.sources:
        out["model"] = f"{resolved.sources['model_config']}: --model-config"
    elif "model_path" in resolved.sources:
        out["model"] = f"{resolved.sources['model_path']}: --model-path"
    if out["page_size"] == "default" and cfg.cp_size > 1:
        out["page_size"] = "default with CP"
    return out


def knob_defaults() -> dict[str, dict[str, object]]:
    """``base -> field -> default``: the defaults ``replay`` uses for a launch line (the
    Config defaults with :data:`SGLANG_DEFAULTS`) and under each preset."""
    plain = {f.name: getattr(Config(), f.name) for f in dataclasses.fields(Config)}
    out: dict[str, dict[str, object]] = {"launch line": {**plain, **SGLANG_DEFAULTS}}
    for name in PRESETS:
        cfg = build_config(None, [], preset=name).config
        out[f"--preset {name}"] = {f: getattr(cfg, f) for f in plain}
    return out
