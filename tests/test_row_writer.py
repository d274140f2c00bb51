"""The CSV row files of a streaming run (records/row_writer.py): in this process or in a child,
the same bytes; failures of the child surface in the parent as an OSError."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from prefillkit.helpers import ENV, wants_helpers
from prefillkit.records import row_writer
from prefillkit.records.row_writer import (
    InlineRowFiles,
    RowWriterProcess,
    cell,
    fast_cell,
    open_row_files,
)
from prefillkit.request import ReqStatus

IMPLEMENTATIONS = {"inline": InlineRowFiles, "process": RowWriterProcess}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (True, "true"),
        (False, "false"),
        (math.nan, ""),
        (0.1, "0.1"),
        (1e-07, "1e-07"),
        (1e16, "1e+16"),
        (-0.0, "-0.0"),
        (math.inf, "inf"),
        (3, "3"),
        (-2**70, str(-2**70)),
        ("r1 r2", "r1 r2"),
        (ReqStatus.REJECTED, ReqStatus.REJECTED.value),
        ((1, 2), "(1, 2)"),
    ],
)  # fmt: skip
def test_a_cell_is_formatted_as_the_table_says(value: Any, text: str) -> None:
    assert cell(value) == text
    assert fast_cell(value) == text


def _rows(n: int) -> list[list[Any]]:
    return [[f"r{i}", i * 0.1, None if i % 3 else math.nan, i, i % 2 == 0, 'a "q", b\n']
            for i in range(n)]  # fmt: skip


def _specs(folder: Path) -> list[tuple[str, list[str]]]:
    specs = []
    for name in ("a.csv", "b.csv"):
        path = folder / name
        path.touch()
        specs.append((str(path), ["name", "x", "y", "n", "flag", "text"]))
    return specs


def _expected(rows: list[list[Any]]) -> bytes:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["name", "x", "y", "n", "flag", "text"])
    for row in rows:
        w.writerow([cell(v) for v in row])
    return buf.getvalue().encode()


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_both_writers_write_the_same_bytes_and_manifest(
    impl: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(row_writer, "FLUSH_CHARS", 4096)  # several flushes (inline only)
    files = IMPLEMENTATIONS[impl](_specs(tmp_path))
    rows = _rows(3000)
    for k in range(0, 3000, 512):
        files.write(0, rows[k : k + 512])
    files.write(1, rows[:10])
    manifests = files.finish()
    files.abandon()  # after finish: nothing happens
    for name, want_rows, manifest in zip(
        ("a.csv", "b.csv"), (rows, rows[:10]), manifests, strict=True
    ):
        data = (tmp_path / name).read_bytes()
        assert data == _expected(want_rows)
        assert manifest == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_abandoning_removes_the_files(impl: str, tmp_path: Path) -> None:
    files = IMPLEMENTATIONS[impl](_specs(tmp_path))
    files.write(0, _rows(100))
    files.abandon()
    assert list(tmp_path.iterdir()) == []
    if isinstance(files, RowWriterProcess):
        assert files.proc.returncode == 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_full_disk_is_an_oserror_in_the_parent(impl: str, tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    full = tmp_path / "full.csv"
    full.symlink_to("/dev/full")  # NOTE: abandoning removes the link, not the device
    specs[1] = (str(full), specs[1][1])
    files = IMPLEMENTATIONS[impl](specs)
    big = [["x" * 1000] * 6] * 200  # > FLUSH_CHARS a batch: each write flushes
    with pytest.raises(OSError) as info:
        for _ in range(1000):  # the child fails at its first flush; the parent sees it
            files.write(1, big)  # at a later write (the pipe breaks) or at the finish
        files.finish()
    assert info.value.errno == errno.ENOSPC
    files.abandon()
    assert not full.exists() and os.path.exists("/dev/full")
    assert not (tmp_path / "a.csv").exists()


def test_the_child_ignores_ctrl_c_so_a_stopped_run_still_commits(tmp_path: Path) -> None:
    import time

    files = RowWriterProcess(_specs(tmp_path))
    assert os.getsid(files.proc.pid) != os.getsid(0)  # a terminal's Ctrl-C misses it
    rows = _rows(50)
    files.write(0, rows)
    status = Path(f"/proc/{files.proc.pid}/status")
    deadline = time.monotonic() + 30
    while status.exists() and time.monotonic() < deadline:  # until serve() ignores it
        mask = next(ln for ln in status.read_text().splitlines() if ln.startswith("SigIgn"))
        if int(mask.split()[1], 16) & (1 << (signal.SIGINT - 1)):
            break
        time.sleep(0.01)
    os.kill(files.proc.pid, signal.SIGINT)
    files.write(0, rows)
    files.finish()
    assert (tmp_path / "a.csv").read_bytes() == _expected(rows + rows)


def test_a_dead_child_is_an_oserror_naming_it(tmp_path: Path) -> None:
    files = RowWriterProcess(_specs(tmp_path))
    files.proc.kill()
    files.proc.wait()
    with pytest.raises(OSError, match="the CSV writer process failed: exited with code -9"):
        for _ in range(100):
            files.write(0, _rows(500))
        files.finish()
    files.abandon()


@pytest.mark.parametrize(
    ("value", "cores", "process"),
    [("inline", 8, False), ("process", 1, True), ("auto", 1, False), ("auto", 2, True),
     ("", 4, True), (None, 1, False)],
)  # fmt: skip
def test_the_choice_of_writer(
    value: str | None, cores: int, process: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert wants_helpers() is process


def test_an_unknown_choice_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from prefillkit.cli import run

    monkeypatch.setenv(ENV, "threads")
    with pytest.raises(ValueError, match="PREFILLKIT_HELPERS='threads': expected one of"):
        open_row_files(_specs(tmp_path))
    code = run(["replay", "--max-requests", "3", "--out", str(tmp_path / "o"), "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "prefillkit: error: PREFILLKIT_HELPERS='threads': expected one of " \
        "auto, inline, process\n"  # fmt: skip
    assert not (tmp_path / "o").exists()  # created by the run, left empty: removed


def test_a_replay_writes_the_same_files_with_either_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefillkit.cli import run

    for choice in ("inline", "process"):
        monkeypatch.setenv(ENV, choice)
        out = tmp_path / choice / "run"  # NOTE: the same run name in summary.json
        assert run(["replay", "--max-requests", "1500", "--out", str(out), "-q"]) == 0
    for name in ("requests.csv", "batches.csv", "summary.json"):
        a, b = (tmp_path / choice / "run" / name for choice in ("inline", "process"))
        assert a.read_bytes() == b.read_bytes(), name
    doc = json.loads((tmp_path / "process" / "run" / "summary.json").read_text())
    assert doc["metrics"]["requests"] > 200
