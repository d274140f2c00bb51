"""A pasted SGLang launch command taken as its flags (:func:`strip_launch_prefix`).

SGLang 0.5.23 has two launchers, ``python3 -m sglang.launch_server ...`` and ``sglang
serve [MODEL] ...``; a pasted line may carry either (or be one quoted argument), and what
follows the launcher is the flags :mod:`prefillkit.app.launch_flags` classifies.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from prefillkit.sched.config import ConfigError

__all__ = ["is_flag", "strip_launch_prefix"]


def is_flag(token: str) -> bool:
    """Whether ``token`` is a ``--flag`` (not a value)."""
    return token.startswith("--")


_PYTHON = re.compile(r"^(?:\S*/)?python(?:\d+(?:\.\d+)*)?$")
_LAUNCH_MODULE = "sglang.launch_server"
_SERVE_MODEL_TYPES = frozenset({"auto", "llm"})


def _is_launcher(word: str) -> bool:
    return bool(_PYTHON.match(word)) or word == "sglang"


def _unquote_line(argv: list[str]) -> list[str]:
    """A whole launch line given as one quoted argument, split as a shell would (a ``\\``
    line continuation joins); any other token is left alone (a JSON value may hold
    spaces)."""
    if not argv or not any(c.isspace() for c in argv[0]):
        return argv
    text = argv[0].replace("\\\r\n", " ").replace("\\\n", " ")
    words = shlex.split(text)
    if not words or not (_is_launcher(words[0]) or is_flag(words[0])):
        return argv
    if is_flag(words[0]) and "=" in argv[0].split()[0]:
        return argv  # --flag={"a": 1}: one value with spaces, not a line
    return [*words, *argv[1:]]


def _serve_args(argv: list[str]) -> list[str]:
    """``sglang serve``'s arguments as launch flags: a leading positional model path is
    ``--model-path``; serve's own ``--model-type auto|llm`` is dropped."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        if name == "--model-type":
            if not eq:
                if i + 1 >= len(argv):
                    raise ConfigError("--model-type: missing value")
                value = argv[i + 1]
                i += 1
            if value.strip().lower() not in _SERVE_MODEL_TYPES:
                raise ConfigError(
                    f"--model-type: {value!r} is not simulated (prefillkit models an LLM "
                    "server: auto or llm)"
                )
        else:
            out.append(token)
        i += 1
    if out and not out[0].startswith("-"):
        out = ["--model-path", *out]
    return out


def strip_launch_prefix(argv: Sequence[str]) -> list[str]:
    """``argv`` with a pasted launch command's prefix taken off, so the rest are flags.

    Accepted: ``python3 -m sglang.launch_server ...`` (any ``python``, ``python3.11`` or
    a path to one) and ``sglang serve [MODEL] ...`` (SGLang 0.5.23's two launchers); the
    whole line quoted as one argument (split as the shell would, ``\\`` continuations
    joined); stray ``\\`` tokens a pasted continuation leaves. Any other launcher (another
    module, ``sglang generate``) is refused with one line; a line without one is returned
    as it is.
    """
    tokens = [t for t in _unquote_line(list(argv)) if not (t and t.strip() in ("", "\\"))]
    if not tokens or not _is_launcher(tokens[0]):
        return tokens
    head = tokens[0]
    if head == "sglang":
        if len(tokens) < 2 or tokens[1] != "serve":
            got = tokens[1] if len(tokens) > 1 else "nothing"
            raise ConfigError(
                f"unexpected argument 'sglang {got}': paste a server launch line "
                f"('sglang serve ...' or 'python3 -m {_LAUNCH_MODULE} ...')"
            )
        return _serve_args(tokens[2:])
    if len(tokens) < 3 or tokens[1] != "-m" or tokens[2] != _LAUNCH_MODULE:
        got = " ".join(tokens[1:3]) or "nothing"
        raise ConfigError(
            f"unexpected argument '{head} {got}': paste SGLang's server launch line "
            f"('python3 -m {_LAUNCH_MODULE} ...' or 'sglang serve ...')"
        )
    return tokens[3:]
