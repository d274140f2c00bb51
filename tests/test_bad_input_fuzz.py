"""Fuzz of malformed trace rows: every mutant is refused in one line, or replays.

Valid rows of each trace format (Mooncake JSONL, Bailian JSONL, Azure CSV, prefillkit
JSONL) are mutated deterministically (a seeded ``random.Random``): the file cut at every
k-th byte, values replaced by wrong types, huge numbers, NaN / Infinity and negative
values, lists and objects nested up to 100,000 deep, non-UTF-8 bytes, NUL and control
characters, blank lines, BOMs, CRLF endings, fields dropped, rows swapped, random bytes
flipped. Each mutant is replayed (``prefillkit replay --trace FILE --format FMT``) and a
share of them also read by ``prefillkit trace-stats`` or replayed with other options. A
mutant may still be a valid trace (exit 0); otherwise the exit status is 2 and stderr is
exactly one line, ``prefillkit: error: ...``, that names the file (and quotes a bad value
rather than dumping it). Never exit 1, never a traceback.

All runs share one interpreter (``prefillkit.cli.run`` per argv, as
tests/test_bad_inputs.py does) to keep the fuzz within a few seconds.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_support import cli_batch

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
SEED = 33


MOONCAKE_ROWS: list[dict[str, Any]] = [
    {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]},
    {"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2],
     "priority": 1},
    {"timestamp": 1500, "input_length": 512, "output_length": 0, "hash_ids": [3],
     "ignore_eos": True},
    {"timestamp": 3000, "input_length": 700, "output_length": 5, "hash_ids": [0, 4]},
]  # fmt: skip
BAILIAN_ROWS: list[dict[str, Any]] = [
    {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40,
     "output_length": 4, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]},
    {"chat_id": 2, "parent_chat_id": 1, "timestamp": 0.5, "input_length": 50,
     "output_length": 8, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4]},
    {"chat_id": 3, "parent_chat_id": -1, "timestamp": 1.25, "input_length": 16,
     "output_length": 0, "type": "image", "turn": 1, "hash_ids": [9], "priority": 2},
]  # fmt: skip
JSONL_ROWS: list[dict[str, Any]] = [
    {"rid": "a", "arrival_s": 0.0, "output_len": 4, "tokens": [1, 2, 3, 4, 5]},
    {"arrival_s": 0.5, "output_len": 8, "hash_ids": [0, 1, 2], "block_size": 64,
     "input_len": 130},
    {"arrival_s": 1.25, "output_len": 32, "input_len": 900, "priority": 1},
    {"arrival_s": 1.5, "output_len": 6, "input_len": 300, "ignore_eos": True},
    {"rid": "s0", "arrival_s": 2.0, "output_len": 3, "input_len": 64, "session_id": "s",
     "turn": 0},
    {"rid": "s1", "arrival_s": 2.5, "output_len": 3, "input_len": 128, "session_id": "s",
     "turn": 1, "think_s": 0.5},
]  # fmt: skip
AZURE_LINES: list[str] = [
    "TIMESTAMP,ContextTokens,GeneratedTokens",
    "2023-11-16 18:15:46.6805900,374,44",
    "2023-11-16 18:15:50.9951690,396,109",
    "2023-11-16 18:15:51.0000000,879,0",
]

#: Values (JSON text) put in place of a field's value.
BAD_VALUES: tuple[str, ...] = (
    "null", "true", "false", '"x"', '""', '"1"', "[]", "{}", '{"a": 1}', "1.5", "-1", "0",
    "-0.0", "2.0", "1e308", "-1e308", "1e400", "-1e400", "1e-300", "NaN", "Infinity",
    "-Infinity", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
    "1" + "0" * 30, "1" + "0" * 400, "7" * 5000, "[1.5]", "[[1]]", '["a"]', "[-1]",
    "[1e400]", "[null]", "[true]", "[4294967296]", "[" + ",".join(["1"] * 3000) + "]",
)  # fmt: skip
#: Values of a CSV cell.
BAD_CELLS: tuple[str, ...] = (
    "", " ", "-1", "0", "1.5", "1e5", "nan", "inf", "-inf", "9" * 30, "9" * 5000, "abc",
    '"', '"a,b"', "\x00", "１２", "2023-13-16 18:15:46.6805900", "0000-01-01 00:00:00",
    "0001-01-01 00:00:00", "9999-12-31 23:59:59.999999999", "2023-02-30 00:00:00",
    "2023-11-16 18:15:46.68059001234", "2023-11-16T18:15:46", "2023-11-16 24:00:00",
    "1700000000", "true", "maybe",
)  # fmt: skip
#: Raw bytes put at a random place.
BAD_BYTES: tuple[bytes, ...] = (
    b"\xff", b"\x80", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x00",
    b"\r", b"\x0b", b"\x0c", b"\x1b", b"\xef\xbb\xbf", "\u2028".encode(), b"\n", b"\n\n",
    b",", b'"', b"[", b"{", b"}", b"]", b"\\",
)  # fmt: skip


def _nested(depth: int, core: str = "1", *, obj: bool = False) -> str:
    if obj:
        return '{"a": ' * depth + core + "}" * depth
    return "[" * depth + core + "]" * depth


def _json_text(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _replace_value(line: str, key: str, value: str) -> str:
    """``line`` (one JSON object) with ``key``'s value text replaced by ``value``."""
    obj = json.loads(line)
    marker = "\x00MARK\x00"
    obj[key] = marker
    return json.dumps(obj).replace(json.dumps(marker), value)


def _json_mutants(rows: list[dict[str, Any]], rng: random.Random) -> Iterator[bytes]:
    lines = [json.dumps(r) for r in rows]
    keys = list(dict.fromkeys(k for r in rows for k in r))

    def with_line(i: int, text: str) -> bytes:
        return ("\n".join([*lines[:i], text, *lines[i + 1 :]]) + "\n").encode()

    # Wrong types, huge numbers, NaN / Infinity, negatives: half the values (a seeded
    # choice, so every value meets several fields) in each field.
    for key in keys:
        holders = [i for i, r in enumerate(rows) if key in r]
        for value in rng.sample(BAD_VALUES, len(BAD_VALUES) // 2):
            i = rng.choice(holders)
            yield with_line(i, _replace_value(lines[i], key, value))
        i = rng.choice(holders)
        row = dict(rows[i])
        del row[key]
        yield with_line(i, json.dumps(row))  # the field missing
    # Deep nesting: in a list field, in an object, around the whole row, unbalanced.
    list_key = "tokens" if "tokens" in keys else "hash_ids"
    for depth in (63, 64, 65, 500, 1000, 5000, 100_000):
        i = rng.randrange(len(lines))
        holder = next(j for j, r in enumerate(rows) if list_key in r)
        yield with_line(holder, _replace_value(lines[holder], list_key, _nested(depth)))
        yield with_line(i, _replace_value(lines[i], "extra", _nested(depth, obj=True)))
        yield with_line(i, "[" * depth + lines[i] + "]" * depth)
        yield with_line(i, "[" * depth)
        yield with_line(i, lines[i][:-1] + ', "s": "' + "[" * depth + '"}')  # in a string
    # Rows as other JSON values; duplicate keys; an unknown field.
    for text in ("[]", "null", "1", '"row"', "{}", "true", lines[0] + lines[0], lines[0] + "x"):
        yield with_line(rng.randrange(len(lines)), text)
    yield with_line(0, lines[0][:-1] + ", " + lines[0][1:])
    yield with_line(0, lines[0][:-1] + ', "unknown": {"a": [1, 2]}}')


def _csv_mutants(lines: list[str], rng: random.Random) -> Iterator[bytes]:
    def joined(ls: list[str]) -> bytes:
        return ("\n".join(ls) + "\n").encode()

    ncols = len(lines[0].split(","))
    for cell in BAD_CELLS:
        i = rng.randrange(1, len(lines))
        cells = lines[i].split(",")
        cells[rng.randrange(ncols)] = cell
        yield joined([*lines[:i], ",".join(cells), *lines[i + 1 :]])
    for header in (
        "TIMESTAMP,ContextTokens",
        "TIMESTAMP,ContextTokens,GeneratedTokens,ignore_eos",
        "TIMESTAMP,TIMESTAMP,ContextTokens,GeneratedTokens",
        " TIMESTAMP , ContextTokens , GeneratedTokens ",
        "timestamp,contexttokens,generatedtokens",
        "",
        '"TIMESTAMP,ContextTokens,GeneratedTokens',
    ):
        yield joined([header, *lines[1:]])
    for i in range(1, len(lines)):
        yield joined([*lines[:i], lines[i] + ",extra", *lines[i + 1 :]])
        yield joined([*lines[:i], lines[i].rsplit(",", 1)[0], *lines[i + 1 :]])
    yield joined([lines[0]] + [lines[1]] * 2000)  # many rows at one time
    yield joined([lines[0], "2023-11-16 18:15:46," + "9" * 400 + ",1"])


def _byte_mutants(data: bytes, rng: random.Random) -> Iterator[bytes]:
    # Truncation at every k-th byte (about 25 cuts).
    step = max(1, len(data) // 25)
    for cut in range(1, len(data), step):
        yield data[:cut]
    # Bad bytes at random places; random byte flips.
    for bad in BAD_BYTES:
        at = rng.randrange(len(data))
        yield data[:at] + bad + data[at:]
    for _ in range(25):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        yield bytes(buf)
    # Lines: blank and whitespace lines, BOMs, CRLF, no final newline, order.
    lines = data.split(b"\n")[:-1]
    yield b"\n\n" + data + b"\n \n\t\n"
    yield b"\xef\xbb\xbf" + data
    yield b"\xef\xbb\xbf\n" + data
    yield lines[0] + b"\n\xef\xbb\xbf" + b"\n".join(lines[1:]) + b"\n"
    yield data.replace(b"\n", b"\r\n")
    yield data.replace(b"\n", b"\r")
    yield data.rstrip(b"\n")
    yield b"\n".join(reversed(lines)) + b"\n"
    yield b"\n".join(lines[:1] + lines[1:][::-1]) + b"\n"
    yield b"\n".join([lines[0], *lines]) + b"\n"
    yield b""
    yield b"\n \n"
    yield b"\x00" * 64
    yield data.decode().encode("utf-16")
    yield b"\xef\xbb\xbf"


def _cases(tmp: Path) -> list[tuple[str, Path, list[str]]]:
    """``(format, file, argv)`` per mutant; files written under ``tmp``."""
    rng = random.Random(SEED)
    sources: list[tuple[str, str, bytes, Callable[[random.Random], Iterator[bytes]]]] = [
        ("mooncake", "jsonl", _json_text(MOONCAKE_ROWS), lambda r: _json_mutants(MOONCAKE_ROWS, r)),
        ("bailian", "jsonl", _json_text(BAILIAN_ROWS), lambda r: _json_mutants(BAILIAN_ROWS, r)),
        ("jsonl", "jsonl", _json_text(JSONL_ROWS), lambda r: _json_mutants(JSONL_ROWS, r)),
        ("azure", "csv", ("\n".join(AZURE_LINES) + "\n").encode(),
         lambda r: _csv_mutants(AZURE_LINES, r)),
    ]  # fmt: skip
    cases: list[tuple[str, Path, list[str]]] = []
    for fmt, ext, data, structured in sources:
        mutants = [data, *structured(rng), *_byte_mutants(data, rng)]
        for k, blob in enumerate(mutants):
            # Bailian files carry their block size in the name.
            name = f"{fmt}_{k:03d}" + ("_blksz_16" if fmt == "bailian" else "") + f".{ext}"
            path = tmp / name
            path.write_bytes(blob)
            replay = ["replay", "--trace", str(path), "--quiet"]
            stats = ["trace-stats", str(path)]
            runs = [[*replay, "--format", fmt]]
            # A share of the mutants through the other readers and the re-timing options.
            for every, first, argv in (
                (3, 0, [*stats, "--format", fmt, "--json"]),
                (11, 3, [*stats, "--format", fmt, "--lru-cache-tokens", "4096"]),
                (5, 1, [*replay, "--format", fmt, "--skip-bad-rows", "--spread-buckets"]),
                (7, 2, [*replay, "--format", "auto", "--time-scale", "1e300"]),
                (13, 4, [*replay, "--format", fmt, "--rate", "1e-300"]),
            ):
                if k % every == first:
                    runs.append(argv)
            cases += [(fmt, path, argv) for argv in runs]
    return cases


def _run_all(argvs: list[list[str]]) -> list[dict[str, Any]]:
    return cli_batch(argvs, timeout=300)


def test_fuzzed_trace_rows_fail_in_one_line(tmp_path: Path) -> None:
    cases = _cases(tmp_path)
    assert len(cases) > 600
    results = _run_all([argv for _, _, argv in cases])
    failures: list[str] = []
    codes: dict[int, int] = {}
    for (fmt, path, argv), res in zip(cases, results, strict=True):
        code, stderr = res["code"], res["stderr"]
        codes[code] = codes.get(code, 0) + 1
        lines = stderr.splitlines()
        ok = code == 0 or (
            code == 2
            and len(lines) == 1
            and lines[0].startswith("prefillkit: error: ")
            and str(path) in lines[0]
            and len(lines[0]) < len(str(path)) + 500  # a bad value is quoted, not dumped
        )
        if code == 0 and "Traceback" in stderr:
            ok = False
        if not ok:
            failures.append(f"{fmt} {argv[0]} {path.name}: rc {code}: {stderr[-600:]!r}")
    assert not failures, f"{len(failures)} bad outcomes:\n" + "\n".join(failures[:40])
    # The originals replay; most mutants are refused.
    assert codes.get(2, 0) > len(cases) // 2, codes


def test_the_fuzz_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first = [p.read_bytes() for _, p, _ in _cases(a)]
    second = [p.read_bytes() for _, p, _ in _cases(b)]
    assert first == second


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_row_names_file_and_line(tmp_path: Path, depth: int) -> None:
    """Item 5's row: ``hash_ids`` nested ``depth`` deep is one line naming file:line."""
    trace = tmp_path / "deep.jsonl"
    good = json.dumps(MOONCAKE_ROWS[0])
    trace.write_text(good + "\n" + _replace_value(good, "hash_ids", _nested(depth)) + "\n")
    (res,) = _run_all([["replay", "--trace", str(trace), "--format", "mooncake", "--quiet"]])
    assert res["code"] == 2, res
    assert res["stderr"] == (
        f"prefillkit: error: {trace}:2: JSON nested too deeply "
        "(more than 64 levels of lists and objects)\n"
    )


def test_truncated_row_names_the_column_of_the_error(tmp_path: Path) -> None:
    """A row cut after column 77 is reported at column 78 (where the text ends), not at
    column 1 of a line after it."""
    trace = tmp_path / "cut.jsonl"
    good = json.dumps(MOONCAKE_ROWS[0])
    trace.write_text(good + "\n" + good[:77] + "\n")
    (res,) = _run_all([["replay", "--trace", str(trace), "--format", "mooncake", "--quiet"]])
    assert res["code"] == 2
    assert re.search(r":2: invalid JSON \(.* at column 78\)$", res["stderr"].strip()), res


def test_deep_nesting_in_config_and_result_files_is_one_line(tmp_path: Path) -> None:
    """The other JSON / TOML readers of user files: --config, --model-config,
    --cost-preset, a run folder's summary.json and a compare folder's compare.json."""
    deep = _nested(100_000, "")
    toml = tmp_path / "deep.toml"
    toml.write_text(f"a = {deep}\n")
    model = tmp_path / "deep.json"
    model.write_text(f'{{"hidden_size": {deep}}}')
    run_dir, cmp_dir = tmp_path / "run", tmp_path / "cmp"
    run_dir.mkdir()
    cmp_dir.mkdir()
    (run_dir / "summary.json").write_text(f'{{"config": {deep}}}')
    (cmp_dir / "compare.json").write_text(f'{{"variants": {deep}}}')
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "manifest.json").write_text(f'{{"format": {deep}}}')
    cases = [
        (toml, ["replay", "--config", str(toml), "-q"]),
        (model, ["replay", "--model-config", str(model), "--max-requests", "3", "-q"]),
        (toml, ["replay", "--cost-preset", str(toml), "--max-requests", "3", "-q"]),
        (run_dir / "summary.json", ["report", str(run_dir)]),
        (cmp_dir / "compare.json", ["report", str(cmp_dir)]),
        (sweep_dir / "manifest.json", ["sweep", "--show", str(sweep_dir)]),
    ]
    for (path, argv), res in zip(cases, _run_all([a for _, a in cases]), strict=True):
        assert res["code"] == 2, (argv, res)
        (line,) = res["stderr"].splitlines()
        assert line.startswith("prefillkit: error: ") and str(path) in line, line
        assert "nested too deeply" in line, line
