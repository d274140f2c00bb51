"""The example engine (examples/embed_engine.py) runs, its checks hold, and they can fail."""

from __future__ import annotations

import runpy
from array import array
from pathlib import Path

import pytest

import prefillkit.cache.pages
from conftest import patches
from prefillkit.cache.pages import IdStack

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embed_engine.py"


def test_embed_engine_example_runs() -> None:
    mod = runpy.run_path(str(EXAMPLE))
    for seed in range(5):
        mod["main"](n_requests=60, seed=seed)


@patches(prefillkit.cache.pages)
def test_embed_engine_catches_a_page_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    def leaky_take(self: IdStack, n: int) -> array:  # hands out ids without taking them
        if self.top < n:
            self._grow(n - self.top)
        return self.ids[self.top - n : self.top]

    monkeypatch.setattr(IdStack, "take", leaky_take)
    mod = runpy.run_path(str(EXAMPLE))
    with pytest.raises(AssertionError):
        mod["main"](n_requests=60, seed=0)
