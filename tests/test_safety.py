"""Safety of what prefillkit reads and writes.

- No code path can execute user input: ``src/`` uses no ``eval``/``exec``/``compile``,
  no ``marshal``/``shelve`` and no ``yaml.load``; configs are read with ``tomllib`` and
  traces with ``json``/``csv`` only. ``pickle`` appears only where a replay talks to its
  own helper processes over private pipes (:data:`PICKLE_OK`), on values it built itself,
  and never reads a file.
- Outputs are never half-written: every ``--out`` file is written to a temporary file
  and renamed over the target, so a failure (or an interrupt) in the middle of a write
  leaves the previous file whole and no temporary file behind.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import prefillkit.records.output as output
from prefillkit.app.settings import Config, describe
from prefillkit.cli import run
from prefillkit.records.file_set import atomic_write_text
from prefillkit.records.output import (
    BATCHES_FILE,
    REQUESTS_FILE,
    SUMMARY_FILE,
    summary_document,
    write_run,
)
from prefillkit.request import Request
from prefillkit.sim.engine import SimResult

SRC = Path(__file__).resolve().parents[1] / "src" / "prefillkit"

# --------------------------------------------------------------------------- no eval

#: Constructs that can run or unpickle arbitrary code, and the parsers that allow it.
FORBIDDEN: dict[str, re.Pattern[str]] = {
    "eval(": re.compile(r"\beval\s*\("),
    "exec(": re.compile(r"\bexec\s*\("),
    "compile( (builtin)": re.compile(r"(?<![.\w])compile\s*\("),
    "__import__": re.compile(r"__import__"),
    "pickle": re.compile(r"pickle", re.IGNORECASE),
    "marshal": re.compile(r"\bmarshal\b"),
    "shelve": re.compile(r"\bshelve\b"),
    "dill": re.compile(r"\bdill\b"),
    "yaml.load": re.compile(r"yaml\.(load|unsafe_load|full_load)\b"),
    "import yaml": re.compile(r"^\s*(import|from)\s+yaml\b", re.MULTILINE),
}


#: The modules that pickle: the rows a replay sends to its CSV writer process and the
#: requests its workload process sends back, each over a pipe between the two.
PICKLE_OK = {"records/row_writer.py", "app/prefetch.py"}


def test_src_has_no_code_execution_or_unsafe_deserialisation() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 20
    hits: list[str] = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(SRC).as_posix()
        if rel in PICKLE_OK:  # bytes from the pipe only: no pickle.load of a file
            assert re.findall(r"pickle\.(\w+)\(", text), rel
            assert set(re.findall(r"pickle\.(\w+)\(", text)) <= {"dumps", "loads"}, rel
        for what, pattern in FORBIDDEN.items():
            if what == "pickle" and rel in PICKLE_OK:
                continue
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(SRC)}:{line}: {what}")
    assert hits == []


def test_the_grep_would_catch_them() -> None:
    """The patterns are live: each matches its construct and ``re.compile`` is allowed."""
    samples = {
        "eval(": "x = eval(text)",
        "exec(": "exec (code)",
        "compile( (builtin)": "code = compile(src, 'f', 'exec')",
        "__import__": "m = __import__(name)",
        "pickle": "import cPickle",
        "marshal": "import marshal",
        "shelve": "import shelve",
        "dill": "import dill",
        "yaml.load": "yaml.load(stream)",
        "import yaml": "from yaml import load",
    }
    for what, sample in samples.items():
        assert FORBIDDEN[what].search(sample), what
    assert not FORBIDDEN["compile( (builtin)"].search("_NAME = re.compile(r'x')")
    assert not FORBIDDEN["eval("].search("retrieval(x)")


def test_parsers_are_tomllib_json_and_csv() -> None:
    """Config and trace readers import only safe standard-library parsers."""
    readers = {
        "app/config_file.py": {"tomllib"},  # the one config/variants TOML reader
        "workloads/jsonl.py": {"json"},
        "workloads/json_row.py": {"json"},
        "workloads/azure.py": {"csv"},
    }
    toml_readers = {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if re.search(r"^import tomllib$", p.read_text(encoding="utf-8"), re.MULTILINE)
    }
    # Config (and variants) files are read in one place; the sweep's grid files and the
    # cost-model presets are their own formats.
    assert toml_readers == {"app/config_file.py", "app/sweep/grid.py", "cost/fit.py"}
    for rel, parsers in readers.items():
        text = (SRC / rel).read_text(encoding="utf-8")
        for parser in parsers:
            assert re.search(rf"^import {parser}$", text, re.MULTILINE), (rel, parser)
        assert "yaml" not in text and "pickle" not in text, rel


# --------------------------------------------------------------------------- atomic writes


def _leftovers(folder: Path) -> list[str]:
    """Temporary files of ``atomic_write_text`` (``.NAME.PID.HEX.tmp``) in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    atomic_write_text(target, "first\n")
    atomic_write_text(target, "second, longer content\n")
    assert target.read_text() == "second, longer content\n"
    assert _leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_failure_mid_write_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException, where: str
) -> None:
    """The write fails after the new text reached the temporary file (fsync: disk full,
    or Ctrl-C) or at the rename: the old file is untouched and the temporary is gone."""
    target = tmp_path / "requests.csv"
    atomic_write_text(target, "old,complete\n1,2\n")
    seen: list[str] = []

    def fail(*args: Any) -> None:
        tmp = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(tmp) == 1  # the new text is in the temporary file, not the target
        seen.append(tmp[0].read_text() if where == "replace" else tmp[0].name)
        raise exc

    monkeypatch.setattr(output.os, where, fail)
    with pytest.raises(type(exc)):
        atomic_write_text(target, "new,partial\n" * 1000)
    assert seen
    monkeypatch.undo()
    assert target.read_text() == "old,complete\n1,2\n"
    assert _leftovers(tmp_path) == []


def _result(n: int) -> SimResult:
    """A minimal ``SimResult`` of ``n`` unfinished requests (what write_run reads)."""
    return SimResult(
        requests=[Request(f"r{i}", float(i), 10 + i, 1, [], 1) for i in range(n)],
        batches=[],
        summary={"requests": n, "wall_time_s": 0.1},
        deployment={"total_pages": 1},
    )


def _write(folder: Path, n: int) -> None:
    result = _result(n)
    doc = summary_document(result, name="t", config=describe(Config()), workload={"source": "x"})
    write_run(result, folder, doc)


def test_write_run_failing_mid_set_is_refused_by_readers_never_mixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are a set: when writing fails after the first CSV is in place, the old
    summary is already gone, so no reader takes the new requests.csv beside the old
    batches.csv for a run; the folder is refused by name and no temporary is left."""
    from prefillkit.report.rundir import load_run

    out = tmp_path / "run"
    _write(out, 3)
    load_run(out)  # the complete previous set reads back
    real_replace: Callable[..., None] = os.replace

    def replace(src: str, dst: str | os.PathLike[str]) -> None:
        if Path(dst).name == BATCHES_FILE:
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(output.os, "replace", replace)
    with pytest.raises(OSError):
        _write(out, 7)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"missing summary\.json"):
        load_run(out)
    assert _leftovers(out) == []


def test_a_changed_csv_is_refused_by_the_manifest(tmp_path: Path) -> None:
    from prefillkit.report.rundir import load_run

    out = tmp_path / "run"
    _write(out, 3)
    _write(tmp_path / "other", 7)
    os.replace(tmp_path / "other" / REQUESTS_FILE, out / REQUESTS_FILE)  # a mix of two runs
    with pytest.raises(ValueError, match=r"incomplete run directory \(requests.csv does not"):
        load_run(out)


def test_sigint_while_writing_is_delivered_after_the_set_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from prefillkit.report.rundir import load_run

    out = tmp_path / "run"
    _write(out, 3)
    real_replace: Callable[..., None] = os.replace
    sent = []

    def replace(src: str, dst: str | os.PathLike[str]) -> None:
        if not sent:  # Ctrl-C the moment the first file goes into place
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        real_replace(src, dst)

    monkeypatch.setattr(output.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        _write(out, 7)
    monkeypatch.undo()
    run_data = load_run(out)  # complete and consistent: the new set
    assert run_data.num_requests == 7
    assert _leftovers(out) == []


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    dead = out / f".{REQUESTS_FILE}.99999999.deadbeef.tmp"  # pid beyond pid_max
    dead.write_text("half a file")
    mine = out / f".{REQUESTS_FILE}.{os.getpid()}.cafe.tmp"  # a live writer's: kept
    mine.write_text("in progress")
    unrelated = out / ".notes.txt.1.ab.tmp"
    unrelated.write_text("not ours")
    _write(out, 3)
    assert not dead.exists() and mine.exists() and unrelated.exists()


def test_a_target_that_is_a_folder_is_refused_before_writing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / SUMMARY_FILE).mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as info:
        _write(out, 3)
    assert info.value.filename == str(out / SUMMARY_FILE)
    assert not (out / REQUESTS_FILE).exists() and _leftovers(out) == []


def test_cli_out_leaves_no_temporary_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    for _ in range(2):  # a fresh folder, then over the previous run
        code = run(["replay", "--max-requests", "20", "--quiet", "--json", "--out", str(out)])
        assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [SUMMARY_FILE, REQUESTS_FILE, BATCHES_FILE]
    )
    doc = json.loads((out / SUMMARY_FILE).read_text())
    assert doc["partial"] is False and doc["metrics"]["requests"] == 20


def test_cli_write_failure_is_one_line_and_keeps_previous_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A disk error while writing --out: exit 2 with one error line naming --out; the
    previous run's files are intact and no temporary file is left."""
    monkeypatch.delenv("PREFILLKIT_DEBUG", raising=False)
    out = tmp_path / "run"
    assert run(["replay", "--max-requests", "10", "--quiet", "--json", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()

    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.os, "fsync", full)
    code = run(["replay", "--max-requests", "30", "--quiet", "--json", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith(f"prefillkit: error: --out {out}: cannot write results")
    assert "No space left on device" in lines[0]
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert _leftovers(out) == []
