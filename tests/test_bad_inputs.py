"""Every malformed input under tests/data/bad/ through the CLI, as a user would run it.

Trace files (top-level entries of ``MANIFEST.toml``) are replayed with
``prefillkit replay --trace FILE --format FMT``; TOML configs (``config/``, listed under
``[config.files]``) with ``prefillkit replay --config FILE``. Each must exit with status
2 and print exactly one line on stderr, ``prefillkit: error: ...``, that names the file
and the place in it (the line for a bad trace row, the setting or flag for a config),
and never a traceback.

All files run in one interpreter (``prefillkit.cli.run`` per file, stdout and stderr
captured) to keep the test fast; a handful also run as real ``python -m prefillkit``
subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cli_support import cli_batch

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
BAD = Path(__file__).resolve().parent / "data" / "bad"
MANIFEST: dict[str, Any] = tomllib.loads((BAD / "MANIFEST.toml").read_text(encoding="utf-8"))
CONFIG_DIR = "config"
CONFIGS: dict[str, dict[str, Any]] = MANIFEST[CONFIG_DIR]["files"]
TRACES: dict[str, dict[str, Any]] = MANIFEST

#: (relative name, argv, manifest entry) for every bad input.
CASES: list[tuple[str, list[str], dict[str, Any]]] = [
    (
        name,
        [
            "replay",
            "--trace",
            str(BAD / name),
            "--format",
            spec["format"],
            "--max-requests",
            "5",
            "--quiet",
        ],
        spec,
    )
    for name, spec in sorted(TRACES.items())
] + [
    (
        f"{CONFIG_DIR}/{name}",
        ["replay", "--config", str(BAD / CONFIG_DIR / name), "--max-requests", "5", "--quiet"],
        spec,
    )
    for name, spec in sorted(CONFIGS.items())
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PREFILLKIT_DEBUG", None)
    env.setdefault("COLUMNS", "120")
    return env


@cache
def driver_results() -> dict[str, dict[str, Any]]:
    """Run every case in one fresh interpreter; results by case name."""
    argvs = [argv for _, argv, _ in CASES]
    results = cli_batch(argvs, timeout=600)
    return {name: res for (name, _, _), res in zip(CASES, results, strict=True)}


def check_one_line_error(name: str, code: object, stdout: str, stderr: str) -> str:
    """Exit 2, one ``prefillkit: error:`` line naming the file and the place, nothing else."""
    spec = CONFIGS[name.split("/", 1)[1]] if name.startswith(CONFIG_DIR + "/") else TRACES[name]
    path = str(BAD / name)
    assert "Traceback" not in stderr, stderr
    assert code == 2, (code, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("prefillkit: error: "), line
    assert stdout == "", stdout
    if spec.get("kind") == "config":
        assert line.startswith(f"prefillkit: error: {path}: "), line
        key = spec.get("key")
        if key is not None:
            assert key in line, (key, line)
    elif "line" in spec:
        assert line.startswith(f"prefillkit: error: {path}:{spec['line']}: "), line
    else:
        assert line.startswith(f"prefillkit: error: {path}: "), line
    assert spec["match"] in line, (spec["match"], line)
    return line


def test_corpus_size_and_manifest() -> None:
    """At least 30 malformed inputs, every file on disk listed, every entry on disk."""
    on_disk = {
        p.relative_to(BAD).as_posix()
        for p in BAD.rglob("*")
        if p.is_file() and p.name != "MANIFEST.toml"
    }
    listed = {n for n in TRACES if n != CONFIG_DIR} | {f"{CONFIG_DIR}/{n}" for n in CONFIGS}
    assert on_disk == listed
    assert len(on_disk) >= 30
    assert len(CONFIGS) >= 15
    for spec in CONFIGS.values():
        assert spec["kind"] == "config"
    assert (BAD / CONFIG_DIR).is_dir()


@pytest.mark.parametrize("name", [name for name, _, _ in CASES])
def test_bad_input_is_one_line_error(name: str) -> None:
    res = driver_results()[name]
    check_one_line_error(name, res["code"], res["stdout"], res["stderr"])


SUBPROCESS_CASES = [
    "mooncake_truncated.jsonl",
    "jsonl_non_utf8.jsonl",
    "azure_header_only.csv",
    "mooncake_huge_timestamp.jsonl",
    f"{CONFIG_DIR}/truncated.toml",
    f"{CONFIG_DIR}/non_utf8.toml",
    f"{CONFIG_DIR}/huge_ratio.toml",
    f"{CONFIG_DIR}/unknown_gpu.toml",
]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_bad_input_in_a_real_subprocess(name: str) -> None:
    argv = next(argv for n, argv, _ in CASES if n == name)
    proc = subprocess.run(
        [sys.executable, "-m", "prefillkit", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    line = check_one_line_error(name, proc.returncode, proc.stdout, proc.stderr)
    assert line == driver_results()[name]["stderr"].rstrip("\n")


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prefillkit", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )


def test_trace_mixing_key_unit_sizes_names_the_file(tmp_path: Path) -> None:
    """Block sizes giving two key-unit sizes (lcm(64, 16) = 64, lcm(64, 512) = 512) cannot
    share one prefix cache: the error names the trace and the request, not a traceback."""
    trace = tmp_path / "mixed.jsonl"
    rows = [
        {"rid": "a", "arrival_s": 0, "output_len": 1, "hash_ids": list(range(7)), "block_size": 16,
         "input_len": 100},
        {"rid": "b", "arrival_s": 1, "output_len": 1, "hash_ids": [1, 2], "block_size": 512,
         "input_len": 1000},
    ]  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = _cli("replay", "--trace", trace, "--quiet")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"prefillkit: error: {trace}: request 'b' has key units of 512 tokens but request 'a' "
        "has 64 (page size 64): the block sizes of one trace must give one key unit"
    ]


def test_config_error_names_the_file_only_when_the_file_is_at_fault(tmp_path: Path) -> None:
    """A bad value from --config names the file; the same value given as a flag (which
    overrides the file) names only the flag."""
    good = tmp_path / "good.toml"
    good.write_text("[prefillkit]\nmax_total_tokens = 100000\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[prefillkit]\nmax_total_tokens = -1\n")
    from_file = _cli("replay", "--config", bad, "--max-requests", "3", "--quiet")
    assert from_file.returncode == 2
    assert from_file.stderr == (
        f"prefillkit: error: {bad}: --max-total-tokens must be positive, got -1\n"
    )
    from_flag = _cli(
        "replay", "--config", good, "--max-total-tokens", "-1", "--max-requests", "3", "--quiet"
    )
    assert from_flag.returncode == 2
    assert from_flag.stderr == "prefillkit: error: --max-total-tokens must be positive, got -1\n"
    overridden = _cli(
        "replay", "--config", bad, "--max-total-tokens", "50000", "--max-requests", "3", "--quiet"
    )
    assert overridden.returncode == 0, overridden.stderr
