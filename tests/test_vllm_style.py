"""The vLLM engine style (--engine-style vllm, sim/vllm_style.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import make_req
from prefillkit.app.settings import Config
from prefillkit.sched.buffer import ReqShape
from prefillkit.sim.engine import simulate
from prefillkit.sim.vllm_style import decode_shapes
from test_cli import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parent.parent
QWEN = str(ROOT / "examples" / "fleets" / "qwen3-32b.json")
VLLM_LIKE = {
    "mode": "colocated",
    "model_config": QWEN,
    "gpu": "h100",
    "tp_size": 2,
    "page_size": 16,
    "chunked_prefill_size": 8192,
    "max_prefill_tokens": 8192,
    "max_running_requests": 256,
}


def test_decode_shapes_at_one_hand_computed_point() -> None:
    assert decode_shapes(0, 0) == []
    # 3 requests decoding over 3,000 context tokens: three extend-1 requests of 1,000
    assert decode_shapes(3, 3000) == [ReqShape(1000, 1, 0)] * 3


def finish_of_the_decoder(style: str) -> tuple[float, float]:
    """A short request decodes 64 tokens while a 40 K-token prompt prefills in 8 K
    chunks right behind it: (the short one's finish, the long one's first token)."""
    settings = Config(engine_style=style, **VLLM_LIKE).sim_settings()  # type: ignore[arg-type]
    short = make_req("short", 512, 16, max_new=64, arrival=0.0)
    long = make_req("long", 40_960, 16, max_new=4, arrival=0.001)
    simulate(settings, [short, long])
    assert short.metrics.finish_time is not None and long.metrics.first_token_time is not None
    return short.metrics.finish_time, long.metrics.first_token_time


def test_vllm_style_decodes_while_a_long_prompt_prefills() -> None:
    sg_finish, sg_first = finish_of_the_decoder("sglang")
    vl_finish, vl_first = finish_of_the_decoder("vllm")
    # SGLang's loop runs the five 8 K chunks first, the short request's decode waits;
    # vLLM's forwards carry its decode token, so it finishes sooner ...
    assert vl_finish < sg_finish
    # ... and the long prompt's chunks pay for the riders (a little later, never sooner)
    assert vl_first >= sg_first


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--engine-style", "vllm"], "--mode colocated"),
        (["--engine-style", "tgi"], "--engine-style"),
    ],
)
def test_bad_engine_style_is_one_line(flags: list[str], needle: str) -> None:
    assert_one_line_error(run_cli("replay", "--max-requests", "3", *flags), needle)


def test_vllm_style_refuses_sglang_only_features() -> None:
    with pytest.raises(Exception, match="--enable-hierarchical-cache"):
        Config(engine_style="vllm", enable_hierarchical_cache=True, **VLLM_LIKE).sim_settings()  # type: ignore[arg-type]
