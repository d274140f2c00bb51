"""One writer per --out folder (issue 33 item 4): replay, compare and sweep lock it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cli_support import cli, error_line
from prefillkit.app.out_folder import OutFolder
from prefillkit.app.replay import InputError

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted


def _one_line(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert needle in error_line(proc)


SMALL = ("--trace", "mooncake-slice", "--max-requests", "40", "-q")


@pytest.mark.parametrize(
    "command",
    [
        ("replay", *SMALL),
        ("compare", *SMALL, "--variant", "a:--schedule-policy fcfs", "--variant", "b:"),
    ],
    ids=["replay", "compare"],
)
def test_second_writer_is_refused(tmp_path: Path, command: tuple[str, ...]) -> None:
    out = tmp_path / "out"
    with OutFolder.claim(out):  # another run holds the folder (a lock of this process)
        proc = cli(*command, "--out", out)
        _one_line(proc, f"--out {out}: another prefillkit run is writing this folder")
        assert not any(out.iterdir())  # nothing of the refused run landed
    proc = cli(*command, "--out", out)  # the holder is gone: the same command runs
    assert proc.returncode == 0, proc.stderr
    assert (out / ("summary.json" if command[0] == "replay" else "compare.json")).is_file()


def test_sweep_and_replay_share_the_lock(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from prefillkit.app.sweep import SweepError
    from prefillkit.app.sweep.store import Store

    out = tmp_path / "sweep"
    store = Store.open(out)
    try:
        with pytest.raises(SweepError, match="another prefillkit run is writing"):
            Store.open(out)
        _one_line(cli("replay", *SMALL, "--out", out), "another prefillkit run")
    finally:
        store.close()
    Store.open(out).close()  # released: opens again


def test_claim_creates_and_release_removes_only_an_empty_new_folder(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "b"
    OutFolder.claim(fresh).release()
    assert not fresh.exists()  # created by the claim, still empty: removed
    kept = tmp_path / "kept"
    with OutFolder.claim(kept):
        (kept / "summary.json").write_text("{}")
    assert (kept / "summary.json").is_file()
    existing = tmp_path / "existing"
    existing.mkdir()
    OutFolder.claim(existing).release()
    assert existing.is_dir()  # the user's folder stays, empty or not


def test_claim_on_a_file_names_it(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(InputError, match=f"--out {target}: cannot create folder"):
        OutFolder.claim(target)


def test_failed_run_leaves_no_empty_folder(tmp_path: Path) -> None:
    out = tmp_path / "never"
    # accepted by the flag parser, refused when the deployment is built (after the claim)
    proc = cli("replay", *SMALL, "--out", out, "--model", "deepseek-v3", "--tp", "1")
    assert proc.returncode == 2, proc.stderr
    assert not out.exists(), list(out.iterdir())
