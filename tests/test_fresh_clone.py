"""Issue 19 item 6: a fresh clone just works (bundled trace slice, skip reasons, progress)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from prefillkit.app.progress import CountColumn, count_text
from prefillkit.workloads.bundled import BUNDLED_TRACES, bundled_trace_path, resolve_trace

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
FULL_SKIP = "full traces not present: run from a checkout beside ../shared/traces, see README"


def test_bundled_slice_is_small_with_its_source_note() -> None:
    path = Path(bundled_trace_path("mooncake-slice"))
    assert path.is_file() and path.stat().st_size < 1_000_000
    lines = path.read_text().splitlines()
    assert 200 <= len(lines) <= 1000
    for line in lines:
        row = json.loads(line)
        assert set(row) == {"timestamp", "input_length", "output_length", "hash_ids"}
    note = (path.parent / "SOURCE.md").read_text()
    for text in ("kvcache-ai/Mooncake", "Apache", "conversation_trace.jsonl", str(len(lines))):
        assert text in note
    # Shipped: package data of the wheel.
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "data/*.jsonl" in data["package-data"]["prefillkit"]
    assert "data/*.md" in data["package-data"]["prefillkit"]


@pytest.mark.skipif(not FULL.exists(), reason=FULL_SKIP)
def test_slice_is_the_head_of_the_full_trace() -> None:
    sliced = Path(bundled_trace_path("mooncake-slice")).read_bytes()
    with FULL.open("rb") as fh:
        head = fh.read(len(sliced))
    assert head == sliced


def test_resolve_trace() -> None:
    assert set(BUNDLED_TRACES) == {"mooncake-slice"}
    assert resolve_trace("mooncake-slice") == bundled_trace_path("mooncake-slice")
    assert resolve_trace("some/file.jsonl") == "some/file.jsonl"


def test_readme_trace_command_works_from_any_folder(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "prefillkit.cli", "replay", "--trace", "mooncake-slice",
         "--spread-buckets", "--json", "-q", "--model-path", "zai-org/GLM-5-FP8", "--tp", "8",
         "--page-size", "64", "--cp-size", "8", "--enable-cp-shared-kv",
         "--chunked-prefill-size", "16384", "--enable-hierarchical-cache",
         "--disaggregation-mode", "prefill"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["workload"]["source"] == "mooncake:mooncake-slice"
    assert doc["metrics"]["completed"] == doc["workload"]["requests"] == 600


def _readme_set_up_commands() -> list[str]:
    """The fenced commands of the README's "## Set-up" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Set-up\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```\n(.*?)```", section, re.DOTALL)]


def test_readme_set_up_commands(tmp_path: Path) -> None:
    """Exactly two: the main job, whose run part works from any folder after the install,
    and the test command, which .ci/run runs as written (its pip and pytest as modules)."""
    main_job, tests = _readme_set_up_commands()
    install, run = main_job.split(" && ")
    assert install == "pip install ."
    program, *args = run.split()
    assert program == "prefillkit"
    proc = subprocess.run(
        [sys.executable, "-m", "prefillkit", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "replaying requests from generator:agentic" in proc.stderr
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    as_run = [line for line in ci if "pip install" in line and "pytest" in line]
    as_written = [
        line.replace("python3 -m pip", "pip").replace("python3", "python") for line in as_run
    ]
    assert as_written == [tests]


def test_a_file_of_that_name_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mooncake-slice").write_text("")
    monkeypatch.chdir(tmp_path)
    assert resolve_trace("mooncake-slice") == "mooncake-slice"


def test_full_trace_skips_say_how_to_run_them() -> None:
    old = "shared traces " + "not present"  # the silent reason of before
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name == "test_fresh_clone.py":
            continue
        text = path.read_text()
        assert old not in text, path.name
        if "shared" in text and "traces" in text and "skip" in text:
            assert "see README" in text or "mooncake-slice" in text, path.name


def test_progress_counts_are_labelled() -> None:
    assert count_text("requests finished", 417, 12031) == "requests finished 417 / 12,031"
    assert count_text("points settled", 3, None) == "points settled 3"
    from rich.console import Console
    from rich.progress import Progress

    console = Console(record=True, width=120, force_terminal=False)
    with Progress(CountColumn("requests finished"), console=console, auto_refresh=False) as bar:
        task = bar.add_task("replay", total=12031)
        bar.update(task, completed=4170)
        bar.refresh()
    assert "requests finished 4,170 / 12,031" in console.export_text()
