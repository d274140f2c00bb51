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
(:mod:`prefillkit.app.sglang_memory`). A preset value the
user's settings contradict is dropped rather than refused (``--tp 4`` drops the demo's CP 8
and shared KV).

:func:`build_config` returns the settings with the source of every field
(:attr:`ResolvedSettings.sources`: ``line``, ``file``, ``preset NAME``, ``SGLang
default`` or ``default``), which the commands print in their header.
"""

from __future__ import annotations

import dataclasses
import math
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
    resolve_model,
)
from prefillkit.app.sglang_memory import SGLANG_MAX_PREFILL_TOKENS, sglang_mem_fraction_default
from prefillkit.cost.gpus import get_gpu
from prefillkit.cost.validation import SEED_DEPLOYMENT
from prefillkit.text import suggest

__all__ = [
    "DEFAULT_DEPLOYMENT",
    "DEPLOYMENT_FIELDS",
    "PRESETS",
    "SGLANG_DEFAULTS",
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

#: Where SGLang 0.5.23's launch default differs from a :class:`Config` default (the
#: library default, kept for scripts): SGLang serves colocated (``--disaggregation-mode
#: null``). Everything else the line does not say is the Config default, which is
#: SGLang's (TP/CP 1, HiCache off, fcfs, page 1, ...) or a documented prefillkit
#: deviation (docs/deviations.md, "Deviations from upstream SGLang").
SGLANG_DEFAULTS: dict[str, object] = {"mode": "colocated"}

#: SGLang 0.5.23's ``--chunked-prefill-size`` when the line does not give one, by the
#: GPU's memory in MiB (``arg_groups/memory_hook.py``, ``_handle_gpu_memory_settings``):
#: (upper bound exclusive, chunk); 16,384 from 160 GiB up (B200, GB200, MI300).
SGLANG_CHUNK_BY_GPU_MIB: tuple[tuple[float, int], ...] = (
    (20 * 1024, 2048),
    (35 * 1024, 4096),
    (60 * 1024, 4096),
    (90 * 1024, 8192),
    (160 * 1024, 8192),
    (float("inf"), 16384),
)


def sglang_chunk_default(gpu_memory_bytes: float) -> int:
    """SGLang's default chunk for a GPU of ``gpu_memory_bytes`` (its capacity in MiB, as
    ``get_device_memory_capacity`` reports it: H200's 141 GB is 134,467 MiB -> 8,192;
    B200's 180 GB is 171,661 MiB -> 16,384)."""
    mib = gpu_memory_bytes / 2**20
    for bound, chunk in SGLANG_CHUNK_BY_GPU_MIB:
        if mib < bound:
            return chunk
    return SGLANG_CHUNK_BY_GPU_MIB[-1][1]  # an infinite size: the run's own check names it


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


_CONFIG_DEFAULTS: dict[str, object] = {f.name: f.default for f in dataclasses.fields(Config)}


def _line_memory_bytes(given: Mapping[str, object]) -> float | None:
    """The memory of one of the line's GPUs in bytes: ``--device-memory-gb`` (GB = 1e9
    bytes) if given, else the GPU preset's; None for an unknown GPU."""
    memory = given.get("device_memory_gb")
    if isinstance(memory, (int, float)) and memory > 0:
        return float(memory) * 1e9
    try:
        return get_gpu(str(given.get("gpu", _CONFIG_DEFAULTS["gpu"]))).memory_bytes
    except KeyError:
        return None


def _given(given: Mapping[str, object], name: str) -> object:
    """The line's (or file's) value of ``name``, else the Config default."""
    return given.get(name, _CONFIG_DEFAULTS[name])


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _sglang_fraction(
    given: Mapping[str, object], ignored: Sequence[str], memory: float, chunk: object
) -> float | None:
    """SGLang's default ``--mem-fraction-static`` for the line
    (:func:`~prefillkit.app.sglang_memory.sglang_mem_fraction_default`): its chunk, TP
    (PP 1: not modelled), model (MLA or not), mode and graph settings; None when the model
    does not resolve (the run's own check names it). ``--attn-cp-size > 1`` and two-batch
    overlap turn SGLang's prefill graph off, ``--disable-cuda-graph`` both graphs. DeepEP's
    reserve is never added: ``--moe-a2a-backend`` is accepted and ignored, its value
    dropped (:mod:`~prefillkit.app.launch_flags`)."""
    try:
        model = resolve_model(
            str(_given(given, "model")).strip().lower(),
            _opt_str(given.get("model_path")),
            _opt_str(given.get("model_config")),
        )
    except (ConfigError, KeyError):
        return None
    no_graphs = "--disable-cuda-graph" in ignored
    cp = _optional_int(_given(given, "cp_size")) or 1
    return sglang_mem_fraction_default(
        memory,
        chunked_prefill_size=_optional_int(chunk),
        tp_size=_optional_int(_given(given, "tp_size")) or 1,
        mla=model.attention == "mla",
        pd_prefill=str(given.get("mode", SGLANG_DEFAULTS["mode"])).strip().lower() == "pd-prefill",
        decode_cuda_graph=not no_graphs,
        prefill_cuda_graph=not (no_graphs or cp > 1 or _given(given, "enable_two_batch_overlap")),
        max_running_requests=_optional_int(given.get("max_running_requests")),
        max_prefill_tokens=_optional_int(_given(given, "max_prefill_tokens"))
        or SGLANG_MAX_PREFILL_TOKENS,
        max_total_tokens=_optional_int(given.get("max_total_tokens")),
        model_path=_opt_str(given.get("model_path")) or "",
    )


def _sglang_gpu_defaults(
    given: Mapping[str, object], ignored: Sequence[str] = ()
) -> dict[str, object]:
    """The defaults SGLang derives from the GPU for a line that does not set them, with
    the line's GPU (``--device-memory-gb`` if given, else the preset's memory): the chunk
    size (:func:`sglang_chunk_default`) and ``--mem-fraction-static``
    (:func:`_sglang_fraction`, from the line's chunk or that default). Nothing for an
    unknown GPU, no fraction for an infinite memory (``--device-memory-gb 1e300``): the
    run's own checks name them. ``ignored``: the SGLang flags accepted and ignored
    (``--disable-cuda-graph`` changes the fraction). Raises ``ConfigError`` naming
    ``--device-memory-gb`` when that memory is smaller than SGLang's reserve (SGLang's
    fraction would be <= 0)."""
    memory = _line_memory_bytes(given)
    if memory is None:
        return {}
    out: dict[str, object] = {}
    if "chunked_prefill_size" not in given:
        out["chunked_prefill_size"] = sglang_chunk_default(memory)
    chunk = given.get("chunked_prefill_size", out.get("chunked_prefill_size"))
    if "mem_fraction_static" not in given and math.isfinite(memory):
        fraction = _sglang_fraction(given, ignored, memory, chunk)
        if fraction is not None and fraction <= 0:
            raise ConfigError(
                f"--device-memory-gb: {memory / 1e9:g} GB ({memory / 2**20:,.0f} MiB) leaves "
                "nothing after the activation and CUDA-graph memory SGLang reserves for this "
                f"line (its default --mem-fraction-static would be {fraction:g}); give "
                "--mem-fraction-static"
            )
        if fraction is not None:
            out["mem_fraction_static"] = fraction
    return out


def _sglang_base(
    given: Mapping[str, object], parsed: ParsedFlags, file: ConfigFile | None
) -> dict[str, object]:
    """SGLang's defaults under a launch line: :data:`SGLANG_DEFAULTS` and the GPU-dependent
    ones (:func:`_sglang_gpu_defaults`), for what ``given`` does not set; an error names
    the config file when the setting it names came from there."""
    try:
        gpu_defaults = _sglang_gpu_defaults(given, parsed.ignored)
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
    ``cp_size`` only when the user's ``tp_size`` (if any) is a multiple of it, its
    ``ep_size`` only when it equals the TP size in force, CP shared KV only with
    ``cp_size > 1``, HiCache only when the user's ``--hicache-ratio`` / ``--hicache-size``
    allow it.
    """
    values = dict(DEFAULT_DEPLOYMENT if preset is None else preset)
    out = {k: v for k, v in values.items() if k not in given}
    tp = given.get("tp_size", out.get("tp_size", 1))
    cp = out.get("cp_size")
    if isinstance(cp, int) and not (isinstance(tp, int) and tp > 0 and tp % cp == 0):
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
    file = (
        config_file
        if config_file is None or isinstance(config_file, ConfigFile)
        else read_config_file(config_file)
    )
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
    sources: dict[str, str] = {}
    for key in base:
        sources[key] = f"preset {name}" if name is not None else "SGLang default"
    sources.update((k, "file") for k in file_values)
    sources.update((k, "line") for k in parsed.values)
    return ResolvedSettings(
        config,
        tuple(parsed.ignored),
        file,
        frozenset(parsed.values),
        name,
        implied,
        sources,
    )


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
