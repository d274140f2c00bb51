"""SGLang's launch flags, read from SGLang: ``prefillkit/data/sglang_0_5_23_server_args.json``.

    python benchmarks/extract_sglang_args.py [--stubs DIR] [--sglang DIR] [--out FILE]

Runs SGLang's own ``ServerArgs.add_cli_args`` on a real ``argparse.ArgumentParser`` (the
parser ``python -m sglang.launch_server`` and ``sglang serve`` build in
``prepare_server_args``) and writes every option string it registers, aliases included:
``flag -> {dest, takes_value, nargs, choices, default, action, aliases}``, with the
SGLang version and the sha256 of the ``server_args.py`` (and of the ``arg_groups`` modules
that declare most fields) it was read from. Nothing is parsed by hand: argparse's own
actions say which flags take a value (``nargs`` ``None``: one; ``0``: none, a store_true or
``--no-x``; ``'?'``, ``'+'``, ``'*'``: optional, one or more, any).

It needs a Python in which ``sglang.srt.server_args`` imports. SGLang 0.5.23 on a CPU-only
machine (no install into prefillkit's own environment)::

    pip download -q --no-deps sglang==0.5.23 -d /tmp/sgl
    python -m venv --system-site-packages /tmp/sglenv    # CPU torch 2.13 from the system
    /tmp/sglenv/bin/pip install -q --no-deps -r ../shared/sglang-cpu/requirements-nodeps.txt \\
        /tmp/sgl/sglang-0.5.23-*.whl
    /tmp/sglenv/bin/python benchmarks/extract_sglang_args.py --stubs ../shared/sglang-cpu

(``../shared/sglang-cpu/setup.sh VENV`` builds the same environment with its own torch.)
``--stubs DIR``: a folder holding ``stubs.py`` whose ``install_all()`` stands in for triton
and torchvision before the first ``import sglang``. ``--sglang DIR``: a folder holding an
unpacked ``sglang`` package, put first on ``sys.path`` (default: the installed one).

The classification of every flag (modelled, ignored, refused) is prefillkit's, in
``prefillkit.app.launch_flags``; ``tests/test_launch_flags.py`` checks it covers exactly the
flags of this file.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXPECTED_VERSION = "0.5.23"
DEFAULT_OUT = REPO / "src" / "prefillkit" / "data" / "sglang_0_5_23_server_args.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree_sha256(folder: Path) -> str:
    """One digest over every ``*.py`` under ``folder``: relative path and contents, sorted."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(_sha256(path).encode() + b"\n")
    return digest.hexdigest()


def _json_value(value: Any) -> Any:
    """``value`` as JSON: scalars as they are, sequences as lists, anything else as repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return repr(value)


def _choices(action: argparse.Action) -> list[Any] | None:
    if action.choices is None:
        return None
    values = [_json_value(c) for c in action.choices]
    if isinstance(action.choices, (set, frozenset)):  # no order of its own
        values.sort(key=str)
    return values


def _nargs(action: argparse.Action) -> int | str | None:
    nargs = action.nargs
    if nargs is None or isinstance(nargs, int):
        return nargs
    return str(nargs)


def extract() -> dict[str, Any]:
    """Every option string ``ServerArgs.add_cli_args`` registers, with its argparse kind."""
    sglang = importlib.import_module("sglang")
    server_args_module = importlib.import_module("sglang.srt.server_args")
    version = getattr(sglang, "__version__", None)
    if version != EXPECTED_VERSION:
        raise SystemExit(f"expected sglang {EXPECTED_VERSION}, imported {version}")
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    server_args_module.ServerArgs.add_cli_args(parser)
    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        strings = [s for s in action.option_strings if s.startswith("--")]
        if len(strings) != len(action.option_strings):
            raise SystemExit(f"unexpected short option in {action.option_strings}")
        nargs = _nargs(action)
        for flag in strings:
            if flag in flags:
                raise SystemExit(f"{flag} registered twice")
            flags[flag] = {
                "dest": action.dest,
                "takes_value": nargs != 0,
                "nargs": nargs,
                "choices": _choices(action),
                "default": _json_value(action.default),
                "action": type(action).__name__,
                "aliases": [s for s in strings if s != flag],
            }
    source = Path(str(server_args_module.__file__))
    return {
        "sglang_version": version,
        "source": "sglang/srt/server_args.py: ServerArgs.add_cli_args, run on an "
        "argparse.ArgumentParser (benchmarks/extract_sglang_args.py)",
        "server_args_sha256": _sha256(source),
        "arg_groups_sha256": _tree_sha256(source.parent / "arg_groups"),
        "flags": dict(sorted(flags.items())),
    }


def _dumps(data: dict[str, Any]) -> str:
    """``data`` as JSON with one line per flag (the file stays readable and diffable)."""
    head = {k: v for k, v in data.items() if k != "flags"}
    lines = ["{"]
    lines += [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in head.items()]
    lines.append(' "flags": {')
    entries = [
        f"  {json.dumps(flag)}: {json.dumps(entry, ensure_ascii=False)}"
        for flag, entry in data["flags"].items()
    ]
    lines.append(",\n".join(entries))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stubs", type=Path, help="folder holding stubs.py (install_all())")
    parser.add_argument("--sglang", type=Path, help="folder holding an unpacked sglang package")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.sglang is not None:
        sys.path.insert(0, str(args.sglang.resolve()))
    if args.stubs is not None:
        sys.path.insert(0, str(args.stubs.resolve()))
        # the CPU recipe's stand-ins for triton and torchvision
        importlib.import_module("stubs").install_all()
    data = extract()
    text = _dumps(data)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}: {len(data['flags'])} flags of sglang {data['sglang_version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
