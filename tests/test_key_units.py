"""The one-key-unit rule (request.py) and its three callers: a trace (one line
naming the file), a list handed to the engine, a stream as it arrives."""

from __future__ import annotations

import pytest

from prefillkit.app.settings import Config
from prefillkit.request import KeyUnitCheck, KeyUnitError, Request
from prefillkit.sim.engine import Engine, SimConfigError


def req(rid: str, key_tokens: int, keys: int = 2, t: float = 0.0) -> Request:
    return Request(rid, t, key_tokens * keys + 1, 4, list(range(keys)), key_tokens)


@pytest.mark.parametrize(
    ("units", "expected", "unit", "error"),
    [
        ([], None, None, None),  # nothing seen
        ([64, 64], None, 64, None),
        ([(64, 0), 512], None, 512, None),  # a request without keys does not count
        ([64, 512], None, None, "request 'r1' has key units of 512 tokens but request 'r0' has 64"),
        ([512], 64, None, "request 'r0' has key units of 512 tokens but the run's key unit is 64"),
        ([64], 64, 64, None),
    ],
)
def test_key_unit_check_table(
    units: list[int | tuple[int, int]], expected: int | None, unit: int | None, error: str | None
) -> None:
    check = KeyUnitCheck(expected)
    reqs = [req(f"r{i}", *(u if isinstance(u, tuple) else (u,))) for i, u in enumerate(units)]
    if error is None:
        assert check.check_all(reqs).unit == unit
    else:
        with pytest.raises(KeyUnitError) as exc:
            check.check_all(reqs)
        assert str(exc.value) == error


def test_the_engine_refuses_two_units_in_a_list_and_in_a_stream() -> None:
    cfg = Config(tp_size=8, page_size=64).sim_settings()
    two = [req("a", 64, t=0.0), req("b", 512, t=1.0)]
    message = "request 'b' has key units of 512 tokens but request 'a' has 64"
    with pytest.raises(SimConfigError, match=message):
        Engine(cfg, list(two))
    with pytest.raises(SimConfigError, match="request 'b' has key units of 512 tokens but"):
        Engine(cfg, iter(two)).run()
