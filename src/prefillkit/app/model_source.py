"""Which model a config names: a preset, the Hugging Face id of one, or a Hugging Face
``config.json`` (a file, or a folder holding one).

:func:`resolve_model` is :attr:`~prefillkit.app.settings.Config.model_spec`'s answer for
``--model``, ``--model-path`` and ``--model-config``; :data:`MODEL_CONFIG_DIR` holds the
presets' own ``config.json`` files.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefillkit.models import (
    MODELS,
    ModelConfigError,
    ModelSpec,
    get_model,
    model_from_hf_config,
    preset_for_model_id,
)
from prefillkit.sched.config import ConfigError
from prefillkit.text import one_line as _one_line

__all__ = ["MODEL_CONFIG_DIR", "read_model_config", "resolve_model"]

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
