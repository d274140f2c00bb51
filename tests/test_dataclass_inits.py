"""The dataclasses whose ``__init__`` is written by hand (``init=False``) keep the one
``dataclass`` would generate: the parameters are the init fields, in order, with their
defaults (a ``default_factory`` field takes ``None``), and every field is set.

They are written out because the compiled build compiles a written ``__init__`` while the
generated one stays interpreted (see ``sched/buffer.py`` ``ReqShape``)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys
from typing import Any

import pytest

import prefillkit
from conftest import is_compiled
from prefillkit.request import ReqStatus, Request
from prefillkit.workloads.record import TraceRecord


def _written_inits() -> list[type]:
    out: list[type] = []
    for info in pkgutil.walk_packages(prefillkit.__path__, "prefillkit."):
        if info.name.startswith(
            ("prefillkit.exec", "prefillkit.app.sweep", "prefillkit.integrations")
        ):
            continue  # optional extras (torch, ray, sglang): nothing there is written out
        mod = importlib.import_module(info.name)
        for obj in vars(mod).values():
            if (
                isinstance(obj, type)
                and obj.__module__ == info.name
                and dataclasses.is_dataclass(obj)
                and not obj.__dataclass_params__.init  # type: ignore[attr-defined]
            ):
                out.append(obj)
    return sorted(out, key=lambda c: f"{c.__module__}.{c.__qualname__}")


WRITTEN = _written_inits()

#: Classes whose __init__ checks its values: built from real ones instead of sentinels.
REAL_ARGS: dict[type, dict[str, Any]] = {
    TraceRecord: dict(
        rid="r", arrival_s=1.5, input_len=3, output_len=2, hash_ids=(7,), block_size=4, tokens=None
    ),
}


#: Fields that are not parameters and that __init__ derives from them (their declared
#: default is a placeholder).
DERIVED: set[tuple[type, str]] = set()


def test_the_hot_classes_are_written_out() -> None:
    names = {c.__name__ for c in WRITTEN}
    hot = {"ReqShape", "TraceRecord", "MatchResult", "LoadBack", "PrefillBatch"}
    assert hot | {"ScheduledReq", "StepOutput", "CachedSplit", "BatchRecord"} <= names


@pytest.mark.parametrize("cls", WRITTEN, ids=lambda c: c.__qualname__)
def test_signature_is_the_init_fields(cls: type) -> None:
    assert "__init__" in vars(cls), f"{cls.__qualname__}: init=False but no __init__"
    if is_compiled(sys.modules[cls.__module__]):
        pytest.skip("a compiled __init__ has no signature to read; the source run checks it")
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = [f for f in dataclasses.fields(cls) if f.init]
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, p.name
        if f.default is not dataclasses.MISSING:
            assert p.default == f.default, p.name
        elif f.default_factory is not dataclasses.MISSING:
            assert p.default is None, p.name
        else:
            assert p.default is inspect.Parameter.empty, p.name


@pytest.mark.parametrize("cls", WRITTEN, ids=lambda c: c.__qualname__)
def test_every_field_is_set(cls: type) -> None:
    init = [f for f in dataclasses.fields(cls) if f.init]
    if cls not in REAL_ARGS and is_compiled(sys.modules[cls.__module__]):
        pytest.skip("a compiled __init__ checks its argument types; the source run checks it")
    args = REAL_ARGS.get(cls) or {f.name: object() for f in init}
    obj = cls(**args)
    for f in dataclasses.fields(cls):
        value = getattr(obj, f.name)  # AttributeError: __init__ left it unset
        if f.name in args and f.default_factory is dataclasses.MISSING:
            assert value == args[f.name], f.name  # NOTE: the sentinels compare by identity
        if not f.init and (cls, f.name) not in DERIVED:
            if f.default is not dataclasses.MISSING:
                assert value == f.default, f.name
            elif f.default_factory is not dataclasses.MISSING:
                assert value == f.default_factory(), f.name
    # The optional parameters left out take the field's default (or a fresh factory value).
    required = {
        f.name: args[f.name]
        for f in init
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    bare = cls(**required)
    for f in init:
        if f.default is not dataclasses.MISSING:
            assert getattr(bare, f.name) == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert getattr(bare, f.name) == f.default_factory(), f.name
            assert getattr(bare, f.name) is not getattr(cls(**required), f.name), f.name


def test_request_state_starts_as_the_generated_init_left_it() -> None:
    r = Request("r", 0.5, 129, 4, [1, 2, 3], 64)
    st = r.state
    assert st.status is ReqStatus.WAITING
    assert (st.computed_tokens, st.prefix_len, st.owned_pages, st.pending_pages) == (0, 0, [], None)
    assert (r.metrics.first_token_time, r.metrics.requeue_lost_s, r.extra) == (None, 0.0, {})
    assert (r.prompt_len, st.input_len, st.max_match_units) == (129, 129, 2)
    assert Request("s", 0.0, 10, 1, [1], 1).state.max_match_units == 1  # one token always computed


def test_trace_record_checks_and_at() -> None:
    rec = TraceRecord(**REAL_ARGS[TraceRecord])
    moved = rec.at(9.0)
    assert moved == dataclasses.replace(rec, arrival_s=9.0)
    with pytest.raises(ValueError, match="input_len must be > 0"):
        TraceRecord("r", 0.0, 0, 1, None, None, None)
