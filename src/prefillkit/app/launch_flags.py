"""Every SGLang 0.5.23 launch flag, classified: modelled, ignored or refused.

The flags and their argparse kind (which take a value, ``nargs``, ``choices``, aliases,
defaults) are SGLang's own, read from its ``ServerArgs.add_cli_args`` by
``benchmarks/extract_sglang_args.py`` into ``prefillkit/data/sglang_0_5_23_server_args.json``
(:func:`sglang_flags`). What prefillkit does with each is this module's table
(:func:`classify`):

- ``modelled`` (:data:`MODELLED`): :func:`~prefillkit.app.settings.parse_flags` maps it
  onto a setting (``--tp-size``, ``--chunked-prefill-size``, ...);
- ``ignored`` (:data:`IGNORED_GROUPS`, by theme): it does not change what the simulator
  models (API keys, parsers, logging, kernels, ports, ...); accepted, its values consumed
  as SGLang's argparse would (:func:`take_values`), and listed on one line
  (:func:`ignored_line`);
- ``refused`` (:data:`REFUSED`, with the reason): it changes admission, the KV pool or
  the cache in a way prefillkit does not model, so a result would be wrong; refused with
  one line, unless its value is SGLang's default (``--dp-size 1``, ``--retraction-policy
  length``, ``--enable-dp-attention=false``): then it is ignored.

:data:`LEGACY` adds spellings 0.5.23 does not register but pasted lines carry: older
releases' flags (``--enable-ep-moe``, ``--cuda-graph-bs``, ``--stream-output``) and
abbreviations 0.5.23's argparse accepts (``--tp``, ``--dp``). :func:`strip_launch_prefix`
(:mod:`prefillkit.app.pasted_launch`) takes a pasted
``python3 -m sglang.launch_server ...`` or ``sglang serve ...`` line as its flags;
:func:`suggest_launch_flag` is the "did you mean" of an unknown flag.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from prefillkit.app.launch_flag_table import IGNORED_GROUPS, LEGACY, MODELLED, REFUSED
from prefillkit.app.pasted_launch import is_flag
from prefillkit.sched.config import ConfigError

__all__ = [
    "IGNORED_GROUPS",
    "LEGACY",
    "MODELLED",
    "REFUSED",
    "SGLANG_VERSION",
    "FlagClass",
    "SGLangFlag",
    "classification",
    "classification_markdown",
    "classify",
    "consume_launch_flag",
    "ignored_line",
    "sglang_flags",
    "suggest_launch_flag",
    "take_values",
]

SGLANG_VERSION = "0.5.23"
DATA_FILE = "sglang_0_5_23_server_args.json"
#: The least difflib ratio of a "did you mean" (``--chunked-prefil-size`` is 0.98 from
#: ``--chunked-prefill-size``; ``--deepep-mode`` only 0.67 from ``--mode``).
SUGGEST_CUTOFF = 0.8

Kind = Literal["modelled", "ignored", "refused"]
#: argparse's ``nargs``: ``None`` one value, ``0`` none, ``"?"`` / ``"+"`` / ``"*"``, or a count.
Nargs = int | str | None


@dataclass(frozen=True, slots=True)
class SGLangFlag:
    """One option string of SGLang's launch parser, as argparse registers it."""

    flag: str
    dest: str
    nargs: Nargs
    choices: tuple[object, ...] | None
    default: object
    aliases: tuple[str, ...]

    @property
    def takes_value(self) -> bool:
        return self.nargs != 0


@dataclass(frozen=True, slots=True)
class FlagClass:
    """What prefillkit does with an SGLang flag: ``kind``, and ``reason`` (the theme of an
    ignored flag, why a refused one is refused; empty for a modelled 0.5.23 flag, what it
    means for a :data:`LEGACY` one)."""

    kind: Kind
    reason: str
    nargs: Nargs
    default: object


def _data() -> dict[str, object]:
    text = resources.files("prefillkit").joinpath("data").joinpath(DATA_FILE).read_text("utf-8")
    data: dict[str, object] = json.loads(text)
    return data


@functools.cache
def sglang_flags() -> dict[str, SGLangFlag]:
    """Every option string SGLang 0.5.23's ``ServerArgs.add_cli_args`` registers."""
    raw = _data()["flags"]
    assert isinstance(raw, dict)
    out: dict[str, SGLangFlag] = {}
    for flag, entry in raw.items():
        choices = entry["choices"]
        out[flag] = SGLangFlag(
            flag,
            entry["dest"],
            entry["nargs"],
            None if choices is None else tuple(choices),
            entry["default"],
            tuple(entry["aliases"]),
        )
    return out


def server_args_sha256() -> str:
    """The sha256 of the ``sglang/srt/server_args.py`` the flags were read from."""
    return str(_data()["server_args_sha256"])


@functools.cache
def _ignored() -> dict[str, str]:
    return {flag: theme for theme, flags in IGNORED_GROUPS.items() for flag in flags.split()}


@functools.cache
def classification() -> dict[str, FlagClass]:
    """SGLang 0.5.23 flag -> its class (exactly the data file's flags)."""
    ignored = _ignored()
    out: dict[str, FlagClass] = {}
    for flag, spec in sglang_flags().items():
        if flag in MODELLED:
            kind: Kind = "modelled"
            reason = ""
        elif flag in REFUSED:
            kind, reason = "refused", REFUSED[flag]
        elif flag in ignored:
            kind, reason = "ignored", ignored[flag]
        else:  # pragma: no cover - tests/test_launch_flags.py keeps the table complete
            raise AssertionError(f"{flag}: not classified")
        out[flag] = FlagClass(kind, reason, spec.nargs, spec.default)
    return out


def classify(flag: str) -> FlagClass | None:
    """The class of SGLang flag ``flag`` (0.5.23's or :data:`LEGACY`), None if unknown."""
    known = classification().get(flag)
    if known is not None:
        return known
    legacy = LEGACY.get(flag)
    if legacy is None:
        return None
    kind, reason, nargs, default = legacy
    return FlagClass(kind, reason, nargs, default)


# ------------------------------------------------------------------- values


def take_values(
    flag: str, nargs: Nargs, argv: Sequence[str], i: int, inline: str | None
) -> tuple[list[str], int]:
    """The values of ``flag`` (argparse ``nargs``) from ``argv[i:]``, and the index after
    them: ``--flag=v`` is one value; otherwise one value (``None``), none (``0``), the
    next token unless it is a ``--flag`` (``"?"``), every token up to the next ``--flag``
    (``"+"``: at least one; ``"*"``) or ``nargs`` tokens. ``ConfigError`` for a missing
    value or a value given to a flag that takes none."""
    if nargs == 0:
        if inline is not None:
            raise ConfigError(f"{flag}: takes no value")
        return [], i
    if inline is not None:
        return [inline], i
    if nargs is None or nargs == "?":
        if i < len(argv) and not is_flag(argv[i]):
            return [argv[i]], i + 1
        if nargs == "?":
            return [], i
        raise ConfigError(f"{flag}: missing value")
    if nargs in ("+", "*"):
        end = i
        while end < len(argv) and not is_flag(argv[end]):
            end += 1
        if nargs == "+" and end == i:
            raise ConfigError(f"{flag}: missing value")
        return list(argv[i:end]), end
    count = int(nargs)
    values = list(argv[i : i + count])
    if len(values) < count or any(is_flag(v) for v in values):
        raise ConfigError(f"{flag}: expected {count} values")
    return values, i + count


_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def _is_default(default: object, values: list[str]) -> bool:
    """Whether ``values`` give SGLang's ``default`` (what prefillkit models)."""
    if not values:
        return True  # an optional or empty list: nothing set
    if len(values) != 1 or default is None or isinstance(default, list):
        return False
    word = values[0].strip().lower()
    if isinstance(default, bool):
        return word in (_TRUE_WORDS if default else _FALSE_WORDS)
    if isinstance(default, (int, float)):
        try:
            return float(word) == float(default)
        except ValueError:
            return False
    return word == str(default).lower()


def consume_launch_flag(
    flag: str, argv: Sequence[str], i: int, inline: str | None, ignored: list[str]
) -> int | None:
    """Take an ignored or refused SGLang ``flag`` (its values from ``argv[i:]``) and
    return the index after it, appending it to ``ignored`` when it is accepted; None when
    ``flag`` is not such a flag. A refused flag raises ``ConfigError`` (``--flag: not
    supported: why``) unless its value is SGLang's default: ``--dp 1``; a store_true one
    given ``=false`` is dropped (the default, nothing to ignore)."""
    cls = classify(flag)
    if cls is None or cls.kind == "modelled":
        return None
    if cls.kind == "refused" and cls.nargs == 0 and inline is not None:
        word = inline.strip().lower()
        if word in _FALSE_WORDS:
            return i
        if word not in _TRUE_WORDS:
            raise ConfigError(f"{flag}: expected true or false, got {inline!r}")
        raise ConfigError(f"{flag}: not supported: {cls.reason}")
    values, i = take_values(flag, cls.nargs, argv, i, inline)
    if cls.kind == "refused" and (cls.nargs == 0 or not _is_default(cls.default, values)):
        raise ConfigError(f"{flag}: not supported: {cls.reason}")
    ignored.append(flag)
    return i


def ignored_line(flags: Iterable[str]) -> str:
    """The one line that lists the ignored SGLang flags (each once, in order)."""
    return "ignored (no effect on admission): " + ", ".join(dict.fromkeys(flags))


# ------------------------------------------------------------------- suggestions


def suggest_launch_flag(flag: str, accepted: Iterable[str]) -> str:
    """``" (did you mean '--x'?)"`` for an unknown ``flag``, or ``""``.

    The candidates are every flag a line may carry: ``accepted`` (prefillkit's own: its
    settings and the command's options) and SGLang's (0.5.23's and :data:`LEGACY`). The
    closest wins if it is at least :data:`SUGGEST_CUTOFF` alike and is not refused (a
    misspelt ``--disable-radix-cache`` is not sent to another feature): a mistyped
    SGLang flag finds the SGLang flag, a mistyped prefillkit flag prefillkit's, and
    nothing far off is suggested.
    """
    candidates = sorted({*accepted, *sglang_flags(), *LEGACY})
    close = difflib.get_close_matches(flag, candidates, n=1, cutoff=SUGGEST_CUTOFF)
    if not close:
        return ""
    cls = classify(close[0])
    if cls is not None and cls.kind == "refused":
        return ""
    return f" (did you mean '{close[0]}'?)"


# ------------------------------------------------------------------- docs

DOC_BEGIN = "<!-- BEGIN generated by prefillkit.app.launch_flags.classification_markdown() -->"
DOC_END = "<!-- END generated -->"


def _codes(flags: Iterable[str]) -> str:
    return ", ".join(f"`{f}`" for f in flags)


def classification_markdown() -> str:
    """The classification as Markdown (``docs/launch_lines.md`` holds it between
    :data:`DOC_BEGIN` and :data:`DOC_END`; ``python -m prefillkit.app.launch_flags FILE``
    rewrites that part)."""
    table = classification()
    by_kind = {k: [f for f, c in table.items() if c.kind == k] for k in ("modelled", "refused")}
    lines = [
        f"SGLang {SGLANG_VERSION}: {len(table)} flags (sha256 of `server_args.py` "
        f"`{server_args_sha256()[:16]}...`): {len(by_kind['modelled'])} modelled, "
        f"{len(_ignored())} ignored, {len(by_kind['refused'])} refused.",
        "",
        f"**Modelled** ({len(by_kind['modelled'])}): {_codes(by_kind['modelled'])}.",
        "",
        f"**Refused** ({len(by_kind['refused'])}; a value equal to SGLang's default is "
        "accepted and ignored):",
        "",
        "| flag | why |",
        "| --- | --- |",
    ]
    lines += [f"| `{f}` | {table[f].reason} |" for f in by_kind["refused"]]
    lines += ["", f"**Ignored** ({len(_ignored())}), by theme:", ""]
    for theme, flags in IGNORED_GROUPS.items():
        names = sorted(flags.split())
        lines.append(f"- {theme} ({len(names)}): {_codes(names)}.")
    lines += [
        "",
        f"**Older spellings** (not registered by {SGLANG_VERSION}; accepted as pasted):",
        "",
        "| flag | kind | meaning |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{f}` | {kind} | {why} |" for f, (kind, why, _, _) in LEGACY.items()]
    return "\n".join(lines) + "\n"


def update_doc(path: str) -> bool:
    """Rewrite the generated part of the Markdown file ``path``; whether it changed."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    head, begin, rest = text.partition(DOC_BEGIN)
    _, end, tail = rest.partition(DOC_END)
    if not begin or not end:
        raise ValueError(f"{path}: no {DOC_BEGIN} ... {DOC_END} section")
    new = f"{head}{DOC_BEGIN}\n{classification_markdown()}{DOC_END}{tail}"
    if new != text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(new)
    return new != text


if __name__ == "__main__":  # python -m prefillkit.app.launch_flags docs/launch_lines.md
    import sys

    for name in sys.argv[1:]:
        print(f"{name}: {'rewritten' if update_doc(name) else 'up to date'}")
