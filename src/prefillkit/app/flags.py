"""SGLang-spelled command-line flags read into knob values: :func:`parse_flags`.

Every knob of :class:`~prefillkit.app.knobs.Knobs` is the flag of its name
(:func:`~prefillkit.sched.config.field_flag`), plus a few SGLang aliases and special
spellings (``--tp``, ``--disaggregation-mode prefill``, ``--enable-ep-moe``, ...); every
other SGLang 0.5.23 launch flag is ignored or refused as
:mod:`prefillkit.app.launch_flags` classifies it. Values are typed here (a wrong type is
a one-line :class:`~prefillkit.sched.config.ConfigError` naming the flag) but not
range-checked: :class:`~prefillkit.app.settings.Config` does that.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field

from prefillkit.app.knob_types import FIELD_NAMES, FIELD_TYPES, NULL_WORDS
from prefillkit.app.launch_flags import consume_launch_flag, suggest_launch_flag
from prefillkit.app.pasted_launch import strip_launch_prefix
from prefillkit.sched.config import ConfigError, field_flag

__all__ = ["ParsedFlags", "accepted_flags", "parse_flags", "suggest_flag"]


@dataclass(slots=True)
class ParsedFlags:
    """Result of :func:`parse_flags`: typed field values and the ignored SGLang flags."""

    values: dict[str, object] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


_FLAG_TO_FIELD: dict[str, str] = {field_flag(name): name for name in FIELD_NAMES}

#: SGLang spellings that map onto a field.
_ALIASES: dict[str, str] = {
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--ep": "ep_size",
    "--expert-parallel-size": "ep_size",
    "--attn-cp-size": "cp_size",
    "--attention-context-parallel-size": "cp_size",
    "--enable-hicache": "enable_hierarchical_cache",
    "--dp": "dp_size",
    "--data-parallel-size": "dp_size",
}

#: SGLang 0.5.23's own spelling of DP attention: ``--attn-dp-size N`` is
#: ``--enable-dp-attention --dp-size N`` (``parallel_hook.py``
#: ``handle_deprecated_dp_attention`` turns the old spelling into it).
_ATTN_DP_FLAGS: tuple[str, ...] = ("--attn-dp-size", "--attention-data-parallel-size")

_SPECIAL_FLAGS: tuple[str, ...] = (
    "--disaggregation-mode",
    "--disable-priority-preemption",
    "--enable-ep-moe",
    *_ATTN_DP_FLAGS,
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
    base, nullable = FIELD_TYPES[name]
    word = text.strip()
    if nullable and word.lower() in NULL_WORDS:
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
    (:func:`~prefillkit.app.pasted_launch.strip_launch_prefix`). Values are typed
    but not range-checked (``Config`` does that). A setting given twice, by the same flag
    or by two spellings of it (``--tp 4 --tp-size 8``), is refused naming both, unless
    ``allow_repeats`` (layered flags, e.g. a compare variant's on top of the shared ones:
    then the last occurrence wins).
    """
    reader = _FlagReader(strip_launch_prefix(argv), allow_repeats)
    while reader.i < len(reader.argv):
        reader.read_flag()
    reader.finish()
    return reader.result


class _FlagReader:
    """The state of :func:`parse_flags`: the flags, the position ``i`` in them, the flag
    being read (``inline``: its ``=value``, None without ``=``) and what was set."""

    __slots__ = (
        "allow_repeats",
        "argv",
        "attn_dp",
        "ep_moe",
        "flag",
        "given",
        "i",
        "inline",
        "result",
    )

    def __init__(self, argv: list[str], allow_repeats: bool) -> None:
        self.argv = argv
        self.allow_repeats = allow_repeats
        self.i = 0
        self.flag = ""
        self.inline: str | None = None
        self.ep_moe = False
        self.attn_dp: tuple[str, int] | None = None  # (its flag, N) of --attn-dp-size N
        self.given: dict[str, str] = {}
        self.result = ParsedFlags()

    def put(self, name: str, flag: str, value: object) -> None:
        """Set field ``name`` (given as ``flag``); a second setting is refused unless
        repeats are allowed."""
        if not self.allow_repeats and name in self.given:
            first = self.given[name]
            also = "" if first == flag else f" (also given as {first})"
            raise ConfigError(f"{flag}: given twice{also}; give each setting once")
        self.given[name] = flag
        self.result.values[name] = value

    def take_value(self) -> str:
        """The flag's value: its ``=value``, else the next argument (not a flag)."""
        if self.inline is not None:
            return self.inline
        if self.i >= len(self.argv) or self.argv[self.i].startswith("--"):
            raise ConfigError(f"{self.flag}: missing value")
        value = self.argv[self.i]
        self.i += 1
        return value

    def bool_value(self) -> bool:
        """A boolean flag's value: its ``=value``, a true/false word after it, else True."""
        if self.inline is not None:
            return _parse_bool(self.flag, self.inline)
        words = _TRUE_WORDS | _FALSE_WORDS
        if self.i < len(self.argv) and self.argv[self.i].strip().lower() in words:
            self.i += 1
            return _parse_bool(self.flag, self.argv[self.i - 1])
        return True

    def read_flag(self) -> None:
        """Read the flag at ``argv[i]`` with its value(s)."""
        token = self.argv[self.i]
        self.i += 1
        if not token.startswith("--") or token == "--":
            raise ConfigError(f"unexpected argument {token!r} (expected a --flag)")
        flag, eq, inline = token.partition("=")
        self.flag = flag.replace("_", "-")
        self.inline = inline if eq else None
        if self._read_setting() or self._read_special():
            return
        after = consume_launch_flag(self.flag, self.argv, self.i, self.inline, self.result.ignored)
        if after is None:
            raise ConfigError(f"unknown flag {self.flag!r}{suggest_flag(self.flag)}")
        self.i = after

    def _read_setting(self) -> bool:
        """A field's flag, an alias of one, or ``--no-FLAG`` of a boolean one: set it."""
        flag = self.flag
        name = _FLAG_TO_FIELD.get(flag) or _ALIASES.get(flag)
        if name is not None:
            if FIELD_TYPES[name][0] is bool:
                self.put(name, flag, self.bool_value())
            else:
                self.put(name, flag, _parse_value(flag, name, self.take_value()))
            return True
        if flag.startswith("--no-") and _FLAG_TO_FIELD.get("--" + flag[5:]) is not None:
            neg = _FLAG_TO_FIELD["--" + flag[5:]]
            if FIELD_TYPES[neg][0] is bool:
                if self.inline is not None:
                    raise ConfigError(f"{flag}: takes no value")
                self.put(neg, flag, False)
                return True
        return False

    def _read_special(self) -> bool:
        """One of :data:`_SPECIAL_FLAGS`: apply it."""
        flag = self.flag
        if flag == "--disable-priority-preemption":
            self.put("enable_priority_preemption", flag, not self.bool_value())
            return True
        if flag == "--disaggregation-mode":
            mode = self.take_value().strip().lower()
            if mode == "prefill":
                self.put("mode", flag, "pd-prefill")
            elif mode not in NULL_WORDS:
                raise ConfigError(
                    f"--disaggregation-mode: {mode!r} is not supported "
                    "(prefillkit models the prefill side: use prefill or null)"
                )
            return True
        if flag in _ATTN_DP_FLAGS:
            if self.attn_dp is not None and not self.allow_repeats:
                raise ConfigError(f"{flag}: given twice (also given as {self.attn_dp[0]})")
            value = _parse_value(flag, "dp_size", self.take_value())
            assert isinstance(value, int)
            self.attn_dp = (flag, value)
            return True
        if flag == "--enable-ep-moe":  # SGLang < 0.5: EP over the whole TP group
            if self.inline is not None:
                raise ConfigError(f"{flag}: takes no value")
            self.ep_moe = True
            return True
        return False

    def finish(self) -> None:
        """After the last flag: ``--attn-dp-size N`` turns DP attention on over N ranks;
        ``--enable-ep-moe`` sets the EP size to the line's TP size."""
        self._finish_attn_dp()
        if not self.ep_moe:
            return
        tp = self.result.values.get("tp_size")
        if not isinstance(tp, int):
            raise ConfigError(
                "--enable-ep-moe: sets the EP size to the TP size (SGLang before 0.5); give "
                "--tp-size on the line too, or --ep-size N instead"
            )
        self.put("ep_size", "--enable-ep-moe", tp)

    def _finish_attn_dp(self) -> None:
        """``--attn-dp-size N`` (N > 1): ``dp_size`` N with ``enable_dp_attention``; with
        data-parallel replicas (``--dp-size`` > 1) it is refused, as SGLang refuses it
        (``parallel_hook.py`` ``handle_data_parallelism``); N = 1 is SGLang's default."""
        if self.attn_dp is None:
            return
        flag, n = self.attn_dp
        if n < 1:
            raise ConfigError(f"{flag}: must be positive, got {n}")
        replicas = self.result.values.get("dp_size")
        if n > 1 and replicas not in (None, 1):
            raise ConfigError(
                f"{flag}: {n} with {self.given['dp_size']} {replicas}: data-parallel replicas "
                f"with attention DP are not supported (SGLang refuses them); give {flag} {n} "
                "alone"
            )
        if n == 1:
            return
        self.result.values["dp_size"] = n
        self.given.setdefault("dp_size", flag)
        self.result.values["enable_dp_attention"] = True
        self.given.setdefault("enable_dp_attention", flag)
