"""The one reader of prefillkit's TOML config files (``--config``).

:func:`read_toml` parses a TOML file with one-line errors naming it (the variants file of
``compare`` is read with it too); :func:`read_config_file` reads a config file's
settings (keys with ``_`` or ``-``, at the top level or in a ``[prefillkit]`` table,
beside the file's optional ``[workload]`` table) into a :class:`ConfigFile`, each value
type-checked (:func:`~prefillkit.app.knob_types.check_type`). Ranges and combinations are
checked when a :class:`~prefillkit.app.settings.Config` is built from it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefillkit.app.knob_types import FIELD_NAMES, FIELD_TYPES, NULL_WORDS, check_type
from prefillkit.sched.config import ConfigError
from prefillkit.text import one_line as _one_line
from prefillkit.text import suggest as _suggest

__all__ = ["ConfigFile", "read_config_file", "read_toml"]


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
        if name not in FIELD_NAMES:
            raise ConfigError(f"{path}: unknown setting {key!r}{_suggest(name, FIELD_NAMES)}")
        if name in values:
            raise ConfigError(f"{path}: setting {key!r} given twice (as '-' and '_' spellings)")
        _, nullable = FIELD_TYPES[name]
        if nullable and isinstance(value, str) and value.strip().lower() in NULL_WORDS:
            value = None
        values[name] = check_type(name, value, prefix=f"{path}: setting {key!r}")
    return ConfigFile(str(path), values, data)
