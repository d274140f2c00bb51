"""The validation table: every published row modelled on its shape by both forward models,
each within ±15 % or carrying its reason, and the rows' metrics computed as stated."""

from __future__ import annotations

import importlib.util

import pytest

from prefillkit.cost.published import PUBLISHED_FIGURES, PublishedFigure
from prefillkit.cost.roofline import ReqShape
from prefillkit.cost.validation import (
    BACKENDS,
    MISS_REASONS,
    TOLERANCE,
    figure_cost_model,
    modelled_figure,
    moe_balance,
)

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

HAS_AIC = importlib.util.find_spec("aiconfigurator_core") is not None
NAMES = {f.name for f in PUBLISHED_FIGURES}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fig", PUBLISHED_FIGURES, ids=lambda f: f.name)
def test_row_is_within_bound_or_carries_its_reason(fig: PublishedFigure, backend: str) -> None:
    if backend == "aic" and not HAS_AIC:
        pytest.skip("the aic extra is not installed")
    row = modelled_figure(fig, backend)
    if row.modelled is None:
        assert row.note.startswith("not modelled: ")
        assert (fig.name, backend) not in MISS_REASONS
        return
    assert row.error is not None
    if (fig.name, backend) in MISS_REASONS:
        # A recorded miss: if the model moves inside the bound, the mark must go.
        assert abs(row.error) > TOLERANCE, f"{fig.name} ({backend}) is now within: unmark it"
    else:
        assert abs(row.error) <= TOLERANCE, f"{fig.name} ({backend}): {row.error:+.1%}"


def test_every_reason_names_a_row_and_a_backend() -> None:
    for name, backend in MISS_REASONS:
        assert name in NAMES and backend in BACKENDS
    assert len(PUBLISHED_FIGURES) >= 10
    modelled = [f for f in PUBLISHED_FIGURES if modelled_figure(f).modelled is not None]
    assert len(modelled) >= 10


def _row(name: str) -> PublishedFigure:
    return next(f for f in PUBLISHED_FIGURES if f.name == name)


def test_throughput_row_by_hand() -> None:
    # DP attention 32 x EP 32, 4 prompts of 4,096 per rank and forward: tokens/s per node =
    # 4 x 4096 x 32 / forward time / 32 GPUs x 8.
    fig = _row("SGLang large-scale EP, 4K prompts (H100)")
    cm = figure_cost_model(fig)
    t = cm.forward_time([ReqShape(0, 4096)] * 4)
    assert modelled_figure(fig).modelled == pytest.approx(4 * 4096 * 32 / t / 32 * 8)


def test_long_prompt_row_sums_its_chunks() -> None:
    fig = _row("DeepSeek-V3.1 128K prompt, PP1 TP8, one H20-141G node")
    assert fig.chunk_size == 4096
    cm = figure_cost_model(fig)
    total = sum(cm.forward_time([ReqShape(i * 4096, 4096)]) for i in range(32))
    assert modelled_figure(fig).modelled == pytest.approx(total)


def test_layer_row_is_the_forward_over_the_layers() -> None:
    fig = _row("AIConfigurator GLM-5 DSA layer, CP8, 32K prompt (B200, NVFP4)")
    cm = figure_cost_model(fig)
    per_layer_ms = cm.forward_time([ReqShape(0, 32_768)]) / 78 * 1e3
    assert modelled_figure(fig).modelled == pytest.approx(per_layer_ms)


def test_pipeline_parallel_rows_are_not_modelled() -> None:
    fig = _row("Qwen3-235B-A22B-FP8 128K prompt, PP8 TP4 (32 x H20-96G)")
    row = modelled_figure(fig)
    assert row.modelled is None and "pipeline" in row.note


def test_balance_of_each_row() -> None:
    perfect = _row("SGLang large-scale EP, 4K prompts, simulated perfect EPLB (H100)")
    assert moe_balance(perfect) == "perfect"
    assert moe_balance(_row("SGLang large-scale EP, 4K prompts (H100)")) == "eplb"
    # Perfect balance: the roofline's residual skew is 1 (EPLB's is the family's 1.25).
    assert figure_cost_model(perfect).eff.moe_imbalance == 1.0  # type: ignore[attr-defined]
    assert (
        figure_cost_model(_row("SGLang large-scale EP, 4K prompts (H100)")).eff.moe_imbalance
        == 1.25
    )  # type: ignore[attr-defined]
