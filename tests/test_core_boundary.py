"""The layers import one way, and the scheduler core is embeddable.

Layers, lowest first (README "Layout"); a module may import its own layer and the
layers below it, never one above:

1. core: ``request``, ``models``, ``text``, ``helpers``, ``outfile``, ``cache/``, ``sched/``
   (standard library and xxhash only);
2. ``cost/`` (forward-time models, GPU presets, the deployment they price),
   ``workloads/`` (trace readers, generators) and ``exec/`` (the optional executor): each
   on the core only, not on one another;
3. ``records/``: what a run keeps and writes (collector, steady windows, SLO, CSV rows,
   timeline, outputs), on the core and ``cost/``;
4. ``sim/``: the event loop, on everything below;
5. ``report/``: run directories read back, comparisons, plots;
6. ``app/``: the user-facing settings (TOML + SGLang flags), replay and compare;
7. ``cli``: the click commands.

Every import counts, including one inside a function.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

SRC = Path(__file__).resolve().parents[1] / "src" / "prefillkit"

#: The subprocesses import this checkout's package, not an installed one.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(SRC.parent), os.environ.get("PYTHONPATH", "")]),
}

CORE_TOP = ("request", "models", "text", "helpers", "outfile")
CORE_PACKAGES = ("cache", "sched")

#: Layer of each top-level part of the package (a module or a subpackage).
LAYERS: dict[str, int] = {
    **{name: 1 for name in (*CORE_TOP, *CORE_PACKAGES)},
    "cost": 2,
    "workloads": 2,
    "exec": 2,
    "records": 3,
    "sim": 4,
    "report": 5,
    "integrations": 5,  # engines embedding the core (SGLang); imported lazily by app
    "app": 6,
    "cli": 7,
    "__main__": 7,
}


def _core_modules() -> tuple[str, ...]:
    """Every module of the core (cache/, sched/, request.py and the leaf modules)."""
    names = [f"prefillkit.{m}" for m in CORE_TOP]
    for package in CORE_PACKAGES:
        for path in sorted((SRC / package).glob("*.py")):
            stem = path.stem
            names.append(f"prefillkit.{package}" + ("" if stem == "__init__" else f".{stem}"))
    return tuple(names)


CORE = _core_modules()
FORBIDDEN = (
    "numpy",
    "click",
    "rich",
    "matplotlib",
    "torch",
    "prefillkit.sim",
    "prefillkit.cost",
    "prefillkit.records",
    "prefillkit.cli",
    "prefillkit.workloads",
    "prefillkit.report",
    "prefillkit.app",
    "prefillkit.exec",
)


def _part(module: str) -> str | None:
    """The top-level part of ``prefillkit.X.Y`` (``X``), None for other packages."""
    bits = module.split(".")
    if bits[0] != "prefillkit":
        return None
    return bits[1] if len(bits) > 1 else ""


def _imports(path: Path) -> set[str]:
    """Every ``prefillkit...`` module ``path`` imports, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("prefillkit")}


def _violations() -> list[str]:
    bad: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        own = rel.parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        layer = LAYERS[own]
        for module in sorted(_imports(path)):
            part = _part(module)
            if not part or part == own or part not in LAYERS:
                continue
            other = LAYERS[part]
            if other > layer or (other == layer == 2):  # cost, workloads, exec: siblings
                bad.append(f"{rel} (layer {layer}) imports {module} (layer {other})")
    return bad


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {
        p.name.removesuffix(".py")
        for p in SRC.iterdir()
        if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").exists())
    }
    assert parts <= set(LAYERS), parts - set(LAYERS)


def test_layers_import_downwards_only() -> None:
    assert _violations() == []


def test_the_layer_check_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from prefillkit.app.settings import Config\n")
    assert "prefillkit.app.settings" in _imports(bad)
    assert LAYERS["app"] > LAYERS["sim"]


def test_core_list_covers_every_core_module() -> None:
    assert {
        "prefillkit.sched.scheduler",
        "prefillkit.sched.config",
        "prefillkit.sched.cp_split",
        "prefillkit.cache.pool",
    } <= set(CORE)


def test_core_imports_only_stdlib_and_xxhash() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}"
        + f" or any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r})]\n"
        + "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV
    )
    assert out.stdout.strip() == ""


def test_simulator_loads_no_application_layer() -> None:
    code = (
        "import sys\n"
        "import prefillkit.sim.engine, prefillkit.records.output, prefillkit.cost.validation\n"
        "import prefillkit.cost.deployment, prefillkit.cost.fit\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith(('prefillkit.app', "
        "'prefillkit.cli', 'prefillkit.report', 'prefillkit.workloads', 'click')))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV
    )
    assert out.stdout.strip() == ""


def test_only_the_scheduler_choice_imports_integrations_and_lazily() -> None:
    # An engine integration (SGLang) loads only when a run asks for it (--scheduler):
    # app/scheduler_choice.py is its one importer outside integrations/, inside functions.
    allowed = Path("app") / "scheduler_choice.py"
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "integrations":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n.startswith("prefillkit.integrations") for n in names):
                assert rel == allowed, f"{rel} imports {names}"
                assert id(node) not in top, f"{rel}: a module-level import of {names}"
