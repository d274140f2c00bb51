"""Outputs are written safely (issue 33 item 1): prefillkit.outfile, per kind of target.

Device nodes are made privately in tmp_path with ``mknod`` (root only; CI runs as root),
so no test ever writes to the machine's own ``/dev`` entries.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from cli_support import cli, error_line
from prefillkit.outfile import OutputFile, write_bytes, write_text

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

NULL, FULL = os.makedev(1, 3), os.makedev(1, 7)  # Linux: /dev/null and /dev/full


def _device(tmp_path: Path, name: str, dev: int) -> Path:
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip("making a device node needs root on Linux")
    path = tmp_path / name
    os.mknod(path, stat.S_IFCHR | 0o666, dev)
    return path


def _is_char_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_new_and_regular_files_are_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    write_text(target, "one\n")
    assert target.read_text() == "one\n"
    write_text(target, "two\n")
    assert target.read_text() == "two\n"
    out = OutputFile(target)
    out.fh.write("half")
    out.discard()  # a failed write: the old file stays, no temporary is left
    assert target.read_text() == "two\n" and _leftovers(tmp_path) == []


def test_symlink_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_bytes(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_in_place_open_neither_truncates_nor_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    flags: list[int] = []
    real_open = os.open

    def spy(path: str, flag: int, mode: int = 0o777) -> int:
        flags.append(flag)
        return real_open(path, flag, mode)

    monkeypatch.setattr("prefillkit.outfile.os.open", spy)
    reader = threading.Thread(target=fifo.read_bytes)
    reader.start()
    write_bytes(fifo, b"x")
    reader.join(timeout=10)
    assert flags and not flags[0] & (os.O_TRUNC | os.O_CREAT)


def test_null_device_is_written_in_place(tmp_path: Path) -> None:
    null = _device(tmp_path, "null", NULL)
    write_text(null, "x" * 100_000)
    assert _is_char_device(null) and _leftovers(tmp_path) == []


def test_full_device_error_names_the_path(tmp_path: Path) -> None:
    full = _device(tmp_path, "full", FULL)
    with pytest.raises(OSError) as info:
        write_text(full, "x" * 100_000)
    assert info.value.filename == str(full) and "No space left" in str(info.value)
    assert _is_char_device(full)


def test_folder_and_socket_are_refused(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as info:
        write_text(tmp_path, "x")
    assert info.value.filename == str(tmp_path)
    import socket

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(OSError, match="socket: refused") as info2:
            write_text(sock_path, "x")
    assert info2.value.filename == str(sock_path)


def test_missing_parent_names_the_path(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "file.txt"
    with pytest.raises(FileNotFoundError) as info:
        write_text(target, "x")
    assert info.value.filename == str(target)


# ------------------------------------------------------------------ end to end

SMALL = ("--trace", "mooncake-slice", "--max-requests", "30", "-q")


def test_trace_events_to_a_device_keeps_the_device(tmp_path: Path) -> None:
    null = _device(tmp_path, "null", NULL)
    proc = cli("replay", *SMALL, "--trace-events", null)
    assert proc.returncode == 0, proc.stderr
    assert _is_char_device(null) and _leftovers(tmp_path) == []
    full = _device(tmp_path, "full", FULL)
    line = error_line(cli("replay", *SMALL, "--trace-events", full))
    assert str(full) in line and "No space left" in line
    assert _is_char_device(full) and _leftovers(tmp_path) == []


def test_trace_events_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "events.json"
    link.symlink_to(real)
    proc = cli("replay", *SMALL, "--trace-events", link)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and real.read_text().startswith('{"traceEvents":[')


def test_generate_into_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    proc = cli(
        "generate",
        "--generator",
        "gsp",
        "--gsp-num-groups",
        "4",
        "--gsp-prompts-per-group",
        "5",
        "-o",
        fifo,
        "-q",
    )
    reader.join(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(got[0].splitlines()) == 20


def test_generate_onto_full_device_names_it(tmp_path: Path) -> None:
    full = _device(tmp_path, "full", FULL)
    line = error_line(cli("generate", "--generator", "gsp", "-o", full))
    assert str(full) in line and "No space left" in line
    assert _is_char_device(full)


def test_out_folder_entry_that_is_a_link_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("keep")
    (out / "summary.json").symlink_to(elsewhere)
    line = error_line(cli("replay", *SMALL, "--out", out))
    assert "summary.json" in line and "not a regular file" in line
    assert elsewhere.read_text() == "keep"
