"""The published prefill figures: every row well-formed, with its shape's GPU count rule."""

from __future__ import annotations

import math

import pytest

from prefillkit.cost.gpus import GPUS
from prefillkit.cost.published import METRICS, PUBLISHED_FIGURES, PublishedFigure
from prefillkit.models import MODELS

#: The subject is interpreted code; .ci/run's run on the compiled build deselects it.
pytestmark = pytest.mark.interpreted

ROWS = PUBLISHED_FIGURES
IDS = [fig.name for fig in ROWS]


def test_enough_rows_with_unique_names() -> None:
    assert len(ROWS) >= 12
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("fig", ROWS, ids=IDS)
def test_row_is_well_formed(fig: PublishedFigure) -> None:
    assert fig.published > 0 and math.isfinite(fig.published)
    assert fig.metric in METRICS
    assert fig.name.strip()
    assert fig.source.strip()
    assert fig.assumptions.strip()
    assert fig.precision.strip()
    assert fig.balancing.strip()
    assert fig.engine.strip()
    assert fig.prompt_len > 0
    for value in (fig.batch_tokens_per_gpu, fig.chunk_size):
        assert value is None or value > 0


@pytest.mark.parametrize("fig", ROWS, ids=IDS)
def test_gpu_count_rule(fig: PublishedFigure) -> None:
    """num_gpus is one instance: attention TP x DP-attention x CP x PP; the MoE reuses a
    stage's GPUs, EP over ep_size of them and tensor-parallel over the rest."""
    for degree in (fig.tp_size, fig.dp_attention, fig.ep_size, fig.cp_size, fig.pp_size):
        assert degree >= 1
    assert fig.num_gpus == fig.tp_size * fig.dp_attention * fig.cp_size * fig.pp_size
    per_stage = fig.num_gpus // fig.pp_size
    assert per_stage % fig.ep_size == 0
    assert fig.moe_tp_size * fig.ep_size * fig.pp_size == fig.num_gpus


@pytest.mark.parametrize("fig", ROWS, ids=IDS)
def test_components_split_a_layer_time(fig: PublishedFigure) -> None:
    if fig.metric != "ms/layer":
        assert fig.components == ()
        return
    assert fig.components
    assert all(ms > 0 for _, ms in fig.components)
    assert len({part for part, _ in fig.components}) == len(fig.components)
    assert sum(ms for _, ms in fig.components) == pytest.approx(fig.published, abs=0.01)


@pytest.mark.parametrize("fig", ROWS, ids=IDS)
def test_every_row_names_a_preset(fig: PublishedFigure) -> None:
    """Every row's model and GPU are presets, so the row can be modelled."""
    assert fig.model in MODELS
    assert fig.gpu in GPUS


def test_the_gb200_bf16_row_is_corrected() -> None:
    (fig,) = [f for f in ROWS if f.gpu == "gb200" and f.published == 18_471]
    assert fig.num_gpus == 4
    assert fig.prompt_len == 2000
    assert fig.metric == "tok/s/gpu"


def test_the_aic_layer_row() -> None:
    (fig,) = [f for f in ROWS if f.metric == "ms/layer"]
    assert (fig.model, fig.gpu, fig.cp_size, fig.tp_size, fig.prompt_len) == (
        "glm-5",
        "b200",
        8,
        1,
        32768,
    )
    assert dict(fig.components)["moe"] == pytest.approx(2.43)
