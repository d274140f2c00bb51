"""The request's three parts (request.py): each field declared once, where it is set in
``__init__`` (``__slots__`` names exactly those), and the request's own fields never
assigned after construction."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import prefillkit
from prefillkit.request import ReqMetrics, ReqState, Request

# NOTE: these read the source (a compiled class has no __slots__ or signature to read).
pytestmark = pytest.mark.interpreted

SRC = Path(prefillkit.__file__).parent
SOURCE = Path(__file__).parents[1] / "src" / "prefillkit" / "request.py"

#: Set once, by Request.__init__ (the immutable part).
IDENTITY = (
    "rid",
    "arrival_time",
    "prompt_len",
    "max_new_tokens",
    "keys",
    "key_tokens",
    "priority",
    "ignore_eos",
    "extra",
    "state",
    "metrics",
)


def _init_assigned(cls_name: str) -> list[str]:
    """Attributes ``self.X`` assigned in ``cls_name.__init__`` of request.py, in order."""
    tree = ast.parse(SOURCE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    out: list[str] = []
    for node in ast.walk(init):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                if t.value.id == "self":
                    out.append(t.attr)
    return out


@pytest.mark.parametrize("cls", [Request, ReqState, ReqMetrics], ids=lambda c: c.__name__)
def test_each_field_is_declared_once_in_init_and_slots_name_them(cls: type) -> None:
    assigned = _init_assigned(cls.__name__)
    assert len(assigned) == len(set(assigned)), assigned
    assert sorted(assigned) == sorted(cls.__slots__)
    # NOTE: a field has one declaration (its annotated assignment), not a class-level one too.
    assert not getattr(cls, "__annotations__", {}), cls.__annotations__


def test_the_three_parts_share_no_field() -> None:
    parts = [set(_init_assigned(c)) for c in ("Request", "ReqState", "ReqMetrics")]
    assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
    assert set(IDENTITY) == parts[0]


def test_no_code_assigns_a_requests_own_fields() -> None:
    """Outside a class's own ``__init__`` (``self.X = ...``), nothing stores to a name of
    the request's immutable part (``req.rid = ...`` would change what a request is). The
    one exception: a closed-loop session turn's arrival time is set when its predecessor
    answers, before the turn arrives (sim/closed_loop.py)."""
    bad: list[str] = []
    # NOTE: cache nodes own a ``keys`` field they split; ``state`` / ``metrics`` are
    # common names (a generator's bit_generator.state).
    names = set(IDENTITY) - {"keys", "state", "metrics"}
    allowed = {("sim/closed_loop.py", "arrival_time")}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                where = (str(path.relative_to(SRC)), node.attr)
                if (
                    node.attr in names
                    and where not in allowed
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")
                ):
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno} .{node.attr}")
    assert not bad, bad


def test_a_request_is_built_from_what_it_is() -> None:
    params = list(inspect.signature(Request.__init__).parameters)[1:]
    assert params == [
        "rid",
        "arrival_time",
        "input_len",
        "max_new_tokens",
        "keys",
        "key_tokens",
        "priority",
        "ignore_eos",
        "extra",
    ]
