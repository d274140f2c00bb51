"""The compiled build is visible (issue 34 item 4): the modules setup.py compiles, the
modules whose first line says so, and the list in docs/design.md are the same."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROOT = Path(__file__).resolve().parents[1]
HEADER = '# Compiled by mypyc (setup.py); rules: docs/design.md, "Rules for compiled modules".'


def _setup_list() -> set[str]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMPILED":
            assert isinstance(node.value, ast.List)
            return {ast.literal_eval(e).removeprefix("src/") for e in node.value.elts}
    raise AssertionError("setup.py has no COMPILED list")


def _headed() -> set[str]:
    out = set()
    for path in sorted((ROOT / "src" / "prefillkit").rglob("*.py")):
        with open(path, encoding="utf-8") as fh:
            if fh.readline().rstrip("\n") == HEADER:
                out.add(str(path.relative_to(ROOT / "src")))
    return out


def _design_list() -> set[str]:
    text = (ROOT / "docs" / "design.md").read_text()
    body = text.split("<!-- compiled-modules: begin -->")[1].split(
        "<!-- compiled-modules: end -->"
    )[0]
    return {line.strip()[3:-1] for line in body.splitlines() if line.startswith("- `")}


def test_setup_headers_and_design_list_agree() -> None:
    compiled = _setup_list()
    assert len(compiled) > 20
    assert _headed() == compiled
    assert _design_list() == compiled


def test_every_listed_module_exists() -> None:
    for name in _setup_list():
        assert (ROOT / "src" / name).is_file(), name
