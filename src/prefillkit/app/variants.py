"""The variants of ``prefillkit compare``: their definitions, names and descriptions.

A variant is a name plus settings over the shared ones (see :mod:`prefillkit.app.compare`
for the whole story): ``--variant NAME:"FLAGS"`` or ``--variant NAME:@FILE.toml``
(:func:`parse_variant_option`), or a table of ``--variants-file`` (:func:`load_variants_file`:
an array of ``[[variant]]`` tables or one ``[variant.NAME]`` table each, with ``flags``,
``config``, a ``settings`` table and/or settings by field name). :func:`collect_variants`
gathers both, the file's first, and checks the names: unique ignoring case, and usable
as the variant's folder name in the compare ``--out`` folder, beside its
:data:`COMPARE_FILE` and :data:`REPORT_FILE`. Problems are one-line
:class:`VariantError` s naming the variant or the option.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefillkit.app.config_file import read_toml
from prefillkit.app.knob_types import FIELD_NAMES
from prefillkit.app.replay import InputError
from prefillkit.sched.config import ConfigError
from prefillkit.text import suggest

__all__ = [
    "COMPARE_FILE",
    "REPORT_FILE",
    "VARIANT_NAME_RE",
    "Variant",
    "VariantError",
    "check_variant_name",
    "collect_variants",
    "describe_variant",
    "load_variants_file",
    "parse_variant_option",
    "setting_text",
]

#: The files of a compare ``--out`` folder beside the variant folders (no variant may
#: take their names).
COMPARE_FILE = "compare.json"
REPORT_FILE = "report.html"

#: A usable variant (and folder) name.
VARIANT_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_RESERVED_NAMES = frozenset({COMPARE_FILE, REPORT_FILE})
# Keys of a variants-file entry that are not config settings.
_ENTRY_KEYS: tuple[str, ...] = ("name", "flags", "config", "settings")


class VariantError(InputError):
    """A bad variant definition (one line, names the variant or the option)."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One named variant: a TOML file, settings and flags over the shared settings.

    ``settings`` (field name → TOML value) come from a variants-file table; ``origin``
    says where the variant was defined (``--variant`` or the variants file's path).
    """

    name: str
    flags: tuple[str, ...] = ()
    config_file: str | None = None
    settings: tuple[tuple[str, object], ...] = ()
    origin: str = "--variant"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (goes into ``compare.json``)."""
        return {
            "origin": self.origin,
            "config_file": self.config_file,
            "settings": dict(self.settings),
            "flags": list(self.flags),
        }


def describe_variant(variant: Variant) -> str:
    """One line: the variant's file, settings and flags (``(shared settings only)``)."""
    parts: list[str] = []
    if variant.config_file is not None:
        parts.append(f"@{variant.config_file}")
    parts += [f"{name}={setting_text(value)}" for name, value in variant.settings]
    if variant.flags:
        parts.append(shlex.join(variant.flags))
    return " ".join(parts) if parts else "(shared settings only)"


def check_variant_name(name: str, where: str = "--variant") -> str:
    """``name`` if it is a usable variant (and folder) name; else a ``VariantError``."""
    if not name:
        raise VariantError(f"{where}: empty variant name")
    if not VARIANT_NAME_RE.fullmatch(name) or name.lower() in _RESERVED_NAMES:
        shown = name if len(name) <= 70 else name[:67] + "..."
        raise VariantError(
            f"{where}: bad variant name {shown!r}: use 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit (and not {' or '.join(sorted(_RESERVED_NAMES))}), "
            "since it names the variant's output folder"
        )
    return name


def parse_variant_option(text: str) -> Variant:
    """Parse one ``--variant`` value: ``NAME:FLAGS`` or ``NAME:@FILE.toml``."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep:
        raise VariantError(
            f'--variant {text!r}: expected NAME:"FLAGS" or NAME:@FILE.toml '
            '(for example fcfs:"--schedule-policy fcfs")'
        )
    check_variant_name(name)
    rest = rest.strip()
    if rest.startswith("@"):
        path = rest[1:].strip()
        if not path:
            raise VariantError(f"variant {name!r}: '@' must be followed by a TOML file path")
        return Variant(name=name, config_file=path)
    try:
        flags = shlex.split(rest)
    except ValueError as exc:
        raise VariantError(f"variant {name!r}: cannot split the flags: {exc}") from None
    return Variant(name=name, flags=tuple(flags))


def _entry_flags(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise VariantError(f"{where}: cannot split 'flags': {exc}") from None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise VariantError(f"{where}: 'flags' must be a string or a list of strings")


def _entry_settings(table: Mapping[str, object], where: str) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in FIELD_NAMES:
            hint = suggest(name, [*FIELD_NAMES, *_ENTRY_KEYS])
            raise VariantError(f"{where}: unknown setting {key!r}{hint}")
        if not isinstance(value, (bool, int, float, str)):
            raise VariantError(
                f"{where}: setting {key!r}: expected a number, string or boolean, "
                f"got {type(value).__name__}"
            )
        out.append((name, value))
    return out


def _variant_from_entry(
    entry: object, path: Path, index: int, table_name: str | None = None
) -> Variant:
    where = f"{path}: variant {table_name or index + 1}"
    if not isinstance(entry, dict):
        raise VariantError(f"{where}: expected a table, got {type(entry).__name__}")
    raw_name = entry.get("name", table_name)
    if raw_name is None:
        raise VariantError(f"{where}: missing 'name'")
    if not isinstance(raw_name, str):
        raise VariantError(f"{where}: 'name' must be a string")
    if table_name is not None and raw_name != table_name:
        raise VariantError(f"{where}: 'name' {raw_name!r} differs from the table name")
    name = check_variant_name(raw_name.strip(), where=str(path))
    where = f"{path}: variant {name!r}"
    flags = _entry_flags(entry["flags"], where) if "flags" in entry else ()
    config_file: str | None = None
    if "config" in entry:
        value = entry["config"]
        if not isinstance(value, str) or not value.strip():
            raise VariantError(f"{where}: 'config' must be a TOML file path")
        config_file = str(path.parent / value.strip())
    settings: list[tuple[str, object]] = []
    if "settings" in entry:
        table = entry["settings"]
        if not isinstance(table, dict):
            raise VariantError(f"{where}: 'settings' must be a table")
        settings += _entry_settings(table, where)
    others = {k: v for k, v in entry.items() if k not in _ENTRY_KEYS}
    settings += _entry_settings(others, where)
    seen: set[str] = set()
    for key, _ in settings:
        if key in seen:
            raise VariantError(f"{where}: setting {key!r} given twice")
        seen.add(key)
    return Variant(
        name=name,
        flags=flags,
        config_file=config_file,
        settings=tuple(settings),
        origin=str(path),
    )


def load_variants_file(path: str | Path) -> list[Variant]:
    """The variants of a ``--variants-file`` (see the module docstring for the format)."""
    file = Path(path)
    try:
        data = read_toml(file)
    except ConfigError as exc:  # names the file: cannot read, not UTF-8, invalid TOML
        raise VariantError(f"--variants-file {exc}") from None
    keys = [k for k in data if k in ("variant", "variants")]
    unknown = [k for k in data if k not in ("variant", "variants")]
    if unknown:
        raise VariantError(
            f"--variants-file {path}: unknown top-level key {unknown[0]!r}; expected "
            '[[variant]] tables (name = ..., flags = "..." or settings)'
        )
    if len(keys) != 1:
        raise VariantError(
            f"--variants-file {path}: expected [[variant]] tables "
            '(name = ..., flags = "..." or settings)'
            if not keys
            else f"--variants-file {path}: give 'variant' or 'variants', not both"
        )
    body = data[keys[0]]
    if isinstance(body, list):
        return [_variant_from_entry(e, file, i) for i, e in enumerate(body)]
    if isinstance(body, dict):
        return [_variant_from_entry(e, file, i, str(k)) for i, (k, e) in enumerate(body.items())]
    raise VariantError(f"--variants-file {path}: '{keys[0]}' must be an array of tables")


def collect_variants(variants_file: str | Path | None, options: Sequence[str]) -> list[Variant]:
    """Variants of the file (first) and of the ``--variant`` options; names checked unique."""
    variants = load_variants_file(variants_file) if variants_file is not None else []
    variants += [parse_variant_option(text) for text in options]
    if not variants:
        raise VariantError(
            'no variants: give at least one --variant NAME:"FLAGS" (or --variants-file)'
        )
    seen: dict[str, str] = {}
    for v in variants:
        key = v.name.lower()
        if key in seen:
            same = "" if seen[key] == v.name else f" (as {seen[key]!r}; names ignore case)"
            raise VariantError(f"duplicate variant name {v.name!r}{same}")
        seen[key] = v.name
    return variants


def setting_text(value: object) -> str:
    """A setting's value as a flag value (``--flag=TEXT``)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
