"""A compare variant's resolved config, checked before any run starts.

Precedence, lowest first: Config defaults, the base deployment, the shared TOML file,
the shared flags, the variant's TOML file, its settings, its flags
(:func:`prepare_variants`); every variant's settings become one layered flag line for
:func:`~prefillkit.app.launch.build_config`, whose last setting wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prefillkit.app.config_file import ConfigFile, read_config_file
from prefillkit.app.flags import parse_flags
from prefillkit.app.fleet_file import fleet_settings
from prefillkit.app.launch import build_config
from prefillkit.app.measured import RunFlags, check_executor, load_cost_preset, split_run_flags
from prefillkit.app.scheduler_choice import check_scheduler
from prefillkit.app.settings import Config
from prefillkit.app.variants import Variant, VariantError, setting_text
from prefillkit.sched.config import field_flag
from prefillkit.sim.engine import Engine

__all__ = ["PreparedVariant", "check_shared_settings", "prepare_variants"]


def _settings_flags(settings: Sequence[tuple[str, object]]) -> list[str]:
    """``--flag=value`` arguments for field settings (the ``=`` form takes any value)."""
    return [f"{field_flag(name)}={setting_text(value)}" for name, value in settings]


def _toml_settings(path: str) -> list[tuple[str, object]]:
    """A variant's TOML file as settings (the ``--config`` reader: same checks)."""
    return list(read_config_file(path).values.items())


@dataclass(frozen=True, slots=True)
class PreparedVariant:
    """A variant with its resolved config (checked before any run starts)."""

    variant: Variant
    config: Config
    ignored: tuple[str, ...] = ()
    run: RunFlags = field(default_factory=RunFlags)  # what times its forwards (app.measured)

    @property
    def name(self) -> str:
        return self.variant.name


def check_shared_settings(
    config_path: str | None, flags: Sequence[str]
) -> tuple[ConfigFile | None, list[str]]:
    """Check the shared ``--config`` file and flags on their own: ``(the file as read,
    the ignored SGLang flags)``.

    Only their spelling and types: a combination only becomes a config per variant.
    Raises ``ConfigError`` (not prefixed with a variant name).
    """
    parsed = parse_flags(list(flags))
    file = read_config_file(config_path) if config_path is not None else None
    return file, parsed.ignored


def prepare_variants(
    variants: Sequence[Variant],
    shared_config: ConfigFile | None,
    shared_flags: Sequence[str],
    *,
    preset: str | None = None,
) -> list[PreparedVariant]:
    """Resolve every variant's config and check its deployment can be simulated.

    The base deployment (``preset``, else chosen from the shared flags and file: see
    :func:`~prefillkit.app.launch.build_config`) is the same for every variant.

    Errors are ``VariantError`` lines starting ``variant 'NAME': ``.
    """
    out: list[PreparedVariant] = []
    for v in variants:
        prefix = f"variant {v.name!r}: "
        try:
            # --executor is the variant's, not a config flag (sim vs executor side by side)
            run, flags = split_run_flags(v.flags)
            own = parse_flags(flags)  # the variant's own mistakes, before combining
            file_flags = _settings_flags(_toml_settings(v.config_file)) if v.config_file else []
            args = [*shared_flags, *file_flags, *_settings_flags(v.settings), *flags]
            cfg = build_config(  # layered: the last setting wins
                shared_config, args, preset=preset, base_args=shared_flags, allow_repeats=True
            ).config
            Engine(cfg.sim_settings(), [])  # deployment checks (GPU, buffer limit, pool)
            fleet_settings(cfg)  # the fleet file, if any
            check_executor(run.executor, cfg.sim_settings())
            check_scheduler(cfg.scheduler, cfg.sim_settings(), run.executor)
            load_cost_preset(run.cost_preset)
        except ValueError as exc:  # ConfigError, SimConfigError, InputError, ...
            raise VariantError(prefix + " ".join(str(exc).split())) from None
        out.append(PreparedVariant(variant=v, config=cfg, ignored=tuple(own.ignored), run=run))
    return out
