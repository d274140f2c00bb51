"""The example engine (examples/embed_engine.py) runs and its checks hold."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embed_engine.py"


def test_embed_engine_example_runs() -> None:
    mod = runpy.run_path(str(EXAMPLE))
    for seed in range(5):
        mod["main"](n_requests=60, seed=seed)
