"""The README stays a short entry point and the reference in docs/ stays true to the code
(issue 34 item 10): the README is at most 300 lines and its "Where to read next" links
every file of docs/; docs/knobs.md's table is what ``prefillkit knobs --markdown`` prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of ``text`` (up to the next ``## ``)."""
    body = text.split(f"\n## {heading}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def test_readme_is_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_readme_links_every_docs_file() -> None:
    listed = _section(README.read_text(encoding="utf-8"), "Where to read next")
    linked = set(re.findall(r"\]\(docs/([^)#]+\.md)\)", listed))
    assert linked == {p.name for p in DOCS.glob("*.md")}


def test_knob_table_is_what_the_command_prints() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "prefillkit", "knobs", "--markdown"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed = proc.stdout.strip().splitlines()
    lines = (DOCS / "knobs.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(printed[0])
    documented = lines[start : start + len(printed) + 1]
    assert documented[:-1] == printed
    assert not documented[-1].startswith("|")  # the table ends where the command's does
