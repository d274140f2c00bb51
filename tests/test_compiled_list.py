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


def _except_names(fn: ast.AST) -> dict[str, set[str]]:
    """``except T as NAME`` bindings in ``fn`` (nested functions apart): NAME -> types."""
    out: dict[str, set[str]] = {}
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
            out.setdefault(node.name, set()).add(ast.unparse(node.type))
        todo.extend(ast.iter_child_nodes(node))
    return out


def test_a_compiled_function_binds_each_exception_name_to_one_type() -> None:
    """mypyc gives a local one type: ``except A as e`` then ``except B as e`` in one
    function fails at run time ("A object expected; got B") in the compiled build only."""
    bad = []
    for rel in sorted(_headed()):
        tree = ast.parse((ROOT / "src" / rel).read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for name, types in _except_names(fn).items():
                    if len(types) > 1:
                        bad.append(f"{rel} {fn.name}: {name} is {sorted(types)}")
    assert not bad, bad
